"""R-GCN on the generated MAG-like graph (examples/rgcn.py) where launches are the
point: the 6-rank separate mode against the co-located run, bitwise; a bad --feat on
one rank (in this process).  2 partitions against one process, R-GAT, resume and the
sets scored: whole jobs in the 4-rank pass (test_rgcn_mpi.py)."""
import json
import os
import sys

import pytest

from conftest import ROOT
from hpcgnn.datasets import generate_hetero_graph
from hpcgnn.partition import partition_graph
from hpcgnn.testing import run_job
from hpcgnn.train.rgcn import main

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


#: the short runs compared bitwise: co-located vs sampler ranks
SHORT = ["--epochs", "3", "--epoch-steps", "6", "--batch-size", "64", "--hidden", "16", "--fanouts", "4,3",
         "--progress", "off", "--eval-every", "0", "--seed", "5", "--cache-bytes", "50000"]
CO_LOCATED = ["--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2"]


@pytest.fixture(scope="module")
def uninterrupted(mag, tmp_path_factory):
    """One co-located short run, read by the separate-mode test:
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


@pytest.mark.timeout(300)
def test_rgcn_names_a_feature_the_graph_lacks(mag, tmp_path, capfd):
    """--feat that is not node data: an error, not a model trained without features
    (only the default name, missing, or --feat '' mean no features).  One rank, in
    this process."""
    _, cfg = mag
    res = run_job(main, ["--part-config", cfg, "--run-dir", str(tmp_path / "x"), "--layout",
                         "servers=0,samplers=0,trainers=1", "--feat", "nosuch", *SETTINGS], capfd)
    assert res.returncode != 0
    assert "no node data 'nosuch' (setting feat)" in res.stderr, res.stderr[-2000:]
