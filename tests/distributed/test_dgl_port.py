"""DGL's names in ``hpcgnn.distributed`` / ``hpcgnn.dataloading``, with DGL's
argument orders (single process: a standalone DistGraph)."""
import copy
import inspect
import io
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import hpcgnn
import hpcgnn.dataloading as dataloading
import hpcgnn.function as fn
import hpcgnn.distributed as dist
import hpcgnn.graph
import hpcgnn.sampling
from hpcgnn.datasets import generate_graph, generate_hetero_graph
from hpcgnn.errors import DGLError, InputError
from hpcgnn.sampling.pair_graph import PairGraph

pytest.importorskip("hpcgnn._ext")

# leading positional parameters of DGL's functions (dgl 1.x), in DGL's order
DGL_ORDER = {
    dist.initialize: ["ip_config"],
    dist.DistGraph: ["graph_name", "gpb", "part_config"],
    dist.DistTensor: ["shape", "dtype", "name", "init_func", "part_policy", "persistent"],
    dist.DistEmbedding: ["num_embeddings", "embedding_dim", "name", "init_func", "part_policy"],
    dist.node_split: ["nodes", "partition_book", "ntype", "rank", "force_even", "node_trainer_ids"],
    dist.edge_split: ["edges", "partition_book", "etype", "rank", "force_even", "edge_trainer_ids"],
    dist.sample_neighbors: ["g", "nodes", "fanout", "edge_dir", "prob", "exclude_edges", "replace"],
    dist.partition_graph: ["g", "graph_name", "num_parts", "out_path", "num_hops", "part_method",
                           "balance_ntypes", "balance_edges", "return_mapping"],
    dist.load_partition: ["part_config", "part_id", "load_feats"],
    dist.load_partition_book: ["part_config", "part_id"],
    dist.PartitionPolicy: ["policy_str", "partition_book"],
    dist.optim.SparseAdagrad: ["params", "lr"],
    dist.optim.SparseAdam: ["params", "lr", "betas", "eps"],
    dist.DistNodeDataLoader: ["g", "nids", "graph_sampler", "device"],
    dist.DistEdgeDataLoader: ["g", "eids", "graph_sampler", "device"],
    dataloading.NeighborSampler: ["fanouts", "edge_dir", "prob", "mask", "replace"],
    dataloading.MultiLayerFullNeighborSampler: ["num_layers", "edge_dir", "prob", "mask"],
    dataloading.negative_sampler.Uniform: ["k"],
}


def _positional(f):
    sig = inspect.signature(f)
    return [p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]


@pytest.mark.parametrize("f", list(DGL_ORDER), ids=lambda f: f.__qualname__)
def test_dgl_argument_order(f):
    want = DGL_ORDER[f]
    assert _positional(f)[:len(want)] == want


def test_names_exist_and_are_hpcgnns():
    for name in ("initialize", "exit_client", "DistGraph", "DistTensor", "DistEmbedding", "node_split",
                 "edge_split", "sample_neighbors", "DistNodeDataLoader", "DistEdgeDataLoader", "partition_graph",
                 "load_partition", "load_partition_book", "PartitionPolicy", "GraphPartitionBook",
                 "SparseAdagrad", "SparseAdam", "DistDataLoader"):
        assert hasattr(dist, name), name
    for name in ("NeighborSampler", "MultiLayerNeighborSampler", "MultiLayerFullNeighborSampler",
                 "DistNodeDataLoader", "DistEdgeDataLoader", "NodeDataLoader", "EdgeDataLoader"):
        assert hasattr(dataloading, name), name
    assert dist.DistTensor is hpcgnn.graph.DistTensor          # g.ndata[...] values are dist.DistTensor
    assert dist.optim.SparseAdam is dist.SparseAdam is hpcgnn.graph.SparseAdam
    assert issubclass(dist.DistGraph, hpcgnn.graph.DistGraph)
    assert issubclass(dataloading.NeighborSampler, hpcgnn.sampling.NeighborSampler)
    assert dataloading.negative_sampler.PerSourceUniform(2).k == 2


