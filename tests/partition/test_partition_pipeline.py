"""partition_graph at 1-4 ranks against serial oracles (collective tests).

Each test writes a small raw graph with plain h5py (rank 0), partitions it with every
rank of the job, and rank 0 checks the result by reading it back independently."""
import json
import os

import numpy as np
import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.partition import load_partition, partition_graph
from harness import check_partitioned, load_all, make_raw, planted_graph, symmetric_csr

comm = MPI.COMM_WORLD


def _run(path, out, nparts, **kw):
    kw.setdefault("return_mapping", True)
    cfg = partition_graph(path, out, nparts, comm=comm, **kw)
    comm.Barrier()
    return cfg


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("method,nparts,edge_dir,types", [
    ("parmetis", 3, "in", False), ("parmetis", 4, "out", True), ("random", 5, "in", True),
    ("random", 2, "out", False), ("frequency", 3, "in", True), ("parmetis+frequency", 2, "out", False)])
def test_partitions_hold_exactly_the_input(shared_dir, method, nparts, edge_dir, types):
    src, dst, _ = planted_graph(3000, 8, 4, seed=1)
    path, g = make_raw(comm, shared_dir, 3000, src, dst, types=types)
    method, _, refine = method.partition("+")
    cfg = _run(path, os.path.join(shared_dir, "out"), nparts, part_method=method, edge_dir=edge_dir,
               balance_edges=(method == "parmetis"), seed=5, refine=refine or "none", fanouts=[5, 3])
    if comm.Get_rank() == 0:
        conf, parts = load_all(cfg)
        check_partitioned(conf, parts, g, edge_dir)
        assert conf["num_ranks"] == comm.Get_size() and conf["part_method"] == method
        assert conf["edge_dir"] == edge_dir and conf["num_parts"] == nparts
        assert conf["node_feats"]["feat"] == {"dtype": "float32", "shape": [4]}
        assert conf["edge_feats"]["e2"] == {"dtype": "int32", "shape": [2]}
        assert conf["edge_cut"] == sum(p["num_cut_edges"] for p in conf["parts"])
        if types:
            assert conf["raw_node_types"] == ["paper", "author"]
            assert any(c.startswith("ntype=") for c in conf["constraints"]) or method == "random"
        assert not [f for f in os.listdir(os.path.dirname(cfg)) if f.startswith(".")], "no temp files left"


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_one_part_equals_the_input(shared_dir):
    src, dst, _ = planted_graph(1500, 6, 3, seed=2)
    path, g = make_raw(comm, shared_dir, 1500, src, dst)
    cfg = _run(path, os.path.join(shared_dir, "one"), 1)
    if comm.Get_rank() == 0:
        conf, (pt,) = load_all(cfg)
        check_partitioned(conf, [pt], g)
        assert np.array_equal(pt.orig_nid, np.arange(1500)), "same node order"
        s, d = pt.edges()
        assert sorted(zip(s.tolist(), d.tolist())) == sorted(zip(src.tolist(), dst.tolist()))
        assert len(pt.halo_nodes) == 0 and conf["edge_cut"] == 0
        for k, v in g["node"].items():
            assert np.array_equal(pt.node_feats[k], v)


