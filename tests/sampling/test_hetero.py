"""Heterogeneous graphs end to end in one process: typed partitioning, the typed
partition book, DistGraph's typed views, per-edge-type fanouts and hetero batches."""
import os

import numpy as np
import pytest
import torch

from hpcgnn.errors import InputError
from hpcgnn.graph import DistGraph
from hpcgnn.partition import load_partition, partition_graph
from hpcgnn.sampling import NeighborSampler, sample_neighbors
from harness import ETYPES, planted_graph, write_raw

pytestmark = pytest.mark.timeout(120)
CANON = [tuple(t) for t in ETYPES]


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("hetero"))
    n = 1500
    src, dst, _ = planted_graph(n, 10, 3, seed=4)
    raw = os.path.join(tmp, "h.h5")
    g = write_raw(raw, n, src, dst, types=True, name="h")
    cfg = partition_graph(raw, os.path.join(tmp, "parts"), 2, return_mapping=True, overwrite=True)
    parts = [load_partition(cfg, p) for p in range(2)]
    orig_nid = np.concatenate([p.orig_nid for p in parts])
    orig_eid = np.concatenate([p.orig_eid for p in parts])
    new_of = np.empty_like(orig_nid)
    new_of[orig_nid] = np.arange(n)
    dg = DistGraph("h", part_config=cfg)
    o = {"src": new_of[src[orig_eid]], "dst": new_of[dst[orig_eid]], "etype": g["edge_type"][orig_eid],
         "ntype": g["node_type"][orig_nid], "feat": g["node"]["feat"][orig_nid], "n": n}
    yield dg, o
    dg._ctx.finalize()


def test_typed_book_and_views(typed):
    g, o = typed
    book = g.get_partition_book()
    assert g.ntypes == ["paper", "author"] and g.canonical_etypes == CANON
    assert g.etypes == ["cites", "writes", "rev", "knows"] and not g.is_homogeneous
    counts = np.bincount(o["ntype"], minlength=2)
    assert [g.num_nodes("paper"), g.num_nodes("author")] == counts.tolist()
    assert [g.num_edges(c) for c in CANON] == np.bincount(o["etype"], minlength=4).tolist()
    assert g.num_edges("writes") == g.num_edges(("author", "writes", "paper")) == g.num_edges("author:writes:paper")
    ids = np.arange(o["n"])
    t, per = book.map_to_per_ntype(ids)
    assert np.array_equal(t, o["ntype"])
    for i, name in enumerate(g.ntypes):
        assert np.array_equal(np.sort(per[t == i]), np.arange(counts[i])), "per-type ids 0..n_t-1"
        assert np.array_equal(book.map_to_homo_nid(per[t == i], name), ids[t == i])
    eids = np.arange(len(o["src"]))
    et, eper = book.map_to_per_etype(eids)
    assert np.array_equal(et, o["etype"])
    for i, c in enumerate(CANON):
        assert np.array_equal(book.map_to_homo_eid(eper[et == i], c), eids[et == i])
    # typed data views: per-type ids in, rows of those nodes out
    per_ids = np.array([0, 5, g.num_nodes("author") - 1])
    homo = book.map_to_homo_nid(per_ids, "author")
    assert torch.equal(g.nodes["author"].data["feat"][per_ids], torch.from_numpy(o["feat"][homo]))
    assert torch.equal(g.ndata["author"]["feat"][per_ids], torch.from_numpy(o["feat"][homo]))
    assert set(g.ndata["paper"]) == {"feat", "label", "train_mask", "val_mask", "test_mask"}
    with pytest.raises(KeyError):
        g.ndata["venue"]
    with pytest.raises(InputError, match="unknown node type"):
        g.nodes["venue"]
    with pytest.raises(InputError, match="DistGraph 'h': unknown node type 'venue'"):
        g.num_nodes("venue")
    with pytest.raises(InputError, match="out of range"):
        g.nodes["paper"].data["feat"][[g.num_nodes("paper")]]
    # degrees count every type
    deg = np.bincount(o["dst"], minlength=o["n"])
    assert np.array_equal(g.in_degrees(ids).numpy(), deg)


