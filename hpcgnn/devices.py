"""Devices named by users, made concrete where they are named."""
from __future__ import annotations

from .errors import InputError

try:
    import torch
except ImportError:  # pragma: no cover - torch is a dependency of the training stack only
    torch = None


def concrete(device) -> torch.device:
    """``torch.device(device)``, with ``"cuda"`` (no index) made ``cuda:<current>`` of the
    calling thread: the current GPU is per thread, so a device handed to a background
    thread (the loaders' prefetch) must carry its index, or the work lands on GPU 0."""
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        if not torch.cuda.is_available():
            raise InputError(f"device {str(device)!r}: this process sees no CUDA device")
        d = torch.device("cuda", torch.cuda.current_device())
    return d
