"""PyG's layers and operators that the model zoo and the kernels use, loaded on their
first use: ``from . import pyg_ops as pyg`` then ``pyg.GATConv(...)``.

Importing ``torch_geometric`` costs about 2 s and 100 MB per process (it imports
``torch._dynamo``).  Server and sampler ranks run the same script as the trainers
but never build a model, and GraphSAGE with hpcgnn's kernels on a CPU needs none of
these: loaded here, on first use, none of those ranks pays for PyG.
"""
from __future__ import annotations

import importlib

#: name -> the PyG module that defines it
_WHERE = {"GATConv": "torch_geometric.nn", "GCNConv": "torch_geometric.nn", "GINConv": "torch_geometric.nn",
          "SAGEConv": "torch_geometric.nn", "spmm": "torch_geometric.utils", "softmax": "torch_geometric.utils"}


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value            # the next use is a plain attribute
    return value
