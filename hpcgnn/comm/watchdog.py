"""Bounded waits on other ranks (``HPCGNN_TIMEOUT``).

A rank frozen by SIGSTOP, a node stuck in I/O or a dropped link would otherwise
leave the job waiting silently until the batch system's limit.  Every blocking
wait on another rank runs inside :func:`waiting`, which records what is waited
for and from whom; a daemon thread (started on the first wait) ends the job when
a wait passes ``HPCGNN_TIMEOUT`` seconds (default 600), with one line naming the
rank waited for, its state where it is on this host (stopped, gone), and what
was waited for; a wait on a rank of this host whose process is gone ends it at
once (within :data:`TICK_S`), naming that rank, before the launcher tears the job
down with a line of its own that names no role.
A collective ends once a member has been gone :data:`COLLECTIVE_GRACE_S`, at once
while last words are armed (a trainer's steps).  Before the process ends, its
last words (:mod:`.lastwords`) run.
MPI calls release the GIL, so the thread runs while the waiting thread is blocked
inside MPI; h5py's collective calls do not.  A :func:`watching` phase (a command)
is therefore looked after by a compiled thread that needs no GIL: it names a gone
peer of this host, and the SIGTERM with which the launcher begins tearing the job
down wakes it at once (through Python's signal wake-up descriptor), so a peer
already gone is named then instead of the rank dying unnamed; with no peer gone
the rank ends as SIGTERM's default would (``scancel``).  Outside a phase SIGTERM is a
stop request (:mod:`.signals`), and a rank that receives it while waiting names a
rank of this host whose process is gone (:data:`terminating`).
"""
from __future__ import annotations

import itertools
import math
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

from .. import _ext
from . import lastwords, peers

DEFAULT_TIMEOUT_S = 600.0

_lock = threading.Lock()
#: key -> (start, "wait" or "phase", what, ranks waited for, members of a collective or None)
_waits: dict[int, tuple] = {}
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


def waiting(what: str, ranks=(), among=None, gone_ok: bool = False):
    """Run the body as a wait for ``what`` from world ``ranks`` (empty: unknown,
    e.g. a collective, whose members are ``among`` when known): the job ends if it
    lasts past ``HPCGNN_TIMEOUT``, or at once when a rank waited for is gone --
    unless ``gone_ok``: the body itself looks for a gone rank and does without it
    (a trainer makes a dead sampler's batches), so only the time limit applies."""
    kind = "wait-gone-ok" if gone_ok else "wait"
    return _registered(_waits, (kind, what, tuple(ranks), None if among is None else tuple(among)))


def watching(what: str):
    """Run the body as a phase of the job (``hpcgnn partition``, ``generate``...) in
    which no rank may leave: a rank of this host whose process is gone ends the job
    with one line naming it and ``what`` this rank was doing (the launcher's own line
    names no role).  No time limit (a phase may take hours).  The looking is done by
    a compiled thread (:func:`hpcgnn._ext.guard_arm`) that needs no GIL: h5py holds
    the GIL inside its collective calls, where a rank waits for the others."""
    return _phase(what)


@contextmanager
def _phase(what: str):
    global _guarded
    outer = not _guarded
    if outer:
        wake = _wake_on_term()
        mates = peers.host_mates()
        lines = [(gone_line(r, what, phase=True, as_state="gone") + "\n").encode() for r in mates]
        try:
            _ext.guard_arm(list(mates.values()), lines, -1 if wake is None else wake[0], TICK_S, STOPPED_S,
                           LINGER_S, f"hpcgnn: {peers.me()} was stopped for ".encode(), (STOPPED_TAIL + "\n").encode())
        except BaseException:
            _sleep_on_term(wake)
            raise
        _guarded = True
    try:
        with _registered(_waits, ("phase", what, (), None)):
            yield
    finally:
        if outer:
            _ext.guard_disarm()
            _guarded = False
            _sleep_on_term(wake)


