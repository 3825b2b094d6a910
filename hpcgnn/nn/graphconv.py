"""DGL's ``GraphConv`` and ``GINConv`` on hpcgnn's blocks: same arguments, parameter
names and output."""
from __future__ import annotations

import torch
from torch import nn

from ..errors import DGLError
from . import graphops as ops


def _by(norm: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return norm.reshape(norm.shape + (1,) * (like.dim() - 1))


def _check_edge_weight(layer: str, g: ops.Graph, edge_weight) -> None:
    if edge_weight is not None and edge_weight.shape[0] != g.num_edges:
        raise DGLError(f"{layer}: edge_weight has {edge_weight.shape[0]} entries, the block {g.num_edges} edges")


class GraphConv(ops.ZeroInDegreeCheck, nn.Module):
    """Kipf and Welling's graph convolution as DGL defines it: ``weight``
    ``[in_feats, out_feats]``, ``bias``; ``norm`` ``both`` (``1/sqrt`` of the
    source's out-degree and the destination's in-degree, counted in the block),
    ``right`` (mean), ``left`` or ``none``."""

    def __init__(self, in_feats, out_feats, norm="both", weight=True, bias=True, activation=None,
                 allow_zero_in_degree=False):
        super().__init__()
        if norm not in ("none", "both", "right", "left"):
            raise DGLError(f"GraphConv: norm must be none, both, right or left, got {norm!r}")
        self._in_feats, self._out_feats, self._norm = in_feats, out_feats, norm
        self._allow_zero_in_degree = allow_zero_in_degree
        if weight:
            self.weight = nn.Parameter(torch.empty(in_feats, out_feats))
        else:
            self.register_parameter("weight", None)
        if bias:
            self.bias = nn.Parameter(torch.empty(out_feats))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        self._activation = activation

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, graph, feat, weight=None, edge_weight=None):
        g = self.checked_structure(graph)
        _check_edge_weight("GraphConv", g, edge_weight)
        feat_src, feat_dst = ops.split_feat("GraphConv", g, feat, self._in_feats, None)
        if self._norm in ("left", "both"):
            degs = ops.out_degrees(g, feat_src.dtype).clamp(min=1)
            feat_src = feat_src * _by(degs.rsqrt() if self._norm == "both" else degs.reciprocal(), feat_src)
        if weight is not None and self.weight is not None:
            raise DGLError("GraphConv: an external weight was given to a layer that has its own; build it with "
                           "weight=False")
        weight = self.weight if weight is None else weight
        if self._in_feats > self._out_feats:      # project first: smaller messages
            rst = ops.aggregate(g, feat_src @ weight if weight is not None else feat_src, "sum", edge_weight)
        else:
            rst = ops.aggregate(g, feat_src, "sum", edge_weight)
            if weight is not None:
                rst = rst @ weight
        if self._norm in ("right", "both"):
            degs = ops.in_degrees(g, feat_dst.dtype).clamp(min=1)
            rst = rst * _by(degs.rsqrt() if self._norm == "both" else degs.reciprocal(), feat_dst)
        if self.bias is not None:
            rst = rst + self.bias
        if self._activation is not None:
            rst = self._activation(rst)
        return rst

    def extra_repr(self) -> str:
        return f"in={self._in_feats}, out={self._out_feats}, normalization={self._norm}"


class GINConv(nn.Module):
    """The graph isomorphism layer as DGL defines it: ``(1 + eps) * h_dst`` plus the
    ``aggregator_type`` (sum, max, mean) of the in-neighbours, through
    ``apply_func``; ``eps`` a parameter with ``learn_eps``, else a buffer."""

    def __init__(self, apply_func=None, aggregator_type="sum", init_eps=0, learn_eps=False, activation=None):
        super().__init__()
        if aggregator_type not in ("sum", "max", "mean"):
            raise KeyError(f"GINConv: aggregator type {aggregator_type!r} not recognized (sum, max or mean)")
        self.apply_func, self._aggregator_type, self.activation = apply_func, aggregator_type, activation
        if learn_eps:
            self.eps = nn.Parameter(torch.FloatTensor([init_eps]))
        else:
            self.register_buffer("eps", torch.FloatTensor([init_eps]))

    def forward(self, graph, feat, edge_weight=None):
        g = ops.structure("GINConv", graph)
        _check_edge_weight("GINConv", g, edge_weight)
        feat_src, feat_dst = ops.split_feat("GINConv", g, feat)
        rst = (1 + self.eps) * feat_dst + ops.aggregate(g, feat_src, self._aggregator_type, edge_weight)
        if self.apply_func is not None:
            rst = self.apply_func(rst)
        if self.activation is not None:
            rst = self.activation(rst)
        return rst
