"""A synthetic, class-structured graph written in parallel in the raw format.

The model (see ``docs/format-raw.md``, "The synthetic generator"):

* Classes: node ``i`` has position ``pos(i) = (a*i + b) mod N`` (a bijection, since
  ``gcd(a, N) = 1``) and class ``pos(i) * C // N``; the members of a class are a
  contiguous position range, so the inverse map gives their ids.  No global array.
* Out-degrees: clipped Pareto (tail index 2) with stochastic rounding, mean ``D``.
* Each edge stays in its source's class with probability ``homophily``, otherwise it
  goes to a uniformly chosen *other* class; inside the class the destination
  position is ``lo + floor(len * u**2.5)``, so in-degrees are heavy-tailed too.
* Features: class centroid (unit vector) + Gaussian noise of std ``noise``; label =
  class; train/val/test masks drawn per node.

Determinism: node ids are cut into chunks of ``chunk_nodes``; each chunk draws from
its own generators ``default_rng([seed, stream, chunk])``, and ranks own contiguous
runs of chunks.  The output is therefore identical for any number of ranks (for a
given ``chunk_nodes``).  Memory: one chunk's nodes and edges at a time per rank.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import InputError
from ..io import diskspace, partial
from . import chunked, raw

CHUNK_NODES = 1 << 16
#: noise std calibrated so that a linear classifier on features alone reaches
#: roughly 45-50% test accuracy with 16 classes
DEFAULT_NOISE = 0.58
DEGREE_SHAPE = 2.0
DEST_SKEW = 2.5
MAX_NODES = 1 << 32
MAX_CLASSES = 1 << 20
# streams of the per-chunk generators
_DEG, _EDGE, _FEAT, _MASK, _CENTROIDS, _PERM = 0, 1, 2, 3, 8, 9


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of a synthetic graph (pure data; :meth:`check` validates them)."""

    num_nodes: int
    avg_degree: float
    feat_dim: int
    num_classes: int
    seed: int
    homophily: float = 0.5
    noise: float = DEFAULT_NOISE
    train_frac: float = 0.6
    val_frac: float = 0.2
    test_frac: float = 0.2
    edge_feat: bool = False
    name: str = "synthetic"
    chunk_nodes: int = CHUNK_NODES
    self_loops: bool = False       # one v -> v edge per node besides its out-edges (weight 1)

    def check(self) -> None:
        """Raise InputError naming the first bad parameter (independent)."""
        def bad(field: str, why: str) -> InputError:
            return InputError(f"generate: argument {field}: {why}")

        if not 1 <= self.num_nodes <= MAX_NODES:
            raise bad("num_nodes", f"must be in [1, 2^32], got {self.num_nodes}")
        if not (0 <= self.avg_degree < self.num_nodes * 1e3) or not math.isfinite(self.avg_degree):
            raise bad("avg_degree", f"must be >= 0, got {self.avg_degree}")
        if self.feat_dim < 1:
            raise bad("feat_dim", f"must be >= 1, got {self.feat_dim}")
        if not 1 <= self.num_classes <= min(self.num_nodes, MAX_CLASSES):
            raise bad("num_classes", f"must be in [1, min(num_nodes, 2^20)], got {self.num_classes}")
        if self.seed < 0:
            raise bad("seed", f"must be >= 0, got {self.seed}")
        if not 0.0 <= self.homophily <= 1.0:
            raise bad("homophily", f"must be in [0, 1], got {self.homophily}")
        if not self.noise >= 0.0:
            raise bad("noise", f"must be >= 0, got {self.noise}")
        fracs = (self.train_frac, self.val_frac, self.test_frac)
        if min(fracs) < 0 or sum(fracs) > 1.0 + 1e-9:
            raise bad("train_frac/val_frac/test_frac", f"must be >= 0 and sum to <= 1, got {fracs}")
        if self.chunk_nodes < 1:
            raise bad("chunk_nodes", f"must be >= 1, got {self.chunk_nodes}")


def pareto_scale(mean: float, cap: float, k: float = DEGREE_SHAPE) -> float:
    """Scale ``m`` such that E[min(m * U**(-1/k), cap)] == mean (pure)."""
    def clipped_mean(m: float) -> float:
        if m >= cap:
            return cap
        return m * k / (k - 1) - m ** k * cap ** (1 - k) / (k - 1)

    lo, hi = 0.0, cap
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if clipped_mean(mid) < mean else (lo, mid)
    return 0.5 * (lo + hi)