def test_per_type_split_and_book_calls(typed):
    """DGL's typed calls: node_split of a per-type mask gives per-type ids, the typed
    data view works as a mask, the book takes type arguments."""
    from hpcgnn.graph import edge_split, node_split

    g, o = typed
    book = g.get_partition_book()
    npaper = g.num_nodes("paper")
    homo_mask = g.ndata["train_mask"][0:o["n"]].numpy().astype(bool) & (o["ntype"] == 0)
    want = np.sort(book.map_to_per_ntype(np.flatnonzero(homo_mask))[1])
    view = g.nodes["paper"].data["train_mask"]
    per_mask = view[0:npaper].numpy()
    for mask in (per_mask, torch.from_numpy(per_mask), view):
        for even in (True, False):
            shares = [node_split(mask, book, "paper", r, even, num_trainers=3).numpy() for r in range(3)]
            got = np.concatenate(shares)
            assert np.array_equal(np.sort(got), want) and len(got) == len(want)
            assert all(np.all(s < npaper) for s in shares)
    with pytest.raises(InputError, match="the mask has .* rows; with ntype/etype='author' it needs one per 'author'"):
        node_split(per_mask, book, "author", 0, num_trainers=1)
    # a mask over all nodes still gives homogeneous ids
    assert np.array_equal(node_split(homo_mask, book, "paper", 0, num_trainers=1).numpy(), np.flatnonzero(homo_mask))
    # edges: a per-type mask of one edge type, the type as a canonical triple
    c = CANON[1]
    ne = g.num_edges(c)
    emask = np.zeros(ne, bool)
    emask[::3] = True
    got = np.concatenate([edge_split(emask, book, c, r, num_trainers=2).numpy() for r in range(2)])
    assert np.array_equal(np.sort(got), np.flatnonzero(emask))
    # the book with type arguments: per-type ids
    assert np.array_equal(book.nid2partid(per_mask.nonzero()[0], "paper"),
                          book.nid2partid(book.map_to_homo_nid(per_mask.nonzero()[0], "paper")))
    p0 = book.partid2nids(0, "paper")
    assert isinstance(p0, torch.Tensor) and torch.all(book.nid2partid(p0, "paper") == 0)
    assert sum(len(book.partid2nids(p, "author")) for p in range(2)) == g.num_nodes("author")
    assert sum(len(book.partid2eids(p, c)) for p in range(2)) == ne


def test_loaders_take_per_type_ids_as_a_dict(typed):
    """DGL's {ntype: per-type ids} seeds (what node_split(..., ntype=T) gives) are the
    nodes of that type; per-type ids passed bare were taken as other nodes."""
    from hpcgnn.graph import node_split
    from hpcgnn.sampling import DistEdgeDataLoader, DistNodeDataLoader

    g, o = typed
    book = g.get_partition_book()
    per = node_split(g.nodes["paper"].data["train_mask"], ntype="paper").numpy()[:100]
    s = NeighborSampler([3])
    seeds = []
    for b in DistNodeDataLoader(g, {"paper": per}, s, batch_size=50, prefetch=0):
        seeds.append(b.n_id[: b.batch_size].numpy())
    seeds = np.concatenate(seeds)
    assert np.array_equal(np.sort(seeds), np.sort(book.map_to_homo_nid(per, "paper")))
    assert (o["ntype"][seeds] == 0).all()
    whole = node_split(g.nodes["paper"].data["train_mask"], ntype="paper")     # passed bare: it says its type
    got = np.concatenate([b.n_id[: b.batch_size].numpy() for b in DistNodeDataLoader(g, whole, s, batch_size=100,
                                                                                       prefetch=0)])
    assert np.array_equal(np.sort(got), np.sort(book.map_to_homo_nid(whole.numpy(), "paper")))
    with pytest.raises(InputError, match="these are per-type node ids \\(of 'paper'\\), not edge ids"):
        DistEdgeDataLoader(g, whole, s, batch_size=20)
    c = CANON[1]
    per_e = np.arange(0, g.num_edges(c), 5)[:40]
    got = np.concatenate([b.input_id.numpy() for b in DistEdgeDataLoader(g, {c: per_e}, s, batch_size=20,
                                                                          prefetch=0)])
    assert np.array_equal(np.sort(got), np.sort(book.map_to_homo_eid(per_e, c)))
    with pytest.raises(InputError, match="names 'nope', not a node type"):
        DistNodeDataLoader(g, {"nope": per}, s, batch_size=50)
    with pytest.raises(InputError, match="the per-type ids of 'paper'.*out of range"):
        DistNodeDataLoader(g, {"paper": np.array([g.num_nodes("paper")])}, s, batch_size=50)


