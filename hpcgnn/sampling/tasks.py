"""What a loader's producer does for one batch, wherever it runs (the loader's
thread, inline, or a sampler rank: the tasks are picklable): :class:`NodeTask` and
:class:`EdgeTask`."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..devices import Staging
from ..partition.arrays import unique_inverse
from .features import fetch_features
from .plan import EpochPlan


@dataclass
class NodeTask:
    """How to build a node-classification batch (picklable: sent to sampler ranks)."""
    sampler: object
    plan: EpochPlan
    feat: str | None
    label: str | None
    cache_bytes: int = 0
    device: str | None = None
    label_rows: str = "all"
    feature_rows: str = "copy"
    keep_half: bool = False        # half-precision features stay so (sent by sampler ranks)
    _staging: object = field(default=None, repr=False, compare=False)

    def make(self, g, epoch: int, step: int, order=None):
        if self.device is None:
            return self._make(g, epoch, step, order)
        if self._staging is None:           # made by the thread that stages (a loader's)
            self._staging = Staging(self.device)
        with self._staging:                 # the device's work on a stream of its own
            b = self._make(g, epoch, step, order)
            t0 = time.perf_counter()
            b.stage(self.device, self._staging)
            b.extra["stage_s"] = time.perf_counter() - t0
        return b

    def __getstate__(self):                 # picklable (sent to sampler ranks): no stream
        return {**self.__dict__, "_staging": None}

    def _make(self, g, epoch: int, step: int, order=None):
        t0 = time.perf_counter()
        _ensure_cache(g, self.feat, self.cache_bytes, self.device)
        seeds = self.plan.seeds(epoch, step, order)
        b = self.sampler.sample(g, seeds, rng=self.plan.rng(epoch, step))
        t1 = time.perf_counter()
        cache = g.ndata[self.feat].cache if self.cache_bytes and self.feat is not None else None
        before = (cache.hits, cache.remote_lookups) if cache is not None else None
        if self.feat is not None or self.label is not None:
            fetch_features(b, g, self.feat, self.label, device=self.device, label_rows=self.label_rows,
                           feature_rows=self.feature_rows, keep_half=self.keep_half)
            if self.device is not None and torch.device(self.device).type != "cpu":
                b.extra["h2d_bytes"] = _crossed(b, cache, before)
        b.extra["sample_s"], b.extra["fetch_s"] = t1 - t0, time.perf_counter() - t1
        b.extra["padding"] = self.plan.is_padding(step)
        if before is not None:        # counted where the batch was made (a sampler rank, maybe)
            b.extra["cache_hits"] = cache.hits - before[0]
            b.extra["cache_remote_lookups"] = cache.remote_lookups - before[1]
        return b


@dataclass
class EdgeTask:
    """How to build a link-prediction batch (picklable)."""
    sampler: object
    plan: EpochPlan
    negative_sampler: object
    exclude: object
    reverse_eids: np.ndarray | None
    feat: str | None
    label: str | None
    keep_half: bool = False

    def make(self, g, epoch: int, step: int, order=None):
        t0 = time.perf_counter()
        eids = self.plan.seeds(epoch, step, order)
        rng = self.plan.rng(epoch, step)
        src, dst = (t.numpy() for t in g.find_edges(eids))
        parts = [src, dst]
        if self.negative_sampler is not None:
            parts += list(self.negative_sampler(g.num_nodes(), src, dst, rng))
        uniq, inv = unique_inverse(np.concatenate(parts))
        b = self.sampler.sample(g, uniq, rng=rng)
        if self.exclude == "self":
            b.drop_edges(eids)
        elif self.exclude == "reverse_id":
            b.drop_edges(np.concatenate([eids, self.reverse_eids[eids]]))
        elif callable(self.exclude):
            b.drop_edges(np.asarray(self.exclude(torch.from_numpy(eids)), dtype=np.int64))
        B = len(eids)
        inv = inv.astype(np.int64, copy=False)
        eli = np.concatenate([inv[:2 * B].reshape(2, B), inv[2 * B:].reshape(2, -1)], axis=1)
        b.edge_label_index = torch.from_numpy(np.ascontiguousarray(eli))
        b.edge_label = torch.cat([torch.ones(B), torch.zeros(eli.shape[1] - B)])
        b.input_id = torch.from_numpy(eids)
        t1 = time.perf_counter()
        if self.feat is not None or self.label is not None:
            fetch_features(b, g, self.feat, self.label, keep_half=self.keep_half)
        b.extra["sample_s"], b.extra["fetch_s"] = t1 - t0, time.perf_counter() - t1
        b.extra["padding"] = self.plan.is_padding(step)
        return b


def _crossed(b, cache, before) -> int:
    """Bytes of ``x``/``y`` that crossed to the device while fetching: the rows a
    device cache did not serve."""
    n = 0
    for t in (b.x, b.y):
        if isinstance(t, torch.Tensor):
            n += t.numel() * t.element_size()
    if cache is not None and isinstance(b.x, torch.Tensor) and len(b.x):
        n -= (cache.hits - before[0]) * (b.x[0].numel() * b.x.element_size())
    return max(n, 0)


def _ensure_cache(g, feat, budget: int, device=None) -> None:
    """Give ``g.ndata[feat]`` a hot-row cache of ``budget`` bytes (by in-degree) in
    the process that gathers the features (trainer or sampler rank), once; in
    ``device``'s memory when given.  A feature of some node types only caches rows
    of those types (the others are never read)."""
    if budget and feat is not None and g.ndata[feat].cache is None:
        has = g.get_partition_config()["node_feats"].get(feat, {}).get("ntypes")
        rows = None
        book = g.get_partition_book()
        if has and len(book.ntypes) > 1:
            tids = np.asarray(book.map_to_per_ntype(np.arange(g.num_nodes(), dtype=np.int64))[0])
            rows = np.isin(tids, [book.ntype_id(t) for t in has])
        g.ndata[feat].enable_cache(budget, graph=g, device=device, rows=rows)
