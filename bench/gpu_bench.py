"""The model zoo on a GPU against the same runs on the CPU: epoch time and test accuracy.

    python bench/gpu_bench.py --nodes 100000                 # generate + partition first
    python bench/gpu_bench.py --part-config PARTS.json [--models sage,gat]

Needs one CUDA device (exits 2 without one).  For each model (``sage``, ``sage-pyg``,
``gcn``, ``gat``, ``gin``) the same run trains on the same partitioned graph with
``hpcgnn train --model M --device cpu`` and then ``--device cuda``: with one GPU in one
process that holds the partitioned graph (``servers=0,samplers=0,trainers=1``), with 2
GPUs (``--trainers 2``) under ``mpirun -n 4`` as 2 nodes of [server, trainer] (NCCL
between the trainers; the servers keep the graph in host memory), TARGETS.md's settings (hidden 256, fanouts 25,10,
batch 1000, Adam 0.003, dropout 0.5), ``--epoch-steps`` steps per epoch, epoch 0
warm-up.  The CPU run is the baseline: ``baseline_over_measured`` is the CPU epoch time
over the GPU's (> 1: the GPU is faster), and ``acc_diff_points`` the GPU's test
accuracy minus the CPU's (the two should agree within noise: same model, same seeds).

Per model and device: ``epoch_s``; ``floor_epoch_s``, the model-only floor (``hpcgnn
train --floor-steps``: the same kind of batches staged on the device first, replayed
through a copy of the model, times the steps per epoch); ``epoch_over_floor``;
``host_s``, the host's own time in the steps (Python and launches, before it waits
for the device); ``gpu_busy_s``, device time from each step's first kernel to its
last (CUDA events; null on a CPU); ``h2d_bytes``, bytes the batches moved to the
device per epoch (null on a CPU: nothing crosses).  The products-sized graph:
``--nodes 2449029 --degree 25 --feat-dim 100 --classes 47``.

Prints one JSON object.  ``bash bench/gpu_check.sh`` runs the GPU tests, then this.
"""
import argparse
import atexit
import json
import os
import shlex
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_bench  # noqa: E402

MODELS = ("sage", "sage-pyg", "gcn", "gat", "gin")


def run(model: str, device: str, cfg: str, a, run_dir: str) -> dict:
    """``hpcgnn train --model model --device device`` through train_bench.train: one
    process holding the whole graph (1 trainer), or 2 nodes of [server, trainer]."""
    sh = ["sh", "-c", f'exec "$0" "$@" --model {shlex.quote(model)} --device {device}']
    extra = ("--floor-steps", str(a.floor_steps), "--sample-on", a.sample_on)
    if a.trainers == 1:
        r = train_bench.train(sh, cfg, "servers=0,samplers=0,trainers=1", None, a, run_dir, a.epoch_steps, extra)
    else:
        r = train_bench.train(["mpirun", "-n", "4", *sh], cfg, "servers=1,samplers=0,trainers=1", "2", a, run_dir,
                              a.epoch_steps, extra)
    if r.get("floor_step_s") is not None:
        r["floor_epoch_s"] = round(r["floor_step_s"] * r["steps_per_epoch"], 4)
        r["epoch_over_floor"] = round(r["epoch_s"] / r["floor_epoch_s"], 2)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    train_bench.graph_args(ap)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run; epoch 0 is warm-up, epoch_s is the "
                                                         "mean of the others (default %(default)s)")
    ap.add_argument("--epoch-steps", type=int, default=30, help="steps per epoch, both devices (default %(default)s)")
    ap.add_argument("--batch", type=int, default=1000, help="seeds per batch (default %(default)s)")
    ap.add_argument("--fanouts", default="25,10", help="per hop (default %(default)s)")
    ap.add_argument("--hidden", type=int, default=256, help="hidden width (default %(default)s)")
    ap.add_argument("--feature-rows", default="auto", choices=("auto", "copy", "refs"))
    ap.add_argument("--floor-steps", type=int, default=30, help="batches replayed for the model-only floor "
                                                               "(0: none; default %(default)s)")
    ap.add_argument("--sample-on", default="auto", choices=("auto", "host", "device"),
                    help="auto: the GPU samples its host's partitions; host: the CPU kernel; device: the training "
                         "device even a CPU (the GPU path's twin, with --devices cpu,cpu) (default %(default)s)")
    ap.add_argument("--devices", default="cpu,cuda",
                    help="baseline,measured (cpu,cpu tries the bench itself on a machine without a GPU)")
    ap.add_argument("--trainers", type=int, choices=(1, 2),
                    help="1: one process holding the graph; 2: 2 nodes of [server, trainer], a GPU each "
                         "(default: 2 when 2 GPUs are visible)")
    a = ap.parse_args()
    import torch

    a.trainers = a.trainers or (2 if torch.cuda.device_count() >= 2 else 1)
    base, measured = a.devices.split(",")
    if "cuda" in (base, measured) and not torch.cuda.is_available():
        print("gpu_bench: torch sees no CUDA device", file=sys.stderr)
        return 2
    models = [m for m in a.models.split(",") if m]
    if unknown := sorted(set(models) - set(MODELS)):
        raise SystemExit(f"gpu_bench: unknown models {unknown}; one of {', '.join(MODELS)}")
    cfg = train_bench.prepare(a)
    with open(cfg) as f:
        meta = json.load(f)
    runs = tempfile.mkdtemp(prefix="hpcgnn-gpubench-runs-")
    atexit.register(shutil.rmtree, runs, True)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    out = {"bench": "gpu", "device": gpu, "devices": [base, measured], "torch": torch.__version__,
           "graph": {"config": os.path.abspath(cfg), "nodes": meta["num_nodes"]}, "epochs": a.epochs,
           "epoch_steps": a.epoch_steps, "trainers": a.trainers, "models": {}}
    failed = {}
    keys = ("epoch_s", "floor_epoch_s", "epoch_over_floor", "host_s", "gpu_busy_s", "h2d_bytes", "best_epoch_s",
            "compute_s", "wait_s", "allreduce_s", "sample_s", "fetch_s", "test_acc", "inference_s")
    for m in models:
        row = {}
        for side, dev in (("baseline", base), ("measured", measured)):
            try:
                r = run(m, dev, cfg, a, os.path.join(runs, f"{m}-{side}"))
                row[side] = {"device": dev, **{k: r.get(k) for k in keys}}
            except SystemExit as e:
                failed[f"{m} {side} {dev}"] = str(e)
        if "baseline" in row and "measured" in row:
            b, g = row["baseline"], row["measured"]
            row["baseline_over_measured"] = round(b["epoch_s"] / g["epoch_s"], 2)
            row["acc_diff_points"] = round(100 * (g["test_acc"] - b["test_acc"]), 2)
        out["models"][m] = row
    if failed:
        out["failed"] = failed
    print(json.dumps(out), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
