"""Fit the scale model (issue 30, docs/scaling.md) and check it on a graph size left out.

    python bench/scale_model.py                        # the grid below, ~25 min on 2 cores
    python bench/scale_model.py --sizes 250000,500000,1000000 --holdout 2000000 --extra 500000:20:128,500000:10:64
    python bench/scale_model.py --refit bench/scale_grid.json   # fit again, no runs

For every graph (``hpcgnn generate``: SIZES fitted and HOLDOUT left out, average degree
20, 64 float32 features; plus EXTRA graphs with another degree or feature dimension,
so that per-node, per-edge and feature terms can be told apart) and every rank count
(1, 2, 4; EXTRA graphs at 2 only): ``hpcgnn generate --json`` (``--generate-repeats``
times) and ``hpcgnn partition -k 2 --coarsen lp --json`` under ``mpirun -n R`` (wall
time, every rank's RSS high-water mark; ``lp`` is what ``--coarsen auto`` picks from 1M
nodes, so for every graph the model is meant for); then
once per graph ``hpcgnn train`` with 2 x [server, trainer] for 2 epochs of
``--train-steps`` steps (the second one timed: the step time; the ``{"kind":
"memory"}`` line: each role's peak RSS).  Partitioning and training run ``--repeats`` times
and keeps the smallest time (the largest peak).  Before each run the script waits for a
quiet machine (no other ``mpirun``/``pytest``, and a 1-minute load below 1.0 or under
0.3 cores busy over 2 s) for at most ``--max-wait`` seconds per run and
``--wait-budget`` in all; a run that started on a busy machine is flagged ``noisy``.

Every phase is fitted by non-negative least squares on relative errors to the terms of
:func:`hpcgnn.scale_model.terms`; the held-out graph's measurements are compared with the
predictions (``rel_error``; ``meets_target``: all within 20%).  The coefficients go to
``hpcgnn/data/scale_model.json`` (``--model-out``), the measurements to ``--save``.
Prints one JSON object.
"""
import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory_bench import HPCGNN, MPIRUN, json_rows  # noqa: E402


