"""A compiled ``bernoulli_`` for CPU tensors, so that every model's dropout is fast.

PyTorch's CPU dropout (``nn.Dropout``, ``F.dropout``, the attention dropout of
``GATConv``, ...) draws its mask with ``Tensor.bernoulli_(1 - p)``, one
Mersenne-Twister number per element: ~13-15 ns per element, 40-80 ms per step for
a 13k x 256 hidden layer, often more than the layer's matrix products.  hpcgnn's
trainers replace the CPU kernel of ``aten::bernoulli_.float`` with the compiled
counter-based generator of ``ext/src/dropout.c`` (~1 ns per element), so a user's
own model gets it without a code change.

- Reproducible: each call seeds the kernel with one draw from the generator PyTorch
  would have used (``torch.manual_seed``, a saved RNG state and a ``generator=``
  argument still determine the masks, so checkpoint resume stays bitwise).
- Exact probabilities to 2^-33 (32-bit draws), float32, float64, uint8 and bool
  tensors, contiguous; others are drawn with ``torch.rand`` (the same law).
- Installed by :func:`hpcgnn.initialize` on trainer ranks unless
  ``HPCGNN_FAST_BERNOULLI=0``; :func:`uninstall` puts PyTorch's kernel back.
  Other dispatch keys (CUDA, ...) are untouched.
"""
from __future__ import annotations

import os
import warnings

import torch

from . import _ext

_KERNELS = {torch.float32: _ext.bernoulli_f32, torch.float64: _ext.bernoulli_f64,
            torch.uint8: _ext.bernoulli_u8, torch.bool: _ext.bernoulli_u8}
_lib = None


def _seed(generator) -> int:
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator))


def _bernoulli_(self: torch.Tensor, p: float = 0.5, *, generator=None) -> torch.Tensor:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    kernel = _KERNELS.get(self.dtype)
    if kernel is None or not self.is_contiguous() or self.numel() == 0:
        if self.numel():
            self.copy_(torch.rand(self.shape, generator=generator, dtype=torch.float64) < p)
        return self
    flat = self.view(-1) if self.dtype != torch.bool else self.view(-1).view(torch.uint8)
    kernel(flat.numpy(), float(p), _seed(generator))
    return self


def install() -> bool:
    """Route ``bernoulli_(p)`` on CPU tensors to the compiled kernel (once per
    process; idempotent).  Returns whether it is installed: not when
    ``HPCGNN_FAST_BERNOULLI=0``."""
    global _lib
    if os.environ.get("HPCGNN_FAST_BERNOULLI", "1") == "0":
        return False
    if _lib is None:
        lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():     # "overriding a previously registered kernel": that is the point
            warnings.simplefilter("ignore")
            lib.impl("bernoulli_.float", _bernoulli_, "CPU")
        _lib = lib
    return True


def uninstall() -> None:
    """Give ``bernoulli_`` back to PyTorch's own CPU kernel."""
    global _lib
    if _lib is not None:
        _lib._destroy()
        _lib = None


def installed() -> bool:
    return _lib is not None
