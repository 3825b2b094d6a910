"""``initialize`` and ``exit_client`` with DGL's arguments.

DGL's ``initialize(ip_config, ...)`` names a file of host addresses and tuning
options for its RPC layer; hpcgnn's hosts come from the launch (``mpirun``/``srun``)
and its roles from a layout, so those arguments are accepted and ignored, with one
note on trainer 0.  A process started alone (one rank, no layout given) runs as
DGL's standalone mode does: it is the one trainer and holds the whole graph itself
(layout :data:`STANDALONE`).
"""
from __future__ import annotations

import os

from .. import logs
from ..errors import InputError
from ..comm.context import current_context
from ..comm.mpi import MPI
from ..runtime import initialize as _initialize

log = logs.get("distributed")

#: The layout of a process started alone (DGL's standalone mode: no servers, the one
#: trainer holds every partition).
STANDALONE = "servers=0,samplers=0,trainers=1"

#: DGL's options of ``initialize`` that have no meaning under an MPI launch.
DGL_OPTIONS = ("num_servers", "num_workers", "max_queue_size", "net_type", "num_worker_threads", "use_graphbolt")


def initialize(ip_config=None, *, layout=None, ranks_per_node=None, part_config: str | None = None,
               graph_name: str | None = None, serve: bool = True, comm=None, num_servers=None, num_workers=None,
               max_queue_size=None, net_type=None, num_worker_threads=None, use_graphbolt=None):
    """DGL's ``dgl.distributed.initialize(ip_config)``: :func:`hpcgnn.initialize`.

    Collective over ``comm`` (default ``MPI.COMM_WORLD``), as :func:`hpcgnn.initialize`,
    whose keyword arguments it takes (``layout=``, ``ranks_per_node=``,
    ``part_config=``, ...).  ``ip_config`` (DGL's cluster file) and DGL's options
    (``num_servers``, ``num_workers``, ``net_type``, ...) are ignored: hosts come from
    ``mpirun``/``srun``, the roles from ``layout`` (sampler ranks there play DGL's
    ``num_workers``).  Trainer 0 logs one line naming what was ignored.  Server and
    sampler ranks serve here and exit when the trainers finish (as DGL's servers,
    started by its launcher, do); trainers get the :class:`~hpcgnn.Context`.  On one
    rank with no layout (neither ``layout=`` nor ``HPCGNN_LAYOUT``), the layout is
    :data:`STANDALONE`, DGL's standalone mode (``python train.py --standalone``).
    """
    if isinstance(ip_config, str) and layout is None and "=" in ip_config and not os.path.isfile(ip_config):
        raise InputError(f"hpcgnn.distributed.initialize: the first argument is DGL's ip_config file, which is "
                         f"ignored; {ip_config!r} looks like a role layout: pass it as layout={ip_config!r}")
    given = {k: v for k, v in zip(DGL_OPTIONS, (num_servers, num_workers, max_queue_size, net_type,
                                                num_worker_threads, use_graphbolt)) if v is not None}
    if layout is None and not os.environ.get("HPCGNN_LAYOUT") and (comm or MPI.COMM_WORLD).Get_size() == 1:
        layout = STANDALONE
    ctx = _initialize(layout, ranks_per_node, part_config, graph_name=graph_name, serve=serve, comm=comm)
    ignored = ([f"ip_config={ip_config!r}"] if ip_config is not None else []) + \
        [f"{k}={v!r}" for k, v in given.items()]
    if ignored and ctx.is_trainer and ctx.trainer_comm.Get_rank() == 0:
        log.warning("hpcgnn.distributed.initialize: ignoring DGL's %s (hosts come from mpirun/srun, "
                    "roles from layout=%r)", ", ".join(ignored), str(ctx.layout))
    return ctx


def exit_client() -> None:
    """DGL's ``exit_client()``: collective over the world (the trainers here, the
    servers and samplers in their serving loop): finalize the current context,
    which releases the servers.  Nothing to do without one (or when done already);
    a script that omits it is finalized at exit anyway."""
    ctx = current_context()
    if ctx is not None and not ctx.finalized:
        ctx.finalize()
