"""DGL's graph layers (``dgl.nn``, ``dgl.nn.pytorch``) on hpcgnn's blocks: a DGL model
runs with ``import hpcgnn.nn as dglnn`` in place of ``import dgl.nn as dglnn``.

Each layer takes DGL's constructor arguments in DGL's order and has DGL's parameter
names (a DGL ``state_dict`` of it loads), and is called as ``layer(block, feat)`` or
``layer(block, (feat_src, feat_dst))`` with a block from hpcgnn's data loaders.
"""
from .gatconv import GATConv, GATv2Conv
from .graphconv import GINConv, GraphConv
from .heteroblock import HeteroBlock, to_hetero_blocks
from .heteroconv import HeteroGraphConv
from .relgraphconv import RelGraphConv, TypedLinear, WeightBasis
from .sageconv import SAGEConv

__all__ = ["SAGEConv", "GraphConv", "GINConv", "GATConv", "GATv2Conv",
           "RelGraphConv", "TypedLinear", "WeightBasis", "HeteroGraphConv", "HeteroBlock", "to_hetero_blocks"]
