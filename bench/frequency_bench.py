"""ParMETIS vs hotness-aware placement, each with hot-feature cache budgets of 0, 5%
and 20%: remote feature rows per batch and the sample+gather time of an epoch.

    python bench/frequency_bench.py                       # 500k nodes, 10% training nodes
    python bench/frequency_bench.py --num-nodes 100000 --batches 5

Generates a graph (``hpcgnn generate``, products-like split: 10% training nodes),
partitions it three ways under ``mpirun -n 2`` (``parmetis``, ``parmetis`` +
``--refine frequency``, ``--method frequency``) for the sampler of the run
(``--fanouts``), then for every partitioning runs ``bench/cache_bench.py`` under
``mpirun -n 4`` (2 virtual nodes of [server, trainer], reads of the other node's
rows through MPI ``Get`` as across real nodes: ``HPCGNN_SHM_READS=rma``).  The
baseline is ParMETIS without cache, in the same run.  Prints one JSON object.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = ["mpirun", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
METHODS = {"parmetis": [], "parmetis+refine": ["--refine", "frequency"], "frequency": ["--method", "frequency"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-nodes", type=int, default=500_000)
    ap.add_argument("--avg-degree", type=float, default=20)
    ap.add_argument("--feat-dim", type=int, default=100)
    ap.add_argument("--num-classes", type=int, default=47)
    ap.add_argument("--train-frac", type=float, default=0.1)
    ap.add_argument("--fanouts", default="25,10")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="hpcgnn-freq-")
    os.makedirs(work, exist_ok=True)
    raw = os.path.join(work, "graph.h5")
    hp = [sys.executable, "-m", "hpcgnn"]
    if not os.path.exists(raw):
        subprocess.run([*MPIRUN, "-n", "2", *hp, "generate", raw, "--num-nodes", str(a.num_nodes), "--avg-degree",
                        str(a.avg_degree), "--feat-dim", str(a.feat_dim), "--num-classes", str(a.num_classes),
                        "--train-frac", str(a.train_frac), "--val-frac", "0.05",
                        "--test-frac", str(round(0.95 - a.train_frac, 6))], check=True, capture_output=True)
    out = {"bench": "frequency", "graph": {"nodes": a.num_nodes, "avg_degree": a.avg_degree,
                                           "feat_dim": a.feat_dim, "train_frac": a.train_frac},
           "fanouts": a.fanouts, "batch": a.batch, "methods": {}}
    for name, flags in METHODS.items():
        d = os.path.join(work, name.replace("+", "_"))
        t = time.perf_counter()
        r = subprocess.run([*MPIRUN, "-n", "2", *hp, "partition", raw, "-o", d, "-k", "2", "--balance-ntypes",
                            "train_mask", "--fanouts", a.fanouts, "--overwrite", "--json", *flags],
                           check=True, capture_output=True, text=True)
        part_s = time.perf_counter() - t
        summary = json.loads(r.stdout.strip().splitlines()[-1])
        with open(summary["config"]) as f:
            conf = json.load(f)
        env = dict(os.environ, HPCGNN_SHM_READS="rma", OMP_NUM_THREADS="1")
        r = subprocess.run([*MPIRUN, "-n", "4", sys.executable, os.path.join(ROOT, "bench", "cache_bench.py"),
                            "--part-config", summary["config"], "--fanouts", a.fanouts, "--batch", str(a.batch),
                            "--batches", str(a.batches)], check=True, capture_output=True, text=True, env=env)
        cache = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
        out["methods"][name] = {"partition_s": round(part_s, 1), "edge_cut": conf["edge_cut"],
                                "frequency": conf.get("frequency") or None, "budgets": cache["budgets"]}
    base = out["methods"]["parmetis"]["budgets"][0]
    for m in out["methods"].values():
        for b in m["budgets"]:
            b["remote_rows_vs_parmetis_no_cache"] = round(base["remote_fetched_per_batch"] /
                                                          max(b["remote_fetched_per_batch"], 1e-9), 2)
            b["epoch_gain_vs_parmetis_no_cache"] = round(base["sample_gather_epoch_s"] /
                                                         b["sample_gather_epoch_s"], 2)
    out["target_remote_bytes_reduction"] = 1.6
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