class SyntheticModel:
    """The global, O(C * F)-sized state of the model, derived from the spec (pure)."""

    def __init__(self, spec: SyntheticSpec) -> None:
        self.spec = spec
        n, c = spec.num_nodes, spec.num_classes
        self.n = np.uint64(n)
        rng = np.random.default_rng([spec.seed, _PERM])
        hi = min(n, 1 << 31)
        a = 1
        if hi > 2:
            a = int(rng.integers(1, hi))
            while math.gcd(a, n) != 1:
                a = int(rng.integers(1, hi))
        self.a, self.b = np.uint64(a), np.uint64(int(rng.integers(0, n)))
        self.ainv = np.uint64(pow(a, -1, n) if n > 1 else 0)
        # class k holds positions [lo[k], lo[k+1]): pos * C // N == k
        self.class_lo = np.array([(k * n + c - 1) // c for k in range(c + 1)], dtype=np.int64)
        cent = np.random.default_rng([spec.seed, _CENTROIDS]).standard_normal((c, spec.feat_dim))
        cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-12)
        self.centroids = cent.astype(np.float32)
        d = float(spec.avg_degree)
        self.cap = max(2.0 * d, min(float(n), 1000.0 * d))
        self.scale = pareto_scale(d, self.cap) if d > 0 else 0.0

    def chunk_range(self, chunk: int) -> tuple[int, int]:
        """Node ids ``[lo, hi)`` of a chunk."""
        cn = self.spec.chunk_nodes
        return chunk * cn, min(self.spec.num_nodes, (chunk + 1) * cn)

    def num_chunks(self) -> int:
        return -(-self.spec.num_nodes // self.spec.chunk_nodes)

    def classes(self, ids: np.ndarray) -> np.ndarray:
        """Class of each node id (int64)."""
        pos = (self.a * ids.astype(np.uint64) + self.b) % self.n
        return (pos * np.uint64(self.spec.num_classes) // self.n).astype(np.int64)

    def ids_at(self, pos: np.ndarray) -> np.ndarray:
        """Node id at each position (the inverse permutation)."""
        x = (pos.astype(np.uint64) + self.n - self.b) % self.n
        return (self.ainv * x % self.n).astype(np.int64)

    def degrees(self, chunk: int) -> np.ndarray:
        """Out-degrees of a chunk's nodes (int64)."""
        lo, hi = self.chunk_range(chunk)
        rng = np.random.default_rng([self.spec.seed, _DEG, chunk])
        u = rng.random(hi - lo)
        v = rng.random(hi - lo)
        x = np.minimum(self.scale * (1.0 - u) ** (-1.0 / DEGREE_SHAPE), self.cap)
        return np.floor(x + v).astype(np.int64)

    def edges(self, chunk: int, deg: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(src, dst, weight)`` of a chunk's out-edges; weight is None without edge features."""
        lo, hi = self.chunk_range(chunk)
        spec = self.spec
        rng = np.random.default_rng([spec.seed, _EDGE, chunk])
        ids = np.arange(lo, hi, dtype=np.int64)
        src = np.repeat(ids, deg)
        ecls = np.repeat(self.classes(ids), deg)
        m = len(src)
        stay = rng.random(m) < spec.homophily
        if spec.num_classes > 1:
            other = rng.integers(1, spec.num_classes, m)
            ecls = np.where(stay, ecls, (ecls + other) % spec.num_classes)
        start = self.class_lo[ecls]
        length = self.class_lo[ecls + 1] - start
        t = rng.random(m)
        pos = start + np.minimum(np.floor(length * t ** DEST_SKEW).astype(np.int64), length - 1)
        dst = self.ids_at(pos)
        weight = (1.0 - rng.random(m, dtype=np.float32)) if spec.edge_feat else None
        if spec.self_loops:               # after the chunk's out-edges: the others keep their draws
            src, dst = np.concatenate([src, ids]), np.concatenate([dst, ids])
            weight = None if weight is None else np.concatenate([weight, np.ones(len(ids), np.float32)])
        return src, dst, weight

    def edge_count(self, chunk: int) -> int:
        """The number of edges :meth:`edges` gives for ``chunk``."""
        lo, hi = self.chunk_range(chunk)
        return int(self.degrees(chunk).sum()) + (hi - lo if self.spec.self_loops else 0)

    def node_data(self, chunk: int) -> dict[str, np.ndarray]:
        """feat, label and masks of a chunk's nodes."""
        lo, hi = self.chunk_range(chunk)
        spec = self.spec
        label = self.classes(np.arange(lo, hi, dtype=np.int64))
        feat = np.random.default_rng([spec.seed, _FEAT, chunk]).standard_normal(
            (hi - lo, spec.feat_dim), dtype=np.float32)
        feat *= np.float32(spec.noise)
        feat += self.centroids[label]
        u = np.random.default_rng([spec.seed, _MASK, chunk]).random(hi - lo)
        t1, t2, t3 = spec.train_frac, spec.train_frac + spec.val_frac, \
            spec.train_frac + spec.val_frac + spec.test_frac
        return {"feat": feat, "label": label, "train_mask": u < t1,
                "val_mask": (u >= t1) & (u < t2), "test_mask": (u >= t2) & (u < t3)}


def generate_graph(path: str, comm, num_nodes: int, avg_degree: float, feat_dim: int, num_classes: int,
                   seed: int, *, homophily: float = 0.5, noise: float = DEFAULT_NOISE,
                   train_frac: float = 0.6, val_frac: float = 0.2, test_frac: float = 0.2,
                   edge_feat: bool = False, name: str = "synthetic", chunk_nodes: int = CHUNK_NODES,
                   overwrite: bool = False, self_loops: bool = False) -> dict:
    """Write a synthetic graph to ``path`` in the raw format; return a summary dict.

    Collective over ``comm`` (``None``: this process alone).  Every rank generates and
    writes its run of chunks; the file is written as ``path + ".partial"`` and renamed
    when complete.  Bad parameters raise :class:`InputError` on every rank before any
    other collective.  The content depends on the parameters only, not on the
    number of ranks.  ``self_loops``: every node also gets an edge to itself (what
    DGL's ``add_self_loop`` gives; ``GraphConv``/``GATConv`` refuse nodes without
    in-edges).
    """
    t0 = time.perf_counter()
    spec = SyntheticSpec(int(num_nodes), float(avg_degree), int(feat_dim), int(num_classes), int(seed),
                         float(homophily), float(noise), float(train_frac), float(val_frac),
                         float(test_frac), bool(edge_feat), str(name), int(chunk_nodes), bool(self_loops))
    with raw.guard(comm):
        spec.check()
    raw.check_output(path, overwrite, comm)
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    model = SyntheticModel(spec)
    c_lo, c_hi = raw.slice_bounds(model.num_chunks(), rank, size)
    mine = [model.edge_count(c) for c in range(c_lo, c_hi)]
    offsets = np.concatenate([[0], np.cumsum(chunked.all_chunk_counts(comm, mine))])
    num_edges = int(offsets[-1])

    tmp = partial.partial_path(path)
    n, e = spec.num_nodes, num_edges
    row_bytes = 8 + 4 * spec.feat_dim + 8 + len(raw.MASKS)
    need = diskspace.estimate(n * row_bytes + e * (16 + (4 if spec.edge_feat else 0)), 8)
    diskspace.check_free(path, need, comm)          # agreed before the collective create
    f = raw.create_raw(tmp, comm, graph_name=spec.name, num_nodes=spec.num_nodes, num_edges=num_edges,
                       num_classes=spec.num_classes, attrs={"generator": json.dumps(asdict(spec))})
    guard = diskspace.WriteGuard(comm, tmp, path)
    guard.reserve(f, need)                          # before anything is flushed: no write below runs out
    with guard.step("creating its datasets"):
        dsets = {
            "src": raw.create_rows(f, raw.EDGES_SRC, e, np.int64),
            "dst": raw.create_rows(f, raw.EDGES_DST, e, np.int64),
            "feat": raw.create_rows(f, f"{raw.NODE_DATA}/feat", n, np.float32, (spec.feat_dim,)),
            "label": raw.create_rows(f, f"{raw.NODE_DATA}/label", n, np.int64),
        }
        for m in raw.MASKS:
            dsets[m] = raw.create_rows(f, f"{raw.NODE_DATA}/{m}", n, np.bool_)
        if spec.edge_feat:
            dsets["weight"] = raw.create_rows(f, f"{raw.EDGE_DATA}/weight", e, np.float32)
    guard.reserve(f, need)
    with guard.step("writing its rows", collective=False):
        chunked.write_chunks(dsets, range(c_lo, c_hi), offsets,
                             lambda c: dict(zip(("src", "dst", "weight"), model.edges(c, model.degrees(c)))),
                             lambda c: (model.chunk_range(c)[0], model.node_data(c)))
    guard.close(f)
    partial.commit(tmp, path, comm)
    return {"path": path, "num_nodes": spec.num_nodes, "num_edges": num_edges,
            "num_classes": spec.num_classes, "feat_dim": spec.feat_dim,
            "seconds": time.perf_counter() - t0, "ranks": size}
