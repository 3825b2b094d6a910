"""A quarter-billion edges end to end on one machine (issue 30): generate, partition,
train one epoch, layer-wise inference; each phase's time and peak memory.

    python bench/scale_bench.py                                   # 10M nodes, 250M edges
    python bench/scale_bench.py --num-nodes 1000000 --avg-degree 20   # a quick look

Every phase runs as its own ``mpirun`` job, as on a cluster: ``hpcgnn generate --json``
and ``hpcgnn partition --return-mapping --json`` with ``--ranks`` ranks (every rank's
RSS high-water mark in their JSON), ``hpcgnn verify --raw`` (the streaming check: every
edge once, one owner per node, features under the mapping) with as many, then ``hpcgnn train`` with 2 x [server, trainer] for one epoch over
the training nodes (``--train-frac``, default 1%: 100k seeds on 10M nodes) followed by
its layer-wise inference over every node (the ``{"kind": "memory"}`` line: peak RSS per
role).  No rank holds the whole graph.  The baseline is the same pipeline on a
2000-node graph in the same run (Python, MPI and HDF5 alone), subtracted from the
peaks.  Prints one JSON object.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory_bench import HPCGNN, MPIRUN, json_rows as _run  # noqa: E402


def pipeline(d, n, a):
    """The three jobs on an ``n``-node graph: per phase its wall time and JSON."""
    raw, parts = os.path.join(d, f"g{n}.h5"), os.path.join(d, f"p{n}")
    run = [*MPIRUN, "-n", str(a.ranks)]
    (gen,), gen_s = _run([*run, *HPCGNN, "generate", raw, "--num-nodes", str(n), "--avg-degree",
                          str(a.avg_degree), "--feat-dim", str(a.feat_dim), "--num-classes", "16",
                          "--train-frac", str(a.train_frac), "--val-frac", "0.01", "--test-frac", "0.01",
                          "--name", "g", "--overwrite", "--json"])
    (part,), part_s = _run([*run, *HPCGNN, "partition", raw, "-o", parts, "-k", "2", "--overwrite",
                            "--balance-ntypes", "train_mask", "--return-mapping", "--json"])
    (check,), check_s = _run([*run, *HPCGNN, "verify", part["config"], "--raw", raw, "--json"], kind="verify")
    rows, train_s = _run([*MPIRUN, "-n", "4", *HPCGNN, "train", "--part-config", part["config"],
                          "--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2",
                          "--epochs", "1", "--progress", "off", "--eval-every", "0",
                          "--run-dir", os.path.join(d, f"run{n}")])
    final = [r for r in rows if r.get("kind") == "final"][-1]
    epoch = [r for r in rows if r.get("kind") == "epoch"][-1]
    memory = [r for r in rows if r.get("kind") == "memory"][-1]["roles"]
    return {"generate": {"wall_s": round(gen_s, 1), "peak_rss_bytes_sum": gen["peak_rss_bytes_sum"],
                         "num_edges": gen["num_edges"]},
            "partition": {"wall_s": round(part_s, 1), "peak_rss_bytes_sum": part["peak_rss_bytes_sum"],
                          "peak_rss_bytes_max_rank": part["peak_rss_bytes_max_rank"],
                          "timings_s": part["timings_s"], "edge_cut": part["edge_cut"]},
            "verify": {"wall_s": round(check_s, 1), "ok": check["ok"], "raw_check": check.get("raw_check"),
                       "peak_rss_bytes_sum": check["peak_rss_bytes_sum"],
                       "peak_rss_bytes_max_rank": check["peak_rss_bytes_max_rank"]},
            "train": {"wall_s": round(train_s, 1), "epoch_s": round(epoch["epoch_s"], 1), "steps": epoch["steps"],
                      "inference_s": round(final["inference_s"], 1), "test_acc": final["test_acc"],
                      "servers": memory["server"], "trainers": memory["trainer"]}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-nodes", type=int, default=10_000_000)
    ap.add_argument("--avg-degree", type=float, default=25)
    ap.add_argument("--feat-dim", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=4, help="ranks of generate and partition")
    ap.add_argument("--train-frac", type=float, default=0.01)
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed at the end)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcgnn-scale-", dir=a.dir) as d:
        base = pipeline(d, 2000, a)
        big = pipeline(d, a.num_nodes, a)
    edges, feat = big["generate"]["num_edges"], 4 * a.num_nodes * a.feat_dim

    def per_edge(key_big, key_base):
        return round((key_big - key_base - feat) / edges, 1)

    big["partition"]["bytes_per_edge"] = per_edge(big["partition"]["peak_rss_bytes_sum"],
                                                  base["partition"]["peak_rss_bytes_sum"])
    big["generate"]["bytes_per_edge"] = per_edge(big["generate"]["peak_rss_bytes_sum"],
                                                 base["generate"]["peak_rss_bytes_sum"])
    big["verify"]["bytes_per_edge"] = round((big["verify"]["peak_rss_bytes_sum"] -           # holds no features
                                             base["verify"]["peak_rss_bytes_sum"]) / edges, 1)
    big["train"]["server_bytes_per_edge"] = per_edge(big["train"]["servers"]["peak_rss_bytes_sum"],
                                                     base["train"]["servers"]["peak_rss_bytes_sum"])
    print(json.dumps({"bench": "scale", "num_nodes": a.num_nodes, "num_edges": edges, "feature_bytes": feat,
                      "ranks": a.ranks, **big, "baseline": base}))


if __name__ == "__main__":
    main()
