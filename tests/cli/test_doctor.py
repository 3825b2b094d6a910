"""`hpcgnn doctor` on both ranks of the 2-rank run (in this process: doctor starts no
roles, so its probes run as under a launch of its own; once, its probes take seconds)."""
import pytest

from hpcgnn.cli.main import main
from hpcgnn.comm.mpi import MPI
from hpcgnn.testing import run_job

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() not in (1, 2), reason="the 2-rank run's")


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_doctor_all_green():
    res = run_job(main, ["doctor", "--layout", "servers=1,trainers=rest"])
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    for needle in ("[ok ] MPI: Open MPI", "[ok ] RMA windows", "[ok ] shared-memory windows",
                   "[ok ] parallel HDF5", "[ok ] ParMETIS", "idx_t 32-bit", "[ok ] torch",
                   "node 0: server, trainer", "hpcgnn doctor: all green"):
        assert needle in out, out
    # optional: reported (ok or warn, with the kernel's settings) but never failing the check
    assert "] huge pages for window memory: transparent_hugepage enabled=" in out, out


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_doctor_reports_a_layout_that_does_not_fit():
    res = run_job(main, ["doctor", "--layout", "servers=5,samplers=1,trainers=1"])
    assert res.returncode == 1 and res.rank_returncode == 1
    assert "does not fit" in res.stdout and "something required is missing" in res.stdout
