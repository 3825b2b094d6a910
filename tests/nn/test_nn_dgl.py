"""hpcgnn.nn's layers give DGL's outputs: each case of tests/data/dgl_layers.pt (made
by bench/dgl_peer/layers.py with DGL 2.1) holds a block, its inputs, the DGL layer's
state_dict and its output; the hpcgnn layer of the same name loads that state_dict
as it is (strict) and must give the same output."""
import os

import pytest
import torch

import hpcgnn.nn as dglnn
from hpcgnn.sampling import Block

CASES = torch.load(os.path.join(os.path.dirname(__file__), os.pardir, "data", "dgl_layers.pt"), weights_only=False)


def _layer(name):
    lin = lambda: torch.nn.Linear(5, 4)  # noqa: E731
    made = {
        "sage-mean-small": lambda: dglnn.SAGEConv(5, 3, "mean"),
        "sage-mean-wide": lambda: dglnn.SAGEConv(5, 7, "mean"),
        "sage-mean-weighted": lambda: dglnn.SAGEConv(5, 3, "mean"),
        "sage-gcn-small": lambda: dglnn.SAGEConv(5, 3, "gcn"),
        "sage-gcn-wide": lambda: dglnn.SAGEConv(5, 7, "gcn"),
        "sage-pool": lambda: dglnn.SAGEConv(5, 3, "pool"),
        "sage-lstm": lambda: dglnn.SAGEConv(5, 3, "lstm"),
        "sage-pair": lambda: dglnn.SAGEConv((5, 4), 3, "mean"),
        "graphconv-wide": lambda: dglnn.GraphConv(5, 7, allow_zero_in_degree=True),
        "gin-sum": lambda: dglnn.GINConv(lin(), "sum", init_eps=0.1, learn_eps=True),
        "gin-max": lambda: dglnn.GINConv(lin(), "max"),
        "gin-mean": lambda: dglnn.GINConv(None, "mean"),
        "gat": lambda: dglnn.GATConv(5, 3, 2, allow_zero_in_degree=True),
        "gat-residual": lambda: dglnn.GATConv(5, 3, 2, residual=True, allow_zero_in_degree=True),
        "gat-residual-same": lambda: dglnn.GATConv(6, 3, 2, residual=True, allow_zero_in_degree=True),
        "gat-weighted": lambda: dglnn.GATConv(5, 3, 2, allow_zero_in_degree=True),
        "gatv2": lambda: dglnn.GATv2Conv(5, 3, 2, allow_zero_in_degree=True),
        "gatv2-shared-residual": lambda: dglnn.GATv2Conv(5, 3, 2, residual=True, share_weights=True,
                                                          allow_zero_in_degree=True),
    }
    for norm in ("both", "right", "left", "none"):
        made[f"graphconv-{norm}"] = lambda norm=norm: dglnn.GraphConv(5, 3, norm=norm, allow_zero_in_degree=True)
    return made[name]()


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_layer_gives_dgls_output(name):
    case = CASES[name]
    layer = _layer(name)
    layer.load_state_dict(case["state"], strict=True)        # DGL's parameter names and shapes
    src, dst = case["src"], case["dst"]
    n = torch.arange(case["num_src"])
    block = Block(n, n[:case["num_dst"]], torch.stack([src, dst]), torch.arange(len(src)))
    layer.eval()
    with torch.no_grad():
        out = layer(block, case["feat"], **case["kw"])
    rst, att = out if isinstance(out, tuple) else (out, None)
    torch.testing.assert_close(rst, case["out"], rtol=1e-5, atol=1e-5)
    if case["attention"] is not None:
        torch.testing.assert_close(att, case["attention"], rtol=1e-5, atol=1e-5)
