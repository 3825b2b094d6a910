"""Epoch time and its breakdown: 2 partitions under one launch against one process.

    python bench/train_bench.py --part-config runs/products/parts/products.json
    python bench/train_bench.py --nodes 100000        # generate + partition (2 parts) first

Runs the same training (``hpcgnn train``: 2-layer GraphSAGE, hidden 256, fanouts
[25, 10] in hop order = DGL's "10,25", batch 1000, Adam 0.003 - the settings of
``shared/TARGETS.md``) twice in this run, on the same partitioned graph:

* ``distributed``: ``mpirun -n 4``, 2 virtual nodes of [server, trainer] (one
  partition each), DDP between the 2 trainers (``--layout`` to change);
* ``single``: one process holding both partitions, one trainer using every core -
  the single-process baseline.  (PyG's ``NeighborLoader`` needs pyg-lib or
  torch-sparse, which PyPI does not offer for this torch; the baseline is the same
  model and sampler in one process.)

Both take a full pass over the training nodes per epoch (the distributed run in
half the steps: two trainers, each ``batch`` seeds per step), or with
``--epoch-steps N`` the same number of seeds (N steps of the distributed run, 2N
of the single process).  Epoch 0 is warm-up;
the mean of the later epochs is reported with its breakdown: waiting for batches,
compute (forward, backward, optimizer), the overlapped gradient allreduce, and the
producer's sampling and feature-gather time (overlapped with compute by the
prefetch thread).  Prints one JSON object; ``distributed_over_single`` is the
epoch-time ratio (target <= 1; with ``--pairs N`` both runs alternate N times and
the ratio is the median over the pairs), and the DGL rows of TARGETS.md are quoted for the
two graph sizes they were measured on.  ``distributed_s_per_step`` is the median over
the pairs of the distributed run's mean epoch per step, and
``distributed_best_epoch_s_per_step`` its best epoch of any pair (on a shared machine
noise only adds time); ``dgl_equal_steps`` compares both with DGL's row at its
inferred number of steps.

With ``--dgl-venv VENV`` (made by ``bench/dgl_peer/setup.sh``) the same run also
partitions the graph with DGL's partitioner and trains it with DGL's distributed
module (``bench/dgl_peer``: 2 emulated machines of a server and a trainer on this
host, the same settings and epochs): ``dgl_peer`` holds its epoch, breakdown, step
count and test accuracy, and ``dgl_peer_over_ours_at_equal_steps`` compares its epoch
with our time for as many steps (the target is >= 2).
"""
import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DGL = {100_000: {"epoch_s": 2.76, "test_acc": 0.905, "sampled_edges_per_s": 1.34e6},
       2_449_029: {"epoch_s": 38.4, "test_acc": 0.967, "sampled_edges_per_s": 0.91e6}}


def _env():
    env = dict(os.environ)
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def prepare(a) -> str:
    if a.part_config:
        return a.part_config
    d = a.dir
    if not d:
        d = tempfile.mkdtemp(prefix="hpcgnn-tbench-")
        atexit.register(shutil.rmtree, d, True)
    os.makedirs(d, exist_ok=True)
    hp = [sys.executable, "-m", "hpcgnn"]
    raw = os.path.join(d, "graph.h5")
    subprocess.run(["mpirun", "-n", "2", *hp, "generate", raw, "--num-nodes", str(a.nodes), "--avg-degree",
                    str(a.degree), "--feat-dim", str(a.feat_dim), "--num-classes", str(a.classes), "--seed", "0",
                    "--name", "bench", "--overwrite"], check=True, env=_env(), stdout=subprocess.DEVNULL)
    subprocess.run(["mpirun", "-n", "2", *hp, "partition", raw, "-o", os.path.join(d, "parts"), "-k", "2",
                    "--balance-ntypes", "train_mask", "--overwrite"], check=True, env=_env(),
                   stdout=subprocess.DEVNULL)
    return os.path.join(d, "parts", "bench.json")


