"""A hot-row cache for read-only DistTensors (node features): GLT's feature cache.

Sampling touches some nodes far more often than others (high in-degree nodes are
everyone's neighbours).  A :class:`RowCache` keeps, in this process's memory, the
rows of the hottest nodes whose rows live on **another node** (one-sided reads
there cross the network), as many as fit a byte budget (features stored at half
precision, ``hpcgnn partition --feat-dtype bf16|fp16``, are cached so: twice the
rows).  A gather then serves the cached rows from memory and reads only the rest;
the result is bitwise the same.

Hotness: a score per row (higher = hotter), e.g. access counts from running the
sampler (:func:`hotness_from_sampler`); by default how many stored edges reach
each node as the sampled end (its out-degree when sampling in-edges: that is how
often neighbour sampling can land on it).  The cache is filled once, when created
(independent: one read of the chosen rows), and is only for tensors that do not
change: writing to a cached tensor drops its cache.

With ``device=`` (a GPU when training on one) the cached rows live in that device's
memory: :meth:`DistTensor.gather_to` assembles a batch there, the cached rows copied
on the device and only the others read and moved (through pinned memory for CUDA).
"""
from __future__ import annotations

import numpy as np

from ..devices import concrete
from ..errors import InputError


class RowCache:
    """Independent to create.  ``tensor``: a :class:`~hpcgnn.graph.DistTensor`;
    ``budget_bytes``: the most memory the cached rows may take; ``hotness``: one
    score per row, or None (the reaching degree in ``graph``, see the module doc);
    ``rows``: the rows that may be cached (ids or a boolean mask; default all), e.g.
    the nodes of the types a feature of some types only has."""

    def __init__(self, tensor, budget_bytes: int, hotness=None, graph=None, device=None, rows=None):
        if int(budget_bytes) < 0:
            raise InputError(f"RowCache: budget_bytes must be >= 0, got {budget_bytes}")
        store = tensor.open_store()
        ctx = tensor.ctx
        n = tensor.shape[0]
        row_bytes = max(1, store.row_bytes)
        capacity = int(budget_bytes) // row_bytes
        remote = np.zeros(n, dtype=bool)
        bounds = np.asarray(store.bounds, dtype=np.int64)
        for k, owner in enumerate(store.owners.tolist()):
            if ctx.host_of(int(owner)) != ctx.host_id:
                remote[bounds[k]:bounds[k + 1]] = True
        eligible = remote
        if rows is not None:
            rows = np.asarray(rows)
            mask = np.zeros(n, dtype=bool)
            if rows.dtype == bool:
                if rows.shape != (n,):
                    raise InputError(f"RowCache: rows is a mask of {rows.shape}, the tensor has {n} rows")
                mask[:] = rows
            else:
                mask[tensor.index(rows)] = True
            eligible = remote & mask
        cand = np.flatnonzero(eligible)
        self.remote_rows = len(cand)
        if hotness is None:
            if graph is None:
                raise InputError("RowCache: give hotness= (one score per row) or graph= (in-degree is used)")
            hotness = _reach_degree(graph, cand) if len(cand) else np.zeros(0)
        else:
            hotness = np.asarray(hotness, dtype=np.float64).reshape(-1)
            if len(hotness) != n:
                raise InputError(f"RowCache: hotness has {len(hotness)} scores for {n} rows")
            hotness = hotness[cand]
        k = min(capacity, len(cand))
        if 0 < k < len(cand):
            pick = np.argpartition(-hotness, k - 1)[:k]
        else:
            pick = np.arange(k)
        self.ids = np.sort(cand[pick]).astype(np.int64)
        self.rows = store.gather(self.ids) if len(self.ids) else np.empty((0,) + store.row_shape, store.dtype)
        self.nbytes = self.rows.nbytes
        self.device = None
        if device is not None:        # the rows live on the device (GPU memory): gather_to serves them there
            self.device = concrete(device)
            self.dev_rows = tensor.as_torch(self.rows).to(self.device)     # bfloat16 rows: as such
            self.rows = self.rows[:0]           # no host copy
        self.lookups = self.hits = self.remote_lookups = 0
        self._remote = remote

    def __len__(self) -> int:
        return len(self.ids)

    def split(self, ids: np.ndarray):
        """``(hit, at)``: which ids are cached and, for those, their cache rows."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(self.ids) == 0:
            return np.zeros(len(ids), dtype=bool), np.zeros(0, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        hit = self.ids[pos] == ids
        return hit, pos[hit]

    def count(self, ids: np.ndarray, hits: int) -> None:
        """Record one gather of ``ids`` of which ``hits`` came from the cache."""
        self.lookups += len(ids)
        self.hits += int(hits)
        self.remote_lookups += int(np.count_nonzero(self._remote[ids])) if len(ids) else 0

    def stats(self) -> dict:
        """Rows asked for, served from the cache, and asked for from other nodes."""
        return {"rows": len(self.ids), "bytes": int(self.nbytes), "device": str(self.device or "cpu"),
                "lookups": self.lookups, "hits": self.hits,
                "remote_lookups": self.remote_lookups,
                "remote_fetched": self.remote_lookups - self.hits,
                "hit_rate_of_remote": (self.hits / self.remote_lookups) if self.remote_lookups else 0.0}

    def reset_stats(self) -> None:
        self.lookups = self.hits = self.remote_lookups = 0


def _reach_degree(graph, nodes: np.ndarray) -> np.ndarray:
    """How many stored edges lead to each node as the sampled end: sampling along
    in-edges reaches a node once per out-edge, and the other way round."""
    deg = graph.out_degrees(nodes) if graph.edge_dir == "in" else graph.in_degrees(nodes)
    return np.asarray(deg, dtype=np.float64)


def hotness_from_sampler(g, sampler, seeds, batch_size: int = 1024, batches: int = 20, rng=0) -> np.ndarray:
    """Access counts per node from sampling ``batches`` batches of ``seeds`` (the
    training nodes) with ``sampler``: the nodes whose rows a loader will read, and
    how often.  Independent."""
    seeds = np.asarray(seeds, dtype=np.int64)
    counts = np.zeros(g.num_nodes(), dtype=np.float64)
    gen = np.random.default_rng(rng)
    for _ in range(batches):
        s = gen.choice(seeds, min(batch_size, len(seeds)), replace=False) if len(seeds) else seeds
        b = sampler.sample(g, s, rng=gen)
        counts += np.bincount(b.n_id.cpu().numpy(), minlength=len(counts))
    return counts
