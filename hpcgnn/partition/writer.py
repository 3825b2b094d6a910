"""Writing the partitioned graph: one HDF5 file, one group per partition, with
per-dataset checksums computed by slices (see docs/format.md).

Datasets are created collectively (every rank, same shapes); rows are written with
independent I/O, each rank its own slices, so a rank with nothing to write for a
dataset never blocks the others.  The file's disk space is reserved before anything
is flushed; errors during the writes are caught per rank and agreed afterwards, and
any failure after the create ends the job (:class:`hpcgnn.io.diskspace.WriteGuard`:
a parallel HDF5 file that met an error cannot be closed).  The checksums are
:mod:`hpcgnn.io.checksum`'s.
"""
from __future__ import annotations

import numpy as np

from ..comm.collectives import all_sum, allreduce
from ..errors import HpcgnnError
from ..io.checksum import checksum_hex, fletcher_partial
from ..io.diskspace import WriteGuard, disk_full
from ..io.h5 import open_h5

class PartFile:
    """Collective: the output HDF5 file being written (opened with ``driver='mpio'``).

    ``create(path, shape, dtype, attrs)`` is collective (``attrs``: the dataset's HDF5
    attributes); ``write(path, row, arr)`` is independent and records the slice's
    checksum share and any I/O error; ``finish()`` is collective: agrees on errors,
    reduces the checksums, closes.
    """

    def __init__(self, comm, path: str, name: str | None = None) -> None:
        """``path``: the file written; ``name``: what it becomes (named in errors)."""
        self.comm, self.path, self.rank = comm, path, comm.Get_rank()
        self.guard = WriteGuard(comm, path, name or path)
        self.f = open_h5(path, "w", comm)
        self.shapes: dict[str, tuple] = {}
        self.row_bytes: dict[str, int] = {}
        self.partial: dict[str, list[int]] = {}
        self.error: BaseException | None = None
        self.bytes_written = 0

    def create(self, path: str, shape: tuple, dtype, attrs: dict | None = None) -> None:
        dtype = np.dtype(dtype)
        d = self.f.create_dataset(path, shape=shape, dtype=dtype)
        for k, v in (attrs or {}).items():
            d.attrs[k] = v
        self.shapes[path] = (tuple(shape), dtype)
        self.row_bytes[path] = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        self.partial[path] = [0, 0]

    def group_attrs(self, path: str, attrs: dict) -> None:
        """Collective: create group ``path`` (if needed) and set its attributes."""
        g = self.f.require_group(path)
        for k, v in attrs.items():
            g.attrs[k] = v

    def reserve(self, need: int = 0) -> None:
        """Collective: reserve the file's disk blocks (the larger of ``need`` and the
        datasets created so far, see :meth:`WriteGuard.reserve`): right after the
        create and again once every dataset is created, before anything is flushed.
        A disk that cannot hold them ends the job with one line naming the file."""
        self.guard.reserve(self.f, need)

    def write(self, path: str, row: int, arr: np.ndarray) -> None:
        """Independent: write ``arr`` at rows ``[row, row + len(arr))`` of ``path``."""
        if self.error is not None or len(arr) == 0:
            return
        shape, dtype = self.shapes[path]
        arr = np.ascontiguousarray(arr, dtype=dtype)
        row = int(row)                   # a NumPy integer would overflow in the checksum's products
        try:
            self.f[path].write_direct(arr, dest_sel=np.s_[row:row + len(arr)])
        except Exception as e:  # noqa: BLE001 - agreed in finish()
            self.error = _io_error(self.path, path, self.rank, e)
            return
        s1, s2 = fletcher_partial(arr, row * self.row_bytes[path])
        p = self.partial[path]
        p[0] = (p[0] + s1) % (1 << 64)
        p[1] = (p[1] + s2) % (1 << 64)
        self.bytes_written += arr.nbytes

    def finish(self) -> tuple[dict[str, str], int]:
        """Collective: agree on write errors (one ends the job), close, return
        (checksums, total bytes written)."""
        self.guard.settle(self.error)
        self.close()
        names = sorted(self.partial)
        local = np.array([self.partial[n] for n in names], dtype=np.uint64).reshape(-1)
        total = allreduce(self.comm, local, "sum", dtype=np.uint64)
        sums = {n: checksum_hex(int(total[2 * i]), int(total[2 * i + 1])) for i, n in enumerate(names)}
        nbytes = all_sum(self.comm, self.bytes_written)
        return sums, nbytes

    def close(self) -> None:
        """Collective: close the file (idempotent); a failed close ends the job."""
        if self.f is None:
            return
        f, self.f = self.f, None
        self.guard.close(f)


def _io_error(file: str, dataset: str, rank: int, e: BaseException) -> HpcgnnError:
    text = str(e)
    full = disk_full(e) or "write failed" in text.lower()
    hint = "; the disk (or quota) may be full" if full else ""
    return HpcgnnError(f"{file}: writing dataset '{dataset}' failed on rank {rank}: "
                       f"{type(e).__name__}: {text}{hint}")
