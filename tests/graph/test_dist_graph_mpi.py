"""DistGraph on MPI windows, standalone and distributed, against the raw input.

The oracle is the raw graph file (read with plain h5py) plus the id mapping the
partitioner stored (``return_mapping``)."""
import os

import h5py
import numpy as np
import pytest
import torch

import hpcgnn
from conftest import served_layout
from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph
from hpcgnn.errors import InputError
from hpcgnn.graph import DistGraph
from hpcgnn.partition import load_partition, partition_graph
from hpcgnn.comm.rma.rowstore import RowStore
from hpcgnn.graph.structure import GraphStructure

world = MPI.COMM_WORLD


def _make(tmp, nparts, comm, edge_dir="in"):
    raw = os.path.join(tmp, "g.h5")
    generate_graph(raw, comm, 3000, 6, 8, 4, seed=3, edge_feat=True, name="g", overwrite=True)
    cfg = partition_graph(raw, os.path.join(tmp, f"parts{nparts}{edge_dir}"), nparts, comm=comm,
                          return_mapping=True, edge_dir=edge_dir, overwrite=True)
    return raw, cfg


class Oracle:
    """The input graph in new ids."""

    def __init__(self, raw, cfg):
        with h5py.File(raw, "r") as f:
            src, dst = f["edges/src"][:], f["edges/dst"][:]
            feat, label = f["nodes/data/feat"][:], f["nodes/data/label"][:]
            weight = f["edges/data/weight"][:]
        p0 = load_partition(cfg, 0)
        P = p0.book.num_partitions()
        parts = [load_partition(cfg, p) for p in range(P)]
        orig_nid = np.concatenate([p.orig_nid for p in parts])
        orig_eid = np.concatenate([p.orig_eid for p in parts])
        new_of = np.empty_like(orig_nid)
        new_of[orig_nid] = np.arange(len(orig_nid))
        self.src = new_of[src[orig_eid]]          # by new edge id
        self.dst = new_of[dst[orig_eid]]
        self.feat = feat[orig_nid]                 # by new node id
        self.label = label[orig_nid]
        self.weight = weight[orig_eid]
        n = len(orig_nid)
        self.in_deg = np.bincount(self.dst, minlength=n)
        self.out_deg = np.bincount(self.src, minlength=n)
        self.n = n


