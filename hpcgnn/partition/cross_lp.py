"""Label propagation across rank blocks, and the contraction of clusters that span ranks.

With clusters confined to each rank's block of vertex ids, a graph whose ids carry
no locality (random ids) clusters less the more ranks split it: at 8 ranks most of a
vertex's neighbours are another rank's.  Here, as in ParHIP and dKaMinPar, a vertex
may join any neighbour's cluster:

* A cluster is named by a global vertex id (each vertex starts as its own cluster)
  and is owned by the rank owning that vertex; the owner keeps its weight.
* Each round visits this rank's vertex blocks (256 consecutive vertices) in a seeded
  random order, in slices (more, the more ranks, up to one per block: ``CHUNKS``).
  Per slice: the weights of the clusters the slice's vertices and their neighbours are
  in are read from their owners, but for this rank's own clusters and light clusters
  whose weight the rank learnt earlier in the round (:class:`WeightCache`; so a round
  reads about as many as the rank has edges, not its whole view once per slice); the
  compiled sweep (``_ext.lp_sweep``) moves vertices to the neighbouring cluster with
  the most edge weight to them while its weight plus this rank's arrivals stays
  within the bound; each rank sends its arrivals per cluster to the owner, which
  serves the ranks in an order that rotates with the slice, granting each as much
  weight as keeps the cluster's weight at the slice's start plus the granted
  arrivals within the bound; each rank keeps its first moves into the cluster (in
  vertex order) that fit in its grant and undoes the rest, and tells the owners
  what its kept moves brought into and took out of their clusters; the labels that changed
  go to the ranks that hold those vertices as ghosts
  (:meth:`~hpcgnn.comm.ghosts.Ghosts.changed_values`).  Leaving a cluster never
  raises a weight, so no cluster ever exceeds the bound.
* Once fewer than 0.1% of the vertices move in a round (or after ``rounds``), the
  clusters are numbered: each owner numbers its non-empty clusters, in id order, from
  ``cdist[rank]``.

:func:`contract_across` builds the cluster graph: every rank counts the edges between
the clusters of its vertices (``_ext.contract_clusters``) and sends each cluster's
row and vertex weights to the cluster's owner, which sums the rows that several ranks
sent.  :class:`Projection` carries the coarse parts back to the vertices.

Every step is deterministic for a given seed and rank count.  ``counters`` (a dict)
receives this rank's work: adjacency entries scanned; the values it sends to other
ranks (``values_sent``, rows to itself not counted), and by what for: ``sent_weights``
(reading clusters' weights), ``sent_grants`` (planned moves, their answers and the
weights' sums), ``sent_labels`` (changed labels to the ranks holding them as ghosts,
cluster numbers), ``sent_contraction``; ``full_exchange_values``: what one exchange of
every ghost's label would send, per level (the floor of any label propagation with
ghost labels: on a graph without locality it stays about the same from 2 ranks to as
many as a vertex has neighbours); the exchanges (all-to-alls) it takes part in.
"""
from __future__ import annotations

import numpy as np

from .. import _ext
from ..comm.agree import agreed
from ..comm.alltoall import alltoallv, alltoallv_consume, query
from ..comm.collectives import all_max, all_sum
from ..comm.ghosts import Ghosts
from ..errors import InputError
from .arrays import stable_argsort

#: Slices of each round: ``max(CHUNKS, CHUNKS_PER_RANK * ranks - 2)``.  The ghosts'
#: labels and the clusters' weights are read again after each, so moves on different
#: ranks see each other sooner.  With a fixed count the vertices moving unseen by each
#: other grow with the ranks, and so do the clusters: on a generated 200k-node graph
#: with random ids 4 slices left 9970 clusters at 2 ranks and 13682 at 8.  On the 2M-node
#: graph 1.5 per rank still left 1.15-1.21x the 2-rank count at 4 ranks; 3 per rank
#: keeps it within 0.94-1.05x at 4-32 ranks.  Two ranks keep 4 slices: more slices there
#: cut worse on small planted communities (test_partition_coarsen).  Never more slices
#: than the most blocks a rank holds.
CHUNKS = 4
CHUNKS_PER_RANK = 3
#: First rounds in which a vertex joins only a cluster whose hash is above its own
#: cluster's: all start alone, and two vertices on different ranks would otherwise join
#: each other's clusters in the same slice and stay apart (more clusters, the more ranks).
UP_ROUNDS = 1
#: A weight learnt earlier in the round stands in for reading it again while it is at
#: most this share of the bound: the bound is what a weight decides, and a cluster
#: that light stays below it unless other ranks' moves more than double it within the
#: round (the owner's grant still holds the bound then).  The weights read fell 2.6-5x
#: on a 200k-node graph at 8 and 32 ranks, with the same clusters and cut.
CACHED_BELOW = 0.5
#: Vertices per block of the sweep (``BLK`` in ext/src/label_prop.c).
BLOCK = 256


