"""PyG's NodeLoader / LinkLoader with hpcgnn as their backend (hpcgnn.pyg), on a
standalone DistGraph of 2 partitions: batches equal hpcgnn's own sampler for the
same seeds, features are the rows of n_id, edges exist, negatives follow PyG's
binary and triplet layouts, a stock GraphSAGE trains, bad input is refused.
The checks are shared with test_pyg_backend_mpi.py."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hpcgnn.errors import InputError
from hpcgnn.graph import DistGraph
from hpcgnn.sampling import NeighborSampler

from test_sampling import Oracle, make_graph

pytest.importorskip("hpcgnn._ext")
tg = pytest.importorskip("torch_geometric")

from torch_geometric.data import TensorAttr  # noqa: E402
from torch_geometric.loader import LinkLoader, NodeLoader  # noqa: E402
from torch_geometric.nn import GraphSAGE  # noqa: E402
from torch_geometric.sampler import NegativeSampling, NodeSamplerInput  # noqa: E402

from hpcgnn.pyg import DistFeatureStore, DistGraphStore, DistNeighborSampler, to_pyg_backend  # noqa: E402

FANOUTS = [4, 3]


# -- shared checks (also run under mpirun) ----------------------------------------
def check_node_loader(g, oracle, ids, seed=7):
    """NodeLoader batches over hpcgnn's backend equal hpcgnn's NeighborSampler for
    the same seeds (same sampler seed, same order)."""
    fs, gs = to_pyg_backend(g)
    sampler = DistNeighborSampler((fs, gs), FANOUTS, seed=seed)
    ref = NeighborSampler(FANOUTS, seed=seed)
    loader = NodeLoader((fs, gs), node_sampler=sampler, input_nodes=torch.from_numpy(ids), batch_size=64)
    assert len(loader) == -(-len(ids) // 64)
    start = 0
    for batch in loader:
        seeds = ids[start:start + batch.batch_size]
        start += batch.batch_size
        want = ref.sample(g, seeds)
        assert isinstance(batch, tg.data.Data)
        assert torch.equal(batch.n_id[:batch.batch_size], torch.from_numpy(seeds))        # seeds first
        for k in ("n_id", "e_id", "edge_index"):
            assert torch.equal(getattr(batch, k), getattr(want, k)), k
        assert list(batch.num_sampled_nodes) == want.num_sampled_nodes
        assert list(batch.num_sampled_edges) == want.num_sampled_edges
        n_id = batch.n_id.numpy()
        assert np.array_equal(batch.x.numpy(), oracle.feat[n_id])
        assert np.array_equal(batch.y.numpy(), oracle.label[n_id])
        assert batch.num_nodes == len(n_id)
        src, dst = n_id[batch.edge_index[0].numpy()], n_id[batch.edge_index[1].numpy()]
        oracle.check_edges(src, dst, batch.e_id.numpy())           # edges exist, with their ids
        assert torch.equal(batch.input_id, torch.arange(start - batch.batch_size, start))
    assert start == len(ids)


def check_link_loader(g, oracle, eids, seed=3):
    """LinkLoader over hpcgnn's backend: binary negatives (edge_label_index /
    edge_label) and triplet negatives (src_index, dst_pos_index, dst_neg_index)."""
    fs, gs = to_pyg_backend(g)
    pos = torch.stack([torch.from_numpy(oracle.src[eids]), torch.from_numpy(oracle.dst[eids])])
    sampler = DistNeighborSampler((fs, gs), FANOUTS, seed=seed)
    ref = NeighborSampler(FANOUTS, seed=seed)
    torch.manual_seed(seed)
    loader = LinkLoader((fs, gs), link_sampler=sampler, edge_label_index=(None, pos),
                        neg_sampling=NegativeSampling("binary", 2), batch_size=32)
    start = 0
    for batch in loader:
        B = len(batch.input_id)
        want_pos = pos[:, start:start + B]
        start += B
        eli, n_id = batch.edge_label_index, batch.n_id
        assert eli.shape == (2, 3 * B)
        assert torch.equal(n_id[eli[:, :B]], want_pos)                       # the seed edges first
        assert torch.equal(batch.edge_label, torch.cat([torch.ones(B), torch.zeros(2 * B)]))
        endpoints = torch.unique(n_id[eli].reshape(-1))
        assert torch.equal(n_id[:len(endpoints)], endpoints)                  # endpoints are the seeds
        want = ref.sample(g, endpoints)
        assert torch.equal(batch.edge_index, want.edge_index) and torch.equal(batch.e_id, want.e_id)
        assert np.array_equal(batch.x.numpy(), oracle.feat[n_id.numpy()])
        nid = n_id.numpy()
        oracle.check_edges(nid[batch.edge_index[0].numpy()], nid[batch.edge_index[1].numpy()], batch.e_id.numpy())
    assert start == pos.shape[1]
    triplet = LinkLoader((fs, gs), link_sampler=DistNeighborSampler((fs, gs), FANOUTS, seed=seed),
                         edge_label_index=(None, pos), neg_sampling=NegativeSampling("triplet", 3), batch_size=32)
    for batch in triplet:
        B = len(batch.input_id)
        assert batch.dst_neg_index.shape == (B, 3)
        assert torch.equal(torch.stack([batch.n_id[batch.src_index], batch.n_id[batch.dst_pos_index]]),
                           pos[:, batch.input_id])
        assert int(batch.dst_neg_index.max()) < batch.num_nodes
        assert "edge_label_index" not in batch


def train_sage(g, ids, epochs=6, seed=0):
    """Mean training loss per epoch of a stock PyG GraphSAGE fed by NodeLoader."""
    torch.manual_seed(seed)
    fs, gs = to_pyg_backend(g)
    num_classes = int(g.ndata["label"][np.arange(g.num_nodes())].max()) + 1
    model = GraphSAGE(g.ndata["feat"].shape[1], 32, num_layers=2, out_channels=num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NodeLoader((fs, gs), node_sampler=DistNeighborSampler((fs, gs), [5, 5], seed=seed),
                        input_nodes=torch.from_numpy(ids), batch_size=128, shuffle=True)
    losses = []
    for _ in range(epochs):
        total = 0.0
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size].long())
            loss.backward()
            opt.step()
            total += float(loss.detach())
        losses.append(total / len(loader))
    return losses


# -- one process, 2 partitions ------------------------------------------------------
@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("pyg"))
    raw, cfg = make_graph(tmp, 2, None)
    g = DistGraph("g", part_config=cfg)
    yield g, Oracle(raw, cfg)
    g.context.finalize()


def test_node_loader_matches_hpcgnn_sampler(graph):
    g, oracle = graph
    check_node_loader(g, oracle, np.random.default_rng(0).permutation(g.num_nodes())[:300])


def test_link_loader_binary_and_triplet(graph):
    g, oracle = graph
    check_link_loader(g, oracle, np.arange(0, g.num_edges(), 97))


def test_graph_store_gives_the_whole_edge_index(graph):
    g, oracle = graph
    fs, gs = to_pyg_backend(g)
    src, dst = gs.get_edge_index(edge_type=None, layout="coo")
    assert np.array_equal(src.numpy(), oracle.src) and np.array_equal(dst.numpy(), oracle.dst)
    row, col_ptr, _ = gs.csc()        # PyG converts the other layouts itself
    assert len(col_ptr) == g.num_nodes() + 1 and int(col_ptr[-1]) == g.num_edges()
    # PyG 2.8's LinkLoader cannot take edge_label_index=(None, None) from a homogeneous
    # graph store (it expects per-type dicts from coo()); the whole edge_index is passed
    everything = torch.stack([src, dst])
    loader = LinkLoader((fs, gs), link_sampler=DistNeighborSampler((fs, gs), [2]),
                        edge_label_index=(None, everything), batch_size=256)
    assert len(loader) == -(-g.num_edges() // 256)
    b = next(iter(loader))
    assert torch.equal(b.n_id[b.edge_label_index], everything[:, :256])
    assert "edge_label" not in b          # no negatives, no labels given: none (as PyG does)
    small = DistGraphStore(g, max_edges=10)
    with pytest.raises(InputError, match="max_edges"):
        small.get_edge_index(edge_type=None, layout="coo")


def test_graphsage_trains_on_node_loader_batches(graph):
    g, _ = graph
    losses = train_sage(g, np.arange(0, g.num_nodes(), 2))
    assert losses[-1] < 0.8 * losses[0], losses


def test_feature_store_reads_and_writes_rows(graph):
    g, oracle = graph
    fs, _ = to_pyg_backend(g)
    assert sorted(a.attr_name for a in fs.get_all_tensor_attrs()) == ["x", "y"]
    assert fs.get_tensor_size(TensorAttr(None, "x")) == tuple(g.ndata["feat"].shape)
    ids = torch.tensor([5, 1, 5, 1999])
    assert np.array_equal(fs.get_tensor(None, "x", ids).numpy(), oracle.feat[ids.numpy()])
    named = DistFeatureStore.from_graph(g, {"feat": "feat"})
    assert [a.attr_name for a in named.get_all_tensor_attrs()] == ["feat"]
    assert named.dist_tensor("feat") is g.ndata["feat"]
    with pytest.raises(InputError, match="not a node feature"):
        DistFeatureStore.from_graph(g, {"x": "nope"})
    with pytest.raises(InputError, match="out of range"):
        fs.get_tensor(None, "x", torch.tensor([g.num_nodes()]))
    with pytest.raises(InputError, match="register a DistTensor"):
        DistFeatureStore().put_tensor(torch.zeros(3, 2), group_name=None, attr_name="x", index=None)
    row = g.ndata["feat"][[7]].clone()
    fs.put_tensor(row + 1, group_name=None, attr_name="x", index=torch.tensor([7]))    # written in place
    assert torch.equal(g.ndata["feat"][[7]], row + 1)
    fs.put_tensor(row, group_name=None, attr_name="x", index=torch.tensor([7]))
    assert fs.remove_tensor(None, "y", None) and len(fs.get_all_tensor_attrs()) == 1


def test_bad_input_is_refused(graph):
    g, _ = graph
    fs, gs = to_pyg_backend(g)
    s = DistNeighborSampler((fs, gs), FANOUTS)
    with pytest.raises(InputError, match="repeated seed"):
        s.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.tensor([1, 1, 2])))
    with pytest.raises(InputError, match="out of range"):
        s.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.tensor([g.num_nodes()])))
    with pytest.raises(InputError, match="HeteroData"):
        s.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.tensor([1]), input_type="paper"))
    with pytest.raises(InputError, match="disjoint"):
        DistNeighborSampler((fs, gs), FANOUTS, disjoint=True)
    with pytest.raises(InputError, match="temporal"):
        DistNeighborSampler((fs, gs), FANOUTS, time_attr="t")
    with pytest.raises(InputError, match="num_neighbors"):
        DistNeighborSampler((fs, gs), {"a": [1]})
    with pytest.raises(InputError, match="not an edge feature"):
        DistNeighborSampler(g, FANOUTS, weight_attr="nope")
    with pytest.raises(InputError, match="to_pyg_backend"):
        DistNeighborSampler(object(), FANOUTS)
    with pytest.raises(InputError, match="read-only"):
        gs.put_edge_index(torch.zeros(2, 1, dtype=torch.long), edge_type=None, layout="coo", size=(2, 2))
    weighted = DistNeighborSampler(g, FANOUTS, weight_attr="weight")      # PyG's weight_attr: hpcgnn's prob
    assert weighted.sample(np.array([3, 4])).batch_size == 2


def test_worker_processes_are_refused_and_the_feature_store_is_used(graph, monkeypatch):
    g, _ = graph
    fs, gs = to_pyg_backend(g)
    s = DistNeighborSampler((fs, gs), FANOUTS)
    # PyG's loaders bypass the feature store for a class named "DistNeighborSampler"
    assert type(s).__name__ != "DistNeighborSampler"
    only_x = DistFeatureStore.from_graph(g, {"x": "feat"})
    b = next(iter(NodeLoader((only_x, gs), node_sampler=s, input_nodes=torch.arange(10), batch_size=10)))
    assert "x" in b and "y" not in b
    monkeypatch.setattr("hpcgnn.pyg.sampler.os.getpid", lambda: -1)      # as in a DataLoader worker
    with pytest.raises(InputError, match="num_workers=0"):
        s.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.tensor([1])))
