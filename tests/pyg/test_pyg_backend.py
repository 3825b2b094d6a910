"""PyG's NodeLoader / LinkLoader with hpcgnn as their backend (hpcgnn.pyg), on a
standalone DistGraph of 2 partitions: batches equal hpcgnn's own sampler for the
same seeds, features are the rows of n_id, edges exist, negatives follow PyG's
binary and triplet layouts, a stock GraphSAGE trains, bad input is refused.
The checks are shared with test_pyg_backend_mpi.py."""
import numpy as np
import pytest
import torch

from hpcgnn.errors import InputError
from hpcgnn.graph import DistGraph

from harness import FANOUTS, Oracle, check_link_loader, check_node_loader, make_graph, train_sage

pytest.importorskip("hpcgnn._ext")
tg = pytest.importorskip("torch_geometric")

from torch_geometric.data import TensorAttr  # noqa: E402
from torch_geometric.loader import LinkLoader, NodeLoader  # noqa: E402
from torch_geometric.sampler import NodeSamplerInput  # noqa: E402

from hpcgnn.pyg import DistFeatureStore, DistGraphStore, DistNeighborSampler, to_pyg_backend  # noqa: E402


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
