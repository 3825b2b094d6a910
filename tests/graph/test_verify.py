"""Verify before use: a partitioned graph whose files changed after partitioning is
refused where it is loaded (checksums of every dataset, the JSON's digest, the
counts), ``hpcgnn verify`` lists every problem, ``HPCGNN_VERIFY=0`` loads it anyway;
a NaN loss stops every trainer without a checkpoint of the bad state (``hpcgnn
train`` on corrupt or NaN features: whole jobs in tests/graph/test_verify_mpi.py).

This file is also the training script of the NaN test (an uncaught error in a
user's script: the job is aborted, so a launch of its own), run under a child
mpirun (``python tests/graph/test_verify.py --part-config ... --run-dir ...``): 4 ranks, 2
virtual nodes of a server and a trainer each."""
import argparse
import json
import os
import shutil
import sys

import h5py
import numpy as np
import pytest

from harness import copy_parts, corrupt, h5_of, md5
from hpcgnn.errors import InputError

LAYOUT = ["--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2"]


def main(argv=None):
    """The NaN-loss script: a user's model and loss through Trainer.fit; trainer
    ``--nan-trainer``'s loss is NaN at step ``--nan-at`` (it first notes the md5 of
    the checkpoint written before it)."""
    import torch
    import torch.nn.functional as F

    import hpcgnn
    from hpcgnn.graph import DistGraph, node_split
    from hpcgnn.sampling import DistNodeDataLoader, NeighborSampler
    from hpcgnn.train import Trainer

    ap = argparse.ArgumentParser()
    ap.add_argument("--part-config", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--nan-at", type=int, default=3)
    ap.add_argument("--nan-trainer", type=int, default=1)
    a = ap.parse_args(argv)
    hpcgnn.initialize(layout="servers=1,samplers=0,trainers=1", ranks_per_node=2, part_config=a.part_config)
    with open(a.part_config) as fh:
        conf = json.load(fh)
    g = DistGraph(conf["graph_name"])
    torch.manual_seed(0)
    model = torch.nn.Linear(g.ndata["feat"].shape[1], conf["num_classes"])
    trainer = Trainer(model, lr=0.01, run_dir=a.run_dir, graph=g, progress="off", checkpoint_every=2)
    loader = DistNodeDataLoader(g, node_split(g.ndata["train_mask"]), NeighborSampler([2]), batch_size=32,
                                shuffle=True, labels="seeds", seed=3)
    calls = [0]

    def loss_fn(m, b):
        calls[0] += 1
        loss = F.cross_entropy(m(b.x[: b.batch_size]), b.y[: b.batch_size].long())
        if calls[0] == a.nan_at and trainer.rank == a.nan_trainer:
            before = os.path.join(a.run_dir, "checkpoints", f"step-{a.nan_at - 1}.h5")
            with open(os.path.join(a.run_dir, "before.md5"), "w") as f:
                f.write(md5(before))
            return loss * float("nan")
        return loss

    trainer.fit(loader, loss_fn, epochs=2)
    trainer.finish({})
    trainer.close()


# -- fixtures and helpers -----------------------------------------------------------
@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """(raw file, partition config) of a 3000-node graph in 2 partitions, and a second
    partitioning of the same graph with other features (the same shapes)."""
    from hpcgnn.datasets import generate_graph
    from hpcgnn.partition import partition_graph

    d = str(tmp_path_factory.mktemp("verify"))
    raw = os.path.join(d, "g.h5")
    generate_graph(raw, None, 3000, 8, 8, 4, seed=5, name="g")
    other = os.path.join(d, "other", "g.h5")
    os.makedirs(os.path.dirname(other))
    shutil.copy(raw, other)
    with h5py.File(other, "r+") as f:
        f["nodes/data/feat"][:] = f["nodes/data/feat"][:] + 1.0
    return (partition_graph(raw, os.path.join(d, "parts"), 2),
            partition_graph(other, os.path.join(d, "other", "parts"), 2))


def _edit(cfg, edit, keep_digest=True) -> None:
    with open(cfg) as f:
        conf = json.load(f)
    edit(conf)
    if not keep_digest:
        conf.pop("config_digest")
    with open(cfg, "w") as f:
        json.dump(conf, f)


def _verify(cfg, capsys):
    """``hpcgnn verify cfg`` in this process: (exit status, problem lines, summary)."""
    from hpcgnn.cli.main import main as cli

    capsys.readouterr()
    code = cli(["verify", cfg])
    out = capsys.readouterr().out.splitlines()
    return code, out[:-1], json.loads(out[-1])


# -- the checksum -----------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_the_fast_checksum_is_the_writers():
    from hpcgnn.partition.verify import Checksum, fletcher
    from hpcgnn.io.checksum import checksum_hex, fletcher_partial

    rng = np.random.default_rng(0)
    for n in (0, 1, 2047, 2048, 2049, (1 << 19) - 1, 1 << 19, 3 * (1 << 19) + 1001):
        a = rng.integers(0, 256, n, dtype=np.uint8)
        for off in (0, 17, 2**63 + 5):
            assert fletcher(a, off) == fletcher_partial(a, off), (n, off)
    full = np.full(1 << 21, 255, np.uint8)                       # the largest partial sums
    assert fletcher(full) == fletcher_partial(full, 0)
    big_endian = rng.random((999, 7)).astype(">f8")
    assert fletcher(big_endian, 3) == fletcher_partial(big_endian, 3)
    x = rng.random((3001, 5))
    s = Checksum()
    s.add(x[:1000])
    s.add(x[1000:])
    assert s.hex() == checksum_hex(*fletcher_partial(x, 0)) != checksum_hex(*fletcher_partial(x[::-1], 0))


# -- loading --------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_corrupt_bytes_are_refused_at_load_naming_the_dataset(parts, tmp_path, monkeypatch):
    from hpcgnn.graph import DistGraph
    from hpcgnn.partition import load_partition

    cfg = copy_parts(parts[0], tmp_path)
    h5 = h5_of(cfg)
    corrupt(h5, "part1/node/feat")
    line = rf"{h5}: dataset /part1/node/feat \(partition 1\) differs .* {cfg} records"
    with pytest.raises(InputError, match=line):
        load_partition(cfg, 1)
    load_partition(cfg, 0)                                     # the other partition is intact
    with pytest.raises(InputError, match=line):
        DistGraph("corrupt_feat", part_config=cfg)             # the servers' tables (standalone)
    p1 = load_partition(cfg, 1, verify=False)
    assert p1.node_feats["feat"].shape == (p1.num_inner_nodes, 8)
    monkeypatch.setenv("HPCGNN_VERIFY", "0")                   # the documented escape hatch
    feat = load_partition(cfg, 1).node_feats["feat"]
    with h5py.File(h5, "r") as f:
        assert np.array_equal(feat.view(np.uint8), f["part1/node/feat"][()].view(np.uint8))
    g = DistGraph("corrupt_feat_loaded", part_config=cfg)
    assert g.num_nodes() == 3000


@pytest.mark.timeout(60)
def test_a_label_changed_in_place_is_refused(parts, tmp_path):
    from hpcgnn.graph import DistGraph

    cfg = copy_parts(parts[0], tmp_path)
    with h5py.File(h5_of(cfg), "r+") as f:
        f["part0/node/label"][5] = (f["part0/node/label"][5] + 1) % 4
    with pytest.raises(InputError, match=r"dataset /part0/node/label \(partition 0\) differs"):
        DistGraph("changed_label", part_config=cfg)


@pytest.mark.timeout(60)
def test_h5_file_of_another_graph_with_the_same_shapes_is_refused(parts, tmp_path):
    """The file the JSON names replaced by another partitioning's (same shapes, other
    features), or the JSON's h5_file pointed at it: the checksums name the dataset."""
    from hpcgnn.graph import DistGraph
    from hpcgnn.partition import load_partition

    cfg, other = copy_parts(parts[0], tmp_path), parts[1]
    shutil.copy(h5_of(other), h5_of(cfg))
    with pytest.raises(InputError, match=r"dataset /part0/node/feat \(partition 0\) differs"):
        DistGraph("replaced_file", part_config=cfg)
    with pytest.raises(InputError, match=r"dataset /part0/node/feat \(partition 0\) differs"):
        load_partition(cfg, 0)
    edited = os.path.join(os.path.dirname(parts[0]), "pointed.json")
    shutil.copy(parts[0], edited)
    _edit(edited, lambda c: c.__setitem__("h5_file", os.path.relpath(h5_of(other), os.path.dirname(edited))))
    with pytest.raises(InputError, match=f"{edited}: the JSON was edited after partitioning"):
        DistGraph("pointed", part_config=edited)
    _edit(edited, lambda c: None, keep_digest=False)               # as a JSON from before the digest
    with pytest.raises(InputError, match=r"dataset /part0/node/feat \(partition 0\) differs"):
        DistGraph("pointed", part_config=edited)


@pytest.mark.timeout(60)
def test_edited_counts_are_refused(parts, tmp_path, capsys):
    """num_nodes edited: the digest refuses it; without the digest the totals do (in
    `hpcgnn info` too); a group attribute that disagrees with the JSON is named."""
    from hpcgnn.cli.info import summarize
    from hpcgnn.partition import load_partition
    from hpcgnn.partition.config import read_config

    cfg = copy_parts(parts[0], tmp_path)
    read_config(cfg)                                            # as written: accepted
    _edit(cfg, lambda c: c.__setitem__("num_nodes", 3100))
    for load in (read_config, summarize, lambda c: load_partition(c, 0)):
        with pytest.raises(InputError, match=f"{cfg}: the JSON was edited after partitioning"):
            load(cfg)
    _edit(cfg, lambda c: None, keep_digest=False)
    for load in (read_config, summarize):
        with pytest.raises(InputError, match=f"{cfg}: key 'num_nodes' is 3100 but 'node_map' covers 3000"):
            load(cfg)
    _edit(cfg, lambda c: c.__setitem__("num_nodes", 3000))
    assert summarize(cfg)["num_nodes"] == 3000                   # no digest, nothing else edited: read

    with h5py.File(h5_of(cfg), "r+") as f:
        f["part1"].attrs["node_start"] = 7
    with pytest.raises(InputError, match=r"/part1 attribute 'node_start' is 7, but .*'node_map' gives"):
        load_partition(cfg, 1)
    with pytest.raises(InputError, match=r"/part1 attribute 'node_start' is 7"):
        summarize(cfg)
    code, lines, summary = _verify(cfg, capsys)
    assert code == 1 and summary["problems"] == 1 and "/part1 attribute 'node_start' is 7" in lines[0]


@pytest.mark.timeout(60)
def test_a_config_without_digest_is_read_and_digest_edits_are_named(parts, tmp_path, monkeypatch):
    from hpcgnn.partition.config import config_digest, read_config

    cfg = copy_parts(parts[0], tmp_path)
    with open(cfg) as f:
        conf = json.load(f)
    assert conf["config_digest"] == config_digest(conf) and list(conf)[-1] == "config_digest"
    _edit(cfg, lambda c: c["parts"][0].__setitem__("num_cut_edges", 1))
    with pytest.raises(InputError, match="delete the 'config_digest' key"):
        read_config(cfg)
    monkeypatch.setenv("HPCGNN_VERIFY", "0")
    assert read_config(cfg)[0]["parts"][0]["num_cut_edges"] == 1


# -- hpcgnn verify ----------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_verify_command_clean_and_corrupt(parts, tmp_path, capsys):
    code, lines, summary = _verify(parts[0], capsys)
    assert code == 0 and lines == [] and summary["ok"] and summary["problems"] == 0
    assert summary["datasets"] == 16 and summary["bytes"] > 3000 * 8 * 4

    cfg = copy_parts(parts[0], tmp_path)
    h5 = h5_of(cfg)
    corrupt(h5, "part0/node/feat")
    corrupt(h5, "part1/csr/indices", nbytes=64)
    _edit(cfg, lambda c: c.__setitem__("num_edges", c["num_edges"] + 1))
    code, lines, summary = _verify(cfg, capsys)
    assert code == 1 and not summary["ok"] and summary["problems"] == 4 == len(lines), lines
    assert "the JSON was edited after partitioning" in lines[0]
    with open(cfg) as f:
        edges = json.load(f)["num_edges"]
    assert f"{cfg}: key 'num_edges' is {edges} but 'edge_map' covers {edges - 1}" in lines[1]
    assert f"{h5}: dataset /part0/node/feat (partition 0) differs" in lines[2] and cfg in lines[2]
    assert f"{h5}: dataset /part1/csr/indices (partition 1) differs" in lines[3]
    # over the ranks, a partition each: tests/graph/test_verify_mpi.py


# -- end to end, under mpirun -----------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.slow
def test_nan_loss_on_one_trainer_stops_every_trainer_and_keeps_the_checkpoint(parts, tmp_path, mpirun):
    run = tmp_path / "run"
    r = mpirun(4, [sys.executable, os.path.abspath(__file__), "--part-config", parts[0], "--run-dir", str(run),
                   "--nan-at", "3", "--nan-trainer", "1"], timeout=110)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "the loss is nan at step 3 (epoch 0) on trainer 1; every trainer stopped there, no checkpoint " \
           "written" in out, out
    assert sorted(os.listdir(run / "checkpoints")) == ["step-2.h5"]
    assert md5(run / "checkpoints" / "step-2.h5") == (run / "before.md5").read_text()
    assert not (run / "model.pt").exists() and '"kind": "epoch"' not in out


if __name__ == "__main__":
    sys.exit(main())
