"""Any failure on any rank ends the whole job quickly and says where it happened; and
how trainer scripts start and end (MPI.Finalize, torch.distributed).  A rank killed
ends the job: tests/e2e/test_watchdog.py, which names it.  A second
initialize, DGL's ip_config and a bad HPCGNN_FINISH_TIMEOUT: tests/comm/test_context_mpi.py,
and one rank's error raised on every rank (agreed errors): tests/comm/test_agree_mpi.py,
in process.

The launches are 4-rank jobs (two virtual nodes of server + trainer) in which one rank
fails while the others wait in a barrier; an error before initialize and one in a
thread meet the same hook in a single process (MPI's singleton: no launch).
"""
import os
import time

import pytest

#: every test here starts a job of its own (scripts/test.sh --quick leaves them out)
pytestmark = pytest.mark.slow

SCRIPT = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "fail_job.py")


def _run(mpirun, *args):
    import sys

    t0 = time.monotonic()
    res = mpirun(4, [sys.executable, SCRIPT, *args], timeout=90)
    return res, time.monotonic() - t0


def test_exception_on_one_rank_aborts_everyone(mpirun):
    """Rank 1 (a trainer) raises while the others wait in a barrier.  A server's line:
    tests/comm/test_context_mpi.py (the role and node of each rank, in process)."""
    res, _ = _run(mpirun, "raise", "1")
    assert res.returncode != 0
    assert "hpcgnn: rank 1/4 (trainer, node 0, host " in res.stderr, res.stderr[-2000:]
    assert "ValueError: trainer exploded" in res.stderr
    assert "finished" not in res.stdout


def _alone(code: str):
    """``code`` run by one process (MPI's singleton, no launch) after ``import hpcgnn``:
    the same hook ends it as ends a job (its Abort: the test above)."""
    import subprocess
    import sys

    from conftest import clean_mpi_env

    return subprocess.run([sys.executable, "-c", "import threading, time\nimport hpcgnn\n" + code],
                          capture_output=True, text=True, timeout=60, env=clean_mpi_env())


def test_exception_before_initialize_is_named():
    res = _alone("raise RuntimeError('broken before initialize')")
    assert res.returncode == 1
    assert "hpcgnn: rank 0/1 (no role, node ?, host " in res.stderr, res.stderr
    assert "RuntimeError: broken before initialize" in res.stderr


def test_exception_in_a_thread_ends_the_process():
    """The main thread sleeps on: the thread's error ends the process (it would wait
    for ever in a job's collective)."""
    res = _alone("t = threading.Thread(target=lambda: 1 / 0)\nt.start()\nt.join()\ntime.sleep(60)\nprint('woke')")
    assert res.returncode == 1 and "woke" not in res.stdout
    assert "hpcgnn: rank 0/1 (no role, node ?, host " in res.stderr and "ZeroDivisionError" in res.stderr, res.stderr


def test_a_trainer_that_ends_early_ends_the_job_after_the_finish_timeout(mpirun):
    import sys

    res = mpirun(4, [sys.executable, SCRIPT, "exit-early", "3"], timeout=90, env={"HPCGNN_FINISH_TIMEOUT": "4"})
    assert res.returncode != 0
    assert "hpcgnn: rank 3/4 (trainer, node 1, host " in res.stderr and "FinishTimeout" in res.stderr
    assert "finished" not in res.stdout


def test_a_bad_thread_level_is_named():
    """Checked when hpcgnn is imported, before MPI starts: one process shows it (no launch)."""
    import subprocess
    import sys

    from conftest import clean_mpi_env

    res = subprocess.run([sys.executable, "-c", "import hpcgnn"], capture_output=True, text=True, timeout=60,
                         env=clean_mpi_env({"HPCGNN_THREAD_LEVEL": "bogus"}))
    assert res.returncode != 0
    assert "HPCGNN_THREAD_LEVEL='bogus': choose single, funneled, serialized or multiple" in res.stderr


def test_plain_torch_distributed_init_joins_the_trainers(mpirun):
    """A DGL script's own ``init_process_group()``.  Node 0's ranks inherit RANK,
    WORLD_SIZE and MASTER_PORT (a job started from a rank of another job: the values
    are replaced), node 1's have none: one job (MPMD) for both.  The trainers end
    with ``MPI.Finalize()`` instead of ``ctx.finalize()`` (an mpi4py habit), which
    still releases the servers: the job ends, with status 0."""
    import sys

    job = [sys.executable, SCRIPT, "plain-torch", "0"]
    res = mpirun(2, ["env", "RANK=0", "WORLD_SIZE=1", "MASTER_PORT=1", *job, ":", "-n", "2", *job], timeout=90)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("allreduce 3 of 2") == 2 and res.stdout.count("finished") == 2


def test_an_agreed_error_says_over_which_ranks_and_still_pickles():
    """run_or_exit ends a job cleanly only for errors every rank raised; the mark is
    world ranks, so the error still pickles (a communicator would not)."""
    import pickle

    from hpcgnn.comm.agree import agreed_over, raise_if_any
    from hpcgnn.comm.mpi import MPI
    from hpcgnn.errors import InputError

    assert not agreed_over(InputError("not agreed"), MPI.COMM_WORLD)
    with pytest.raises(InputError) as info:
        raise_if_any(MPI.COMM_SELF, InputError("bad setting"))
    assert agreed_over(info.value, MPI.COMM_SELF)
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is InputError and agreed_over(again, MPI.COMM_SELF)
