"""``dgl.nn.pytorch``'s name for :mod:`hpcgnn.nn` (``import hpcgnn.nn.pytorch as dglnn``)."""
from . import GATConv, GATv2Conv, GINConv, GraphConv, SAGEConv  # noqa: F401
from . import HeteroBlock, HeteroGraphConv, RelGraphConv, TypedLinear, WeightBasis, to_hetero_blocks  # noqa: F401

__all__ = ["SAGEConv", "GraphConv", "GINConv", "GATConv", "GATv2Conv", "RelGraphConv", "TypedLinear", "WeightBasis",
           "HeteroGraphConv", "HeteroBlock", "to_hetero_blocks"]
