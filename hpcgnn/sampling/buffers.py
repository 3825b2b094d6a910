"""Output buffers for mini-batch feature rows, reused once nothing refers to them.

A products-sized batch gathers ~160k feature rows (64 MB) per step.  A fresh
allocation of that size is a new memory mapping every time (larger than glibc's
largest pooled size), and the first write to each 4 KB page faults and zeroes
it: measured in one process, gathering 161k random 400-byte rows took 52 ms into
fresh memory and 25 ms into a reused buffer.  :class:`BufferRing` hands out views
of a few long-lived buffers instead, and takes a buffer back only when no array
or tensor made from it is alive any more (its reference count says so), so a batch
a caller keeps is never overwritten.
"""
from __future__ import annotations

import sys
import threading

import numpy as np


class BufferRing:
    """At most ``keep`` buffers; :meth:`take` returns an uninitialised C-contiguous
    ``(n, *row_shape)`` array of ``dtype``: a view of a buffer nobody refers to (grown
    when too small), or fresh memory when every buffer is in use.  Thread-safe."""

    def __init__(self, keep: int = 4):
        self.keep = int(keep)
        self._bufs: list[np.ndarray] = []
        self._lock = threading.Lock()

    def _idle(self, i: int) -> bool:
        # referenced by the list and by getrefcount's argument only: no view of it
        # (no batch tensor) is alive
        return sys.getrefcount(self._bufs[i]) == 2

    def take(self, n: int, row_shape: tuple, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        row_shape = tuple(row_shape)
        with self._lock:
            idle = [i for i in range(len(self._bufs)) if self._idle(i)]
            for i in idle:
                b = self._bufs[i]
                if b.dtype == dtype and b.shape[1:] == row_shape and b.shape[0] >= n:
                    return b[:n]
            if not idle and len(self._bufs) >= self.keep:
                return np.empty((n,) + row_shape, dtype=dtype)
            b = np.empty((max(n + n // 8, 1),) + row_shape, dtype=dtype)   # room for larger batches
            if idle:
                self._bufs[idle[0]] = b
            else:
                self._bufs.append(b)
            return b[:n]

    def __len__(self) -> int:
        return len(self._bufs)


#: the ring that :func:`~hpcgnn.sampling.features.fetch_features` gathers host features into
FEATURES = BufferRing()
