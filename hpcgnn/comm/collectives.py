"""Named collectives for what ranks agree on: a sum, the largest or smallest value,
flags any rank raised, the same value everywhere.  Each holds :data:`~.mpi.LOCK`
(other threads of the process may be in MPI) and waits at most ``HPCGNN_TIMEOUT``
(:mod:`.watchdog`: a rank that never arrives is named, the job ends), so code
outside :mod:`hpcgnn.comm` never calls MPI's reductions itself."""
from __future__ import annotations

import contextlib
import time

import numpy as np

from . import watchdog
from .mpi import LOCK, MPI

_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "bor": MPI.BOR}


def members(comm) -> tuple:
    """Local: the world ranks of ``comm``."""
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return tuple(int(r) for r in MPI.Group.Translate_ranks(group, list(range(comm.Get_size())), world))
    finally:
        group.Free()
        world.Free()


@contextlib.contextmanager
def collective(comm, what: str = "the other ranks to reach the same collective step"):
    """Collective calls inside the block hold the lock and are watched (``what`` is
    what a timeout says the ranks were waiting for)."""
    with LOCK, watchdog.waiting(what, among=members(comm)):
        yield


@contextlib.contextmanager
def exclusive():
    """Hold the MPI lock for a block of collective I/O: other threads of the process
    may be in MPI (a prefetch thread reading windows), and parallel HDF5 calls MPI
    underneath.  Not watched: the block's own collectives bound their waits."""
    with LOCK:
        yield


def allreduce(comm, values, op: str = "sum", dtype=np.float64) -> np.ndarray:
    """Collective: ``values`` (numbers) reduced elementwise over ``comm`` with ``op``
    (``sum``, ``max``, ``min``), as ``dtype``."""
    a = np.ascontiguousarray(values, dtype=dtype)
    out = np.empty_like(a)
    with collective(comm):
        comm.Allreduce(a, out, op=_OPS[op])
    return out


def _int(comm, value: int, op: str) -> int:
    buf = np.array([int(value)], dtype=np.int64)
    with collective(comm):
        comm.Allreduce(MPI.IN_PLACE, buf, op=_OPS[op])
    return int(buf[0])


def all_sum(comm, value: int) -> int:
    """Collective: the sum of an integer over ``comm``."""
    return _int(comm, value, "sum")


def all_max(comm, value: int) -> int:
    """Collective: the largest integer over ``comm``."""
    return _int(comm, value, "max")


def all_min(comm, value: int) -> int:
    """Collective: the smallest integer over ``comm``."""
    return _int(comm, value, "min")


def any_flags(comm, flags: int) -> int:
    """Collective: the bits any rank of ``comm`` set."""
    return _int(comm, flags, "bor")


def every(comm, ok: bool) -> bool:
    """Collective: True when ``ok`` holds on every rank of ``comm``."""
    return bool(_int(comm, 1 if ok else 0, "min"))


def allgather(comm, obj) -> list:
    """Collective: every rank's ``obj`` (picklable), in rank order."""
    with collective(comm):
        return comm.allgather(obj)


def barrier(comm) -> None:
    """Collective: wait for every rank of ``comm``."""
    with collective(comm, "the other ranks to reach the same barrier"):
        comm.Barrier()


def bcast(comm, obj, root: int = 0):
    """Collective: rank ``root``'s ``obj`` (picklable) on every rank of ``comm``."""
    with collective(comm):
        return comm.bcast(obj, root=root)


def sleep_until_all(comm, poll_s: float = 0.02) -> None:
    """Collective: wait for every rank of ``comm`` sleeping between looks instead of
    spinning in MPI (a rank that waits long leaves the cores to those still working;
    the lock is held only for each look, so other threads may use MPI meanwhile)."""
    with LOCK:
        req = comm.Ibarrier()
    while True:
        with LOCK:
            if req.Test():
                return
        time.sleep(poll_s)
