"""The one place that imports ``mpi4py.MPI``.

hpcgnn initialises MPI at a thread level below ``MPI_THREAD_MULTIPLE`` by default:
Open MPI's TCP one-sided component (osc pt2pt) refuses windows under
``MPI_THREAD_MULTIPLE``.  Each rank keeps its MPI calls on one thread at a time
(``serialized``).  Override with ``HPCGNN_THREAD_LEVEL`` (single, funneled,
serialized, multiple) before importing hpcgnn.

:data:`LOCK` keeps that promise when hpcgnn itself runs MPI on a second thread (a
data loader's prefetch thread): every one-sided table operation holds it.  A user
who calls mpi4py from the main thread while such a loader iterates holds it too
(``with hpcgnn.comm.mpi.LOCK: ...``).
"""
import functools
import os
import sys
import threading

if "mpi4py.MPI" not in sys.modules:
    import mpi4py

    _level = os.environ.get("HPCGNN_THREAD_LEVEL", "serialized").strip().lower()
    if _level not in ("single", "funneled", "serialized", "multiple"):
        # a typo would give MPI_THREAD_MULTIPLE, under which TCP windows fail later
        raise ValueError(f"HPCGNN_THREAD_LEVEL={_level!r}: choose single, funneled, serialized or multiple")
    mpi4py.rc.thread_level = _level

from mpi4py import MPI  # noqa: E402

THREAD_LEVEL_NAMES = {
    MPI.THREAD_SINGLE: "single",
    MPI.THREAD_FUNNELED: "funneled",
    MPI.THREAD_SERIALIZED: "serialized",
    MPI.THREAD_MULTIPLE: "multiple",
}


#: Held around every MPI call hpcgnn may make from more than one thread.
LOCK = threading.RLock()


def serialized(fn):
    """Decorator: run ``fn`` holding :data:`LOCK`."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with LOCK:
            return fn(*args, **kwargs)
    return wrapper


def world():
    """``MPI.COMM_WORLD`` (for entry points only; library code takes a communicator)."""
    return MPI.COMM_WORLD


def thread_level() -> str:
    """The thread level MPI actually provides (independent)."""
    return THREAD_LEVEL_NAMES.get(MPI.Query_thread(), str(MPI.Query_thread()))


def library_version() -> str:
    """First line of the MPI library's version string (independent)."""
    return MPI.Get_library_version().strip("\x00 \n").splitlines()[0].rstrip("\x00 ")


__all__ = ["MPI", "LOCK", "serialized", "world", "thread_level", "library_version"]