def test_fanouts_in_dgl_order():
    s = dataloading.NeighborSampler([25, 10])                   # input layer first: the seeds' hop takes 10
    assert s.fanouts == [10, 25] and s.dgl_fanouts == [25, 10]
    assert dataloading.MultiLayerNeighborSampler([5, 3, 2]).fanouts == [2, 3, 5]
    assert hpcgnn.sampling.MultiLayerNeighborSampler([25, 10]).fanouts == s.fanouts
    full = dataloading.MultiLayerFullNeighborSampler(3)
    assert full.fanouts == [-1, -1, -1]
    w = dataloading.NeighborSampler([4, 2], "in", "weight")     # DGL's third argument is prob
    assert w.prob == "weight" and not w.replace
    assert dataloading.NeighborSampler([4], mask="m").prob == "m"
    for bad in (dict(prob="a", mask="b"), dict(prefetch_node_feats=["feat"]), dict(output_device="cuda:0")):
        with pytest.raises(InputError):
            dataloading.NeighborSampler([2], **bad)
    with pytest.raises(InputError, match="num_layers"):
        dataloading.MultiLayerFullNeighborSampler(0)


def test_initialize_refuses_a_layout_given_as_ip_config():
    with pytest.raises(InputError, match="layout="):
        dist.initialize("servers=1,trainers=1")


@pytest.fixture(scope="module")
def parted(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("dglport"))
    raw = os.path.join(tmp, "g.h5")
    generate_graph(raw, None, 600, 6, 4, 3, seed=2, edge_feat=True, name="g", overwrite=True)
    # DGL's order: (g, graph_name, num_parts, out_path, ...), the mapping returned as DGL does
    nmap, emap = dist.partition_graph(raw, "g", 2, os.path.join(tmp, "parts"), return_mapping=True,
                                      balance_ntypes="train_mask", overwrite=True)
    return raw, os.path.join(tmp, "parts", "g.json"), nmap, emap


def test_partition_graph_and_load_partition_as_dgl(parted):
    raw, cfg, nmap, emap = parted
    assert sorted(nmap.tolist()) == list(range(600)) and nmap.dtype == torch.int64
    assert sorted(emap.tolist()) == list(range(len(emap)))
    part, nfeat, efeat, gpb, name, ntypes, etypes = dist.load_partition(cfg, 1)
    assert name == "g" and ntypes == {"_N": 0} and len(etypes) == 1
    assert gpb.num_partitions() == 2 and gpb.partid == 1
    assert nfeat["_N/feat"].shape == (part.num_inner_nodes, 4)
    assert torch.equal(nfeat["_N/feat"], torch.from_numpy(part.node_feats["feat"]))
    assert np.array_equal(nmap[part.node_start:part.node_end].numpy(), part.orig_nid)
    assert "_E/weight" in efeat and len(efeat["_E/weight"]) == part.num_edges
    assert dist.load_partition(cfg, 0, load_feats=False)[1] == {}
    book, name, nt, et = dist.load_partition_book(cfg, 0)
    assert book.partid == 0 and name == "g" and nt == ntypes
    with pytest.raises(InputError, match="balance_ntypes"):
        dist.partition_graph(raw, "g", 2, os.path.dirname(cfg), balance_ntypes=torch.zeros(600, dtype=torch.bool))
    with pytest.raises(InputError, match="raw format"):
        dist.partition_graph(object(), "g", 2, os.path.dirname(cfg))


