"""Writes to a :class:`~hpcgnn.comm.rma.rowstore.RowStore`: rows stored with ``Put``,
and combined with ``Accumulate`` / ``Get_accumulate`` (atomic per element against
every other accumulate of the table, the basis of sparse optimizers).

:class:`RowWrites` is the write half of ``RowStore``; it uses the store's layout,
routes and RMA core (``_rma``, ``_complete``) and is not used on its own.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from ...errors import HpcgnnError, InputError
from . import rowchecks as rs
from .datatypes import MPI_OPS, check_op_dtype, op_name
from ..mpi import serialized

try:
    import torch
except ImportError:  # pragma: no cover - torch is a dependency of the training stack only
    torch = None


def torch_dtype_ok(dtype: np.dtype) -> bool:
    """Whether torch's ``index_copy_`` can restore orders of ``dtype`` rows (torch
    lacks some, e.g. ``uint32``; NumPy indexing is used then)."""
    if torch is None:
        return False
    try:
        t = torch.from_numpy(np.zeros((1, 1), dtype=dtype))
        t.index_copy_(0, torch.zeros(1, dtype=torch.int64), t.clone())
        return True
    except (TypeError, RuntimeError):          # NotImplementedError is a RuntimeError
        return False


class RowWrites:
    """``scatter``, ``accumulate`` and ``get_accumulate`` of a ``RowStore``."""

    @serialized
    def scatter(self, ids, values) -> None:
        """Independent: write ``values[i]`` into row ``ids[i]`` (the last one wins
        for repeated ids).  Complete at the owner on return; others see it after a
        :meth:`barrier` (or any synchronisation that orders the two ranks)."""
        self._check_open()
        ids = rs.as_ids(ids, self.nrows, self.where)
        values = rs.as_rows(values, len(ids), self.row_shape, self.dtype, self.where)
        if len(ids) == 0 or self.row_bytes == 0:
            return
        ids, values = rs.last_wins(ids, values)
        self._write(ids, values, "put", None)

    @serialized
    def accumulate(self, ids, values, op="sum") -> None:
        """Independent: ``row[ids[i]] = op(row[ids[i]], values[i])`` with MPI
        ``Accumulate``: atomic per element against every other accumulate of this
        table, from any rank.  ``op``: ``"sum"``, ``"max"``, ``"min"``,
        ``"replace"`` (or the ``MPI`` ops).  Repeated ids are combined first."""
        self._check_open()
        name = op_name(op, f"{self.where}: accumulate")
        self._need_mpi_type("accumulate")
        check_op_dtype(name, self.dtype, f"{self.where}: accumulate")
        ids = rs.as_ids(ids, self.nrows, self.where)
        values = rs.as_rows(values, len(ids), self.row_shape, self.dtype, self.where)
        if len(ids) == 0 or self.row_bytes == 0:
            return
        ids, values = rs.combine(ids, values, name)
        self._write(ids, values, "acc", MPI_OPS[name])

    @serialized
    def get_accumulate(self, ids, values, op="sum") -> np.ndarray:
        """Independent: like :meth:`accumulate`, and return the rows as they were just
        before this rank's update (MPI ``Get_accumulate``; atomic per element).  The
        ids must not repeat."""
        self._check_open()
        name = op_name(op, f"{self.where}: get_accumulate")
        self._need_mpi_type("get_accumulate")
        check_op_dtype(name, self.dtype, f"{self.where}: get_accumulate")
        if not self._fetch_ok:
            raise HpcgnnError(f"{self.where}: get_accumulate: this MPI library's one-sided component returns "
                              f"wrong old values of {self.dtype} rows across hosts (Open MPI 4.1's osc rdma does); "
                              "nothing was changed. Choose other components (Open MPI: --mca osc sm,ucx or "
                              "--mca osc sm,pt2pt) or keep these rows in a float dtype")
        ids = rs.as_ids(ids, self.nrows, self.where)
        values = rs.as_rows(values, len(ids), self.row_shape, self.dtype, self.where)
        n = len(ids)
        old = np.empty((n,) + self.row_shape, dtype=self.dtype)
        if n == 0 or self.row_bytes == 0:
            return old
        if len(np.unique(ids)) != n:
            raise InputError(f"{self.where}: get_accumulate needs distinct ids")
        perm, counts = rs.group(ids, self._bounds)
        sids, svals = (ids, values) if perm is None else (ids[perm], values[perm])
        res = old if perm is None else np.empty_like(old)
        win, route = self._atomic
        pending, a = [], 0
        try:
            for k, c in enumerate(counts.tolist()):
                if c:
                    t = self._target_on(k, route)
                    pending += self._rma(win, t, k, sids[a:a + c] - self._bounds[k],
                                         svals.reshape(n, -1)[a:a + c], "getacc", MPI_OPS[name],
                                         res.reshape(n, -1)[a:a + c])
                a += c
        finally:
            self._complete(pending)
        if perm is not None:
            self._unpermute(old.reshape(n, -1), perm, res.reshape(n, -1))
        return old

    def _write(self, ids, values, kind, op) -> None:
        n = len(ids)
        perm, counts = rs.group(ids, self._bounds)
        sids, svals = (ids, values) if perm is None else (ids[perm], values[perm])
        flat = svals.reshape(n, -1)
        pending, a = [], 0
        try:
            for k, c in enumerate(counts.tolist()):
                if c == 0:
                    continue
                offs = sids[a:a + c] - self._bounds[k]
                if kind == "acc":
                    win, route = self._atomic
                    pending += self._rma(win, self._target_on(k, route), k, offs, flat[a:a + c], "acc", op)
                elif self._route[k] == rs.DIRECT:
                    self._views[k].reshape(len(self._views[k]), -1)[offs] = flat[a:a + c]
                else:
                    win = self._shwin if self._route[k] == rs.SHM else self._win
                    pending += self._rma(win, int(self._target[k]), k, offs, flat[a:a + c], "put")
                a += c
        finally:
            self._complete(pending)     # on an error too: what was issued lands, nothing leaks
        if kind == "put" and np.any(self._route[counts > 0] == rs.DIRECT):
            self._shwin.Sync()

    def _target_on(self, k: int, route: int) -> int:
        """Target rank of range ``k`` in the shared (``SHM``) or world window."""
        if route == rs.WORLD:
            return int(self._owners[k])
        return int(self._target[k])

    def _unpermute(self, out2d: np.ndarray, perm: np.ndarray, grouped2d: np.ndarray) -> None:
        if self._torch_ok:
            torch.from_numpy(out2d).index_copy_(0, torch.from_numpy(perm), torch.from_numpy(grouped2d))
        else:
            out2d[perm] = grouped2d

    def _need_mpi_type(self, what):
        if not self._has_mpi_type:
            raise InputError(f"{self.where}: {what} needs a dtype MPI can reduce; {self.dtype} has none")

    @cached_property
    def _torch_ok(self) -> bool:
        return self.row_bytes > 0 and torch_dtype_ok(self.dtype)


__all__ = ["RowWrites"]
