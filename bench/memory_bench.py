"""Memory per edge of each phase (issue 30): peak RSS summed over the ranks, minus what
the same command needs for a 2000-node graph, per directed edge, beyond the features.

    python bench/memory_bench.py                                   # 1M nodes, 20M edges, 2 ranks
    python bench/memory_bench.py --num-nodes 4000000 --ranks 4

Runs generation (:func:`hpcgnn.datasets.generate_graph`, every rank's ``ru_maxrss``
gathered) and ``hpcgnn partition --json`` (which reports every rank's RSS high-water
mark itself: ``peak_rss_bytes_per_rank``, ``memory_by_phase``) under ``mpirun -n
RANKS``, on the graph and on a 2000-node graph of the same degree and features: the
baseline, in the same run.  Prints one JSON object with ``bytes_per_edge`` per phase
(target for partitioning: <= 48 beyond the features).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MPIRUN = ["mpirun", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
TARGET_PARTITION_BYTES_PER_EDGE = 48
GEN = """
import json, resource, sys
from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph
n, deg, f, out = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
info = generate_graph(out, MPI.COMM_WORLD, n, deg, f, 16, 0, name="g", overwrite=True)
peaks = MPI.COMM_WORLD.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
if MPI.COMM_WORLD.rank == 0:
    print(json.dumps({"num_edges": int(info["num_edges"]), "peak_rss_bytes_sum": sum(peaks)}))
"""


def _last_json(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        sys.exit(f"memory_bench: {' '.join(cmd[:6])} ... failed:\n{res.stderr[-3000:]}")
    return json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])


def measure(d, n, a):
    raw = os.path.join(d, f"g{n}.h5")
    gen = _last_json([*MPIRUN, "-n", str(a.ranks), sys.executable, "-c", GEN, str(n), str(a.avg_degree),
                      str(a.feat_dim), raw])
    part = _last_json([*MPIRUN, "-n", str(a.ranks), sys.executable, "-m", "hpcgnn", "partition", raw,
                       "-o", os.path.join(d, f"p{n}"), "-k", str(a.num_parts), "--overwrite", "--json"])
    return gen, part


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-nodes", type=int, default=1_000_000)
    ap.add_argument("--avg-degree", type=float, default=20)
    ap.add_argument("--feat-dim", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--num-parts", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcgnn-membench-") as d:
        base_gen, base_part = measure(d, 2000, a)
        gen, part = measure(d, a.num_nodes, a)
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
           "target_partition_bytes_per_edge": TARGET_PARTITION_BYTES_PER_EDGE}
    out["partition"]["meets_target"] = out["partition"]["bytes_per_edge"] <= TARGET_PARTITION_BYTES_PER_EDGE
    print(json.dumps(out))


if __name__ == "__main__":
    main()