_guarded = False    # a phase's compiled thread looks for gone ranks (this one does not)


def _term(signum, frame) -> None:
    """SIGTERM during a phase, on the main thread: the compiled thread (woken by the
    same signal) either names a gone peer or ends this rank; nothing to do here."""


def _wake_on_term() -> tuple[int, int] | None:
    """Main thread, SIGTERM at its default: catch it, and have every signal write its
    number to a pipe (returned: read end, write end) the compiled thread waits on;
    None where SIGTERM or the wake-up descriptor is already someone else's (an
    asyncio loop's, initialize's stop requests)."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None
    wake = _wakeup_pipe(blocking_read=True)
    if wake is not None:
        signal.signal(signal.SIGTERM, _term)
    return wake


def _wakeup_pipe(blocking_read: bool) -> tuple[int, int] | None:
    """Main thread: a pipe (read end, write end) to which every caught signal writes
    its number (Python's wake-up descriptor), or None where that descriptor is already
    someone else's (an asyncio loop's), which is left in place."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    os.set_blocking(r, blocking_read)
    old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    if old != -1:                                        # not ours to take: put it back
        signal.set_wakeup_fd(old)
        os.close(r)
        os.close(w)
        return None
    return r, w


def _sleep_on_term(wake: tuple[int, int] | None) -> None:
    """Undo :func:`_wake_on_term` after the phase: SIGTERM at its default again."""
    if wake is not None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        for fd in wake:
            os.close(fd)


@contextmanager
def _registered(table: dict, entry: tuple):
    """The body's time in ``table`` (the watchdog thread looks at it)."""
    key = next(_keys)
    with _lock:
        table[key] = (time.monotonic(), *entry)
        if _thread is None:
            _start()
    try:
        yield
    finally:
        with _lock:
            table.pop(key, None)


def _start() -> None:
    global _thread, _last_look
    _last_look = time.monotonic()
    _thread = threading.Thread(target=_watch, name="hpcgnn-watchdog", daemon=True)
    _thread.start()


#: how often the waits are looked at: a rank waited for whose process is gone (on
#: this host) ends the job within this, named, before the launcher tears it down
TICK_S = 0.2
#: a collective wait looks for gone ranks once it has lasted this long
COLLECTIVE_GRACE_S = 2.0


#: set on SIGTERM (by :mod:`.signals`, which records it as a stop request): a launcher
#: that lost a rank sends it to the others before SIGKILL (mpirun 1 s later by default),
#: so a rank then waiting (a trainer at a barrier for another trainer, which is ending the
#: job itself) names a gone rank of this host at once instead of dying unnamed
terminating = threading.Event()

_signal_fd: int | None = None       # the signal wake-up pipe's read end (signals.install)


def read_signals() -> None:
    """Main thread: the watchdog thread learns of SIGTERM from the signal wake-up pipe
    even while the main thread, which runs Python's handlers, is inside a blocking call
    (not where the wake-up descriptor is already someone else's)."""
    global _signal_fd
    wake = _wakeup_pipe(blocking_read=False)
    if wake is not None:
        _signal_fd = wake[0]


def _terminating() -> bool:
    if _signal_fd is not None:
        try:
            if int(signal.SIGTERM) in os.read(_signal_fd, 512):
                terminating.set()
        except OSError:                 # nothing written (non-blocking), or closed
            pass
    return terminating.is_set()


#: a gap this long between two looks means this process itself was stopped
STOPPED_S = 5.0
#: how long a rank ending the job waits for the launcher to forward its line
LINGER_S = 0.5
_last_look: float | None = None     # when the thread last looked
_stopped_for = 0.0                  # the longest such gap seen


def stopped_for() -> float:
    """Seconds this process was stopped (SIGSTOP, a debugger, a node stuck), as
    seen by the watchdog thread's looks: 0.0 when it never was.  A rank woken
    after the job ended without it finds its peers gone: it says this instead
    of blaming them."""
    gap = time.monotonic() - _last_look if _last_look is not None else 0.0
    return max(_stopped_for, gap if gap > STOPPED_S else 0.0)


