"""A file is written under its partial name, then committed (renamed to its real
name once complete) or removed, so that a crash never leaves a file
that looks complete."""
from __future__ import annotations

import os

from ..comm.collectives import barrier


def partial_path(path: str) -> str:
    """The temporary name a writer uses until the file is complete (pure)."""
    return path + ".partial"


def _rank(comm) -> int:
    return 0 if comm is None else comm.Get_rank()


def commit(tmp: str, path: str, comm=None) -> None:
    """Collective: after every rank closed ``tmp``, rank 0 renames it to ``path``."""
    if comm is not None:
        barrier(comm)
    if _rank(comm) == 0:
        os.replace(tmp, path)
    if comm is not None:
        barrier(comm)


def remove_quietly(path: str) -> None:
    """Independent: remove a file if it exists."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
