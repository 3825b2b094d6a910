"""R-GCN on the generated MAG-like graph (examples/rgcn.py): 2 partitions and 2
trainers under mpirun against one process holding both partitions, and against a
model that sees paper features only."""
import json
import os
import sys

import h5py
import numpy as np
import pytest

from conftest import ROOT, clean_mpi_env
from hpcgnn.datasets import generate_hetero_graph
from hpcgnn.partition import partition_graph

#: every test here starts a job of its own (scripts/test.sh --quick leaves them out)
pytestmark = pytest.mark.slow

pytest.importorskip("torch_geometric")
SCRIPT = os.path.join(ROOT, "examples", "rgcn.py")
SETTINGS = ["--epochs", "5", "--hidden", "32", "--fanouts", "8,4", "--lr", "0.01", "--dropout", "0.3"]


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("mag"))
    raw = os.path.join(d, "mag.h5")
    generate_hetero_graph(raw, None, 20000, 8, 16, 8, seed=3, train_frac=0.3, val_frac=0.1, test_frac=0.6)
    return raw, partition_graph(raw, os.path.join(d, "parts"), 2, balance_ntypes=["train_mask"])


def _final(stdout):
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith('{"kind": "final"')]
    assert rows, stdout
    return rows[-1]


def _features_only_accuracy(raw):
    """Least squares on paper features alone (what the graph must beat)."""
    with h5py.File(raw) as f:
        x, y = f["nodes/data/feat"][:], f["nodes/data/label"][:]
        tr, te = f["nodes/data/train_mask"][:], f["nodes/data/test_mask"][:]
    C = int(y.max()) + 1
    X = np.hstack([x, np.ones((len(x), 1), np.float32)])
    W, *_ = np.linalg.lstsq(X[tr], np.eye(C)[y[tr]], rcond=None)
    return float(((X[te] @ W).argmax(1) == y[te]).mean())


@pytest.mark.timeout(600)
def test_rgcn_two_partitions_match_one_process(mpirun, mag, tmp_path):
    raw, cfg = mag
    dist = mpirun(4, [sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(tmp_path / "dist"),
                      "--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2",
                      "--batch-size", "128", *SETTINGS], timeout=500)
    assert dist.returncode == 0, dist.stdout + dist.stderr
    import subprocess

    single = subprocess.run([sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(tmp_path / "one"),
                             "--layout", "servers=0,samplers=0,trainers=1", "--batch-size", "256", *SETTINGS],
                            capture_output=True, text=True, timeout=500, env=clean_mpi_env())
    assert single.returncode == 0, single.stdout + single.stderr
    d, s = _final(dist.stdout), _final(single.stdout)
    base = _features_only_accuracy(raw)
    assert "2 trainer(s)" in dist.stdout and "1 trainer(s)" in single.stdout
    assert d["test_acc"] > base + 0.2, (d, base)
    assert abs(d["test_acc"] - s["test_acc"]) <= 0.02, (d, s)
    assert os.path.exists(tmp_path / "dist" / "model.pt") and os.path.exists(tmp_path / "dist" / "metrics.csv")
    print(json.dumps({"distributed": d["test_acc"], "single": s["test_acc"], "features_only": base}))


@pytest.mark.timeout(600)
def test_rgat_trains_on_two_partitions(mpirun, mag, tmp_path):
    """--model rgat (one GATConv per edge type, MLPerf's R-GAT) learns the typed graph:
    far above the paper features alone."""
    raw, cfg = mag
    res = mpirun(4, [sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(tmp_path / "rgat"),
                     "--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2", "--model", "rgat",
                     "--batch-size", "128", *SETTINGS], timeout=500)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "model rgat" in res.stdout
    acc, base = _final(res.stdout)["test_acc"], _features_only_accuracy(raw)
    assert acc > base + 0.2, (acc, base)
    print(json.dumps({"rgat": acc, "features_only": base}))


#: the short runs compared bitwise: co-located vs sampler ranks, cut and resumed vs not
SHORT = ["--epochs", "3", "--epoch-steps", "6", "--batch-size", "64", "--hidden", "16", "--fanouts", "4,3",
         "--progress", "off", "--eval-every", "0", "--seed", "5", "--cache-bytes", "50000"]
CO_LOCATED = ["--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2"]


