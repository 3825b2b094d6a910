"""Does the partitioner's rank count change what a model learns? (issue 42): the main
job's graph (``scripts/main_job.sh``: 100k nodes, 16 classes) partitioned into 2 parts
as the main job does (``--coarsen auto``, plain ParMETIS at this size, 2 ranks: the
baseline), and with ``--coarsen lp`` (clustering across rank blocks) at each of
``--ranks``; the main job's GraphSAGE trained on each (2 hosts of a server and a
trainer, 3 epochs, seed 0).  Prints one JSON object: each run's edge cut and test
accuracy, and their ratios to the baseline's.

    python bench/partition_accuracy_bench.py                 # lp at 2, 4 and 8 ranks

Run it with ``python``: each step is a child ``mpirun``.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

TRAIN = ["--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2", "--epochs", "3",
         "--batch-size", "1000", "--fanouts", "25,10", "--hidden", "128", "--lr", "0.003"]


def _mpirun(n, *argv):
    cmd = ["mpirun", "--oversubscribe", "-n", str(n), sys.executable, "-m", "hpcgnn", *argv]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"partition_accuracy_bench: {' '.join(cmd)} failed:\n{res.stdout[-2000:]}{res.stderr[-3000:]}")
    return res.stdout


def _final(run_dir):
    with open(os.path.join(run_dir, "log.jsonl")) as f:
        rows = [json.loads(ln) for ln in f if ln.strip()]
    return next(r for r in reversed(rows) if r.get("kind") == "final")


def run(graph, work, coarsen, ranks):
    out = os.path.join(work, f"{coarsen}{ranks}")
    summary = _mpirun(ranks, "partition", graph, "-o", out + "/parts", "-k", "2", "--balance-ntypes", "train_mask",
                      "--coarsen", coarsen, "--overwrite", "--json")
    res = json.loads([ln for ln in summary.splitlines() if ln.startswith("{")][-1])
    _mpirun(4, "train", "--part-config", out + "/parts/synthetic.json", *TRAIN, "--run-dir", out + "/train")
    final = _final(out + "/train")
    return {"coarsen": coarsen, "partition_ranks": ranks, "edge_cut": res["edge_cut"],
            "test_acc": round(final["test_acc"], 4), "val_acc": round(final["val_acc"], 4)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,4,8", help="rank counts of the --coarsen lp partitions")
    ap.add_argument("--num-nodes", type=int, default=100_000)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="hpcgnn-pacc-")
    os.makedirs(work, exist_ok=True)
    graph = os.path.join(work, "graph.h5")
    _mpirun(2, "generate", graph, "--num-nodes", str(args.num_nodes), "--avg-degree", "20", "--feat-dim", "64",
            "--num-classes", "16", "--seed", "0", "--name", "synthetic", "--overwrite")
    base = run(graph, work, "auto", 2)
    runs = [base] + [run(graph, work, "lp", int(r)) for r in args.ranks.split(",")]
    for r in runs:
        r["edge_cut_ratio_vs_baseline"] = round(r["edge_cut"] / base["edge_cut"], 4)
        r["test_acc_ratio_vs_baseline"] = round(r["test_acc"] / base["test_acc"], 4)
    print(json.dumps({"benchmark": "partition_accuracy", "num_nodes": args.num_nodes, "num_parts": 2,
                      "baseline": "coarsen auto (plain ParMETIS) at 2 ranks, the main job's partition",
                      "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
