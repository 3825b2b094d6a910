"""KaMinPar (shared-memory multilevel partitioner, PyPI ``kaminpar``) on a raw graph,
the quality peer of bench/partition_bench.py (issue 42).

    python bench/kaminpar_baseline.py RAW.h5 NPARTS [--eps 0.03] [--threads 1]

One process: the symmetric CSR of bench/raw_csr.py (as serial METIS gets it) is
written in ParHIP's binary format (version 3: 64-bit ids, no weights; a temporary
file) and partitioned with KaMinPar's default context into NPARTS blocks of at most
(1 + eps) times the mean node count.  One JSON line: seconds, peak RSS, the cut as
the fraction of input edges whose endpoints are split (the measure hpcgnn reports)
and the node imbalance.  KaMinPar balances node counts only (no masks)."""
import argparse
import json
import os
import resource
import tempfile
import time

import numpy as np

from raw_csr import cut_and_balance, read_symmetric_csr


def write_parhip(path: str, xadj: np.ndarray, adj: np.ndarray) -> None:
    """ParHIP binary, version 3: header (version, n, m), byte offsets of each vertex's
    neighbours from the file's start (n + 1), the neighbours (m); all uint64."""
    n, m = len(xadj) - 1, len(adj)
    header = np.array([3, n, m], dtype=np.uint64)
    offsets = (header.nbytes + (n + 1) * 8 + xadj.astype(np.uint64) * 8).astype(np.uint64)
    with open(path, "wb") as f:
        header.tofile(f)
        offsets.tofile(f)
        adj.astype(np.uint64).tofile(f)


def main():
    import kaminpar

    p = argparse.ArgumentParser()
    p.add_argument("raw")
    p.add_argument("nparts", type=int)
    p.add_argument("--eps", type=float, default=0.03, help="imbalance (hpcgnn partition's default ubvec - 1)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    g, times = read_symmetric_csr(a.raw)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "g.parhip")
        t0 = time.perf_counter()
        write_parhip(path, g["xadj"], g["adj"])
        graph = kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP)
        t1 = time.perf_counter()
        kaminpar.reseed(a.seed)
        part = np.asarray(kaminpar.KaMinPar(a.threads, kaminpar.default_context()).compute_partition(
            graph, a.nparts, a.eps), dtype=np.int64)
        t2 = time.perf_counter()
    print(json.dumps({
        **times, "load_s": round(t1 - t0, 3), "kaminpar_s": round(t2 - t1, 3),
        "total_s": round(sum(times.values()) + t2 - t0, 3), "threads": a.threads, "eps": a.eps,
        "version": kaminpar.__version__,
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        "kaminpar_edge_cut": int(kaminpar.edge_cut(graph, part.tolist())),
        **cut_and_balance(part, g["src"], g["dst"], a.nparts),
    }))


if __name__ == "__main__":
    main()
