"""Testing a whole hpcgnn job inside one multi-rank pytest run.

Under ``mpirun -n K python -m pytest --with-mpi`` every rank already runs Python with
torch and hpcgnn imported.  :func:`run_job` runs a job's entry point there, on every
rank, as ``mpirun -n K python script.py ARGS`` would run it, without a new launch:

    from hpcgnn.testing import run_job, shared_tmpdir
    from hpcgnn.train.node_classification import main

    @pytest.mark.mpi(min_size=4)
    def test_my_job():
        with shared_tmpdir() as d:
            job = run_job(main, ["--part-config", cfg, "--run-dir", f"{d}/run", ...])
            assert job.returncode == 0, job.stderr

Each call is a job of its own: ``hpcgnn.initialize`` splits the world into roles,
and ``ctx.finalize`` releases them, so calls can follow each other in one process.
What a launch adds on top (the process's exit, ``mpirun``'s handling of a dead or
aborting rank, signals) still needs a launch of its own.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shutil
import sys
import tempfile
from typing import Callable, Iterator, Sequence

from .comm.collectives import allgather, bcast, sleep_until_all
from .comm.mpi import world


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


def run_job(main: Callable[[list], int | None], argv: Sequence[str], capture=True, comm=None) -> Job:
    """Collective over ``comm`` (default the world): ``main(argv)`` on every rank.
    Trainers return ``main``'s value; server and sampler ranks serve until the
    trainers finish and then end the process (``SystemExit``), whose status is taken
    here instead.  ``capture``: the job's output is held in the result and not
    printed (``True``: file descriptors 1 and 2 and ``sys.stdout``/``stderr``
    redirected while it runs; pytest's ``capfd`` also works), or left alone
    (``False``)."""
    comm = comm or world()
    with _output(capture) as output:
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code
    rc = 0 if rc is None else rc if isinstance(rc, int) else 1
    every = allgather(comm, (rc, *output))
    return Job(max(r for r, _, _ in every), "".join(o for _, o, _ in every), "".join(e for _, _, e in every), rc)


@contextlib.contextmanager
def _output(capture) -> Iterator[list]:
    """``[stdout, stderr]`` written inside the block (filled at its end)."""
    out = ["", ""]
    if hasattr(capture, "readouterr"):
        capture.readouterr()
        try:
            yield out
        finally:
            out[:] = capture.readouterr()
        return
    if not capture:
        yield out
        return
    streams = ("stdout", "stderr")
    files = [tempfile.TemporaryFile() for _ in streams]
    saved = []
    for fd, name, f in zip((1, 2), streams, files):
        getattr(sys, name).flush()
        saved.append((os.dup(fd), getattr(sys, name)))
        os.dup2(f.fileno(), fd)
        setattr(sys, name, io.TextIOWrapper(os.fdopen(os.dup(fd), "wb"), line_buffering=True))
    try:
        yield out
    finally:
        for i, ((fd_saved, stream), name, f) in enumerate(zip(saved, streams, files)):
            getattr(sys, name).close()           # flushed into the file, through fd 1 or 2
            os.dup2(fd_saved, i + 1)
            os.close(fd_saved)
            setattr(sys, name, stream)
            f.seek(0)
            out[i] = f.read().decode(errors="replace")
            f.close()


def on_rank0(fn: Callable, *args, comm=None, poll_s: float = 0.02):
    """Collective over ``comm`` (default the world): ``fn(*args)`` on rank 0 alone
    (with ``MPI.COMM_SELF`` for anything collective it does), its value returned on
    every rank.  The other ranks sleep while they wait instead of spinning in MPI,
    so an oversubscribed test run leaves rank 0 the cores."""
    comm = comm or world()
    out, err = None, None
    if comm.Get_rank() == 0:
        try:
            out = fn(*args)
        except BaseException as e:          # every rank raises it
            err = e
    sleep_until_all(comm, poll_s)
    out, err = bcast(comm, (out, err))
    if err is not None:
        raise err
    return out


@contextlib.contextmanager
def shared_tmpdir(comm=None) -> Iterator[str]:
    """Collective: a temporary directory common to every rank of ``comm`` (default
    the world), which must share a file system (one host, or a shared ``TMPDIR``);
    rank 0 makes it and removes it after everyone is done with it."""
    comm = comm or world()
    path = tempfile.mkdtemp(prefix="hpcgnn-test-") if comm.Get_rank() == 0 else None
    path = bcast(comm, path)
    try:
        yield path
    finally:
        allgather(comm, None)
        if comm.Get_rank() == 0:
            shutil.rmtree(path, ignore_errors=True)