def _bfs_halo(n_src, n_dst, lo, hi, hops, edge_dir):
    """Serial oracle: halo of the node range [lo, hi) by BFS along stored edges."""
    own, other = (n_dst, n_src) if edge_dir == "in" else (n_src, n_dst)
    inner = np.zeros(max(own.max(), other.max()) + 1, dtype=bool)
    inner[lo:hi] = True
    seen = inner.copy()
    frontier = np.arange(lo, hi)
    result = {}
    for k in range(1, hops + 1):
        nb = np.unique(other[np.isin(own, frontier)])
        nb = nb[~seen[nb]]
        seen[nb] = True
        for x in nb.tolist():
            result[x] = k
        frontier = nb
    return result


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("edge_dir", ["in", "out"])
def test_two_hop_halo_matches_bfs(shared_dir, edge_dir):
    src, dst, _ = planted_graph(1200, 4, 6, p_in=0.95, seed=3)
    path, g = make_raw(comm, shared_dir, 1200, src, dst)
    cfg = _run(path, os.path.join(shared_dir, "h2"), 4, num_hops=2, edge_dir=edge_dir)
    if comm.Get_rank() == 0:
        conf, parts = load_all(cfg)
        new2orig = check_partitioned(conf, parts, g, edge_dir)
        orig2new = np.argsort(new2orig)
        n_src, n_dst = orig2new[src], orig2new[dst]
        # new edge id of each input edge
        new_eid = np.empty(len(src), dtype=np.int64)
        for pt in parts:
            new_eid[pt.orig_eid] = pt.edge_start + np.arange(pt.num_edges)
        own = n_dst if edge_dir == "in" else n_src
        other = n_src if edge_dir == "in" else n_dst
        for pt in parts:
            want = _bfs_halo(n_src, n_dst, pt.node_start, pt.node_end, 2, edge_dir)
            assert pt.halo_nodes.tolist() == sorted(want)
            assert pt.halo_hops.tolist() == [want[x] for x in sorted(want)]
            assert len(pt.halo_indptr) == len(pt.halo_nodes) + 1
            for i, h in enumerate(pt.halo_nodes.tolist()):
                a, b = pt.halo_indptr[i], pt.halo_indptr[i + 1]
                if want[h] == 2:
                    assert a == b, "last-hop halo nodes carry no edges"
                    continue
                e = np.flatnonzero(own == h)
                e = e[np.argsort(new_eid[e])]
                assert pt.halo_eid[a:b].tolist() == new_eid[e].tolist()
                assert pt.halo_indices[a:b].tolist() == other[e].tolist()


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_balance_train_mask_within_five_percent(shared_dir):
    n = 8000
    src, dst, _ = planted_graph(n, 10, 4, seed=4)
    # Train nodes concentrated in half of the communities: unbalanced unless asked for.
    block = planted_graph(n, 10, 4, seed=4)[2]
    rng = np.random.default_rng(0)
    train = (rng.random(n) < np.where(block < 2, 0.5, 0.05))
    path, g = make_raw(comm, shared_dir, n, src, dst, extra_node={"train_mask": train})
    cfg = _run(path, os.path.join(shared_dir, "bal"), 4, balance_ntypes=["train_mask"])
    if comm.Get_rank() == 0:
        conf, parts = load_all(cfg)
        check_partitioned(conf, parts, g)
        per = np.array([int(pt.node_feats["train_mask"].sum()) for pt in parts])
        assert per.sum() == train.sum()
        assert np.abs(per / per.mean() - 1).max() <= 0.05, per
        assert [p["weights"]["train_mask"] for p in conf["parts"]] == per.tolist()
        assert conf["constraints"] == ["nodes", "train_mask"]


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_same_ranks_and_seed_give_identical_files(shared_dir):
    import h5py

    src, dst, _ = planted_graph(2500, 8, 4, seed=6)
    path, g = make_raw(comm, shared_dir, 2500, src, dst)
    cfgs = [_run(path, os.path.join(shared_dir, f"det{i}"), 3, seed=7, num_hops=2) for i in range(2)]
    if comm.Get_rank() == 0:
        confs = []
        for c in cfgs:
            with open(c) as f:
                d = json.load(f)
            d.pop("stats")
            d.pop("config_digest")            # a digest of everything, stats (timings) included
            confs.append(d)
        assert confs[0] == confs[1]
        with h5py.File(os.path.join(os.path.dirname(cfgs[0]), "g.h5")) as a, \
                h5py.File(os.path.join(os.path.dirname(cfgs[1]), "g.h5")) as b:
            names = []
            a.visititems(lambda k, v: names.append(k) if isinstance(v, h5py.Dataset) else None)
            for k in names:
                assert np.array_equal(a[k][()], b[k][()]), k


def _sym_pairs(src, dst):
    keep = src != dst
    u, v = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    return np.unique(np.stack([u, v], 1), axis=0)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.slow
def test_parmetis_cut_close_to_serial_metis(shared_dir):
    from hpcgnn.partition import metis_part_kway

    n, P = 100_000, 8
    src, dst, _ = planted_graph(n, 10, 16, p_in=0.9, seed=8, loops=False)
    path, g = make_raw(comm, shared_dir, n, src, dst, feat_dim=1, edge_feat=False, masks=False)
    cuts = {}
    for method in ("parmetis", "random"):
        cfg = _run(path, os.path.join(shared_dir, method), P, part_method=method, return_mapping=True)
        if comm.Get_rank() == 0:
            conf, parts = load_all(cfg)
            part = np.empty(n, dtype=np.int64)
            for pt in parts:
                part[pt.orig_nid] = pt.part_id
            pairs = _sym_pairs(src, dst)
            cuts[method] = int(np.count_nonzero(part[pairs[:, 0]] != part[pairs[:, 1]]))
            assert np.bincount(part, minlength=P).max() <= 1.06 * n / P
    if comm.Get_rank() == 0:
        pairs = _sym_pairs(src, dst)
        xadj, adjncy = symmetric_csr(n, pairs)
        mpart = metis_part_kway(xadj, adjncy, nparts=P, seed=0)
        metis_cut = int(np.count_nonzero(mpart[pairs[:, 0]] != mpart[pairs[:, 1]]))
        assert cuts["parmetis"] <= 1.3 * metis_cut, (cuts, metis_cut)
        assert cuts["parmetis"] < 0.5 * cuts["random"], cuts


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_load_partition_book(shared_dir):
    from hpcgnn.partition import load_partition_book

    src, dst, _ = planted_graph(600, 4, 2, seed=9)
    path, g = make_raw(comm, shared_dir, 600, src, dst)
    cfg = _run(path, os.path.join(shared_dir, "pb"), 3, return_mapping=False)
    if comm.Get_rank() == 0:
        book = load_partition_book(cfg, 1)
        pt = load_partition(cfg, 1)
        assert book.partid == 1 and book.num_partitions() == 3 and book.num_nodes == 600
        assert pt.orig_nid is None and pt.orig_eid is None
        assert tuple(book.node_ranges[1]) == (pt.node_start, pt.node_end)
        assert np.all(book.nid2partid(np.arange(pt.node_start, pt.node_end)) == 1)
