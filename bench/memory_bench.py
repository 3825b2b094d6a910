"""Memory per edge of each phase (issue 30): peak RSS summed over the ranks, minus what
the same command needs for a 2000-node graph, per directed edge, beyond the features.

    python bench/memory_bench.py                                   # 1M nodes, 20M edges, 2 ranks
    python bench/memory_bench.py --num-nodes 4000000 --ranks 4

Runs ``hpcgnn generate --json`` and ``hpcgnn partition --json`` under ``mpirun -n RANKS``
(each reports every rank's RSS high-water mark; partition also per phase,
``memory_by_phase``), then a few steps of ``hpcgnn train`` with 2 x [server, trainer]
(its ``{"kind": "memory"}`` line: the peak RSS of each role's ranks), on the graph and
on a 2000-node graph of the same degree and features: the baseline, in the same run.
Prints one JSON object with ``bytes_per_edge`` for generation, partitioning (per phase
too; target <= 48 beyond the features) and the servers while training (target <= 20).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MPIRUN = ["mpirun", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
TARGET_PARTITION_BYTES_PER_EDGE = 48
TARGET_SERVER_BYTES_PER_EDGE = 20
HPCGNN = [sys.executable, "-m", "hpcgnn"]


def json_rows(cmd, kind=None):
    """Run ``cmd``; its JSON lines (those of ``kind`` only, when given) and its wall time.
    A failed command ends the benchmark with its output."""
    t = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if res.returncode:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {' '.join(cmd[:8])} ... failed:\n{res.stdout[-2000:]}\n"
                 f"{res.stderr[-3000:]}")
    rows = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    return [r for r in rows if kind is None or r.get("kind") == kind], wall


def _last_json(cmd, kind=None):
    return json_rows(cmd, kind)[0][-1]


def measure(d, n, a):
    """generate, partition (a.ranks ranks) and a few training steps (2 x [server,
    trainer]) on an ``n``-node graph: the three JSON reports."""
    raw, parts = os.path.join(d, f"g{n}.h5"), os.path.join(d, f"p{n}")
    run = [*MPIRUN, "-n", str(a.ranks)]
    gen = _last_json([*run, *HPCGNN, "generate", raw, "--num-nodes", str(n), "--avg-degree", str(a.avg_degree),
                      "--feat-dim", str(a.feat_dim), "--num-classes", "16", "--name", "g", "--overwrite", "--json"])
    part = _last_json([*run, *HPCGNN, "partition", raw, "-o", parts, "-k", str(a.num_parts), "--overwrite",
                       "--json"])
    train = _last_json([*MPIRUN, "-n", str(2 * a.num_parts), *HPCGNN, "train", "--part-config", part["config"],
                        "--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2",
                        "--max-steps", str(a.train_steps), "--epochs", "1", "--progress", "off",
                        "--eval-every", "0", "--run-dir", os.path.join(d, f"run{n}")], kind="memory")
    return gen, part, train


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-nodes", type=int, default=1_000_000)
    ap.add_argument("--avg-degree", type=float, default=20)
    ap.add_argument("--feat-dim", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--num-parts", type=int, default=2)
    ap.add_argument("--train-steps", type=int, default=5, help="training steps per trainer (servers' memory)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcgnn-membench-") as d:
        base_gen, base_part, base_train = measure(d, 2000, a)
        gen, part, train = measure(d, a.num_nodes, a)
    edges, feat = part["num_edges"], 4 * a.num_nodes * a.feat_dim

    def per_edge(big, base):
        return round((big - base - feat) / edges, 1)

    phases = {k: per_edge(v["peak_rss_bytes_sum"], base_part["peak_rss_bytes_sum"])
              for k, v in part["memory_by_phase"].items()}
    out = {"bench": "memory", "num_nodes": a.num_nodes, "num_edges": edges, "feature_bytes": feat,
           "ranks": a.ranks, "baseline_nodes": 2000,
           "generate": {"peak_rss_bytes_sum": gen["peak_rss_bytes_sum"],
                        "bytes_per_edge": per_edge(gen["peak_rss_bytes_sum"], base_gen["peak_rss_bytes_sum"])},
           "partition": {"peak_rss_bytes_sum": part["peak_rss_bytes_sum"],
                         "peak_rss_bytes_per_rank": part["peak_rss_bytes_per_rank"],
                         "bytes_per_edge": per_edge(part["peak_rss_bytes_sum"], base_part["peak_rss_bytes_sum"]),
                         "bytes_per_edge_by_phase": phases, "timings_s": part["timings_s"],
                         "edge_cut": part["edge_cut"]},
           "train_servers": {**train["roles"]["server"],
                             "bytes_per_edge": per_edge(train["roles"]["server"]["peak_rss_bytes_sum"],
                                                        base_train["roles"]["server"]["peak_rss_bytes_sum"])},
           "train_trainers": train["roles"]["trainer"],
           "target_partition_bytes_per_edge": TARGET_PARTITION_BYTES_PER_EDGE,
           "target_server_bytes_per_edge": TARGET_SERVER_BYTES_PER_EDGE}
    out["partition"]["meets_target"] = out["partition"]["bytes_per_edge"] <= TARGET_PARTITION_BYTES_PER_EDGE
    out["train_servers"]["meets_target"] = out["train_servers"]["bytes_per_edge"] <= TARGET_SERVER_BYTES_PER_EDGE
    print(json.dumps(out))


if __name__ == "__main__":
    main()
