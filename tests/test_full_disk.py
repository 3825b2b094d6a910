"""A disk that is too small or fills up: the partition and the checkpoints end every
rank with one line naming the file and the cause, within seconds (issue 29: they
used to hang), and a checkpoint that cannot be written leaves the previous one.

Real disks: small tmpfs mounts (root); skipped where mounting is not allowed."""
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from conftest import ROOT
from hpcgnn.comm.mpi import MPI
from hpcgnn.train import checkpoint

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


def _lines(stderr: str, word: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if word in ln]


@pytest.mark.timeout(300)
def test_partition_onto_a_disk_too_small_ends_every_rank(mpirun, graph, small_disk):
    out = os.path.join(small_disk("2m"), "parts")
    res = mpirun(2, HP + ["partition", graph, "-o", out, "-k", "2"], timeout=120)   # it hung forever
    assert res.returncode != 0
    full = _lines(res.stderr, "disk full")
    assert len(full) == 2 and all("g.h5" in ln for ln in full), res.stderr
    assert {"rank 0/2", "rank 1/2"} == {w for ln in full for w in ("rank 0/2", "rank 1/2") if w in ln}
    assert "Traceback" not in res.stderr
    assert not os.path.exists(out) or os.listdir(out) == []


@pytest.mark.timeout(300)
def test_generate_onto_a_disk_too_small_names_the_file(mpirun, small_disk):
    out = os.path.join(small_disk("2m"), "graph.h5")
    res = mpirun(2, HP + ["generate", out, "--num-nodes", "20000", "--avg-degree", "10", "--feat-dim", "16",
                          "--num-classes", "4", "--seed", "0"], timeout=120)
    assert res.returncode != 0
    full = _lines(res.stderr, "disk full")
    assert len(full) == 2 and all(out in ln for ln in full), res.stderr
    assert "Traceback" not in res.stderr and os.listdir(os.path.dirname(out)) == []


RESERVE = """
import sys, numpy as np
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import HpcgnnError
from hpcgnn.partition.writer import PartFile
comm = MPI.COMM_WORLD
out = PartFile(comm, sys.argv[1])
out.create("part0/node/feat", (4 << 20,), np.float32)       # 16 MiB on a 4 MiB disk
try:
    out.reserve()
    print("reserved", flush=True)
except HpcgnnError as e:
    print("refused:", e, flush=True)
out.close()
comm.Barrier()
"""


@pytest.mark.timeout(300)
def test_a_file_the_disk_cannot_hold_is_refused_before_its_writes(mpirun, small_disk):
    # the free-space estimate can be passed (other jobs fill the disk meanwhile): the
    # datasets' blocks are reserved after their collective creation, and a failure
    # there is agreed, so no rank writes into, or closes, a file that cannot be whole
    path = os.path.join(small_disk("4m"), "big.h5")
    res = mpirun(2, [sys.executable, "-c", RESERVE, path], timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("refused:") == 2 and "reserved" not in res.stdout, res.stdout   # lines may interleave
    assert "big.h5" in res.stdout and "reserving its disk space" in res.stdout and "full" in res.stdout


def _train(mpirun, cfg, run_dir, *extra):
    return mpirun(4, HP + ["train", "--part-config", cfg, "--layout", "servers=1,samplers=0,trainers=1",
                           "--ranks-per-node", "2", "--epochs", "1", "--run-dir", run_dir, "--progress", "off",
                           "--eval-every", "0", *extra], timeout=240)


@pytest.mark.timeout(600)
def test_checkpoint_onto_a_full_disk_keeps_the_previous_one(mpirun, graph, small_disk, tmp_path):
    parts = str(tmp_path / "parts")
    res = mpirun(2, HP + ["partition", graph, "-o", parts, "-k", "2"], timeout=120)
    assert res.returncode == 0, res.stderr
    cfg = os.path.join(parts, "g.json")
    run_dir = os.path.join(small_disk("3m"), "run")
    res = _train(mpirun, cfg, run_dir, "--max-steps", "2")
    assert res.returncode == 0, res.stderr
    first = os.path.join(run_dir, "checkpoints", "step-2.h5")
    before = open(first, "rb").read()
    free = os.statvfs(run_dir).f_bavail * os.statvfs(run_dir).f_frsize
    with open(os.path.join(os.path.dirname(run_dir), "filler"), "wb") as f:    # leave ~64 KiB
        f.write(b"\0" * (free - (64 << 10)))
    res = _train(mpirun, cfg, run_dir, "--resume", "--max-steps", "4")         # its checkpoint at step 4 fails
    assert res.returncode != 0
    lines = _lines(res.stderr, "disk full")
    assert len(lines) == 2 and all("step-2.h5 is intact" in ln for ln in lines), res.stderr
    assert "Traceback" not in res.stderr and "MPI_ABORT" not in res.stderr     # agreed: a clean exit
    assert os.listdir(os.path.dirname(first)) == ["step-2.h5"]
    assert open(first, "rb").read() == before
    os.remove(os.path.join(os.path.dirname(run_dir), "filler"))
    res = _train(mpirun, cfg, run_dir, "--resume", "--max-steps", "4")         # room again: it goes on
    assert res.returncode == 0, res.stderr
    assert sorted(os.listdir(os.path.dirname(first))) == ["step-2.h5", "step-4.h5"]


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
