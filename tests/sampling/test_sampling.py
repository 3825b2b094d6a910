"""Neighbor sampling (kernels, sample_neighbors, NeighborSampler) on a standalone
DistGraph, against the raw edge list (through the partitioner's id mapping).

The statistical checks use a fixed seed and a chi-square bound at p = 1e-6; each
has a companion test showing that a biased sampler fails it."""
import os

import h5py
import numpy as np
import pytest
import torch

from hpcgnn.errors import InputError
from hpcgnn.graph import DistGraph
from hpcgnn.sampling import NeighborSampler, sample_neighbors
from hpcgnn.sampling import neighbor as nbmod

from harness import (Oracle, biased_first_k, check_minibatch, check_sample_neighbors, chi2_bound, inclusion_stat,
                     make_graph, uniform_ok)

ext = pytest.importorskip("hpcgnn._ext")
if not hasattr(ext, "sample_ranges"):
    pytest.skip("hpcgnn._ext built without sampling.pxi", allow_module_level=True)

def never_last(rows, fanout, seed):
    """A subtly wrong sampler: uniform among all but the last candidate."""
    r = rows.copy()
    big = r[:, 1] - r[:, 0] > fanout
    r[big, 1] -= 1
    return ext.sample_ranges(r.reshape(-1), fanout, False, seed)


