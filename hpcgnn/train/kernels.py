"""Faster CPU building blocks for the models: dropout and mean aggregation.

On CPUs two parts of a GraphSAGE step cost more than its matrix products
(profile of a products-sized batch, 1 thread, in docs/benchmarks.md):

- PyTorch's dropout draws one Mersenne-Twister number per element; :func:`dropout`
  uses the compiled counter-based mask of ``ext/src/dropout.c`` instead, seeded by
  one draw from PyTorch's generator, so ``torch.manual_seed`` and saved RNG states
  still make runs reproducible (bitwise resume);
- message passing on an ``edge_index`` materialises one feature row per edge and
  scatters them back; :func:`mean_adjacency` hands PyG's layers a sparse CSR matrix
  instead, which they aggregate with one sparse-dense product (same result, the sum
  over a destination's neighbours in the same order).

On GPUs, and for tensors the kernels do not cover, both fall back to the plain
PyTorch/PyG path.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .. import _ext
from . import pyg_ops as pyg
from ..errors import InputError
from ..graph.row_refs import RowRefs
from ..nn.compiled import CsrMean as _CsrMean


def _draw_seed() -> int:
    """A kernel seed from PyTorch's generator (so torch.manual_seed and saved RNG
    states reproduce the masks)."""
    return int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())


class _Masked(torch.autograd.Function):
    """A dropout's backward: ``ctx.grad_kernel(grad, saved, scale, out)`` on flat
    float32 buffers (saved: the mask, or the forward output for relu+dropout)."""

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (saved,) = ctx.saved_tensors
        g = grad.detach().contiguous()
        gin = torch.empty_like(g)
        ctx.grad_kernel(g.view(-1).numpy(), saved.view(-1).numpy(), ctx.scale, gin.view(-1).numpy())
        return gin, None, None


class _Dropout(_Masked):
    @staticmethod
    def forward(ctx, x, p: float, seed: int):
        xc = x.detach().contiguous()
        mask = torch.empty(xc.numel(), dtype=torch.uint8)
        scale = _ext.dropout_mask(mask.numpy(), p, seed)
        out = torch.empty_like(xc)
        _ext.dropout_apply(xc.view(-1).numpy(), mask.numpy(), scale, out.view(-1).numpy())
        ctx.save_for_backward(mask)
        ctx.scale, ctx.grad_kernel = scale, _ext.dropout_apply
        return out


def dropout(x: torch.Tensor, p: float = 0.5, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)``: zeroes each element with probability ``p`` and
    scales the rest by ``1 / (1 - p)``.  float32 CPU tensors use the compiled mask
    (p rounded to a multiple of 2^-16, the scale computed from the rounded value so
    the expectation stays ``x``); anything else goes to ``F.dropout``."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or x.dtype != torch.float32 or not 0.0 < p < 1.0:
        return F.dropout(x, p=p, training=True)
    seed = _draw_seed()
    return _Dropout.apply(x, float(p), seed)


class _ReluDropout(_Masked):
    @staticmethod
    def forward(ctx, x, p: float, seed: int):
        xc = x.detach().contiguous()
        out = torch.empty_like(xc)
        ctx.scale = _ext.relu_dropout(xc.view(-1).numpy(), p, seed, out.view(-1).numpy())
        ctx.save_for_backward(out)
        ctx.grad_kernel = _ext.relu_dropout_grad
        return out


def relu_dropout(x: torch.Tensor, p: float = 0.5, training: bool = True) -> torch.Tensor:
    """``dropout(F.relu(x), p, training)`` in one pass for float32 CPU tensors (the
    same mask :func:`dropout` would draw, so the same numbers); else the two
    PyTorch calls."""
    if not training or p == 0.0:
        return F.relu(x)
    if x.device.type != "cpu" or x.dtype != torch.float32 or not 0.0 < p < 1.0:
        return F.dropout(F.relu(x), p=p, training=True)
    seed = _draw_seed()
    return _ReluDropout.apply(x, float(p), seed)


class _BiasReluDropout(torch.autograd.Function):
    """``dropout(relu(h + bias))`` written over ``h`` (a matrix product's fresh
    output), and in the backward the bias's gradient summed in the same pass."""

    @staticmethod
    def forward(ctx, h, bias, p: float, seed: int):
        ctx.scale = _ext.bias_relu_dropout(h.detach().numpy(), bias.detach().contiguous().numpy(), p, seed)
        ctx.mark_dirty(h)
        ctx.save_for_backward(h)
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        g = grad.detach().contiguous()
        gin = torch.empty_like(g)
        gb = torch.empty(g.shape[1], dtype=torch.float64)
        _ext.relu_dropout_grad_bias(g.numpy(), out.numpy(), ctx.scale, gin.numpy(), gb.numpy())
        return gin, gb.to(torch.float32), None, None


