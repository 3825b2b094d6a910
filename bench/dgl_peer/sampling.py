"""DGL's neighbor sampler alone, one core, on a CSR that ``bench/sampling_bench.py
--dgl-venv`` saved: the peer's sampled edges per second in the same run.

Runs in the DGL virtual environment (``bench/dgl_peer/setup.sh``):

    OMP_NUM_THREADS=1 .dglvenv/bin/python bench/dgl_peer/sampling.py DIR --fanouts 15,10,5

``DIR`` holds ``indptr.npy``, ``indices.npy`` (in-edges: the sources of each node's
edges) and ``seeds.npy`` (one batch of seeds a row).  Each batch goes through
``dgl.dataloading.NeighborSampler(...).sample_blocks`` - sampling without replacement
and block construction with relabelling, what a DGL trainer's loader does per
mini-batch.  Prints one JSON line.
"""
import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import dgl  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--fanouts", default="15,10,5", help="in hop order, seeds' hop first (hpcgnn's order)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    indptr = torch.from_numpy(np.load(os.path.join(a.dir, "indptr.npy")))
    indices = torch.from_numpy(np.load(os.path.join(a.dir, "indices.npy")))
    seeds = torch.from_numpy(np.load(os.path.join(a.dir, "seeds.npy")))
    g = dgl.graph(("csc", (indptr, indices, torch.tensor([], dtype=torch.int64))))
    g.create_formats_()
    sampler = dgl.dataloading.NeighborSampler([int(f) for f in reversed(a.fanouts.split(","))])
    sampler.sample_blocks(g, seeds[0])                  # warm up
    edges, t = 0, time.perf_counter()
    for s in seeds:
        _, _, blocks = sampler.sample_blocks(g, s)
        edges += sum(b.num_edges() for b in blocks)
    dt = time.perf_counter() - t
    print(json.dumps({"peer": "dgl", "dgl": dgl.__version__, "batches": len(seeds), "edges": edges,
                      "seconds": round(dt, 4), "edges_per_s_per_core": round(edges / dt)}), flush=True)


if __name__ == "__main__":
    main()
