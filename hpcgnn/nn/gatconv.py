"""Graph attention layers on a block, interchangeable with DGL 2.x's
``dgl.nn.GATConv`` and ``dgl.nn.GATv2Conv`` (same arguments, parameter names and
shapes, initialisation and outputs), so a DGL model's ``state_dict`` loads as is.

GAT scores an edge ``j -> i`` as ``LeakyReLU(a_l . W h_j + a_r . W h_i)``; GATv2 as
``a . LeakyReLU(W_src h_j + W_dst h_i)``.  Scores are normalised over each
destination's in-edges and weight the sources' projected features.
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import InputError
from .compiled import CsrAttend
from .graphops import Graph, ZeroInDegreeCheck, aggregate, edge_softmax, split_feat

__all__ = ["GATConv", "GATv2Conv"]


def _pair(in_feats):
    """``(in_src, in_dst)``: a tuple as given, else the one width twice (as DGL)."""
    return in_feats if isinstance(in_feats, tuple) else (in_feats, in_feats)


def _attend(g: Graph, feat_src: torch.Tensor, scores: torch.Tensor, attn_drop: nn.Module,
            edge_weight: torch.Tensor | None = None, num_heads: int = 1):
    """Softmax ``scores`` ``[E, *, H, 1]`` per destination, drop, scale by the edge
    weights, and sum the weighted source features: ``(rst, attention)``."""
    a = attn_drop(edge_softmax(g, scores))
    if edge_weight is not None:
        a = a * edge_weight.tile(1, num_heads, 1).transpose(0, 2)
    return aggregate(g, feat_src[g.src] * a, "sum", per_edge=True), a


def _check_2d(layer: str, *feats) -> None:
    for t in feats:
        if t.dim() != 2:
            raise InputError(f"{layer}: expects 2-D features [nodes, in_feats], got shape {tuple(t.shape)}")


class GATConv(ZeroInDegreeCheck, nn.Module):
    """Multi-head graph attention (Velickovic et al., GAT) on a block.

    ``forward(graph, feat, edge_weight=None, get_attention=False)`` returns
    ``[num_dst, *, num_heads, out_feats]`` and, with ``get_attention``, the edge
    attention ``[E, *, num_heads, 1]``.  ``feat`` is a tensor ``[num_src, *, in]``
    (the destinations are its first ``num_dst`` rows) or a (source, destination)
    pair; a tuple ``in_feats`` gives separate ``fc_src``/``fc_dst`` projections.
    ``residual`` adds ``res_fc(h_dst)``: a Linear (carrying the bias) when the
    widths differ, else the identity plus a separate ``bias``.
    """

    def __init__(self, in_feats, out_feats, num_heads, feat_drop=0.0, attn_drop=0.0, negative_slope=0.2,
                 residual=False, activation=None, allow_zero_in_degree=False, bias=True):
        super().__init__()
        self._num_heads = num_heads
        self._in_src_feats, self._in_dst_feats = _pair(in_feats)
        self._out_feats = out_feats
        self._allow_zero_in_degree = allow_zero_in_degree
        width = out_feats * num_heads
        if isinstance(in_feats, tuple):
            self.fc_src = nn.Linear(self._in_src_feats, width, bias=False)
            self.fc_dst = nn.Linear(self._in_dst_feats, width, bias=False)
        else:
            self.fc = nn.Linear(self._in_src_feats, width, bias=False)
        self.attn_l = nn.Parameter(torch.empty((1, num_heads, out_feats), dtype=torch.float32))
        self.attn_r = nn.Parameter(torch.empty((1, num_heads, out_feats), dtype=torch.float32))
        self.feat_drop = nn.Dropout(feat_drop)
        self.attn_drop = nn.Dropout(attn_drop)
        self.leaky_relu = nn.LeakyReLU(negative_slope)
        self.has_linear_res = False
        self.has_explicit_bias = False
        if residual:
            if self._in_dst_feats != width:
                self.res_fc = nn.Linear(self._in_dst_feats, width, bias=bias)
                self.has_linear_res = True
            else:
                self.res_fc = nn.Identity()
        else:
            self.register_buffer("res_fc", None)
        if bias and not self.has_linear_res:
            self.bias = nn.Parameter(torch.empty((width,), dtype=torch.float32))
            self.has_explicit_bias = True
        else:
            self.register_buffer("bias", None)
        self.reset_parameters()
        self.activation = activation

    def reset_parameters(self):
        """Xavier-normal (ReLU gain) projections and attention vectors, zero biases."""
        gain = nn.init.calculate_gain("relu")
        if hasattr(self, "fc"):
            nn.init.xavier_normal_(self.fc.weight, gain=gain)
        else:
            nn.init.xavier_normal_(self.fc_src.weight, gain=gain)
            nn.init.xavier_normal_(self.fc_dst.weight, gain=gain)
        nn.init.xavier_normal_(self.attn_l, gain=gain)
        nn.init.xavier_normal_(self.attn_r, gain=gain)
        if self.has_explicit_bias:
            nn.init.constant_(self.bias, 0)
        if isinstance(self.res_fc, nn.Linear):
            nn.init.xavier_normal_(self.res_fc.weight, gain=gain)
            if self.res_fc.bias is not None:
                nn.init.constant_(self.res_fc.bias, 0)

    def forward(self, graph, feat, edge_weight=None, get_attention=False):
        """Attention-weighted sum of the sources' projected features per destination."""
        name = type(self).__name__
        g = self.checked_structure(graph)
        heads, out = self._num_heads, self._out_feats
        if isinstance(feat, (tuple, list)):
            src_in, dst_in = split_feat(name, g, feat, self._in_src_feats, self._in_dst_feats)
            dst_prefix = dst_in.shape[:-1]
            h_src, h_dst = self.feat_drop(src_in), self.feat_drop(dst_in)
            fc_src, fc_dst = (self.fc, self.fc) if hasattr(self, "fc") else (self.fc_src, self.fc_dst)
            feat_src = fc_src(h_src).view(*src_in.shape[:-1], heads, out)
            feat_dst = fc_dst(h_dst).view(*dst_prefix, heads, out)
        else:
            if not hasattr(self, "fc"):
                raise InputError(f"{name}: built with in_feats=({self._in_src_feats}, {self._in_dst_feats}), so "
                                 f"feat must be a (source, destination) pair, got one tensor {tuple(feat.shape)}")
            split_feat(name, g, feat, self._in_src_feats, self._in_dst_feats)
            h_src = self.feat_drop(feat)
            feat_src = self.fc(h_src).view(*feat.shape[:-1], heads, out)
            feat_dst, h_dst = feat_src[:g.num_dst], h_src[:g.num_dst]
            dst_prefix = (g.num_dst,) + tuple(feat.shape[1:-1])
        fast = None if edge_weight is not None or get_attention else \
            self._compiled(g, h_src, h_dst, feat_src, isinstance(feat, (tuple, list)))
        if fast is not None:
            rst, attention = fast, None
        else:
            el = (feat_src * self.attn_l).sum(dim=-1).unsqueeze(-1)
            er = (feat_dst * self.attn_r).sum(dim=-1).unsqueeze(-1)
            scores = self.leaky_relu(el[g.src] + er[g.dst])
            rst, attention = _attend(g, feat_src, scores, self.attn_drop, edge_weight, heads)
        if self.res_fc is not None and h_dst.numel() != 0:
            rst = rst + self.res_fc(h_dst).view(*dst_prefix, -1, out)
        if self.has_explicit_bias:
            rst = rst + self.bias.view(*((1,) * len(dst_prefix)), heads, out)
        if self.activation:
            rst = self.activation(rst)
        return (rst, attention) if get_attention else rst


    def _compiled(self, g: Graph, h_src, h_dst, feat_src, pair: bool):
        """The attention sum along the block's CSR, compiled (a CPU, float32, 2-D
        features, one projection), else None: the logits' halves from the inputs and
        the projection folded with ``attn_l``/``attn_r`` (``[n, heads]`` products, no
        ``[n, heads, out]`` ones), the softmax per destination, and no per-edge
        message tensor in the forward or the backward."""
        if (g.adj is None or pair or feat_src.dim() != 3 or h_src.dtype != torch.float32
                or h_src.device.type != "cpu" or not hasattr(self, "fc")):
            return None
        heads, out = self._num_heads, self._out_feats
        w = self.fc.weight.view(heads, out, -1)
        el = h_src @ (w * self.attn_l.view(heads, out, 1)).sum(1).t()           # [num_src, heads]
        er = h_dst @ (w * self.attn_r.view(heads, out, 1)).sum(1).t()           # [num_dst, heads]
        adj = g.adj[0]
        crow, col = adj.crow_indices(), adj.col_indices()
        row = torch.repeat_interleave(torch.arange(g.num_dst, device=crow.device), crow[1:] - crow[:-1])
        csr = Graph(col, row, g.num_src, g.num_dst, None)
        alpha = self.attn_drop(edge_softmax(csr, self.leaky_relu(el[col] + er[row])))
        return CsrAttend.apply(feat_src, alpha, crow, col)


