"""Per-layer message-flow blocks (``MiniBatch.adjs``, hpcgnn/sampling/blocks.py) in one
process: every stock PyG layer kind fed the trimmed blocks gives the seeds the same
output as the untrimmed ``edge_index`` path; the blocks' sizes and edges; edges not
sorted by destination (typed sampling) give the same blocks; ``LayerAdj.gcn_norm``
against a hand computation; ``MiniBatch.pyg_edge_index``."""
import os

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric")
ext = pytest.importorskip("hpcgnn._ext")

from torch_geometric.nn import GATConv, GCNConv, GINConv, GraphConv, SAGEConv  # noqa: E402

from hpcgnn.datasets import generate_graph  # noqa: E402
from hpcgnn.graph import DistGraph  # noqa: E402
from hpcgnn.partition import partition_graph  # noqa: E402
from hpcgnn.sampling import NeighborSampler  # noqa: E402
from hpcgnn.sampling.batch import MiniBatch  # noqa: E402
from hpcgnn.sampling.blocks import LayerAdj, build_adjs  # noqa: E402

pytestmark = pytest.mark.timeout(120)
F_IN, HID, OUT = 8, 16, 4


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("blocks"))
    raw = os.path.join(tmp, "g.h5")
    generate_graph(raw, None, 2000, 8, F_IN, 4, seed=5, name="gblocks", overwrite=True)
    cfg = partition_graph(raw, os.path.join(tmp, "parts"), 2, overwrite=True)
    g = DistGraph("gblocks", part_config=cfg)
    yield g
    g._ctx.finalize()


def _batch(g, fanouts=(5, 3), n_seeds=48, seed=0):
    seeds = np.random.default_rng(seed).choice(g.num_nodes(), n_seeds, replace=False)
    return NeighborSampler(list(fanouts), seed=seed).sample(g, seeds).fetch_features(g)


# -- the layer kinds: (make a layer, run it on a block, run it on the untrimmed graph)
def _gin(a, b):
    return GINConv(torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.ReLU(), torch.nn.Linear(b, b)), train_eps=True)


KINDS = {
    "SAGEConv": (lambda a, b: SAGEConv(a, b),
                 lambda c, x, adj: c((x, x[: adj.num_dst]), adj.adj_t)),
    "GraphConv": (lambda a, b: GraphConv(a, b),
                  lambda c, x, adj: c((x, x[: adj.num_dst]), adj.adj_t)),
    "GINConv": (_gin,
                lambda c, x, adj: c((x, x[: adj.num_dst]), adj.adj_t)),
    "GCNConv": (lambda a, b: GCNConv(a, b, normalize=False, add_self_loops=False),
                lambda c, x, adj: c(x, adj.adj_t)),
    "GATConv": (lambda a, b: GATConv(a, b, heads=2, concat=False),
                lambda c, x, adj: c((x, x[: adj.num_dst]), adj.edge_index)),
}


def _run_blocks(convs, run, x, adjs):
    for i, (conv, adj) in enumerate(zip(convs, adjs)):
        x = run(conv, x, adj)
        if i < len(convs) - 1:
            x = torch.relu(x)
    return x


def _run_untrimmed(convs, x, edge_index):
    for i, conv in enumerate(convs):
        x = conv(x, edge_index)
        if i < len(convs) - 1:
            x = torch.relu(x)
    return x


def _make_convs(kind, layers):
    make = KINDS[kind][0]
    dims = [F_IN] + [HID] * (layers - 1) + [OUT]
    torch.manual_seed(0)
    convs = [make(a, b) for a, b in zip(dims[:-1], dims[1:])]
    for c in convs:
        c.eval()
    return convs


