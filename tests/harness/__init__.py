"""What the tests share (a helper module, not a test module: no test module imports
another): small generated and planted graphs and their serial oracles (sampling,
partitioning), statistical checks of samplers, and partitioned graphs to damage on
disk; PyG's loaders on hpcgnn's backend."""
import hashlib
import json
import math
import os
import shutil

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import torch_geometric as tg
from torch_geometric.loader import LinkLoader, NodeLoader
from torch_geometric.nn import GraphSAGE
from torch_geometric.sampler import NegativeSampling

from hpcgnn.datasets import generate_graph
from hpcgnn.partition import load_partition, partition_graph
from hpcgnn.pyg import DistNeighborSampler, to_pyg_backend
from hpcgnn.sampling import NeighborSampler, sample_neighbors


def md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def pyg_leftovers(tmp):
    """PyG-generated files anywhere under ``tmp``, and hpcgnn's private directories for
    them (hpcgnn/pyg_tmp.py): ``(files, dirs)``."""
    import glob

    files = glob.glob(os.path.join(tmp, "**", "torch_geometric*.py"), recursive=True)
    dirs = glob.glob(os.path.join(tmp, "hpcgnn-pyg-*"))
    return files, dirs


def copy_parts(cfg, where) -> str:
    """A copy of the partitioned graph's directory; the copy's JSON."""
    out = os.path.join(str(where), "copy")
    shutil.copytree(os.path.dirname(cfg), out)
    return os.path.join(out, os.path.basename(cfg))


def h5_of(cfg) -> str:
    with open(cfg) as f:
        return os.path.join(os.path.dirname(cfg), json.load(f)["h5_file"])