def _check_graph(g, o, rng):
    n, m = g.num_nodes(), g.num_edges()
    assert (n, m) == (o.n, len(o.src))
    for ids in (rng.integers(0, n, 500), np.array([7, 7, 3, 0, n - 1]), np.zeros(0, np.int64), np.arange(n)):
        assert torch.equal(g.ndata["feat"][torch.from_numpy(ids)], torch.from_numpy(o.feat[ids]))
        assert np.array_equal(g.ndata["label"][ids].numpy(), o.label[ids])
    e = rng.integers(0, m, 700)
    assert np.array_equal(g.edata["weight"][e].numpy(), o.weight[e])
    bounds = g.get_partition_book().edge_ranges
    runs = [np.arange(m), np.arange(m // 3 - 5, 2 * m // 3 + 7), np.arange(m - 3, m), np.array([0]),
            np.array([m - 1, 0, m - 1])]
    # every partition's first and last edge, alone and as a run across the partitions
    runs += [bounds[:, 0], bounds[:, 1] - 1, np.arange(bounds[0, 1] - 2, bounds[-1, 0] + 2)]
    for ids in [e] + runs:                 # any ids: the search; consecutive ones: one read of the rows
        s, d = g.find_edges(ids)
        assert np.array_equal(s.numpy(), o.src[ids]) and np.array_equal(d.numpy(), o.dst[ids])
    v = rng.integers(0, n, 300)
    assert np.array_equal(g.in_degrees(v).numpy(), o.in_deg[v])
    assert np.array_equal(g.out_degrees(v).numpy(), o.out_deg[v])
    if g.edge_dir == "in":
        sub = g.in_subgraph(v[:50])
        want = np.isin(o.dst, v[:50])
        assert sorted(sub.eid.tolist()) == sorted(np.flatnonzero(want).tolist())
        assert np.array_equal(o.src[sub.eid.numpy()], sub.src.numpy())
        assert np.array_equal(o.dst[sub.eid.numpy()], sub.dst.numpy())
    with pytest.raises(InputError, match="out of range"):
        g.ndata["feat"][np.array([n])]
    with pytest.raises(InputError, match="out of range"):
        g.find_edges([m + 5])
    assert g.ntypes == ["_N"] and g.canonical_etypes == [("_N", "_E", "_N")]
    assert g.node_attr_schemes()["feat"][0] == (8,)


def test_standalone_loads_every_partition_locally(tmp_path):
    for edge_dir in ("in", "out"):
        raw, cfg = _make(str(tmp_path), 3, None, edge_dir=edge_dir)
        g = DistGraph("g", part_config=cfg)
        assert g.standalone
        _check_graph(g, Oracle(raw, cfg), np.random.default_rng(0))
        assert g.get_partition_book().num_partitions() == 3
        lp = g.local_partition
        assert lp["indptr"][0] == 0 and len(lp["indptr"]) == lp["node_range"][1] - lp["node_range"][0] + 1
        # the seam samplers read: every attribute GraphStructure names, with its type
        for name, kind in GraphStructure.__annotations__.items():
            value = getattr(g.tables, name)
            assert isinstance(value, {"RowStore": RowStore, "int": int}.get(kind, dict)), name
        assert g.tables.num_etypes == 1 and g.tables.csr.nrows == g.num_nodes()
        g._ctx.finalize()


def test_standalone_needs_a_config():
    with pytest.raises(InputError, match="part_config"):
        DistGraph("nothing")


def _layout():
    return served_layout(world.Get_size())


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_distributed_graph_served_by_servers(shared_tmp):
    layout, rpn, nparts = _layout()
    raw, cfg = _make(shared_tmp, nparts, world)
    oracle = Oracle(raw, cfg)
    ctx = hpcgnn.initialize(layout=layout, ranks_per_node=rpn, part_config=cfg, serve=False)
    if ctx.is_trainer:
        g = DistGraph("g")
        assert not g.standalone and g.get_partition_book().partid == ctx.host_id
        _check_graph(g, oracle, np.random.default_rng(ctx.rank))
        # a graph name nobody holds: a clear error on every trainer, no hang
        with pytest.raises(InputError, match="no server holds a graph named 'other'"):
            DistGraph("other")
        # trainers that name different graphs (only one of them held): all raise
        tr = ctx.trainer_comm.Get_rank()
        if ctx.trainer_comm.Get_size() > 1:
            with pytest.raises(InputError, match=r"the trainers name different graphs \['g', 'nosuch'\]"):
                DistGraph("g" if tr == 0 else "nosuch")
        # loading a second graph on demand goes through the servers' command loop
        g2 = DistGraph("g2", part_config=cfg)
        assert torch.equal(g2.ndata["feat"][[0, 1]], torch.from_numpy(oracle.feat[[0, 1]]))
        g.barrier()
    else:
        ctx.service.serve()
    ctx.finalize()
    assert ctx.finalized


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_layout_without_servers_is_rejected(shared_tmp):
    _, cfg = _make(shared_tmp, 1, world)
    with pytest.raises(InputError, match="no server rank"):
        hpcgnn.initialize(layout="servers=0,samplers=0,trainers=rest", part_config=cfg, serve=False)
    world.Barrier()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_dist_tensor_in_a_served_launch(shared_tmp):
    """Trainers alone create, fill, read, write and free DistTensors while the servers
    sit in their command loop (the normal launch)."""
    layout, rpn, nparts = _layout()
    _, cfg = _make(shared_tmp, nparts, world)
    ctx = hpcgnn.initialize(layout=layout, ranks_per_node=rpn, part_config=cfg, serve=False)
    if ctx.is_trainer:
        from hpcgnn.graph import DistTensor

        g = DistGraph("g")
        n = g.num_nodes()
        pol = g.get_partition_book()
        from hpcgnn.graph import PartitionPolicy

        t = DistTensor((n, 3), torch.float32, name="h", init_func=lambda s, d: torch.ones(s, dtype=d),
                       part_policy=PartitionPolicy("node:_N", pol))
        assert torch.equal(t[[0, n - 1]], torch.ones(2, 3))
        t.barrier()                                            # everyone has read before anyone writes
        tc = ctx.trainer_comm
        mine = np.arange(tc.Get_rank(), n, tc.Get_size())      # disjoint rows per trainer
        t[mine] = torch.from_numpy(np.repeat(mine[:, None], 3, axis=1).astype(np.float32))
        t.barrier()
        assert np.array_equal(t[np.arange(n)][:, 0].numpy(), np.arange(n, dtype=np.float32))
        same = DistTensor((n, 3), torch.float32, name="h")     # a second handle, same storage
        assert torch.equal(same[[5]], t[[5]])
        with pytest.raises(InputError, match="already exists with shape"):
            DistTensor((n, 4), torch.float32, name="h")
        anon = DistTensor((10,), torch.int64)
        anon[[1, 2]] = torch.tensor([7, 8])
        anon.barrier()
        assert anon[[2, 1, 0]].tolist() == [8, 7, 0]
        anon.free()
        # init_func: a cast within a kind is fine, across kinds refused; a failed one
        # leaves the name free
        f64 = DistTensor((10, 2), torch.float32, name="f64", init_func=lambda s, d: np.full(s, 0.5))
        assert torch.equal(f64[[3]], torch.full((1, 2), 0.5))
        with pytest.raises(InputError, match="float64 values for a int64 tensor"):
            DistTensor((10,), torch.int64, name="ints", init_func=lambda s, d: np.full(s, 2.9))
        with pytest.raises(InputError, match="init_func returned shape"):
            DistTensor((10, 2), torch.float32, name="retry", init_func=lambda s, d: np.zeros(3))
        again = DistTensor((10, 2), torch.float32, name="retry", init_func=lambda s, d: torch.ones(s, dtype=d))
        assert torch.equal(again[[0, 9]], torch.ones(2, 2))
        # rows by reference outlive nothing: after free() they raise
        refs = t.row_refs([0, 1])
        t.free()
        with pytest.raises(InputError, match="has been freed"):
            refs.materialize()
    else:
        ctx.service.serve()
    ctx.finalize()


def test_a_dgl_script_ports_unchanged(tmp_path):
    """The idioms of DGL's distributed tutorial and API, standalone on 2 partitions."""
    from hpcgnn.graph import DistEmbedding, DistTensor, PartitionPolicy, node_split

    raw, cfg = _make(str(tmp_path), 2, None)
    o = Oracle(raw, cfg)
    g = DistGraph("g", part_config=cfg)
    n, m = g.num_nodes(), g.num_edges()
    # slices and single ids read rows, as DGL's DistTensor does
    assert torch.equal(g.ndata["label"][0:n], torch.from_numpy(o.label))
    assert np.array_equal(g.ndata["feat"][5:9].numpy(), o.feat[5:9])
    assert g.ndata["feat"][3].shape == (1, 8)
    # graph data knows its partition book: node_split(g.ndata[...]) needs nothing else
    mask = g.ndata["train_mask"]
    assert mask.part_policy == g.get_node_partition_policy()
    book = g.get_partition_book()
    shares = [node_split(mask, book, "_N", r, True, num_trainers=2).numpy() for r in range(2)]
    assert np.array_equal(np.sort(np.concatenate(shares)), np.flatnonzero(mask[0:n].numpy()))
    assert np.array_equal(node_split(mask, rank=0, num_trainers=2).numpy(), shares[0])
    with pytest.raises(InputError, match="partition_book"):
        node_split(np.ones(n, bool), rank=0, num_trainers=2)
    # members DGL documents
    assert g.idtype == torch.int64 and g.device == torch.device("cpu")
    assert g.get_ntype_id("_N") == 0 and g.get_etype_id(("_N", "_E", "_N")) == 0
    assert g.num_edges(("_N", "_E", "_N")) == m == g.num_edges(g.canonical_etypes[0])
    assert g.get_edge_partition_policy().get_size() == m
    assert g.node_attr_schemes()["feat"].shape == (8,) and g.edge_attr_schemes()["weight"].dtype == torch.float32
    assert g.in_degrees(7) == int(o.in_deg[7]) and isinstance(g.out_degrees(7), int)
    assert torch.equal(g.in_degrees(torch.tensor([7])), torch.tensor([int(o.in_deg[7])]))
    # a DistTensor with one row per node follows the node partitions, and can be attached
    h = DistTensor((n, 4), torch.float32, name="h")
    assert h.part_policy == g.get_node_partition_policy()
    h[0:3] = torch.ones(3, 4)
    g.ndata["h"] = h
    assert torch.equal(g.ndata["h"][0:4].sum(1), torch.tensor([4.0, 4, 4, 0]))
    with pytest.raises(InputError, match="rows"):
        g.ndata["bad"] = DistTensor((n + 1, 2), torch.float32)
    with pytest.raises(InputError, match="already"):
        g.ndata["feat"] = h
    # an explicit policy in a standalone process (DGL's standalone mode)
    pol = PartitionPolicy("node", book)
    t = DistTensor((n, 2), torch.int64, name="t", part_policy=pol)
    t[torch.tensor([n - 1])] = torch.tensor([[1, 2]])
    assert t[n - 1].tolist() == [[1, 2]]
    emb = DistEmbedding(n, 3, name="e", part_policy=pol)
    assert emb.part_policy == pol
    g._ctx.finalize()
