"""What a rank does on its way out when another rank's death ends the job.

A trainer holds the model and optimizer state of the step it reached; when a
peer dies (a gloo connection reset, a collective whose member is gone, a wait
past ``HPCGNN_TIMEOUT``), the job ends within a second or so under ``mpirun``
(Open MPI kills every rank once one has died).  While its steps run, the
training loop :func:`arm`\\ s a function that writes what it holds without any
other rank; the watchdog (:mod:`.watchdog`) and the exception hook
(:mod:`.failure`) call :func:`say` before they end the process.  The function
runs at most once per process, whichever thread gets there first, and its line
is printed after the line naming the dead rank.  No MPI here: the dead rank may
be a member of every communicator this rank has.
"""
from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

_lock = threading.Lock()
_fn = None          # the armed function: () -> the line to print (or None)
_line: str | None = None     # its line, once it ran (printed by the first say(show=True))
_ran = False


@contextmanager
def armed(fn):
    """Run the body with ``fn`` as this process's last words (one at a time)."""
    global _fn, _ran, _line
    with _lock:
        _fn, _ran, _line = fn, False, None
    try:
        yield
    finally:
        with _lock:
            _fn = None      # a line it left is still printed by say()


def is_armed() -> bool:
    """Whether last words are armed: the ranks of the current phase never leave it
    on their own (a member gone from a collective is a death)."""
    return _fn is not None


def cancel() -> None:
    """The caller saved what it holds some other way (all trainers together)."""
    global _fn
    with _lock:
        _fn = None


def say(show: bool = True) -> None:
    """Run the armed function (once) and, with ``show``, print its line (once).
    Its errors become its line: the job is ending anyway."""
    global _ran, _line
    with _lock:
        if _fn is not None and not _ran:
            _ran = True
            try:
                _line = _fn()
            except Exception as e:  # noqa: BLE001 - never hide why the job ends
                _line = f"hpcgnn: no last checkpoint ({type(e).__name__}: {e})"
        line = _line if show else None
        if show:
            _line = None
    if line:
        try:
            err = sys.__stderr__ or sys.stderr
            err.write(line + "\n")
            err.flush()
        except Exception:  # noqa: BLE001
            pass
