"""``torch.distributed`` over the trainers, bootstrapped from MPI.

No ``MASTER_ADDR``/``MASTER_PORT`` for the user to pick and no ip_config file:
trainer 0 opens a ``TCPStore`` on a free port of its own host (the OS picks it),
and MPI broadcasts the address to the other trainers, which then join the
process group.  The backend is NCCL when CUDA is available, else gloo.

``HPCGNN_DIST_ADDR`` overrides the address trainer 0 advertises (default: the
address its hostname resolves to), for clusters whose hostnames resolve to an
interface the compute nodes cannot reach.
"""
from __future__ import annotations

import datetime
import os
import socket

from .agree import agreed


def _advertised_address() -> str:
    addr = os.environ.get("HPCGNN_DIST_ADDR")
    if addr:
        return addr
    host = socket.gethostname()
    try:
        return socket.gethostbyname(host)
    except OSError:
        return "127.0.0.1"


def init_process_group(ctx, backend: str | None = None, timeout_s: float = 1800.0):
    """Collective over the trainers: start ``torch.distributed`` with one rank per
    trainer (rank = rank in ``ctx.trainer_comm``).  Returns the backend used.
    Already initialised: returns the backend in use."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.get_backend()
    tc = ctx.trainer_comm
    if tc is None:
        raise RuntimeError(f"init_process_group: rank {ctx.rank} is a {ctx.role}; only trainers join")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    rank, size = tc.Get_rank(), tc.Get_size()
    store, where = None, None
    with agreed(tc):
        if rank == 0:
            host = _advertised_address()
            store = dist.TCPStore(host, 0, size, is_master=True, timeout=timeout, wait_for_workers=False)
            where = (host, store.port)
    host, port = tc.bcast(where, root=0)
    with agreed(tc):
        if rank != 0:
            store = dist.TCPStore(host, port, size, is_master=False, timeout=timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=timeout)
    ctx.on_finalize(_destroy)
    return backend


def export_env(ctx) -> None:
    """Collective over the trainers: set ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``
    and ``WORLD_SIZE`` (trainer rank and count) in each trainer's environment, so
    that a script's plain ``torch.distributed.init_process_group("gloo")`` (DGL's
    launcher sets them the same way) joins the trainers.  Values already there are
    replaced (a job started from another job's rank inherits that job's); with
    ``HPCGNN_TORCH_ENV=0`` on any trainer nothing is set on any of them."""
    from .mpi import MPI

    tc = ctx.trainer_comm
    where = None
    if tc.Get_rank() == 0:
        host = _advertised_address()
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("", 0))               # a port free now (torch binds it when asked)
                where = (host, s.getsockname()[1])
        except OSError:
            where = None
    where = tc.bcast(where, root=0)
    off = tc.allreduce(int(os.environ.get("HPCGNN_TORCH_ENV", "1").strip() == "0"), op=MPI.MAX)
    if where is None or off:                  # the same decision on every trainer
        return
    os.environ.update(RANK=str(tc.Get_rank()), WORLD_SIZE=str(tc.Get_size()),
                      MASTER_ADDR=where[0], MASTER_PORT=str(where[1]))


def _destroy():
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