def train(launcher: list[str], cfg: str, layout: str, rpn: str | None, a, run_dir: str, epoch_steps: int,
          extra: tuple = ()) -> dict:
    cmd = [*launcher, sys.executable, "-m", "hpcgnn", "train", "--part-config", cfg, "--layout", layout,
           "--epoch-steps", str(epoch_steps),
           "--epochs", str(a.epochs), "--batch-size", str(a.batch), "--fanouts", a.fanouts, "--hidden",
           str(a.hidden), "--lr", "0.003", "--run-dir", run_dir, "--eval-every", "0", "--progress", "off",
           "--feature-rows", a.feature_rows, *extra]
    if rpn:
        cmd += ["--ranks-per-node", rpn]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit(f"train_bench: {' '.join(cmd[:4])} ... failed ({res.returncode})")
    rows = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    epochs = [r for r in rows if r["kind"] == "epoch"]
    final = [r for r in rows if r["kind"] == "final"][-1]
    later = epochs[1:] or epochs
    keys = ("epoch_s", "wait_s", "compute_s", "allreduce_s", "sample_s", "fetch_s")
    mean = {k: round(sum(r[k] for r in later) / len(later), 3) for k in keys}
    for k in ("host_s", "gpu_busy_s", "h2d_bytes"):          # the device's view of a step (None on a CPU)
        v = [r.get(k) for r in later]
        mean[k] = None if None in v else round(sum(v) / len(v), 4)
    if final.get("floor_step_s") is not None:
        mean["floor_step_s"] = round(final["floor_step_s"], 5)
    return {"steps_per_epoch": epochs[0]["steps"], **mean, "best_epoch_s": round(min(r["epoch_s"] for r in later), 3),
            "sampled_edges_per_s": round(sum(r["sampled_edges_per_s"] for r in later) / len(later)),
            "test_acc": round(final["test_acc"], 4), "inference_s": round(final["inference_s"], 2)}


def graph_args(ap) -> None:
    """The options naming the graph a training bench runs on (see :func:`prepare`)."""
    ap.add_argument("--part-config", help="a partitioned graph's JSON (else one is generated and partitioned)")
    ap.add_argument("--nodes", type=int, default=100_000, help="nodes of the generated graph (default %(default)s)")
    ap.add_argument("--degree", type=float, default=20, help="its average degree (default %(default)s)")
    ap.add_argument("--feat-dim", type=int, default=64, help="its feature width (default %(default)s)")
    ap.add_argument("--classes", type=int, default=16, help="its classes (default %(default)s)")
    ap.add_argument("--dir", help="where to keep the generated graph (created; default: a temporary directory "
                                  "removed at exit)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    graph_args(ap)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--fanouts", default="25,10")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layout", default="servers=1,samplers=0,trainers=1")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--ranks-per-node", default="2")
    ap.add_argument("--trainers", type=int, default=2, help="trainers in --layout (for --epoch-steps)")
    ap.add_argument("--epoch-steps", type=int, default=0,
                    help="steps per epoch of the distributed run (the single process runs trainers x as many "
                         "steps: the same seeds); 0: full passes")
    ap.add_argument("--feature-rows", default="auto", choices=("auto", "copy", "refs"),
                    help="hpcgnn train's feature_rows for both runs")
    ap.add_argument("--dgl-venv",
                    help="a virtual environment with DGL (bench/dgl_peer/setup.sh): also run DGL's distributed "
                         "training on the same graph in this run (2 machines of a server and a trainer, same "
                         "settings and epochs) and compare at equal steps")
    ap.add_argument("--pairs", type=int, default=1,
                    help="run distributed and single this many times, alternating (this machine's speed drifts "
                         "between runs); the ratio and the step time are medians over the pairs, the "
                         "breakdowns the last pair's")
    a = ap.parse_args()
    cfg = prepare(a)
    runs = tempfile.mkdtemp(prefix="hpcgnn-tbench-runs-")
    atexit.register(shutil.rmtree, runs, True)
    ratios, dist_steps, dist_best = [], [], []
    for k in range(max(1, a.pairs)):
        dist = train(["mpirun", "-n", str(a.np)], cfg, a.layout, a.ranks_per_node, a,
                     os.path.join(runs, f"dist{k}"), a.epoch_steps)
        single = train([], cfg, "servers=0,samplers=0,trainers=1", None, a, os.path.join(runs, f"single{k}"),
                       a.epoch_steps * a.trainers)
        ratios.append(dist["epoch_s"] / single["epoch_s"])
        dist_steps.append(dist["epoch_s"] / dist["steps_per_epoch"])
        dist_best.append(dist["best_epoch_s"] / dist["steps_per_epoch"])
    with open(cfg) as f:
        meta = json.load(f)
    n = meta["num_nodes"]
    peer = run_dgl_peer(a, meta, runs) if a.dgl_venv else None
    out = {"bench": "train", "graph": {"config": os.path.abspath(cfg), "nodes": n}, "epochs": a.epochs,
           "epoch_steps": a.epoch_steps or "full",
           "settings": {"hidden": a.hidden, "fanouts": a.fanouts, "batch": a.batch, "layout": a.layout,
                        "feature_rows": a.feature_rows, "ranks": a.np},
           "distributed": dist, "single": single,
           "distributed_over_single": round(statistics.median(ratios), 3),
           "distributed_over_single_per_pair": [round(r, 3) for r in ratios],
           "target_distributed_over_single": 1.0}
    # the machine is shared: step times are the median over the pairs, and the best
    # epoch of any pair (noise only ever adds time) is given beside them
    out["distributed_s_per_step"] = round(statistics.median(dist_steps), 4)
    out["distributed_s_per_step_per_pair"] = [round(t, 4) for t in dist_steps]
    out["distributed_best_epoch_s_per_step"] = round(min(dist_best), 4)
    out["single_s_per_1000_seeds"] = round(single["epoch_s"] / single["steps_per_epoch"], 4)
    if n in DGL:
        # TARGETS.md's DGL row is a full epoch; compare only full epochs (and mind
        # that the row does not record its number of steps)
        out["dgl_distributed_row"] = DGL[n]
        if not a.epoch_steps:
            out["dgl_over_ours"] = round(DGL[n]["epoch_s"] / dist["epoch_s"], 2)
            out["target_dgl_over_ours"] = 2.0
        # Equal steps: the row does not give its step count, but its sampled edges per
        # second times its epoch time is the edges it sampled per epoch; divided by
        # the edges one of our steps samples (same fanouts and batch), that is its
        # number of steps - all trainers' together if its rate summed the trainers (as
        # ours does), or per trainer if it did not.  Our time for that many steps:
        dgl_edges = DGL[n]["sampled_edges_per_s"] * DGL[n]["epoch_s"]
        per_step = dist["sampled_edges_per_s"] * dist["epoch_s"] / (dist["steps_per_epoch"] * a.trainers)
        steps = {"if_rate_summed_trainers": dgl_edges / per_step / a.trainers, "if_rate_per_trainer": dgl_edges / per_step}
        out["dgl_equal_steps"] = {
            "our_sampled_edges_per_step": round(per_step),
            "dgl_steps_per_trainer": {k: round(v, 1) for k, v in steps.items()},
            "dgl_over_ours_at_equal_steps": {k: round(DGL[n]["epoch_s"] / (v * out["distributed_s_per_step"]), 2)
                                              for k, v in steps.items()},
            "dgl_over_ours_at_equal_steps_best_epoch": {
                k: round(DGL[n]["epoch_s"] / (v * out["distributed_best_epoch_s_per_step"]), 2)
                for k, v in steps.items()}}
    if peer is not None:
        # DGL's steps per trainer are counted, not inferred: our time for as many steps
        ours = out["distributed_s_per_step"] * peer["steps_per_epoch"]
        out["dgl_peer"] = {k: v for k, v in peer.items() if k != "epochs"}
        out["dgl_peer_epochs"] = peer["epochs"]
        out["dgl_peer_over_ours_at_equal_steps"] = round(peer["epoch_s"] / ours, 2)
        out["dgl_peer_over_ours_at_equal_steps_best_epoch"] = round(
            peer["best_epoch_s"] / (out["distributed_best_epoch_s_per_step"] * peer["steps_per_epoch"]), 2)
        if a.feature_rows == "copy":   # with rows read in place our fetch is address lookups only
            out["ours_over_dgl_peer_fetch_per_step"] = round(dist["fetch_s"] / dist["steps_per_epoch"] /
                                                             (peer["fetch_s"] / peer["steps_per_epoch"]), 3)
    print(json.dumps(out), flush=True)