def owner_of(dist, ids: np.ndarray) -> np.ndarray:
    """Independent: the rank owning each id under the distribution ``dist``."""
    return np.searchsorted(np.asarray(dist, dtype=np.int64), ids, side="right") - 1


def _count(counters, **by):
    if counters is not None:
        for k, v in by.items():
            counters[k] = counters.get(k, 0) + int(v)
            if k.startswith("sent_"):
                counters["values_sent"] = counters.get("values_sent", 0) + int(v)


def _leaving(comm, owners) -> int:
    """Independent: how many of ``owners`` (one rank per value) are not this rank."""
    return int(np.count_nonzero(np.asarray(owners) != comm.Get_rank()))


def _summed_at_owners(comm, dist, lo, n, ids, vals, counters):
    """Collective: per id this rank owns, the sum of ``vals`` every rank sent for it."""
    # one dtype on every rank (alltoallv receives rows as this rank's dtype): a bincount of nothing is int64
    owners = owner_of(dist, ids)
    (got, gv) = alltoallv(comm, owners, ids, np.asarray(vals, dtype=np.float64))
    _count(counters, sent_grants=2 * _leaving(comm, owners), exchanges=1)
    return np.bincount(got - lo, weights=gv, minlength=n)[:n].round().astype(np.int64)


def _allowed(comm, dist, lo, own_w, bound, clusters, arrivals, rot, counters):
    """Collective: for each (cluster, weight arriving from this rank), how much of it
    the cluster's owner takes (the owner serves the ranks in order from ``rot``,
    cyclically, while the cluster's weight ``own_w`` plus what it took stays <=
    ``bound``)."""
    size, me = comm.Get_size(), comm.Get_rank()

    def decide(rows):
        if len(rows) == 0:
            return np.empty((0, 2), dtype=np.int64)
        c, a, src = rows[:, 0] - lo, rows[:, 1], rows[:, 2]
        order = np.lexsort(((src - rot) % size, c))
        cs, ao = c[order], a[order]
        ac = np.cumsum(ao)
        first = np.flatnonzero(np.r_[True, cs[1:] != cs[:-1]])
        before = ac - ao - np.repeat(ac[first] - ao[first], np.diff(np.r_[first, len(cs)]))
        took = np.empty(len(rows), dtype=np.int64)
        took[order] = np.clip(bound - own_w[cs] - before, 0, ao)
        granted = np.bincount(c, weights=took, minlength=len(own_w)).round().astype(np.int64)
        return np.stack([took, own_w[c] + granted[c]], axis=1)

    rows = np.stack([clusters, arrivals, np.full(len(clusters), me, dtype=np.int64)], axis=1)
    owners = owner_of(dist, clusters)
    _count(counters, sent_grants=5 * _leaving(comm, owners), exchanges=2)
    ans = query(comm, owners, rows, decide)
    return ans[:, 0], ans[:, 1]


class WeightCache:
    """The weights of other ranks' clusters as this rank last learnt them in a round
    (ids sorted).  Lowered by this rank's own departures, set again by the owner's
    answer to each planned move (``_allowed``); what other ranks' moves brought in
    since is missing, so only light clusters are read from it (``CACHED_BELOW``)."""

    def __init__(self):
        self.ids = np.empty(0, dtype=np.int64)
        self.w = np.empty(0, dtype=np.int64)

    def _find(self, ids):
        pos = np.searchsorted(self.ids, ids)
        hit = pos < len(self.ids)
        hit[hit] = self.ids[pos[hit]] == ids[hit]
        return pos, hit

    def get(self, ids):
        """``(weights, known)``: the cached weight of each id (0 where not known)."""
        pos, hit = self._find(ids)
        w = np.zeros(len(ids), dtype=np.int64)
        w[hit] = self.w[pos[hit]]
        return w, hit

    def update(self, ids, w):
        """Set the weights of ``ids`` (distinct), adding the ids not yet cached."""
        pos, hit = self._find(ids)
        self.w[pos[hit]] = w[hit]
        new = ~hit
        if new.any():
            ni, nw = ids[new], w[new]
            o = np.argsort(ni)
            at = np.searchsorted(self.ids, ni[o])
            self.ids = np.insert(self.ids, at, ni[o])
            self.w = np.insert(self.w, at, nw[o])

    def add(self, ids, delta):
        """Add ``delta`` to the cached weights of ``ids`` (repeats summed; others ignored)."""
        pos, hit = self._find(ids)
        np.add.at(self.w, pos[hit], delta[hit])


