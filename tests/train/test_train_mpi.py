"""Whole training jobs (examples/node_classification.py's ``main``) inside the 4-rank
pytest run, through :func:`hpcgnn.testing.run_job`: 2 virtual hosts of a server and a
trainer, 2 partitions, as ``mpirun -n 4 python examples/node_classification.py``
would run them, without a launch each.

* accuracy against a single-process full-batch PyG reference and an MLP, with each
  role's peak memory and the run directory's files;
* a run cut at a step and resumed gives bitwise the uninterrupted model; a resume at
  the step limit stops at once; a checkpoint of another model, a damaged newest
  checkpoint and a fresh run over old checkpoints are handled as said;
* bad input (a missing feature, an unwritable run directory, too few training nodes,
  an out-edge partitioning, a label out of range, a label given as a mask) ends the
  job before training with one agreed message; unlabelled nodes are neither trained
  nor scored.

What needs a launch of its own: SIGUSR1 (tests/e2e/test_slurm.py's pipeline) and the
separate-mode layout's 6 ranks (tests/e2e/test_multihost.py); a bad flag's one line is
its 2-rank in-process test."""
import json
import os

import h5py
import numpy as np
import pytest
import torch

from hpcgnn.comm.mpi import world
from hpcgnn.datasets import generate_graph
from hpcgnn.partition import partition_graph
from hpcgnn.testing import on_rank0, run_job, shared_tmpdir
from hpcgnn.train.node_classification import main
from harness.refs import full_batch_accuracy

pytest.importorskip("torch_geometric")
#: whole jobs of 2 hosts x [server, trainer]: the 4-rank pass only, left out by --quick
pytestmark = [pytest.mark.mpi(min_size=4), pytest.mark.slow]
LAYOUT = ["--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2"]
#: the short runs compared bitwise (cut and resumed vs not)
SHORT = ["--epochs", "3", "--batch-size", "64", "--hidden", "16", "--fanouts", "4,3", "--seed", "3",
         "--progress", "off", "--feature-rows", "refs", "--cache-bytes", "100000"]


def _graph(d, n, deg, feat, classes, seed, **edit):
    """A generated graph in ``d`` (every rank writes its share), partitioned in 2;
    ``edit(h5py.File)`` changes the raw file first (rank 0)."""
    comm = world()
    raw = os.path.join(d, "g.h5")
    generate_graph(raw, comm, n, deg, feat, classes, seed=seed, name="g")
    if comm.Get_rank() == 0 and edit:
        with h5py.File(raw, "a") as f:
            edit["edit"](f)
    comm.Barrier()
    return raw, partition_graph(raw, os.path.join(d, "parts"), 2, comm=comm)


def _one_node_mask(f):
    n = f["nodes/data/label"].shape[0]
    one = np.zeros(n, dtype=bool)
    one[n // 2] = True
    f["nodes/data/one_mask"] = one


@pytest.fixture(scope="module")
def small():
    with shared_tmpdir() as d:
        yield _graph(d, 3000, 8, 8, 4, 5, edit=_one_node_mask)


def _train(capfd, cfg, run_dir, *extra):
    return run_job(main, ["--part-config", cfg, "--run-dir", str(run_dir), *LAYOUT, *extra], capfd)


def _final(stdout):
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith('{"kind": "final"')]
    assert rows, stdout
    return rows[-1]


def _rows(run_dir, kind="epoch"):
    return [r for r in map(json.loads, open(os.path.join(run_dir, "log.jsonl")).read().splitlines())
            if r["kind"] == kind]


