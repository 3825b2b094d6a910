"""``dgl.nn.pytorch``'s name for :mod:`hpcgnn.nn` (``import hpcgnn.nn.pytorch as dglnn``)."""
from . import GATConv, GATv2Conv, GINConv, GraphConv, SAGEConv, __all__  # noqa: F401
from . import HeteroBlock, HeteroGraphConv, RelGraphConv, TypedLinear, WeightBasis, to_hetero_blocks  # noqa: F401
