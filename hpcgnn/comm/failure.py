"""Any uncaught exception on any rank ends the whole job, loudly.

Installed when :mod:`hpcgnn` is imported.  The hook prints one line::

    hpcgnn: rank R/N (role, node K, host H): ExcType: message

then (except for hpcgnn's own errors, or with HPCGNN_DEBUG=1) the traceback of
that rank, and calls ``MPI.COMM_WORLD.Abort(1)`` so that no
other rank is left waiting in a collective.  In a single process it exits 1.
The role and node shown are filled in by :func:`hpcgnn.initialize`.
"""
import ctypes
import os
import signal
import socket
import sys
import threading
import time
import traceback

from ..errors import HpcgnnError, PeerFailed
from . import lastwords, peers, watchdog
from .progress import IdleBackoff


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


#: How a lost peer shows in the survivor's exception (gloo, MPI, sockets).
LOST_PEER = ("connection reset by peer", "connection closed by peer", "broken pipe", "connection refused",
             "timed out waiting", "socket timeout", "mpi_err_proc_failed", "no route to host")


def lost_peer(exc) -> bool:
    """Whether ``exc`` is what a rank sees when another rank disappeared."""
    try:
        text = str(exc).lower()
    except Exception:  # noqa: BLE001
        return False
    return any(w in text for w in LOST_PEER)


def _blame_line(exc_type, exc, line: str) -> tuple[str, bool]:
    """For a lost peer: the line naming the rank that failed first (found on this
    host), and whether it was found; else ``line`` with a pointer."""
    gone = peers.troubled()
    short = str(exc).strip().replace("\n", " | ")[:240]
    if gone:
        who = "; ".join(peers.describe(r) for r in gone)
        return f"hpcgnn: {who}: {peers.me()} lost its connection ({exc_type.__name__}: {short})", True
    return line + " (another rank ended or cannot be reached; the ranks on its host name it)", False


def abort_job(exc_type, exc, tb, code: int = 1) -> None:
    """Print the failure line (and, except for hpcgnn's own errors, the traceback),
    then end the whole job."""
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
    secondary = named = False
    woke = watchdog.stopped_line()
    if woke and (isinstance(exc, PeerFailed) or lost_peer(exc)):   # its peers left because it was stopped
        line, secondary, named = woke, True, True
        lastwords.cancel()
    elif isinstance(exc, PeerFailed):       # the failed rank is named in the message: it goes first
        line, secondary, named = f"hpcgnn: {exc}", True, True
    elif lost_peer(exc):
        secondary = True
        try:
            line, named = _blame_line(exc_type, exc, line)
        except Exception:  # noqa: BLE001 - never let the naming hide the failure
            pass
    err = sys.__stderr__ or sys.stderr
    texts = [lambda: line + "\n"]
    if not (isinstance(exc, HpcgnnError) or secondary) or os.environ.get("HPCGNN_DEBUG", "0") != "0":
        # hpcgnn's own errors say what and where in their line; HPCGNN_DEBUG=1 adds the traceback
        texts.append(lambda: "".join(traceback.format_exception(exc_type, exc, tb)))
    for text in texts:
        try:
            err.write(text())
            err.flush()
        except Exception:
            pass
    lastwords.say()         # a trainer writes the step it holds (when armed)
    _term_ends_process()
    mod, rank, size = _rank_size()
    if mod is not None and size > 1:
        # give the launcher's output forwarding a moment to carry the lines above
        # before Abort tears the job down (they were lost without it); a survivor
        # that could not name the lost rank waits longer, for its host-mates to; one
        # that named it waits for the launcher, already ending the job for the rank
        # gone, so that no "MPI_ABORT was invoked on rank <survivor>" blames it
        time.sleep(0.5 if not secondary else 3.0)
        mod.COMM_WORLD.Abort(code)
    os._exit(code)


