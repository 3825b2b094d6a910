"""Coarsening by size-constrained label propagation, then seeded partitions of the
coarsest cluster graph refined back up.

ParMETIS coarsens by heavy-edge matching, which shrinks power-law ("complex")
networks slowly: hubs match with one neighbour per level and the levels pile up.
As ParHIP and KaMinPar do for such graphs, the pipeline first clusters the
symmetric view with a few rounds of label propagation: each vertex joins the
neighbouring cluster with the most edges to it, provided the cluster's weight (the
first constraint column, node counts) stays below
``U = max(1, total / (nparts * cluster_factor))``, so no cluster is too heavy for
the balance constraints.  On several ranks a vertex may join a cluster of a
neighbour on another rank (:mod:`.cross_lp`: ghost labels exchanged, cluster weights
agreed by the clusters' owners), so the clusters, the cluster graph and the cut do
not depend on how many ranks split the vertex ids; on one rank (and on a gathered
cluster graph) the compiled kernel clusters the whole graph alone.

The clusters are contracted into a weighted graph (vertex weights: the sums of every
constraint column; edge weights: the number of symmetric-view edges between two
clusters).  The same clustering, on edge weights, is applied to that graph again
while it shrinks by at least a third and holds more than ``COARSEST_PER_PART``
vertices per part, up to ``MAX_LEVELS`` levels (on graphs without small dense
communities the first level leaves most edges between clusters, and ParMETIS' time
follows the edges).  Once a cluster graph has at most ``GATHER_ENTRIES`` adjacency
entries, and its copies on all ranks together at most ``GATHER_FRACTION`` of the input's,
it is gathered on every rank, and the coarser levels are built on it whole
(otherwise, with more ranks, every level's clusters would see only one rank's share
of the neighbours).  The coarsest graph is partitioned from several seeds
(:mod:`.coarsest`: serial METIS spread over the ranks); going back
level by level, every vertex takes its cluster's part and a few sweeps of k-way
label-propagation refinement (:func:`refine`) move single vertices to the part with
the most edge weight to them, within the balance bound of every constraint, or,
where that part is full, swap them with vertices of that part that want theirs.
The rebalancing pass (:mod:`.balance`) then evens out 0/1 columns as before.

The compiled kernels are ``hpcgnn._ext.lp_cluster``, ``lp_sweep``, ``lp_view_labels`` and
``contract_clusters`` (``ext/src/label_prop.c``).
"""
from __future__ import annotations

import time

import numpy as np

from .. import _ext
from ..comm.agree import agreed
from ..comm.collectives import all_sum, allreduce
from ..comm.ghosts import Ghosts
from ..comm.mpi import MPI
from ..errors import InputError
from .arrays import stable_argsort
from .blockstart import id_range_parts, within_bounds
from .cross_lp import Projection, contract_across, cross_lp_clusters
from .coarsest import gather_graph, starts, uneven

#: Coarsening methods accepted by ``partition_graph(coarsen=...)``; ``auto`` is ``lp``
#: for graphs of at least ``AUTO_LP_NODES`` nodes and ``none`` below.
COARSEN_METHODS = ("auto", "lp", "none")
AUTO_LP_NODES = 1_000_000

