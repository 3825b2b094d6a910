"""hpcgnn.nn's GATConv and RelGraphConv against DGL's own layers of the same name:
one training epoch (a fixed number of steps) of the same 2-layer model on each side.

    python bench/dgl_layers_bench.py                         # runs/main/parts/synthetic.json, gat + rgcn
    python bench/dgl_layers_bench.py --models rgcn --pairs 3 --part-config PARTS.json
    mpirun -n 4 python bench/dgl_layers_bench.py --worker --model gat    # one hpcgnn run (internal)

The hpcgnn side is written as a DGL user writes it: ``import hpcgnn.nn as dglnn``,
``for input_nodes, seeds, blocks in hpcgnn.dataloading.NodeDataLoader(...)``,
``x = g.ndata['feat'][input_nodes]``, ``h = layer(block, h)``; DDP over
``torch.distributed``; ``mpirun -n 4``, 2 virtual nodes of [server, trainer].  The DGL
side is ``bench/dgl_peer/train_layers.py`` (DGL 2.1's ``dgl.nn`` layers, DGL's
distributed module, 2 emulated machines of [server, trainer], started by
``bench/dgl_peer/run.py``) on DGL's partitions of the same raw graph
(``train_bench.run_dgl_peer``'s way).  Models (both sides):

* ``gat``: GATConv(in, hidden/4, 4 heads) heads flattened, ReLU, dropout 0.5,
  GATConv(hidden, classes, 1 head) (the zoo's GAT);
* ``rgcn``: RelGraphConv(in, hidden, num_rels=4, "basis", num_bases=2, self_loop),
  ReLU, dropout 0.5, RelGraphConv(hidden, classes, ...).  The graph is homogeneous:
  each sampled edge's relation is ``block.edata[EID] % num_rels`` (its global edge id,
  on each side in its own partitioned numbering: the same uniform split of the edges
  into relations, not the same edges in each relation).

Settings: hidden 256, fanouts 25,10 in hop order (DGL's "10,25"), batch 1000, Adam
0.003; ``--epoch-steps`` (10) steps per trainer per epoch, ``--epochs`` (3), epoch 0
warm-up, the mean of the later epochs reported.  ``--pairs`` (1) runs of both sides
alternate per model; the median pair's ratio is reported.  Prints one JSON object:
per model ``hpcgnn_epoch_s``, ``dgl_epoch_s``, ``dgl_over_hpcgnn`` (target >= 1.5,
issue 40).  ``--profile`` adds, per model, the top ops by self CPU time of one
extra training step of hpcgnn's trainer 0 (torch.profiler; not timed).
"""
import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
MODELS = ("gat", "rgcn")
TARGET = 1.5


