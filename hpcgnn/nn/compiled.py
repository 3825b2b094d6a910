"""The compiled aggregations :mod:`hpcgnn.nn`'s layers (and the training scripts'
models) use on a CPU: a mean over a CSR adjacency's rows with a compiled forward and
backward (``ext/src/aggregate.c``), about twice as fast as PyTorch's sparse product
and its backward on a GraphSAGE batch; and an attention-weighted sum along a CSR
(``ext/src/attention.c``), which never makes a per-edge message tensor."""
from __future__ import annotations

import torch

from torch.autograd.function import once_differentiable

from .. import _ext


class CsrMean(torch.autograd.Function):
    """Mean along a CSR adjacency; forward and backward in ``ext/src/aggregate.c``."""

    @staticmethod
    def forward(ctx, x, indptr, indices, nrows):
        out = torch.empty(nrows, x.shape[1], dtype=torch.float32)
        _ext.csr_mean(indptr.numpy(), indices.numpy(), x.numpy(), out.numpy(), torch.get_num_threads())
        ctx.save_for_backward(indptr, indices)
        ctx.num_src = x.shape[0]
        return out

    @staticmethod
    def backward(ctx, grad):
        indptr, indices = ctx.saved_tensors
        grad_x = torch.empty(ctx.num_src, grad.shape[1], dtype=torch.float32)
        _ext.csr_mean_backward(indptr.numpy(), indices.numpy(), grad.contiguous().numpy(), grad_x.numpy(),
                               torch.get_num_threads())
        return grad_x, None, None, None


def csr_mean(adj: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
    """The mean over each row of the CSR ``adj`` (``[num_dst, num_src]``) of the rows of
    ``x``, compiled, when it applies (float32 ``x`` on the CPU, a CSR ``adj``); else
    None (the caller takes PyTorch's product)."""
    if x.dtype != torch.float32 or x.device.type != "cpu" or adj.layout != torch.sparse_csr or x.dim() != 2:
        return None
    return CsrMean.apply(x.contiguous(), adj.crow_indices(), adj.col_indices(), adj.shape[0])


class CsrAttend(torch.autograd.Function):
    """``out[d, h] = sum_e alpha[e, h] * x[col[e], h]`` along a CSR."""

    @staticmethod
    def forward(ctx, x, alpha, crow, col):
        x, alpha = x.contiguous(), alpha.contiguous()
        out = torch.empty(len(crow) - 1, x.shape[1], x.shape[2], dtype=torch.float32)
        _ext.csr_attend(crow.numpy(), col.numpy(), alpha.detach().numpy(), x.detach().numpy(), out.numpy(),
                        torch.get_num_threads())
        ctx.save_for_backward(x, alpha, crow, col)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, alpha, crow, col = ctx.saved_tensors
        grad_x = torch.empty_like(x)
        grad_alpha = torch.empty_like(alpha)
        _ext.csr_attend_backward(crow.numpy(), col.numpy(), alpha.detach().numpy(), x.detach().numpy(),
                                 grad.contiguous().numpy(), grad_x.numpy(), grad_alpha.numpy(),
                                 torch.get_num_threads())
        return grad_x, grad_alpha, None, None