#: Default LP sweeps and cluster bound divisor.  A cluster holds at most
#: ``total / (nparts * CLUSTER_FACTOR)`` nodes; 32, not 256: larger clusters make the
#: coarsest cut predict the final one (a generated 200k-node graph, random ids, 4 parts:
#: 0.400 at 2-16 ranks, where 256 left 0.467 at 16), cut fewer edges on small planted
#: communities (20k nodes, 4 parts: 0.88-0.94x plain ParMETIS at 1-3 ranks, 256:
#: 0.96-1.08x) and cost less (the products-sized graph at 2 ranks: 62 s, not 79 s, cut
#: 0.301 against 0.298).  KaMinPar's bound, eps * n / k, is about as large.
LP_ROUNDS = 10
CLUSTER_FACTOR = 32
#: Most sweeps of label-propagation refinement at each level after projecting the parts
#: back: ``REFINE_ROUNDS + REFINE_PER_RANK * ranks`` (each rank fills 1/ranks of a part's
#: free room per sweep, so more ranks need more sweeps: at 8 ranks 12 left the cut 11%
#: worse than at 2 on a generated 200k-node graph; it stops early once moves are rare).
REFINE_ROUNDS = 12
REFINE_PER_RANK = 2
#: Vertices whose better part is full trade places with ones of that part that want
#: theirs (both parts staying within their bounds), where greedy moves alone stall
#: once the parts are full.
REFINE_SWAP = True
#: Most levels of clustering; a level that keeps more than ``MIN_SHRINK`` of the
#: previous level's vertices ends the coarsening, and so does a level with at most
#: ``COARSEST_PER_PART`` vertices per part (as KaMinPar's contraction limit).
MAX_LEVELS = 3
MIN_SHRINK = 0.67
COARSEST_PER_PART = 2000
#: A cluster graph with at most this many adjacency entries (int64 ids + weights: 16
#: bytes each on every rank) is gathered, and the coarser levels are built on it whole.
GATHER_ENTRIES = 1 << 25
#: ... and only when its copies on all ranks together hold at most this fraction of
#: the input graph's adjacency entries: every rank holds one copy, so past that the
#: copies, not the graph, set the job's peak memory (it stays distributed one more level)
GATHER_FRACTION = 1 / 8
#: Partitions (seeds) of the coarsest graph, and how many of them (smallest cut first)
#: are refined back through every level at a time, the smallest final cut kept.  On
#: graphs whose communities label propagation does not find (a generated graph of 16
#: classes, half its edges inside them: clusters are 20% pure, the coarsest partition
#: projected back cuts 0.67, as a random one would) the coarsest cut predicts nothing
#: and the finest refinement lands in one of two modes (0.400 or 0.45-0.49), so four more
#: starts are refined while the final cuts so far differ by more than ``REFINE_SPREAD``
#: (their spread shows the draw) and the last four found a cut smaller by more than
#: that; where the coarsest cut predicts the final one (the products-sized graph: four
#: final cuts within 0.25%) four are refined.
TRIES = 16
REFINED = 4
REFINE_SPREAD = 0.02
#: Adjacency entries per chunk when a level's cut is counted: its temporary arrays take
#: about 17 bytes per entry (25 with edge weights), whatever the vertices' degrees.
CUT_CHUNK = 1 << 20
#: The clustering kernel labels a rank's vertices with int32: fewer than this many per rank.
LOCAL_LIMIT = int(np.iinfo(np.int32).max)

def resolve_coarsen(coarsen: str, num_nodes: int) -> str:
    """Independent: the coarsening ``coarsen`` stands for on a graph of ``num_nodes``."""
    if coarsen == "auto":
        return "lp" if num_nodes >= AUTO_LP_NODES else "none"
    return coarsen