def _weights(comm, dist, lo, n, ctx, uniq, counters):
    """Collective: the weight of each cluster in ``uniq``: this rank's own from
    ``own_w``; another rank's from the round's cache if it knows the cluster and holds
    it at most ``CACHED_BELOW * bound``, else read from its owner."""
    mine = (uniq >= lo) & (uniq < lo + n)
    cw = np.empty(len(uniq), dtype=np.int64)
    cw[mine] = ctx["own_w"][uniq[mine] - lo]
    rest = uniq[~mine]
    w, known = ctx["cache"].get(rest)
    known &= w <= CACHED_BELOW * ctx["bound"]
    miss = rest[~known]
    own_w = ctx["own_w"]
    w[~known] = query(comm, owner_of(dist, miss), miss, lambda ids: own_w[ids - lo])
    ctx["cache"].update(miss, w[~known])
    cw[~mine] = w
    _count(counters, sent_weights=2 * len(miss), exchanges=2)
    return cw


def _kept(cinv, wm, allowed):
    """Independent: which moves stay (``cinv``: each move's cluster among this rank's
    targets, ``wm``: its weight): the first moves into each cluster, in vertex order,
    while their weight fits in what the owner ``allowed``."""
    order = np.argsort(cinv, kind="stable")
    cs, wo = cinv[order], wm[order]
    ac = np.cumsum(wo)
    first = np.flatnonzero(np.r_[True, cs[1:] != cs[:-1]]) if len(cs) else np.empty(0, np.int64)
    within = ac - np.repeat(ac[first] - wo[first], np.diff(np.r_[first, len(cs)]))
    keep = np.empty(len(cinv), dtype=bool)
    keep[order] = within <= allowed[cs]
    return keep


def _ranges(starts, ends):
    """Independent: the concatenation of ``arange(s, e)`` for each pair."""
    lens = ends - starts
    if lens.sum() == 0:
        return np.empty(0, dtype=np.int64)
    return np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())


def _slice(comm, dist, lo, n, ctx, blocks, seed, rot, counters, up=False):
    """Collective: one slice of a round (the module's docstring); ``ctx`` holds the
    graph, the labels (``lab`` own, ``glab`` own + ghosts) and the weights of this
    rank's clusters (``own_w``), updated.  Returns the moves kept."""
    v0 = blocks * BLOCK
    verts = _ranges(v0, np.minimum(v0 + BLOCK, n))
    clab = ctx["clab"]                  # entries outside the slice's view are never read
    uniq = _ext.lp_view_labels(ctx["xadj"], ctx["adjncy"], blocks, ctx["glab"], ctx["mark"], clab)
    own_w = ctx["own_w"]
    cw = _weights(comm, dist, lo, n, ctx, uniq, counters)
    scanned = 0
    with agreed(comm):                  # a kernel error (memory) ends every rank
        _, scanned = _ext.lp_sweep(ctx["xadj"], ctx["adjncy"], ctx["w0"], clab, cw, uniq, ctx["bound"], blocks,
                                   seed, adjwgt=ctx["adjwgt"], up=up)
    _count(counters, edges_scanned=scanned)
    now = uniq[clab[verts]]
    mv = now != ctx["lab"][verts]
    moved, new = verts[mv], now[mv]
    del cw, now, mv
    cu, cinv = np.unique(new, return_inverse=True)
    wm = ctx["w0"][moved]
    allowed, after = _allowed(comm, dist, lo, own_w, ctx["bound"], cu,
                              np.bincount(cinv, weights=wm, minlength=len(cu)).round().astype(np.int64), rot,
                              counters)
    theirs = (cu < lo) | (cu >= lo + n)
    ctx["cache"].update(cu[theirs], after[theirs])
    keep = _kept(cinv, wm, allowed)
    _count(counters, moves_rejected=len(keep) - int(np.count_nonzero(keep)))
    moved, new, wm = moved[keep], new[keep], wm[keep]
    du, di = np.unique(np.concatenate([new, ctx["lab"][moved]]), return_inverse=True)
    own_w += _summed_at_owners(comm, dist, lo, n, du,            # arrivals in, departures out
                               np.bincount(di, weights=np.concatenate([wm, -wm]), minlength=len(du)), counters)
    ctx["cache"].add(ctx["lab"][moved], -wm)                     # what this rank's moves took out
    ctx["lab"][moved] = new
    ctx["glab"][moved] = new
    changed = np.zeros(n, dtype=bool)
    changed[moved] = True
    idx, vals = ctx["ghosts"].changed_values(ctx["lab"], changed)     # only the labels that moved
    ctx["glab"][n + idx] = vals
    _count(counters, sent_labels=2 * int(changed[ctx["ghosts"].send_idx].sum()), exchanges=2)
    return len(moved)


