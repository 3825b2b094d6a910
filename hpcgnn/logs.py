"""hpcgnn's messages go through the ``hpcgnn`` logger (:mod:`logging`); results do not.

What a run *reports* — the JSON lines (``{"kind": "epoch"}``, ``"final"``, ``"memory"``),
the accuracy lines, the summaries of ``generate``/``partition``/``verify`` — is printed
on stdout.  What hpcgnn *says* on the way (a run's start line, resumes, stops, device
and rendezvous notices) is a record of the ``hpcgnn`` logger (or a child, e.g.
``hpcgnn.train``), so a user silences, filters or redirects it as any other logger::

    import logging
    logging.getLogger("hpcgnn").setLevel(logging.WARNING)       # only warnings and errors

Every record carries the MPI rank (``rank``, ``-`` before MPI starts) and the role of
the process (``role``: server, sampler, trainer, or ``no role`` before
:func:`hpcgnn.initialize`), for a format such as ``"[%(rank)s %(role)s] %(message)s"``.
Unless the application configured the ``hpcgnn`` logger itself, hpcgnn gives it one
handler that prints the bare message (level INFO): on stdout, where these lines always
were, and warnings and errors on stderr.  The command line's ``--quiet`` (warnings and errors only) and ``--log-level
LEVEL`` set its level (:func:`set_level`).  The one-line failure report of a dying rank
(:mod:`hpcgnn.comm.failure`) does not go through logging: it must reach stderr even
when nothing else works.
"""
from __future__ import annotations

import logging
import sys

LOGGER = logging.getLogger("hpcgnn")
LEVELS = ("debug", "info", "warning", "error")


class _Identity(logging.Filter):
    """Adds ``rank`` and ``role`` to every record (looked up, never imported: the failure
    hook's module holds the role once :func:`hpcgnn.initialize` has run)."""

    def filter(self, record: logging.LogRecord) -> bool:
        mpi = sys.modules.get("mpi4py.MPI")
        running = mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()
        record.rank = mpi.COMM_WORLD.Get_rank() if running else "-"
        failure = sys.modules.get("hpcgnn.comm.failure")
        record.role = getattr(getattr(failure, "identity", None), "role", "no role")
        return True


class _Console(logging.Handler):
    """The default handler: the message alone, on whatever ``sys.stdout`` is now (a
    test's or a notebook's capture included); warnings and errors on ``sys.stderr``."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own policy for a failed emit
            self.handleError(record)


_IDENTITY = _Identity()


def _install() -> None:
    LOGGER.addFilter(_IDENTITY)
    if not LOGGER.handlers:
        LOGGER.addHandler(_Console())
        LOGGER.propagate = False       # the default handler prints it; a root handler would twice
    if LOGGER.level == logging.NOTSET:
        LOGGER.setLevel(logging.INFO)


def set_level(level: str) -> None:
    """The ``hpcgnn`` logger's level from a name (``debug``, ``info``, ``warning``,
    ``error``, any case); a :class:`ValueError` naming the choices otherwise."""
    if str(level).lower() not in LEVELS:
        raise ValueError(f"log level {level!r}: choose one of {', '.join(LEVELS)}")
    LOGGER.setLevel(str(level).upper())


def get(name: str = "") -> logging.Logger:
    """The ``hpcgnn`` logger, or its child ``hpcgnn.<name>`` (whose records carry the
    rank and role too: a logger's filters see only its own records)."""
    logger = LOGGER.getChild(name) if name else LOGGER
    if _IDENTITY not in logger.filters:
        logger.addFilter(_IDENTITY)
    return logger


_install()
