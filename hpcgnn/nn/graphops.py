"""What :mod:`hpcgnn.nn`'s layers do on a block: split the input features into the
sources' and the destinations' rows, aggregate along the edges, count degrees and
normalise attention scores per destination.

A block (:class:`~hpcgnn.sampling.Block`, as hpcgnn's DGL-style loaders yield, or
a :class:`~hpcgnn.sampling.blocks.LayerAdj` from ``MiniBatch.adjs``) has ``num_src``
sources, of which the first ``num_dst`` are its destinations, and ``E`` edges
``src -> dst`` in local ids.  Sums and means over plain rows are one product with
the block's CSR (built once per batch by the compiled pass); the rest (a maximum,
edge weights, per-head messages) scatters with torch's indexed reductions.  All of
it runs where the tensors are (CPU or GPU), with no per-edge Python.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import DGLError, InputError
from ..sampling.batch import Block
from ..sampling.blocks import LayerAdj
from .compiled import csr_mean


@dataclass
class Graph:
    """A block's structure as the layers use it."""
    src: torch.Tensor          # [E] local source ids
    dst: torch.Tensor          # [E] local destination ids
    num_src: int
    num_dst: int
    adj: LayerAdj | None       # the CSR, when the block has one
    block: object = None       # what the user passed

    @property
    def num_edges(self) -> int:
        return int(self.src.numel())


def structure(layer: str, graph) -> Graph:
    """The :class:`Graph` of ``graph`` (a Block or a LayerAdj); anything else raises
    InputError naming ``layer``."""
    if isinstance(graph, Graph):
        return graph
    if isinstance(graph, Block):
        ei = graph.edge_index
        return Graph(ei[0], ei[1], len(graph.src_nodes), len(graph.dst_nodes), graph.adj, graph)
    if isinstance(graph, LayerAdj):
        return Graph(graph.edge_index[0], graph.edge_index[1], graph.num_src, graph.num_dst, graph, graph)
    if isinstance(graph, (list, tuple)) and graph and isinstance(graph[0], Block):
        raise InputError(f"{layer}: given a list of {len(graph)} blocks; a layer takes one (blocks[i])")
    raise InputError(f"{layer}: expected a block (hpcgnn.sampling.Block, as the data loaders yield, or one of "
                     f"MiniBatch.adjs), got {type(graph).__name__}")


def split_feat(layer: str, g: Graph, feat, in_src: int | None = None, in_dst: int | None = None):
    """``(feat_src, feat_dst)``: a pair as given, else ``feat`` and its first
    ``num_dst`` rows (a block's destinations lead its sources).  Checks the rows
    against the block and the widths against ``in_src``/``in_dst`` (InputError
    naming ``layer`` and the shapes)."""
    if isinstance(feat, (tuple, list)):
        if len(feat) != 2:
            raise InputError(f"{layer}: features are a tensor or a (source, destination) pair, got {len(feat)}")
        feat_src, feat_dst = feat
    else:
        feat_src, feat_dst = feat, None
    if not isinstance(feat_src, torch.Tensor):
        raise InputError(f"{layer}: features must be a tensor, got {type(feat_src).__name__}")
    if feat_src.shape[0] != g.num_src:
        raise InputError(f"{layer}: the block has {g.num_src} source nodes but the features have "
                         f"{feat_src.shape[0]} rows {tuple(feat_src.shape)} (a block of another layer's depth?)")
    if feat_dst is None:
        feat_dst = feat_src[:g.num_dst]
    elif feat_dst.shape[0] != g.num_dst:
        raise InputError(f"{layer}: the block has {g.num_dst} destination nodes but the destination features "
                         f"have {feat_dst.shape[0]} rows {tuple(feat_dst.shape)}")
    for what, t, want in (("source", feat_src, in_src), ("destination", feat_dst, in_dst)):
        if want is not None and (t.dim() < 2 or t.shape[-1] != want):
            raise InputError(f"{layer}: expects {want} input features, the {what} features have shape "
                             f"{tuple(t.shape)}")
    return feat_src, feat_dst


def in_degrees(g: Graph, dtype=None) -> torch.Tensor:
    """Edges into each destination ``[num_dst]`` (from the CSR's row pointers when
    there is one)."""
    if g.adj is not None:
        crow = g.adj[0].crow_indices()
        deg = crow[1:] - crow[:-1]
    else:
        deg = torch.bincount(g.dst, minlength=g.num_dst)
    return deg if dtype is None else deg.to(dtype)


