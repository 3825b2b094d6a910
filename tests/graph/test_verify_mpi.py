"""Verify before use, at 2-4 ranks: a corrupt partition fails the launch on every
rank (one owner failing, the others not left waiting), also when the graph is loaded
on demand while the servers serve; ``hpcgnn verify`` splits the partitions over the
ranks; ``HPCGNN_VERIFY=0`` loads what is on disk.  Whole jobs (4-rank pass, through
:func:`hpcgnn.testing.run_job`): ``hpcgnn train`` on corrupt features ends before an
epoch; with ``HPCGNN_VERIFY=0`` it trains on NaN features and the NaN loss stops
every trainer.

Run as ``mpirun -n 2|4 python -m pytest --with-mpi tests/graph/test_verify_mpi.py``."""
import argparse
import json
import os
import shutil

import h5py
import numpy as np
import pytest

import hpcgnn
from conftest import served_layout
from harness import copy_parts, corrupt, h5_of
from hpcgnn.cli.train import main_argv
from hpcgnn.comm.mpi import MPI
from hpcgnn.datasets import generate_graph
from hpcgnn.errors import InputError
from hpcgnn.partition import partition_graph
from hpcgnn.testing import on_rank0, run_job

world = MPI.COMM_WORLD


def _graphs(tmp, nparts):
    """Collective: (the good config, a copy whose last partition's features are
    corrupt) of a 3000-node graph in ``nparts`` partitions."""
    raw = os.path.join(tmp, "g.h5")
    generate_graph(raw, world, 3000, 6, 8, 4, seed=3, name="g", overwrite=True)
    good = partition_graph(raw, os.path.join(tmp, "parts"), nparts, comm=world, overwrite=True)
    bad_dir = os.path.join(tmp, "bad")
    if world.Get_rank() == 0:
        shutil.copytree(os.path.dirname(good), bad_dir)
        corrupt(os.path.join(bad_dir, "g.h5"), f"part{nparts - 1}/node/feat")
    world.Barrier()
    return good, os.path.join(bad_dir, "g.json")


def _line(bad, p):
    return rf"dataset /part{p}/node/feat \(partition {p}\) differs from what was written.* {bad} records"


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_a_corrupt_partition_fails_initialize_on_every_rank(shared_tmp):
    """The owner of the last partition finds it; every rank raises the same error
    (at 4 ranks the owner of partition 0 loaded its own fine), and the launch is
    usable again afterwards: nothing waits."""
    layout, rpn, nparts = served_layout(world.Get_size())
    good, bad = _graphs(shared_tmp, nparts)
    with pytest.raises(InputError, match=_line(bad, nparts - 1)):
        hpcgnn.initialize(layout=layout, ranks_per_node=rpn, part_config=bad, serve=False)
    ctx = hpcgnn.initialize(layout=layout, ranks_per_node=rpn, part_config=good, serve=False)
    if ctx.is_trainer:
        from hpcgnn.graph import DistGraph

        g = DistGraph("g")
        before = g.ndata["feat"][np.arange(10)]
        # loaded on demand, the servers in their command loop: refused on every trainer,
        # the servers go on serving the good graph
        with pytest.raises(InputError, match=_line(bad, nparts - 1)):
            DistGraph("bad", part_config=bad)
        assert np.array_equal(np.asarray(g.ndata["feat"][np.arange(10)]), np.asarray(before))
        assert "bad" not in ctx.service.graphs
    else:
        ctx.service.serve()
    ctx.finalize()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_verify_off_loads_what_is_on_disk(shared_tmp, monkeypatch):
    layout, rpn, nparts = served_layout(world.Get_size())
    _, bad = _graphs(shared_tmp, nparts)
    monkeypatch.setenv("HPCGNN_VERIFY", "0")
    ctx = hpcgnn.initialize(layout=layout, ranks_per_node=rpn, part_config=bad, serve=False)
    if ctx.is_trainer:
        from hpcgnn.graph import DistGraph

        g = DistGraph("g")
        p = nparts - 1
        with h5py.File(os.path.join(os.path.dirname(bad), "g.h5"), "r") as f:
            on_disk = f[f"part{p}/node/feat"][()]
        lo = int(g.get_partition_book().node_ranges[p][0])
        rows = np.asarray(g.ndata["feat"][np.arange(lo, lo + len(on_disk))])
        assert rows.tobytes() == on_disk.tobytes()
        g.barrier()
    else:
        ctx.service.serve()
    ctx.finalize()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_verify_command_splits_the_partitions_over_the_ranks(shared_tmp, capsys):
    from hpcgnn.cli.verify import run

    nparts = world.Get_size() + 1                      # rank 0 checks two of them
    good, bad = _graphs(shared_tmp, nparts)
    if world.Get_rank() == 0:
        for p in range(nparts - 1):                    # the last is corrupt already
            corrupt(os.path.join(os.path.dirname(bad), "g.h5"), f"part{p}/node/feat", seed=p + 7)
    world.Barrier()
    capsys.readouterr()
    assert run(argparse.Namespace(config=good)) == 0
    out = capsys.readouterr().out.splitlines()
    if world.Get_rank() == 0:
        summary = json.loads(out[-1])
        assert len(out) == 1 and summary["ok"] and summary["ranks"] == world.Get_size()
        assert summary["datasets"] == 8 * nparts
    assert run(argparse.Namespace(config=bad)) == 1                 # the same status on every rank
    out = capsys.readouterr().out.splitlines()
    if world.Get_rank() == 0:
        assert json.loads(out[-1])["problems"] == nparts == len(out) - 1, out
        for p, line in enumerate(out[:-1]):
            assert f"dataset /part{p}/node/feat (partition {p}) differs" in line and bad in line, line
    else:
        assert out == []


