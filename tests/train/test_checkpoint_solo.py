"""The checkpoint one trainer writes alone when a peer's death ends the job: every
trainer of the resumed run gets its state; a run of another size refuses it."""
import pytest
import torch

from hpcgnn.comm.mpi import MPI
from hpcgnn.errors import InputError
from hpcgnn.train import checkpoint


def test_a_solo_checkpoint_gives_its_state_to_every_trainer(tmp_path):
    w = torch.arange(6.0).reshape(2, 3)
    path = checkpoint.save_solo(str(tmp_path), 7, {"graph": "g"}, {"model": {"w": w}},
                                {"rng": torch.ones(2), "solo": "rank 1"}, trainers=1)
    assert path.endswith("step-7.h5") and checkpoint.complete(str(tmp_path)) == [path]
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))
    step, replicated, own = checkpoint.load(MPI.COMM_SELF, path, {"graph": "g"})
    assert step == 7 and torch.equal(replicated["model"]["w"], w) and own["solo"] == "rank 1"
    with pytest.raises(InputError, match="checkpoint field 'graph' is 'g', this run has 'h'"):
        checkpoint.load(MPI.COMM_SELF, path, {"graph": "h"})


def test_a_solo_checkpoint_of_another_trainer_count_is_refused(tmp_path):
    path = checkpoint.save_solo(str(tmp_path), 3, {}, {"model": {}}, {"rng": None}, trainers=2)
    with pytest.raises(InputError, match="written by 2 trainers, this run has 1"):
        checkpoint.load(MPI.COMM_SELF, path, {})
