"""Rows of a :class:`~hpcgnn.comm.rma.rowstore.RowStore` gathered by the device that
uses them: the rows of this host's shared memory read in place by a device-side
index gather (the segments registered with CUDA as mapped, pinned memory: zero-copy,
never staged by the CPU), the rows of other hosts read by RMA straight into device
memory where the MPI library is GPU-aware (``hpcgnn doctor`` says), else into pinned
memory and copied once, asynchronously.  On a CPU the same code reads the same
segments as tensors and the other hosts' rows by RMA into a tensor (the CPU twin
that CI tests).

``HPCGNN_DEVICE_READS``: ``auto`` (the default: mapped reads on a GPU, the host's
compiled gather elsewhere), ``mapped`` (also on a CPU: the twin), ``host`` (never).
"""
from __future__ import annotations

import logging
import os

import numpy as np
import torch

from ..comm import probes
from ..devices import host_rows_on
from ..errors import InputError

log = logging.getLogger("hpcgnn")

MODES = ("auto", "mapped", "host")


def mode() -> str:
    m = os.environ.get("HPCGNN_DEVICE_READS", "auto")
    if m not in MODES:
        raise InputError(f"HPCGNN_DEVICE_READS={m!r}: one of {', '.join(MODES)}")
    return m


def wanted(device: torch.device) -> bool:
    """Whether rows for ``device`` are gathered by it (see the module doc)."""
    m = mode()
    return m == "mapped" or (m == "auto" and device.type == "cuda")


class MappedRows:
    """One store's host-local segments as tensors ``device`` reads (local, no
    communication); :meth:`gather` fills a device tensor."""

    def __init__(self, store, device: torch.device, torch_dtype):
        self.store, self.device = store, device
        self._release = []
        self.spans = []
        for lo, hi, view in store.direct_views():
            flat = view.reshape(len(view), -1)
            half_bits = flat.dtype == np.uint16 and torch_dtype in (torch.bfloat16, torch.float16)
            t, release = host_rows_on(flat.view(np.int16) if half_bits else flat, device, "mapped")
            self._release.append(release)
            self.spans.append((lo, hi, t.view(torch_dtype) if half_bits else t))
        self.bounds = (np.array([s[0] for s in self.spans], np.int64),
                       np.array([s[1] for s in self.spans], np.int64))

    def gather(self, ids: np.ndarray, row_shape: tuple, dtype, host_gather) -> torch.Tensor:
        """Rows of ``ids`` (checked int64) on the device: local ones by the device,
        the others through ``host_gather(ids) -> pinned or host tensor``."""
        n = len(ids)
        out = torch.empty((n,) + tuple(row_shape), dtype=dtype, device=self.device)
        flat = out.view(n, -1) if n else out
        lo, hi = self.bounds
        k = np.searchsorted(lo, ids, side="right") - 1
        kc = np.maximum(k, 0)
        local = (k >= 0) & (ids < hi[kc]) if len(lo) else np.zeros(n, bool)
        rest = np.flatnonzero(~local)
        if len(rest):
            if self.device.type == "cpu" or gpu_aware_mpi():
                # straight into this device's memory (through DLPack): no host copy on a GPU
                buf = torch.empty((len(rest), self.store.row_bytes), dtype=torch.uint8, device=self.device)
                self.store.read_remote(ids[rest], buf)
                rows = buf.view(dtype)
            else:
                rows = host_gather(ids[rest]).to(self.device, non_blocking=True)
            flat[torch.from_numpy(rest).to(self.device)] = rows.reshape(len(rest), -1)
        if len(rest) == n:
            return out
        for s, (a, _, t) in enumerate(self.spans):
            at = np.flatnonzero(local & (k == s))
            if len(at):
                idx = torch.from_numpy(ids[at] - a).to(self.device, non_blocking=True)
                flat[torch.from_numpy(at).to(self.device, non_blocking=True)] = torch.index_select(t, 0, idx)
        return out

    def close(self) -> None:
        for r in self._release:
            r()
        self._release = []


_AWARE: list = []


def gpu_aware_mpi() -> bool:
    """Whether the MPI library takes GPU memory (asked once per process)."""
    if not _AWARE:
        _AWARE.append(probes.gpu_aware()[0] == "yes")
    return _AWARE[0]


def mapped_rows(store, device, torch_dtype, where: str):
    """:class:`MappedRows` of ``store`` for ``device``, or None where the device
    cannot map the host's memory (logged once; the host path serves then)."""
    try:
        return MappedRows(store, device, torch_dtype)
    except (RuntimeError, TypeError, ValueError) as e:
        log.warning("%s: rows for %s read through the host (mapping the host's memory failed: %s)",
                    where, device, e)
        return None
