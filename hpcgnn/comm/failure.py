"""Any uncaught exception on any rank ends the whole job, loudly.

Installed when :mod:`hpcgnn` is imported.  The hook prints one line::

    hpcgnn: rank R/N (role, node K, host H): ExcType: message

then the traceback of that rank, and calls ``MPI.COMM_WORLD.Abort(1)`` so that no
other rank is left waiting in a collective.  In a single process it exits 1.
The role and node shown are filled in by :func:`hpcgnn.initialize`.
"""
import os
import socket
import sys
import threading
import time
import traceback


class _Identity:
    """What the failure line says about this process (updated by initialize)."""

    role = "no role"
    node = "?"


identity = _Identity()
_installed = False


def _rank_size():
    mod = sys.modules.get("mpi4py.MPI")
    if mod is None or not mod.Is_initialized() or mod.Is_finalized():
        return None, None, None
    w = mod.COMM_WORLD
    return mod, w.Get_rank(), w.Get_size()


def failure_line(exc_type, exc) -> str:
    """The one-line summary printed for an exception on this rank."""
    _, rank, size = _rank_size()
    where = f"rank {rank}/{size}" if rank is not None else f"pid {os.getpid()}"
    msg = str(exc).strip().replace("\n", " | ")
    return (f"hpcgnn: {where} ({identity.role}, node {identity.node}, host {socket.gethostname()}): "
            f"{exc_type.__name__}: {msg}")


def abort_job(exc_type, exc, tb, code: int = 1) -> None:
    """Print the failure line and traceback, then end the whole job."""
    try:
        sys.stdout.flush()
    except Exception:
        pass
    try:
        line = failure_line(exc_type, exc)
    except Exception:                       # never let the summary hide the traceback
        line = f"hpcgnn: pid {os.getpid()}: {getattr(exc_type, '__name__', exc_type)}"
    # The process's real stderr: torch.distributed's excepthook calls this one with
    # sys.stderr swapped for a buffer it prints only after we return (we never do).
    err = sys.__stderr__ or sys.stderr
    for text in (lambda: line + "\n", lambda: "".join(traceback.format_exception(exc_type, exc, tb))):
        try:
            err.write(text())
            err.flush()
        except Exception:
            pass
    mod, rank, size = _rank_size()
    if mod is not None and size > 1:
        # give the launcher's output forwarding a moment to carry the lines above
        # before Abort tears the job down (they were lost without it)
        time.sleep(0.5)
        mod.COMM_WORLD.Abort(code)
    os._exit(code)


def _excepthook(exc_type, exc, tb):
    if issubclass(exc_type, KeyboardInterrupt) and _rank_size()[2] in (None, 1):
        sys.__excepthook__(exc_type, exc, tb)
        return
    abort_job(exc_type, exc, tb)


def _thread_excepthook(args):
    if args.exc_type is SystemExit:
        return
    abort_job(args.exc_type, args.exc_value, args.exc_traceback)


def install() -> None:
    """Install the abort-on-exception hooks (idempotent; process-wide)."""
    global _installed
    if _installed:
        return
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
    _installed = True