def run_dgl_peer(a, meta: dict, runs: str) -> dict:
    """DGL's distributed training on the same raw graph (partitioned by DGL's own
    partitioner, 2 parts), same settings and epochs, in this run."""
    py = os.path.join(a.dgl_venv, "bin", "python")
    raw = meta["source"]["path"]
    parts = os.path.join(runs, "dgl_parts")
    done = os.path.join(parts, "partition_result.json")       # partitioned already in this run
    if os.path.exists(done):
        with open(done) as f:
            part = json.load(f)
    else:
        res = subprocess.run([py, os.path.join(HERE, "dgl_peer", "partition.py"), raw, parts, "--parts", "2"],
                             capture_output=True, text=True)
        if res.returncode != 0:
            sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
            raise SystemExit("train_bench: DGL's partitioning failed")
        part = json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])
        with open(done, "w") as f:
            json.dump(part, f)
    fan = ",".join(reversed(a.fanouts.split(",")))          # DGL lists the input layer first
    cmd = [py, os.path.join(HERE, "dgl_peer", "run.py"), "--part-config", part["config"],
           "--classes", str(meta["num_classes"]), "--epochs", str(a.epochs), "--epoch-steps", str(a.epoch_steps),
           "--batch", str(a.batch), "--fanouts", fan, "--hidden", str(a.hidden), "--lr", "0.003"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit("train_bench: the DGL peer run failed")
    peer = json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])
    peer["partition_s"], peer["partition_peak_rss_gib"] = part["partition_s"], part["peak_rss_gib"]
    return peer


if __name__ == "__main__":
    main()
