"""hpcgnn's messages through the ``hpcgnn`` logger; results stay on stdout."""
import json
import logging
import os

import pytest

from hpcgnn import logs
from hpcgnn.comm import failure
from hpcgnn.comm.mpi import MPI
from hpcgnn.cli.main import main, take_log_options
from hpcgnn.errors import InputError
from hpcgnn.datasets import generate_graph
from hpcgnn.partition import partition_graph
from hpcgnn.testing import on_rank0, run_job, shared_tmpdir

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def level():
    before = logs.LOGGER.level
    yield
    logs.LOGGER.setLevel(before)


def test_records_carry_rank_and_role_and_go_to_stdout_or_stderr(capsys, level):
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append((record.rank, record.role, record.getMessage()))

    logs.set_level("info")
    child = logs.get("train")
    keep = Keep()
    logs.LOGGER.addHandler(keep)
    try:
        child.info("a notice")
        child.warning("a warning")
    finally:
        logs.LOGGER.removeHandler(keep)
    who = (MPI.COMM_WORLD.Get_rank(), failure.identity.role)       # "no role" before initialize
    assert seen == [(*who, "a notice"), (*who, "a warning")]
    out, err = capsys.readouterr()
    assert out == "a notice\n" and err == "a warning\n"       # the default handler: the bare message


def test_levels_from_the_command_line(capsys, level):
    assert take_log_options(["--quiet", "info", "x"]) == ["info", "x"]
    logs.get("train").info("hidden")
    logs.get("train").warning("shown")
    assert take_log_options(["train", "--log-level", "debug", "--epochs", "1"]) == ["train", "--epochs", "1"]
    assert logs.LOGGER.level == logging.DEBUG
    assert take_log_options(["--log-level=error"]) == [] and logs.LOGGER.level == logging.ERROR
    with pytest.raises(InputError, match="--log-level: log level 'loud': choose one of debug, info, warning"):
        take_log_options(["--log-level", "loud"])
    out, err = capsys.readouterr()
    assert "hidden" not in out and err == "shown\n"


def _parts(d):
    generate_graph(os.path.join(d, "g.h5"), None, 3000, 8, 8, 4, 5, name="g")
    return partition_graph(os.path.join(d, "g.h5"), os.path.join(d, "parts"), 2, comm=MPI.COMM_SELF)


@pytest.mark.mpi(min_size=4)
@pytest.mark.slow
def test_quiet_training_prints_its_results_only(level):
    """``hpcgnn --quiet train`` on 2 virtual hosts of [server, trainer] (the 4-rank run,
    in this process)."""
    with shared_tmpdir() as d:
        cfg = on_rank0(_parts, d)
        res = run_job(main, ["--quiet", "train", "--part-config", cfg, "--layout", "servers=1,samplers=0,trainers=1",
                             "--ranks-per-node", "2", "--epochs", "1", "--progress", "off", "--run-dir",
                             os.path.join(d, "run")])
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert not any(ln.startswith("hpcgnn train:") for ln in lines), res.stdout      # the start line is a message
        assert json.loads(next(ln for ln in lines if ln.startswith('{"kind": "final"')))["test_acc"] >= 0
        assert any(ln.startswith("test accuracy:") for ln in lines) and os.path.isdir(os.path.join(d, "run"))