@pytest.mark.timeout(600)
def test_two_partitions_match_full_batch_pyg(capfd):
    with shared_tmpdir() as d:
        raw, cfg = _graph(d, 20000, 10, 32, 8, 1)
        run = os.path.join(d, "run")
        res = _train(capfd, cfg, run, "--epochs", "4", "--batch-size", "256", "--hidden", "64", "--fanouts",
                     "10,10", "--lr", "0.01")
        assert res.returncode == 0, res.stdout + res.stderr
        ours = _final(res.stdout)["test_acc"]
        # the reference on one rank (the others wait): stock PyG GraphSAGE and an MLP, full batch
        ref = on_rank0(full_batch_accuracy, raw, ("sage", "mlp"), 100, 64, 0.01, False)
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
        for name in ("log.jsonl", "metrics.csv", "curve.png", "model.pt"):
            assert os.path.getsize(os.path.join(run, name)) > 0, name
        epochs = _rows(run)
        assert [r["epoch"] for r in epochs] == [0, 1, 2, 3]
        assert all(r["wait_s"] >= 0 and r["sampled_edges_per_s"] > 0 for r in epochs)
        world().Barrier()


@pytest.mark.timeout(600)
def test_resume_gives_the_same_model_as_an_uninterrupted_run(small, capfd):
    _, cfg = small
    with shared_tmpdir() as d:
        full_dir, b = os.path.join(d, "a"), os.path.join(d, "b")
        full = _train(capfd, cfg, full_dir, *SHORT)
        assert full.returncode == 0, full.stdout + full.stderr
        cut = _train(capfd, cfg, b, *SHORT, "--checkpoint-every", "7", "--max-steps", "25")
        assert cut.returncode == 0, cut.stdout + cut.stderr
        assert "stopped at step 25" in cut.stdout
        ckpts = sorted(os.listdir(os.path.join(b, "checkpoints")))
        assert "step-25.h5" in ckpts and not any(c.endswith(".tmp") for c in ckpts)
        # resumed at its limit, a run stops at once: no step beyond it
        same = _train(capfd, cfg, b, *SHORT, "--max-steps", "25", "--resume")
        assert same.returncode == 0, same.stdout + same.stderr
        assert "stopped at step 25 (max_steps=25)" in same.stdout
        assert sorted(os.listdir(os.path.join(b, "checkpoints"))) == ckpts
        again = _train(capfd, cfg, b, *SHORT, "--resume")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "resumed from" in again.stdout and "at step 25" in again.stdout
        x, y = torch.load(os.path.join(full_dir, "model.pt")), torch.load(os.path.join(b, "model.pt"))
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k
        assert _final(full.stdout)["test_acc"] == _final(again.stdout)["test_acc"]
        # every epoch's log row has the same training loss and accuracy, the epoch cut at
        # step 25 too (its totals before the stop travel in the checkpoint)
        rows = {"a": _rows(full_dir), "b": _rows(b)}
        assert [r["epoch"] for r in rows["b"]] == [0, 1, 2]
        assert 25 % rows["a"][0]["steps"] != 0          # the stop fell inside an epoch
        for r, s in zip(rows["a"], rows["b"]):
            assert s["loss"] == pytest.approx(r["loss"], rel=1e-5) and s["train_acc"] == r["train_acc"], (r, s)
        # a checkpoint of another model is refused before training (the last --hidden counts)
        other = _train(capfd, cfg, b, *SHORT, "--hidden", "32", "--resume")
        assert other.returncode != 0
        assert "checkpoint field 'model'" in other.stderr and "step-" in other.stderr
        # a damaged newest checkpoint (a job killed while writing) is skipped, and said so;
        # a new learning rate applies, and is said
        bad = os.path.join(b, "checkpoints", "step-99999.h5")
        if world().Get_rank() == 0:
            with open(bad, "wb") as f:
                f.write(b"not hdf5" * 100)
        world().Barrier()
        back = _train(capfd, cfg, b, *SHORT, "--resume", "--max-steps", "25", "--lr", "0.1")
        assert back.returncode == 0, back.stdout + back.stderr
        assert f"skipping {bad}: not a readable checkpoint" in back.stdout
        assert not os.path.exists(bad) and os.path.exists(bad + ".bad")
        assert "resumed from" in back.stdout and "step-25.h5 at step 25" in back.stdout
        assert "learning rate 0.003 (checkpoint) -> 0.1 (this run)" in back.stdout
        before = list(range(25 // rows["a"][0]["steps"]))        # the epochs complete at step 25
        assert [r["epoch"] for r in _rows(b)] == before           # later rows dropped
        # a fresh run in a run_dir with checkpoints is refused (its own would be pruned)
        fresh = _train(capfd, cfg, b, *SHORT)
        assert fresh.returncode != 0 and "holds checkpoints of an earlier run" in fresh.stderr, fresh.stderr


@pytest.mark.timeout(300)
def test_bad_input_ends_the_job_before_training(small, capfd):
    raw, cfg = small
    with shared_tmpdir() as d:
        res = _train(capfd, cfg, os.path.join(d, "r1"), "--label", "labels")
        assert res.returncode != 0 and "has no node feature 'labels' (setting label)" in res.stderr
        assert "epoch" not in res.stdout
        # agreed by every trainer: one line each (the job's exit path: test_train.py's bad flag)
        assert res.stderr.count("has no node feature 'labels'") == 2, res.stderr
        blocker = os.path.join(d, "file")
        if world().Get_rank() == 0:
            open(blocker, "w").write("x")
        world().Barrier()
        res = _train(capfd, cfg, os.path.join(blocker, "run"))
        assert res.returncode != 0 and "cannot be created or written" in res.stderr
        res = _train(capfd, cfg, os.path.join(d, "r2"), "--train-mask", "one_mask")
        assert res.returncode != 0 and "1 training nodes (one_mask) for 2 trainers" in res.stderr
        out_cfg = partition_graph(raw, os.path.join(d, "out_parts"), 2, edge_dir="out", comm=world())
        res = _train(capfd, out_cfg, os.path.join(d, "r3"))
        assert res.returncode != 0
        assert "edge_dir='out'; training samples in-edges: repartition it with --edge-dir in" in res.stderr


def _unlabel(f):
    lab = f["nodes/data/label"][:]
    tr, te = f["nodes/data/train_mask"][:].astype(bool), f["nodes/data/test_mask"][:].astype(bool)
    lab[np.flatnonzero(tr)[::3]] = -1
    lab[te] = -1
    f["nodes/data/label"][:] = lab
    bad = lab.copy()
    bad[np.flatnonzero(tr)[1]] = 7
    f["nodes/data/bad_label"] = bad


@pytest.mark.timeout(400)
def test_unlabelled_nodes_are_neither_trained_nor_scored(capfd):
    """Label -1 (unlabelled, docs/format-raw.md) crashed the first step on a training
    node and was scored as a wrong answer on a test node; a label column given as a
    mask made every nonzero node a training node; an out-of-range class crashed."""
    with shared_tmpdir() as d:
        _, cfg = _graph(d, 1500, 8, 8, 4, 7, edit=_unlabel)
        common = ["--epochs", "1", "--batch-size", "100", "--hidden", "16", "--fanouts", "4,3", "--progress", "off"]
        res = _train(capfd, cfg, os.path.join(d, "r"), *common)
        assert res.returncode == 0, res.stdout + res.stderr
        final = _final(res.stdout)
        assert final["test_acc"] is None and 0 < final["val_acc"] <= 1
        assert "test accuracy: n/a (no labelled nodes in the set)" in res.stdout
        res = _train(capfd, cfg, os.path.join(d, "r2"), *common, "--label", "bad_label")
        assert res.returncode != 0 and "'bad_label' (setting label) holds 7 at node" in res.stderr
        assert "epoch" not in res.stdout
        res = _train(capfd, cfg, os.path.join(d, "r3"), *common, "--train-mask", "label")
        assert res.returncode != 0 and "'label' (setting train_mask) is not a 0/1 mask" in res.stderr
