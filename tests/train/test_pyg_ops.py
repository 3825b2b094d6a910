"""PyG is loaded by the first model or kernel that uses it, not by the training
commands: server and sampler ranks, and GraphSAGE with hpcgnn's kernels, never pay
its start-up (about 2 s and 100 MB per process)."""
import pytest

from conftest import modules_loaded
from hpcgnn.train import pyg_ops


def test_the_training_commands_do_not_import_pyg():
    code = ("import hpcgnn.cli.train, hpcgnn.train.node_classification, hpcgnn.train.link_prediction, "
            "hpcgnn.train.rgcn, hpcgnn.train.trainer")
    assert [m for m in modules_loaded(code, ["torch_geometric", "torch"])
            if m.startswith(("torch_geometric", "torch._dynamo"))] == []


def test_names_load_on_first_use():
    pytest.importorskip("torch_geometric")
    from torch_geometric.nn import GATConv
    from torch_geometric.utils import softmax

    assert pyg_ops.GATConv is GATConv and pyg_ops.softmax is softmax
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchConv'"):
        pyg_ops.NoSuchConv