def _load_plan():
    """hpcgnn/scale_model.py by its path: importing the package would start MPI in this
    process, and the ``mpirun`` it launches would then fail."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hpcgnn", "scale_model.py")
    spec = importlib.util.spec_from_file_location("hpcgnn_scale_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_plan = _load_plan()
MODEL_PATH, predict, terms = _plan.MODEL_PATH, _plan.predict, _plan.terms

CORES = os.cpu_count() or 1
TARGET = 0.20
# phase -> (rows of, measured key, terms)
PHASES = {
    "generate_memory": ("generate", "peak_max_rank", ["const", "edges_per_rank", "nodes_per_rank",
                                                      "feature_bytes_per_rank"]),
    "generate_time": ("generate", "time_s", ["const", "ranks_per_core", "edges_per_core", "nodes_per_core"]),
    # no term of the whole graph's nodes: no rank holds a table over them (the coarsening reads
    # its ghosts; relabelling gathers one only below 64M nodes), and a fit that has one misses
    # the held-out graph by more
    "partition_memory": ("partition", "peak_max_rank", ["const", "edges_per_rank", "nodes_per_rank",
                                                        "feature_bytes_per_rank"]),
    "partition_time": ("partition", "time_s", ["const", "ranks_per_core", "edges_per_core", "nodes_per_core",
                                                  "edges"]),
    "server_memory": ("train", "server_max", ["const", "edges_per_rank", "nodes_per_rank",
                                              "feature_bytes_per_rank"]),
    "trainer_memory": ("train", "trainer_max", ["const", "feat_dim", "edges_per_rank", "nodes_per_rank",
                                                "feature_bytes_per_rank"]),
    "step_time": ("train", "step_s", ["const", "feat_dim", "sampled_per_seed"]),
}
UNITS = {"memory": "bytes", "time": "s"}


def _busy_cores(interval=2.0):
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]
    t0, i0 = sample()
    time.sleep(interval)
    t1, i1 = sample()
    return CORES * (1 - (i1 - i0) / max(1, t1 - t0))


def _foreign_jobs():
    res = subprocess.run(["pgrep", "-f", "mpirun|pytest"], capture_output=True, text=True)
    return [p for p in res.stdout.split() if int(p) != os.getpid()]


class Quiet:
    """Waits for a quiet machine before each timed run, within a budget."""

    def __init__(self, max_wait, budget):
        self.max_wait, self.left = max_wait, budget

    def wait(self):
        """True when the machine is quiet now (False: waited as long as allowed)."""
        t0 = time.monotonic()
        while True:
            quiet = not _foreign_jobs() and (os.getloadavg()[0] < 1.0 or _busy_cores() < 0.3)
            waited = time.monotonic() - t0
            if quiet or waited >= min(self.max_wait, self.left):
                self.left = max(0.0, self.left - waited)
                return quiet
            time.sleep(10)


def _gen_part(d, g, ranks, a, quiet):
    """generate and partition one graph with ``ranks`` ranks, ``a.repeats`` times each."""
    raw, parts = os.path.join(d, "g.h5"), os.path.join(d, "p")
    run = [*MPIRUN, "-n", str(ranks)]
    out = {}
    for phase, cmd in (("generate", [*run, *HPCGNN, "generate", raw, "--num-nodes", str(g["num_nodes"]),
                                     "--avg-degree", str(g["avg_degree"]), "--feat-dim", str(g["feat_dim"]),
                                     "--num-classes", "16", "--name", "g", "--overwrite", "--json"]),
                       ("partition", [*run, *HPCGNN, "partition", raw, "-o", parts, "-k", "2", "--coarsen", "lp",
                                      "--overwrite", "--json"])):
        rows = []
        for _ in range(a.repeats if phase == "partition" else a.generate_repeats):
            calm = quiet.wait()
            (rep, *_), wall = json_rows(cmd)
            rows.append((wall, rep, calm))
        rep = rows[0][1]
        out[phase] = {"phase": phase, "num_nodes": g["num_nodes"], "num_edges": rep["num_edges"],
                      "feat_dim": g["feat_dim"], "feat_bytes": 4 * g["num_nodes"] * g["feat_dim"],
                      "avg_degree": g["avg_degree"], "ranks": ranks, "cores": min(ranks, CORES),
                      "time_s": round(min(r[0] for r in rows), 2), "times_s": [round(r[0], 2) for r in rows],
                      "peak_max_rank": max(r[1]["peak_rss_bytes_max_rank"] for r in rows),
                      "peak_sum": max(r[1]["peak_rss_bytes_sum"] for r in rows),
                      "noisy": not all(r[2] for r in rows)}
        if phase == "partition":
            out[phase]["timings_s"] = rep["timings_s"]
    return out, os.path.join(parts, "g.json")


def _train(d, config, base, a, quiet):
    """2 x [server, trainer], 2 epochs of ``a.train_steps`` steps: step time of the
    second epoch, peak RSS per role."""
    cmd = [*MPIRUN, "-n", "4", *HPCGNN, "train", "--part-config", config, "--layout",
           "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2", "--epochs", "2", "--epoch-steps",
           str(a.train_steps), "--max-steps", str(2 * a.train_steps), "--progress", "off", "--eval-every", "0"]
    runs = []
    for i in range(a.repeats):
        calm = quiet.wait()
        rows, _ = json_rows(cmd + ["--seed", str(i), "--run-dir", os.path.join(d, f"run{i}")])
        epoch = [r for r in rows if r.get("kind") == "epoch"][-1]
        roles = [r for r in rows if r.get("kind") == "memory"][-1]["roles"]
        runs.append((epoch["epoch_s"] / epoch["steps"], roles, calm))
    return {**base, "phase": "train", "ranks": 2, "cores": min(2, CORES),
            "step_s": round(min(r[0] for r in runs), 4), "steps_s": [round(r[0], 4) for r in runs],
            "server_max": max(r[1]["server"]["peak_rss_bytes_max"] for r in runs),
            "trainer_max": max(r[1]["trainer"]["peak_rss_bytes_max"] for r in runs),
            "noisy": not all(r[2] for r in runs)}


def _save(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"bench": "scale_grid", "cores": CORES, "rows": rows}, f, indent=1)


def measure(graphs, a):
    """Every graph at its rank counts: the measurement rows (saved after each graph)."""
    quiet, rows = Quiet(a.max_wait, a.wait_budget), []
    for g in graphs:
        with tempfile.TemporaryDirectory(prefix="hpcgnn-scalemodel-", dir=a.dir) as d:
            for ranks in g["ranks"]:
                out, config = _gen_part(d, g, ranks, a, quiet)
                rows += [dict(r, holdout=g["holdout"]) for r in out.values()]
            base = {k: out["partition"][k] for k in ("num_nodes", "num_edges", "feat_dim", "feat_bytes",
                                                      "avg_degree")}
            rows.append(dict(_train(d, config, base, a, quiet), holdout=g["holdout"]))
        _save(a.save, rows)
        print(json.dumps({"progress": g, "rows": len(rows)}), file=sys.stderr, flush=True)
    return rows


def _row_terms(r):
    return terms(r["num_nodes"], r["num_edges"], r["feat_bytes"], r["feat_dim"], r["ranks"], r["cores"])


def nnls(X, y):
    """Non-negative least squares on relative errors: drop the most negative term and
    solve again until none is negative."""
    A = X / y[:, None]
    keep = list(range(X.shape[1]))
    while True:
        scale = np.linalg.norm(A[:, keep], axis=0)
        scale[scale == 0] = 1
        beta = np.linalg.lstsq(A[:, keep] / scale, np.ones(len(y)), rcond=None)[0] / scale
        if (beta >= 0).all():
            out = np.zeros(X.shape[1])
            out[keep] = beta
            return out
        del keep[int(np.argmin(beta))]


def fit(rows):
    """Coefficients of every phase fitted on the rows not held out."""
    model = {}
    for name, (phase, key, names) in PHASES.items():
        sel = [r for r in rows if r["phase"] == phase and not r["holdout"]]
        X = np.array([[_row_terms(r)[t] for t in names] for r in sel], dtype=float)
        y = np.array([r[key] for r in sel], dtype=float)
        beta = nnls(X, y)
        model[name] = {"unit": UNITS[name.rsplit("_", 1)[1]], "measured": key,
                       "coef": {t: float(f"{b:.6g}") for t, b in zip(names, beta) if b > 0}}
    return model


def compare(rows, phases, holdout):
    """Measured vs predicted for every phase on the rows held out (or, with
    ``holdout=False``, the fitted ones: the residuals)."""
    out = []
    for name, (phase, key, _) in PHASES.items():
        for r in rows:
            if r["phase"] != phase or r["holdout"] != holdout:
                continue
            pred = predict(phases[name]["coef"], _row_terms(r))
            out.append({"model": name, "num_nodes": r["num_nodes"], "num_edges": r["num_edges"],
                        "feat_dim": r["feat_dim"], "ranks": r["ranks"], "measured": r[key],
                        "predicted": round(pred, 4 if name.endswith("time") else 0),
                        "rel_error": round((pred - r[key]) / r[key], 3), "noisy": r["noisy"]})
    return out


def _args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="125000,250000,500000", help="fitted graph sizes (nodes)")
    ap.add_argument("--holdout", type=int, default=1_000_000, help="the size left out of the fit")
    ap.add_argument("--avg-degree", type=float, default=20)
    ap.add_argument("--feat-dim", type=int, default=64)
    ap.add_argument("--extra", default="250000:20:128,250000:10:64",
                    help="fitted graphs NODES:DEGREE:FEAT_DIM at 2 ranks (another feature dim, another degree)")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--generate-repeats", type=int, default=1, help="runs of generate (its time matters least)")
    ap.add_argument("--train-steps", type=int, default=20)
    ap.add_argument("--max-wait", type=float, default=600, help="seconds to wait for a quiet machine per run")
    ap.add_argument("--wait-budget", type=float, default=1200, help="seconds of waiting in all")
    ap.add_argument("--dir", help="work directory (default: a temporary one under /tmp)")
    ap.add_argument("--save", default="runs/scale_grid.json", help="write the measurements here")
    ap.add_argument("--refit", help="fit the measurements of this file; run nothing")
    ap.add_argument("--model-out", default=MODEL_PATH)
    return ap.parse_args()


def _graphs(a):
    ranks = [int(r) for r in a.ranks.split(",")]
    gs = [{"num_nodes": int(n), "avg_degree": a.avg_degree, "feat_dim": a.feat_dim, "ranks": ranks, "holdout": False}
          for n in a.sizes.split(",")]
    for spec in filter(None, a.extra.split(",")):
        n, deg, f = spec.split(":")
        gs.append({"num_nodes": int(n), "avg_degree": float(deg), "feat_dim": int(f), "ranks": [2], "holdout": False})
    gs.append({"num_nodes": a.holdout, "avg_degree": a.avg_degree, "feat_dim": a.feat_dim, "ranks": ranks,
               "holdout": True})
    return gs


def _span(held, model):
    """``[lowest, highest]`` relative error of ``model`` on the held-out graph at ranks
    up to the cores (what ``hpcgnn plan`` quotes), or None."""
    errs = [h["rel_error"] for h in held if h["model"] == model and h["ranks"] <= CORES]
    return [min(errs), max(errs)] if errs else None


def main():
    a = _args()
    if a.refit:
        with open(a.refit) as f:
            rows = json.load(f)["rows"]
    else:
        rows = measure(_graphs(a), a)
    phases = fit(rows)
    held = compare(rows, phases, True)
    meets = bool(held) and all(abs(h["rel_error"]) <= TARGET for h in held)
    model = {"version": 1, "measured": datetime.date.today().isoformat(), "cores": CORES,
             "training": {"batch_size": 1000, "fanouts": [25, 10], "layout": "servers=1,samplers=0,trainers=1",
                          "trainers": 2},
             "phases": phases, "heldout_max_abs_rel_error": max((abs(h["rel_error"]) for h in held), default=None),
             "heldout_partition_time_error": _span(held, "partition_time"), "meets_target": meets}
    os.makedirs(os.path.dirname(os.path.abspath(a.model_out)), exist_ok=True)
    with open(a.model_out, "w") as f:
        json.dump(model, f, indent=1)
        f.write("\n")
    print(json.dumps({"bench": "scale_model", "cores": CORES, "phases": phases, "heldout": held,
                      "fit_residuals": compare(rows, phases, False), "meets_target": meets,
                      "noisy_runs": sum(r["noisy"] for r in rows), "rows": rows}))


if __name__ == "__main__":
    main()
