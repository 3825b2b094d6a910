"""A disk that is too small or fills up, as whole jobs in the multi-rank pytest run
(:func:`hpcgnn.testing.run_job`; ``hpcgnn partition``, ``generate`` and ``convert``
at 2 ranks, ``hpcgnn train`` at 4): every rank ends with the error naming the file
and the cause (issue 29: they used to hang), no partial file is left, a disk
filling during a partition's writes cannot fail it, and a checkpoint that cannot be
written leaves the previous one.  How a launch prints an error raised alike on every
rank (one line per rank, no traceback): tests/e2e/test_failure.py; a disk filling before
the writes (the job is aborted): tests/e2e/test_full_disk.py.

Real disks: small tmpfs mounts made by rank 0 (root); skipped where mounting is not
allowed."""
import contextlib
import os
import subprocess

import h5py
import numpy as np
import pytest

from hpcgnn.cli.main import main as hpcgnn_main
from hpcgnn.comm.mpi import MPI, world
from hpcgnn.datasets import generate_graph
from hpcgnn.errors import HpcgnnError
from hpcgnn.io import diskspace
from hpcgnn.partition import partition_graph
from hpcgnn.testing import on_rank0, run_job, shared_tmpdir

pytestmark = pytest.mark.slow
SIZE = world().Get_size()


def ranks(n):
    """A job of ``n`` ranks: run in the ``n``-rank pass only."""
    def mark(fn):
        return pytest.mark.mpi(min_size=n)(pytest.mark.skipif(SIZE != n, reason=f"a {n}-rank job")(fn))
    return mark


def _mount(d: str, size: str) -> str | None:
    os.makedirs(d)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", d], capture_output=True, text=True)
    return None if r.returncode == 0 else r.stderr.strip() or "mount failed"


@pytest.fixture
def small_disk():
    """``mount(size)``: a tmpfs of ``size`` at a new directory every rank sees
    (rank 0 mounts it, and unmounts it after)."""
    with shared_tmpdir() as base, contextlib.ExitStack() as stack:
        mounted = []

        def mount(size: str) -> str:
            d = os.path.join(base, f"disk{len(mounted)}")
            err = on_rank0(_mount, d, size)
            if err:
                pytest.skip(f"cannot mount a tmpfs here ({err})")
            mounted.append(d)
            if world().Get_rank() == 0:
                stack.callback(subprocess.run, ["umount", "-l", d], capture_output=True)
            return d
        yield mount
        world().Barrier()


@pytest.fixture(scope="module")
def graph():
    """A 20000-node raw graph, made by rank 0."""
    with shared_tmpdir() as d:
        raw = os.path.join(d, "graph.h5")
        on_rank0(lambda: generate_graph(raw, None, 20000, 10, 16, 4, 0, name="g"))
        yield raw


def _failing(argv) -> str:
    """``hpcgnn ARGV`` as a job that must fail on every rank: this rank's message
    (its line on stderr, or the error every rank raised, which a launch prints as a
    line per rank)."""
    try:
        job = run_job(hpcgnn_main, argv)
    except HpcgnnError as e:
        world().Barrier()
        return str(e)
    assert job.rank_returncode != 0, job.stdout + job.stderr
    return job.stderr


def _on_every_rank(text: str, *words) -> None:
    lines = world().allgather([ln for ln in text.splitlines() if all(w in ln for w in words)])
    assert all(len(mine) >= 1 for mine in lines), (words, lines)
    assert "Traceback" not in text


@ranks(2)
@pytest.mark.timeout(300)
def test_partition_onto_a_disk_too_small_ends_every_rank(graph, small_disk):
    out = os.path.join(small_disk("2m"), "parts")
    text = _failing(["partition", graph, "-o", out, "-k", "2"])          # it hung forever
    _on_every_rank(text, "disk full", "g.h5")
    assert not os.path.exists(out) or os.listdir(out) == []


@ranks(2)
@pytest.mark.timeout(300)
def test_generate_onto_a_disk_too_small_names_the_file(small_disk):
    out = os.path.join(small_disk("2m"), "graph.h5")
    text = _failing(["generate", out, "--num-nodes", "20000", "--avg-degree", "10", "--feat-dim", "16",
                     "--num-classes", "4", "--seed", "0"])
    _on_every_rank(text, "disk full", out)
    assert os.listdir(os.path.dirname(out)) == []