def _writable_activation(h: torch.Tensor, bias: torch.Tensor, p: float, training: bool) -> bool:
    """Whether the compiled bias+relu+dropout may run over ``h`` in place: training,
    0 < p < 1, float32 CPU matrices, ``h`` contiguous, not a view (a view of a leaf
    needing a gradient would be written before autograd refuses it) and not a leaf
    needing a gradient (a leaf cannot be written in place)."""
    return training and 0.0 < p < 1.0 and h.device.type == "cpu" and h.dtype == torch.float32 \
        and h.dim() == 2 and h.is_contiguous() and bias.dtype == torch.float32 \
        and h._base is None and not (h.is_leaf and h.requires_grad)


def bias_relu_dropout(h: torch.Tensor, bias: torch.Tensor | None, p: float = 0.5,
                      training: bool = True) -> torch.Tensor:
    """``relu_dropout(h + bias, p, training)``; for a contiguous float32 CPU ``h``
    that nothing else reads (a matrix product's output) in one pass over ``h``, in
    place, with the bias's gradient summed in the backward pass (one pass fewer than
    an ``addmm`` that first copies the bias into every row, then ``sum`` for its
    gradient).  The same mask :func:`relu_dropout` draws."""
    if bias is None:
        return relu_dropout(h, p, training)
    if not _writable_activation(h, bias, p, training):
        return relu_dropout(h + bias, p, training)
    seed = _draw_seed()
    return _BiasReluDropout.apply(h, bias, float(p), seed)


class _SparseGradLinear(torch.autograd.Function):
    """``x @ w.t()`` whose weight gradient skips the zeros of the output gradient
    (``ext/src/weight_grad.c``: one multiply-add of an ``x`` row per nonzero)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        g = grad.detach().contiguous()
        gx = g @ w if ctx.needs_input_grad[0] else None
        gw = None
        if ctx.needs_input_grad[1]:
            gw = torch.empty(w.shape, dtype=torch.float32)
            _ext.weight_grad(g.numpy(), x.detach().contiguous().numpy(), gw.numpy(), torch.get_num_threads())
        return gx, gw


# Dropout probability from which the output gradient of a product that relu and
# dropout follow is sparse enough for _SparseGradLinear: at p = 0.5 about 30% of it
# is nonzero in the README's model, and its weight gradient took 7.7-8.3 ms against
# 10.2-10.6 ms for the dense product (13.6k x 256 by 13.6k x 128, one Zen 4 core);
# the dense product wins from about 40% nonzeros.
SPARSE_GRAD_MIN_P = 0.5


def linear_before_dropout(x: torch.Tensor, w: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``x @ w.t()`` for a product that relu and dropout(``p``) follow: when
    training with ``p >= SPARSE_GRAD_MIN_P`` on float32 CPU matrices, the weight's
    gradient adds only the nonzero terms of the output gradient (the same sums up to
    float rounding, each weight element adding its terms in row order); else
    PyTorch's product."""
    if not training or p < SPARSE_GRAD_MIN_P or x.device.type != "cpu" or w.device.type != "cpu" \
            or x.dtype != torch.float32 or w.dtype != torch.float32 or x.dim() != 2 or w.dim() != 2 \
            or not w.requires_grad:
        return x @ w.t()
    return _SparseGradLinear.apply(x, w)


