"""Neighbour sampling by the device that trains: the GPU sampler, whose CPU twin runs
the same torch operations on CPU tensors (what CI tests).

:class:`LocalCSR` holds this host's part of the graph's CSR where the device reads it:
the ranges (``[first, end)`` global edge ids per node) and the endpoints of the
host's partitions, copied into device memory when they fit
(``HPCGNN_GPU_CSR=device``), else the host's shared-memory rows themselves,
registered with CUDA and read by the GPU over the bus (``mapped``, zero-copy).
:func:`sample_hop` draws a hop of a frontier: the seeds of this host's partitions on
the device (:func:`choose_uniform`: Floyd's algorithm, one vectorised step per draw,
so the cost is ``fanout^2`` per seed whatever its degree), the others through the
one-sided RMA path (:func:`~hpcgnn.sampling.neighbor.sample_edges`), merged in the
frontier's order.  :class:`Relabel` maps the sampled global ids to batch-local ids in
first-appearance order, as the CPU sampler's hash table does, with sorts and binary
searches.

The contract is the CPU sampler's: per seed, ``min(degree, fanout)`` distinct edges
(``fanout`` draws with replacement; every edge for ``-1``), each subset equally
likely; the batch's layout (``n_id`` order, hop blocks, ``edge_index``) is the same
function of the drawn edges.  The draws come from torch's generator on the device,
so the edges drawn differ from the CPU kernel's for the same seed.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from ..devices import host_rows_on
from ..errors import InputError
from .neighbor import sample_edges

#: Where :class:`LocalCSR` puts the host's CSR (``HPCGNN_GPU_CSR``): ``auto`` copies it
#: into device memory when it takes at most this share of the free memory, else maps it.
DEVICE_SHARE = 0.25
PLACEMENTS = ("auto", "device", "mapped")


class LocalCSR:
    """This host's CSR rows, readable by kernels on ``device`` (see the module doc).
    Local: no communication."""

    def __init__(self, tables, device, placement: str | None = None):
        self.device = torch.device(device)
        placement = placement or os.environ.get("HPCGNN_GPU_CSR", "auto")
        if placement not in PLACEMENTS:
            raise InputError(f"HPCGNN_GPU_CSR={placement!r}: one of {', '.join(PLACEMENTS)}")
        nodes, edges = tables.csr.direct_views(), tables.indices.direct_views()
        if self.device.type == "cuda" and placement == "auto":
            need = sum(v.nbytes for *_, v in nodes) + sum(v.nbytes for *_, v in edges)
            free = torch.cuda.mem_get_info(self.device)[0]
            placement = "device" if need <= DEVICE_SHARE * free else "mapped"
        self.placement = "device" if placement == "auto" else placement
        how = "copy" if self.placement == "device" else "mapped"
        self._release = []
        self.node_spans = self._spans(nodes, how)
        self.edge_spans = self._spans(edges, how)
        self.node_bounds = self._bounds(self.node_spans)

    def _spans(self, views, how):
        out = []
        for lo, hi, v in views:
            t, release = host_rows_on(np.ascontiguousarray(v), self.device, how)
            self._release.append(release)
            out.append((lo, hi, t))
        return out

    def _bounds(self, spans):
        lo = torch.tensor([s[0] for s in spans], dtype=torch.int64, device=self.device)
        hi = torch.tensor([s[1] for s in spans], dtype=torch.int64, device=self.device)
        return lo, hi

    def local_mask(self, ids: torch.Tensor) -> torch.Tensor:
        """Which of ``ids`` (global node ids on the device) this host holds."""
        lo, hi = self.node_bounds
        if len(lo) == 0:
            return torch.zeros(len(ids), dtype=torch.bool, device=ids.device)
        k = (torch.searchsorted(lo, ids, right=True) - 1).clamp_(min=0)
        return (ids >= lo[k]) & (ids < hi[k])

    def ranges(self, ids: torch.Tensor) -> torch.Tensor:
        """``[n, 2]`` edge ranges of local node ids."""
        return _read(self.node_spans, ids, (2,))

    def endpoints(self, eids: torch.Tensor) -> torch.Tensor:
        """The other endpoint of local edges."""
        return _read(self.edge_spans, eids, ())

    def close(self) -> None:
        for r in self._release:
            r()
        self._release = []


def _read(spans, ids: torch.Tensor, row_shape: tuple) -> torch.Tensor:
    out = torch.empty((len(ids),) + row_shape, dtype=torch.int64, device=ids.device)
    if len(spans) == 1:
        lo, _, t = spans[0]
        return torch.index_select(t, 0, ids - lo).to(torch.int64)
    for lo, hi, t in spans:
        sel = torch.nonzero((ids >= lo) & (ids < hi)).reshape(-1)
        if len(sel):
            out[sel] = torch.index_select(t, 0, ids[sel] - lo).to(torch.int64)
    return out


def choose_uniform(deg: torch.Tensor, k: int, gen: torch.Generator | None) -> torch.Tensor:
    """``[m, k]`` offsets: row ``i`` a uniformly random ``k``-subset of ``[0, deg[i])``
    (every ``deg[i] >= k``), by Floyd's algorithm vectorised over the rows."""
    m = len(deg)
    out = torch.empty((m, k), dtype=torch.int64, device=deg.device)
    r = torch.rand((m, k), generator=gen, dtype=torch.float64, device=deg.device)
    for i in range(k):
        j = deg - k + i                                     # draw from [0, j]
        t = torch.minimum((r[:, i] * (j + 1).to(torch.float64)).to(torch.int64), j)
        if i:
            t = torch.where((out[:, :i] == t[:, None]).any(1), j, t)
        out[:, i] = t
    return out