def corrupt(h5, dataset, nbytes=4096, seed=1):
    """Write ``nbytes`` random bytes into the middle of ``dataset``'s storage, as a
    disk or a stray write would (not through HDF5)."""
    with h5py.File(h5, "r") as f:
        d = f[dataset]
        off, size = d.id.get_offset(), d.id.get_storage_size()
    assert off is not None and size > 0, dataset
    n = min(nbytes, size)
    with open(h5, "r+b") as fh:
        fh.seek(off + (size - n) // 2)
        fh.write(np.random.default_rng(seed).bytes(n))


# -- small graphs and the sampling oracles ------------------------------------------
P_FAIL = 1e-6


def make_graph(tmp, nparts, comm, edge_dir="in", num_nodes=2000):
    raw = os.path.join(tmp, "g.h5")
    generate_graph(raw, comm, num_nodes, 8, 8, 4, seed=5, edge_feat=True, name="g", overwrite=True)
    cfg = partition_graph(raw, os.path.join(tmp, f"parts{nparts}{edge_dir}"), nparts, comm=comm,
                          return_mapping=True, edge_dir=edge_dir, overwrite=True)
    return raw, cfg


class Oracle:
    """The raw graph in new ids: endpoints and weight by new edge id, feat/label by
    new node id, and each node's stored edges (in-edges for edge_dir='in')."""

    def __init__(self, raw, cfg, edge_dir="in"):
        with h5py.File(raw, "r") as f:
            src, dst = f["edges/src"][:], f["edges/dst"][:]
            feat, label = f["nodes/data/feat"][:], f["nodes/data/label"][:]
            weight = f["edges/data/weight"][:]
        p0 = load_partition(cfg, 0)
        parts = [load_partition(cfg, p) for p in range(p0.book.num_partitions())]
        orig_nid = np.concatenate([p.orig_nid for p in parts])
        orig_eid = np.concatenate([p.orig_eid for p in parts])
        new_of = np.empty_like(orig_nid)
        new_of[orig_nid] = np.arange(len(orig_nid))
        self.src, self.dst = new_of[src[orig_eid]], new_of[dst[orig_eid]]
        self.feat, self.label, self.weight = feat[orig_nid], label[orig_nid], weight[orig_eid]
        self.n = len(orig_nid)
        self.node_bounds = np.append(p0.book.node_ranges[:, 0], p0.book.node_ranges[-1, 1])
        own = self.dst if edge_dir == "in" else self.src
        self.other = self.src if edge_dir == "in" else self.dst
        self.deg = np.bincount(own, minlength=self.n)
        # raw edge set, to check that sampled (src, dst) pairs exist with the given eid
        self.edge_key = set(zip(self.src.tolist(), self.dst.tolist()))

    def check_edges(self, src, dst, eid):
        src, dst, eid = (np.asarray(a) for a in (src, dst, eid))
        assert np.array_equal(self.src[eid], src) and np.array_equal(self.dst[eid], dst)
        assert all(k in self.edge_key for k in zip(src[:200].tolist(), dst[:200].tolist()))


def chi2_bound(dof, p=P_FAIL):
    try:
        from scipy.stats import chi2

        return float(chi2.isf(p, dof))
    except ImportError:                           # Wilson-Hilferty
        z = 4.753424308822899                     # N(0,1) upper 1e-6 quantile
        return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def inclusion_stat(eids, seed_pos, ranges, fanout, draws):
    """Chi-square-like statistic of per-candidate inclusion counts against
    ``draws * fanout / degree`` (variance ``draws p (1 - p)``), and its dof.
    ``eids``/``seed_pos``: every sampled edge and which seed (index into ranges) drew it."""
    stat, dof = 0.0, 0
    for i, (f, e) in enumerate(ranges):
        d = e - f
        if d <= fanout:
            continue
        got = np.bincount(eids[seed_pos == i] - f, minlength=d)
        p = fanout / d
        exp = draws * p
        stat += float((((got - exp) ** 2) / (exp * (1 - p))).sum())
        dof += d - 1
    return stat, dof


def uniform_ok(sample, ranges, fanout, draws):
    """sample(ranges repeated ``draws`` times) -> (eids, counts); True when inclusion
    frequencies pass the chi-square bound."""
    rows = np.repeat(np.asarray(ranges, np.int64), draws, axis=0)
    eids, counts = sample(rows)
    pos = np.repeat(np.repeat(np.arange(len(ranges)), draws), counts)
    stat, dof = inclusion_stat(eids, pos, ranges, fanout, draws)
    return stat < chi2_bound(dof), stat, dof


def biased_first_k(rows, fanout):
    """A wrong sampler: always the first ``fanout`` candidates."""
    f, e = rows[:, 0], rows[:, 1]
    c = np.minimum(e - f, fanout)
    from hpcgnn.graph.dist_graph import expand_ranges

    return expand_ranges(f, f + c), c


def check_sample_neighbors(g, o, seeds, fanout, seed=0):
    """Every sampled edge exists with its id; no duplicates; degree <= fanout: all."""
    src, dst, eid = sample_neighbors(g, seeds, fanout, rng=seed)
    o.check_edges(src, dst, eid)
    dst, eid = dst.numpy(), eid.numpy()
    for s in np.unique(seeds):
        mine = eid[dst == s]
        assert len(np.unique(mine)) == len(mine)
        want = min(o.deg[s], fanout) if fanout >= 0 else o.deg[s]
        assert len(mine) == want * (seeds == s).sum()
        if o.deg[s] <= fanout:
            assert sorted(mine.tolist()) == sorted(np.flatnonzero(o.dst == s).tolist())


def check_minibatch(g, o, b, seeds, fanouts):
    n_id, e_id, ei = b.n_id.numpy(), b.e_id.numpy(), b.edge_index.numpy()
    assert b.batch_size == len(seeds) and np.array_equal(n_id[:len(seeds)], seeds)
    assert len(np.unique(n_id)) == len(n_id)
    assert b.num_sampled_nodes[0] == len(seeds) and sum(b.num_sampled_nodes) == len(n_id)
    assert len(b.num_sampled_edges) == len(fanouts) and sum(b.num_sampled_edges) == ei.shape[1] == len(e_id)
    # edges: local -> global are the real edges, neighbor -> seed
    o.check_edges(n_id[ei[0]], n_id[ei[1]], e_id)
    ncum = np.cumsum([0] + b.num_sampled_nodes)
    ecum = np.cumsum([0] + b.num_sampled_edges)
    for h, f in enumerate(fanouts):
        d = ei[1, ecum[h]:ecum[h + 1]]
        assert d.size == 0 or (d.min() >= ncum[h] and d.max() < ncum[h + 1])   # targets: hop h nodes
        s = ei[0, ecum[h]:ecum[h + 1]]
        assert s.size == 0 or s.max() < ncum[h + 2]                            # sources: up to hop h+1
        new = n_id[ncum[h + 1]:ncum[h + 2]]
        assert not np.isin(new, n_id[:ncum[h + 1]]).any()
        for v in range(ncum[h], ncum[h + 1]):                                   # per target: fanout or all
            mine = e_id[ecum[h]:ecum[h + 1]][d == v]
            assert len(np.unique(mine)) == len(mine) == (o.deg[n_id[v]] if f < 0 else min(o.deg[n_id[v]], f))
    if b.x is not None:
        assert torch.equal(b.x, torch.from_numpy(o.feat[n_id]))
        assert np.array_equal(np.asarray(b.y), o.label[n_id])


def features_only_accuracy(raw):
    """Least squares on the (paper) features alone: the accuracy a graph model must beat."""
    with h5py.File(raw) as f:
        x, y = f["nodes/data/feat"][:], f["nodes/data/label"][:]
        tr, te = f["nodes/data/train_mask"][:], f["nodes/data/test_mask"][:]
    C = int(y.max()) + 1
    X = np.hstack([x, np.ones((len(x), 1), np.float32)])
    W, *_ = np.linalg.lstsq(X[tr], np.eye(C)[y[tr]], rcond=None)
    return float(((X[te] @ W).argmax(1) == y[te]).mean())



# -- partitioning: raw graphs written with plain h5py, serial oracles -------------
def comm_world():
    from hpcgnn.comm.mpi import MPI

    return MPI.COMM_WORLD


def symmetric_csr(n, edges):
    """Symmetric CSR (int64 ``xadj``, ``adjncy``) of the undirected ``edges`` (pairs)
    on ``n`` vertices, each row's columns sorted."""
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    u = np.concatenate([e[:, 0], e[:, 1]])
    v = np.concatenate([e[:, 1], e[:, 0]])
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=xadj[1:])
    return xadj, v.astype(np.int64)


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


# -- PyG's loaders on hpcgnn's backend ------------------------------------------------
FANOUTS = [4, 3]


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