def mean_adjacency(edge_index: torch.Tensor, num_dst: int, num_src: int, dtype=torch.float32,
                   with_root: bool = False):
    """The adjacency a PyG layer aggregates along: a ``[num_dst, num_src]`` sparse
    CSR matrix of ones of ``dtype`` (the features' dtype; row ``d`` = the sources of
    the edges into ``d``, in edge order) on ``edge_index``'s device (a compiled pass
    for int64 CPU edges, PyTorch's operations otherwise).  Ids outside ``[0, num_src)`` /
    ``[0, num_dst)`` raise :class:`~hpcgnn.errors.InputError`.  Edges already
    sorted by destination (what the sampler emits) need no sort.

    ``with_root``: ``2 * num_dst`` rows, interleaved: row ``2d`` holds
    the sources of ``d``, row ``2d + 1`` selects source ``d`` alone - a mean over it
    is the root row ``x[d]`` itself.  The product's ``(2 * num_dst, F)`` result viewed
    as ``(num_dst, 2F)`` is then ``[mean_d | x_d]`` row by row: both halves of a SAGE
    layer's input side by side, ready for one matrix product with ``[W_l | W_r]``
    (one product with K = 2F runs faster than two with K = F), and the gradient
    reaches ``x`` through the one sparse product (a slice ``x[:num_dst]`` would add a
    zero-filled, full-size gradient and a full-size sum in the backward pass)."""
    if with_root and num_dst > num_src:
        raise InputError(f"mean_adjacency: with_root needs num_dst <= num_src, got {num_dst} > {num_src}")
    dev = edge_index.device
    if edge_index.dtype == torch.int64 and dev.type == "cpu":   # one compiled pass (edges sorted by destination)
        src, dst = edge_index[0].contiguous(), edge_index[1].contiguous()
        rows = 2 * num_dst if with_root else num_dst
        indptr = torch.empty(rows + 1, dtype=torch.int64)
        cols = torch.empty(src.numel() + (num_dst if with_root else 0), dtype=torch.int64)
        rc = _ext.build_csr(src.numpy(), dst.numpy(), num_dst, num_src, with_root, indptr.numpy(), cols.numpy())
        if rc == 0:
            return _csr(indptr, cols, rows, num_src, dtype)
        # else: out of range (raised below) or not sorted by destination (sorted below)
    src, dst = edge_index[0], edge_index[1]
    unsorted = False
    if src.numel():      # one read back from a GPU: the ids' ranges and whether they are sorted
        (slo, shi), (dlo, dhi) = torch.aminmax(src), torch.aminmax(dst)
        facts = torch.stack([slo, shi, dlo, dhi, (dst[1:] < dst[:-1]).any().to(slo.dtype)]).tolist()
        if facts[0] < 0 or facts[1] >= num_src or facts[2] < 0 or facts[3] >= num_dst:
            raise InputError(f"mean_adjacency: edge_index holds ids outside [0, {num_src}) (sources) or "
                             f"[0, {num_dst}) (destinations)")
        unsorted = bool(facts[4])
    if unsorted:
        order = torch.argsort(dst, stable=True)
        src, dst = src[order], dst[order]
    rows, E = num_dst, src.numel()
    src = src.to(torch.int64)
    indptr = torch.empty(num_dst + 1, dtype=torch.int64, device=dev)
    indptr[0] = 0
    torch.cumsum(torch.bincount(dst, minlength=num_dst), 0, out=indptr[1:])
    if with_root:
        rows = 2 * num_dst
        d = torch.arange(num_dst, dtype=torch.int64, device=dev)
        cols = torch.empty(E + num_dst, dtype=torch.int64, device=dev)
        # edge e (into d_e) moves past the d_e root entries before it; root d ends row 2d+1
        cols[torch.arange(E, dtype=torch.int64, device=dev) + dst.to(torch.int64)] = src
        cols[indptr[1:] + d] = d
        inter = torch.empty(2 * num_dst + 1, dtype=torch.int64, device=dev)
        inter[:-1].view(num_dst, 2)[:, 0] = indptr[:-1] + d
        inter[:-1].view(num_dst, 2)[:, 1] = indptr[1:] + d
        inter[-1] = E + num_dst
        indptr, src = inter, cols
    return _csr(indptr, src.contiguous(), rows, num_src, dtype)