def test_standalone_loop_in_dgl_spelling(parted):
    _, cfg, _, _ = parted
    with pytest.raises(InputError, match="gpb"):
        dist.DistGraph("g", cfg)                                 # DGL's second argument is the book
    g = dist.DistGraph("g", part_config=cfg)
    try:
        assert g.rank() == 0
        train_nid = dist.node_split(g.ndata["train_mask"])
        assert dist.node_split(g.ndata["train_mask"], g.get_partition_book(), "_N").tolist() == train_nid.tolist()
        sampler = dataloading.MultiLayerNeighborSampler([1, 3])     # the seeds' hop draws up to 3
        loader = dataloading.NodeDataLoader(g, train_nid, sampler, "cpu", batch_size=16, shuffle=True,
                                            queue_size=1)
        assert loader.prefetch == 1
        n = 0
        for input_nodes, seeds, blocks in loader:
            x = g.ndata["feat"][input_nodes]
            assert x.shape[0] == len(input_nodes) and len(seeds) <= 16
            assert len(blocks) == 2 and blocks[-1].num_dst_nodes() == len(seeds)
            hop1 = blocks[-1].edge_index.shape[1]
            assert 0 < hop1 <= 3 * len(seeds)
            hop1_nodes = blocks[-1].num_src_nodes() - len(seeds)
            assert blocks[0].edge_index.shape[1] - hop1 <= hop1_nodes      # then 1 per node
            n += 1
        assert n == len(loader) > 0
        first = next(iter(loader))
        assert first.x is None and first.y is None                     # DGL's loaders read no features
        with_x = dataloading.NodeDataLoader(g, train_nid, sampler, batch_size=16, feat="feat", label="label")
        assert next(iter(with_x)).x is not None
        e = dist.sample_neighbors(g, train_nid[:5], 2, "in", None, None, True)    # DGL's order: replace last
        assert len(e.src) == 10
        with pytest.raises(InputError, match="exclude_edges"):
            dist.sample_neighbors(g, train_nid[:5], 2, exclude_edges=[0])
        eids = np.arange(0, g.num_edges(), 7)
        el = dist.DistEdgeDataLoader(g, eids, dataloading.NeighborSampler([2]), batch_size=32,
                                     negative_sampler=dataloading.negative_sampler.Uniform(1), exclude="self")
        b = next(iter(el))
        assert b.edge_label_index.shape == (2, 64)          # the PyG-shaped batch's fields stay reachable
        # DGL's tuple: the pair graphs over the last block's destinations
        input_nodes, pos, neg, blocks = b
        assert torch.equal(input_nodes, b.n_id) and len(blocks) == 1
        n = blocks[-1].num_dst_nodes()
        assert pos.num_nodes() == neg.num_nodes() == n and pos.num_edges() == neg.num_edges() == 32
        assert torch.equal(pos.ndata[hpcgnn.NID], blocks[-1].dstdata[hpcgnn.NID])
        seeds = pos.edata[hpcgnn.EID]
        assert sorted(seeds.tolist()) == sorted(set(seeds.tolist())) and set(seeds.tolist()) <= set(eids.tolist())
        u, v = pos.edges()
        src, dst = g.find_edges(seeds)                      # the seed edges, in local ids of the pair graph
        assert torch.equal(pos.ndata[hpcgnn.NID][u], src) and torch.equal(pos.ndata[hpcgnn.NID][v], dst)
        assert not np.isin(blocks[0].edata[hpcgnn.EID].numpy(), seeds.numpy()).any()     # exclude="self"
        assert hpcgnn.EID not in neg.edata and torch.equal(neg.edges()[0], u)           # Uniform: same sources
        no_neg = dist.DistEdgeDataLoader(g, eids, dataloading.NeighborSampler([2]), batch_size=32)
        assert len(next(iter(no_neg))) == 3                 # (input_nodes, pair_graph, blocks), as DGL
        # torch.save of a DistTensor stores its rows (DGL's examples save embeddings so)
        buf = io.BytesIO()
        torch.save(g.ndata["feat"], buf)
        buf.seek(0)
        assert torch.equal(torch.load(buf), g.ndata["feat"][0:g.num_nodes()])
        assert copy.copy(g.ndata["feat"]).name == g.ndata["feat"].name          # another handle, no rows read
        with pytest.raises(InputError, match="deep-copied"):
            copy.deepcopy(g.ndata["feat"])
    finally:
        g.context.finalize()


