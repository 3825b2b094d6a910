"""Partitions of the coarsest cluster graph (:mod:`.coarsen`): several seeded starts,
the best of which are refined back through the levels.

A coarsest graph small enough to copy (``METIS_ENTRIES`` adjacency entries) is
partitioned by serial METIS, once per seed: try ``t`` (METIS seed ``seed + 7 t``) runs
on rank ``t mod k`` of ``k`` ranks that each hold a copy, so the same tries run
whatever the rank count, in parallel, and the starts do not depend on how many ranks
split the graph (ParMETIS' do: on a generated 200k-node graph in class order, 4 parts,
its best of 16 seeds cut 0.47 at 4 ranks and 0.54 at 32 once refined, where 2 ranks
reached 0.40; ParMETIS on one rank ignores the seed, so 16 tries on a gathered graph
were one).  ``k`` is at most the tries and the ranks, and the copies together hold at
most ``budget`` entries (the caller's share of the input graph).  A larger coarsest
graph is partitioned by ParMETIS where it lies, moved to even blocks first when a rank
holds none of it (a cluster is held by the rank owning its id).
"""
from __future__ import annotations

import numpy as np

from ..comm.alltoall import allgather_blocks, alltoallv
from ..comm.agree import agreed
from ..comm.collectives import all_sum, allgather, bcast
from .cross_lp import owner_of
from .parmetis import metis_part_kway, part_kway

#: A coarsest graph with at most this many adjacency entries is copied to the ranks
#: that run serial METIS on it (16 bytes per entry on each).
METIS_ENTRIES = 1 << 25
#: What a coarsest graph still too large for ParMETIS' idx_t calls for.
COARSE_FIX = ("the coarsest cluster graph of --coarsen lp is still that large (the graph barely clusters): "
              "partition with --method random, or use a ParMETIS built with IDXTYPEWIDTH=64")


def gather_graph(comm, dist, xadj, adjncy, adjwgt, vw):
    """Collective: the whole distributed graph on every rank (CSR, edge weights and
    vertex weight columns)."""
    counts = np.diff(dist)
    gx = np.zeros(int(dist[-1]) + 1, dtype=np.int64)
    np.cumsum(allgather_blocks(comm, np.diff(xadj).astype(np.int64), counts), out=gx[1:])
    ga = allgather_blocks(comm, np.asarray(adjncy, dtype=np.int64))
    gw = None if adjwgt is None else allgather_blocks(comm, np.asarray(adjwgt, dtype=np.int64))
    return gx, ga, gw, [allgather_blocks(comm, np.asarray(c, dtype=np.int64), counts) for c in vw]


def _moved(comm, dest_of_row, xadj, adjncy, adjwgt, vw):
    """Collective: each row (degree, weight columns, entries) sent to the ``k`` ranks of
    its row of ``dest_of_row`` (``(n, k)``); returns this rank's rows ``(xadj, adjncy,
    adjwgt, weight columns)`` in the senders' rank order."""
    dest = np.asarray(dest_of_row, dtype=np.int64)
    k = dest.shape[1]
    deg = np.diff(np.asarray(xadj, dtype=np.int64))
    cols = np.stack([np.asarray(c, dtype=np.int64) for c in vw], axis=1)
    deg, cols = alltoallv(comm, dest.reshape(-1), np.repeat(deg, k), np.repeat(cols, k, axis=0))
    edest = np.repeat(dest, np.diff(np.asarray(xadj, dtype=np.int64)), axis=0).reshape(-1)
    ents = alltoallv(comm, edest, *[np.repeat(np.asarray(a, dtype=np.int64), k)
                                    for a in (adjncy, adjwgt) if a is not None])
    x = np.zeros(len(deg) + 1, dtype=np.int64)
    np.cumsum(deg, out=x[1:])
    return x, ents[0], ents[1] if adjwgt is not None else None, [cols[:, j] for j in range(cols.shape[1])]