def _csr(indptr, cols, rows: int, cols_n: int, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(indptr, cols, torch.ones(cols.numel(), dtype=dtype, device=cols.device),
                                       size=(rows, cols_n), check_invariants=False)


class _BiasReluDropoutMean(torch.autograd.Function):
    """``csr_mean(adj, bias_relu_dropout(h, bias))``: the activation written over
    ``h`` in place (returned second, marked dirty: nothing may read ``h`` after),
    and in the backward one pass per row of ``h`` gives the gradients of ``h`` and
    ``bias`` (the mean's gradient, masked, summed by columns) where the two functions
    apart make three passes."""

    @staticmethod
    def forward(ctx, h, bias, indptr, indices, nrows, p: float, seed: int):
        ctx.scale = _ext.bias_relu_dropout(h.detach().numpy(), bias.detach().contiguous().numpy(), p, seed)
        out = torch.empty(nrows, h.shape[1], dtype=torch.float32)
        _ext.csr_mean(indptr.numpy(), indices.numpy(), h.detach().numpy(), out.numpy(), torch.get_num_threads())
        ctx.mark_dirty(h)
        ctx.mark_non_differentiable(h)
        ctx.save_for_backward(indptr, indices, h)
        return out, h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad, _unused):
        indptr, indices, act = ctx.saved_tensors
        gin = torch.empty_like(act)
        gb = torch.empty(act.shape[1], dtype=torch.float64)
        _ext.csr_mean_backward(indptr.numpy(), indices.numpy(), grad.contiguous().numpy(), gin.numpy(),
                               torch.get_num_threads(), act=act.numpy(), scale=ctx.scale, bias_grad=gb.numpy())
        return gin, gb.to(torch.float32), None, None, None, None, None


def bias_relu_dropout_mean(h: torch.Tensor, bias: torch.Tensor | None, adj: torch.Tensor, p: float = 0.5,
                           training: bool = True) -> torch.Tensor:
    """``csr_mean(adj, bias_relu_dropout(h, bias, p, training))`` (the same numbers),
    with the activation's backward folded into the mean's: for a float32 CPU ``h``
    that nothing else reads (a matrix product's fresh output, which is overwritten)
    and a CSR ``adj`` from :func:`mean_adjacency`.  Else the two functions."""
    if bias is None or adj.layout != torch.sparse_csr or not _writable_activation(h, bias, p, training):
        return csr_mean(adj, bias_relu_dropout(h, bias, p, training))
    seed = _draw_seed()
    return _BiasReluDropoutMean.apply(h, bias, adj.crow_indices(), adj.col_indices(), adj.shape[0], float(p),
                                      seed)[0]


def csr_mean(adj: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``torch.sparse.mm(adj, x, "mean")`` for a CSR ``adj`` from
    :func:`mean_adjacency` and a float32 CPU ``x``, in the compiled kernels of
    ``ext/src/aggregate.c``: the forward prefetches the randomly placed source rows,
    the backward (when ``x`` needs a gradient) gathers along the transposed pattern,
    writing each gradient row once (PyTorch's sparse product: 1.3-1.4x as long
    forward on a first and second SAGE layer, and its backward sorts, zero-fills and
    copies).  ``x`` may be a :class:`~hpcgnn.graph.row_refs.RowRefs` (rows read in
    place, no gradient).  Anything else (a GPU, another dtype) goes to PyG's ``spmm``."""
    if isinstance(x, RowRefs):
        if x.dtype != torch.float32 or len(x.row_shape) != 1 or adj.layout != torch.sparse_csr:
            return csr_mean(adj, x.materialize())
        # rows read in place: nothing to differentiate (they are no tensor)
        x.check_open()
        out = torch.empty(adj.shape[0], x.row_shape[0], dtype=torch.float32)
        _ext.csr_mean_rows(adj.crow_indices().numpy(), adj.col_indices().numpy(), x.addr, out.numpy(),
                           torch.get_num_threads())
        return out
    if x.dtype != torch.float32 or x.device.type != "cpu" or adj.layout != torch.sparse_csr:
        return pyg.spmm(adj, x, "mean")         # PyG's: the sum over the degree on a GPU
    return _CsrMean.apply(x.contiguous(), adj.crow_indices(), adj.col_indices(), adj.shape[0])
