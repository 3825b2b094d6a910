"""Training (examples/node_classification.py) in this process: the settings, the run
directory's lock, the curve and the one-rank device path.  SIGUSR1 (mpirun forwards
it: the run checkpoints and exits cleanly): tests/e2e/test_slurm.py's pipeline, whose
sbatch shell passes it to mpirun.  Accuracy, resume and bad input: whole jobs in the
4-rank pass (tests/train/test_train_mpi.py).  The separate-mode layout trains the co-located
run's model bitwise: tests/e2e/test_multihost.py (across real hosts) and
tests/train/test_rgcn.py (virtual nodes)."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from conftest import ROOT, clean_mpi_env
from hpcgnn.datasets import generate_graph
from hpcgnn.errors import InputError
from hpcgnn.partition import partition_graph
from hpcgnn.testing import run_job
from hpcgnn.train.config import parse_args
from hpcgnn.train.node_classification import main

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


def _train(mpirun, cfg, run_dir, *extra, timeout=300, gpus=False):
    args = [sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(run_dir), *LAYOUT, *extra]
    return mpirun(4, args, timeout=timeout, gpus=gpus)


def _final(stdout):
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith('{"kind": "final"')]
    assert rows, stdout
    return rows[-1]


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


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_bad_settings_end_every_rank_with_one_line():
    """A bad flag gave each rank a traceback and the job an MPI_ABORT banner: ``hpcgnn
    train`` on every rank of the run (in this process: an abort would end the run, an
    exception would escape run_job) ends with a status and one line (the command's own
    flags: test_a_bad_task_is_named_before_any_launch)."""
    from hpcgnn.cli.main import main
    from hpcgnn.testing import run_job

    res = run_job(main, ["train", "--part-config", "x.json", "--epochs", "0"])
    assert res.returncode != 0 and res.rank_returncode != 0
    assert res.stderr.count("epochs must be >= 1, got 0") >= 1 and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize("argv", [["--task", "nodes"], ["--task"]])
def test_a_bad_task_is_named_before_any_launch(capsys, argv):
    from hpcgnn.cli import train as cli_train

    assert cli_train.main_argv(argv) == 2
    assert "hpcgnn train: error: --task must be 'node' (node classification)" in capsys.readouterr().err


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
def test_device_path_on_a_cpu_trains_as_the_host_path(small, tmp_path, capfd):
    """``--sample-on device`` on a CPU runs the GPU path's code on CPU tensors (the
    sampler's torch ops, batches staged by the loader's thread, blocks built there):
    it reaches the host path's accuracy, reports the device columns, and
    ``--floor-steps`` adds the model-only floor.  (One-rank jobs, in this process.)"""
    _, cfg = small
    common = ["--layout", "servers=0,samplers=0,trainers=1", "--device", "cpu", "--epochs", "3", "--batch-size",
              "64", "--hidden", "32", "--fanouts", "5,5", "--progress", "off"]
    out = {}
    for where in ("host", "device"):
        r = run_job(main, ["--part-config", cfg, "--run-dir", str(tmp_path / where), "--sample-on", where,
                           "--floor-steps", "4", *common], capfd)
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
