"""The owner endpoint of an edge (the node whose CSR row stores it), found from the
``csr`` table instead of a table of one id per edge (8 bytes per edge the servers
no longer hold).

Partition ``p`` stores its edges ``[edge_start[p], edge_start[p+1])`` row after row:
``T * n`` CSR rows, edge type major, row ``r`` belonging to node
``node_start[p] + r % n``.  Numbered one after the other over the partitions, the
rows' starts never decrease, so the row of edge ``e`` is the last row whose start
is ``<= e`` (an empty row shares its start with the next one, so the last such row
is never empty).  The start of every ``SKIP``-th row is read once (8 bytes per
``SKIP`` rows in each process that asks); a search then reads ``log2(SKIP)`` rounds
of ``csr`` rows, all ids at once.  One run of consecutive ids (``find_edges`` over
a range, the link split's masks): the rows between its ends are read once.
"""
from __future__ import annotations

import numpy as np

#: every SKIP-th row's start is kept by each process that looks up owners
SKIP = 128


class EdgeOwners:
    """Owner lookups on one graph's :class:`~hpcgnn.graph.tables.GraphTables`."""

    def __init__(self, tables) -> None:
        self.t = tables
        self.T = tables.num_etypes
        self.nodes = np.diff(tables.node_bounds)                        # nodes per partition
        self.row_bounds = np.concatenate([[0], np.cumsum(self.nodes * self.T)])
        self.skip_starts = None                                          # read at the first search

    def _place(self, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(node, edge type)`` of global row numbers ``row``."""
        p = np.searchsorted(self.row_bounds, row, side="right") - 1
        r = row - self.row_bounds[p]
        n = np.maximum(self.nodes[p], 1)
        return self.t.node_bounds[p] + r % n, r // n

    def _starts(self, row: np.ndarray) -> np.ndarray:
        node, et = self._place(row)
        return self.t.csr.gather(node).reshape(len(node), self.T, 2)[np.arange(len(node)), et, 0]

    def _rows_of(self, e: np.ndarray) -> np.ndarray:
        """The global row storing each edge id of ``e``."""
        if self.skip_starts is None:
            self.skip_starts = self._starts(np.arange(0, int(self.row_bounds[-1]), SKIP, dtype=np.int64))
        k = np.searchsorted(self.skip_starts, e, side="right") - 1
        lo = k * SKIP
        hi = np.minimum(lo + SKIP, int(self.row_bounds[-1]))                # exclusive
        live = np.flatnonzero(hi - lo > 1)
        while len(live):
            mid = (lo[live] + hi[live]) // 2
            below = self._starts(mid) <= e[live]
            lo[live[below]] = mid[below]
            hi[live[~below]] = mid[~below]
            live = live[hi[live] - lo[live] > 1]
        return lo

    def _run(self, a: int, b: int) -> np.ndarray:
        """The owners of edge ids ``[a, b)``: the rows between those of ``a`` and
        ``b - 1`` read once, their ranges cut to ``[a, b)``."""
        first, last = (int(r) for r in self._rows_of(np.array([a, b - 1], np.int64)))
        node, et = self._place(np.arange(first, last + 1, dtype=np.int64))
        rows = self.t.csr.gather(node).reshape(len(node), self.T, 2)[np.arange(len(node)), et]
        return np.repeat(node, np.maximum(np.minimum(rows[:, 1], b) - np.maximum(rows[:, 0], a), 0))

    def __call__(self, e: np.ndarray) -> np.ndarray:
        """The owner endpoint (the destination of an in-edge) of each global edge id
        in ``e`` (int64, checked by the caller to lie in ``[0, num_edges)``)."""
        if len(e) == 0:
            return np.zeros(0, np.int64)
        if len(e) > 2 and e[-1] - e[0] == len(e) - 1 and np.all(np.diff(e) == 1):
            return self._run(int(e[0]), int(e[-1]) + 1)
        return self._place(self._rows_of(e))[0]