def evened(comm, dist, xadj, adjncy, adjwgt, vw):
    """Collective: the distributed graph (global ids) moved to even blocks of its vertex
    ids, ``(even dist, xadj, adjncy, adjwgt, weight columns)``."""
    R, me = comm.Get_size(), comm.Get_rank()
    even = np.arange(R + 1, dtype=np.int64) * int(dist[-1]) // R
    dest = owner_of(even, np.arange(dist[me], dist[me + 1], dtype=np.int64))
    return (even, *_moved(comm, dest[:, None], xadj, adjncy, adjwgt, vw))


def uneven(comm, even, dist, parts):
    """Collective: ``parts`` of this rank's block of ``even`` sent back to its block of ``dist``."""
    me = comm.Get_rank()
    (got,) = alltoallv(comm, owner_of(dist, np.arange(even[me], even[me + 1], dtype=np.int64)), parts)
    return got


def starts(comm, cur, dist, graph, nparts: int, ub, seed: int, tries: int, budget: int,
           levels: list) -> tuple[list, str]:
    """Collective over ``comm`` (every rank of the job): ``tries`` seeded starts,
    smallest cut first (ties: the earlier try), on the coarsest graph
    ``graph = (xadj, adjncy, adjwgt, weight columns)``, distributed on ``cur``
    as ``dist`` (``cur`` is ``COMM_SELF`` when every rank holds it whole).  Returns
    ``(parts per start, method)``: each start's parts of every coarsest vertex with
    ``method == "metis"`` (a ``("gather", cur, dist)`` level is appended when the graph
    was distributed), of this rank's block with ``"parmetis"``."""
    gx, ga, gw, vw = graph
    entries = all_sum(cur, len(ga))
    if entries > METIS_ENTRIES:
        return _parmetis_starts(cur, dist, graph, nparts, ub, seed, tries, levels), "parmetis"
    R, me = comm.Get_size(), comm.Get_rank()
    whole = cur.Get_size() == 1
    k = max(1, min(R, tries, R if whole else budget // max(1, entries)))
    if not whole:                   # copies on ranks 0..k-1 of cur (every rank of comm is in cur)
        lo, hi = int(dist[cur.Get_rank()]), int(dist[cur.Get_rank() + 1])
        dest = np.broadcast_to(np.arange(k, dtype=np.int64), (hi - lo, k))
        gx, ga, gw, vw = _moved(cur, dest, gx, ga, gw, vw)
        levels.append(("gather", cur, dist))
    mine = []
    with agreed(comm):              # a METIS failure on one rank ends every rank
        vwgt = np.stack(vw, axis=1).reshape(-1)
        for t in range(me, max(1, tries), k) if me < k else ():
            p, cut = metis_part_kway(gx, ga, vwgt=vwgt, ncon=len(vw), nparts=nparts, ubvec=ub, adjwgt=gw,
                                     seed=(seed + 7 * t) % 2**31, return_cut=True, fix=COARSE_FIX)
            mine.append((cut, t, p))
    ranked = sorted((c, t) for got in allgather(comm, [(c, t) for c, t, _ in mine]) for c, t in got)
    kept = {t: p for _, t, p in mine}
    return [bcast(comm, kept.get(t), root=t % k) for _, t in ranked], "metis"


def _parmetis_starts(cur, dist, graph, nparts, ub, seed, tries, levels):
    """Collective over ``cur``: ``tries`` ParMETIS partitions (seeds), smallest cut first,
    each of this rank's block of the coarsest graph."""
    gx, ga, gw, vw = graph
    if cur.Get_size() > 1 and np.any(np.diff(dist) == 0):     # ParMETIS wants a vertex on every rank
        even, gx, ga, gw, vw = evened(cur, dist, gx, ga, gw, vw)
        levels.append(("even", cur, dist, even))
        dist = even
    found = []
    for t in range(max(1, tries)):
        p, cut = part_kway(cur, dist, gx, ga, vwgt=np.stack(vw, axis=1).reshape(-1), ncon=len(vw),
                           nparts=nparts, adjwgt=gw, ubvec=ub, seed=(seed + 7 * t) % 2**31, return_cut=True,
                           fix=COARSE_FIX)
        found.append((cut, t, p))
    return [p for _, _, p in sorted(found, key=lambda s: s[:2])]
