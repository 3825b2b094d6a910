"""Bounded waits on other ranks (``HPCGNN_TIMEOUT``).

A rank frozen by SIGSTOP, a node stuck in I/O or a dropped link would otherwise
leave the job waiting silently until the batch system's limit.  Every blocking
wait on another rank runs inside :func:`waiting`, which records what is waited
for and from whom; a daemon thread (started on the first wait) ends the job when
a wait passes ``HPCGNN_TIMEOUT`` seconds (default 600), with one line naming the
rank waited for, its state where it is on this host (stopped, gone), and what
was waited for.  MPI calls release the GIL, so the thread runs while the waiting
thread is blocked inside MPI.
"""
from __future__ import annotations

import itertools
import math
import os
import sys
import threading
import time
from contextlib import contextmanager

from . import peers

DEFAULT_TIMEOUT_S = 600.0

_lock = threading.Lock()
_waits: dict[int, tuple[float, str, tuple]] = {}
_thread: threading.Thread | None = None
_keys = itertools.count()


def seconds_from_env(name: str, default: float) -> float:
    """``name`` from the environment (seconds, finite and > 0), or ``default`` when
    unset; a bad value raises ``ValueError`` naming the variable."""
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        limit = float(raw)
    except ValueError:
        limit = float("nan")
    if not (math.isfinite(limit) and limit > 0):
        raise ValueError(f"{name}={raw!r}: expected a positive number of seconds")
    return limit


def timeout_s() -> float:
    """``HPCGNN_TIMEOUT`` or 600 (checked at initialization)."""
    return seconds_from_env("HPCGNN_TIMEOUT", DEFAULT_TIMEOUT_S)


@contextmanager
def waiting(what: str, ranks=()):
    """Run the body as a wait for ``what`` from world ``ranks`` (empty: unknown,
    e.g. a collective): the job ends if it lasts past ``HPCGNN_TIMEOUT``."""
    key = next(_keys)
    with _lock:
        _waits[key] = (time.monotonic(), what, tuple(ranks))
        if _thread is None:
            _start()
    try:
        yield
    finally:
        with _lock:
            _waits.pop(key, None)


def _start() -> None:
    global _thread
    _thread = threading.Thread(target=_watch, name="hpcgnn-watchdog", daemon=True)
    _thread.start()


def _watch() -> None:
    limit = timeout_s()
    while True:
        time.sleep(min(1.0, limit / 20))
        now = time.monotonic()
        with _lock:
            late = [w for w in _waits.values() if now - w[0] > limit]
        if late:
            _end_job(limit, *min(late))


def expired_line(limit: float, what: str, ranks: tuple) -> str:
    """The line a rank prints when its wait for ``what`` from ``ranks`` passed ``limit``:
    the ranks that did not answer first (those of this host found stopped or gone)."""
    suspects = peers.troubled(ranks or None)
    tail = f"; ending the job (HPCGNN_TIMEOUT={limit:g})"
    if suspects or ranks:
        whom = "; ".join(peers.describe(r) for r in (suspects or ranks))
        return f"hpcgnn: {whom} did not answer within {limit:.0f} s ({peers.me()} waited for {what}){tail}"
    return (f"hpcgnn: {peers.me()} waited {limit:.0f} s for {what}; no rank on this host is stopped or gone, "
            f"so the one that did not answer is on another host{tail}")


def _end_job(limit: float, started: float, what: str, ranks: tuple) -> None:
    line = expired_line(limit, what, ranks)
    try:
        err = sys.__stderr__ or sys.stderr
        err.write(line + "\n")
        err.flush()
    except Exception:  # noqa: BLE001 - the exit below is what matters
        pass
    time.sleep(0.5)               # let the launcher forward the line before the job is torn down
    os._exit(1)                   # the launcher then ends every other rank
