"""Helpers for the partitioning tests: small raw graphs written with plain h5py, a
directory shared by all ranks, and serial oracles that read a partitioned graph
back without any of the pipeline's code (other than load_partition)."""
import json
import os

import numpy as np
import pytest


def comm_world():
    from hpcgnn.comm.mpi import MPI

    return MPI.COMM_WORLD


@pytest.fixture
def shared_dir(shared_tmp):
    """A temporary directory that every rank of the test's job sees (conftest's)."""
    return shared_tmp


def planted_graph(n, avg_deg, nblocks, p_in=0.9, seed=0, loops=True):
    """A directed planted-partition graph with skewed degrees (numpy only).

    Nodes ``i`` belong to block ``i * nblocks // n`` shuffled; each edge's source is
    drawn with power-law-ish weights, its destination inside the same block with
    probability ``p_in``.  Includes a few duplicates and (``loops``) self loops.
    """
    rng = np.random.default_rng(seed)
    m = n * avg_deg // 2
    block = rng.permutation(n) * nblocks // n
    members = np.argsort(block, kind="stable")
    bstart = np.searchsorted(block[members], np.arange(nblocks + 1))
    w = 1.0 / (1.0 + np.arange(n)) ** 0.5
    w = w[rng.permutation(n)]
    src = rng.choice(n, size=m, p=w / w.sum())
    same = rng.random(m) < p_in
    b = block[src]
    lo, hi = bstart[b], bstart[b + 1]
    dst_in = members[lo + (rng.random(m) * (hi - lo)).astype(np.int64)]
    dst = np.where(same, dst_in, rng.integers(0, n, m))
    if loops and m > 10:
        src[:3] = dst[:3]  # self loops
        src[5], dst[5] = src[4], dst[4]  # a duplicate
    return src.astype(np.int64), dst.astype(np.int64), block


ETYPES = [["paper", "cites", "paper"], ["author", "writes", "paper"], ["paper", "rev", "author"],
          ["author", "knows", "author"]]


def write_raw(path, n, src, dst, *, feat_dim=4, seed=0, edge_feat=True, types=False, masks=True,
              name="g", extra_node=None):
    """Write a raw-format file (docs/format-raw.md) with plain h5py; returns the arrays."""
    import h5py

    rng = np.random.default_rng(seed + 1)
    data = {"feat": rng.standard_normal((n, feat_dim)).astype(np.float32),
            "label": rng.integers(0, 5, n).astype(np.int64)}
    if masks:
        r = rng.random(n)
        data["train_mask"] = r < 0.3
        data["val_mask"] = (r >= 0.3) & (r < 0.4)
        data["test_mask"] = (r >= 0.4).astype(np.uint8)
    if extra_node:
        data.update(extra_node)
    edata = {}
    if edge_feat:
        edata["w"] = rng.random(len(src)).astype(np.float32)
        edata["e2"] = rng.integers(0, 100, (len(src), 2)).astype(np.int32)
    ntype = rng.integers(0, 2, n).astype(np.int16) if types else None
    # edge type from the endpoint types: paper->paper 0, author->paper 1, paper->author 2, author->author 3
    etype = (np.array([[0, 2], [1, 3]])[ntype[src], ntype[dst]]).astype(np.int16) if types else None
    with h5py.File(path, "w") as f:
        f.attrs.update({"format": "hpcgnn-raw", "version": 1, "graph_name": name, "num_nodes": n,
                        "num_edges": len(src), "num_classes": 5})
        f["edges/src"] = np.asarray(src, dtype=np.int64)
        f["edges/dst"] = np.asarray(dst, dtype=np.int64)
        for k, v in data.items():
            f[f"nodes/data/{k}"] = v
        for k, v in edata.items():
            f[f"edges/data/{k}"] = v
        if types:
            f["nodes/type"] = ntype
            f.attrs["ntypes"] = json.dumps(["paper", "author"])
            f["edges/type"] = etype
            f.attrs["etypes"] = json.dumps(ETYPES)
    return {"n": n, "src": np.asarray(src), "dst": np.asarray(dst), "node": data, "edge": edata,
            "node_type": ntype, "edge_type": etype}


def make_raw(comm, directory, n, src, dst, **kw):
    """Rank 0 writes the raw file; every rank gets the input arrays (for the oracles)."""
    path = os.path.join(directory, kw.pop("filename", "raw.h5"))
    g = write_raw(path, n, src, dst, **kw) if comm.Get_rank() == 0 else None
    g = comm.bcast(g, root=0)
    return path, g


