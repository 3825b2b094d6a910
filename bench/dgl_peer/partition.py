"""Partition a raw-format graph (hpcgnn's input, docs/format-raw.md) with DGL's own
partitioner, for the DGL peer run of ``bench/train_bench.py --dgl-venv``.

Runs in the DGL virtual environment (``bench/dgl_peer/setup.sh``), one process:

    .dglvenv/bin/python bench/dgl_peer/partition.py RAW.h5 OUT_DIR [--parts 2]

The graph is the raw file's directed edges as they are (hpcgnn samples the same
in-edges), with ``feat``, ``label`` and the three masks as node data; METIS with the
training nodes balanced, as TARGETS.md's DGL rows were made.  Prints one JSON line:
wall time, peak memory and the partition config's path.
"""
import argparse
import json
import resource
import time

import h5py
import numpy as np
import torch
import dgl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("out")
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--name", default="peer")
    ap.add_argument("--dgl-names", action="store_true",
                    help="node data named as DGL's examples read it: features, labels (the raw file's feat, label)")
    a = ap.parse_args()
    with h5py.File(a.raw, "r") as f:
        n = int(f.attrs["num_nodes"])
        src = torch.from_numpy(f["edges/src"][...])
        dst = torch.from_numpy(f["edges/dst"][...])
        data = {k: f["nodes/data"][k][...] for k in ("feat", "label", "train_mask", "val_mask", "test_mask")}
    g = dgl.graph((src, dst), num_nodes=n)
    feat, label = ("features", "labels") if a.dgl_names else ("feat", "label")
    g.ndata[feat] = torch.from_numpy(data["feat"])
    g.ndata[label] = torch.from_numpy(data["label"].astype(np.int64))
    for k in ("train_mask", "val_mask", "test_mask"):
        g.ndata[k] = torch.from_numpy(data[k].astype(bool))
    t = time.perf_counter()
    dgl.distributed.partition_graph(g, a.name, a.parts, a.out, part_method="metis",
                                    balance_ntypes=g.ndata["train_mask"], balance_edges=True)
    wall = time.perf_counter() - t
    print(json.dumps({"peer": "dgl", "dgl": dgl.__version__, "partition_s": round(wall, 2),
                      "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
                      "config": f"{a.out}/{a.name}.json", "num_nodes": n, "num_edges": int(g.num_edges())}),
          flush=True)


if __name__ == "__main__":
    main()
