"""A raw graph file as the symmetric CSR (no self loops, no duplicate edges) that a
serial partitioner takes: the common input of bench/metis_baseline.py and
bench/kaminpar_baseline.py, built the same way for both."""
import time

import h5py
import numpy as np

from hpcgnn.partition.arrays import unique


def read_symmetric_csr(raw: str, balance=()):
    """``(graph, seconds)``: ``graph`` a dict of ``n``, the input ``src``/``dst`` (for
    the cut), ``xadj``/``adj`` (int64 CSR) and ``cols`` (node counts, then each
    ``balance`` mask); ``seconds`` the read and build times."""
    t0 = time.perf_counter()
    with h5py.File(raw, "r") as f:
        src = f["edges/src"][:]
        dst = f["edges/dst"][:]
        n = int(f.attrs["num_nodes"])
        cols = [np.ones(n, dtype=np.int64)] + [f[f"nodes/data/{m}"][:].astype(np.int64) for m in balance]
    t1 = time.perf_counter()
    keep = src != dst
    u = np.concatenate([src[keep], dst[keep]])
    v = np.concatenate([dst[keep], src[keep]])
    del keep
    key = unique(u * n + v)  # np.unique of numpy 2.4 is ~30x slower on int64
    del u, v
    rows = key // n
    adj = key % n
    del key
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=xadj[1:])
    t2 = time.perf_counter()
    return (dict(n=n, src=src, dst=dst, xadj=xadj, adj=adj, cols=cols),
            {"read_s": round(t1 - t0, 3), "build_csr_s": round(t2 - t1, 3)})


def cut_and_balance(part, src, dst, nparts: int) -> dict:
    """The cut as the fraction of input edges whose endpoints are split, and the
    node imbalance (largest part over the mean)."""
    counts = np.bincount(part, minlength=nparts)
    return {"edge_cut_fraction": round(float(np.mean(part[src] != part[dst])), 4),
            "node_imbalance": round(float(counts.max() / counts.mean()), 4)}