@ranks(2)
@pytest.mark.timeout(300)
def test_convert_onto_a_disk_too_small_names_the_file(small_disk):
    """An edge list of ~5 MB converted onto a 2 MB disk: the error on every rank, no
    partial file (it printed HDF5's OSError 28 with a traceback)."""
    disk = small_disk("2m")
    edges = os.path.join(os.path.dirname(disk), "edges.npy")
    on_rank0(np.save, edges, np.random.default_rng(0).integers(0, 50000, (300000, 2)))
    out = os.path.join(disk, "graph.h5")
    text = _failing(["convert", "edges", edges, out])
    _on_every_rank(text, "disk full", out)
    assert os.listdir(disk) == []


def _fill(filler):
    with open(filler, "ab", buffering=0) as f:
        for size in (1 << 16, 4096):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass


@pytest.fixture
def fill_disk(monkeypatch):
    """``fill_disk(filler)``: another "job" fills the disk just after the first disk
    reservation (the disk fills during the writes; the test's hook, not hpcgnn's).
    Rank 0 fills it.  (Filled before it, the write fails and the job is aborted:
    launches of their own, tests/e2e/test_full_disk.py.)"""
    def arm(filler):
        real, calls = diskspace.reserve_file, []

        def reserve_file(path, size):
            calls.append(path)
            real(path, size)
            if len(calls) == 1 and world().Get_rank() == 0:
                _fill(filler)
        monkeypatch.setattr(diskspace, "reserve_file", reserve_file)
    return arm


@ranks(2)
@pytest.mark.timeout(120)
def test_a_disk_filling_during_the_partition_write_does_not_fail_it(graph, small_disk, fill_disk):
    # the blocks were reserved before anything was written: the writes, the flushes
    # and the collective close cannot run out of space any more (they used to hang or
    # crash); the reservation past the file's end is given back for the JSON
    disk = small_disk("16m")
    out = os.path.join(disk, "parts")
    fill_disk(os.path.join(disk, "filler"))
    job = run_job(hpcgnn_main, ["partition", graph, "-o", out, "-k", "2"])
    assert job.returncode == 0, job.stderr
    assert sorted(os.listdir(out)) == ["g.h5", "g.json"]
    with h5py.File(os.path.join(out, "g.h5"), "r") as f:
        assert f["part1/csr/indices"].shape[0] > 0


def _train(cfg, run_dir, *extra):
    return run_job(hpcgnn_main, ["train", "--part-config", cfg, "--layout", "servers=1,samplers=0,trainers=1",
                                 "--ranks-per-node", "2", "--epochs", "1", "--run-dir", run_dir, "--progress", "off",
                                 "--eval-every", "0", *extra])


@ranks(4)
@pytest.mark.timeout(600)
def test_checkpoint_onto_a_full_disk_keeps_the_previous_one(graph, small_disk):
    disk = small_disk("3m")
    cfg = on_rank0(lambda: partition_graph(graph, os.path.join(os.path.dirname(disk), "parts"), 2,
                                           comm=MPI.COMM_SELF))
    run_dir = os.path.join(disk, "run")
    res = _train(cfg, run_dir, "--max-steps", "2")
    assert res.returncode == 0, res.stderr
    first = os.path.join(run_dir, "checkpoints", "step-2.h5")
    before = open(first, "rb").read()
    filler = os.path.join(disk, "filler")

    def leave_64k():
        free = os.statvfs(run_dir).f_bavail * os.statvfs(run_dir).f_frsize
        with open(filler, "wb") as f:
            f.write(b"\0" * (free - (64 << 10)))
    on_rank0(leave_64k)
    res = _train(cfg, run_dir, "--resume", "--max-steps", "4")         # its checkpoint at step 4 fails
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if "disk full" in ln]
    assert len(lines) == 2 and all("step-2.h5 is intact" in ln for ln in lines), res.stderr   # agreed: a line per trainer
    assert "Traceback" not in res.stderr
    assert os.listdir(os.path.dirname(first)) == ["step-2.h5"]
    assert open(first, "rb").read() == before
    on_rank0(os.remove, filler)
    res = _train(cfg, run_dir, "--resume", "--max-steps", "4")         # room again: it goes on
    assert res.returncode == 0, res.stderr
    assert sorted(os.listdir(os.path.dirname(first))) == ["step-2.h5", "step-4.h5"]
