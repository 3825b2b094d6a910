"""GraphSAGE from PyTorch Geometric's ``SAGEConv``, written so that one layer can
run on its own (for layer-wise inference)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..graph.row_refs import RowRefs
from ..sampling.blocks import LayerAdj
from .kernels import (bias_relu_dropout, bias_relu_dropout_mean, csr_mean, linear_before_dropout, mean_adjacency,
                      relu_dropout)


class SAGE(nn.Module):
    """``num_layers`` mean-aggregation ``SAGEConv`` layers with ReLU and dropout
    between them.  ``forward`` takes a :class:`~hpcgnn.sampling.MiniBatch`'s fields;
    ``layer`` runs one layer alone (layer-wise inference)."""

    #: what it declares to the tasks: ``x`` may be the rows' addresses (``RowRefs``,
    #: read in place by the first layer on a CPU), and ``forward(x, edge_index,
    #: num_sampled_nodes, num_sampled_edges)`` trims each layer to its hops
    takes_row_refs = True
    takes_hop_counts = True

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float = 0.5):
        super().__init__()
        from torch_geometric.nn import SAGEConv   # PyG loaded by the code that uses it (start-up cost)

        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        self.convs = nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout
        self.dims = dims

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer(self, i: int, x: torch.Tensor, edge_index, num_dst: int | None = None) -> torch.Tensor:
        """Layer ``i`` on a bipartite graph: messages from the rows of ``x`` to its
        first ``num_dst`` rows (all rows when None), the only ones computed.
        ``edge_index`` may be a block (:class:`~hpcgnn.sampling.blocks.LayerAdj`)."""
        if isinstance(edge_index, LayerAdj):
            num_dst = edge_index.num_dst
        return self._layer(i, x, edge_index, num_dst)

    def _fast(self, i: int, x: torch.Tensor) -> bool:
        conv = self.convs[i]
        return x.device.type == "cpu" and conv.lin_l.weight.device.type == "cpu" and conv.aggr == "mean" \
            and conv.root_weight and conv.lin_r.bias is None and not conv.project

    def _layer(self, i: int, x, edge_index: torch.Tensor, num_dst: int | None = None, defer: bool = False):
        """Layer ``i``; ``x`` may be ``(h, bias)`` from a layer before it that left
        its activation to this one.  ``defer``: a layer followed by relu and dropout
        may return ``(h, bias)``, the product without them, for the next layer to
        apply while it aggregates (:func:`bias_relu_dropout_mean`).  ``x`` may also be a
        :class:`~hpcgnn.graph.row_refs.RowRefs` (rows read in place by the mean; copied
        first where the layer cannot)."""
        block = edge_index if isinstance(edge_index, LayerAdj) else None
        edge_index = block.edge_index if block is not None else edge_index
        pending = x[1] if isinstance(x, tuple) else None
        h = x[0] if isinstance(x, tuple) else x
        if isinstance(h, RowRefs) and (h.dtype != torch.float32 or not self._fast(i, h)):
            h = h.materialize().to(self.convs[i].lin_l.weight.device)
        nd = h.shape[0] if num_dst is None else num_dst
        conv = self.convs[i]
        if self._fast(i, h):
            # SAGEConv's lin_l(mean) + lin_r(root) as one sparse product giving [mean | root]
            # row by row (see mean_adjacency) and one dense product with [W_l | W_r]
            adj = mean_adjacency(edge_index, nd, h.shape[0], h.dtype, with_root=True)
            if pending is None:
                both = csr_mean(adj, h)
            else:
                both = bias_relu_dropout_mean(h, pending, adj, p=self.dropout, training=self.training)
            both = both.view(nd, 2 * h.shape[1])
            w = torch.cat([conv.lin_l.weight, conv.lin_r.weight], 1)
            if i < self.num_layers - 1 and not conv.normalize:       # bias, relu, dropout in one pass
                # (their zeros make the weight's gradient sparse: linear_before_dropout)
                prod = linear_before_dropout(both, w, self.dropout, self.training)
                if defer and conv.lin_l.bias is not None:
                    return prod, conv.lin_l.bias
                return bias_relu_dropout(prod, conv.lin_l.bias, p=self.dropout, training=self.training)
            x = both @ w.t() if conv.lin_l.bias is None else torch.addmm(conv.lin_l.bias, both, w.t())
            if conv.normalize:
                x = F.normalize(x, p=2.0, dim=-1)
        else:
            if pending is not None:
                h = bias_relu_dropout(h, pending, p=self.dropout, training=self.training)
            if block is not None and block.adj_t.device == h.device and block.num_dst == nd:
                adj_t = block.adj_t        # the batch's own block (built off the step): mean over its rows
            else:
                adj_t = mean_adjacency(edge_index, nd, h.shape[0], h.dtype)
            x = conv((h, h[:nd]), adj_t)
        if i < self.num_layers - 1:
            x = relu_dropout(x, p=self.dropout, training=self.training)
        return x

    def forward(self, x, adjs, num_sampled_nodes=None, num_sampled_edges=None):
        """``adjs``: a batch's per-layer blocks (``MiniBatch.adjs``), or its
        ``edge_index`` with the counts below.  ``num_sampled_nodes``/``num_sampled_edges`` (per hop, as a
        :class:`~hpcgnn.sampling.MiniBatch` has them): layer ``i`` reads the nodes of
        hops ``<= L-i`` along the edges of hops ``<= L-i`` and computes only the
        nodes of hops ``< L-i`` (DGL's message-flow graphs; PyG's
        ``trim_to_layer`` would compute every remaining node).  Returns the seeds'
        rows.  Without them: full-graph layers.  ``x``: a tensor, or the rows'
        addresses (:class:`~hpcgnn.graph.row_refs.RowRefs`, from a loader with
        ``feature_rows="refs"``), which the first layer reads in place."""
        if isinstance(adjs, (list, tuple)) and adjs and isinstance(adjs[0], LayerAdj):
            for i, adj in enumerate(adjs):
                h = x[0] if isinstance(x, tuple) else x
                if h.shape[0] != adj.num_src:
                    h = h.head(adj.num_src) if isinstance(h, RowRefs) else h[: adj.num_src]
                    x = (h, x[1]) if isinstance(x, tuple) else h
                x = self._layer(i, x, adj, num_dst=adj.num_dst, defer=i + 1 < len(adjs))
            return x
        edge_index = adjs
        if num_sampled_nodes is None:
            for i in range(self.num_layers):
                x = self._layer(i, x, edge_index, defer=i + 1 < self.num_layers)
            return x
        L = self.num_layers
        ncum = [0]
        for c in num_sampled_nodes:
            ncum.append(ncum[-1] + int(c))
        ecum = [0]
        for c in num_sampled_edges:
            ecum.append(ecum[-1] + int(c))
        for i in range(L):
            hops = L - i
            h = x[0] if isinstance(x, tuple) else x
            if h.shape[0] != ncum[hops + 1]:      # (a slice's backward costs a zero-filled copy)
                h = h.head(ncum[hops + 1]) if isinstance(h, RowRefs) else h[: ncum[hops + 1]]
                x = (h, x[1]) if isinstance(x, tuple) else h
            x = self._layer(i, x, edge_index[:, : ecum[hops]], num_dst=ncum[hops], defer=i + 1 < L)
        return x
