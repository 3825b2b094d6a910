"""hpcgnn.testing at one rank: run_job takes a job's exit status (returned, or the
SystemExit a serving rank ends with) and holds its output, from Python and from the
file descriptors alike; on_rank0 hands rank 0's value or error to every rank."""
import os
import sys

import pytest

from hpcgnn.testing import on_rank0, run_job, shared_tmpdir


def _job(argv):
    print("out", *argv)
    sys.stderr.write("err\n")
    os.write(1, b"fd1\n")
    if argv and argv[0] == "exit":
        sys.exit(int(argv[1]))
    return 3


def test_run_job_holds_the_status_and_the_output(capsys):
    job = run_job(_job, ["a"])
    assert (job.returncode, job.rank_returncode) == (3, 3)
    assert job.stdout == "out a\nfd1\n" and job.stderr == "err\n"
    assert run_job(_job, ["exit", "0"]).returncode == 0
    assert run_job(_job, ["exit", "2"]).returncode == 2
    assert capsys.readouterr().out == ""                      # nothing printed past the capture
    print("after")
    assert capsys.readouterr().out == "after\n"               # the streams are back
    loud = run_job(_job, ["b"], capture=False)
    assert loud.stdout == "" and "out b" in capsys.readouterr().out


def test_on_rank0_returns_its_value_or_raises_its_error():
    with shared_tmpdir() as d:
        assert os.path.isdir(d)
        assert on_rank0(os.path.join, d, "x") == os.path.join(d, "x")
    assert not os.path.exists(d)
    with pytest.raises(ZeroDivisionError):
        on_rank0(lambda: 1 / 0)
