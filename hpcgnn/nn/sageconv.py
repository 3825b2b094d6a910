"""DGL's ``SAGEConv`` on hpcgnn's blocks: same arguments, parameter names and output."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import DGLError
from . import graphops as ops


def expand_as_pair(in_feats) -> tuple[int, int]:
    """``(in_src, in_dst)`` from one width or a pair (DGL's helper of that name)."""
    return tuple(in_feats) if isinstance(in_feats, (tuple, list)) else (in_feats, in_feats)


class SAGEConv(nn.Module):
    """GraphSAGE's layer as DGL defines it: ``aggregator_type`` ``mean``, ``gcn``,
    ``pool`` or ``lstm``; ``fc_neigh`` (and ``fc_self`` except for ``gcn``, which has a
    ``bias`` of its own; ``fc_pool`` / ``lstm`` for those aggregators).  Called as
    ``layer(block, feat)`` or ``layer(block, (feat_src, feat_dst))``; sums and means
    are one product with the block's CSR."""

    def __init__(self, in_feats, out_feats, aggregator_type, feat_drop=0.0, bias=True, norm=None,
                 activation=None):
        super().__init__()
        if aggregator_type not in ("mean", "gcn", "pool", "lstm"):
            raise DGLError(f"SAGEConv: aggregator_type must be mean, gcn, pool or lstm, got {aggregator_type!r}")
        self._in_src_feats, self._in_dst_feats = expand_as_pair(in_feats)
        self._out_feats, self._aggre_type = out_feats, aggregator_type
        self.norm, self.activation = norm, activation
        self.feat_drop = nn.Dropout(feat_drop)
        if aggregator_type == "pool":
            self.fc_pool = nn.Linear(self._in_src_feats, self._in_src_feats)
        if aggregator_type == "lstm":
            self.lstm = nn.LSTM(self._in_src_feats, self._in_src_feats, batch_first=True)
        self.fc_neigh = nn.Linear(self._in_src_feats, out_feats, bias=False)
        if aggregator_type != "gcn":
            self.fc_self = nn.Linear(self._in_dst_feats, out_feats, bias=bias)
        elif bias:
            self.bias = nn.Parameter(torch.zeros(out_feats))
        else:
            self.register_buffer("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        gain = nn.init.calculate_gain("relu")
        if self._aggre_type == "pool":
            nn.init.xavier_uniform_(self.fc_pool.weight, gain=gain)
        if self._aggre_type == "lstm":
            self.lstm.reset_parameters()
        if self._aggre_type != "gcn":
            nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)

    def forward(self, graph, feat, edge_weight=None):
        g = ops.structure("SAGEConv", graph)
        feat_src, feat_dst = ops.split_feat("SAGEConv", g, feat, self._in_src_feats, self._in_dst_feats)
        feat_src = self.feat_drop(feat_src)
        feat_dst = self.feat_drop(feat_dst) if isinstance(feat, (tuple, list)) else feat_src[:g.num_dst]
        if edge_weight is not None and edge_weight.shape[0] != g.num_edges:
            raise DGLError(f"SAGEConv: edge_weight has {edge_weight.shape[0]} entries, the block {g.num_edges} edges")
        before = self._in_src_feats > self._out_feats       # project first when that shrinks the messages
        if self._aggre_type == "mean":       # unprojected rows: _self_plus applies fc_neigh
            h_neigh = ops.aggregate(g, self.fc_neigh(feat_src) if before else feat_src, "mean", edge_weight)
        elif self._aggre_type == "gcn":
            if feat_src.shape[1:] != feat_dst.shape[1:]:
                raise DGLError(f"SAGEConv('gcn'): source and destination features differ in width: "
                               f"{tuple(feat_src.shape)} and {tuple(feat_dst.shape)}")
            src = self.fc_neigh(feat_src) if before else feat_src
            dst = (self.fc_neigh(feat_dst) if before else feat_dst) if isinstance(feat, (tuple, list)) \
                else src[:g.num_dst]
            total = ops.aggregate(g, src, "sum", edge_weight) + dst
            h = total / (ops.in_degrees(g, feat_dst.dtype).unsqueeze(-1) + 1)
            h_neigh = h if before else self.fc_neigh(h)
        elif self._aggre_type == "pool":
            h_neigh = ops.aggregate(g, F.relu(self.fc_pool(feat_src)), "max", edge_weight)
        else:
            h_neigh = self._lstm(g, feat_src, edge_weight)
        if self._aggre_type == "gcn":
            rst = h_neigh if self.bias is None else h_neigh + self.bias
        else:
            rst = self._self_plus(feat_dst, h_neigh, projected=before and self._aggre_type == "mean")
        if self.activation is not None:
            rst = self.activation(rst)
        if self.norm is not None:
            rst = self.norm(rst)
        return rst

    def _self_plus(self, feat_dst: torch.Tensor, h_neigh: torch.Tensor, projected: bool) -> torch.Tensor:
        """``fc_self(feat_dst) + h_neigh`` in one product: with ``h_neigh`` already
        projected, added by the product itself; else both inputs side by side
        against both weights (one weight-gradient product instead of two, and no
        separate sum)."""
        w, b = self.fc_self.weight, self.fc_self.bias
        if feat_dst.dim() != 2 or h_neigh.dim() != 2:
            return self.fc_self(feat_dst) + (h_neigh if projected else self.fc_neigh(h_neigh))
        if projected:
            out = torch.addmm(h_neigh, feat_dst, w.t())
            return out if b is None else out + b
        both = torch.cat([feat_dst, h_neigh], dim=1)
        weight = torch.cat([w, self.fc_neigh.weight], dim=1)
        return torch.mm(both, weight.t()) if b is None else torch.addmm(b, both, weight.t())

    def _lstm(self, g: ops.Graph, feat_src: torch.Tensor, edge_weight) -> torch.Tensor:
        """Each destination's in-edges' messages, in edge order, through the LSTM: its
        last hidden state (destinations grouped by in-degree, as DGL's reducer; zeros
        without in-edges)."""
        msg = feat_src[g.src]
        if edge_weight is not None:
            msg = msg * edge_weight.reshape(-1, 1).to(msg.dtype)
        out = msg.new_zeros((g.num_dst, self._in_src_feats))
        order = torch.argsort(g.dst, stable=True)         # edges grouped by destination, in edge order
        deg = torch.bincount(g.dst, minlength=g.num_dst)
        start = torch.cumsum(deg, 0) - deg
        for d in torch.unique(deg[deg > 0]).tolist():      # one LSTM call per distinct in-degree
            nodes = torch.nonzero(deg == d).flatten()
            pos = start[nodes].unsqueeze(1) + torch.arange(d, device=deg.device)
            seq = msg[order[pos]]                           # [nodes, d, D]
            _, (h, _) = self.lstm(seq, (seq.new_zeros(1, len(nodes), self._in_src_feats),) * 2)
            out = out.index_copy(0, nodes, h.squeeze(0))
        return out
