"""R-GCN- and R-GAT-style models for heterogeneous mini-batches, from PyTorch
Geometric's ``HeteroConv`` with ``SAGEConv`` (R-GCN) or ``GATConv`` (R-GAT, as the
MLPerf GNN benchmark uses): one convolution per canonical edge type, summed at each
destination type (relation-specific weights)."""
from __future__ import annotations

import torch
from torch import nn

from .kernels import mean_adjacency, relu_dropout


class RGCN(nn.Module):
    """``in_dims``: node type -> feature width, for the types that have features;
    every other type of ``ntypes`` starts from a learned vector of its own.  Inputs
    are projected to ``hidden``, then ``num_layers`` layers, each a ``HeteroConv`` (one
    ``SAGEConv`` per edge type, summed) plus a per-type self-connection (ReLU and
    dropout between them), compute the seeds' ``out_dim`` logits.  ``conv="gat"``:
    one single-head ``GATConv`` per edge type instead (R-GAT), attending over the
    sampled edges."""

    def __init__(self, in_dims: dict, ntypes, canonical_etypes, hidden: int, out_dim: int, num_layers: int,
                 dropout: float = 0.5, conv: str = "sage"):
        super().__init__()
        # PyG loaded by the code that uses it (start-up cost)
        from torch_geometric.nn import GATConv, HeteroConv, SAGEConv

        self.inputs = nn.ModuleDict({t: nn.Linear(int(d), hidden) for t, d in in_dims.items()})
        self.embed = nn.ParameterDict({t: nn.Parameter(0.1 * torch.randn(hidden))
                                       for t in ntypes if t not in in_dims})
        dims = [hidden] * num_layers + [out_dim]
        if conv not in ("sage", "gat"):
            raise ValueError(f"RGCN: conv must be 'sage' or 'gat', got {conv!r}")
        self.conv_kind = conv

        def make(a, b):
            return GATConv((a, a), b, add_self_loops=False) if conv == "gat" else SAGEConv(a, b)
        self.convs = nn.ModuleList(
            HeteroConv({tuple(et): make(a, b) for et in canonical_etypes}, aggr="sum")
            for a, b in zip(dims[:-1], dims[1:]))
        # R-GCN's self-connection W_0 per node type: every node gets an output, also one
        # that no sampled edge reaches (a seed without in-edges)
        self.roots = nn.ModuleList(nn.ModuleDict({t: nn.Linear(a, b, bias=False) for t in ntypes})
                                   for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout
        self.dims = dims

    def forward(self, x_dict: dict, edge_index_dict: dict, num_nodes: dict, seed_type: str,
                batch_size: int) -> torch.Tensor:
        """Logits of the first ``batch_size`` nodes of ``seed_type`` (the seeds of a
        :class:`~hpcgnn.sampling.hetero.HeteroBatch`)."""
        h = {}
        for t, n in num_nodes.items():
            h[t] = self.inputs[t](x_dict[t].float()) if t in self.inputs else self.embed[t].expand(n, -1)
        last = len(self.convs) - 1
        # every layer computes every node of the batch: one adjacency per relation
        # (attention needs the edges themselves)
        edges = {k: v if self.conv_kind == "gat" else mean_adjacency(v, h[k[2]].shape[0], h[k[0]].shape[0],
                                                                     h[k[0]].dtype)
                 for k, v in edge_index_dict.items() if k[0] in h and k[2] in h}
        for i, conv in enumerate(self.convs):
            msg = conv(h, edges) if edges else {}
            out = {t: self.roots[i][t](v) + msg[t] if t in msg else self.roots[i][t](v) for t, v in h.items()}
            if i < last:
                out = {t: relu_dropout(v, p=self.dropout, training=self.training) for t, v in out.items()}
            h = out
        return h[seed_type][:batch_size]
