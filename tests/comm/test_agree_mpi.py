"""Agreed errors (hpcgnn.comm.agree) at 1-4 ranks, in process: one rank's error is
raised on every rank, naming that rank, also when its type cannot be rebuilt from a
pickle or its message cannot be formed.  (How a job ends on an agreed error, every
rank with one line: tests/e2e/test_failure.py's bad HPCGNN_FINISH_TIMEOUT.)"""
import pytest

from hpcgnn.comm.agree import agreed, agreed_over
from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import HpcgnnError

world = MPI.COMM_WORLD


def _raised(make):
    """The error ``agreed`` raises on this rank when the last rank raises ``make()``."""
    bad = world.Get_size() - 1
    with pytest.raises(Exception) as info:
        with agreed(world):
            if world.Get_rank() == bad:
                raise make()
    assert agreed_over(info.value, world)
    return info.value, bad, world.Get_rank() == bad


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_an_error_is_raised_on_every_rank_naming_the_rank():
    err, bad, _ = _raised(lambda: FileNotFoundError("graph.h5: no such file"))
    assert isinstance(err, FileNotFoundError) and str(err) == f"graph.h5: no such file [rank {bad}]"


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_an_error_that_does_not_pickle_arrives_as_its_text():
    class BadSlice(Exception):            # a local class: no pickle
        def __init__(self, path, row):
            super().__init__(f"{path}: bad row {row}")

    err, bad, mine = _raised(lambda: BadSlice("slice2.h5", 17))
    if mine:
        assert isinstance(err, BadSlice) and str(err) == "slice2.h5: bad row 17"
    else:
        assert isinstance(err, HpcgnnError) and str(err) == f"BadSlice: slice2.h5: bad row 17 [rank {bad}]"


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_an_error_whose_message_fails_is_still_named():
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no text")

    err, bad, mine = _raised(Unprintable)
    if mine:
        assert isinstance(err, Unprintable)
    else:
        assert str(err) == f"Unprintable (its message could not be formed) [rank {bad}]"