def draw(first: torch.Tensor, deg: torch.Tensor, fanout: int, replace: bool, gen):
    """Edge ids drawn for each seed of ranges ``first, first + deg``, grouped by seed:
    ``(eids, counts)``."""
    n = len(first)
    if fanout < 0:
        counts = deg
    elif replace:
        counts = torch.where(deg > 0, fanout, 0)
    else:
        counts = torch.clamp(deg, max=fanout)
    seg, within = _segments(counts)
    if fanout < 0 or len(seg) == 0:
        return first[seg] + within, counts
    need = torch.nonzero(deg > 0 if replace else deg > fanout).reshape(-1)
    if len(need) == 0:
        return first[seg] + within, counts
    if replace:
        r = torch.rand((len(need), fanout), generator=gen, dtype=torch.float64, device=first.device)
        chosen = torch.minimum((r * deg[need, None].to(torch.float64)).to(torch.int64), deg[need, None] - 1)
    else:
        chosen = choose_uniform(deg[need], fanout, gen)
    row = torch.full((n,), -1, dtype=torch.int64, device=first.device)
    row[need] = torch.arange(len(need), device=first.device)
    rs = row[seg]
    pick = chosen[rs.clamp(min=0), within.clamp(max=fanout - 1)]
    return first[seg] + torch.where(rs >= 0, pick, within), counts


def _segments(counts: torch.Tensor):
    """``(seg, within)``: for each of ``counts.sum()`` slots, its group and its place in it."""
    total = int(counts.sum())
    seg = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts, output_size=total)
    offs = torch.cumsum(counts, 0) - counts
    return seg, torch.arange(total, device=counts.device) - offs[seg]


def sample_hop(g, csr: LocalCSR, frontier: torch.Tensor, fanout: int, replace: bool, gen, seed: int,
               nthreads: int = 1):
    """One hop: ``(nbr, counts, eids)`` on the device, grouped by seed in ``frontier``'s
    order; local seeds drawn on the device, the others through RMA."""
    dev = frontier.device
    local = csr.local_mask(frontier)
    li = torch.nonzero(local).reshape(-1)
    rows = csr.ranges(frontier[li])
    eids_l, counts_l = draw(rows[:, 0], rows[:, 1] - rows[:, 0], fanout, replace, gen)
    nbr_l = csr.endpoints(eids_l)
    if len(li) == len(frontier):
        return nbr_l, counts_l, eids_l
    ri = torch.nonzero(~local).reshape(-1)
    nbr_r, counts_r, eids_r = (torch.from_numpy(a).to(dev) for a in
                               sample_edges(g, frontier[ri].cpu().numpy(), fanout, replace, None, seed, nthreads))
    counts = torch.empty(len(frontier), dtype=torch.int64, device=dev)
    counts[li], counts[ri] = counts_l, counts_r
    offs = torch.cumsum(counts, 0) - counts
    nbr = torch.empty(int(counts.sum()), dtype=torch.int64, device=dev)
    eids = torch.empty_like(nbr)
    for idx, c, n_, e_ in ((li, counts_l, nbr_l, eids_l), (ri, counts_r, nbr_r, eids_r)):
        seg, within = _segments(c)
        at = offs[idx][seg] + within
        nbr[at], eids[at] = n_, e_
    return nbr, counts, eids


class Relabel:
    """Global node ids -> batch-local ids in first-appearance order (the seeds first),
    on the device."""

    def __init__(self, seeds: torch.Tensor):
        self.ids, order = torch.sort(seeds)
        self.local = order
        self.parts = [seeds]
        self.count = len(seeds)

    def map(self, nbr: torch.Tensor) -> torch.Tensor:
        """Local ids of ``nbr``; the nodes not seen before get the next ids, in the
        order they first appear in ``nbr``."""
        dev = nbr.device
        if len(nbr) == 0:
            return nbr.clone()
        u, inv = torch.unique(nbr, return_inverse=True)
        pos = torch.searchsorted(self.ids, u).clamp_(max=max(len(self.ids) - 1, 0))
        seen = self.ids[pos] == u if len(self.ids) else torch.zeros(len(u), dtype=torch.bool, device=dev)
        first = torch.full((len(u),), len(nbr), dtype=torch.int64, device=dev)
        first.scatter_reduce_(0, inv, torch.arange(len(nbr), device=dev), "amin")
        new = torch.nonzero(~seen).reshape(-1)
        new = new[torch.argsort(first[new])]                 # first appearance order
        lid = torch.empty(len(u), dtype=torch.int64, device=dev)
        lid[seen] = self.local[pos[seen]]
        fresh = torch.arange(self.count, self.count + len(new), device=dev)
        lid[new] = fresh
        if len(new):
            self.parts.append(u[new])
            ids = torch.cat([self.ids, u[new]])
            self.ids, o = torch.sort(ids)
            self.local = torch.cat([self.local, fresh])[o]
            self.count += len(new)
        return lid[inv]

    def nodes(self) -> torch.Tensor:
        return torch.cat(self.parts) if len(self.parts) > 1 else self.parts[0]
