"""The model-agnostic runtime (``hpcgnn.train.Trainer``) with a user's own model (a
GAT with dropout, written here, not in the package): a run stopped by ``max_steps``
and resumed from its checkpoint ends with bitwise the model of an uninterrupted run.

The user's script is :func:`main` here; the test runs it as whole jobs in the 4-rank
pytest run (:func:`hpcgnn.testing.run_job`): 2 virtual hosts of a server and a
trainer each.  It also runs as ``mpirun -n 4 python tests/train/test_trainer.py
--part-config ...``."""
import argparse
import json
import os
import pathlib
import sys

import pytest

from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph
from hpcgnn.partition import partition_graph
from hpcgnn.testing import on_rank0, run_job, shared_tmpdir



def _user_model(in_dim, hidden, out_dim, heads=2, dropout=0.5):
    import torch.nn.functional as F
    from torch import nn
    from torch_geometric.nn import GATConv

    class UserGAT(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([GATConv(in_dim, hidden // heads, heads=heads), GATConv(hidden, out_dim)])

        def forward(self, x, adjs):
            for i, adj in enumerate(adjs):
                x = self.convs[i]((x, x[: adj.num_dst]), adj.edge_index)
                if i == 0:
                    x = F.dropout(F.elu(x), dropout, self.training)     # RNG state: must resume too
            return x

    return UserGAT()


def main(argv=None):
    import torch
    import torch.nn.functional as F

    import hpcgnn
    from hpcgnn.graph import DistGraph, node_split
    from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler
    from hpcgnn.train import Trainer

    ap = argparse.ArgumentParser()
    ap.add_argument("--part-config", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    a = ap.parse_args(argv)
    os.environ.setdefault("HPCGNN_RANKS_PER_NODE", "2")
    hpcgnn.initialize(layout="servers=1,samplers=0,trainers=rest", part_config=a.part_config)
    with open(a.part_config) as fh:
        conf = json.load(fh)
    g = DistGraph(conf["graph_name"])
    train, test = (node_split(g.ndata[m]) for m in ("train_mask", "test_mask"))
    torch.manual_seed(0)
    model = _user_model(g.ndata["feat"].shape[1], 16, conf["num_classes"])
    trainer = Trainer(model, lr=0.01, run_dir=a.run_dir, resume=a.resume, graph=g, progress="off",
                      max_steps=a.max_steps, checkpoint_every=a.checkpoint_every)
    sampler = NeighborSampler([4, 3])
    loader = DistNodeDataLoader(g, train, sampler, batch_size=64, shuffle=True, labels="seeds", seed=3)
    test_loader = DistNodeDataLoader(g, test, sampler, batch_size=256, labels="seeds", seed=4)

    def loss_fn(m, b):
        out = m(b.x, b.adjs)
        y = b.y[: b.batch_size].long()
        return F.cross_entropy(out, y), (out.argmax(1) == y).sum(), b.batch_size

    def predict(m, b):
        return m(b.x, b.adjs).argmax(1), b.y[: b.batch_size].long()

    fit = trainer.fit(loader, loss_fn, epochs=a.epochs)
    if not fit.stopped:
        trainer.finish({"test_acc": trainer.accuracy(test_loader, predict)})
    trainer.close()


# -- the test ------------------------------------------------------------------------
def _small(d):
    """Rank 0: a 3000-node graph in 2 partitions (one rank's ParMETIS)."""
    raw = os.path.join(d, "g.h5")
    generate_graph(raw, None, 3000, 8, 8, 4, seed=5, name="g")
    return partition_graph(raw, os.path.join(d, "parts"), 2, comm=MPI.COMM_SELF)


def _run(cfg, run_dir, *extra):
    return run_job(main, ["--part-config", cfg, "--run-dir", str(run_dir), *extra])


def _final(stdout):
    rows = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith('{"kind": "final"')]
    assert rows, stdout
    return rows[-1]


@pytest.mark.mpi(min_size=4)
@pytest.mark.timeout(900)
@pytest.mark.slow
def test_users_model_resumes_bitwise(monkeypatch):
    pytest.importorskip("torch_geometric")
    import torch

    monkeypatch.setenv("HPCGNN_RANKS_PER_NODE", "2")          # 2 virtual hosts (the script's default)
    with shared_tmpdir() as d:
        _users_model_resumes_bitwise(torch, on_rank0(_small, d), pathlib.Path(d))


def _users_model_resumes_bitwise(torch, small, tmp_path):
    full = _run(small, tmp_path / "a")
    assert full.returncode == 0, full.stdout + full.stderr
    steps = [json.loads(ln)["steps"] for ln in full.stdout.splitlines() if ln.startswith('{"kind": "epoch"')]
    assert len(steps) == 3 and 25 % steps[0] != 0, steps           # the stop falls inside an epoch
    cut = _run(small, tmp_path / "b", "--max-steps", "25", "--checkpoint-every", "7")
    assert cut.returncode == 0, cut.stdout + cut.stderr
    assert "stopped at step 25" in cut.stdout, cut.stdout
    assert not (tmp_path / "b" / "model.pt").exists()
    ckpts = sorted(os.listdir(tmp_path / "b" / "checkpoints"))
    assert "step-25.h5" in ckpts and not any(c.endswith(".tmp") for c in ckpts), ckpts
    again = _run(small, tmp_path / "b", "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resumed from" in again.stdout and "at step 25" in again.stdout, again.stdout
    a, b = torch.load(tmp_path / "a" / "model.pt"), torch.load(tmp_path / "b" / "model.pt")
    assert a.keys() == b.keys() and any(k.startswith("convs.") for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert _final(full.stdout)["steps"] == _final(again.stdout)["steps"] == 3 * steps[0]
    assert _final(full.stdout)["test_acc"] == _final(again.stdout)["test_acc"]
    # every epoch's row has the same training loss and accuracy, the cut one too
    rows = {k: [json.loads(ln) for ln in (tmp_path / k / "log.jsonl").read_text().splitlines()] for k in "ab"}
    rows = {k: [r for r in v if r["kind"] == "epoch"] for k, v in rows.items()}
    assert [r["epoch"] for r in rows["b"]] == [0, 1, 2]
    for x, y in zip(rows["a"], rows["b"]):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-6) and y["train_acc"] == x["train_acc"], (x, y)


if __name__ == "__main__":
    sys.exit(main())


def test_metrics_csv_has_every_rows_columns(tmp_path):
    """A column that only some epochs have (validation every other epoch) is in
    metrics.csv, empty where an epoch lacks it."""
    import csv

    from hpcgnn.train.runlog import RunLog

    log = RunLog(str(tmp_path), True, plot_every_s=1e9)
    log.epoch({"epoch": 0, "loss": 1.0})
    log.epoch({"epoch": 1, "loss": 0.5, "val_acc": 0.7})
    log.epoch({"epoch": 2, "loss": 0.4})
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["epoch", "loss", "val_acc"]
    assert [r["val_acc"] for r in rows] == ["", "0.7", ""]