def _pair_graph():
    # 4 nodes, edges 0->1, 2->1, 3->0, 1->3
    return PairGraph(torch.tensor([0, 2, 3, 1]), torch.tensor([1, 1, 0, 3]), 4,
                     {hpcgnn.NID: torch.tensor([10, 11, 12, 13])}, {hpcgnn.EID: torch.tensor([5, 6, 7, 8])})


def test_pair_graph_apply_edges_with_dgl_builtins():
    g = _pair_graph()
    h = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    u, v = g.edges()
    with g.local_scope():
        g.ndata["h"] = h
        g.apply_edges(fn.u_dot_v("h", "h", "score"))
        assert torch.equal(g.edata["score"], (h[u] * h[v]).sum(1, keepdim=True))      # [E, 1], as DGL
        g.apply_edges(fn.u_sub_v("h", "h", "d"))
        assert torch.equal(g.edata["d"], h[u] - h[v])
        g.edata["w"] = torch.tensor([1.0, 2.0, 3.0, 4.0])
        g.apply_edges(fn.u_mul_e("h", "w", "m"))                # [E] edge column broadcast over features
        assert torch.equal(g.edata["m"], h[u] * g.edata["w"][:, None])
        g.ndata["k"] = torch.ones(4, 2, 3)                       # DGL broadcasts feature shapes (3) and (2, 3)
        g.apply_edges(fn.u_add_v("h", "k", "s"))
        assert g.edata["s"].shape == (4, 2, 3) and torch.equal(g.edata["s"][:, 1], h[u] + 1)
        g.apply_edges(fn.copy_u("h", "c"), edges=torch.tensor([2]))      # some edges: zeros elsewhere
        assert torch.equal(g.edata["c"][2], h[3]) and g.edata["c"][[0, 1, 3]].abs().sum() == 0
        g.apply_edges(lambda edges: {"udf": edges.src["h"][:, 0] + edges.dst["h"][:, 0] + edges.data["w"]})
        assert torch.equal(g.edata["udf"], h[u, 0] + h[v, 0] + g.edata["w"])
        with pytest.raises(DGLError, match="4 rows"):
            g.ndata["bad"] = torch.ones(3, 2)
        with pytest.raises(DGLError, match="'nope'"):
            g.apply_edges(fn.u_dot_v("nope", "h", "x"))
        g.ndata["h2"] = torch.ones(4, 2)
        with pytest.raises(DGLError, match="do not broadcast"):
            g.apply_edges(fn.u_add_v("h", "h2", "x"))
    assert sorted(g.ndata) == [hpcgnn.NID] and sorted(g.edata) == [hpcgnn.EID]   # local_scope dropped them
    moved = g.to("cpu")
    assert moved.num_edges() == 4 and torch.equal(moved.edata[hpcgnn.EID], g.edata[hpcgnn.EID])
    assert g.in_degrees().tolist() == [1, 2, 0, 1] and g.out_degrees().tolist() == [1, 1, 1, 1]
    assert hpcgnn.function is fn and "u_dot_v" in fn.__all__ and "e_div_v" in fn.__all__


def test_initialize_alone_is_dgls_standalone_mode(parted):
    """One process, no layout: DGL's standalone mode (the trainer holds the graph)."""
    _, cfg, _, _ = parted
    code = ("import hpcgnn.distributed as dist; ctx = dist.initialize('ip_config.txt', part_config=%r); "
            "g = dist.DistGraph('g'); print(ctx.layout, g.rank(), g.num_nodes()); dist.exit_client()" % cfg)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "HPCGNN_LAYOUT"))}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    from hpcgnn.distributed.init import STANDALONE

    assert res.stdout.split() == [STANDALONE, "0", "600"], res.stdout


