"""DGL 2.x's relational layers on hpcgnn's blocks: ``RelGraphConv`` (R-GCN), the
per-type linear map it uses (``TypedLinear``) and ``WeightBasis`` (a basis-combined
weight stack, as DGL's distributed R-GCN example uses), with DGL's arguments,
parameter names and shapes (a DGL ``state_dict`` loads strictly) and outputs.

Edges are grouped by relation with one stable sort; no Python runs per edge.
``RelGraphConv`` sums per (destination, relation) first and applies every
relation's weight in one product when that is smaller than transforming each edge
(``num_dst * num_rels <= E``), else transforms the edges relation by relation.
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from ..errors import DGLError, InputError
from . import graphops as ops

__all__ = ["RelGraphConv", "TypedLinear", "WeightBasis"]


class TypedLinear(nn.Module):
    """``y_i = x_i @ W[t_i]``: a linear map chosen by each row's type ``t_i``.
    ``regularizer``: None (``W`` ``[num_types, in, out]``), ``"basis"`` (``W``
    ``[num_bases, in, out]`` mixed by ``coeff`` ``[num_types, num_bases]``) or
    ``"bdd"`` (block-diagonal: ``W`` ``[num_types, num_bases * in/B * out/B]``)."""

    def __init__(self, in_size, out_size, num_types, regularizer=None, num_bases=None):
        super().__init__()
        self.in_size, self.out_size, self.num_types = in_size, out_size, num_types
        if regularizer is None:
            self.W = nn.Parameter(torch.empty(num_types, in_size, out_size))
        elif regularizer in ("basis", "bdd"):
            if num_bases is None:
                raise DGLError(f'TypedLinear: regularizer "{regularizer}" needs num_bases')
            self.num_bases = num_bases
            if regularizer == "basis":
                self.W = nn.Parameter(torch.empty(num_bases, in_size, out_size))
                self.coeff = nn.Parameter(torch.empty(num_types, num_bases))
            else:
                if in_size % num_bases or out_size % num_bases:
                    raise DGLError(f"TypedLinear: bdd needs in_size ({in_size}) and out_size ({out_size}) "
                                   f"divisible by num_bases ({num_bases})")
                self.submat_in, self.submat_out = in_size // num_bases, out_size // num_bases
                self.W = nn.Parameter(torch.empty(num_types, num_bases * self.submat_in * self.submat_out))
        else:
            raise DGLError(f'TypedLinear: regularizer must be None, "basis" or "bdd", got {regularizer!r}')
        self.regularizer = regularizer
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            fan = self.submat_in if self.regularizer == "bdd" else self.in_size
            nn.init.uniform_(self.W, -1 / math.sqrt(fan), 1 / math.sqrt(fan))
            if self.regularizer == "basis":
                nn.init.xavier_uniform_(self.coeff, gain=nn.init.calculate_gain("relu"))

    def get_weight(self) -> torch.Tensor:
        """The per-type weights: ``[num_types, in, out]`` (bdd: its stored blocks)."""
        if self.regularizer == "basis":
            return (self.coeff @ self.W.view(self.num_bases, -1)).view(self.num_types, self.in_size, self.out_size)
        return self.W

    def _apply(self, x: torch.Tensor, w_t: torch.Tensor) -> torch.Tensor:
        """Rows ``x`` of one type through that type's weight."""
        if self.regularizer == "bdd":
            blocks = w_t.view(self.num_bases, self.submat_in, self.submat_out)
            return torch.einsum("nbi,bio->nbo", x.reshape(-1, self.num_bases, self.submat_in),
                                blocks).reshape(-1, self.out_size)
        return x @ w_t

    def forward(self, x, x_type, sorted_by_type=False):
        """``[N, in]`` rows of types ``x_type`` ``[N]`` -> ``[N, out]``.  Rows are grouped
        by type with one stable sort (skipped with ``sorted_by_type``, which trusts
        that ``x_type`` is non-decreasing) and each group takes one product."""
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != self.in_size:
            raise InputError(f"TypedLinear: expects input [N, {self.in_size}], got "
                             f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        x_type = torch.as_tensor(x_type, device=x.device)
        if x_type.shape != (x.shape[0],):
            raise InputError(f"TypedLinear: x_type has shape {tuple(x_type.shape)}, the input {tuple(x.shape)} "
                             f"(one type per row)")
        x_type = x_type.long()
        counts = []
        if x.shape[0]:
            lo, hi = torch.stack(list(torch.aminmax(x_type))).tolist()
            if lo < 0 or hi >= self.num_types:
                raise InputError(f"TypedLinear: x_type holds types in [{lo}, {hi}], outside [0, {self.num_types})")
            counts = torch.bincount(x_type, minlength=self.num_types).tolist()
        w = self.get_weight()
        order = None if sorted_by_type else torch.argsort(x_type, stable=True)
        xs = x if order is None else x[order]
        parts = [self._apply(seg, w[t]) for t, seg in enumerate(torch.split(xs, counts)) if len(seg)]
        if not parts:
            return x.new_zeros((0, self.out_size))
        ys = torch.cat(parts)
        return ys if order is None else torch.empty_like(ys).index_copy(0, order, ys)

    def sum_typed(self, h: torch.Tensor) -> torch.Tensor:
        """``sum_t h[:, t] @ W[t]`` for ``h`` ``[N, num_types, in]``: every type's map in
        one product."""
        n = h.shape[0]
        if self.regularizer is None:
            return h.reshape(n, -1) @ self.W.reshape(-1, self.out_size)
        if self.regularizer == "basis":
            mixed = torch.einsum("nti,tb->nbi", h, self.coeff)
            return mixed.reshape(n, -1) @ self.W.reshape(-1, self.out_size)
        blocks = self.W.view(self.num_types, self.num_bases, self.submat_in, self.submat_out)
        hb = h.reshape(n, self.num_types, self.num_bases, self.submat_in)
        return torch.einsum("ntbi,tbio->nbo", hb, blocks).reshape(n, self.out_size)

    def __repr__(self) -> str:
        extra = "" if self.regularizer is None else f", regularizer={self.regularizer}, num_bases={self.num_bases}"
        return f"TypedLinear(in_size={self.in_size}, out_size={self.out_size}, num_types={self.num_types}{extra})"


class WeightBasis(nn.Module):
    """``num_outputs`` weights of ``shape``, each a combination (``w_comp``
    ``[num_outputs, num_bases]``) of ``num_bases`` bases (``weight``
    ``[num_bases, *shape]``); ``forward()`` returns them ``[num_outputs, *shape]``."""

    def __init__(self, shape, num_bases, num_outputs):
        super().__init__()
        self.shape, self.num_bases, self.num_outputs = shape, num_bases, num_outputs
        if num_outputs <= num_bases:
            warnings.warn(f"WeightBasis: {num_outputs} outputs from {num_bases} bases; a basis saves parameters "
                          "only with more outputs than bases", stacklevel=2)
        self.weight = nn.Parameter(torch.empty(num_bases, *shape))
        nn.init.xavier_uniform_(self.weight, gain=nn.init.calculate_gain("relu"))
        self.w_comp = nn.Parameter(torch.empty(num_outputs, num_bases))
        nn.init.xavier_uniform_(self.w_comp, gain=nn.init.calculate_gain("relu"))

    def forward(self):
        return (self.w_comp @ self.weight.view(self.num_bases, -1)).view(self.num_outputs, *self.shape)


def _edge_types(g: ops.Graph, etypes, num_rels: int) -> torch.Tensor:
    """The ``[E]`` relation ids (the block's own ``e_type`` when None), checked."""
    if etypes is None:
        etypes = getattr(g.block, "e_type", None)
        if etypes is None:
            raise InputError(f"RelGraphConv: no etypes given and the block ({g.num_src} sources, {g.num_dst} "
                             f"destinations, {g.num_edges} edges) has no edge types (block.edata[ETYPE])")
    etypes = torch.as_tensor(etypes, device=g.src.device)
    if etypes.shape != (g.num_edges,):
        raise DGLError(f"RelGraphConv: etypes has shape {tuple(etypes.shape)}, the block has {g.num_edges} edges "
                       f"(one relation id per edge: [{g.num_edges}])")
    etypes = etypes.long()
    if g.num_edges:
        lo, hi = torch.aminmax(etypes)
        lo, hi = torch.stack([lo, hi]).tolist()
        if lo < 0 or hi >= num_rels:
            raise InputError(f"RelGraphConv: etypes hold relation ids in [{lo}, {hi}], the layer has "
                             f"num_rels={num_rels}")
    return etypes


class RelGraphConv(nn.Module):
    """R-GCN (Schlichtkrull et al.) as DGL 2.x defines it: a destination sums its
    in-edges' ``W_r h_src`` (``linear_r``, a :class:`TypedLinear` with an optional
    ``basis`` / ``bdd`` regularizer), each times the edge's ``norm`` when given;
    then ``layer_norm_weight`` (``layer_norm``), ``h_bias`` (``bias``), the
    self-loop ``h_dst @ loop_weight`` (``self_loop``), ``activation``, ``dropout``.

    ``forward(g, feat, etypes, norm=None, *, presorted=False)``: ``g`` a block,
    ``feat`` ``[num_src, in_feat]`` (its first ``num_dst`` rows the destinations'),
    ``etypes`` the ``[E]`` relation ids (``block.edata[hpcgnn.ETYPE]``; None takes
    the block's), ``norm`` ``[E, 1]`` (or ``[E]``); ``presorted``: the edges come
    sorted by relation."""

    def __init__(self, in_feat, out_feat, num_rels, regularizer=None, num_bases=None, bias=True, activation=None,
                 self_loop=True, dropout=0.0, layer_norm=False):
        super().__init__()
        if regularizer is not None and num_bases is None:
            num_bases = num_rels
        self.linear_r = TypedLinear(in_feat, out_feat, num_rels, regularizer, num_bases)
        self.bias, self.activation, self.self_loop, self.layer_norm = bias, activation, self_loop, layer_norm
        if bias:
            self.h_bias = nn.Parameter(torch.zeros(out_feat))
        if layer_norm:
            self.layer_norm_weight = nn.LayerNorm(out_feat, elementwise_affine=True)
        if self_loop:
            self.loop_weight = nn.Parameter(torch.empty(in_feat, out_feat))
            nn.init.xavier_uniform_(self.loop_weight, gain=nn.init.calculate_gain("relu"))
        self.dropout = nn.Dropout(dropout)
        self._order = None      # "nodes" / "edges" forces an aggregation order (tests); None chooses

    def forward(self, g, feat, etypes=None, norm=None, *, presorted=False):
        gr = ops.structure("RelGraphConv", g)
        lin = self.linear_r
        feat_src, feat_dst = ops.split_feat("RelGraphConv", gr, feat, lin.in_size,
                                            lin.in_size if self.self_loop else None)
        etypes = _edge_types(gr, etypes, lin.num_types)
        if norm is not None:
            norm = torch.as_tensor(norm, device=feat_src.device)
            if norm.dim() == 0 or norm.shape[0] != gr.num_edges:
                raise DGLError(f"RelGraphConv: norm has shape {tuple(norm.shape)}, the block has {gr.num_edges} "
                               f"edges (expected [{gr.num_edges}, 1])")
            norm = norm.to(feat_src.dtype)
        per_edge_scalar = norm is None or norm.numel() == gr.num_edges
        order = self._order or ("nodes" if gr.num_dst * lin.num_types <= gr.num_edges else "edges")
        if order == "nodes" and per_edge_scalar:
            msg = feat_src[gr.src]
            if norm is not None:
                msg = msg * norm.reshape(-1, 1)
            key = gr.dst * lin.num_types + etypes
            h = msg.new_zeros((gr.num_dst * lin.num_types, lin.in_size)).index_add(0, key, msg)
            h = lin.sum_typed(h.view(gr.num_dst, lin.num_types, lin.in_size))
        else:
            m = lin(feat_src[gr.src], etypes, presorted)
            if norm is not None:
                m = m * (norm.reshape(-1, 1) if norm.dim() == 1 else norm)
            h = ops.aggregate(gr, m, "sum", per_edge=True)
        if self.layer_norm:
            h = self.layer_norm_weight(h)
        if self.bias:
            h = h + self.h_bias
        if self.self_loop:
            h = h + feat_dst @ self.loop_weight
        if self.activation:
            h = self.activation(h)
        return self.dropout(h)
