"""The device path's CPU twin: sampling by torch operations
(:mod:`hpcgnn.sampling.device`), blocks built by torch operations
(:func:`~hpcgnn.sampling.blocks.csr_on_device`) and batches staged by the loader
(:meth:`MiniBatch.stage`) give what the host path gives: the same per-seed counts and
candidate sets, the same distribution (chi-square, p = 1e-6), the same batch layout,
the same blocks.  On a GPU the same code runs on CUDA tensors (bench/gpu_check.sh)."""
import numpy as np
import pytest
import torch

from hpcgnn.graph import DistGraph
from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler
from hpcgnn.sampling.blocks import build_adjs
from hpcgnn.sampling.device import LocalCSR, Relabel, draw

from harness import Oracle, biased_first_k, check_minibatch, make_graph, uniform_ok

ext = pytest.importorskip("hpcgnn._ext")


def torch_sampler(fanout, replace=False, seed=0):
    """``rows -> (eids, counts)`` through :func:`draw`, as the kernel's signature."""
    gen = torch.Generator().manual_seed(seed)

    def sample(rows):
        r = torch.from_numpy(np.ascontiguousarray(rows))
        e, c = draw(r[:, 0], r[:, 1] - r[:, 0], fanout, replace, gen)
        return e.numpy(), c.numpy()
    return sample