def worker(a):
    import torch as th
    import torch.nn.functional as F
    from torch import nn

    import hpcgnn
    import hpcgnn.dataloading as dataloading
    import hpcgnn.distributed as dist
    import hpcgnn.nn as dglnn

    class GAT(nn.Module):
        def __init__(self, in_feats, n_hidden, n_classes, heads):
            super().__init__()
            self.layers = nn.ModuleList([dglnn.GATConv(in_feats, n_hidden // heads, heads, allow_zero_in_degree=True),
                                         dglnn.GATConv(n_hidden, n_classes, 1, allow_zero_in_degree=True)])
            self.dropout = nn.Dropout(0.5)

        def forward(self, blocks, x):
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                h = layer(block, h)                    # (nodes, heads, out)
                if i == 0:
                    h = self.dropout(F.relu(h.flatten(1)))
                else:
                    h = h.mean(1)
            return h

    class RGCN(nn.Module):
        def __init__(self, in_feats, n_hidden, n_classes, num_rels, regularizer, num_bases):
            super().__init__()
            reg = None if regularizer == "none" else regularizer
            nb = num_bases if reg else None
            self.num_rels = num_rels
            self.layers = nn.ModuleList([dglnn.RelGraphConv(in_feats, n_hidden, num_rels, reg, nb, self_loop=True),
                                         dglnn.RelGraphConv(n_hidden, n_classes, num_rels, reg, nb, self_loop=True)])
            self.dropout = nn.Dropout(0.5)

        def forward(self, blocks, x):
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                h = layer(block, h, block.edata[hpcgnn.EID] % self.num_rels)
                if i == 0:
                    h = self.dropout(F.relu(h))
            return h

    with open(a.part_config) as f:
        conf = json.load(f)
    dist.initialize("ip_config.txt", layout="servers=1,samplers=0,trainers=1", ranks_per_node=2,
                    part_config=a.part_config)
    th.distributed.init_process_group(backend="gloo")
    th.set_num_threads(1)
    g = dist.DistGraph(conf["graph_name"])
    train_nid = dist.node_split(g.ndata["train_mask"])
    th.manual_seed(0)
    in_feats, classes = g.ndata["feat"].shape[1], conf["num_classes"]
    net = (GAT(in_feats, a.hidden, classes, a.heads) if a.model == "gat"
           else RGCN(in_feats, a.hidden, classes, a.num_rels, a.regularizer, a.num_bases))
    model = th.nn.parallel.DistributedDataParallel(net)
    opt = th.optim.Adam(model.parameters(), lr=0.003)
    sampler = dataloading.MultiLayerNeighborSampler([int(f) for f in reversed(a.fanouts.split(","))])
    loader = dataloading.NodeDataLoader(g, train_nid, sampler, batch_size=a.batch, shuffle=True, drop_last=False)

    def step(input_nodes, seeds, blocks):
        x = g.ndata["feat"][input_nodes]
        y = g.ndata["label"][seeds]
        loss = F.cross_entropy(model(blocks, x), y.long())
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    times = []
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        for k, (input_nodes, seeds, blocks) in enumerate(loader):
            loss = step(input_nodes, seeds, blocks)
            if k + 1 == a.epoch_steps:
                break
        times.append(time.perf_counter() - t0)
    prof_rows = None
    if a.profile:                   # one more step, every trainer (DDP), profiled on trainer 0
        batch = next(iter(loader))
        if th.distributed.get_rank() == 0:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                t0 = time.perf_counter()
                step(*batch)
                wall = time.perf_counter() - t0
            ev = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
            prof_rows = {"step_s": round(wall, 4),
                         "top_self_cpu": [{"op": e.key, "self_ms": round(e.self_cpu_time_total / 1e3, 2),
                                           "total_ms": round(e.cpu_time_total / 1e3, 2), "calls": e.count}
                                          for e in ev[:a.profile_top]]}
            shaped = sorted(prof.key_averages(group_by_input_shape=True), key=lambda e: e.self_cpu_time_total,
                            reverse=True)
            prof_rows["top_self_cpu_by_shape"] = [
                {"op": e.key, "shapes": str(e.input_shapes)[:160], "self_ms": round(e.self_cpu_time_total / 1e3, 2),
                 "calls": e.count} for e in shaped[:a.profile_top]]
        else:
            step(*batch)
    if th.distributed.get_rank() == 0:
        later = times[1:] or times
        out = {"epoch_s": round(sum(later) / len(later), 4), "epochs_s": [round(t, 4) for t in times],
               "steps": a.epoch_steps, "loss": round(float(loss.detach()), 4)}
        if prof_rows:
            out["profile"] = prof_rows
        print(json.dumps(out), flush=True)
    th.distributed.destroy_process_group()
    dist.exit_client()


def _env():
    env = dict(os.environ)
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def model_args(a) -> list[str]:
    return ["--epochs", str(a.epochs), "--epoch-steps", str(a.epoch_steps), "--batch", str(a.batch),
            "--hidden", str(a.hidden), "--heads", str(a.heads), "--num-rels", str(a.num_rels),
            "--regularizer", a.regularizer, "--num-bases", str(a.num_bases)]


def hpcgnn_run(model: str, a, profile: bool = False) -> dict:
    cmd = ["mpirun", "-n", "4", sys.executable, os.path.abspath(__file__), "--worker", "--model", model,
           "--part-config", a.part_config, "--fanouts", a.fanouts, *model_args(a)]
    if profile:
        cmd += ["--profile", "--profile-top", str(a.profile_top)]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit(f"dgl_layers_bench: the hpcgnn {model} run failed")
    return json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])


def dgl_partition(a, meta: dict, runs: str) -> dict:
    """DGL's partitions of the same raw graph (as ``train_bench.run_dgl_peer`` makes them)."""
    py = os.path.join(a.dgl_venv, "bin", "python")
    res = subprocess.run([py, os.path.join(HERE, "dgl_peer", "partition.py"), meta["source"]["path"],
                          os.path.join(runs, "dgl_parts"), "--parts", "2"], capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit("dgl_layers_bench: DGL's partitioning failed")
    return json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])


