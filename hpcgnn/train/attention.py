"""Graph attention on a block without a per-edge message tensor.

PyG's ``GATConv`` gathers one ``heads x dim`` row per edge, multiplies it by the
edge's attention weight and scatters it back: on a CPU those edge-sized tensors
(~130 MB for a products-sized batch) cost two thirds of a GAT step.
:func:`gat_conv` computes the same layer from the same ``GATConv`` module's
parameters: the attention logits per edge (``heads`` numbers), PyG's softmax over
each destination's edges (by segments of the block's CSR), then one compiled
weighted sum along the CSR (``ext/src/attention.c``), forward and backward.  On a
GPU, or for ``GATConv`` settings it does not cover (edge features, a residual
connection, separate source/destination weights), it calls the layer itself.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..nn.compiled import CsrAttend as _CsrAttend
from . import pyg_ops as pyg
from ..sampling.blocks import LayerAdj


def _self_looped(adj: LayerAdj):
    """The block's CSR without its ``d -> d`` edges and with one ``d -> d`` per
    destination appended to its row (what ``GATConv`` does to an ``edge_index``)."""
    crow, col = adj.adj_t.crow_indices(), adj.adj_t.col_indices()
    nd = adj.num_dst
    counts = crow[1:] - crow[:-1]
    row = torch.repeat_interleave(torch.arange(nd), counts)
    keep = col != row
    if not bool(keep.all()):
        col, row = col[keep], row[keep]
        counts = torch.bincount(row, minlength=nd)
    new_crow = torch.zeros(nd + 1, dtype=torch.int64)
    torch.cumsum(counts + 1, 0, out=new_crow[1:])
    out = torch.empty(col.numel() + nd, dtype=torch.int64)
    loops = new_crow[1:] - 1
    mask = torch.ones(out.numel(), dtype=torch.bool)
    mask[loops] = False
    out[mask] = col
    out[loops] = torch.arange(nd)
    return new_crow, out


def _covered(conv, x: torch.Tensor) -> bool:
    return (x.device.type == "cpu" and x.dtype == torch.float32 and getattr(conv, "lin", None) is not None
            and getattr(conv, "lin_edge", None) is None and getattr(conv, "res", None) is None
            and conv.add_self_loops)


def gat_conv(conv, x: torch.Tensor, adj: LayerAdj) -> torch.Tensor:
    """``conv((x, x[:adj.num_dst]), adj.edge_index)`` for a PyG ``GATConv`` ``conv``
    on block ``adj``, without per-edge message tensors on a CPU (the same numbers up
    to the order of a sum)."""
    if not _covered(conv, x):
        return conv((x, x[: adj.num_dst]), adj.edge_index)
    H, C, nd = conv.heads, conv.out_channels, adj.num_dst
    h = conv.lin(x).view(-1, H, C)
    # the logits' halves as x @ (W folded with att): [n, H] products instead of [n, H, C]
    # products and sums, and no slice of an [n, H*C] tensor (its backward fills one)
    w = conv.lin.weight.view(H, C, -1)
    a_src = x @ (w * conv.att_src.view(H, C, 1)).sum(1).t()
    a_dst = (x @ (w * conv.att_dst.view(H, C, 1)).sum(1).t())[:nd]
    crow, col = _self_looped(adj)
    row = torch.repeat_interleave(torch.arange(nd), crow[1:] - crow[:-1])
    e = F.leaky_relu(a_src[col] + a_dst[row], conv.negative_slope)
    alpha = pyg.softmax(e, ptr=crow, dim=0)
    alpha = F.dropout(alpha, p=conv.dropout, training=conv.training)
    out = _CsrAttend.apply(h, alpha, crow, col)
    out = out.reshape(nd, H * C) if conv.concat else out.mean(dim=1)
    return out if conv.bias is None else out + conv.bias