@pytest.fixture(scope="module")
def uninterrupted(mag, tmp_path_factory):
    """One co-located short run, read by the separate-mode and the resume tests:
    ``(stdout, run_dir)``."""
    from conftest import mpi_launch

    run = tmp_path_factory.mktemp("rgcn_co") / "run"
    r = mpi_launch(4, [sys.executable, SCRIPT, "--part-config", mag[1], "--run-dir", str(run), *SHORT,
                       *CO_LOCATED], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout, run


@pytest.mark.timeout(600)
def test_rgcn_separate_mode_trains_the_same_model(mpirun, mag, uninterrupted, tmp_path):
    """Typed batches made on sampler ranks of server-only nodes (frames carry the
    node and edge types) train bitwise the same model as the co-located layout."""
    import torch

    _, cfg = mag
    co, co_dir = uninterrupted
    sep = mpirun(6, [sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(tmp_path / "sep"), "--layout",
                     "server_nodes=2,servers=1,samplers=1,trainers=2", "--ranks-per-node", "2", *SHORT],
                 timeout=300)
    assert sep.returncode == 0, sep.stdout + sep.stderr
    assert "loader mode samplers" in sep.stdout
    a, b = torch.load(co_dir / "model.pt"), torch.load(tmp_path / "sep" / "model.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)
    for out in (co, sep.stdout):           # a cache of paper rows only, and it serves them
        rates = [json.loads(line)["cache_hit_rate"] for line in out.splitlines() if '"kind": "epoch"' in line]
        assert len(rates) == 3 and all(0 < r <= 1 for r in rates), out


@pytest.mark.timeout(600)
def test_rgcn_resume_gives_the_same_model(mpirun, mag, uninterrupted, tmp_path):
    """Stopped by --max-steps after a checkpoint, resumed: bitwise the model of an
    uninterrupted run (the shared step loop, hpcgnn.train.loop)."""
    import torch

    _, cfg = mag
    common = [*SHORT, *CO_LOCATED]

    def train(run, *extra):
        r = mpirun(4, [sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(tmp_path / run), *common,
                       *extra], timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return r

    a = torch.load(uninterrupted[1] / "model.pt")
    # cut inside epoch 1, and at the end of epoch 0 (epoch_steps ends it early)
    for run, cut_at in (("b", 8), ("c", 6)):
        cut = train(run, "--checkpoint-every", "4", "--max-steps", str(cut_at))
        assert f"stopped at step {cut_at}" in cut.stdout
        again = train(run, "--resume")
        assert "resumed from" in again.stdout and f"at step {cut_at}" in again.stdout
        b = torch.load(tmp_path / run / "model.pt")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), run
        rows = [json.loads(ln) for ln in (tmp_path / run / "log.jsonl").read_text().splitlines()]
        got = [(r["epoch"], r["steps"]) for r in rows if r["kind"] == "epoch"]
        # every epoch once, no step twice (stopped on an epoch's last step, the run still
        # closes that epoch)
        assert got == ([(0, 6), (1, 4), (2, 6)] if cut_at == 8 else [(0, 6), (1, 6), (2, 6)]), got
    # a checkpoint of another partitioning of the graph is refused (its node ids differ)
    raw, _ = mag
    other = partition_graph(raw, str(tmp_path / "parts_random"), 2, part_method="random")
    r = mpirun(4, [sys.executable, SCRIPT, "--part-config", other, "--run-dir", str(tmp_path / "b"), *common,
                   "--resume"], timeout=300)
    assert r.returncode != 0 and "checkpoint field 'partitions'" in r.stderr, r.stdout + r.stderr


@pytest.mark.timeout(600)
def test_rgcn_scores_each_set_it_can(mpirun, mag, tmp_path):
    """No labelled test paper: the test accuracy is n/a, and the validation accuracy
    is still computed (one empty set used to switch both off)."""
    import shutil

    raw, _ = mag
    copy = str(tmp_path / "mag.h5")
    shutil.copy(raw, copy)
    with h5py.File(copy, "r+") as f:
        lab = f["nodes/data/label"][:]
        lab[f["nodes/data/test_mask"][:].astype(bool)] = -1
        f["nodes/data/label"][:] = lab
    cfg = partition_graph(copy, str(tmp_path / "parts"), 2, balance_ntypes=["train_mask"])
    r = mpirun(4, [sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(tmp_path / "run"),
                   "--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2", "--epochs", "1",
                   "--epoch-steps", "2", "--batch-size", "64", "--hidden", "16", "--fanouts", "4,3",
                   "--progress", "off"], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    final = _final(r.stdout)
    assert final["test_acc"] is None and 0 < final["val_acc"] <= 1
    assert "test accuracy: n/a" in r.stdout and "validation accuracy: 0." in r.stdout


@pytest.mark.timeout(300)
def test_rgcn_names_a_feature_the_graph_lacks(mag, tmp_path):
    """--feat that is not node data: an error, not a model trained without features
    (only the default name, missing, or --feat '' mean no features)."""
    import subprocess

    _, cfg = mag
    res = subprocess.run([sys.executable, SCRIPT, "--part-config", cfg, "--run-dir", str(tmp_path / "x"),
                          "--layout", "servers=0,samplers=0,trainers=1", "--feat", "nosuch", *SETTINGS],
                         capture_output=True, text=True, timeout=250, env=clean_mpi_env())
    assert res.returncode != 0
    assert "no node data 'nosuch' (setting feat)" in res.stderr, res.stderr[-2000:]