def _watch() -> None:
    global _last_look, _stopped_for
    limit = timeout_s()
    while True:
        time.sleep(min(TICK_S, limit / 20))
        now = time.monotonic()
        if _last_look is not None and now - _last_look > STOPPED_S:
            _stopped_for = max(_stopped_for, now - _last_look)
        _last_look = now
        with _lock:
            waits = list(_waits.values())
        late = [w for w in waits if w[1] != "phase" and now - w[0] > limit]
        if late:
            t, _, what, ranks, _ = min(late)
            _end_job(limit, t, what, ranks)
        _look_on_term(limit, waits)
        for t, kind, what, ranks, among in waits:
            if kind == "wait-gone-ok" or _guarded:     # in a phase, the compiled thread looks
                gone = None
            elif ranks:                         # named ranks: one gone never answers
                gone = gone_among(ranks)
            elif kind == "phase" or lastwords.is_armed() or now - t > COLLECTIVE_GRACE_S:
                # a collective: ranks leave at a job's end, but never while a trainer's steps run
                gone = gone_among(among or ())
            else:
                gone = None
            if gone is not None:
                _end_job(limit, t, what, ranks, line=gone_line(gone, what, phase=kind == "phase"))


def _look_on_term(limit: float, waits: list) -> None:
    """After SIGTERM, a rank in a wait (not a phase, which the compiled thread looks
    after, nor one that does without a gone rank) ends the job naming a rank of this
    host whose process is gone, whoever it waited for."""
    waits = [w for w in waits if w[1] == "wait"]
    if not _terminating() or not waits or _guarded:
        return
    gone = gone_among(())
    if gone is not None:
        t, _, what, ranks, _ = min(waits)
        _end_job(limit, t, what, ranks, line=gone_line(gone, what))


def gone_among(ranks: tuple) -> int | None:
    """The lowest of ``ranks`` (empty: any rank of the job) on this host whose process
    is gone, else None."""
    me = peers.my_rank()
    for r in sorted(ranks) if ranks else sorted(peers.TABLE):
        if r != me and peers.state(r) == "gone":
            return r
    return None


def gone_line(rank: int, what: str, phase: bool = False, as_state: str | None = None) -> str:
    """The line of a rank whose wait for ``what`` (or ``phase``: whose phase ``what``)
    can never end: ``rank`` is gone (``as_state``: see :func:`peers.describe`)."""
    doing = f"was in {what}" if phase else f"was waiting for {what}"
    return f"hpcgnn: {peers.describe(rank, as_state)} ({peers.me()} {doing}); ending the job"


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


def stopped_line() -> str | None:
    """The line of a rank that was stopped and woke into a job that ended (None
    when it was not): its peers are gone because of it, not the other way round."""
    gap = stopped_for()
    if not gap:
        return None
    return f"hpcgnn: {peers.me()} was stopped for {gap:.0f}{STOPPED_TAIL}"


STOPPED_TAIL = (" s (SIGSTOP, a debugger, a node stuck); the job ended meanwhile (the line naming it came "
                "from the ranks that waited for it)")


def _end_job(limit: float, started: float, what: str, ranks: tuple, line: str | None = None) -> None:
    if not _ext.guard_claim():    # a phase's compiled thread is ending the job, with its own line
        while True:
            time.sleep(60)
    woke = stopped_line()
    if woke:
        lastwords.cancel()        # the others saved the step; this rank's is no newer
    line = woke or line or expired_line(limit, what, ranks)
    try:
        err = sys.__stderr__ or sys.stderr
        err.write(line + "\n")
        err.flush()
    except Exception:  # noqa: BLE001 - the exit below is what matters
        pass
    lastwords.say()               # a trainer writes the step it holds
    time.sleep(LINGER_S)          # let the launcher forward the line before the job is torn down
    os._exit(1)                   # the launcher then ends every other rank