def dgl_run(model: str, a, meta: dict, part: dict) -> dict:
    py = os.path.join(a.dgl_venv, "bin", "python")
    fan = ",".join(reversed(a.fanouts.split(",")))          # DGL lists the input layer first
    cmd = [py, os.path.join(HERE, "dgl_peer", "run.py"), "--script", "train_layers.py", "--part-config",
           part["config"], "--classes", str(meta["num_classes"]), "--model", model, "--fanouts", fan,
           "--lr", "0.003", *model_args(a)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
        raise SystemExit(f"dgl_layers_bench: the DGL {model} run failed")
    return json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part-config", default=os.path.join(ROOT, "runs", "main", "parts", "synthetic.json"))
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of gat,rgcn")
    ap.add_argument("--model", choices=MODELS, help="(--worker) the model of this run")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--epoch-steps", type=int, default=10, help="steps per trainer per epoch, both sides")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--fanouts", default="25,10", help="hop order (DGL gets them reversed)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4, help="GAT: heads of the first layer")
    ap.add_argument("--num-rels", type=int, default=4, help="R-GCN: relations (edge id %% num_rels)")
    ap.add_argument("--regularizer", default="basis", choices=("none", "basis", "bdd"))
    ap.add_argument("--num-bases", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=1, help="runs of both sides per model, alternating")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one step of hpcgnn's trainer 0 per model (an extra run); with --worker: "
                         "profile in this run")
    ap.add_argument("--profile-top", type=int, default=15)
    ap.add_argument("--dgl-venv", default=os.path.join(ROOT, ".dglvenv"))
    ap.add_argument("--worker", action="store_true", help="run hpcgnn's side under mpirun (internal)")
    a = ap.parse_args()
    a.part_config = os.path.abspath(a.part_config)
    if a.worker:
        return worker(a)
    if a.epoch_steps <= 0:
        raise SystemExit("dgl_layers_bench: --epoch-steps must be > 0 (equal steps on both sides)")
    models = [m for m in a.models.split(",") if m]
    if unknown := sorted(set(models) - set(MODELS)):
        raise SystemExit(f"dgl_layers_bench: unknown models {unknown}")
    with open(a.part_config) as f:
        meta = json.load(f)
    runs = tempfile.mkdtemp(prefix="hpcgnn-layersbench-")
    atexit.register(shutil.rmtree, runs, True)
    part = dgl_partition(a, meta, runs)
    out = {"bench": "dgl_layers", "graph": a.part_config, "nodes": meta["num_nodes"], "epochs": a.epochs,
           "epoch_steps": a.epoch_steps,
           "settings": {"hidden": a.hidden, "gat_heads": a.heads, "rgcn": {"num_rels": a.num_rels,
                        "regularizer": a.regularizer, "num_bases": a.num_bases, "etype": "edge id % num_rels"},
                        "fanouts": a.fanouts, "batch": a.batch, "lr": 0.003, "dropout": 0.5,
                        "hpcgnn": "mpirun -n 4, 2 nodes of [server, trainer]",
                        "dgl": "DGL 2.1, 2 emulated machines of [server, trainer]"},
           "target_dgl_over_hpcgnn": TARGET, "models": {}}
    for m in models:
        pairs = []
        for _ in range(max(1, a.pairs)):
            ours = hpcgnn_run(m, a)
            peer = dgl_run(m, a, meta, part)
            pairs.append((round(peer["epoch_s"] / ours["epoch_s"], 2), ours, peer))
        ratio, ours, peer = sorted(pairs, key=lambda p: p[0])[len(pairs) // 2]
        row = {"hpcgnn_epoch_s": ours["epoch_s"], "dgl_epoch_s": peer["epoch_s"], "dgl_over_hpcgnn": ratio,
               "meets_target": ratio >= TARGET, "pairs": [p[0] for p in pairs],
               "hpcgnn_epochs_s": ours["epochs_s"], "dgl_epochs_s": [e["epoch_s"] for e in peer["epochs"]],
               "dgl_breakdown_s": {k: peer[k] for k in ("sample_s", "fetch_s", "compute_s")},
               "loss": {"hpcgnn": ours["loss"], "dgl": peer["epochs"][-1]["loss"]}}
        if a.profile:
            row["hpcgnn_profile"] = hpcgnn_run(m, a, profile=True)["profile"]
        out["models"][m] = row
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
