"""Testing a whole hpcgnn job inside one multi-rank pytest run.

Under ``mpirun -n K python -m pytest --with-mpi`` every rank already runs Python with
torch and hpcgnn imported.  :func:`run_job` runs a job's entry point there, on every
rank, as ``mpirun -n K python script.py ARGS`` would run it, without a new launch:

    from hpcgnn.testing import run_job, shared_tmpdir
    from hpcgnn.train.node_classification import main

    @pytest.mark.mpi(min_size=4)
    def test_my_job(capfd):
        with shared_tmpdir() as d:
            job = run_job(main, ["--part-config", cfg, "--run-dir", f"{d}/run", ...], capfd)
            assert job.returncode == 0, job.stderr

Each call is a job of its own: ``hpcgnn.initialize`` splits the world into roles,
and ``ctx.finalize`` releases them, so calls can follow each other in one process.
What a launch adds on top (the process's exit, ``mpirun``'s handling of a dead or
aborting rank, signals) still needs a launch of its own.
"""
from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
from typing import Callable, Iterator, Sequence

from .comm.mpi import serialized, world


@dataclasses.dataclass
class Job:
    """What a job gave, as :class:`subprocess.CompletedProcess` has it for a launch:
    ``returncode`` the highest exit status over the ranks (what ``mpirun`` returns),
    ``stdout``/``stderr`` every rank's output in rank order (with a capture given),
    ``rank_returncode`` this rank's own status."""
    returncode: int
    stdout: str
    stderr: str
    rank_returncode: int


def run_job(main: Callable[[list], int | None], argv: Sequence[str], capture=None, comm=None) -> Job:
    """Collective over ``comm`` (default the world): ``main(argv)`` on every rank.
    Trainers return ``main``'s value; server and sampler ranks serve until the
    trainers finish and then end the process (``SystemExit``), whose status is taken
    here instead.  ``capture``: pytest's ``capfd`` (anything with ``readouterr()``),
    read before and after the job so the result holds this job's output only."""
    comm = comm or world()
    if capture is not None:
        capture.readouterr()
    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = e.code
    rc = 0 if rc is None else rc if isinstance(rc, int) else 1
    out, err = capture.readouterr() if capture is not None else ("", "")
    every = _allgather(comm, (rc, out, err))
    return Job(max(r for r, _, _ in every), "".join(o for _, o, _ in every), "".join(e for _, _, e in every), rc)


@contextlib.contextmanager
def shared_tmpdir(comm=None) -> Iterator[str]:
    """Collective: a temporary directory common to every rank of ``comm`` (default
    the world), which must share a file system (one host, or a shared ``TMPDIR``);
    rank 0 makes it and removes it after everyone is done with it."""
    comm = comm or world()
    path = tempfile.mkdtemp(prefix="hpcgnn-test-") if comm.Get_rank() == 0 else None
    path = _bcast(comm, path)
    try:
        yield path
    finally:
        _allgather(comm, None)
        if comm.Get_rank() == 0:
            shutil.rmtree(path, ignore_errors=True)


@serialized
def _allgather(comm, obj):
    return comm.allgather(obj)


@serialized
def _bcast(comm, obj):
    return comm.bcast(obj, root=0)
