"""End-to-end training (examples/node_classification.py) under mpirun: accuracy
against a single-process full-batch PyG reference and an MLP, bitwise resume from
a checkpoint, SIGUSR1 -> checkpoint and clean exit, and bad input ending the job
before training with a clear message."""
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import torch

from conftest import ROOT, clean_mpi_env
from hpcgnn.datasets import generate_graph
from hpcgnn.errors import InputError
from hpcgnn.partition import partition_graph
from hpcgnn.train.config import parse_args

pytest.importorskip("torch_geometric")
SCRIPT = os.path.join(ROOT, "examples", "node_classification.py")
LAYOUT = ["--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2"]


def _graph(d, n, deg, feat, classes, seed):
    raw = os.path.join(d, "g.h5")
    generate_graph(raw, None, n, deg, feat, classes, seed=seed, name="g")
    with h5py.File(raw, "a") as f:            # a mask with a single node, for the bad-input test
        one = np.zeros(n, dtype=bool)
        one[n // 2] = True
        f["nodes/data/one_mask"] = one
    return raw, partition_graph(raw, os.path.join(d, "parts"), 2)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return _graph(str(tmp_path_factory.mktemp("small")), 3000, 8, 8, 4, 5)


#: the short runs compared bitwise (cut and resumed vs not; co-located vs sampler ranks):
#: the co-located trainers read their rows in place, the sampler ranks send copies
SHORT = ["--epochs", "3", "--batch-size", "64", "--hidden", "16", "--fanouts", "4,3", "--seed", "3",
         "--progress", "off", "--feature-rows", "refs", "--cache-bytes", "100000"]


@pytest.fixture(scope="module")
def uninterrupted(small, tmp_path_factory):
    """One co-located short run, read by the resume and the separate-mode tests:
    ``(CompletedProcess, run_dir)``."""
    from conftest import mpi_launch

    run = tmp_path_factory.mktemp("short") / "a"
    res = _train(mpi_launch, small[1], run, *SHORT)
    assert res.returncode == 0, res.stdout + res.stderr
    return res, run


def _train(mpirun, cfg, run_dir, *extra, timeout=300, gpus=False):
    args = [sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(run_dir), *LAYOUT, *extra]
    return mpirun(4, args, timeout=timeout, gpus=gpus)


def _final(stdout):
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith('{"kind": "final"')]
    assert rows, stdout
    return rows[-1]