# -- kernels ------------------------------------------------------------------------
@pytest.mark.parametrize("fanout,deg", [(3, 7), (10, 40), (80, 200)])   # Floyd and selection sampling
def test_kernel_uniform_without_replacement(fanout, deg):
    ranges = [(0, deg), (1000, 1000 + deg // 2 + 1), (5000, 5000 + fanout), (9000, 9000 + 2)]
    rows = np.repeat(np.asarray(ranges, np.int64), 300, axis=0)
    eids, counts = ext.sample_ranges(rows.reshape(-1), fanout, False, 7)
    assert counts.tolist() == np.minimum(rows[:, 1] - rows[:, 0], fanout).tolist()
    off = np.concatenate([[0], np.cumsum(counts)])
    for i in range(len(rows)):
        got = eids[off[i]:off[i + 1]]
        assert len(np.unique(got)) == len(got)
        assert got.min() >= rows[i, 0] and got.max() < rows[i, 1]
        if counts[i] == rows[i, 1] - rows[i, 0]:
            assert sorted(got.tolist()) == list(range(rows[i, 0], rows[i, 1]))
    ok, stat, dof = uniform_ok(lambda r: ext.sample_ranges(r.reshape(-1), fanout, False, 11),
                               ranges, fanout, 3000)
    assert ok, (stat, dof)


@pytest.mark.parametrize("fanout,deg", [(3, 7), (80, 200)])
def test_chi_square_rejects_biased_samplers(fanout, deg):
    ranges = [(0, deg), (1000, 1000 + deg // 2 + 1)]
    assert not uniform_ok(lambda r: biased_first_k(r, fanout), ranges, fanout, 3000)[0]
    assert not uniform_ok(lambda r: never_last(r, fanout, 3), ranges, fanout, 3000)[0]


def test_kernel_with_replacement_and_all():
    ranges = np.array([[0, 5], [10, 10], [20, 21]], np.int64)
    eids, counts = ext.sample_ranges(np.repeat(ranges, 4000, axis=0).reshape(-1), 4, True, 1)
    assert counts.tolist() == [4] * 4000 + [0] * 4000 + [4] * 4000
    first = eids[:16000]
    freq = np.bincount(first, minlength=5) / len(first)
    assert np.abs(freq - 0.2).max() < 0.02
    assert (eids[16000:] == 20).all()
    # repeats occur with replacement (P(no repeat in 4 of 5) = 0.19)
    assert any(len(set(first[i:i + 4].tolist())) < 4 for i in range(0, 400, 4))
    eids, counts = ext.sample_ranges(ranges.reshape(-1), -1, False, 1)
    assert counts.tolist() == [5, 0, 1] and eids.tolist() == [0, 1, 2, 3, 4, 20]
    # deterministic in the seed, not the thread count
    r = np.repeat(ranges, 3000, axis=0).reshape(-1)
    a = ext.sample_ranges(r, 2, False, 99, None, 1)[0]
    assert np.array_equal(a, ext.sample_ranges(r, 2, False, 99, None, 2)[0])
    assert not np.array_equal(a, ext.sample_ranges(r, 2, False, 98, None, 1)[0])


def _succ_inclusion(w, k):
    """Exact inclusion probabilities of successive weighted sampling without
    replacement (k = 2)."""
    w = np.asarray(w, float)
    W = w.sum()
    p = w / W
    for i in range(len(w)):
        for j in range(len(w)):
            if i != j and w[i] > 0:
                p[j] += w[i] / W * w[j] / (W - w[i])
    return p


def test_kernel_weighted():
    w = np.array([1.0, 2.0, 3.0, 4.0, 0.0])
    T = 20000
    rows = np.repeat(np.array([[100, 105]], np.int64), T, axis=0)
    ww = np.tile(w, T)
    # without replacement, k = 2: inclusion = successive sampling; zero weight never
    eids, counts = ext.sample_ranges(rows.reshape(-1), 2, False, 5, ww)
    assert (counts == 2).all()
    got = np.bincount(eids - 100, minlength=5)
    assert got[4] == 0
    pairs = eids.reshape(-1, 2)
    assert (pairs[:, 0] != pairs[:, 1]).all()
    exp = T * _succ_inclusion(w, 2)[:4]
    stat = float((((got[:4] - exp) ** 2) / exp).sum())
    assert stat < chi2_bound(3), stat
    uniform_exp = np.full(4, T * 0.5)
    assert float((((got[:4] - uniform_exp) ** 2) / uniform_exp).sum()) > chi2_bound(3)
    # with replacement: frequencies follow the weights
    eids, counts = ext.sample_ranges(rows.reshape(-1), 3, True, 5, ww)
    got = np.bincount(eids - 100, minlength=5)
    exp = 3 * T * w[:4] / w.sum()
    assert got[4] == 0 and float((((got[:4] - exp) ** 2) / exp).sum()) < chi2_bound(3)
    # fewer positive weights than the fanout: only those; all-zero: nothing
    eids, counts = ext.sample_ranges(np.array([0, 5, 10, 12], np.int64), 4, False, 1,
                                     np.array([0, 1, 0, 2, 0, 0, 0], float))
    assert counts.tolist() == [2, 0] and sorted(eids.tolist()) == [1, 3]


@pytest.mark.parametrize("scale", [5e307, 5e-324, 1e-310])
def test_kernel_weighted_extreme_weights(scale):
    """Huge weights summed to inf and subnormal ones made log(u) / w = -inf: the
    draws were no longer by weight.  Weights relative to a seed's largest fix both."""
    base = np.array([1.0, 1.0, 2.0]) if scale > 1e-320 else np.ones(3)
    w, p = base * scale, base / base.sum()
    T = 6000
    rows = np.repeat(np.array([[0, 3]], np.int64), T, axis=0).reshape(-1)
    for replace, k in ((True, 1), (False, 1)):
        eids, counts = ext.sample_ranges(rows, k, replace, 11, np.tile(w, T))
        got = np.bincount(eids, minlength=3)
        exp = T * p
        assert float((((got - exp) ** 2) / exp).sum()) < chi2_bound(2), (replace, got)


def test_kernel_total_overflow_is_an_error():
    rows = np.array([0, 5, 5, 10, 10, 15, 15, 20], np.int64)
    for fanout in (2**62, 2**63 - 1):
        with pytest.raises(ValueError, match="more than 2\\*\\*63-1 edges"):
            ext.sample_ranges(rows, fanout, True, 0, None)
        with pytest.raises(ValueError, match="more than 2\\*\\*63-1 edges"):
            ext.sample_ranges(rows, fanout, True, 0, np.ones(20))


def test_relabel():
    seeds = np.array([50, 7, 3], np.int64)
    nbrs = np.array([7, 9, 9, 100, 50, 2, 100], np.int64)
    nodes, local = ext.relabel(seeds, nbrs)
    assert nodes.tolist() == [50, 7, 3, 9, 100, 2]
    assert local.tolist() == [1, 3, 3, 4, 0, 5, 4]
    rng = np.random.default_rng(0)
    big = rng.integers(0, 10**12, 200000)
    nodes, local = ext.relabel(big[:10], big)        # grows the table
    assert np.array_equal(nodes[local], big)
    _, first = np.unique(big, return_index=True)
    assert len(nodes) == len(np.unique(np.concatenate([big[:10], big])))
    assert np.array_equal(nodes[10:], big[np.sort(first)][~np.isin(big[np.sort(first)], big[:10])])


# -- sample_neighbors / NeighborSampler on a DistGraph --------------------------------
@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("sampling"))
    raw, cfg = make_graph(tmp, 2, None)
    g = DistGraph("g", part_config=cfg)
    yield g, Oracle(raw, cfg)
    g._ctx.finalize()


def test_sample_neighbors_edges_exist(graph):
    g, o = graph
    rng = np.random.default_rng(1)
    seeds = rng.choice(o.n, 300, replace=False)
    for fanout in (0, 1, 3, 10, -1):
        check_sample_neighbors(g, o, seeds, fanout)
    src, dst, eid = sample_neighbors(g, torch.from_numpy(seeds[:50]), 5, replace=True, rng=2)
    o.check_edges(src, dst, eid)
    assert len(eid) == 5 * int((o.deg[seeds[:50]] > 0).sum())
    src, dst, eid = sample_neighbors(g, seeds, 3, prob="weight", rng=3)
    o.check_edges(src, dst, eid)
    e = sample_neighbors(g, np.zeros(0, np.int64), 3)
    assert len(e.eid) == 0 and e.src.dtype == torch.int64


def test_sample_neighbors_inclusion_frequencies(graph):
    g, o = graph
    cand = np.flatnonzero(o.deg > 6)[:40]
    fanout, T = 4, 1500
    seeds = np.repeat(cand, T)
    _, dst, eid = sample_neighbors(g, seeds, fanout, rng=np.random.default_rng(5))
    eid = eid.numpy()
    rows = g._t.csr.gather(cand)
    pos = np.repeat(np.arange(len(cand)), np.minimum(o.deg[cand], fanout) * T)
    stat, dof = inclusion_stat(eid, pos, rows.tolist(), fanout, T)
    assert stat < chi2_bound(dof), (stat, dof)


def test_sample_neighbors_weighted_follows_weights(graph):
    g, o = graph
    cand = np.flatnonzero(o.deg >= 5)[:20]
    T = 3000
    _, dst, eid = sample_neighbors(g, np.repeat(cand, T), 1, prob="weight", rng=9)
    eid = eid.numpy()
    stat, dof = 0.0, 0
    for s in cand:
        mine = np.flatnonzero(o.dst == s)
        got = np.array([(eid == e).sum() for e in mine])
        exp = T * o.weight[mine] / o.weight[mine].sum()
        stat += float(((got - exp) ** 2 / exp).sum())
        dof += len(mine) - 1
    assert stat < chi2_bound(dof), (stat, dof)


def test_sample_neighbors_bad_input(graph):
    g, o = graph
    with pytest.raises(InputError, match="out of range"):
        sample_neighbors(g, [o.n], 3)
    with pytest.raises(InputError, match="out of range"):
        sample_neighbors(g, [-1], 3)
    with pytest.raises(InputError, match="integers"):
        sample_neighbors(g, np.array([1.5]), 3)
    for bad in (-2, 1.5, "3", True, None):
        with pytest.raises(InputError, match="fanout"):
            sample_neighbors(g, [1], bad)
    with pytest.raises(InputError, match="partitioned with edge_dir='in'"):
        sample_neighbors(g, [1], 3, edge_dir="out")
    with pytest.raises(InputError, match="edge_dir must be"):
        sample_neighbors(g, [1], 3, edge_dir="both")
    with pytest.raises(InputError, match="not an edge feature"):
        sample_neighbors(g, [1], 3, prob="nope")
    with pytest.raises(InputError, match="rng"):
        sample_neighbors(g, [1], 3, rng="x")
    with pytest.raises(InputError, match="fanouts is empty"):
        NeighborSampler([])
    with pytest.raises(InputError, match="fanout must be >= 0"):
        NeighborSampler([5, -3])
    with pytest.raises(InputError, match="unique"):
        NeighborSampler([2]).sample(g, [1, 1])


def test_negative_weights_rejected(tmp_path, monkeypatch):
    raw, cfg = make_graph(str(tmp_path), 1, None, num_nodes=300)
    with h5py.File(_h5_of(cfg), "r+") as f:
        f["part0/edge/weight"][3] = -1.0
    monkeypatch.setenv("HPCGNN_VERIFY", "0")     # edited after partitioning: its checksum no longer holds
    g = DistGraph("gneg", part_config=cfg)       # a name no other test's graph holds
    o = Oracle(raw, cfg)                         # (the standalone context is shared: no finalize here)
    with pytest.raises(InputError, match="negative"):
        sample_neighbors(g, [int(o.dst[3])], 2, prob="weight")


def _h5_of(cfg):
    from hpcgnn.partition.config import read_config

    c, base = read_config(cfg)
    return os.path.join(base, c["h5_file"])


def test_neighbor_sampler_minibatch(graph):
    g, o = graph
    rng = np.random.default_rng(3)
    seeds = rng.choice(o.n, 64, replace=False)
    fanouts = [5, 3, 2]
    b = NeighborSampler(fanouts, seed=0).sample(g, seeds).fetch_features(g)
    check_minibatch(g, o, b, seeds, fanouts)
    blocks = b.to_blocks()
    assert len(blocks) == 3
    assert torch.equal(blocks[-1].dst_nodes, b.n_id[:64])
    assert blocks[0].num_src_nodes == b.num_nodes and blocks[0].edge_index.shape[1] == b.num_edges
    for blk in blocks:
        assert torch.equal(blk.src_nodes[:blk.num_dst_nodes], blk.dst_nodes)
        assert int(blk.edge_index[0].max()) < blk.num_src_nodes
        assert int(blk.edge_index[1].max()) < blk.num_dst_nodes
    # same seed, same batch; weighted and all-neighbor variants also check out
    b2 = NeighborSampler(fanouts, seed=0).sample(g, seeds)
    assert torch.equal(b.edge_index, b2.edge_index) and torch.equal(b.n_id, b2.n_id)
    check_minibatch(g, o, NeighborSampler([-1, 2]).sample(g, seeds[:8]), seeds[:8], [-1, 2])
    wb = NeighborSampler([3, 3], prob="weight", seed=1).sample(g, seeds)
    o.check_edges(wb.n_id[wb.edge_index[0]].numpy(), wb.n_id[wb.edge_index[1]].numpy(), wb.e_id.numpy())
    with pytest.raises(InputError, match="not a node feature"):
        b.fetch_features(g, feat="nope")
    # seeds that are a strided view (perm[::2]) sample as their copy does
    strided = torch.from_numpy(np.repeat(seeds, 2))[::2]
    b3 = NeighborSampler(fanouts, seed=0).sample(g, strided)
    assert torch.equal(b3.edge_index, b2.edge_index) and torch.equal(b3.n_id, b2.n_id)
    from hpcgnn.sampling import DistNodeDataLoader
    with pytest.raises(InputError, match="duplicates"):
        DistNodeDataLoader(g, np.array([1, 2, 2, 3]), NeighborSampler([2]), 2)


def test_pyg_models_run_on_a_minibatch(graph):
    pyg = pytest.importorskip("torch_geometric")
    from torch_geometric.nn import GraphSAGE

    g, o = graph
    seeds = np.arange(0, o.n, 37)[:32]
    b = NeighborSampler([4, 3], seed=2).sample(g, seeds).fetch_features(g)
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, num_layers=2, out_channels=4)
    model.eval()
    full = model(b.x, b.edge_index)[:b.batch_size]
    trimmed = model(b.x, b.edge_index, num_sampled_nodes_per_hop=b.num_sampled_nodes_per_hop,
                    num_sampled_edges_per_hop=b.num_sampled_edges_per_hop)[:b.batch_size]
    assert full.shape == (32, 4)
    assert torch.allclose(full, trimmed, atol=1e-5)        # trimming drops only unused work
    loss = torch.nn.functional.cross_entropy(trimmed, b.y[:b.batch_size].long())
    loss.backward()
    # the same computation through the DGL-style blocks, layer by layer
    from torch_geometric.nn import SAGEConv

    convs = [SAGEConv(8, 16), SAGEConv(16, 4)]
    h = b.x
    for conv, blk in zip(convs, b.to_blocks()):
        h = conv((h, h[:blk.num_dst_nodes]), blk.edge_index)
    ref = b.x
    for i, conv in enumerate(convs):
        ref = conv(ref, b.edge_index)
    assert torch.allclose(h, ref[:b.batch_size], atol=1e-5)
    data = b.to_pyg()
    assert data.num_nodes == b.num_nodes and data.batch_size == 32


def test_out_edge_graph(tmp_path):
    raw, cfg = make_graph(str(tmp_path), 2, None, edge_dir="out", num_nodes=500)
    g = DistGraph("gout", part_config=cfg)
    o = Oracle(raw, cfg, edge_dir="out")
    seeds = np.arange(0, 500, 7)
    src, dst, eid = sample_neighbors(g, seeds, 3, edge_dir="out", rng=0)
    o.check_edges(src, dst, eid)                       # src is the seed, dst the sampled neighbor
    assert np.array_equal(src.numpy(), np.repeat(seeds, np.minimum(o.deg[seeds], 3)))
    with pytest.raises(InputError, match="partitioned with edge_dir='out'"):
        sample_neighbors(g, seeds, 3)
    b = NeighborSampler([3, 2], edge_dir="out").sample(g, seeds, rng=4)
    # edge_index points from the sampled neighbor to the seed: the reverse of the stored out-edge
    o.check_edges(b.n_id[b.edge_index[1]].numpy(), b.n_id[b.edge_index[0]].numpy(), b.e_id.numpy())
    b2 = NeighborSampler([3, 2], edge_dir="out").sample(g, seeds, rng=4)
    assert torch.equal(b.e_id, b2.e_id)


def test_graph_level_chi_square_catches_a_biased_kernel(graph, monkeypatch):
    """The frequency check of test_sample_neighbors_inclusion_frequencies fails when
    the kernel is swapped for one that takes the first ``fanout`` neighbors."""
    import types

    g, o = graph
    fake = types.SimpleNamespace(sample_ranges=lambda rows, f, rep, seed, w=None, nt=1:
                                 biased_first_k(rows.reshape(-1, 2), f))
    monkeypatch.setattr(nbmod, "kernels", lambda: fake)
    cand = np.flatnonzero(o.deg > 6)[:40]
    fanout, T = 4, 1500
    _, _, eid = sample_neighbors(g, np.repeat(cand, T), fanout, rng=5)
    pos = np.repeat(np.arange(len(cand)), np.minimum(o.deg[cand], fanout) * T)
    stat, dof = inclusion_stat(eid.numpy(), pos, g._t.csr.gather(cand).tolist(), fanout, T)
    assert stat > chi2_bound(dof)
