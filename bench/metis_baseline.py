"""Serial METIS on a raw graph, the baseline of bench/partition_bench.py.

    python bench/metis_baseline.py RAW.h5 NPARTS [--balance train_mask]

One process: reads the edges, builds the symmetric CSR without self loops or
duplicates that METIS needs, calls libmetis' METIS_PartGraphKway directly (multi-
constraint weights honoured), and prints one JSON line: read/build/partition seconds,
peak RSS and the cut (fraction of input edges whose endpoints are split).
"""
import argparse
import json
import resource
import time

import h5py
import numpy as np

from hpcgnn.partition import metis_part_kway
from hpcgnn.partition.arrays import unique


def main():
    p = argparse.ArgumentParser()
    p.add_argument("raw")
    p.add_argument("nparts", type=int)
    p.add_argument("--balance", nargs="*", default=[])
    a = p.parse_args()
    t0 = time.perf_counter()
    with h5py.File(a.raw, "r") as f:
        src = f["edges/src"][:]
        dst = f["edges/dst"][:]
        n = int(f.attrs["num_nodes"])
        cols = [np.ones(n, dtype=np.int64)] + [f[f"nodes/data/{m}"][:].astype(np.int64) for m in a.balance]
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
    del rows
    vwgt = np.stack(cols, axis=1) if len(cols) > 1 else None
    t2 = time.perf_counter()
    part = metis_part_kway(xadj, adj, vwgt=vwgt, ncon=len(cols), nparts=a.nparts)
    t3 = time.perf_counter()
    cut = float(np.mean(part[src] != part[dst]))
    counts = np.bincount(part, minlength=a.nparts)
    print(json.dumps({
        "read_s": round(t1 - t0, 3), "build_csr_s": round(t2 - t1, 3), "metis_s": round(t3 - t2, 3),
        "total_s": round(t3 - t0, 3), "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        "edge_cut_fraction": round(cut, 4), "node_imbalance": round(float(counts.max() / counts.mean()), 4),
    }))


if __name__ == "__main__":
    main()
