"""R-GCN and R-GAT (examples/rgcn.py's ``main``) as whole jobs in the 4-rank pytest run
(:func:`hpcgnn.testing.run_job`; 2 virtual hosts of a server and a trainer, 2
partitions of the generated MAG-like graph):

* R-GAT learns the typed graph, far above the paper features alone;
* a run cut by ``--max-steps`` (inside an epoch, and at an epoch's end) and resumed
  is bitwise the uninterrupted run, each epoch logged once; a checkpoint of another
  partitioning is refused;
* with no labelled test paper the test accuracy is n/a and the validation accuracy
  is still computed;
* 2 partitions and 2 trainers reach the accuracy of one process (a child process of
  rank 0) holding both.

The 6-rank separate mode (a launch) and the one-rank bad feature:
tests/train/test_rgcn.py."""
import json
import os
import shutil

import h5py
import pytest
import torch

from hpcgnn.comm.mpi import MPI
from harness import features_only_accuracy
from hpcgnn.datasets import generate_hetero_graph
from hpcgnn.partition import partition_graph
from hpcgnn.testing import on_rank0, run_job, shared_tmpdir
from hpcgnn.train.rgcn import main

#: whole jobs of 2 hosts x [server, trainer]: the 4-rank pass only, left out by --quick
pytestmark = [pytest.mark.mpi(min_size=4), pytest.mark.slow]
pytest.importorskip("torch_geometric")
SETTINGS = ["--epochs", "5", "--hidden", "32", "--fanouts", "8,4", "--lr", "0.01", "--dropout", "0.3"]
CO_LOCATED = ["--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2"]
#: the short runs compared bitwise: cut and resumed vs not
SHORT = ["--epochs", "3", "--epoch-steps", "6", "--batch-size", "64", "--hidden", "16", "--fanouts", "4,3",
         "--progress", "off", "--eval-every", "0", "--seed", "5", "--cache-bytes", "50000"]


def _make(d):
    raw = os.path.join(d, "mag.h5")
    generate_hetero_graph(raw, None, 20000, 8, 16, 8, seed=3, train_frac=0.3, val_frac=0.1, test_frac=0.6)
    return raw, partition_graph(raw, os.path.join(d, "parts"), 2, balance_ntypes=["train_mask"], comm=MPI.COMM_SELF)


@pytest.fixture(scope="module")
def mag():
    """The graph and its 2 partitions, made by rank 0 alone (as tests/train/test_rgcn.py's)."""
    with shared_tmpdir() as d:
        yield on_rank0(_make, d)


def _final(stdout):
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith('{"kind": "final"')]
    assert rows, stdout
    return rows[-1]


def _job(capfd, cfg, run_dir, *extra):
    res = run_job(main, ["--part-config", cfg, "--run-dir", str(run_dir), *extra], capfd)
    return res


def _one_process(cfg, run_dir):
    """examples/rgcn.py in one process holding both partitions: its final record."""
    import subprocess
    import sys

    from conftest import ROOT, clean_mpi_env

    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "rgcn.py"), "--part-config", cfg, "--run-dir",
                        run_dir, "--layout", "servers=0,samplers=0,trainers=1", "--batch-size", "256", *SETTINGS],
                       capture_output=True, text=True, timeout=500, env=clean_mpi_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 trainer(s)" in r.stdout
    return _final(r.stdout)


@pytest.mark.timeout(600)
def test_rgcn_two_partitions_match_one_process(mag, capfd):
    """2 partitions and 2 trainers reach the accuracy of one process holding both
    partitions (twice the batch), far above the paper features alone."""
    raw, cfg = mag
    with shared_tmpdir() as d:
        dist = _job(capfd, cfg, os.path.join(d, "dist"), *CO_LOCATED, "--batch-size", "128", *SETTINGS)
        assert dist.returncode == 0, dist.stdout + dist.stderr
        assert os.path.exists(os.path.join(d, "dist", "model.pt")) and os.path.exists(os.path.join(d, "dist",
                                                                                                  "metrics.csv"))
        single = on_rank0(_one_process, cfg, os.path.join(d, "one"))
    got, base = _final(dist.stdout), on_rank0(features_only_accuracy, raw)
    assert "2 trainer(s)" in dist.stdout
    assert got["test_acc"] > base + 0.2, (got, base)
    assert abs(got["test_acc"] - single["test_acc"]) <= 0.02, (got, single)
    print(json.dumps({"distributed": got["test_acc"], "single": single["test_acc"], "features_only": base}))