def test_dist_data_loader_batches_a_dataset_through_collate_fn():
    ids = torch.arange(10, 20)
    loader = dist.DistDataLoader(ids, batch_size=4, shuffle=False, collate_fn=lambda b: torch.stack(b) * 2)
    assert len(loader) == 3 and [b.tolist() for b in loader] == [[20, 22, 24, 26], [28, 30, 32, 34], [36, 38]]
    loader = dist.DistDataLoader(list(range(10)), 3, shuffle=True, drop_last=True)
    got = list(loader)
    assert len(loader) == len(got) == 3 and all(len(b) == 3 for b in got) and len(set(sum(got, []))) == 9
    with pytest.raises(InputError, match="batch_size"):
        dist.DistDataLoader(ids, 0)


@pytest.fixture(scope="module")
def hetero_parted(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("dglhetero"))
    raw = os.path.join(tmp, "h.h5")
    generate_hetero_graph(raw, None, 800, 4, 8, 4, seed=3, name="mag", overwrite=True)
    dist.partition_graph(raw, "mag", 2, os.path.join(tmp, "parts"), overwrite=True)
    return os.path.join(tmp, "parts", "mag.json")


def test_node_loader_on_a_typed_graph_yields_dgls_hetero_batches(hetero_parted):
    """DGL's R-GCN loop: {ntype: ids} dicts, heterogeneous blocks, the last layer's
    output of the seeds' type alone."""
    from hpcgnn.distributed.dataloader import HeteroNodeBatch
    from hpcgnn.nn import GraphConv, HeteroBlock, HeteroGraphConv

    g = dist.DistGraph("mag", part_config=hetero_parted)
    try:
        book = g.get_partition_book()
        train = dist.node_split(g.nodes["paper"].data["train_mask"], book, ntype="paper", force_even=True)
        loader = dist.DistNodeDataLoader(g, {"paper": train}, dataloading.MultiLayerNeighborSampler([3, 3]),
                                         batch_size=32, shuffle=True)
        conv = HeteroGraphConv({rel: GraphConv(8, 8, norm="right", weight=False, bias=False) for rel in g.etypes})
        seen = []
        for b in loader:
            assert isinstance(b, HeteroNodeBatch)
            input_nodes, seeds, blocks = b
            assert sorted(input_nodes) == sorted(g.ntypes) and list(seeds) == ["paper"]
            assert len(blocks) == 2 and all(isinstance(x, HeteroBlock) for x in blocks)
            # per-type ids: the batch's homogeneous ids mapped through the partition book
            types, per_type = book.map_to_per_ntype(b.n_id)
            for t in g.ntypes:
                assert torch.equal(input_nodes[t], per_type[types == g.get_ntype_id(t)])
            assert torch.equal(seeds["paper"], per_type[:b.batch_size]) and len(seeds["paper"]) <= 32
            seen.append(seeds["paper"])
            assert blocks[-1].dsttypes == ["paper"] and blocks[-1].num_dst_nodes("paper") == len(seeds["paper"])
            assert all(c[2] == "paper" for c in blocks[-1].canonical_etypes)
            assert blocks[-1].local_var() is blocks[-1]
            with blocks[-1].local_scope() as lb:
                assert lb is blocks[-1]
            feats = {t: torch.ones(len(ids), 8) for t, ids in input_nodes.items()}
            feats["paper"] = g.nodes["paper"].data["feat"][input_nodes["paper"]]
            h = conv(blocks[0], feats)
            assert set(h) <= set(blocks[0].dsttypes) and all(len(v) for v in h.values())
            out = conv(blocks[1], h)
            assert list(out) == ["paper"] and out["paper"].shape == (len(seeds["paper"]), 8)
        assert sorted(torch.cat(seen).tolist()) == sorted(train.tolist())
        # to_hetero_blocks keeps every type as a destination type unless asked
        full = hpcgnn.nn.to_hetero_blocks(b.minibatch, g)[-1]
        assert full.dsttypes == g.ntypes and full.canonical_etypes == g.canonical_etypes
        assert full.num_dst_nodes("author") == 0
    finally:
        g.context.finalize()