@pytest.mark.parametrize("fanouts", [(5, 3), (4, 3, 2)])
@pytest.mark.parametrize("kind", list(KINDS))
def test_blocks_give_the_untrimmed_outputs(graph, kind, fanouts):
    b = _batch(graph, fanouts)
    convs = _make_convs(kind, len(fanouts))
    with torch.no_grad():
        ref = _run_untrimmed(convs, b.x, b.edge_index)[: b.batch_size]
        got = _run_blocks(convs, KINDS[kind][1], b.x, b.adjs)
    assert got.shape == (b.batch_size, OUT)
    assert torch.allclose(got, ref, atol=1e-5, rtol=1e-4), (got - ref).abs().max()
    # the gradients flow through the blocks the same way
    x1, x2 = b.x.clone().requires_grad_(), b.x.clone().requires_grad_()
    _run_untrimmed(convs, x1, b.edge_index)[: b.batch_size].sum().backward()
    _run_blocks(convs, KINDS[kind][1], x2, b.adjs).sum().backward()
    assert torch.allclose(x1.grad, x2.grad, atol=1e-5, rtol=1e-4)


def _dense(adj: LayerAdj) -> torch.Tensor:
    return adj.adj_t.to_dense()


def _check_layers(b, adjs):
    """Sizes: layer i of L reads the nodes within L-i hops, writes those within L-i-1;
    its edges are exactly the batch's edges into its destinations."""
    ncum = np.cumsum([0] + list(b.num_sampled_nodes))
    L = len(b.num_sampled_edges)
    assert len(adjs) == L
    src, dst = b.edge_index[0].numpy(), b.edge_index[1].numpy()
    e_id = b.e_id.numpy()
    for i, adj in enumerate(adjs):
        ns, nd = int(ncum[L - i + 1]), int(ncum[L - i])
        assert adj.size == (ns, nd) and adj.num_src == ns and adj.num_dst == nd
        a_t, size = adj                                     # unpacks as PyG's (adj_t, size)
        assert size == (ns, nd) and a_t.layout == torch.sparse_csr and tuple(a_t.shape) == (nd, ns)
        assert a_t is adj.adj_t
        keep = dst < nd
        want = sorted(zip(src[keep].tolist(), dst[keep].tolist(), e_id[keep].tolist()))
        ei = adj.edge_index.numpy()
        got = sorted(zip(ei[0].tolist(), ei[1].tolist(), adj.e_id.numpy().tolist()))
        assert got == want
        assert (np.diff(ei[1]) >= 0).all(), "edge_index sorted by destination"
        m = torch.zeros(nd, ns)
        m.index_put_((adj.edge_index[1], adj.edge_index[0]), torch.ones(ei.shape[1]), accumulate=True)
        assert torch.equal(_dense(adj), m)
    # the last layer writes the seeds, the first reads every node of the batch
    assert adjs[-1].num_dst == b.batch_size and adjs[0].num_src == b.num_nodes


def test_layer_sizes_and_edges(graph):
    for fanouts in ((5, 3), (4, 3, 2), (-1,), (6,)):
        b = _batch(graph, fanouts, n_seeds=32, seed=1)
        _check_layers(b, b.adjs)
        assert b.adjs is b.adjs                             # built once per batch
        assert b.adjs[0].adj_t.dtype == b.x.dtype


def _shuffled_within_hops(b, seed=0):
    """The batch with each hop's edges in a random order (as typed sampling leaves
    them: grouped by edge type, then seed)."""
    rng = np.random.default_rng(seed)
    ecum = np.cumsum([0] + list(b.num_sampled_edges))
    perm = np.concatenate([lo + rng.permutation(hi - lo) for lo, hi in zip(ecum[:-1], ecum[1:])])
    perm = torch.from_numpy(perm)
    return MiniBatch(n_id=b.n_id, e_id=b.e_id[perm], edge_index=b.edge_index[:, perm], batch_size=b.batch_size,
                     num_sampled_nodes=list(b.num_sampled_nodes), num_sampled_edges=list(b.num_sampled_edges),
                     x=b.x, y=b.y)


