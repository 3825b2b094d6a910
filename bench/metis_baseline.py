"""Serial METIS on a raw graph, a baseline of bench/partition_bench.py.

    python bench/metis_baseline.py RAW.h5 NPARTS [--balance train_mask]

One process: reads the edges, builds the symmetric CSR without self loops or
duplicates that METIS needs (bench/raw_csr.py), calls libmetis' METIS_PartGraphKway
directly (multi-constraint weights honoured), and prints one JSON line: read/build/
partition seconds, peak RSS and the cut (fraction of input edges whose endpoints are
split).
"""
import argparse
import json
import resource
import time

import numpy as np

from hpcgnn.partition import metis_part_kway
from raw_csr import cut_and_balance, read_symmetric_csr


def main():
    p = argparse.ArgumentParser()
    p.add_argument("raw")
    p.add_argument("nparts", type=int)
    p.add_argument("--balance", nargs="*", default=[])
    a = p.parse_args()
    g, times = read_symmetric_csr(a.raw, a.balance)
    cols = g["cols"]
    vwgt = np.stack(cols, axis=1) if len(cols) > 1 else None
    t0 = time.perf_counter()
    part = metis_part_kway(g["xadj"], g["adj"], vwgt=vwgt, ncon=len(cols), nparts=a.nparts)
    metis_s = time.perf_counter() - t0
    print(json.dumps({
        **times, "metis_s": round(metis_s, 3), "total_s": round(sum(times.values()) + metis_s, 3),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        **cut_and_balance(part, g["src"], g["dst"], a.nparts),
    }))


if __name__ == "__main__":
    main()