def load_all(config):
    """Every partition of a partitioned graph, loaded independently (verify checksums)."""
    from hpcgnn.partition import load_partition

    with open(config) as f:
        conf = json.load(f)
    return conf, [load_partition(config, p, verify=True) for p in range(conf["num_parts"])]


def check_partitioned(conf, parts, g, edge_dir="in"):
    """Serial oracle: the partitioned graph is exactly the input graph, relabelled."""
    n, E = g["n"], len(g["src"])
    P = conf["num_parts"]
    # Ranges contiguous and covering (per type, partition-major); each node exactly one owner.
    typed = g["node_type"] is not None
    for key, total in (("node_map", n), ("edge_map", E)):
        r = np.array(list(conf[key].values()))                    # [T, P, 2]
        assert r.shape[1:] == (P, 2)
        flat = r.transpose(1, 0, 2).reshape(-1, 2)               # partition-major, then type
        assert flat[0, 0] == 0 and flat[-1, 1] == total and np.all(flat[1:, 0] == flat[:-1, 1]), key
    if typed:
        assert list(conf["ntypes"]) == ["paper", "author"]
        assert list(conf["etypes"]) == [":".join(t) for t in ETYPES]
    new2orig = np.concatenate([pt.orig_nid for pt in parts])
    assert np.array_equal(np.sort(new2orig), np.arange(n)), "every node exactly once"
    for pt in parts:
        nt = g["node_type"][pt.orig_nid] if typed else np.zeros(len(pt.orig_nid), np.int64)
        assert np.all(np.diff(nt) >= 0), "nodes grouped by type inside a partition"
        assert np.all(np.diff(pt.orig_nid)[np.diff(nt) == 0] > 0), "original order kept inside a type"
        if typed:
            for t, name in enumerate(["paper", "author"]):
                s0, e0 = conf["node_map"][name][pt.part_id]
                assert np.all(nt[s0 - pt.node_start:e0 - pt.node_start] == t)
        assert pt.num_inner_nodes == len(pt.orig_nid)
        for k, v in g["node"].items():
            assert np.array_equal(pt.node_feats[k], v[pt.orig_nid]), k
        if g["node_type"] is not None:
            assert np.array_equal(pt.node_type, g["node_type"][pt.orig_nid])
    # Edges: every input edge exactly once, endpoints mapped, data match.
    orig_eid = np.concatenate([pt.orig_eid for pt in parts])
    assert np.array_equal(np.sort(orig_eid), np.arange(E)), "every edge exactly once"
    for p, pt in enumerate(parts):
        s, d = pt.edges()
        assert np.array_equal(new2orig[s], g["src"][pt.orig_eid])
        assert np.array_equal(new2orig[d], g["dst"][pt.orig_eid])
        own = d if edge_dir == "in" else s
        assert np.all((own >= pt.node_start) & (own < pt.node_end))
        et = g["edge_type"][pt.orig_eid] if g["edge_type"] is not None else np.zeros(len(own), np.int64)
        order = np.lexsort((pt.orig_eid, own, et))
        assert np.array_equal(order, np.arange(len(order))), "CSR sorted by edge type, owner, original id"
        if g["edge_type"] is not None:
            for t, name in enumerate(conf["etypes"]):
                s0, e0 = conf["edge_map"][name][pt.part_id]
                assert np.all(et[s0 - pt.edge_start:e0 - pt.edge_start] == t)
        for k, v in g["edge"].items():
            assert np.array_equal(pt.edge_feats[k], v[pt.orig_eid]), k
        if g["edge_type"] is not None:
            assert np.array_equal(pt.edge_type, g["edge_type"][pt.orig_eid])
        other = pt.indices
        outside = other[(other < pt.node_start) | (other >= pt.node_end)]
        assert np.array_equal(pt.halo_nodes[pt.halo_hops == 1] if pt.halo_hops is not None else pt.halo_nodes,
                              np.unique(outside))
        meta = conf["parts"][p]
        assert meta["num_inner_nodes"] == pt.num_inner_nodes and meta["num_edges"] == pt.num_edges
        assert meta["num_halo_nodes"] == len(pt.halo_nodes) and meta["num_cut_edges"] == len(outside)
    return new2orig
