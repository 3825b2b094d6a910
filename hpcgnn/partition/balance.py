"""A deterministic rebalancing pass after ParMETIS for 0/1 constraints (masks, types).

ParMETIS treats ``ubvec`` as a goal, and for small graphs (which it partitions
serially inside) it may miss it by several percent on secondary constraints.  Users
who ask for ``balance_ntypes=["train_mask"]`` expect every partition to get its share
of training nodes, so for each such column this pass moves the fewest nodes needed
to bring every partition within ``tol`` of the mean, from partitions above the band
to partitions below it.  Movers are taken, on each rank, among the nodes of the
column in the donor partition with the lowest degree first (fewest edges cut by the
move), in proportion to each rank's candidates; the plan is computed identically on
every rank from the gathered counts, so the result is deterministic.
"""
from __future__ import annotations

import math

import numpy as np

from ..comm.alltoall import allgather_rows, allreduce_sum
from ..comm.collectives import all_sum


def transfer_plan(w: np.ndarray, tol: float) -> np.ndarray:
    """Independent: ``M[p, q]`` units to move from partition ``p`` to ``q`` so that every
    partition ends within ``[ceil(T(1-tol)), floor(T(1+tol))]`` of the mean ``T``."""
    w = np.asarray(w, dtype=np.int64)
    P = len(w)
    T = w.sum() / P
    lo, hi = math.ceil(T * (1 - tol)), math.floor(T * (1 + tol))
    if lo > hi:
        lo = hi = int(round(T))
    give = np.maximum(w - hi, 0)
    need = np.maximum(lo - w, 0)
    if give.sum() < need.sum():  # extra donors: parts above lo, fullest first
        extra = need.sum() - give.sum()
        for p in np.argsort(-w, kind="stable"):
            take = min(extra, max(0, int(w[p] - give[p] - lo)))
            give[p] += take
            extra -= take
    elif give.sum() > need.sum():  # extra receivers: parts below hi, emptiest first
        extra = give.sum() - need.sum()
        for q in np.argsort(w, kind="stable"):
            take = min(extra, max(0, int(hi - w[q] - need[q])))
            need[q] += take
            extra -= take
    M = np.zeros((P, P), dtype=np.int64)
    q = 0
    for p in range(P):
        g = int(give[p])
        while g > 0 and q < P:
            t = min(g, int(need[q]))
            M[p, q] += t
            need[q] -= t
            g -= t
            if need[q] == 0:
                q += 1
    return M


def _quota(total: int, counts: np.ndarray) -> np.ndarray:
    """Split ``total`` moves over ranks in proportion to their candidates ``counts``."""
    c = counts.astype(np.int64)
    C = int(c.sum())
    if C == 0 or total == 0:
        return np.zeros_like(c)
    q = np.array([int(total) * int(x) // C for x in c], dtype=np.int64)   # exact: total * c passes 2^63
    rest = total - int(q.sum())
    for r in range(len(c)):
        if rest == 0:
            break
        if c[r] > q[r]:
            q[r] += 1
            rest -= 1
    return q


def rebalance(comm, parts: np.ndarray, column: np.ndarray, degree: np.ndarray, nparts: int,
              tol: float = 0.03, movable: np.ndarray | None = None) -> int:
    """Collective: move nodes between partitions (``parts`` updated in place) until
    the 0/1 weight ``column`` is within ``tol`` of even.  Only nodes with ``column > 0``
    (and ``movable``, when given) move; with too few of them the band may be missed.
    Returns the nodes moved."""
    rank = comm.Get_rank()
    w = allreduce_sum(comm, np.bincount(parts, weights=column, minlength=nparts).astype(np.int64))
    M = transfer_plan(w, tol)
    if M.sum() == 0:
        return 0
    sel = column > 0 if movable is None else (column > 0) & movable
    counts = allgather_rows(comm, np.bincount(parts[sel], minlength=nparts))  # [R, P]
    moved = 0
    for p in np.flatnonzero(M.sum(axis=1)):
        quota = _quota(int(M[p].sum()), counts[:, p])
        cand = np.flatnonzero(sel & (parts == p))
        cand = cand[np.lexsort((cand, degree[cand]))][:quota[rank]]
        first = int(quota[:rank].sum())
        dest = np.repeat(np.arange(nparts), M[p])[first:first + len(cand)]
        parts[cand] = dest
        moved += len(cand)
    return all_sum(comm, moved)