class GATv2Conv(ZeroInDegreeCheck, nn.Module):
    """GATv2 (Brody et al.) attention on a block: the nonlinearity sits between the
    projection and the attention vector, so the ranking of sources can depend on the
    destination.

    ``forward(graph, feat, get_attention=False)`` returns ``[num_dst, num_heads,
    out_feats]`` (and the attention ``[E, num_heads, 1]``).  ``fc_src`` projects the
    sources (and is the message), ``fc_dst`` the destinations; ``share_weights``
    makes them one Linear.  Biases live in the Linears (``bias``); ``residual`` adds
    ``res_fc(h_dst)`` (a Linear when the widths differ, else the identity).
    """

    def __init__(self, in_feats, out_feats, num_heads, feat_drop=0.0, attn_drop=0.0, negative_slope=0.2,
                 residual=False, activation=None, allow_zero_in_degree=False, bias=True, share_weights=False):
        super().__init__()
        self._num_heads = num_heads
        self._in_src_feats, self._in_dst_feats = _pair(in_feats)
        self._out_feats = out_feats
        self._allow_zero_in_degree = allow_zero_in_degree
        width = out_feats * num_heads
        self.fc_src = nn.Linear(self._in_src_feats, width, bias=bias)
        if isinstance(in_feats, tuple):
            self.fc_dst = nn.Linear(self._in_dst_feats, width, bias=bias)
        elif share_weights:
            self.fc_dst = self.fc_src
        else:
            self.fc_dst = nn.Linear(self._in_src_feats, width, bias=bias)
        self.attn = nn.Parameter(torch.empty((1, num_heads, out_feats), dtype=torch.float32))
        self.feat_drop = nn.Dropout(feat_drop)
        self.attn_drop = nn.Dropout(attn_drop)
        self.leaky_relu = nn.LeakyReLU(negative_slope)
        if residual:
            if self._in_dst_feats != width:
                self.res_fc = nn.Linear(self._in_dst_feats, width, bias=bias)
            else:
                self.res_fc = nn.Identity()
        else:
            self.register_buffer("res_fc", None)
        self.activation = activation
        self.share_weights = share_weights
        self.bias = bias
        self.reset_parameters()

    def reset_parameters(self):
        """Xavier-normal (ReLU gain) projections and attention vector, zero biases."""
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_normal_(self.fc_src.weight, gain=gain)
        if self.bias:
            nn.init.constant_(self.fc_src.bias, 0)
        if not self.share_weights:
            nn.init.xavier_normal_(self.fc_dst.weight, gain=gain)
            if self.bias:
                nn.init.constant_(self.fc_dst.bias, 0)
        nn.init.xavier_normal_(self.attn, gain=gain)
        if isinstance(self.res_fc, nn.Linear):
            nn.init.xavier_normal_(self.res_fc.weight, gain=gain)
            if self.bias:
                nn.init.constant_(self.res_fc.bias, 0)

    def forward(self, graph, feat, get_attention=False):
        """Attention-weighted sum of the sources' ``fc_src`` features per destination."""
        name = type(self).__name__
        g = self.checked_structure(graph)
        heads, out = self._num_heads, self._out_feats
        if isinstance(feat, (tuple, list)):
            src_in, dst_in = split_feat(name, g, feat, self._in_src_feats, self._in_dst_feats)
            _check_2d(name, src_in, dst_in)
            h_src, h_dst = self.feat_drop(src_in), self.feat_drop(dst_in)
            feat_src = self.fc_src(h_src).view(-1, heads, out)
            feat_dst = self.fc_dst(h_dst).view(-1, heads, out)
        else:
            split_feat(name, g, feat, self._in_src_feats, self._in_dst_feats)
            _check_2d(name, feat)
            h_src = self.feat_drop(feat)
            h_dst = h_src[:g.num_dst]
            feat_src = self.fc_src(h_src).view(-1, heads, out)
            # Row-wise projection: projecting only the destinations' rows gives DGL's rows.
            feat_dst = feat_src[:g.num_dst] if self.share_weights else self.fc_dst(h_dst).view(-1, heads, out)
        e = self.leaky_relu(feat_src[g.src] + feat_dst[g.dst])
        scores = (e * self.attn).sum(dim=-1).unsqueeze(dim=2)
        rst, attention = _attend(g, feat_src, scores, self.attn_drop)
        if self.res_fc is not None and h_dst.numel() != 0:
            rst = rst + self.res_fc(h_dst).view(h_dst.shape[0], -1, out)
        if self.activation:
            rst = self.activation(rst)
        return (rst, attention) if get_attention else rst
