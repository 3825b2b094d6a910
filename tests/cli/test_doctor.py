"""`hpcgnn doctor` under a real 2-rank launch."""
import sys

import pytest

#: every test here starts a job of its own (scripts/test.sh --quick leaves them out)
pytestmark = pytest.mark.slow


def test_doctor_all_green_on_two_ranks(mpirun):
    res = mpirun(2, [sys.executable, "-m", "hpcgnn", "doctor", "--layout", "servers=1,trainers=rest"], timeout=120)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    for needle in ("[ok ] MPI: Open MPI", "[ok ] RMA windows", "[ok ] shared-memory windows",
                   "[ok ] parallel HDF5", "[ok ] ParMETIS", "idx_t 32-bit", "[ok ] torch",
                   "node 0: server, trainer", "hpcgnn doctor: all green"):
        assert needle in out, out
    # optional: reported (ok or warn, with the kernel's settings) but never failing the check
    assert "] huge pages for window memory: transparent_hugepage enabled=" in out, out


def test_doctor_reports_a_layout_that_does_not_fit(mpirun):
    res = mpirun(2, [sys.executable, "-m", "hpcgnn", "doctor", "--layout", "servers=1,samplers=1,trainers=1"],
                 timeout=120)
    assert res.returncode == 1
    assert "does not fit" in res.stdout and "something required is missing" in res.stdout