def test_edges_not_sorted_by_destination_give_the_same_blocks(graph):
    b = _batch(graph, (4, 3, 2), seed=2)
    s = _shuffled_within_hops(b)
    assert (np.diff(s.edge_index[1].numpy()) < 0).any()       # really unsorted
    _check_layers(s, s.adjs)
    for a, c in zip(b.adjs, s.adjs):
        assert a.size == c.size and torch.equal(_dense(a), _dense(c))
        assert torch.equal(a.adj_t.crow_indices(), c.adj_t.crow_indices())
    for kind in KINDS:
        convs = _make_convs(kind, 3)
        with torch.no_grad():
            ref = _run_blocks(convs, KINDS[kind][1], b.x, b.adjs)
            got = _run_blocks(convs, KINDS[kind][1], s.x, s.adjs)
        assert torch.allclose(got, ref, atol=1e-5, rtol=1e-4), kind


def test_typed_sampling_batches(graph, tmp_path):
    """A real typed batch (edges grouped by type, then seed) gives the untrimmed
    outputs, and its pyg_edge_index claims no sort order."""
    from harness import planted_graph, write_raw

    n = 800
    src, dst, _ = planted_graph(n, 8, 3, seed=4)
    raw = os.path.join(str(tmp_path), "h.h5")
    write_raw(raw, n, src, dst, types=True, name="hblocks")
    cfg = partition_graph(raw, os.path.join(str(tmp_path), "parts"), 2, overwrite=True)
    g = DistGraph("hblocks", part_config=cfg)     # the same standalone context as `graph`'s: finalized there
    seeds = np.arange(0, n, 17)[:40]
    s = NeighborSampler([{"cites": 4, "writes": 2, "rev": 2, "knows": 2},
                         {"cites": 3, "writes": 2, "rev": 1, "knows": 1}], seed=3)
    b = s.sample(g, seeds)
    assert b.e_type is not None
    assert (np.diff(b.edge_index[1].numpy()) < 0).any()   # not sorted by destination
    b.x = torch.randn(b.num_nodes, F_IN, generator=torch.Generator().manual_seed(0))
    _check_layers(b, b.adjs)
    for kind in KINDS:
        convs = _make_convs(kind, 2)
        with torch.no_grad():
            ref = _run_untrimmed(convs, b.x, b.edge_index)[: b.batch_size]
            got = _run_blocks(convs, KINDS[kind][1], b.x, b.adjs)
        assert torch.allclose(got, ref, atol=1e-5, rtol=1e-4), kind
    pei = b.pyg_edge_index
    assert not pei.is_sorted
    pei.validate()
    conv = _make_convs("SAGEConv", 1)[0]
    with torch.no_grad():
        assert torch.allclose(conv(b.x, pei), conv(b.x, b.edge_index), atol=1e-5)


def _tiny():
    """Seeds 0, 1; hop 1 reaches 2, 3, 4 (edges 2->0, 3->0, 4->1, 3->1, given unsorted)."""
    ei = torch.tensor([[2, 4, 3, 3], [0, 1, 0, 1]])
    return MiniBatch(n_id=torch.tensor([10, 11, 12, 13, 14]), e_id=torch.tensor([100, 101, 102, 103]),
                     edge_index=ei, batch_size=2, num_sampled_nodes=[2, 3], num_sampled_edges=[4])


def test_gcn_norm_by_hand():
    (adj,) = _tiny().adjs
    assert adj.size == (5, 2)
    assert adj.edge_index.tolist() == [[2, 3, 4, 3], [0, 0, 1, 1]]
    assert adj.e_id.tolist() == [100, 102, 101, 103]
    s2, s3, s6 = 2 ** -0.5, 3 ** -0.5, 6 ** -0.5
    # no self-loops: deg_dst = (2, 2); deg_src = (0->1, 0->1, 1, 2, 1) (clamped to >= 1)
    want = torch.tensor([[0, 0, s2, 0.5, 0], [0, 0, 0, 0.5, s2]])
    assert torch.allclose(adj.gcn_norm(add_self_loops=False, norm="both").to_dense(), want)
    # self-loops: deg_dst = (3, 3); deg_src = (1, 1, 1, 2, 1)
    want = torch.tensor([[s3, 0, s3, s6, 0], [0, s3, 0, s6, s3]])
    n = adj.gcn_norm(norm="both")
    assert n.layout == torch.sparse_csr and tuple(n.shape) == (2, 5)
    assert torch.allclose(n.to_dense(), want)
    assert n.crow_indices().tolist() == [0, 3, 6]
    # the layer GCNConv(normalize=False) computes with it: A_hat @ (x W) + b
    conv = GCNConv(3, 2, normalize=False, add_self_loops=False)
    x = torch.randn(5, 3)
    with torch.no_grad():
        assert torch.allclose(conv(x, n), want @ conv.lin(x) + conv.bias, atol=1e-6)
    # the default, norm="right": each row's mean over its self-loop and sources
    want = torch.tensor([[1, 0, 1, 1, 0], [0, 1, 0, 1, 1]]) / 3.0
    assert torch.allclose(adj.gcn_norm().to_dense(), want)
    with pytest.raises(ValueError, match="norm"):
        adj.gcn_norm(norm="left")