def lp_clusters(comm, vtxdist, xadj, adjncy, w0, nparts: int, seed: int, rounds: int = LP_ROUNDS,
                cluster_factor: int = CLUSTER_FACTOR, adjwgt=None, total: int | None = None, ghosts=None):
    """Collective: LP clusters of this rank's vertices, formed inside its block (neighbours on
    other ranks are not read): the whole graph's clusters on one rank.

    Returns ``(label, cdist)``: ``label`` the local cluster of each local vertex
    (``[0, k)``), ``cdist`` the cluster distribution (rank ``r`` owns global clusters
    ``cdist[r]:cdist[r+1]``; global id = ``cdist[rank] + label``).  ``total``: the
    graph's whole first-column weight (default: the sum of ``w0`` over the ranks).
    ``ghosts``: the :class:`~hpcgnn.comm.ghosts.Ghosts` whose ``to_local`` rewrote
    ``adjncy`` (None: ``adjncy`` holds global ids).
    """
    rank = comm.Get_rank()
    lo = int(vtxdist[rank]) if ghosts is None else 0
    w0 = np.ascontiguousarray(w0, dtype=np.int64)
    if total is None:
        total = all_sum(comm, int(w0.sum()))
    bound = max(1, total // (max(1, nparts) * cluster_factor))
    with agreed(comm):
        counts = np.diff(np.asarray(vtxdist, dtype=np.int64))
        if int(counts.max()) >= LOCAL_LIMIT:    # the kernel's local labels are int32
            raise InputError(f"coarsen: a rank holds {int(counts.max())} vertices; label propagation takes at most "
                             f"{LOCAL_LIMIT - 1} (2^31-2) per rank: run on at least "
                             f"{-(-int(counts.sum()) // (LOCAL_LIMIT - 1))} ranks (rank {rank})")
    with agreed(comm):   # a kernel error (memory) ends every rank
        k, label = _ext.lp_cluster(np.ascontiguousarray(xadj, dtype=np.int64),
                                   np.ascontiguousarray(adjncy, dtype=np.int64), lo, w0, int(bound),
                                   int(rounds), int(seed) * 1000003 + rank, adjwgt=_opt(adjwgt))
    ks = np.array(comm.allgather(int(k)), dtype=np.int64)
    cdist = np.concatenate([[0], np.cumsum(ks)]).astype(np.int64)
    return label, cdist


def _opt(a):
    return None if a is None else np.ascontiguousarray(a, dtype=np.int64)


def contract(comm, vtxdist, xadj, adjncy, label, cdist, weights: list[np.ndarray], adjwgt=None, ghosts=None):
    """Collective: the cluster graph, distributed as ``cdist``.

    Returns ``(cxadj, cadj, cadjwgt, cvwgt)``: CSR over global cluster ids without self
    loops, summed edge weights (multiplicities when ``adjwgt`` is None), and an
    ``(k, ncon)`` array of summed vertex weights.  ``ghosts``: as for
    :func:`lp_clusters` (None: found here, ``adjncy`` rewritten and restored).  Reads
    the clusters of this rank's ghosts only, and counts into a table over its own
    clusters and the ghosts' (fewer than 2**31 clusters in all, else an agreed
    :class:`InputError`; ParMETIS' 32-bit ``idx_t`` requires as much anyway).
    """
    rank = comm.Get_rank()
    k = int(cdist[rank + 1] - cdist[rank])
    with agreed(comm):      # cdist is the same on every rank: so is this error
        if int(cdist[-1]) > np.iinfo(np.int32).max:
            raise InputError(f"coarsen: label propagation left {int(cdist[-1])} clusters, more than the 2^31-1 "
                             f"that the contraction's int32 cluster ids (and ParMETIS' idx_t) hold: the graph "
                             f"barely clusters; partition it with --method random (rank {rank})")
    own = ghosts is None
    if own:
        adjncy = np.require(adjncy, np.int64, ["C", "W"])     # rewritten in place: a copy if read-only
        ghosts = Ghosts(comm, vtxdist, adjncy)
        ghosts.to_local(adjncy)
    try:
        c_lo = int(cdist[rank])
        # the ghosts' global clusters: other ranks' (clusters never span two ranks' blocks)
        theirs = ghosts.values((np.asarray(label) + c_lo).astype(np.int32))
        foreign = np.unique(theirs)
        lab = np.empty(ghosts.size, dtype=np.int32)       # own clusters [0, k), then the foreign ones
        lab[:ghosts.n] = label
        for s in range(0, len(theirs), 1 << 20):
            lab[ghosts.n + s:ghosts.n + s + (1 << 20)] = np.searchsorted(foreign, theirs[s:s + (1 << 20)]) + k
        del theirs
        order = stable_argsort(label)
        sizes = np.bincount(label, minlength=k)
        cstart = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        cxadj, cadj, cadjwgt = _ext.contract_clusters(cstart, order, np.ascontiguousarray(xadj, dtype=np.int64),
                                                      adjncy, lab, k + len(foreign), 0, adjwgt=_opt(adjwgt))
    finally:
        if own:
            ghosts.to_global(adjncy)
    del lab
    for s in range(0, len(cadj), 1 << 20):    # table indices -> global cluster ids
        c = cadj[s:s + (1 << 20)]
        out = c >= k
        c[out] = foreign[c[out] - k]
        c[~out] += c_lo
    cvwgt = np.stack([np.bincount(label, weights=np.asarray(c, dtype=np.float64), minlength=k)
                      .round().astype(np.int64) for c in weights], axis=1)
    return cxadj, cadj, cadjwgt, cvwgt


def refine(comm, vtxdist, xadj, adjncy, parts, w, nparts: int, ubvec, seed: int,
           rounds: int | None = None, adjwgt=None, ghosts=None) -> int:
    """Collective: k-way label-propagation refinement of ``parts`` (in place).

    ``w``: ``(n, ncon)`` vertex weights (every balance constraint).  Each round
    brings the parts of this rank's ghosts over (``ghosts``: as for
    :func:`lp_clusters`), then every rank sweeps its vertices once,
    moving a vertex to the part with the most edge weight to it when every weight
    column ``j`` of that part stays within ``ubvec[j]`` (or the scalar ``ubvec``) of
    its mean; each rank may fill only its share (``1/R``) of a part's free room, so the
    bounds hold after all ranks moved.  A vertex whose better part is full waits for a
    vertex of this rank in that part that wants its part, and the two swap where both
    parts stay within this rank's share (``REFINE_SWAP``).
    Stops early once fewer than 0.1% of the vertices move.  Returns the number of moves."""
    R = comm.Get_size()
    rounds = REFINE_ROUNDS + REFINE_PER_RANK * R if rounds is None else rounds
    w = np.asarray(w, dtype=np.int64)
    w = np.ascontiguousarray(w if w.ndim == 2 else w.reshape(len(xadj) - 1, -1))   # (n, ncon); n may be 0
    xadj = np.ascontiguousarray(xadj, dtype=np.int64)
    own = ghosts is None
    if own:
        adjncy = np.require(adjncy, np.int64, ["C", "W"])     # rewritten in place: a copy if read-only
        ghosts = Ghosts(comm, vtxdist, adjncy)
        ghosts.to_local(adjncy)
    adjwgt = _opt(adjwgt)
    total = allreduce(comm, w.sum(axis=0), "sum", dtype=np.int64)
    ub = np.broadcast_to(np.asarray(ubvec, dtype=np.float64), total.shape)
    limit = np.floor(ub * total / nparts).astype(np.int64)
    gpart = np.empty(ghosts.size, dtype=np.int32)     # this rank's parts, then its ghosts'
    moved = 0
    try:
        for r in range(rounds):
            local = np.ascontiguousarray(parts, dtype=np.int64)
            gpart[ghosts.n:] = ghosts.values(local.astype(np.int32))
            pw = np.zeros((nparts, w.shape[1]), dtype=np.int64)
            for j in range(w.shape[1]):
                pw[:, j] = np.bincount(local, weights=w[:, j], minlength=nparts)
            pw = allreduce(comm, pw, "sum", dtype=np.int64)
            cap = np.ascontiguousarray(pw + np.maximum(limit[None, :] - pw, 0) // R, dtype=np.int64)
            m = _ext.lp_refine(xadj, adjncy, 0, gpart, local, w, pw.copy(), cap,
                               int(seed) * 7919 + 31 * r + comm.Get_rank(), adjwgt=adjwgt, swap=REFINE_SWAP)
            parts[:] = local
            m = all_sum(comm, int(m))
            moved += m
            if m * 1000 < int(vtxdist[-1]):
                break
    finally:
        if own:
            ghosts.to_global(adjncy)
    return moved


def coarsened_parts(comm, vtxdist, xadj, adjncy, weights: list[np.ndarray], nparts: int, seed: int,
                    ubvec=1.05, rounds: int = LP_ROUNDS,
                    cluster_factor: int = CLUSTER_FACTOR, max_levels: int = MAX_LEVELS,
                    tries: int = TRIES, refined: int = REFINED, keep_adjncy: bool = True) -> tuple[np.ndarray, dict]:
    """Collective: parts of this rank's vertices via LP clustering (up to ``max_levels``
    levels) + ParMETIS on the coarsest graph + LP refinement back up.  ``weights[0]``
    bounds the cluster sizes; ``ubvec``: the imbalance allowed for each weight column
    (or one value for all).  Once a cluster graph is small enough (``GATHER_ENTRIES``,
    ``GATHER_FRACTION``) it is gathered on every rank, and the coarser levels are
    clustered, partitioned and refined there as one graph (the same seeds give every
    rank the same result): clusters are no longer confined to one rank's block.
    Each level's adjacency is rewritten into table indices (:class:`Ghosts`) while it
    is clustered, contracted and refined; ``keep_adjncy=False`` leaves the caller's
    ``adjncy`` so (the caller drops it) instead of holding 8 bytes per ghost to write
    it back.  The coarsest graph is partitioned ``tries`` times (:func:`.coarsest.starts`:
    serial METIS with one seed each, spread over the ranks, or ParMETIS on a coarsest
    graph too large to copy); the partitions of smallest cut are carried back and
    refined through every level, ``refined`` at a time while their final cuts differ
    by more than ``REFINE_SPREAD`` and the last ones found a smaller cut, and the one
    cutting least on the input graph is kept.  Returns ``(parts, info)``
    with ``info`` holding each level's size and the seconds of each step."""
    t0 = time.perf_counter()
    adjncy = np.require(adjncy, np.int64, ["C", "W"])     # rewritten in place: a copy if read-only
    clock = {"lp": 0.0, "contract": 0.0}
    # this rank's work clustering across rank blocks (cross_lp's counters)
    work = dict.fromkeys(("edges_scanned", "values_sent", "sent_weights", "sent_grants", "sent_labels",
                          "sent_contraction", "full_exchange_values", "exchanges", "moves_rejected"), 0)
    levels, sizes, restore = [], [], []
    nedge = all_sum(comm, len(adjncy))
    try:
        cur, dist, gx, ga, gw, vw = _coarsen(comm, vtxdist, xadj, adjncy, weights, nparts, seed, rounds,
                                             cluster_factor, max_levels, levels, sizes, restore, clock,
                                             keep_adjncy, work)
        t2 = time.perf_counter()
        ncon = len(weights)
        ub = np.broadcast_to(np.asarray(ubvec, dtype=np.float64), (ncon,)).copy()
        found, method = starts(comm, cur, dist, (gx, ga, gw, vw), nparts, ub, seed, tries,
                               int(nedge * GATHER_FRACTION), levels)
        t3 = time.perf_counter()
        best, cuts = None, []
        for i, p in enumerate(found):
            if i and i % max(1, refined) == 0 and _enough(cuts, max(1, refined)):
                break
            parts, moved = _refine_up(levels, p, nparts, ub, seed)
            cuts.append(_level_cut(levels[0], parts))
            if best is None or cuts[-1] < best[0]:
                best = (cuts[-1], parts, moved)
        range_cut, ranged = _id_ranges(levels[0], nparts, ub, seed, best[0])
        if ranged is not None:
            best = ranged
        _, parts, moved = best
    finally:
        for gh, a in restore:        # the caller's adjacency holds global ids again
            gh.to_global(a)
    t4 = time.perf_counter()
    tmax = allreduce(comm, [clock["lp"], clock["contract"], t3 - t2, t4 - t3], "max")
    info = {"method": "lp", "rounds": int(rounds), "cluster_factor": int(cluster_factor),
            "levels": sizes, "clusters": sizes[-1]["clusters"], "cluster_edges": sizes[-1]["cluster_edges"],
            "inter_cluster_edge_fraction": round(sizes[0]["edge_weight"] / max(1, nedge), 4),
            "lp_s": round(float(tmax[0]), 3), "contract_s": round(float(tmax[1]), 3),
            "coarsest": method, "parmetis_s": round(float(tmax[2]), 3), "refine_moves": int(moved),
            "refined_cuts": cuts, "id_range_cut": range_cut, "id_ranges_kept": ranged is not None,
            "refine_s": round(float(tmax[3]), 3), "total_s": round(time.perf_counter() - t0, 3),
            "per_rank": {k: comm.allgather(int(v)) for k, v in sorted(work.items())}}
    return parts, info


def _enough(cuts: list, batch: int) -> bool:
    """Independent: whether the starts refined so far (their final ``cuts``, in batches
    of ``batch``) settle it: the finals agree within ``REFINE_SPREAD``, or the last
    batch found no cut smaller by more than that."""
    if max(cuts) <= (1 + REFINE_SPREAD) * min(cuts):
        return True
    return len(cuts) > batch and min(cuts[-batch:]) >= min(cuts[:-batch]) / (1 + REFINE_SPREAD)


def _coarsen(comm, vtxdist, xadj, adjncy, weights, nparts, seed, rounds, cluster_factor, max_levels,
             levels, sizes, restore, clock, keep_adjncy, work):
    """Collective: cluster and contract level by level (``levels``, ``sizes`` and
    ``restore`` filled as it goes); returns the coarsest graph ``(comm, dist, xadj,
    adjncy, adjwgt, vertex weight columns)`` in global ids.  Each distributed level's
    adjacency is rewritten into its :class:`Ghosts` table indices, and stays so for
    the refinement."""
    total = all_sum(comm, int(np.asarray(weights[0]).sum()))
    gather_max = min(GATHER_ENTRIES, int(all_sum(comm, len(adjncy)) * GATHER_FRACTION
                                         // comm.Get_size()))
    n_all = int(vtxdist[-1])
    cur = comm
    dist, gx, ga, gw, vw = vtxdist, xadj, adjncy, None, [np.asarray(c) for c in weights]
    bound = max(1, total // (max(1, nparts) * cluster_factor))
    for level in range(max(1, max_levels)):
        t = time.perf_counter()
        gh = Ghosts(cur, dist, ga)
        gh.to_local(ga)
        if level == 0 and keep_adjncy:
            restore.append((gh, ga))
        label, cdist, done = _clusters(cur, dist, gx, ga, vw[0], bound, nparts, seed + level, rounds,
                                       cluster_factor, gw, total, gh, work)
        t1 = time.perf_counter()
        clock["lp"] += t1 - t
        K = int(cdist[-1])
        if level > 0 and K > MIN_SHRINK * int(dist[-1]):
            gh.to_global(ga)
            break                     # no longer shrinking: partition this level
        if cur.Get_size() > 1:
            cx, ca, cw, cv = contract_across(cur, cdist, gx, ga, label, gh, vw, adjwgt=gw, counters=work)
        else:
            cx, ca, cw, cv = contract(cur, dist, gx, ga, label, cdist, vw, adjwgt=gw, ghosts=gh)
        if level > 0 or not keep_adjncy:
            gh.drop_ids()             # refinement reads the ghosts' parts: it needs no ids
        proj = Projection(cur, cdist, label if cur.Get_size() > 1 else label + cdist[cur.Get_rank()])
        levels.append((cur, dist, gx, ga, gw, np.stack(vw, axis=1), proj, gh))
        dist, gx, ga, gw, vw = cdist, cx, ca, cw, [cv[:, j] for j in range(cv.shape[1])]
        ne = all_sum(cur, len(ca))
        sizes.append({"clusters": K, "cluster_edges": int(ne), "edge_weight": all_sum(cur, int(cw.sum())),
                      "gathered": cur.Get_size() == 1 and comm.Get_size() > 1, "lp_rounds": done,
                      "across_ranks": cur.Get_size() > 1})
        if cur.Get_size() > 1 and ne <= gather_max:
            levels.append(("gather", cur, dist))
            gx, ga, gw, vw = gather_graph(cur, dist, gx, ga, gw, vw)
            dist, cur = np.array([0, K], dtype=np.int64), MPI.COMM_SELF
        clock["contract"] += time.perf_counter() - t1
        if K > MIN_SHRINK * n_all or K <= COARSEST_PER_PART * nparts:
            break
        n_all = K
    return cur, dist, gx, ga, gw, vw


def _clusters(comm, dist, xadj, adjncy, w0, bound, nparts, seed, rounds, cluster_factor, adjwgt, total, ghosts,
              work):
    """Collective: one level's clusters, across rank blocks on several ranks
    (:func:`.cross_lp.cross_lp_clusters`), by the local kernel on one; returns
    ``(label, cdist, rounds run)`` (``label``: global cluster ids on several ranks, this
    rank's ``[0, k)`` on one)."""
    if comm.Get_size() > 1:
        with agreed(comm):
            if ghosts.size >= LOCAL_LIMIT:    # the sweep's table indices are int32
                raise InputError(f"coarsen: a rank holds {ghosts.size} vertices and ghosts; label propagation "
                                 f"takes at most {LOCAL_LIMIT - 1} (2^31-2) per rank: run on more ranks "
                                 f"(rank {comm.Get_rank()})")
        return cross_lp_clusters(comm, dist, xadj, adjncy, w0, bound, seed, rounds, ghosts, adjwgt=adjwgt,
                                 counters=work)
    label, cdist = lp_clusters(comm, dist, xadj, adjncy, w0, nparts, seed, rounds, cluster_factor,
                               adjwgt=adjwgt, total=total, ghosts=ghosts)
    return label, cdist, rounds


def _level_cut(entry, parts) -> int:
    """Collective: the edge weight ``parts`` cuts in the level ``entry`` (each edge
    counted from both ends), read in chunks of about ``CUT_CHUNK`` entries."""
    c, _, x, a, w, _, _, gh = entry
    parts = np.asarray(parts, dtype=np.int64)
    tab = np.concatenate([parts, gh.values(parts)])
    cut, n, v0 = 0, len(x) - 1, 0
    while v0 < n:                       # a vertex of more entries than a chunk is a chunk
        v1 = min(n, max(v0 + 1, int(np.searchsorted(x, x[v0] + CUT_CHUNK, side="right")) - 1))
        e0, e1 = int(x[v0]), int(x[v1])
        diff = np.repeat(tab[v0:v1], np.diff(x[v0:v1 + 1])) != tab[a[e0:e1]]
        cut += int(np.count_nonzero(diff)) if w is None else int(w[e0:e1][diff].sum())
        v0 = v1
    return all_sum(c, cut)


def _id_ranges(entry, nparts, ub, seed, best_cut):
    """Collective: the start from id ranges (:mod:`.blockstart`) on the input graph's
    level ``entry``: ``(its cut, (refined cut, parts, moves))``, the second None unless
    its cut is below ``best_cut`` before refining and it stays within ``ub`` after."""
    c, d, x, a, w, vwl, _, gh = entry
    parts = id_range_parts(c, d, vwl, nparts)
    first = _level_cut(entry, parts)
    if first >= best_cut:
        return first, None
    moved = refine(c, d, x, a, parts, vwl, nparts, ub, seed, adjwgt=w, ghosts=gh)
    if not within_bounds(c, parts, vwl, nparts, ub):
        return first, None
    return first, (_level_cut(entry, parts), parts, moved)


def _refine_up(levels, parts, nparts, ub, seed):
    """Collective: the coarsest graph's ``parts`` projected back level by level, each
    refined; returns ``(parts of this rank's input vertices, moves)``."""
    moved = 0
    for entry in reversed(levels):
        if entry[0] == "gather":      # back to this rank's block of the distributed level
            _, c, d = entry
            parts = np.ascontiguousarray(parts[int(d[c.Get_rank()]):int(d[c.Get_rank() + 1])])
            continue
        if entry[0] == "even":        # back from even blocks to the ranks holding the clusters
            parts = uneven(entry[1], entry[3], entry[2], parts)
            continue
        c, d, x, a, w, vwl, proj, gh = entry
        parts = proj(parts)
        moved += refine(c, d, x, a, parts, vwl, nparts, ub, seed, adjwgt=w, ghosts=gh)
    return parts, moved