# -- whole jobs: 2 virtual hosts x [server, trainer] ---------------------------------------
LAYOUT = ["--layout", "servers=1,samplers=0,trainers=1", "--ranks-per-node", "2"]


def _copy_of_parts(tmp, edit=None):
    """Rank 0: a 3000-node graph in 2 partitions (one rank's ParMETIS) in ``tmp``, and a
    copy of it changed by ``edit(copy's h5 file)``: (good config, copy's config)."""
    raw = os.path.join(tmp, "g.h5")
    generate_graph(raw, None, 3000, 8, 8, 4, seed=5, name="g")
    good = partition_graph(raw, os.path.join(tmp, "parts"), 2, comm=MPI.COMM_SELF)
    cfg = copy_parts(good, tmp)
    if edit is not None:
        edit(h5_of(cfg))
    return good, cfg


def _nan_features(h5):
    with h5py.File(h5, "r+") as f:
        f["part1/node/feat"][:] = np.nan


@pytest.mark.mpi(min_size=4)
@pytest.mark.timeout(120)
def test_corrupt_features_end_the_job_on_every_rank(shared_tmp, capfd):
    _, cfg = on_rank0(_copy_of_parts, shared_tmp, lambda h5: corrupt(h5, "part1/node/feat"))
    run = os.path.join(shared_tmp, "run")
    r = run_job(main_argv, ["--part-config", cfg, "--run-dir", run, *LAYOUT, "--epochs", "1", "--progress", "off"],
                capfd)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and r.rank_returncode != 0, out
    # every rank says it, one line each
    assert out.count("dataset /part1/node/feat (partition 1) differs") == 4, out
    assert '"kind": "epoch"' not in out and not os.path.exists(os.path.join(run, "model.pt"))


@pytest.mark.mpi(min_size=4)
@pytest.mark.timeout(120)
def test_verify_off_trains_on_nan_features_and_the_nan_loss_stops_it(shared_tmp, capfd, monkeypatch):
    """HPCGNN_VERIFY=0 loads a file whose features are NaN; the first step's loss is
    NaN and `hpcgnn train` stops there, on every trainer, exit status non-zero."""
    _, cfg = on_rank0(_copy_of_parts, shared_tmp, _nan_features)
    monkeypatch.setenv("HPCGNN_VERIFY", "0")
    run = os.path.join(shared_tmp, "run")
    r = run_job(main_argv, ["--part-config", cfg, "--run-dir", run, *LAYOUT, "--epochs", "1", "--progress", "off",
                            "--checkpoint-every", "1"], capfd)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "differs from what was written" not in out
    assert out.count("hpcgnn train: the loss is nan at step 1 (epoch 0) on trainer ") == 2, out
    ckpts = os.path.join(run, "checkpoints")
    assert not os.path.exists(ckpts) or not os.listdir(ckpts)
