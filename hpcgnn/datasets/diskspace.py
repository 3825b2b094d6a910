"""Disk space for the files written in parallel: the blocks of every dataset are
reserved (``posix_fallocate``) after the collective creation and before any data is
written, so that a disk that cannot hold the file fails on every rank alike, and
not half-way through the writes or in parallel HDF5's collective close (where it
hangs or crashes).  Used by generate/convert (:mod:`.raw`'s writers), the
partition writer and checkpoints."""
from __future__ import annotations

import errno
import os
from contextlib import nullcontext

import h5py

from ..comm.agree import agreed
from ..errors import InputError


def allocated_end(f: h5py.File) -> int:
    """Independent: the end of the last byte allocated to a dataset of the open file
    ``f`` (parallel HDF5 allocates contiguous datasets when they are created)."""
    end = 0

    def visit(_, obj):
        nonlocal end
        if isinstance(obj, h5py.Dataset):
            off = obj.id.get_offset()
            if off is not None:
                end = max(end, int(off) + int(obj.id.get_storage_size()))

    f.visititems(visit)
    return end


def reserve_file(path: str, size: int) -> None:
    """Independent: make ``path`` own ``size`` bytes of disk (OSError ENOSPC when the
    disk cannot hold them); nothing where the file system has no ``fallocate``."""
    if size <= 0 or not hasattr(os, "posix_fallocate"):
        return
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
    finally:
        os.close(fd)


def reserve(f: h5py.File, tmp: str, path: str, comm=None) -> None:
    """Collective: reserve the disk blocks of every dataset created in ``f`` (the
    file ``tmp``, to become ``path``), so that the writes that follow cannot run
    out of space half-way (parallel HDF5 then hangs or crashes in the close).  A
    disk that cannot hold it: InputError on every rank naming ``path``."""
    with nullcontext() if comm is None else agreed(comm):
        f.flush()
        if comm is None or comm.Get_rank() == 0:
            need = allocated_end(f)
            try:
                reserve_file(tmp, need)
            except OSError as e:
                raise InputError(f"{path}: the disk cannot hold the file's {need} bytes ({e.strerror}): "
                                 "disk full") from None