def _full_batch_reference(raw, epochs, hidden):
    """Single-process full-batch PyG GraphSAGE and an MLP on the raw graph."""
    import torch.nn.functional as F
    from torch_geometric.nn import SAGEConv

    with h5py.File(raw) as f:
        ei = torch.from_numpy(np.stack([f["edges/src"][:], f["edges/dst"][:]])).long()
        x = torch.from_numpy(f["nodes/data/feat"][:]).float()
        y = torch.from_numpy(f["nodes/data/label"][:]).long()
        tr, te = (torch.from_numpy(f[f"nodes/data/{k}"][:]).bool() for k in ("train_mask", "test_mask"))
    torch.manual_seed(0)
    C = int(y.max()) + 1

    class Sage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = SAGEConv(x.shape[1], hidden), SAGEConv(hidden, C)

        def forward(self, x):
            return self.c2(F.dropout(F.relu(self.c1(x, ei)), 0.5, self.training), ei)

    mlp = torch.nn.Sequential(torch.nn.Linear(x.shape[1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, C))
    acc = {}
    for name, model in (("sage", Sage()), ("mlp", mlp)):
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(epochs):
            model.train()
            loss = F.cross_entropy(model(x)[tr], y[tr])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc[name] = float((model(x).argmax(1)[te] == y[te]).float().mean())
    return acc


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_two_partitions_match_full_batch_pyg(mpirun, tmp_path):
    raw, cfg = _graph(str(tmp_path), 20000, 10, 32, 8, 1)
    res = _train(mpirun, cfg, tmp_path / "run", "--epochs", "4", "--batch-size", "256", "--hidden", "64",
                 "--fanouts", "10,10", "--lr", "0.01")
    assert res.returncode == 0, res.stdout + res.stderr
    ours = _final(res.stdout)["test_acc"]
    ref = _full_batch_reference(raw, 100, 64)
    assert abs(ours - ref["sage"]) <= 0.02, (ours, ref)
    assert ours > ref["mlp"] + 0.1, (ours, ref)
    assert res.stdout.strip().splitlines()[-1] == f"test accuracy: {ours:.4f}"
    # the peak RSS of each role's ranks, gathered at finalize (2 x [server, trainer])
    memory = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith('{"kind": "memory"')]
    assert len(memory) == 1, res.stdout
    roles = memory[0]["roles"]
    assert sorted(roles) == ["server", "trainer"] and all(r["ranks"] == 2 for r in roles.values())
    for r in roles.values():
        assert 10 << 20 < r["peak_rss_bytes_max"] <= r["peak_rss_bytes_sum"] <= 2 * r["peak_rss_bytes_max"], r
    run = tmp_path / "run"
    for name in ("log.jsonl", "metrics.csv", "curve.png", "model.pt"):
        assert (run / name).stat().st_size > 0, name
    epochs = [json.loads(ln) for ln in (run / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in epochs if r["kind"] == "epoch"] == [0, 1, 2, 3]
    assert all(r["wait_s"] >= 0 and r["sampled_edges_per_s"] > 0 for r in epochs if r["kind"] == "epoch")


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_resume_gives_the_same_model_as_an_uninterrupted_run(mpirun, small, uninterrupted, tmp_path):
    _, cfg = small
    common = SHORT
    full, full_dir = uninterrupted
    cut = _train(mpirun, cfg, tmp_path / "b", *common, "--checkpoint-every", "7", "--max-steps", "25")
    assert cut.returncode == 0, cut.stdout + cut.stderr
    assert "stopped at step 25" in cut.stdout
    ckpts = sorted(os.listdir(tmp_path / "b" / "checkpoints"))
    assert "step-25.h5" in ckpts and not any(c.endswith(".tmp") for c in ckpts)
    # resumed at its limit, a run stops at once: no step beyond it
    same = _train(mpirun, cfg, tmp_path / "b", *common, "--max-steps", "25", "--resume")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "stopped at step 25 (max_steps=25)" in same.stdout
    assert sorted(os.listdir(tmp_path / "b" / "checkpoints")) == ckpts
    again = _train(mpirun, cfg, tmp_path / "b", *common, "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resumed from" in again.stdout and "at step 25" in again.stdout
    a = torch.load(full_dir / "model.pt")
    b = torch.load(tmp_path / "b" / "model.pt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert _final(full.stdout)["test_acc"] == _final(again.stdout)["test_acc"]
    # every epoch's log row has the same training loss and accuracy, the epoch cut at
    # step 25 too (its totals before the stop travel in the checkpoint)
    rows = {k: [json.loads(ln) for ln in (d / "log.jsonl").read_text().splitlines()]
            for k, d in (("a", full_dir), ("b", tmp_path / "b"))}
    rows = {k: [r for r in v if r["kind"] == "epoch"] for k, v in rows.items()}
    assert [r["epoch"] for r in rows["b"]] == [0, 1, 2]
    assert 25 % rows["a"][0]["steps"] != 0          # the stop fell inside an epoch
    for x, y in zip(rows["a"], rows["b"]):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5) and y["train_acc"] == x["train_acc"], (x, y)
    # a checkpoint of another model is refused before training
    other = _train(mpirun, cfg, tmp_path / "b", *common, "--hidden", "32", "--resume")     # the last --hidden counts
    assert other.returncode != 0
    assert "checkpoint field 'model'" in other.stderr and "step-" in other.stderr
    # a damaged newest checkpoint (a job killed while writing) is skipped, and said so;
    # a new learning rate applies, and is said
    bad = tmp_path / "b" / "checkpoints" / "step-99999.h5"
    bad.write_bytes(b"not hdf5" * 100)
    back = _train(mpirun, cfg, tmp_path / "b", *common, "--resume", "--max-steps", "25", "--lr", "0.1")
    assert back.returncode == 0, back.stdout + back.stderr
    assert f"skipping {bad}: not a readable checkpoint" in back.stdout
    assert not bad.exists() and (bad.parent / "step-99999.h5.bad").exists()
    assert "resumed from" in back.stdout and "step-25.h5 at step 25" in back.stdout
    assert "learning rate 0.003 (checkpoint) -> 0.1 (this run)" in back.stdout
    logged = [json.loads(ln) for ln in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    before = list(range(25 // rows["a"][0]["steps"]))        # the epochs complete at step 25
    assert [r["epoch"] for r in logged if r["kind"] == "epoch"] == before   # later rows dropped
    # a fresh run in a run_dir with checkpoints is refused (its own would be pruned)
    fresh = _train(mpirun, cfg, tmp_path / "b", *common)
    assert fresh.returncode != 0 and "holds checkpoints of an earlier run" in fresh.stderr, fresh.stderr


@pytest.mark.slow
def test_a_run_dir_in_use_is_refused(tmp_path):
    """Two jobs writing one run_dir interleaved their logs and pruned each other's
    checkpoints; the second now stops.  The lock goes with the process."""
    from hpcgnn.train.common import check_run_dir

    code = ("import sys; from hpcgnn.train.common import check_run_dir; check_run_dir(sys.argv[1]); "
            "print('locked', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "r")], env=clean_mpi_env(), cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(InputError, match="is in use by another job \\(pid .* on "):
            check_run_dir(str(tmp_path / "r"))
    finally:
        holder.communicate("", timeout=60)
    check_run_dir(str(tmp_path / "r"))          # free again once that process has ended


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_sigusr1_checkpoints_and_exits_cleanly(small, tmp_path):
    _, cfg = small
    cmd = ["mpirun", "--oversubscribe", "-n", "4", sys.executable, SCRIPT, "--part-config", cfg, "--run-dir",
           str(tmp_path / "run"), *LAYOUT, "--epochs", "100000", "--batch-size", "64", "--hidden", "16",
           "--fanouts", "4,3"]
    p = subprocess.Popen(cmd, env=clean_mpi_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        for line in p.stdout:
            if line.startswith('{"kind": "epoch"'):
                break
        time.sleep(0.5)
        p.send_signal(signal.SIGUSR1)          # mpirun forwards SIGUSR1 to every rank
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out + err
    assert "stopped at step" in out and "SIGUSR1" in out, out
    assert os.listdir(tmp_path / "run" / "checkpoints")


def test_config_rejects_unknown_keys_and_bad_values(tmp_path):
    with pytest.raises(InputError, match="unknown option '--epoch'.*did you mean '--epochs'"):
        parse_args(["--part-config", "x.json", "--epoch", "3"])
    toml = tmp_path / "c.toml"
    toml.write_text('part_config = "x.json"\nbatchsize = 10\n')
    with pytest.raises(InputError, match="c.toml: unknown setting 'batchsize'.*'batch_size'"):
        parse_args(["--config", str(toml)])
    toml.write_text('part_config = "x.json"\nfanouts = [10, 0]\n')
    with pytest.raises(InputError, match="fanouts"):
        parse_args(["--config", str(toml)])
    toml.write_text('part_config = "x.json"\nepochs = 7\nfanouts = [5, 5]\n')
    cfg = parse_args(["--config", str(toml), "--epochs", "2"])
    assert cfg.epochs == 2 and cfg.fanouts == [5, 5] and cfg.num_layers == 2
    with pytest.raises(InputError, match="part_config is required"):
        parse_args([])
    with pytest.raises(InputError, match="feature_rows must be auto, copy or refs"):
        parse_args(["--part-config", "x.json", "--feature-rows", "views"])
    with pytest.raises(InputError, match="cache_bytes must be >= 0"):
        parse_args(["--part-config", "x.json", "--cache-bytes", "-1"])


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_bad_settings_end_every_rank_with_one_line(mpirun, tmp_path):
    """A bad flag gave each rank a traceback and the job an MPI_ABORT banner (the
    command's own flags: test_a_bad_task_is_named_before_any_launch)."""
    res = mpirun(2, [sys.executable, "-m", "hpcgnn", "train", "--part-config", "x.json", "--epochs", "0"],
                 timeout=60)
    assert res.returncode != 0 and "epochs must be >= 1, got 0" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "MPI_ABORT" not in res.stderr, res.stderr


@pytest.mark.parametrize("argv", [["--task", "nodes"], ["--task"]])
def test_a_bad_task_is_named_before_any_launch(capsys, argv):
    from hpcgnn.cli import train as cli_train

    assert cli_train.main_argv(argv) == 2
    assert "hpcgnn train: error: --task must be 'node' (node classification)" in capsys.readouterr().err


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_bad_input_ends_the_job_before_training(mpirun, small, tmp_path):
    _, cfg = small
    res = _train(mpirun, cfg, tmp_path / "r1", "--label", "labels")
    assert res.returncode != 0 and "has no node feature 'labels' (setting label)" in res.stderr
    assert "epoch" not in res.stdout
    # agreed by every trainer: one line each, the servers released, no traceback or abort
    assert "Traceback" not in res.stderr and "MPI_ABORT" not in res.stderr, res.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = _train(mpirun, cfg, blocker / "run")
    assert res.returncode != 0 and "cannot be created or written" in res.stderr
    res = _train(mpirun, cfg, tmp_path / "r2", "--train-mask", "one_mask")
    assert res.returncode != 0 and "1 training nodes (one_mask) for 2 trainers" in res.stderr
    out_cfg = partition_graph(small[0], str(tmp_path / "out_parts"), 2, edge_dir="out")
    res = _train(mpirun, out_cfg, tmp_path / "r3")
    assert res.returncode != 0 and "edge_dir='out'; training samples in-edges: repartition it with --edge-dir in" \
        in res.stderr


@pytest.mark.timeout(400)
@pytest.mark.slow
def test_unlabelled_nodes_are_neither_trained_nor_scored(mpirun, tmp_path):
    """Label -1 (unlabelled, docs/format-raw.md) crashed the first step on a training
    node and was scored as a wrong answer on a test node; a label column given as a
    mask made every nonzero node a training node; an out-of-range class crashed."""
    raw = os.path.join(str(tmp_path), "g.h5")
    generate_graph(raw, None, 1500, 8, 8, 4, seed=7, name="g")
    with h5py.File(raw, "a") as f:
        lab = f["nodes/data/label"][:]
        tr, te = f["nodes/data/train_mask"][:].astype(bool), f["nodes/data/test_mask"][:].astype(bool)
        lab[np.flatnonzero(tr)[::3]] = -1
        lab[te] = -1
        f["nodes/data/label"][:] = lab
        bad = lab.copy()
        bad[np.flatnonzero(tr)[1]] = 7
        f["nodes/data/bad_label"] = bad
    cfg = partition_graph(raw, os.path.join(str(tmp_path), "parts"), 2)
    common = ["--epochs", "1", "--batch-size", "100", "--hidden", "16", "--fanouts", "4,3", "--progress", "off"]
    res = _train(mpirun, cfg, tmp_path / "r", *common)
    assert res.returncode == 0, res.stdout + res.stderr
    final = _final(res.stdout)
    assert final["test_acc"] is None and 0 < final["val_acc"] <= 1
    assert "test accuracy: n/a (no labelled nodes in the set)" in res.stdout
    res = _train(mpirun, cfg, tmp_path / "r2", *common, "--label", "bad_label")
    assert res.returncode != 0 and "'bad_label' (setting label) holds 7 at node" in res.stderr
    assert "epoch" not in res.stdout
    res = _train(mpirun, cfg, tmp_path / "r3", *common, "--train-mask", "label")
    assert res.returncode != 0 and "'label' (setting train_mask) is not a 0/1 mask" in res.stderr


@pytest.mark.timeout(120)
def test_unlabelled_nodes_leave_the_shares_even(small, tmp_path, monkeypatch):
    """Unlabelled nodes all in one partition: left out after the split, that
    partition's trainer kept a few ids to cycle through; left out before it, the
    shares stay within one id of each other.  (Labels edited in a copy of the
    partition file and its JSON: loaded with HPCGNN_VERIFY=0.)"""
    import shutil

    from hpcgnn.graph import DistGraph, node_split
    from hpcgnn.train.common import labelled_mask

    _, cfg = small
    with open(cfg) as f:
        conf = json.load(f)
    src = os.path.join(os.path.dirname(cfg), conf["h5_file"])
    h5 = tmp_path / "g.h5"
    shutil.copy(src, h5)
    with h5py.File(h5, "r+") as f:
        lab, tr = f["part0/node/label"][:], f["part0/node/train_mask"][:].astype(bool)
        keep = np.flatnonzero(tr)[:10]
        lab[tr] = -1
        lab[keep] = 0
        f["part0/node/label"][:] = lab
    new_cfg = tmp_path / "g.json"
    new_cfg.write_text(json.dumps(dict(conf, h5_file="g.h5")))
    monkeypatch.setenv("HPCGNN_VERIFY", "0")
    g = DistGraph("g_unlabelled", part_config=str(new_cfg))
    book = g.get_partition_book()
    shares = [node_split(labelled_mask(g, "train_mask", "label"), book, rank=r, num_trainers=2).numpy()
              for r in range(2)]
    both = np.concatenate(shares)
    y = np.asarray(g.ndata["label"][both])
    assert (y >= 0).all() and len(np.unique(both)) == len(both)
    total = int((np.asarray(g.ndata["train_mask"][np.arange(g.num_nodes())]).astype(bool)
                 & (np.asarray(g.ndata["label"][np.arange(g.num_nodes())]) >= 0)).sum())
    assert len(both) == total and abs(len(shares[0]) - len(shares[1])) <= 1


@pytest.mark.timeout(400)
@pytest.mark.slow
def test_separate_mode_trains_the_same_model(mpirun, small, uninterrupted, tmp_path):
    """Server-client layout: 2 nodes of [server, sampler] hold the partitions and
    produce the batches, a third node holds both trainers; the same script, no code
    change, and - batches being a function of the settings only - bitwise the same
    model as the co-located layout (so the same accuracy).  The co-located trainers
    read their feature rows in place (``--feature-rows refs``), the sampler ranks
    send copies: the same numbers."""
    _, cfg = small
    here, here_dir = uninterrupted
    assert "features refs" in here.stdout
    args = [sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(tmp_path / "sep"), "--layout",
            "server_nodes=2,servers=1,samplers=1,trainers=2", "--ranks-per-node", "2", *SHORT]
    sep = mpirun(6, args, timeout=300)
    assert sep.returncode == 0, sep.stdout + sep.stderr
    assert "loader mode samplers" in sep.stdout and "features copy" in sep.stdout
    a, b = torch.load(here_dir / "model.pt"), torch.load(tmp_path / "sep" / "model.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    for out in (here.stdout, sep.stdout):         # the cache (on trainers, on sampler ranks) reports its hits
        rates = [json.loads(line)["cache_hit_rate"] for line in out.splitlines() if '"kind": "epoch"' in line]
        assert len(rates) == 3 and all(0 < r <= 1 for r in rates), out
    assert _final(here.stdout)["test_acc"] == _final(sep.stdout)["test_acc"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_training_matches_cpu(mpirun, small, tmp_path):
    """Training on GPUs (batches and the feature cache in GPU memory, NCCL between 2
    trainers when the host has 2 GPUs, else one process) reaches the CPU accuracy."""
    _, cfg = small
    common = ["--epochs", "3", "--batch-size", "64", "--hidden", "32", "--fanouts", "5,5", "--progress", "off",
              "--cache-bytes", str(1 << 20)]
    acc = {}
    for dev in ("cpu", "cuda"):
        if torch.cuda.device_count() >= 2:
            r = _train(mpirun, cfg, tmp_path / dev, "--device", dev, *common, gpus=True)
        else:
            r = subprocess.run([sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(tmp_path / dev),
                                "--layout", "servers=0,samplers=0,trainers=1", "--device", dev, *common],
                               capture_output=True, text=True, timeout=600, env=clean_mpi_env(gpus=True))
        assert r.returncode == 0, r.stdout + r.stderr
        if dev == "cuda" and torch.cuda.device_count() >= 2:
            assert "backend nccl" in r.stdout
        acc[dev] = _final(r.stdout)["test_acc"]
    assert abs(acc["cuda"] - acc["cpu"]) <= 0.03, acc


def test_run_log_draws_the_curve_at_most_every_plot_every_s(tmp_path):
    from hpcgnn.train.runlog import RunLog

    pytest.importorskip("matplotlib")
    log = RunLog(str(tmp_path), True, plot_every_s=3600)
    for e in range(3):
        log.epoch({"epoch": e, "loss": 1.0 / (e + 1), "train_acc": 0.5, "val_acc": None})
    assert (tmp_path / "metrics.csv").exists() and not (tmp_path / "curve.png").exists()
    log.final({"test_acc": 0.5})                     # the end draws it
    assert (tmp_path / "curve.png").stat().st_size > 0
    now = RunLog(str(tmp_path / "x"), False)         # other trainers write nothing
    now.epoch({"epoch": 0, "loss": 1.0})
    now.flush()
    assert not (tmp_path / "x").exists()
    eager = RunLog(str(tmp_path), True, plot_every_s=0)
    eager.epoch({"epoch": 0, "loss": 1.0})
    assert (tmp_path / "curve.png").exists()


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_device_path_on_a_cpu_trains_as_the_host_path(small, tmp_path):
    """``--sample-on device`` on a CPU runs the GPU path's code on CPU tensors (the
    sampler's torch ops, batches staged by the loader's thread, blocks built there):
    it reaches the host path's accuracy, reports the device columns, and
    ``--floor-steps`` adds the model-only floor."""
    _, cfg = small
    common = ["--layout", "servers=0,samplers=0,trainers=1", "--device", "cpu", "--epochs", "3", "--batch-size",
              "64", "--hidden", "32", "--fanouts", "5,5", "--progress", "off"]
    out = {}
    for where in ("host", "device"):
        r = subprocess.run([sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(tmp_path / where),
                            "--sample-on", where, "--floor-steps", "4", *common],
                           capture_output=True, text=True, timeout=280, env=clean_mpi_env())
        assert r.returncode == 0, r.stdout + r.stderr
        out[where] = r.stdout
    acc = {k: _final(v)["test_acc"] for k, v in out.items()}
    assert abs(acc["device"] - acc["host"]) <= 0.03, acc
    assert "sampling on cpu" in out["device"] and "sampling on the host" in out["host"]
    rows = [json.loads(ln) for ln in out["device"].splitlines() if ln.startswith('{"kind": "epoch"')]
    assert len(rows) == 3 and all(r["host_s"] > 0 and r["gpu_busy_s"] is None and r["h2d_bytes"] is None
                                  for r in rows)
    final = _final(out["device"])
    assert final["floor_steps"] == 4 and 0 < final["floor_step_s"] < rows[-1]["epoch_s"]
