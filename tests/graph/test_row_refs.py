"""Rows read in place (hpcgnn.graph.row_refs): the first layer's mean over row
addresses gives bitwise the numbers of gathering the rows first, through the
kernels, the model, the loader and the cache."""
import copy
import pickle

import numpy as np
import pytest
import torch

from hpcgnn.errors import InputError
from hpcgnn.graph import DistGraph
from hpcgnn.graph.row_refs import RowRefs
from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler

from harness import make_graph

pytest.importorskip("hpcgnn._ext")
from hpcgnn import _ext  # noqa: E402
from hpcgnn.train.kernels import csr_mean, mean_adjacency  # noqa: E402
from hpcgnn.train.model import SAGE  # noqa: E402


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    _, cfg = make_graph(str(tmp_path_factory.mktemp("refs")), 2, None)
    g = DistGraph("g", part_config=cfg)
    yield g
    g._ctx.finalize()


def _refs_of(x: torch.Tensor) -> RowRefs:
    """Addresses of x's rows, in a shuffled copy of the table (rows anywhere)."""
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    table = x[perm].contiguous()
    where = torch.empty_like(perm)
    where[perm] = torch.arange(len(x))
    addr = table.data_ptr() + where.numpy().astype(np.uintp) * np.uintp(x.shape[1] * 4)
    return RowRefs(addr, (x.shape[1],), torch.float32, keep=(table,))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_mean_over_addresses_equals_mean_over_rows(threads):
    g = torch.Generator().manual_seed(4)
    ns, nd = 3000, 1300
    dst = torch.sort(torch.randint(0, nd - 5, (20000,), generator=g))[0]
    ei = torch.stack([torch.randint(0, ns, (20000,), generator=g), dst])
    x = torch.randn(ns, 37, generator=g)
    refs = _refs_of(x)
    assert torch.equal(refs.materialize(), x)
    for with_root in (False, True):
        adj = mean_adjacency(ei, nd, ns, with_root=with_root)
        want = torch.empty(adj.shape[0], 37)
        _ext.csr_mean(adj.crow_indices().numpy(), adj.col_indices().numpy(), x.numpy(), want.numpy(), threads)
        got = torch.empty_like(want)
        _ext.csr_mean_rows(adj.crow_indices().numpy(), adj.col_indices().numpy(), refs.addr, got.numpy(), threads)
        assert torch.equal(got, want)
        assert with_root or not got[-5:].any()           # rows without edges: zeros
    assert torch.equal(csr_mean(mean_adjacency(ei, nd, ns), refs), csr_mean(mean_adjacency(ei, nd, ns), x))
    bad = mean_adjacency(ei, nd, ns).col_indices().clone()
    bad[7] = ns
    with pytest.raises(ValueError, match="outside"):
        _ext.csr_mean_rows(mean_adjacency(ei, nd, ns).crow_indices().numpy(), bad.numpy(), refs.addr,
                           torch.empty(nd, 37).numpy())
    hole = refs.addr.copy()
    hole[5] = 0
    with pytest.raises(ValueError, match="source row 5 has no address"):
        _ext.csr_mean_rows(mean_adjacency(ei, nd, ns).crow_indices().numpy(),
                           mean_adjacency(ei, nd, ns).col_indices().numpy(), hole, torch.empty(nd, 37).numpy())
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(refs)


def _batch(g, fanouts=(5, 3), n=200, seed=0):
    s = NeighborSampler(list(fanouts))
    rng = np.random.default_rng(seed)
    return s.sample(g, torch.from_numpy(rng.choice(g.num_nodes(), n, replace=False)))


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_sage_step_on_rows_in_place_is_bitwise_the_copied_one(graph, layers):
    b = _batch(graph, fanouts=[5, 3, 2][:layers])
    a = copy.copy(b).fetch_features(graph, label_rows="seeds")
    r = copy.copy(b).fetch_features(graph, label_rows="seeds", feature_rows="refs")
    assert isinstance(r.x, RowRefs) and torch.is_tensor(a.x)
    assert torch.equal(r.x.materialize(), a.x) and torch.equal(r.y, a.y)
    torch.manual_seed(0)
    m1 = SAGE(8, 16, 4, layers, dropout=0.3)
    m2 = copy.deepcopy(m1)
    outs = []
    for m, x in ((m1, a.x), (m2, r.x)):
        torch.manual_seed(5)
        out = m(x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)
        out.square().sum().backward()
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p1.grad, p2.grad)
    # more rows than the batch's nodes: the first ones are used, as with a tensor
    extra = np.concatenate([b.n_id.numpy(), np.arange(7)])
    wide = graph.ndata["feat"].row_refs(extra)
    with torch.no_grad():
        torch.manual_seed(5)
        o_copy = m1(torch.as_tensor(graph.ndata["feat"][extra]), b.edge_index, b.num_sampled_nodes,
                    b.num_sampled_edges)
        torch.manual_seed(5)
        assert torch.equal(m2(wide, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges), o_copy)
    # where the first layer cannot read in place (full-graph call, eval): copied first
    with torch.no_grad():
        m1.eval(), m2.eval()
        assert torch.equal(m1.layer(0, a.x, b.edge_index), m2.layer(0, r.x, b.edge_index))


def test_loader_hands_over_addresses(graph):
    nids = np.arange(0, graph.num_nodes(), 2)
    runs = {}
    for rows in ("copy", "refs"):
        L = DistNodeDataLoader(graph, nids, NeighborSampler([4, 2]), batch_size=100, shuffle=True, seed=3,
                               mode="thread", labels="seeds", feature_rows=rows)
        runs[rows] = list(L)
    for a, r in zip(runs["copy"], runs["refs"]):
        assert isinstance(r.x, RowRefs) and torch.equal(r.x.materialize(), a.x)
    with pytest.raises(InputError, match="feature_rows must be one of"):
        DistNodeDataLoader(graph, nids, NeighborSampler([2]), batch_size=10, feature_rows="views")
    with pytest.raises(InputError, match="feature_rows must be one of"):
        _batch(graph).fetch_features(graph, feature_rows="views")