@pytest.mark.timeout(600)
def test_rgat_trains_on_two_partitions(mag, capfd):
    """--model rgat (one GATConv per edge type, MLPerf's R-GAT) learns the typed graph:
    far above the paper features alone."""
    raw, cfg = mag
    with shared_tmpdir() as d:
        res = _job(capfd, cfg, os.path.join(d, "rgat"), *CO_LOCATED, "--model", "rgat", "--batch-size", "128",
                   *SETTINGS)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "model rgat" in res.stdout
    acc, base = _final(res.stdout)["test_acc"], on_rank0(features_only_accuracy, raw)
    assert acc > base + 0.2, (acc, base)
    print(json.dumps({"rgat": acc, "features_only": base}))


@pytest.mark.timeout(600)
def test_rgcn_resume_gives_the_same_model(mag, capfd):
    """Stopped by --max-steps after a checkpoint, resumed: bitwise the model of an
    uninterrupted run (the shared step loop, hpcgnn.train.loop)."""
    raw, cfg = mag
    with shared_tmpdir() as d:
        def train(run, *extra, config=cfg):
            return _job(capfd, config, os.path.join(d, run), *SHORT, *CO_LOCATED, *extra)

        full = train("a")
        assert full.returncode == 0, full.stdout + full.stderr
        a = torch.load(os.path.join(d, "a", "model.pt"))
        # cut inside epoch 1, and at the end of epoch 0 (epoch_steps ends it early)
        for run, cut_at in (("b", 8), ("c", 6)):
            cut = train(run, "--checkpoint-every", "4", "--max-steps", str(cut_at))
            assert cut.returncode == 0 and f"stopped at step {cut_at}" in cut.stdout, cut.stdout + cut.stderr
            again = train(run, "--resume")
            assert again.returncode == 0, again.stdout + again.stderr
            assert "resumed from" in again.stdout and f"at step {cut_at}" in again.stdout
            b = torch.load(os.path.join(d, run, "model.pt"))
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), run
            rows = [json.loads(ln) for ln in open(os.path.join(d, run, "log.jsonl")).read().splitlines()]
            got = [(r["epoch"], r["steps"]) for r in rows if r["kind"] == "epoch"]
            # every epoch once, no step twice (stopped on an epoch's last step, the run still
            # closes that epoch)
            assert got == ([(0, 6), (1, 4), (2, 6)] if cut_at == 8 else [(0, 6), (1, 6), (2, 6)]), got
        # a checkpoint of another partitioning of the graph is refused (its node ids differ)
        other = partition_graph(raw, os.path.join(d, "parts_random"), 2, part_method="random", comm=MPI.COMM_WORLD)
        r = train("b", "--resume", config=other)
        assert r.returncode != 0 and "checkpoint field 'partitions'" in r.stderr, r.stdout + r.stderr


def _no_test_labels(raw, d):
    copy = os.path.join(d, "mag.h5")
    shutil.copy(raw, copy)
    with h5py.File(copy, "r+") as f:
        lab = f["nodes/data/label"][:]
        lab[f["nodes/data/test_mask"][:].astype(bool)] = -1
        f["nodes/data/label"][:] = lab
    return partition_graph(copy, os.path.join(d, "parts"), 2, balance_ntypes=["train_mask"], comm=MPI.COMM_SELF)


@pytest.mark.timeout(600)
def test_rgcn_scores_each_set_it_can(mag, capfd):
    """No labelled test paper: the test accuracy is n/a, and the validation accuracy
    is still computed (one empty set used to switch both off)."""
    raw, _ = mag
    with shared_tmpdir() as d:
        cfg = on_rank0(_no_test_labels, raw, d)
        r = _job(capfd, cfg, os.path.join(d, "run"), *CO_LOCATED, "--epochs", "1", "--epoch-steps", "2",
                 "--batch-size", "64", "--hidden", "16", "--fanouts", "4,3", "--progress", "off")
    assert r.returncode == 0, r.stdout + r.stderr
    final = _final(r.stdout)
    assert final["test_acc"] is None and 0 < final["val_acc"] <= 1
    assert "test accuracy: n/a" in r.stdout and "validation accuracy: 0." in r.stdout
