"""Stop requests from the batch system: SIGUSR1 (SLURM's ``--signal=USR1@T``) and
SIGTERM (``scancel``, time limit).

:func:`install` (called by :func:`hpcgnn.initialize` on every rank) replaces the
default action of both signals, which is to kill the process, by recording that a
stop was asked for.  Server and sampler ranks keep serving; trainers check at a
step boundary (hpcgnn's loop in one collective with its other step flags; a loop of
your own with :func:`agreed_stop`), checkpoint and end cleanly, and then the
servers are released as usual.  Nothing happens inside the handler but setting a
flag, so a signal never interrupts an MPI call half way.
"""
from __future__ import annotations

import atexit
import os
import signal
import threading

from . import watchdog
from .collectives import all_max
from .mpi import LOCK

_requested = threading.Event()
_received: list[int] = []


def _handler(signum, frame):
    _received.append(signum)
    _requested.set()
    if signum == signal.SIGTERM:    # maybe the launcher tearing the job down: see watchdog.terminating
        watchdog.terminating.set()


_installed: set = set()


def install(signals=(signal.SIGUSR1, signal.SIGTERM)) -> None:
    """Independent: record these signals instead of dying from them (main thread only).
    Once the process is ending (its last exit hook) they are ignored: Python restores
    their default action, death, when it shuts down, and a stop request that comes
    after the work is done must not turn a finished job into a failed one."""
    if threading.current_thread() is not threading.main_thread() \
            or os.environ.get("HPCGNN_SIGNALS", "1").strip() == "0":     # the signals' own actions stay
        return
    if not _installed:
        atexit.register(_ignore_at_exit)    # registered first, so it runs last
        watchdog.read_signals()   # Python runs _handler only once the main thread is back from MPI
    for s in signals:
        signal.signal(s, _handler)
        _installed.add(s)


def _ignore_at_exit() -> None:
    for s in _installed:
        try:
            signal.signal(s, signal.SIG_IGN)
        except (ValueError, OSError):      # not the main thread, or a signal we may not set
            pass


def requested() -> bool:
    """Whether this rank received a stop signal."""
    return _requested.is_set()


def received() -> list[str]:
    return [signal.Signals(s).name for s in _received]


def agreed_stop(comm) -> bool:
    """Collective over ``comm``: whether any rank of it received a stop signal (so
    all stop at the same step)."""
    with LOCK:
        return bool(all_max(comm, int(_requested.is_set())))


def clear() -> None:
    _requested.clear()
    _received.clear()
    watchdog.terminating.clear()
