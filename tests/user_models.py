"""Users' own models for ``hpcgnn train --model user_models:ClassName`` (tests/train/test_zoo_mpi.py
puts tests/ on the child mpirun's PYTHONPATH).  Built with PyG's BasicGNN keywords."""
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import SAGEConv


class BlockSAGE(nn.Module):
    """``forward(x, adjs)`` on the per-layer blocks; no ``layer()``: sampled inference."""

    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=2, dropout=0.5):
        super().__init__()
        dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x, adjs):
        for i, (conv, (adj, size)) in enumerate(zip(self.convs, adjs)):
            x = conv((x, x[: size[1]]), adj)
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), self.dropout, self.training)
        return x


class EdgeIndexSAGE(BlockSAGE):
    """The PyG ``NeighborLoader`` way: ``forward(x, edge_index)``, every node in every layer."""

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), self.dropout, self.training)
        return x


class BadForward(BlockSAGE):
    """A forward that does not fit the batch: its first layer expects other widths."""

    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=2, dropout=0.5):
        super().__init__(in_channels, hidden_channels, out_channels, num_layers, dropout)
        self.lin = nn.Linear(in_channels + 3, out_channels)

    def forward(self, x, adjs):
        return self.lin(x[: adjs[-1].num_dst])


class WrongOutput(BlockSAGE):
    """One column more than there are classes."""

    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=2, dropout=0.5):
        super().__init__(in_channels, hidden_channels, out_channels + 1, num_layers, dropout)
