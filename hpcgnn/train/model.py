"""GraphSAGE from PyTorch Geometric's ``SAGEConv``, written so that one layer can
run on its own (for layer-wise inference)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SAGE(nn.Module):
    """``num_layers`` mean-aggregation ``SAGEConv`` layers with ReLU and dropout
    between them.  ``forward`` takes a :class:`~hpcgnn.sampling.MiniBatch`'s fields
    and trims the sampled graph layer by layer (PyG's ``trim_to_layer``), so layer
    ``i`` only computes the nodes that later layers still need."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float = 0.5):
        super().__init__()
        from torch_geometric.nn import SAGEConv

        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.convs = nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout
        self.dims = dims

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer(self, i: int, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = self.convs[i](x, edge_index)
        if i < self.num_layers - 1:
            x = F.relu(x)
            x = F.dropout(x, p=self.dropout, training=self.training)
        return x

    def forward(self, x, edge_index, num_sampled_nodes=None, num_sampled_edges=None):
        from torch_geometric.utils import trim_to_layer

        for i in range(self.num_layers):
            if num_sampled_nodes is not None:
                x, edge_index, _ = trim_to_layer(i, num_sampled_nodes, num_sampled_edges, x, edge_index)
            x = self.layer(i, x, edge_index)
        return x if num_sampled_nodes is None else x[: num_sampled_nodes[0]]