def test_gcn_norm_on_a_sampled_batch(graph):
    """Every layer of a sampled batch: the weights 1/sqrt(deg_dst deg_src) counted
    within the layer's block (norm="both"), or 1/deg_dst (norm="right", a row's own
    count only), with or without a self-loop per destination."""
    b = _batch(graph, (4, 3, 2), seed=4)
    for adj in b.adjs:
        for loops in (True, False):
            a = _dense(adj)
            if loops:
                a[torch.arange(adj.num_dst), torch.arange(adj.num_dst)] += 1
            dd, ds = a.sum(1).clamp(min=1), a.sum(0).clamp(min=1)
            want = a / torch.sqrt(dd[:, None] * ds[None, :])
            got = adj.gcn_norm(add_self_loops=loops, norm="both").to_dense()
            assert torch.allclose(got, want, atol=1e-6), loops
            got = adj.gcn_norm(add_self_loops=loops).to_dense()
            assert torch.allclose(got, a / dd[:, None], atol=1e-6), loops


def test_build_adjs_rejects_edges_outside_the_batch():
    b = _tiny()
    with pytest.raises(ValueError, match="outside the batch"):
        build_adjs(torch.tensor([[2, 7], [0, 1]]), b.e_id[:2], [2, 3], [2])


def test_pyg_edge_index(graph):
    from torch_geometric import EdgeIndex

    b = _batch(graph, (5, 3), seed=5)
    pei = b.pyg_edge_index
    assert isinstance(pei, EdgeIndex)
    assert pei.sparse_size() == (b.num_nodes, b.num_nodes)
    assert pei.is_sorted_by_col
    pei.validate()                                  # the claimed sort order holds
    assert torch.equal(pei.as_tensor(), b.edge_index)
    for kind in ("SAGEConv", "GraphConv", "GINConv", "GATConv"):
        convs = _make_convs(kind, 2)
        with torch.no_grad():
            ref = _run_untrimmed(convs, b.x, b.edge_index)
            got = _run_untrimmed(convs, b.x, pei)
        assert torch.allclose(torch.as_tensor(got), ref, atol=1e-5, rtol=1e-4), kind


@pytest.mark.parametrize("heads,concat,self_loop", [(4, True, False), (1, True, True), (2, False, True)])
def test_gat_conv_without_edge_messages_equals_gatconv(graph, heads, concat, self_loop):
    """hpcgnn.train.attention.gat_conv (compiled weighted sum along the CSR) gives
    GATConv's outputs and gradients on a block, also when the block holds d -> d
    edges (GATConv drops them before adding its own self-loops)."""
    from hpcgnn.train.attention import gat_conv

    b = _batch(graph, (6, 4), seed=7)
    if self_loop:                  # make some sampled edges self-loops: d -> d
        ei = b.edge_index.clone()
        ei[0, :: 7] = ei[1, :: 7]
        b.edge_index, b._adjs = ei, None
    adj = b.adjs[0]
    torch.manual_seed(3)
    conv = GATConv(F_IN, 8, heads=heads, concat=concat)
    x = b.x.clone().requires_grad_()
    ref = conv((x, x[: adj.num_dst]), adj.edge_index)
    g = torch.randn_like(ref)
    (ref * g).sum().backward()
    want = [x.grad.clone()] + [p.grad.clone() for p in conv.parameters()]
    x.grad = None
    conv.zero_grad()
    out = gat_conv(conv, x, adj)
    (out * g).sum().backward()
    got = [x.grad] + [p.grad for p in conv.parameters()]
    assert torch.allclose(out, ref, atol=1e-5)
    for a, w in zip(got, want):
        assert torch.allclose(a, w, rtol=1e-4, atol=1e-4)