def test_per_type_policies_and_attached_data(typed):
    """DGL's per-type idioms: a per-type policy (an embedding of one type's nodes),
    per-type local ids, and data attached to the whole graph or to one type."""
    from hpcgnn.graph import DistEmbedding, DistTensor

    g, o = typed
    book = g.get_partition_book()
    npaper = g.num_nodes("paper")
    pol = g.get_node_partition_policy("paper")
    assert pol.get_size() == npaper and pol.policy_str == "node:paper"
    assert pol.boundaries.tolist() == [0, len(book.partid2nids(0, "paper")), npaper]
    emb = DistEmbedding(npaper, 4, name="paper_emb", part_policy=pol)
    assert emb.part_policy == pol and emb(torch.tensor([0, npaper - 1])).shape == (2, 4)
    # a tensor sized like one type follows that type's partitions by itself
    assert DistTensor((npaper, 2), torch.float32, name="per_paper").part_policy == pol
    first = book.partid2nids(1, "author")[:3]
    assert book.nid2localnid(first, 1, "author").tolist() == [0, 1, 2]
    # a second handle on a named tensor keeps the policy
    assert DistTensor((npaper, 2), torch.float32, name="per_paper").part_policy == pol
    # attached to the whole graph: still readable through the typed views
    h = DistTensor((o["n"], 3), torch.float32, name="h_all")
    g.ndata["h_all"] = h
    assert "feat" in g.nodes["paper"].data and g.nodes["paper"].data["h_all"].shape == (npaper, 3)
    # attached to one type, indexed by per-type ids
    p = DistTensor((npaper, 2), torch.int64, name="p_only")
    p[torch.tensor([5])] = torch.tensor([[7, 8]])
    g.nodes["paper"].data["p_only"] = p
    assert g.nodes["paper"].data["p_only"][5].tolist() == [[7, 8]]
    assert "p_only" not in g.nodes["author"].data
    with pytest.raises(InputError, match="rows"):
        g.nodes["author"].data["p_only"] = p


def test_per_etype_fanouts(typed):
    g, o = typed
    seeds = np.flatnonzero(o["ntype"] == 0)[:200]          # papers: in-edges cites (0) and writes (1)
    fan = {"cites": 2, ("author", "writes", "paper"): 3}
    src, dst, eid = sample_neighbors(g, seeds, fan, rng=1)
    src, dst, eid = src.numpy(), dst.numpy(), eid.numpy()
    assert np.array_equal(o["src"][eid], src) and np.array_equal(o["dst"][eid], dst)
    assert len(np.unique(eid)) == len(eid)
    et = o["etype"][eid]
    for t, k in ((0, 2), (1, 3)):
        deg_t = np.bincount(o["dst"][o["etype"] == t], minlength=o["n"])[seeds]
        got = np.bincount(dst[et == t], minlength=o["n"])[seeds]
        assert np.array_equal(got, np.minimum(deg_t, k)), f"etype {t}: min(degree, fanout) per seed"
    assert not np.isin(et, [2, 3]).any(), "types not named in the fanout dict are not sampled"
    with pytest.raises(InputError, match="unknown edge type"):
        sample_neighbors(g, seeds, {"nope": 1})


def test_hetero_batch(typed):
    g, o = typed
    seeds = np.flatnonzero(o["ntype"] == 0)[:64]
    s = NeighborSampler([{"cites": 4, "writes": 2}, {"cites": 3, "writes": 2, "rev": 2, "knows": 2}], seed=3)
    mb = s.sample(g, seeds)
    assert mb.e_type is not None and np.array_equal(mb.n_type.numpy(), o["ntype"][mb.n_id.numpy()])
    e = mb.e_id.numpy()
    assert np.array_equal(mb.e_type.numpy(), o["etype"][e])
    hb = mb.to_hetero(g)
    assert hb.seed_type == "paper" and hb.batch_size == 64
    assert torch.equal(hb.n_id["paper"][:64], torch.from_numpy(seeds))
    for key, ei in hb.edge_index_dict.items():
        s_t, _, d_t = key
        gs, gd = hb.n_id[s_t][ei[0]].numpy(), hb.n_id[d_t][ei[1]].numpy()
        eid = hb.e_id[key].numpy()
        assert np.array_equal(o["src"][eid], gs) and np.array_equal(o["dst"][eid], gd), key
        assert (o["etype"][eid] == CANON.index(key)).all()
    for t, x in hb.x_dict.items():
        assert torch.equal(x, torch.from_numpy(o["feat"][hb.n_id[t].numpy()]))
    # rows fetched by reference (feature_rows="refs") convert the same way
    from hpcgnn.sampling import DistNodeDataLoader
    loader = DistNodeDataLoader(g, seeds, s, batch_size=64, seed=3, prefetch=0, feature_rows="refs")
    rb = next(iter(loader))
    for t, x in rb.to_hetero(g).x_dict.items():
        assert torch.equal(x, torch.from_numpy(o["feat"][rb.to_hetero(g).n_id[t].numpy()]))
    data = hb.to_pyg()
    assert set(data.edge_types) == set(hb.edge_index_dict) and data["paper"].batch_size == 64
    # a PyG heterogeneous model runs on it
    from torch_geometric.nn import HeteroConv, SAGEConv

    conv = HeteroConv({k: SAGEConv((-1, -1), 8) for k in data.edge_types}, aggr="sum")
    out = conv(data.x_dict, data.edge_index_dict)
    assert out["paper"].shape == (len(hb.n_id["paper"]), 8)


