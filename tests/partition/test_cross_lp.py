"""Label propagation across rank blocks (hpcgnn/partition/cross_lp.py, issue 42 item 1):
clusters span ranks, keep their bound, are as many whatever the rank count, are the same
for the same seed, and contract into the same cluster graph a whole-graph count gives."""
import numpy as np
import pytest

from hpcgnn import _ext
from hpcgnn.comm.ghosts import Ghosts
from hpcgnn.comm.mpi import MPI
from hpcgnn.partition import cross_lp
from hpcgnn.partition.cross_lp import Projection, WeightCache, contract_across, cross_lp_clusters
from harness import planted_graph

comm = MPI.COMM_WORLD


def _graph(n=6000, deg=12, blocks=60, seed=5):
    """A simple symmetric planted graph whose communities are spread over the ids (no
    locality): whole CSR ``(xadj, adj)``."""
    src, dst, _ = planted_graph(n, deg, blocks, p_in=0.9, seed=seed, loops=False)
    e = np.stack([src, dst], axis=1)
    e = np.unique(np.sort(e[e[:, 0] != e[:, 1]], axis=1), axis=0)
    u, v = np.concatenate([e[:, 0], e[:, 1]]), np.concatenate([e[:, 1], e[:, 0]])
    order = np.lexsort((v, u))
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=xadj[1:])
    return xadj, v[order].astype(np.int64)


