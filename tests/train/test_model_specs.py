"""``--model`` specs that do not resolve to a model end with one line naming what
failed, before any job would start (``hpcgnn.train.zoo``; the job's path for a model
that resolves but does not fit a batch is tests/train/test_zoo_mpi.py)."""
import pytest

from hpcgnn.errors import InputError
from hpcgnn.train.zoo import build_model


@pytest.mark.parametrize("spec, words", [
    ("no_such_module_xyz:Net", "--model 'no_such_module_xyz:Net': module 'no_such_module_xyz' does not import "
                               "(ModuleNotFoundError"),
    ("user_models:NoSuchClass", "--model 'user_models:NoSuchClass': user_models has no torch.nn.Module subclass "
                                "'NoSuchClass'"),
    ("user_models:torch", "user_models has no torch.nn.Module subclass 'torch'"),
    ("nonsense", "--model 'nonsense': give one of"),
])
def test_a_spec_that_does_not_resolve_is_named(spec, words):
    with pytest.raises(InputError) as err:
        build_model(spec, 8, 16, 4, 2, 0.5)
    assert words in str(err.value)
