"""Rows of a :class:`~hpcgnn.graph.DistTensor` read in place instead of copied.

A mini-batch's feature matrix ``x`` is usually a gather: every sampled node's row
copied out of the node-shared table into a new array, which the first layer then
reads again.  When the first layer reads rows by index anyway (a mean over
neighbours), it can read them where they lie: :class:`RowRefs` holds the address of
each row in this process (node-shared memory, the hot-row cache, or a buffer with
the rows RMA had to fetch) and keeps what they point into alive.  It saves writing
and re-reading the whole ``x`` (docs/benchmarks.md: gather + first-layer mean 9.4 ->
6.8 ms of one core per batch on the README graph, 31.0 -> 20.7 ms on the
products-sized one), at the price of doing the random reads in the training step
rather than in the loader's prefetch thread: worth it where that thread shares the
trainer's core.

Addresses are only meaningful in the process that made them (never pickled), and
the values are read when the layer runs, not when the batch was made.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import _ext
from ..errors import InputError


class RowRefs:
    """``len(addr)`` rows of ``row_shape`` and ``dtype`` read in place
    (``addr[i]``: the address of row ``i``).  ``keep``: objects the addresses point
    into (kept alive with this object).  ``materialize()`` copies them into a
    tensor; anything that is not a first-layer mean reads them that way."""

    def __init__(self, addr: np.ndarray, row_shape: tuple, dtype: torch.dtype, keep=()):
        self.addr = np.ascontiguousarray(addr, dtype=np.uintp)
        self.row_shape = tuple(row_shape)
        self.dtype = dtype
        self.keep = tuple(keep)

    @property
    def shape(self) -> tuple:
        return (len(self.addr),) + self.row_shape

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def __len__(self) -> int:
        return len(self.addr)

    def __reduce__(self):
        raise TypeError("RowRefs hold addresses in this process's memory and cannot be pickled; "
                        "call materialize() first")

    def head(self, n: int) -> "RowRefs":
        """The first ``n`` rows (no copy)."""
        return RowRefs(self.addr[:n], self.row_shape, self.dtype, self.keep)

    def check_open(self) -> None:
        """Raise InputError when a table the addresses point into has been freed."""
        for k in self.keep:
            if getattr(k, "freed", False):
                raise InputError(f"RowRefs: {k!r} has been freed; its rows are gone")

    def materialize(self) -> torch.Tensor:
        """The rows as a new tensor (what a gather would have returned)."""
        self.check_open()
        out = torch.empty(self.shape, dtype=self.dtype)
        if out.numel():           # rows are copied as bytes (bfloat16, which NumPy lacks, as int16)
            raw = out.view(torch.int16) if self.dtype == torch.bfloat16 else out
            _ext.gather_addresses(self.addr, raw.numpy())
        return out

    def __repr__(self):
        return f"RowRefs({len(self.addr)} rows of {self.row_shape} {self.dtype})"