def _clusters(c, xadj_all, adj_all, w_all, bound, seed=0, rounds=8):
    """Clusters of this rank's block under ``c``: ``(vtxdist, lo, hi, xadj, adj (table
    indices), ghosts, label, cdist, work, rounds run)``."""
    n, R, r = len(xadj_all) - 1, c.Get_size(), c.Get_rank()
    vtxdist = np.array([n * i // R for i in range(R + 1)], dtype=np.int64)
    lo, hi = int(vtxdist[r]), int(vtxdist[r + 1])
    xadj = xadj_all[lo:hi + 1] - xadj_all[lo]
    adj = adj_all[xadj_all[lo]:xadj_all[hi]].copy()
    gh = Ghosts(c, vtxdist, adj)
    gh.to_local(adj)
    work = {}
    label, cdist, done = cross_lp_clusters(c, vtxdist, xadj, adj, w_all[lo:hi], bound, seed, rounds, gh,
                                           counters=work)
    return vtxdist, lo, hi, xadj, adj, gh, label, cdist, work, done


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_clusters_span_ranks_keep_the_bound_and_do_not_follow_the_rank_count():
    xadj_all, adj_all = _graph()
    n = len(xadj_all) - 1
    w_all = 1 + np.arange(n, dtype=np.int64) % 3
    bound = 60
    vtxdist, lo, hi, _, _, _, label, cdist, work, _ = _clusters(comm, xadj_all, adj_all, w_all, bound)
    glab = np.concatenate(comm.allgather(label))
    K = int(cdist[-1])
    weight = np.bincount(glab, weights=w_all, minlength=K)
    assert glab.min() >= 0 and glab.max() < K and (weight > 0).all()     # numbered 0..K-1, none empty
    assert weight.max() <= bound
    owner = np.searchsorted(vtxdist, np.arange(n), side="right") - 1
    spanning = np.unique(glab[owner != np.searchsorted(cdist, glab, side="right") - 1])
    R = comm.Get_size()
    if R > 1:
        assert len(spanning) > 0.1 * K, "no cluster holds vertices of another rank than its owner"
        assert work["edges_scanned"] >= len(adj_all) * (hi - lo) // n and work["values_sent"] > 0
    # the same graph clustered by one rank alone: about as many clusters
    alone = _clusters(MPI.COMM_SELF, xadj_all, adj_all, w_all, bound)[7][-1]
    assert abs(K - alone) <= 0.15 * alone, (K, alone, R)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_cached_weights_send_less_and_leave_the_same_clusters(monkeypatch):
    """Light clusters' weights learnt earlier in a round are not read again: the same
    clusters as reading every weight in every slice, and fewer values sent."""
    xadj_all, adj_all = _graph()
    w_all = np.ones(len(xadj_all) - 1, dtype=np.int64)
    cached = _clusters(comm, xadj_all, adj_all, w_all, 60)
    monkeypatch.setattr(cross_lp, "CACHED_BELOW", -1.0)           # every weight read in every slice
    fresh = _clusters(comm, xadj_all, adj_all, w_all, 60)
    assert np.array_equal(cached[6], fresh[6]) and np.array_equal(cached[7], fresh[7])
    sent = comm.allgather((cached[8]["values_sent"], fresh[8]["values_sent"]))
    if comm.Get_size() > 1:
        assert sum(c for c, _ in sent) < 0.85 * sum(f for _, f in sent), sent


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_values_sent_count_only_what_leaves_the_rank():
    """``values_sent`` is the sum of its parts, holds no rows a rank sends itself (none
    on a graph with no edge between rank blocks), and the full exchange of the ghosts'
    labels is counted once per level as what it sends."""
    xadj_all, adj_all = _graph()
    n, R = len(xadj_all) - 1, comm.Get_size()
    w_all = np.ones(n, dtype=np.int64)
    block = np.searchsorted(np.array([n * i // R for i in range(R + 1)]), np.arange(n), side="right") - 1
    src = np.repeat(np.arange(n), np.diff(xadj_all))
    inside = block[src] == block[adj_all]                              # the edges within rank blocks
    xin = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src[inside], minlength=n), out=xin[1:])
    for xa, aa, crossing in ((xadj_all, adj_all, R > 1), (xin, adj_all[inside], False)):
        *_, gh, _, _, work, _ = _clusters(comm, xa, aa, w_all, 60)
        parts = sum(work.get(k, 0) for k in ("sent_weights", "sent_grants", "sent_labels", "sent_contraction"))
        assert work.get("values_sent", 0) == parts and work.get("full_exchange_values", 0) == len(gh.send_idx)
        assert (comm.allreduce(work.get("values_sent", 0)) > 0) == crossing, (work, crossing)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_no_more_slices_than_blocks():
    """A round runs no more slices (each a fixed number of exchanges) than the most
    blocks a rank holds: at 4 ranks of 1500 nodes, 6 blocks, not 3 per rank less 2."""
    xadj_all, adj_all = _graph()
    *_, work, done = _clusters(comm, xadj_all, adj_all, np.ones(len(xadj_all) - 1, dtype=np.int64), 60)
    nb = -(-(len(xadj_all) - 1) // comm.Get_size() // cross_lp.BLOCK)
    per_slice, outside = 7, 3          # a slice's exchanges; the first labels and the numbering
    if comm.Get_size() > 1:
        assert work["exchanges"] <= outside + per_slice * done * (nb + 1), (work, done, nb)
        assert work["exchanges"] >= outside + per_slice * done * min(cross_lp.CHUNKS, nb), (work, done, nb)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_the_same_seed_gives_the_same_clusters():
    xadj_all, adj_all = _graph(n=3000, seed=7)
    w_all = np.ones(3000, dtype=np.int64)
    a = _clusters(comm, xadj_all, adj_all, w_all, 40, seed=3)
    b = _clusters(comm, xadj_all, adj_all, w_all, 40, seed=3)
    assert np.array_equal(a[6], b[6]) and np.array_equal(a[7], b[7])
    c = _clusters(comm, xadj_all, adj_all, w_all, 40, seed=4)
    assert comm.allreduce(int(np.count_nonzero(c[6] != a[6]))) > 0      # the seed matters


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_the_cluster_graph_is_the_whole_graph_contracted():
    xadj_all, adj_all = _graph(n=4000, seed=9)
    n = len(xadj_all) - 1
    w_all = np.ones(n, dtype=np.int64)
    mask_all = (np.arange(n) % 7 == 0).astype(np.int64)
    vtxdist, lo, hi, xadj, adj, gh, label, cdist, _, _ = _clusters(comm, xadj_all, adj_all, w_all, 50)
    cx, ca, cw, cv = contract_across(comm, cdist, xadj, adj, label, gh, [w_all[lo:hi], mask_all[lo:hi]])
    r, K = comm.Get_rank(), int(cdist[-1])
    assert len(cx) == cdist[r + 1] - cdist[r] + 1 and cv.shape == (len(cx) - 1, 2)
    # the reference: every edge of the whole graph between two clusters, counted
    glab = np.concatenate(comm.allgather(label))
    rows = glab[np.repeat(np.arange(n), np.diff(xadj_all))]
    cols = glab[adj_all]
    keep = rows != cols
    ref = np.zeros((K, K), dtype=np.int64)
    np.add.at(ref, (rows[keep], cols[keep]), 1)
    got = np.zeros((K, K), dtype=np.int64)
    mine = np.repeat(np.arange(cdist[r], cdist[r + 1]), np.diff(cx))
    np.add.at(got, (mine, ca), cw)
    got = comm.allreduce(got)
    assert np.array_equal(got, ref)
    assert np.array_equal(np.concatenate(comm.allgather(cv[:, 0])), np.bincount(glab, minlength=K))
    assert np.array_equal(np.concatenate(comm.allgather(cv[:, 1])), np.bincount(glab, weights=mask_all,
                                                                                 minlength=K).astype(np.int64))
    # parts of the clusters carried back to the vertices
    cparts = (np.arange(cdist[r], cdist[r + 1]) * 7919) % 5
    proj = Projection(comm, cdist, label)
    assert np.array_equal(proj(cparts), (label * 7919) % 5)


def test_the_weight_cache_keeps_what_it_learnt_and_knows_nothing_else():
    """Other ranks' cluster weights, once read, are served from the cache: ids added in
    any order stay found, a later answer replaces a weight, this rank's departures lower
    it, ids never learnt are reported unknown."""
    c = WeightCache()
    w, known = c.get(np.array([5, 7], dtype=np.int64))
    assert not known.any() and (w == 0).all()
    c.update(np.array([90, 7, 40], dtype=np.int64), np.array([9, 1, 4], dtype=np.int64))
    c.update(np.array([7, 12], dtype=np.int64), np.array([3, 2], dtype=np.int64))     # 7 refreshed, 12 new
    c.add(np.array([40, 40, 5], dtype=np.int64), np.array([-1, -2, -7], dtype=np.int64))  # 5 not cached: ignored
    w, known = c.get(np.array([12, 90, 5, 40, 7], dtype=np.int64))
    assert known.tolist() == [True, True, False, True, True]
    assert w.tolist() == [2, 9, 0, 1, 3]
    assert c.ids.tolist() == [7, 12, 40, 90]


def test_a_sweep_keeps_the_bound_and_counts_arrivals_only():
    # a path 0-1-2-3 of unit weights, every vertex its own cluster; bound 2
    xadj = np.array([0, 1, 3, 5, 6], dtype=np.int64)
    adj = np.array([1, 0, 2, 1, 3, 2], dtype=np.int64)
    clab = np.arange(4, dtype=np.int32)
    cw = np.ones(4, dtype=np.int64)
    moved, scanned = _ext.lp_sweep(xadj, adj, np.ones(4, np.int64), clab, cw, np.arange(4, dtype=np.int64) * 10,
                                   2, np.zeros(1, np.int64), 1)
    assert scanned == 6 and moved >= 1
    sizes = np.bincount(clab, minlength=4)
    assert sizes.max() <= 2
    # cw: the start weight plus arrivals (leaving does not lower it)
    moved_in = clab[clab != np.arange(4)]
    assert np.array_equal(cw, 1 + np.bincount(moved_in, minlength=4))
    with pytest.raises(ValueError, match="cid and cw"):
        _ext.lp_sweep(xadj, adj, np.ones(4, np.int64), clab, cw, np.zeros(3, np.int64), 2, np.zeros(1, np.int64), 1)


def test_a_sweeps_view_is_its_blocks_and_their_neighbours():
    """_ext.lp_view_labels numbers the clusters a sweep over some blocks reads: exactly
    the labels of the blocks' vertices and their neighbours (ghost entries past the
    vertices included), each once, with clab giving every such entry its label's
    position and no other entry touched; the scratch marks are all zero again."""
    rng = np.random.default_rng(3)
    n, table = 600, 900                          # 600 vertices, 300 ghosts
    deg = rng.integers(0, 6, n)
    xadj = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    adj = rng.integers(0, table, int(xadj[-1])).astype(np.int64)
    glab = rng.integers(0, 10**12, table).astype(np.int64) // 7 * 7    # global ids, some repeated
    glab[rng.integers(0, table, 200)] = glab[rng.integers(0, table, 200)]
    blocks = np.array([2, 0], dtype=np.int64)    # vertices 512-599 and 0-255
    mark = np.zeros(table, dtype=bool)
    clab = np.full(table, -5, dtype=np.int32)
    uniq = _ext.lp_view_labels(xadj, adj, blocks, glab, mark.view(np.uint8), clab)
    verts = np.r_[np.arange(512, 600), np.arange(0, 256)]
    want = np.zeros(table, dtype=bool)
    want[verts] = True
    want[np.concatenate([adj[xadj[v]:xadj[v + 1]] for v in verts])] = True
    assert not mark.any()
    assert len(np.unique(uniq)) == len(uniq) and set(uniq) == set(glab[want])
    assert np.array_equal(uniq[clab[want]], glab[want]) and (clab[~want] == -5).all()
    with pytest.raises(ValueError, match="outside"):
        _ext.lp_view_labels(xadj, adj, np.array([3], dtype=np.int64), glab, mark.view(np.uint8), clab)
