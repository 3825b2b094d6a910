"""The model zoo of ``hpcgnn train --model``: whole jobs in the 4-rank pytest run
(:func:`hpcgnn.testing.run_job`; 2 partitions, 2 virtual hosts of a server and a
trainer each, as ``mpirun -n 4 hpcgnn train`` runs them):

* each zoo model (sage, gcn, gat, gin) reaches the test accuracy of the same model
  kind trained single-process full-batch with stock PyG on the raw graph (within 2
  points, issue 28), far above a features-only MLP;
* a user's own ``nn.Module`` (``--model user_models:Class``, tests/user_models.py),
  ``forward(x, adjs)`` or ``forward(x, edge_index)``, trains and reports accuracy;
* a model that does not fit (a forward that fails on a batch, an output width other
  than the class count) ends the job: one line per trainer, exit 1, no traceback,
  nothing written in the run directory (a spec that does not resolve at all:
  tests/train/test_model_specs.py; the exit of a launch on an agreed error:
  tests/train/test_train.py's bad flag)."""
import json
import os

import pytest
import torch

from hpcgnn.cli.train import main_argv
from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph
from hpcgnn.partition import partition_graph
from hpcgnn.testing import on_rank0, run_job, shared_tmpdir
from harness.refs import full_batch_accuracy

#: whole jobs of 2 hosts x [server, trainer]: the 4-rank pass only, left out by --quick
pytestmark = [pytest.mark.mpi(min_size=4), pytest.mark.slow]

pytest.importorskip("torch_geometric")
LAYOUT = ["--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2"]
COMMON = ["--batch-size", "256", "--hidden", "64", "--fanouts", "10,10", "--lr", "0.01", "--progress", "off"]
EPOCHS = 8                     # of hpcgnn train (24 steps each per trainer)
REF_EPOCHS = 150               # full-batch, the test accuracy at the best validation accuracy
#: hpcgnn train's options beyond COMMON: GIN at lr 0.003 (at 0.01 its 192 steps end
#: 0.5-3 points apart from one partitioning of the graph to another)
EXTRA = {"gin": ["--lr", "0.003"]}


@pytest.fixture(scope="module")
def big():
    """The graph and its 2 partitions, made by rank 0 alone (ParMETIS on one rank)."""
    def make(d):
        raw = os.path.join(d, "g.h5")
        generate_graph(raw, None, 20000, 10, 32, 8, seed=1, name="g")
        return raw, partition_graph(raw, os.path.join(d, "parts"), 2, comm=MPI.COMM_SELF)

    with shared_tmpdir() as d:
        yield on_rank0(make, d)


@pytest.fixture
def run(big):
    with shared_tmpdir() as d:
        yield os.path.join(d, "run")


def _train(capfd, cfg, run_dir, *extra):
    """``hpcgnn train`` as a job of the 4 ranks (tests/ on sys.path: user_models)."""
    return run_job(main_argv, ["--part-config", cfg, "--run-dir", str(run_dir), *LAYOUT, *extra], capfd)


def _reference(raw, kinds):
    """The full-batch references, on rank 0 (the others wait)."""
    return on_rank0(full_batch_accuracy, raw, kinds, REF_EPOCHS)


def _final(stdout):
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith('{"kind": "final"')]
    assert rows, stdout
    return rows[-1]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("model", ["sage", "gcn", "gat", "gin"])
def test_zoo_model_matches_full_batch_pyg(capfd, big, run, model):
    raw, cfg = big
    res = _train(capfd, cfg, run, "--model", model, "--epochs", str(EPOCHS), *COMMON,
                 *EXTRA.get(model, []))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"model {model}" in res.stdout
    ours = _final(res.stdout)["test_acc"]
    refs = _reference(raw, (model, "mlp"))
    ref, mlp = refs[model], refs["mlp"]
    print(f"{model}: hpcgnn {ours:.4f}, full-batch PyG {ref:.4f}, MLP {mlp:.4f}")
    assert os.path.getsize(os.path.join(run, "model.pt")) > 0
    assert abs(ours - ref) <= 0.02, (model, ours, ref, mlp)
    assert ours > mlp + 0.05, (model, ours, ref, mlp)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cls", ["BlockSAGE", "EdgeIndexSAGE"])
def test_users_own_model_trains(capfd, big, run, cls):
    _, cfg = big
    res = _train(capfd, cfg, run, "--model", f"user_models:{cls}", "--epochs", "2", *COMMON)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"model user_models:{cls}" in res.stdout
    final = _final(res.stdout)
    assert 0.6 < final["test_acc"] <= 1 and 0.6 < final["val_acc"] <= 1, final   # chance: 1/8
    assert res.stdout.strip().splitlines()[-1] == f"test accuracy: {final['test_acc']:.4f}"
    epochs = [json.loads(ln) for ln in open(os.path.join(run, "log.jsonl")).read().splitlines()]
    assert [r["epoch"] for r in epochs if r["kind"] == "epoch"] == [0, 1]
    state = torch.load(os.path.join(run, "model.pt"))
    assert set(state) == {k for k in state if k.startswith("convs.")} and state    # the user's parameters


@pytest.mark.timeout(600)
@pytest.mark.parametrize("spec, words", [           # a spec that does not resolve: test_model_specs.py
    ("user_models:BadForward", "its forward fails on a batch"),
    ("user_models:WrongOutput", "its output has shape (256, 9); node classification needs one row of 8 class "
                                "scores per seed, (256, 8)"),
])
def test_bad_model_ends_the_job_with_one_line_per_trainer(capfd, big, run, spec, words):
    _, cfg = big
    res = _train(capfd, cfg, run, "--model", spec, "--epochs", "1", *COMMON)
    assert res.returncode != 0, res.stdout
    lines = [ln for ln in res.stderr.splitlines() if words in ln]
    assert len(lines) == 2, res.stderr                      # one per trainer
    assert all(ln.startswith(f"hpcgnn train: --model {spec!r}: ") for ln in lines), lines
    assert "Traceback" not in res.stderr, res.stderr
    assert '"kind": "epoch"' not in res.stdout and '"kind": "final"' not in res.stdout
    written = sorted(p for p in os.listdir(run) if not p.startswith(".")) if os.path.exists(run) else []
    assert written == [], written                           # no checkpoints, log, curve or model.pt
