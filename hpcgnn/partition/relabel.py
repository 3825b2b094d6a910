"""New ids: partition ``p`` owns ``[node_start[p], node_start[p+1])``.

Inside a partition, nodes are grouped by type (typed graphs) and keep their original
order inside a type.  Rank ``r`` holds a block of
original ids; its nodes of partition ``p`` get the new ids
``node_start[p] + (nodes of p on ranks < r) + (their order on r)``: a contiguous
slice of ``p``'s range.  So every rank can write the node rows of its slices
directly, and the rank holding a new id is found from ``P * R + 1`` boundaries.
"""
from __future__ import annotations

import numpy as np

from .arrays import stable_argsort, unique_inverse

from ..comm.alltoall import allgather_blocks, allgather_rows, query
from .assign import owner_of

#: ``map_ids`` all-gathers the whole old -> new table (``8 N`` bytes on every rank) and
#: indexes it when that table is at most this large; above, it asks the owners of the
#: distinct ids (sort + all-to-all), which needs memory only for the ids asked.
DENSE_MAP_BYTES = 512 << 20


class IdLayout:
    """Collective constructor: the slices of every (bin, rank) from the bin counts.

    A *bin* is a (partition, type) pair ``b = p * T + t`` (``T = types``; an untyped
    layout has ``T = 1`` and bins are partitions).  Partition ``p`` owns the bins
    ``p*T .. p*T+T-1`` in that order, so its ids stay one contiguous range and each of
    its types one contiguous sub-range.

    ``counts[r, b]``: items of bin ``b`` held by rank ``r``.  ``start[p]``: first global
    id of partition ``p`` (``start[P]`` = total); ``bin_start[b]``: first id of bin
    ``b``.  ``bounds[b * R + r]``: first id of rank ``r``'s slice of bin ``b``.
    """

    def __init__(self, comm, local_counts: np.ndarray, types: int = 1) -> None:
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.counts = allgather_rows(comm, local_counts)  # [R, P * T]
        self.types = int(types)
        self.nbins = self.counts.shape[1]
        self.nparts = self.nbins // self.types
        self.bin_start = np.zeros(self.nbins + 1, dtype=np.int64)
        np.cumsum(self.counts.sum(axis=0), out=self.bin_start[1:])
        self.start = self.bin_start[:: self.types].copy()
        flat = self.counts.T.reshape(-1)  # bin-major, then rank
        self.bounds = np.zeros(len(flat) + 1, dtype=np.int64)
        np.cumsum(flat, out=self.bounds[1:])

    @property
    def total(self) -> int:
        return int(self.start[-1])

    def part_size(self, p: int) -> int:
        return int(self.start[p + 1] - self.start[p])

    def bin_slice(self, b: int, r: int | None = None) -> tuple[int, int]:
        """Global ids ``[lo, hi)`` of rank ``r``'s (default: this rank's) slice of bin ``b``."""
        k = b * self.size + (self.rank if r is None else r)
        return int(self.bounds[k]), int(self.bounds[k + 1])

    def bin_offset(self, b: int) -> int:
        """Offset of this rank's slice of bin ``b`` inside its partition (rows before it)."""
        return int(self.bounds[b * self.size + self.rank] - self.start[b // self.types])

    def slice_of(self, p: int, r: int | None = None) -> tuple[int, int]:
        """Untyped layouts: rank ``r``'s slice of partition ``p``."""
        assert self.types == 1, "typed layout: use bin_slice"
        return self.bin_slice(p, r)

    def local_offset(self, p: int) -> int:
        """Untyped layouts: offset of this rank's slice inside partition ``p``."""
        assert self.types == 1, "typed layout: use bin_offset"
        return self.bin_offset(p)

    def type_ranges(self, t: int) -> list[list[int]]:
        """``[[start, end), ...]`` of type ``t`` in every partition (global ids)."""
        return [[int(self.bin_start[p * self.types + t]), int(self.bin_start[p * self.types + t + 1])]
                for p in range(self.nparts)]

    def rank_of(self, ids: np.ndarray) -> np.ndarray:
        """Independent: rank holding each global id."""
        return owner_of(self.bounds, ids) % self.size

    def part_of(self, ids: np.ndarray) -> np.ndarray:
        """Independent: partition owning each global id."""
        return owner_of(self.start, ids)


def assign_new_ids(parts: np.ndarray, layout: IdLayout) -> tuple[np.ndarray, np.ndarray]:
    """Independent: (new id of each local item, order that groups local items by bin).

    ``parts`` is the bin (``partition * T + type``) of each local item, in original
    order.
    """
    order = stable_argsort(parts)
    sp = parts[order]
    first = np.searchsorted(sp, sp, side="left")  # first position of each item's group
    new = np.empty(len(parts), dtype=np.int64)
    new[order] = layout.bounds[sp * layout.size + layout.rank] + (np.arange(len(sp)) - first)
    return new, order


def map_ids(comm, vtxdist: np.ndarray, new_ids: np.ndarray, orig: np.ndarray) -> np.ndarray:
    """Collective: new ids of the original ids ``orig`` (any rank's): from the whole
    all-gathered table when it is small enough (``DENSE_MAP_BYTES``, agreed by every rank
    from ``vtxdist``), else by asking the owners of the distinct ids."""
    if 8 * int(vtxdist[-1]) <= DENSE_MAP_BYTES:
        table = allgather_blocks(comm, np.asarray(new_ids, dtype=np.int64), np.diff(vtxdist))
        return table[np.asarray(orig).reshape(-1)]
    lo = int(vtxdist[comm.Get_rank()])
    uniq, inv = unique_inverse(orig)
    ans = query(comm, owner_of(vtxdist, uniq), uniq, lambda keys: new_ids[keys - lo])
    return ans[inv.reshape(-1)]
