"""New ids: partition ``p`` owns ``[node_start[p], node_start[p+1])``.

Inside a partition, nodes keep their original order.  Rank ``r`` holds a block of
original ids; its nodes of partition ``p`` get the new ids
``node_start[p] + (nodes of p on ranks < r) + (their order on r)``: a contiguous
slice of ``p``'s range.  So every rank can write the node rows of its slices
directly, and the rank holding a new id is found from ``P * R + 1`` boundaries.
"""
from __future__ import annotations

import numpy as np

from .arrays import unique_inverse

from ..comm.alltoall import allgather_rows, query
from .assign import owner_of


class IdLayout:
    """Collective constructor: the slices of every (partition, rank) from the part counts.

    ``counts[r, p]``: items of partition ``p`` held by rank ``r``.  ``start[p]``:
    first global id of ``p`` (``start[P]`` = total).  ``bounds[p * R + r]``: first id
    of rank ``r``'s slice of ``p``.
    """

    def __init__(self, comm, local_counts: np.ndarray) -> None:
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.counts = allgather_rows(comm, local_counts)  # [R, P]
        self.nparts = self.counts.shape[1]
        per_part = self.counts.sum(axis=0)
        self.start = np.zeros(self.nparts + 1, dtype=np.int64)
        np.cumsum(per_part, out=self.start[1:])
        flat = self.counts.T.reshape(-1)  # p-major, then rank
        self.bounds = np.zeros(len(flat) + 1, dtype=np.int64)
        np.cumsum(flat, out=self.bounds[1:])

    @property
    def total(self) -> int:
        return int(self.start[-1])

    def part_size(self, p: int) -> int:
        return int(self.start[p + 1] - self.start[p])

    def slice_of(self, p: int, r: int | None = None) -> tuple[int, int]:
        """Global ids ``[lo, hi)`` of rank ``r``'s (default: this rank's) slice of ``p``."""
        k = p * self.size + (self.rank if r is None else r)
        return int(self.bounds[k]), int(self.bounds[k + 1])

    def local_offset(self, p: int) -> int:
        """Offset of this rank's slice inside partition ``p`` (rows before it)."""
        return int(self.bounds[p * self.size + self.rank] - self.start[p])

    def rank_of(self, ids: np.ndarray) -> np.ndarray:
        """Independent: rank holding each global id."""
        return owner_of(self.bounds, ids) % self.size

    def part_of(self, ids: np.ndarray) -> np.ndarray:
        """Independent: partition owning each global id."""
        return owner_of(self.start, ids)


def assign_new_ids(parts: np.ndarray, layout: IdLayout) -> tuple[np.ndarray, np.ndarray]:
    """Independent: (new id of each local item, order that groups local items by part).

    ``parts`` is the partition of each local item, in original order.
    """
    order = np.argsort(parts, kind="stable")
    sp = parts[order]
    first = np.searchsorted(sp, sp, side="left")  # first position of each item's group
    new = np.empty(len(parts), dtype=np.int64)
    new[order] = layout.bounds[sp * layout.size + layout.rank] + (np.arange(len(sp)) - first)
    return new, order


def map_ids(comm, vtxdist: np.ndarray, new_ids: np.ndarray, orig: np.ndarray) -> np.ndarray:
    """Collective: new ids of the original ids ``orig`` (any rank's), by asking their owners."""
    lo = int(vtxdist[comm.Get_rank()])
    uniq, inv = unique_inverse(orig)
    ans = query(comm, owner_of(vtxdist, uniq), uniq, lambda keys: new_ids[keys - lo])
    return ans[inv.reshape(-1)]
