"""A disk that fills up just before a parallel write (the partition, generate, a
checkpoint): the job is aborted with one line per rank naming the file and the
cause, within seconds (issue 29: they used to hang), no partial file is left, and a
checkpoint that cannot be written leaves the previous one; a damaged checkpoint is
refused by its checksum.  A disk too small from the start, and one filling during
the writes: whole jobs in tests/e2e/test_full_disk_mpi.py.

Real disks: small tmpfs mounts (root); skipped where mounting is not allowed."""
import hashlib
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from conftest import ROOT
from hpcgnn.comm.mpi import MPI
from hpcgnn.train import checkpoint

#: every test here starts a job of its own (scripts/test.sh --quick leaves them out)
pytestmark = pytest.mark.slow

HP = [sys.executable, "-m", "hpcgnn"]


@pytest.fixture
def small_disk(tmp_path):
    """``mount(size)``: a tmpfs of ``size`` at a new directory (unmounted after)."""
    mounted = []

    def mount(size: str) -> str:
        d = tmp_path / f"disk{len(mounted)}"
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()})")
        mounted.append(str(d))
        return str(d)

    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", d], capture_output=True)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    d = tmp_path_factory.mktemp("fulldisk")
    raw = str(d / "graph.h5")
    subprocess.run(HP + ["generate", raw, "--num-nodes", "20000", "--avg-degree", "10", "--feat-dim", "16",
                         "--num-classes", "4", "--seed", "0", "--name", "g"], check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    return raw


#: Runs ``python -m hpcgnn ARGS`` with the disk filled by another "job" at a chosen
#: moment (the test's hook, not hpcgnn's): ``before`` the first disk reservation
#: (what a disk filling between the free-space check and the write does, without a
#: race), or just ``after`` it (the disk fills during the writes).
FILL = """
import os, runpy, sys
from hpcgnn.io import diskspace
when, filler = sys.argv[1], sys.argv[2]
real, calls = diskspace.reserve_file, []

def fill():
    with open(filler, "ab", buffering=0) as f:
        for size in (1 << 16, 4096):
            try:
                while True:
                    f.write(b"\\0" * size)
            except OSError:
                pass

def reserve_file(path, size):
    calls.append(path)
    if when == "before" and len(calls) == 1:
        fill()
    real(path, size)
    if when == "after" and len(calls) == 1:
        fill()

diskspace.reserve_file = reserve_file
sys.argv = ["hpcgnn"] + sys.argv[3:]
runpy.run_module("hpcgnn", run_name="__main__", alter_sys=True)
"""


def _ended_on_every_rank(res, name: str, nranks: int, *words) -> None:
    """The job failed (not a timeout, not a crash) with one line per rank naming
    ``name``, the rank that failed and ``words``, and no traceback."""
    assert res.returncode not in (0, 124, 137, 139) and res.returncode > 0, (res.returncode, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("hpcgnn: rank") and name in ln]
    assert sorted(ln.split()[2] for ln in lines) == [f"{r}/{nranks}" for r in range(nranks)], res.stderr
    assert all("failed on rank 0" in ln and all(w in ln for w in words) for ln in lines), res.stderr
    assert "Traceback" not in res.stderr and "Segmentation" not in res.stderr


@pytest.mark.timeout(120)
def test_a_disk_filling_before_the_partition_write_ends_every_rank(mpirun, graph, small_disk):
    disk = small_disk("16m")
    out = os.path.join(disk, "parts")
    res = mpirun(2, [sys.executable, "-c", FILL, "before", os.path.join(disk, "filler"),
                     "partition", graph, "-o", out, "-k", "2"], timeout=100)
    _ended_on_every_rank(res, os.path.join(out, "g.h5"), 2, "reserving", "disk full")
    assert os.listdir(out) == []                     # no partial file, no output without its JSON


@pytest.mark.timeout(120)
def test_a_disk_filling_before_generate_writes_ends_every_rank(mpirun, small_disk):
    disk = small_disk("4m")
    out = os.path.join(disk, "graph.h5")
    res = mpirun(2, [sys.executable, "-c", FILL, "before", os.path.join(disk, "filler"),
                     "generate", out, "--num-nodes", "5000", "--avg-degree", "5", "--feat-dim", "8",
                     "--num-classes", "4", "--seed", "0"], timeout=100)
    _ended_on_every_rank(res, out, 2, "disk full")
    assert os.listdir(disk) == ["filler"]


SAVE = """
import hashlib, sys, numpy as np
from hpcgnn.comm.mpi import MPI
from hpcgnn.io import diskspace
from hpcgnn.train import checkpoint

comm, run_dir, filler = MPI.COMM_WORLD, sys.argv[1], sys.argv[2]
meta, w = {"graph": "g"}, {"w": np.arange(1000.0)}
first = checkpoint.save(comm, run_dir, 1, meta, w, {"rng": comm.rank})
if comm.rank == 0:
    print("sha", hashlib.sha256(open(first, "rb").read()).hexdigest(), flush=True)
real = diskspace.reserve_file

def full_first(path, size):            # another job fills the disk first
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\\0" * 4096)
                f.flush()
        except OSError:
            pass
    real(path, size)

diskspace.reserve_file = full_first
checkpoint.save(comm, run_dir, 2, meta, w, {"rng": comm.rank})
print("saved", flush=True)
"""


@pytest.mark.timeout(120)
def test_a_disk_filling_during_a_checkpoint_keeps_the_previous_one(mpirun, small_disk):
    disk = small_disk("4m")
    run_dir = os.path.join(disk, "run")
    res = mpirun(2, [sys.executable, "-c", SAVE, run_dir, os.path.join(disk, "filler")], timeout=100)
    _ended_on_every_rank(res, "step-2.h5", 2, "disk full", "step-1.h5 is intact")
    assert "saved" not in res.stdout
    folder = os.path.join(run_dir, "checkpoints")
    assert os.listdir(folder) == ["step-1.h5"]
    sha = hashlib.sha256(open(os.path.join(folder, "step-1.h5"), "rb").read()).hexdigest()
    assert f"sha {sha}" in res.stdout, res.stdout                 # not a byte changed


def _offset(path: str, name: str) -> int:
    with h5py.File(path, "r") as f:
        return int(f[name].id.get_offset())


@pytest.mark.timeout(120)
def test_a_damaged_checkpoint_is_refused_by_its_checksum(tmp_path):
    comm = MPI.COMM_SELF
    meta = {"graph": "g"}
    path = checkpoint.save(comm, str(tmp_path), 7, meta, {"w": np.arange(1000.0)}, {"rng": 5})
    assert checkpoint.load(comm, path, meta)[0] == 7
    at = _offset(path, "replicated") + 600                   # inside the pickled weights
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(checkpoint.UnreadableCheckpoint, match=r"'/replicated' checksum .* damaged checkpoint"):
        checkpoint.load(comm, path, meta)
