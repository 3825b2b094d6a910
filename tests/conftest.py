"""Test-suite plumbing.

* In a multi-rank run (``mpirun -n K python -m pytest --with-mpi``) a failed test
  aborts the whole job: the other ranks would otherwise wait in a collective that
  the failing rank never enters.
* ``mpi_launch`` runs a command under a fresh ``mpirun`` from a single-process test.
* Every child ``mpirun`` the suite starts (through ``mpi_launch``, the namespace test
  bed or a test's own ``subprocess``) is seen here: a test that starts one must be
  marked ``slow`` (``scripts/test.sh --quick`` leaves those out; an unmarked one fails
  at its launch), and with ``HPCGNN_TEST_LAUNCH_LOG`` set each launch is appended to
  that file for ``tests/launch_count.py``, which holds the count under its limit.
"""
import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _world_size():
    mod = sys.modules.get("mpi4py.MPI")
    if mod is None or not mod.Is_initialized():
        return 1
    return mod.COMM_WORLD.Get_size()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # Under mpirun only rank 0 writes the junit report (one file, no races).
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    if rank != 0 and getattr(config.option, "xmlpath", None):
        config.option.xmlpath = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and _world_size() > 1:
        from mpi4py import MPI

        sys.stderr.write(f"\n[rank {MPI.COMM_WORLD.Get_rank()}] FAILED {item.nodeid} ({rep.when}):\n"
                         f"{rep.longreprtext}\n")
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)


_running: list = [None]          # the test being set up, run or torn down
_popen_init = subprocess.Popen.__init__


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _running[0] = item


def _seen_popen(self, args, *rest, **kw):
    """``subprocess.Popen`` as the suite sees it: a child ``mpirun`` is checked and
    counted before it starts (see the module's docstring)."""
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    if argv and os.path.basename(str(argv[0])) == "mpirun" and _world_size() == 1:
        item = _running[0]
        where = item.nodeid if item is not None else "(outside a test)"
        if item is not None and item.get_closest_marker("slow") is None:
            raise RuntimeError(f"{where} starts a child mpirun: mark it @pytest.mark.slow "
                               "(scripts/test.sh --quick leaves such tests out)")
        log = os.environ.get("HPCGNN_TEST_LAUNCH_LOG")
        if log:
            with open(log, "a") as f:
                cmd = " ".join(str(a) for a in argv).replace("\n", "\\n")[:300]    # one line per launch
                f.write(f"{where}\t{cmd}\n")
    _popen_init(self, args, *rest, **kw)


subprocess.Popen.__init__ = _seen_popen


def clean_mpi_env(extra=None, gpus=False):
    """The environment for a child ``mpirun``: no variables of the parent's launch.
    Children see no GPU unless ``gpus`` (``device=auto`` then means the CPU on every
    host, so runs compared with each other take the same path on a GPU machine)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "HYDRA_", "MPI_LOCAL", "OPAL_"))
           and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONUNBUFFERED="1")
    # the repository, and tests/ for a test file run as a script (its harness, user_models)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(ROOT, "tests"), env.get("PYTHONPATH", "")])
    if extra:
        env.update(extra)
    return env


def modules_loaded(code: str, roots) -> list[str]:
    """The modules under the top-level packages ``roots`` that a fresh Python process has
    loaded after running ``code`` (what a command's imports pull in; a plain process,
    not a launch)."""
    probe = f"{code}\nimport sys; print(sorted(m for m in sys.modules if m.split('.')[0] in {tuple(roots)!r}))"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env=clean_mpi_env())
    assert res.returncode == 0, res.stderr
    return ast.literal_eval(res.stdout.strip().splitlines()[-1])


def mpi_launch(n, argv, timeout=120, env=None, mca=(), gpus=False):
    """Run ``mpirun -n n argv`` and return the CompletedProcess (never raises on rc)."""
    cmd = ["mpirun", "--oversubscribe", "-n", str(n)]
    for key, val in mca:
        cmd += ["--mca", key, val]
    cmd += list(argv)
    return subprocess.run(cmd, env=clean_mpi_env(env, gpus), capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


@pytest.fixture
def mpirun():
    return mpi_launch


@pytest.fixture
def shared_tmp():
    """A temporary directory common to every rank of the run (rank 0 makes it and
    removes it after the test); pytest's ``tmp_path`` is per rank."""
    from hpcgnn.testing import shared_tmpdir

    with shared_tmpdir() as path:
        yield path


@pytest.fixture
def shared_dir(shared_tmp):
    """A temporary directory that every rank of the test's job sees (conftest's)."""
    return shared_tmp


def served_layout(size):
    """``(layout, ranks_per_node, num_parts)`` for a served launch on ``size`` ranks:
    two-rank virtual nodes (server + trainer, one partition each) when the size is even
    and at least 4, else one node with one server and the rest trainers."""
    if size >= 4 and size % 2 == 0:
        return "servers=1,samplers=0,trainers=1", 2, size // 2
    return "servers=1,samplers=0,trainers=rest", None, 1