def test_csr_attend_checks_indices():
    from hpcgnn import _ext

    indptr, cols = np.array([0, 2], np.int64), np.array([0, 5], np.int64)
    alpha = np.ones((2, 1), np.float32)
    x = np.ones((3, 1, 4), np.float32)
    with pytest.raises(ValueError, match="outside"):
        _ext.csr_attend(indptr, cols, alpha, x, np.empty((1, 1, 4), np.float32))


def test_blocks_follow_the_model_input(graph):
    """Features of another dtype (float16 in the file, fed as float32) or on another
    device: adjs_like gives the blocks in the input's dtype, and every zoo model runs
    on them (node classification's forward)."""
    from hpcgnn.sampling.blocks import adjs_like
    from hpcgnn.train.node_classification import _forward
    from hpcgnn.train.zoo import build_model

    b = _batch(graph, (4, 3), seed=11)
    b.x, b._adjs = b.x.half(), None
    assert b.adjs[0].adj_t.dtype == torch.float16
    x = b.x.float()
    same = adjs_like(b.adjs, x)
    assert [a.adj_t.dtype for a in same] == [torch.float32] * 2
    assert [a.size for a in same] == [a.size for a in b.adjs]
    assert adjs_like(same, x) is same
    for name in ("sage", "sage-pyg", "gcn", "gat", "gin"):
        m = build_model(name, F_IN, 16, 4, 2, 0.0)
        out = _forward(m, b, torch.device("cpu"), "adjs")
        assert tuple(out.shape) == (b.batch_size, 4), name


def test_batches_and_blocks_move_with_to(graph):
    """DGL's ``blocks = [b.to(dev) for b in blocks]`` (a copy) and PyG's ``batch.to(dev)``
    (in place, returns the batch): every tensor moves, the blocks too, built before
    the move or after it.  ``meta`` stands for a GPU here (tensors move, no data)."""
    devices = ["meta"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        b = _batch(graph, (4, 3), seed=5)
        n_id, blocks, sizes = b.n_id.clone(), b.to_blocks(), [a.size for a in b.adjs]
        built = _batch(graph, (4, 3), seed=5)
        built.adjs                                              # built on the host, then moved
        for moved in (b.to(dev), built.to(dev)):
            assert moved.batch_size == b.batch_size
            for name in ("n_id", "e_id", "edge_index", "x", "y"):
                assert getattr(moved, name).device.type == dev, name
            assert moved.n_id.shape == n_id.shape
            assert [a.adj_t.device.type for a in moved.adjs] == [dev, dev]
            assert [a.size for a in moved.adjs] == sizes
        fresh = _batch(graph, (4, 3), seed=5)
        fresh._adjs = None
        assert fresh.to(dev) is fresh                           # in place, as PyG's
        if dev != "meta":               # built after the move (from a copy on the host: meta has no data)
            assert [a.adj_t.device.type for a in fresh.adjs] == [dev, dev]
        for blk in blocks:
            mb = blk.to(dev)
            assert type(mb) is type(blk) and mb.num_dst_nodes() == blk.num_dst_nodes()
            assert all(t.device.type == dev and t.shape == u.shape for t, u in zip(mb[:4], blk[:4]))
            if dev != "meta":                                   # its CSR moves with it, on first use
                assert mb.adj.adj_t.device.type == dev and mb.adj.size == blk.adj.size
            assert blk.src_nodes.device.type == "cpu"          # a copy: the original stays