def test_rgcn_gives_every_seed_an_output():
    """A seed no sampled edge reaches still gets logits (per-type self-connection)."""
    from hpcgnn.train.hetero_model import RGCN

    m = RGCN({"paper": 4}, ["paper", "author"], CANON, 8, 3, 2)
    x = {"paper": torch.randn(2, 4)}
    out = m(x, {}, {"paper": 2}, "paper", 2)
    assert out.shape == (2, 3)
    ei = {("author", "writes", "paper"): torch.tensor([[0], [1]])}
    out = m(x, ei, {"paper": 2, "author": 1}, "paper", 1)
    assert out.shape == (1, 3)


def test_edge_types_without_node_types_and_bad_names(tmp_path):
    import h5py
    import json

    n = 200
    src, dst, _ = planted_graph(n, 4, 2, seed=1)
    raw = str(tmp_path / "kg.h5")
    write_raw(raw, n, src, dst, name="kg")
    with h5py.File(raw, "a") as f:
        f["edges/type"] = (src % 2).astype(np.int16)
        f.attrs["etypes"] = json.dumps([["entity", "r1", "entity"], ["entity", "r2", "entity"]])
    cfg = partition_graph(raw, str(tmp_path / "p"), 2, return_mapping=True)
    parts = [load_partition(cfg, p) for p in range(2)]
    book = parts[0].book
    assert book.ntypes == ["entity"] and book.etypes == ["entity:r1:entity", "entity:r2:entity"]
    assert parts[0].num_etypes == 2
    assert sum(p.num_edges for p in parts) == len(src)
    from hpcgnn.graph import edge_split

    mask = np.ones(len(src), dtype=bool)
    assert len(edge_split(mask, book, etype="r1", rank=0, num_trainers=1)) == len(src)
    with h5py.File(raw, "a") as f:
        f.attrs["etypes"] = json.dumps([["entity", "r:1", "entity"], ["entity", "r2", "entity"]])
    with pytest.raises(InputError, match="contains ':'"):
        partition_graph(raw, str(tmp_path / "q"), 2)


def test_a_name_held_already_with_other_partitions_is_refused(typed, tmp_path):
    """The first graph of a name answered for the second's partitions, silently.
    (Last in this module: a second graph in the process changes which graph a
    graph-sized DistTensor follows.)"""
    g, o = typed
    here = os.path.dirname(g._t.config_path)
    assert DistGraph("h", part_config=g._t.config_path).num_nodes() == o["n"]      # the same: fine
    again = partition_graph(os.path.join(os.path.dirname(here), "h.h5"), str(tmp_path / "p3"), 3, overwrite=True)
    with pytest.raises(InputError, match="a graph of this name is held already.*DistGraph\\('h_2'"):
        DistGraph("h", part_config=again)
    assert DistGraph("h_3parts", part_config=again).get_partition_book().num_partitions() == 3


def test_typed_find_edges_any_ids_and_runs(typed):
    """The owner endpoint comes from the etype-major CSR rows: any ids, and runs of
    consecutive ids across edge types and partitions."""
    g, o = typed
    m = len(o["src"])
    rng = np.random.default_rng(5)
    for ids in (rng.integers(0, m, 900), np.arange(m), np.arange(m // 4, 3 * m // 4), np.array([m - 1, 0])):
        s, d = g.find_edges(ids)
        assert np.array_equal(s.numpy(), o["src"][ids]) and np.array_equal(d.numpy(), o["dst"][ids])