def cross_lp_clusters(comm, vtxdist, xadj, adjncy, w0, bound: int, seed: int, rounds: int, ghosts: Ghosts,
                      adjwgt=None, counters=None):
    """Collective: size-constrained LP clusters across rank blocks.

    ``adjncy``: this rank's adjacency in the table indices of ``ghosts`` (after
    :meth:`Ghosts.to_local`); ``w0``: the vertices' weights, no cluster heavier than
    ``bound``.  Returns ``(label, cdist, rounds run)``: ``label`` (int64) the global
    cluster of each local vertex, ``cdist`` the clusters' distribution (rank ``r``
    owns clusters ``cdist[r]:cdist[r+1]``)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    lo, n = int(vtxdist[rank]), ghosts.n
    lab = np.arange(lo, lo + n, dtype=np.int64)
    glab = np.empty(ghosts.size, dtype=np.int64)
    glab[:n], glab[n:] = lab, ghosts.values(lab)
    _count(counters, sent_labels=len(ghosts.send_idx), full_exchange_values=len(ghosts.send_idx), exchanges=1)
    ctx = {"xadj": np.ascontiguousarray(xadj, dtype=np.int64), "adjncy": adjncy, "lab": lab, "glab": glab,
           "w0": np.ascontiguousarray(w0, dtype=np.int64), "bound": int(bound),
           "adjwgt": None if adjwgt is None else np.ascontiguousarray(adjwgt, dtype=np.int64), "ghosts": ghosts,
           "clab": np.zeros(ghosts.size, dtype=np.int32), "mark": np.zeros(ghosts.size, dtype=np.uint8)}
    ctx["own_w"] = ctx["w0"].copy()         # every vertex starts as its own cluster
    rng = np.random.default_rng([int(seed) % 2**32, rank])
    nb, N, done = -(-n // BLOCK), int(vtxdist[-1]), 0
    # no more slices than the most blocks a rank holds: beyond that every rank's slice is
    # empty and only its exchanges would run (200k nodes at 32 ranks: 25 blocks, 94
    # slices); the owners' order of service still turns as with every slice run
    turns = max(CHUNKS, CHUNKS_PER_RANK * size - 2)
    chunks = min(turns, max(1, all_max(comm, nb)))
    for r in range(max(1, rounds)):
        moves = 0
        ctx["cache"] = WeightCache()        # read again each round
        for k, blocks in enumerate(np.array_split(rng.permutation(nb).astype(np.int64), chunks)):
            moves += _slice(comm, vtxdist, lo, n, ctx, blocks, int(seed) * 1000003 + 97 * r,
                            (r * turns + k) % size, counters, up=r < UP_ROUNDS)
        done = r + 1
        if all_sum(comm, moves) * 1000 < N:
            break
    label, cdist = _numbered(comm, vtxdist, lo, n, lab, counters)
    return label, cdist, done


def _numbered(comm, vtxdist, lo, n, lab, counters):
    """Collective: clusters renumbered ``cdist[owner] + i`` (``i``: the cluster's rank
    among its owner's non-empty clusters, in id order)."""
    u, inv = np.unique(lab, return_inverse=True)
    out = {}

    def number(ids):     # query calls it on every rank at once: it may gather
        present = np.zeros(n, dtype=bool)
        present[ids - lo] = True
        ks = np.array(comm.allgather(int(present.sum())), dtype=np.int64)
        out["cdist"] = np.concatenate([[0], np.cumsum(ks)]).astype(np.int64)
        return (np.cumsum(present) - 1 + out["cdist"][comm.Get_rank()])[ids - lo]

    owners = owner_of(vtxdist, u)
    ids = query(comm, owners, u, number)
    _count(counters, sent_labels=2 * _leaving(comm, owners), exchanges=2)
    return ids[inv].astype(np.int64), out["cdist"]


def contract_across(comm, cdist, xadj, adjncy, label, ghosts: Ghosts, weights, adjwgt=None, counters=None):
    """Collective: the cluster graph of ``label`` (global cluster ids, clusters owned as
    ``cdist``), distributed as ``cdist``.  ``adjncy``: table indices of ``ghosts``.
    Returns ``(cxadj, cadj, cadjwgt, cvwgt)`` as :func:`.coarsen.contract`."""
    rank = comm.Get_rank()
    n, K = ghosts.n, int(cdist[-1])
    with agreed(comm):      # cdist is the same on every rank: so is this error
        if K > np.iinfo(np.int32).max:
            raise InputError(f"coarsen: label propagation left {K} clusters, more than the 2^31-1 that the "
                             f"contraction's int32 cluster ids (and ParMETIS' idx_t) hold: the graph barely "
                             f"clusters; partition it with --method random (rank {rank})")
    theirs = ghosts.values(label)
    _count(counters, sent_contraction=len(ghosts.send_idx), exchanges=1)
    own_u = np.unique(label)
    rest = np.setdiff1d(np.unique(theirs), own_u, assume_unique=True)
    names = np.concatenate([own_u, rest])                   # rows: own_u; table: own_u, then the rest
    srt = np.argsort(names, kind="stable")
    tab = np.empty(ghosts.size, dtype=np.int32)
    tab[:n] = srt[np.searchsorted(names[srt], label)]
    tab[n:] = srt[np.searchsorted(names[srt], theirs)]
    del theirs, srt
    k = len(own_u)
    members = stable_argsort(tab[:n])
    cstart = np.concatenate([[0], np.cumsum(np.bincount(tab[:n], minlength=k))]).astype(np.int64)
    cx, ca, cw = _ext.contract_clusters(cstart, members, np.ascontiguousarray(xadj, dtype=np.int64), adjncy,
                                        tab, len(names), 0,
                                        adjwgt=None if adjwgt is None else np.ascontiguousarray(adjwgt, np.int64))
    lab_own = tab[:n].copy()
    del tab, members
    rows = np.repeat(own_u, np.diff(cx))
    u_owner = owner_of(cdist, own_u)
    away = u_owner != rank                                   # rows and weights of clusters other ranks own
    _count(counters, sent_contraction=3 * int(np.diff(cx)[away].sum()) + (1 + len(weights)) * int(away.sum()),
           exchanges=2)
    rows, cols, wgt = alltoallv_consume(comm, [rows, names[ca], cw], lambda r: owner_of(cdist, r))
    del ca, cw
    c_lo, kc = int(cdist[rank]), int(cdist[rank + 1] - cdist[rank])
    key = (rows - c_lo) * K + cols
    del rows, cols
    order = np.argsort(key, kind="stable")
    key, wgt = key[order], wgt[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.empty(0, np.int64)
    cadjwgt = np.add.reduceat(wgt, first) if len(key) else np.empty(0, np.int64)
    key = key[first]
    cadj = key % K
    cxadj = np.zeros(kc + 1, dtype=np.int64)
    np.cumsum(np.bincount(key // K, minlength=kc), out=cxadj[1:])
    vw = np.stack([np.bincount(lab_own, weights=np.asarray(c, dtype=np.float64), minlength=k)
                   for c in weights], axis=1).round().astype(np.int64)
    (ids, vals) = alltoallv(comm, u_owner, own_u, vw)
    cvwgt = np.zeros((kc, len(weights)), dtype=np.int64)
    np.add.at(cvwgt, ids - c_lo, vals)
    return cxadj, cadj.astype(np.int64), cadjwgt.astype(np.int64), cvwgt


class Projection:
    """Collective: carries parts of the clusters (distributed as ``cdist``) back to this
    rank's vertices, whose clusters are ``label`` (global ids, any rank's)."""

    def __init__(self, comm, cdist, label):
        self._table = np.array(label, dtype=np.int64)       # rewritten into table indices
        self._ghosts = Ghosts(comm, cdist, self._table)
        self._ghosts.to_local(self._table)
        self._ghosts.drop_ids()

    def __call__(self, parts: np.ndarray) -> np.ndarray:
        """Collective: the part of each vertex, given the parts of this rank's clusters."""
        parts = np.asarray(parts, dtype=np.int64)
        return np.ascontiguousarray(np.concatenate([parts, self._ghosts.values(parts)])[self._table])