@pytest.mark.parametrize("fanout,deg", [(3, 7), (10, 40), (25, 26), (80, 200)])
def test_draw_uniform_without_replacement(fanout, deg):
    ranges = [(0, deg), (1000, 1000 + deg // 2 + 1), (5000, 5000 + fanout), (9000, 9002), (9100, 9100)]
    rows = np.repeat(np.asarray(ranges, np.int64), 200, axis=0)
    eids, counts = torch_sampler(fanout)(rows)
    assert counts.tolist() == ext.sample_ranges(rows.reshape(-1), fanout, False, 1)[1].tolist()
    off = np.concatenate([[0], np.cumsum(counts)])
    for i in range(0, len(rows), 7):
        got = eids[off[i]:off[i + 1]]
        assert len(np.unique(got)) == len(got)
        assert len(got) == 0 or (got.min() >= rows[i, 0] and got.max() < rows[i, 1])
        if counts[i] == rows[i, 1] - rows[i, 0]:             # degree <= fanout: every edge
            assert sorted(got.tolist()) == list(range(rows[i, 0], rows[i, 1]))
    ok, stat, dof = uniform_ok(torch_sampler(fanout, seed=5), ranges[:2], fanout, 3000)
    assert ok, (stat, dof)
    # the same statistic rejects a biased draw
    assert not uniform_ok(lambda r: biased_first_k(r, fanout), ranges[:2], fanout, 3000)[0]


def test_draw_with_replacement_and_all():
    ranges = np.array([[0, 5], [10, 10], [20, 21]], np.int64)
    eids, counts = torch_sampler(4, replace=True)(np.repeat(ranges, 4000, axis=0))
    assert counts.tolist() == [4] * 4000 + [0] * 4000 + [4] * 4000
    freq = np.bincount(eids[:16000], minlength=5) / 16000
    assert np.abs(freq - 0.2).max() < 0.02 and (eids[16000:] == 20).all()
    eids, counts = torch_sampler(-1)(ranges)                 # -1: every edge, in order (as the kernel)
    want = ext.sample_ranges(ranges.reshape(-1), -1, False, 1)
    assert counts.tolist() == want[1].tolist() and eids.tolist() == want[0].tolist()
    a = torch_sampler(2, seed=9)(np.repeat(ranges, 50, axis=0))[0]
    assert np.array_equal(a, torch_sampler(2, seed=9)(np.repeat(ranges, 50, axis=0))[0])   # seeded


def test_relabel_matches_the_hash_table():
    rng = np.random.default_rng(0)
    seeds = rng.choice(10**6, 50, replace=False)
    r, table = Relabel(torch.from_numpy(seeds)), ext.Relabeler(1000)
    table.map(seeds)
    for n in (300, 0, 2000, 7):
        nbr = rng.integers(0, 5000, n)
        nbr[: n // 3] = rng.choice(seeds, n // 3)            # some already seen
        assert r.map(torch.from_numpy(nbr)).tolist() == table.map(nbr).tolist()
    assert r.nodes().tolist() == table.nodes().tolist()


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("devsampling"))
    raw, cfg = make_graph(tmp, 2, None)
    g = DistGraph("g", part_config=cfg)
    yield g, Oracle(raw, cfg)
    g.context.finalize()


def test_device_sampler_batch(graph):
    g, o = graph
    seeds = np.random.default_rng(3).choice(o.n, 64, replace=False)
    fanouts = [5, 3, 2]
    dev = NeighborSampler(fanouts, seed=0, device="cpu")
    b = dev.sample(g, seeds).fetch_features(g)
    check_minibatch(g, o, b, seeds, fanouts)
    assert dev.local_csr(g).placement == "device" and len(dev.local_csr(g).node_spans) == 2
    # every neighbour (-1) and fanouts above every degree: the host sampler's batch, exactly
    for fo in ([-1, -1], [1000, 1000]):
        host = NeighborSampler(fo, seed=0).sample(g, seeds[:8])
        mine = NeighborSampler(fo, seed=0, device="cpu").sample(g, seeds[:8])
        for k in ("n_id", "e_id", "edge_index"):
            assert torch.equal(getattr(host, k), getattr(mine, k)), k
        assert host.num_sampled_nodes == mine.num_sampled_nodes
    # the seed makes the batch
    again = NeighborSampler(fanouts, seed=0, device="cpu").sample(g, seeds)
    assert torch.equal(again.edge_index, b.edge_index) and torch.equal(again.n_id, b.n_id)


def test_device_sampler_merges_remote_seeds(graph):
    """Seeds of a partition this host does not hold are drawn through the host path
    and merged in the frontier's order."""
    g, o = graph
    s = NeighborSampler([4, 3], seed=1, device="cpu")
    csr = s.local_csr(g)
    csr.node_spans = csr.node_spans[:1]                     # as if partition 1 were on another host
    csr.node_bounds = csr._bounds(csr.node_spans)
    seeds = np.random.default_rng(4).choice(o.n, 100, replace=False)
    assert 0 < int(csr.local_mask(torch.from_numpy(seeds)).sum()) < 100
    check_minibatch(g, o, s.sample(g, seeds).fetch_features(g), seeds, [4, 3])
    full = NeighborSampler([-1, -1], device="cpu")
    full._csr = s._csr
    host = NeighborSampler([-1, -1]).sample(g, seeds[:10])
    mine = full.sample(g, seeds[:10])
    assert torch.equal(host.edge_index, mine.edge_index) and torch.equal(host.e_id, mine.e_id)


def test_local_csr_placement_is_checked(graph, monkeypatch):
    g, _ = graph
    monkeypatch.setenv("HPCGNN_GPU_CSR", "nowhere")
    from hpcgnn.errors import InputError
    with pytest.raises(InputError, match="HPCGNN_GPU_CSR"):
        LocalCSR(g.tables, "cpu")


def _adjs_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.size == y.size
        for f in ("crow_indices", "col_indices", "values"):
            assert torch.equal(getattr(x.adj_t, f)(), getattr(y.adj_t, f)())
        assert torch.equal(x.edge_index, y.edge_index) and torch.equal(x.e_id, y.e_id)


def test_blocks_by_torch_ops_match_the_compiled_pass(graph, monkeypatch):
    g, o = graph
    b = NeighborSampler([6, 4], seed=2).sample(g, np.arange(0, o.n, 37))
    args = (b.edge_index, b.e_id, b.num_sampled_nodes, b.num_sampled_edges)
    host = build_adjs(*args)
    # the device path on CPU tensors: edge_index "not on the host" as far as build_adjs knows
    from hpcgnn.sampling import blocks
    monkeypatch.setattr(blocks, "_csr_on_host", lambda s, d, n, a: blocks.csr_on_device(s, d, n, a))
    _adjs_equal(host, build_adjs(*args))
    gen = torch.Generator().manual_seed(0)
    ncum = np.cumsum([0] + b.num_sampled_edges)
    # edges shuffled within each hop: sorted once, stably; the same blocks as the host's sort
    hop = torch.cat([int(ncum[h]) + torch.randperm(int(ncum[h + 1] - ncum[h]), generator=gen)
                     for h in range(len(ncum) - 1)])
    shuffled = (b.edge_index[:, hop], b.e_id[hop], b.num_sampled_nodes, b.num_sampled_edges)
    monkeypatch.undo()
    want = build_adjs(*shuffled)
    monkeypatch.setattr(blocks, "_csr_on_host", lambda s, d, n, a: blocks.csr_on_device(s, d, n, a))
    _adjs_equal(want, build_adjs(*shuffled))
    bad = b.edge_index.clone()
    bad[0, 0] = b.num_nodes + 5
    with pytest.raises(ValueError, match="outside the batch"):
        build_adjs(bad, b.e_id, b.num_sampled_nodes, b.num_sampled_edges)


def test_loader_stages_batches_off_the_step(graph):
    """With a device, the loader's thread builds each batch's blocks and places it
    (here the CPU twin); the batches are those of the host loader."""
    g, o = graph
    ids = np.arange(0, o.n, 3)
    kw = dict(batch_size=128, seed=5, feat="feat", label="label")
    staged = DistNodeDataLoader(g, ids, NeighborSampler([5, 3]), device="cpu", **kw)
    plain = DistNodeDataLoader(g, ids, NeighborSampler([5, 3]), **kw)
    n = 0
    for a, b in zip(staged, plain):
        assert a._adjs is not None and b._adjs is None        # built before the step asks
        assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
        _adjs_equal(a.adjs, b.adjs)
        n += 1
    assert n == len(plain) and staged.stats["h2d_bytes"] == 0   # nothing crossed on a CPU
    # the device sampler through the loader: the same batches as its own sample() calls
    dev = DistNodeDataLoader(g, ids, NeighborSampler([5, 3], device="cpu"), device="cpu", **kw)
    first = next(iter(dev))
    check_minibatch(g, o, first, first.n_id[:first.batch_size].numpy(), [5, 3])


def test_rows_gathered_by_the_device_twin(graph, monkeypatch):
    """``gather_to`` with mapped reads (a GPU's default, forced here on the CPU): this
    host's rows by an index gather over its segments; the same rows as ``t[ids]``."""
    g, o = graph
    monkeypatch.setenv("HPCGNN_DEVICE_READS", "mapped")
    feat = g.ndata["feat"]
    ids = np.random.default_rng(7).integers(0, o.n, 500)
    got = feat.gather_to(ids, "cpu")
    assert torch.equal(got, torch.from_numpy(o.feat[ids]))
    m = feat._mapped_rows(torch.device("cpu"))
    assert len(m.spans) == 2 and m.spans[0][2].data_ptr() == m.store.direct_views()[0][2].ctypes.data  # no copy
    # (rows of other hosts, read by RMA into the device's buffer: tests/sampling/test_sampling_mpi.py)
    assert torch.equal(g.ndata["label"].gather_to(ids[:7], "cpu"), torch.from_numpy(o.label[ids[:7]]))
    monkeypatch.setenv("HPCGNN_DEVICE_READS", "everywhere")
    from hpcgnn.errors import InputError
    with pytest.raises(InputError, match="HPCGNN_DEVICE_READS"):
        feat.gather_to(ids, "cpu")


def test_sage_off_the_cpu_aggregates_the_batchs_blocks(graph, monkeypatch):
    """Where the fused CPU kernels do not apply (a GPU), SAGE's layers aggregate over
    the batch's own blocks (built off the step) instead of rebuilding a CSR per layer
    from edge_index (a host read each): the same outputs as the fused path."""
    from hpcgnn.train.model import SAGE
    from hpcgnn.train import kernels

    g, o = graph
    b = NeighborSampler([5, 3], seed=4).sample(g, np.arange(0, o.n, 41)).fetch_features(g)
    torch.manual_seed(0)
    model = SAGE(8, 16, 4, 2, dropout=0.0).eval()
    fused = model(b.x, b.adjs)
    monkeypatch.setattr(SAGE, "_fast", lambda self, i, x: False)
    monkeypatch.setattr(kernels, "mean_adjacency", None)         # must not be called
    monkeypatch.setattr("hpcgnn.train.model.mean_adjacency", None)
    assert torch.allclose(model(b.x, b.adjs), fused, atol=1e-5)


def test_a_sampler_sent_to_sampler_ranks_samples_on_their_host():
    """Batches from sampler ranks cross MPI in host memory: the pickled copy of a
    device sampler (what a loader sends them) samples on the host."""
    import pickle

    s = NeighborSampler([3, 2], seed=1, device="cpu")
    t = pickle.loads(pickle.dumps(s))
    assert s.device == torch.device("cpu") and t.device is None and t.fanouts == s.fanouts