def _term_ends_process() -> None:
    """Give SIGTERM its default action (death) again where one of hpcgnn's handlers
    holds it, at the C level and from any thread: the launcher's SIGTERM must end a
    rank that is ending the job, while its main thread waits in ``MPI_Abort`` or in
    the sleep before it, where the Python handler (a stop request) would never run
    and the rank would linger until SIGKILL (Slurm's KillWait, 30 s by default)."""
    try:
        if not getattr(signal.getsignal(signal.SIGTERM), "__module__", "").startswith("hpcgnn."):
            return                   # the default, or the user's (HPCGNN_SIGNALS=0): left alone
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            return
        libc = ctypes.CDLL(None)      # signal.signal() is for the main thread only
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(int(signal.SIGTERM), None)       # None: SIG_DFL
    except Exception:  # noqa: BLE001 - never let this hide the failure being reported
        pass


#: How long a rank that finished waits for the rest of its group at the end
#: (``HPCGNN_FINISH_TIMEOUT`` seconds, else ``HPCGNN_TIMEOUT``) before it ends the job.
FINISH_TIMEOUT_S = 600.0


class FinishTimeout(TimeoutError):
    """Ranks that finished waited too long for the others (see :func:`finish_barrier`)."""


def finish_timeout_s() -> float:
    """``HPCGNN_FINISH_TIMEOUT`` (seconds, finite and > 0), else ``HPCGNN_TIMEOUT``,
    else 600; a bad value raises ``ValueError`` naming the variable (checked at
    initialization)."""
    return watchdog.seconds_from_env("HPCGNN_FINISH_TIMEOUT", watchdog.timeout_s() if
                                     os.environ.get("HPCGNN_TIMEOUT") else FINISH_TIMEOUT_S)


def finish_barrier(comm, what: str, timeout_s: float | None = None) -> None:
    """Collective over ``comm``: the barrier at the end of a job, with a deadline.

    A rank that ends its script (a return, a ``sys.exit``) while another rank of
    ``comm`` still waits for it in a collective would otherwise wait here for ever,
    and the other rank with it.  It waits, keeping MPI progressing for one-sided
    traffic as servers do, says so after a minute, and after ``timeout_s`` (default
    ``HPCGNN_FINISH_TIMEOUT`` or 600 s) ends the whole job with :func:`abort_job`."""
    if comm.Get_size() == 1:
        return
    limit = finish_timeout_s() if timeout_s is None else timeout_s
    req = comm.Ibarrier()
    t0 = time.monotonic()
    told = False
    wait = IdleBackoff(max_s=2e-3)
    try:
        while not req.Test():
            waited = time.monotonic() - t0
            if waited > limit:
                stuck = "; ".join(peers.describe(r) for r in peers.troubled()) or \
                    "one of them is probably waiting for a rank that ended early"
                exc = FinishTimeout(f"{what}: this rank finished, but the rest of its group did not reach the end "
                                    f"within {limit:.0f} s ({stuck}); ending the job. HPCGNN_FINISH_TIMEOUT "
                                    "(default: HPCGNN_TIMEOUT) sets the wait.")
                abort_job(FinishTimeout, exc, None)
            if not told and waited > min(60.0, limit / 2):
                told = True
                _, rank, _ = _rank_size()
                sys.stderr.write(f"hpcgnn: rank {rank}: {what}: waiting for the other ranks to finish; the job "
                                 f"ends in {limit - waited:.0f} s if they do not (HPCGNN_FINISH_TIMEOUT)\n")
                sys.stderr.flush()
            wait(False)
    finally:
        wait.close()


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
    """Install the abort-on-exception hooks (idempotent; process-wide).
    ``HPCGNN_EXCEPTHOOK=0``: Python's own hooks stay (an uncaught error on one rank
    then leaves the others waiting until ``HPCGNN_TIMEOUT`` or the launcher)."""
    global _installed
    if _installed or os.environ.get("HPCGNN_EXCEPTHOOK", "1").strip() == "0":
        return
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
    _installed = True
