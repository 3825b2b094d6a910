"""A start of the LP-coarsened partitioning (:func:`.coarsen.coarsened_parts`) from
contiguous ranges of vertex ids.

Where the input's ids follow locality (numbered by community, class, crawl or
space-filling curve), cutting the id order into ``nparts`` ranges of equal weight
already cuts few edges, and label propagation need not find that structure: on a
generated 2M-node graph of 16 classes numbered in class order its clusters hold
almost no class signal and the best of 16 refined starts cut 0.50 of the edges,
where the id ranges cut 0.400 (docs/benchmarks.md).  The ranges depend on the ids
only, not on the rank count.  With random ids they cut as a random partition does,
so the caller refines them only when they already cut less than its best start.
"""
from __future__ import annotations

import numpy as np

from ..comm.collectives import allgather, allreduce

#: Each weight column is scaled so its total is about ``2**SCALE_BITS``: the columns
#: then count alike, and the integer prefix sums are exact (one column's sum stays
#: below 2**52, so up to 2047 columns fit in int64) whatever the rank count.
SCALE_BITS = 52


def id_range_parts(comm, vtxdist, w, nparts: int) -> np.ndarray:
    """Collective: the part of each of this rank's vertices (``vtxdist``: the ranks'
    blocks of global ids) when the global id order is cut into ``nparts`` ranges of
    equal scaled weight; ``w``: ``(n, ncon)`` vertex weights."""
    w = np.asarray(w, dtype=np.int64)
    w = w if w.ndim == 2 else w.reshape(-1, 1)
    total = allreduce(comm, w.sum(axis=0), "sum", dtype=np.int64)
    scale = np.array([(1 << SCALE_BITS) // max(1, int(t)) for t in total], dtype=np.int64)
    share = w @ scale if len(w) else np.zeros(0, dtype=np.int64)
    sums = allgather(comm, int(share.sum()))
    whole, before = sum(sums), sum(sums[:comm.Get_rank()])
    mid = before + np.cumsum(share) - share // 2          # each vertex's middle on the whole line
    ends = np.array([whole * i // nparts for i in range(1, nparts)], dtype=np.int64)
    return np.searchsorted(ends, mid, side="right").astype(np.int64)


def within_bounds(comm, parts, w, nparts: int, ub) -> bool:
    """Collective: whether every part's weight in every column stays within ``ub``
    (one value per column, or one for all) of the column's mean."""
    w = np.asarray(w, dtype=np.int64)
    w = w if w.ndim == 2 else w.reshape(-1, 1)
    pw = np.zeros((nparts, w.shape[1]), dtype=np.int64)
    for j in range(w.shape[1]):
        pw[:, j] = np.bincount(np.asarray(parts, dtype=np.int64), weights=w[:, j], minlength=nparts)
    pw = allreduce(comm, pw, "sum", dtype=np.int64)
    limit = np.floor(np.broadcast_to(np.asarray(ub, dtype=np.float64), (w.shape[1],)) * pw.sum(axis=0) / nparts)
    return bool((pw <= limit[None, :]).all())