def out_degrees(g: Graph, dtype=None) -> torch.Tensor:
    """Edges out of each source within the block ``[num_src]``."""
    deg = torch.bincount(g.src, minlength=g.num_src)
    return deg if dtype is None else deg.to(dtype)


def aggregate(g: Graph, x: torch.Tensor, how: str = "sum", edge_weight: torch.Tensor | None = None,
              per_edge: bool = False) -> torch.Tensor:
    """Per destination, the ``how`` (sum, mean, max, min) of its in-edges' messages:
    ``x`` holds a row per source (``[num_src, ...]``), or with ``per_edge`` one per
    edge (``[E, ...]``, in the block's edge order); ``edge_weight`` ``[E]`` multiplies
    each edge's message.  A destination without in-edges gets zeros (as DGL)."""
    if x.shape[0] != (g.num_edges if per_edge else g.num_src):
        raise InputError(f"aggregate: {tuple(x.shape)} rows, the block has {g.num_src} sources and "
                         f"{g.num_edges} edges (per_edge={per_edge})")
    if (how in ("sum", "mean") and edge_weight is None and not per_edge and x.dim() == 2 and g.adj is not None
            and x.is_floating_point()):
        adj = g.adj[0]
        fast = csr_mean(adj, x) if how == "mean" else None     # the compiled kernels (CPU, float32)
        if fast is not None:
            return fast
        if adj.dtype != x.dtype or adj.device != x.device:
            adj = adj.to(device=x.device, dtype=x.dtype)
        out = adj @ x
        if how == "mean":
            out = out / in_degrees(g, x.dtype).clamp(min=1).unsqueeze(-1)
        return out
    msg = x if per_edge else x[g.src]
    if edge_weight is not None:
        msg = msg * edge_weight.reshape(-1, *([1] * (msg.dim() - 1))).to(msg.dtype)
    out = msg.new_zeros((g.num_dst, *msg.shape[1:]))
    idx = g.dst.reshape(-1, *([1] * (msg.dim() - 1))).expand_as(msg)
    if how in ("sum", "mean"):
        out = out.index_add(0, g.dst, msg)
        if how == "mean":
            deg = in_degrees(g, msg.dtype).clamp(min=1)
            out = out / deg.reshape(-1, *([1] * (msg.dim() - 1)))
        return out
    if how in ("max", "min"):
        return out.scatter_reduce(0, idx, msg, "amax" if how == "max" else "amin", include_self=False)
    raise InputError(f"aggregate: 'how' must be sum, mean, max or min, got {how!r}")


def edge_softmax(g: Graph, scores: torch.Tensor) -> torch.Tensor:
    """``scores`` (``[E, ...]``) normalised over each destination's in-edges (DGL's
    ``edge_softmax`` on a block)."""
    idx = g.dst.reshape(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
    top = scores.new_full((g.num_dst, *scores.shape[1:]), float("-inf"))
    top = top.scatter_reduce(0, idx, scores.detach(), "amax", include_self=True)
    e = torch.exp(scores - top[g.dst])
    total = e.new_zeros((g.num_dst, *scores.shape[1:])).index_add(0, g.dst, e)
    return e / total[g.dst]


def check_zero_in_degree(layer: str, g: Graph) -> None:
    """DGL's refusal of destinations without in-edges (their output would be
    invalid) unless the layer was built with ``allow_zero_in_degree=True``."""
    if g.num_dst and bool((in_degrees(g) == 0).any()):
        raise DGLError(f"{layer}: the block has destination nodes without in-edges, whose output would be "
                       "invalid; add self-loops (hpcgnn generate --self-loops; docs/distributed.md), or build "
                       "the layer with allow_zero_in_degree=True")


class ZeroInDegreeCheck:
    """DGL's ``allow_zero_in_degree`` for a layer (a mixin): the layer's
    ``_allow_zero_in_degree``, ``set_allow_zero_in_degree`` and
    :meth:`checked_structure`."""

    _allow_zero_in_degree = False

    def set_allow_zero_in_degree(self, set_value: bool) -> None:
        """Turn the check for destinations without in-edges off (True) or on."""
        self._allow_zero_in_degree = set_value

    def checked_structure(self, graph) -> Graph:
        """``graph``'s structure (:func:`structure`), refused when it has destinations
        without in-edges and the layer does not allow them."""
        name = type(self).__name__
        g = structure(name, graph)
        if not self._allow_zero_in_degree:
            check_zero_in_degree(name, g)
        return g
