"""The normal launch: one script on every rank; servers serve inside initialize().
Its trainers run a PyG layer: the job, ended well or by a failing trainer, leaves
none of PyG's generated modules in ``$TMPDIR`` (issue 29; tests/e2e/test_hygiene.py)."""
import os
import sys

import pytest

from harness import pyg_leftovers

from hpcgnn.datasets import generate_graph
from hpcgnn.partition import partition_graph

#: every test here starts a job of its own (scripts/test.sh --quick leaves them out)
pytestmark = pytest.mark.slow

SCRIPT = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "served_job.py")


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("served"))
    raw = os.path.join(d, "g.h5")
    generate_graph(raw, None, 4000, 5, 4, 4, seed=2, name="g")
    return partition_graph(raw, os.path.join(d, "parts"), 2)


def _shm():
    return sorted(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else []


def test_served_launch_runs_and_leaves_nothing_behind(mpirun, parts, tmp_path):
    before = _shm()
    res = mpirun(4, [sys.executable, SCRIPT, parts, "ok"], timeout=120, env={"TMPDIR": str(tmp_path)})
    assert res.returncode == 0, res.stdout + res.stderr
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("sum of in-degrees")]
    assert line, res.stdout
    # every edge is counted once, at its destination
    words = line[0].split()
    assert words[3] == words[5]
    assert set(_shm()) <= set(before)      # nothing new left behind (older jobs' may go meanwhile)
    assert res.stdout.count("made " + str(tmp_path)) == 2, res.stdout      # PyG wrote its modules there
    assert pyg_leftovers(tmp_path) == ([], [])


def test_a_failing_trainer_ends_the_served_job(mpirun, parts, tmp_path):
    res = mpirun(4, [sys.executable, SCRIPT, parts, "raise"], timeout=120, env={"TMPDIR": str(tmp_path)})
    assert res.returncode != 0
    assert "hpcgnn: rank 3/4 (trainer, node 1" in res.stderr
    assert "RuntimeError: trainer failed mid-epoch" in res.stderr
    assert "made " + str(tmp_path) in res.stdout, res.stdout               # the failing trainer wrote there
    assert pyg_leftovers(tmp_path) == ([], [])
