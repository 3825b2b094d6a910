"""Disk space, and failures, of the files written with parallel HDF5 (generate,
convert, the partition writer, checkpoints).

The free space is checked and agreed before the collective create; then, right
after the create and before any dataset is created or anything flushed, rank 0
reserves the file's estimated size on disk (``fallocate`` keeping the file's size,
so HDF5 still sees its own end of file), and once more after the datasets are
created (their real extent).  A disk that fills meanwhile (another job) then fails
the reservation, on rank 0 alone, before HDF5 has written a byte, and no later
write, flush or close can run out of space.

Once parallel HDF5 has met an error in a collective step the file can no longer be
closed (the close flushes collectively: it hangs, or crashes), nor left to the
interpreter's exit, which closes it the same way.  :class:`WriteGuard` therefore
agrees every failure after the create and ends the job: each rank prints one line
naming the file, the rank that failed and the cause, the partial file is removed,
and the job is aborted.  Collective steps run inside :func:`hpcgnn.comm.watchdog.waiting`, so
ranks left in mismatched collectives end within ``HPCGNN_TIMEOUT``."""
from __future__ import annotations

import ctypes
import errno
import os
from contextlib import contextmanager, nullcontext

import h5py

from ..comm import watchdog
from ..comm.agree import abort_if_any, agreed
from ..errors import HpcgnnError, InputError
from .partial import remove_quietly

#: room reserved above the datasets' bytes for HDF5's metadata (headers, attributes)
META_BYTES = 1 << 20
META_PER_DATASET = 4096
_FALLOC_FL_KEEP_SIZE = 1
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def _load_fallocate():
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):      # not Linux: no reservation (the free-space check stays)
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn


_fallocate = _load_fallocate()


def estimate(nbytes: int, ndatasets: int, meta_bytes: int = META_BYTES) -> int:
    """Pure: the disk space of a file whose ``ndatasets`` datasets hold ``nbytes``
    (``meta_bytes`` for its headers and attributes: a file with many or large
    attributes, such as a partitioning, needs the default; a checkpoint far less)."""
    return int(nbytes) + int(meta_bytes) + META_PER_DATASET * int(ndatasets)


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
    """Independent: make bytes ``[0, size)`` of ``path`` own disk blocks, its size
    unchanged, so that no write into them can fail for want of space (OSError ENOSPC
    when the disk cannot hold them; nothing where the file system cannot)."""
    if size <= 0 or _fallocate is None:
        return
    fd = os.open(path, os.O_RDWR)
    try:
        if _fallocate(fd, _FALLOC_FL_KEEP_SIZE, 0, int(size)) != 0:
            code = ctypes.get_errno()
            if code in _UNSUPPORTED:
                return
            os.ftruncate(fd, os.fstat(fd).st_size)     # give back what was reserved before it failed
            raise OSError(code, os.strerror(code), path)
    finally:
        os.close(fd)


def release_tail(path: str) -> None:
    """Independent: give back the blocks reserved past the end of the closed file."""
    try:
        os.truncate(path, os.path.getsize(path))
    except OSError:
        pass


def check_free(path: str, need: int, comm=None) -> None:
    """Collective (agreed, before the collective create): InputError on every rank
    naming ``path`` when its disk has less than ``need`` bytes free."""
    rank = 0 if comm is None else comm.Get_rank()
    with agreed(comm) if comm is not None else nullcontext():
        if rank == 0:
            st = os.statvfs(os.path.dirname(os.path.abspath(path)))
            free = st.f_bavail * st.f_frsize
            if free < need:
                raise InputError(f"{path}: the file needs about {need} bytes, but the disk has {free} bytes "
                                 "free: disk full")


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` says the disk (or quota, or file-size limit) is full."""
    text = str(err).lower()
    return getattr(err, "errno", None) in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) or any(
        s in text for s in ("no space", "file too large", "quota", "errno = 28"))


class WriteGuard:
    """The failures of one parallel HDF5 file being written as ``tmp`` (to become
    ``path``) over ``comm`` (``None``: this process alone, a plain file).

    ``error``: the error type raised; ``kept()``: a clause appended to the message
    (e.g. what is left intact).  Every method is collective."""

    def __init__(self, comm, tmp: str, path: str, error=HpcgnnError, kept=None) -> None:
        self.comm, self.tmp, self.path, self.error, self.kept = comm, tmp, path, error, kept
        self.rank = 0 if comm is None else comm.Get_rank()

    def describe(self, what: str, e: BaseException) -> BaseException:
        """The error of step ``what`` failing here with ``e``: file, rank, cause."""
        hint = "; disk full" if disk_full(e) else ""
        kept = f"; {self.kept()}" if self.kept is not None else ""
        return self.error(f"{self.path}: {what} failed on rank {self.rank}: {type(e).__name__}: {e}{hint}"
                          f"{kept}")

    @contextmanager
    def step(self, what: str, collective: bool = True):
        """Run a step of the write; a failure on any rank ends the job (:meth:`settle`).
        ``collective``: bounded by ``HPCGNN_TIMEOUT`` (a rank left in a mismatched
        collective ends the job naming ``what``)."""
        err = None
        try:
            if collective and self.comm is not None:
                with watchdog.waiting(f"{what} ({self.path}, parallel HDF5)"):
                    yield
            else:
                yield
        except Exception as e:  # noqa: BLE001 - agreed in settle
            err = e if isinstance(e, HpcgnnError) else self.describe(what, e)
        self.settle(err)

    def settle(self, err: BaseException | None) -> None:
        """Agree on ``err`` (this rank's failure or None); any failure removes the
        partial file and ends the job with its line on every rank.  Alone: raises it."""
        if self.comm is None:
            if err is not None:
                self.discard()
                raise err
            return
        abort_if_any(self.comm, err, self.discard)

    def discard(self) -> None:
        if self.rank == 0:
            remove_quietly(self.tmp)

    def reserve(self, f: h5py.File, need: int = 0) -> None:
        """Rank 0 reserves the larger of ``need`` and the datasets' extent plus
        metadata room; a disk that cannot hold it ends the job naming the file."""
        err = None
        if self.rank == 0:
            size = max(int(need), allocated_end(f) + META_BYTES)
            try:
                reserve_file(self.tmp, size)
            except OSError as e:
                err = self.describe(f"reserving its {size} bytes of disk", e)
        self.settle(err)

    def close(self, f: h5py.File) -> None:
        """Close ``f`` (collective flush); then rank 0 gives back the unused reservation."""
        with self.step("closing the file"):
            f.close()
        if self.rank == 0:
            release_tail(self.tmp)
