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


def commit(tmp: str, path: str, comm=None, durable: bool = False) -> None:
    """Collective over ``comm`` (None: this process alone): after every rank closed
    ``tmp``, rank 0 renames it to ``path``.  ``durable``: ``tmp`` is synced to disk
    before the rename and its folder after it, so a crash of the host leaves either
    the complete file under its name or none (checkpoints)."""
    if comm is not None:
        barrier(comm)
    if _rank(comm) == 0:
        if durable:
            fsync(tmp)                  # on disk before its name says complete
        os.replace(tmp, path)
        if durable:
            fsync(os.path.dirname(os.path.abspath(path)))
    if comm is not None:
        barrier(comm)


def fsync(path: str) -> None:
    """Independent: flush a file's (or a folder's) data to disk; quietly nothing where
    it cannot be opened or the file system does not sync folders."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_quietly(path: str) -> None:
    """Independent: remove a file if it exists."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
