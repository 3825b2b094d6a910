"""A MAG-like heterogeneous synthetic graph written in parallel in the raw format.

The model (see ``docs/format-raw.md``, "Heterogeneous graphs (``--hetero``)"):

* Four node types in one id space, blocked in the order of :data:`NTYPES`: papers
  first, then authors, institutions, fields.  From ``N``: ``authors = max(1, 48N//100)``,
  ``institutions = max(1, 2N//100)``, ``fields = max(1, 10N//100)``, papers the rest.
* Every node has a class: local id ``j`` of a type with ``n_t`` nodes has position
  ``(a_t*j + b_t) mod n_t`` (one affine permutation per type, as in
  :mod:`.synthetic`) and class ``pos * C // n_t``.
* Relations (:data:`ETYPES`; each reverse relation is written as its own edges):
  ``cites`` Pareto out-degree of mean ``D`` per paper, destination in the paper's
  class with probability ``homophily``; ``writes`` 1-6 authors per paper, each of the
  paper's class with probability 0.8; ``has_topic`` 1-3 fields per paper, 0.8;
  ``affiliated_with`` one institution per author, of the author's class with 0.7.
  Inside a class, destinations are skewed to low positions (popular nodes).
* Node data describes papers only (attribute ``ntypes = ["paper"]``): ``feat`` =
  class centroid + Gaussian noise (zero rows elsewhere), ``label`` (-1 elsewhere),
  masks (false elsewhere).

Determinism: as in :mod:`.synthetic`, global ids are cut into chunks, each chunk has
its own generators ``default_rng([seed, stream, chunk])`` and makes the edges of its
papers and authors; the file is identical for any number of ranks.
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
from .synthetic import CHUNK_NODES, DEGREE_SHAPE, DEST_SKEW, SyntheticSpec, pareto_scale

NTYPES = ["paper", "author", "institution", "field"]
PAPER, AUTHOR, INSTITUTION, FIELD = range(4)
ETYPES = [["paper", "cites", "paper"], ["author", "writes", "paper"], ["paper", "rev_writes", "author"],
          ["author", "affiliated_with", "institution"], ["institution", "rev_affiliated_with", "author"],
          ["paper", "has_topic", "field"], ["field", "rev_has_topic", "paper"]]
#: percent of N for author, institution, field (each at least 1); papers get the rest
TYPE_PERCENT = (48, 2, 10)
AUTHORS_PER_PAPER = (1, 6)      # uniform, inclusive
FIELDS_PER_PAPER = (1, 3)       # uniform, inclusive
#: probability that a relation's destination has the source's class, and the skew of
#: the destination position inside the class (``u ** skew``: larger = more popular hubs)
WRITES_SAME, WRITES_SKEW = 0.8, 1.5
TOPIC_SAME, TOPIC_SKEW = 0.8, 2.0
AFFIL_SAME, AFFIL_SKEW = 0.7, 2.0
#: noise std calibrated so that a linear classifier on paper features alone reaches
#: about 45% test accuracy with 8 classes and 31% with 16 (20000 nodes, 32 features)
DEFAULT_NOISE = 0.8
_DEG, _EDGE, _FEAT, _MASK, _CENTROIDS, _PERM = 0, 1, 2, 3, 8, 9


def type_counts(num_nodes: int) -> tuple[int, int, int, int]:
    """Nodes per type ``(paper, author, institution, field)`` for ``num_nodes`` (pure)."""
    a, i, f = (max(1, num_nodes * p // 100) for p in TYPE_PERCENT)
    return num_nodes - a - i - f, a, i, f


@dataclass(frozen=True)
class HeteroSpec(SyntheticSpec):
    """Parameters of a heterogeneous synthetic graph (``edge_feat`` is not supported)."""

    noise: float = DEFAULT_NOISE
    name: str = "mag"

    def check(self) -> None:
        super().check()
        if self.num_nodes < 4:
            raise InputError(f"generate: argument num_nodes: must be >= 4 with --hetero, got {self.num_nodes}")
        papers = type_counts(self.num_nodes)[PAPER]
        if self.num_classes > papers:
            raise InputError(f"generate: argument num_classes: must be <= the number of papers {papers}, "
                             f"got {self.num_classes}")
        if self.edge_feat:
            raise InputError("generate: argument edge_feat: not supported with --hetero")


class _TypeClasses:
    """Classes of the ``n`` nodes of one type: local id ``j`` has position
    ``(a*j + b) mod n`` and class ``pos * C // n`` (pure, O(C) memory)."""

    def __init__(self, n: int, c: int, rng: np.random.Generator) -> None:
        self.n, self.c = np.uint64(n), c
        hi, a = min(n, 1 << 31), 1
        if hi > 2:
            a = int(rng.integers(1, hi))
            while math.gcd(a, n) != 1:
                a = int(rng.integers(1, hi))
        self.a, self.b = np.uint64(a), np.uint64(int(rng.integers(0, n)))
        self.ainv = np.uint64(pow(a, -1, n) if n > 1 else 0)
        self.lo = np.array([(k * n + c - 1) // c for k in range(c + 1)], dtype=np.int64)

    def of(self, local: np.ndarray) -> np.ndarray:
        """Class of each local id (int64)."""
        pos = (self.a * local.astype(np.uint64) + self.b) % self.n
        return (pos * np.uint64(self.c) // self.n).astype(np.int64)

    def pick(self, cls: np.ndarray, u: np.ndarray, skew: float) -> np.ndarray:
        """A local id of class ``cls`` at skewed position ``u ** skew`` (any node of
        the type when the class has none: fewer nodes than classes)."""
        start = self.lo[cls]
        length = self.lo[cls + 1] - start
        empty = length == 0
        start, length = np.where(empty, 0, start), np.where(empty, int(self.n), length)
        pos = start + np.minimum(np.floor(length * u ** skew).astype(np.int64), length - 1)
        x = (pos.astype(np.uint64) + self.n - self.b) % self.n
        return (self.ainv * x % self.n).astype(np.int64)


class HeteroModel:
    """The global, O(C * F)-sized state of the model, derived from the spec (pure)."""

    def __init__(self, spec: HeteroSpec) -> None:
        self.spec = spec
        self.counts = type_counts(spec.num_nodes)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.types = [_TypeClasses(n, spec.num_classes, np.random.default_rng([spec.seed, _PERM, t]))
                      for t, n in enumerate(self.counts)]
        cent = np.random.default_rng([spec.seed, _CENTROIDS]).standard_normal((spec.num_classes, spec.feat_dim))
        cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-12)
        self.centroids = cent.astype(np.float32)
        d = float(spec.avg_degree)
        self.cap = max(2.0 * d, min(float(self.counts[PAPER]), 1000.0 * d))
        self.scale = pareto_scale(d, self.cap) if d > 0 else 0.0

    def num_chunks(self) -> int:
        return -(-self.spec.num_nodes // self.spec.chunk_nodes)

    def chunk_range(self, chunk: int, ntype: int | None = None) -> tuple[int, int]:
        """Global ids ``[lo, hi)`` of a chunk, or of its nodes of type ``ntype`` (maybe empty)."""
        cn = self.spec.chunk_nodes
        lo, hi = chunk * cn, min(self.spec.num_nodes, (chunk + 1) * cn)
        if ntype is None:
            return lo, hi
        tlo, thi = int(self.offsets[ntype]), int(self.offsets[ntype + 1])
        lo, hi = max(lo, tlo), min(hi, thi)
        return lo, max(lo, hi)

    def degrees(self, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per paper of the chunk: cites out-degree, number of authors, number of fields."""
        lo, hi = self.chunk_range(chunk, PAPER)
        rng = np.random.default_rng([self.spec.seed, _DEG, chunk])
        u, v = rng.random(hi - lo), rng.random(hi - lo)
        cites = np.floor(np.minimum(self.scale * (1.0 - u) ** (-1.0 / DEGREE_SHAPE), self.cap) + v)
        authors = rng.integers(AUTHORS_PER_PAPER[0], AUTHORS_PER_PAPER[1] + 1, hi - lo)
        fields = rng.integers(FIELDS_PER_PAPER[0], FIELDS_PER_PAPER[1] + 1, hi - lo)
        return cites.astype(np.int64), authors, fields

    def edge_counts(self, chunk: int) -> list[int]:
        """Edges of each etype made by a chunk (cheap: no edge is drawn)."""
        cites, authors, fields = (int(x.sum()) for x in self.degrees(chunk))
        alo, ahi = self.chunk_range(chunk, AUTHOR)
        return [cites, authors, authors, ahi - alo, ahi - alo, fields, fields]

    def classes(self, ntype: int, ids: np.ndarray) -> np.ndarray:
        """Class of global ids of one type."""
        return self.types[ntype].of(ids - self.offsets[ntype])

    def _pick(self, rng: np.random.Generator, ntype: int, cls: np.ndarray, same: float,
              skew: float) -> np.ndarray:
        """Global ids of type ``ntype``: in class ``cls`` with probability ``same``, else
        in a uniformly drawn other class."""
        c, m = self.spec.num_classes, len(cls)
        stay = rng.random(m) < same
        if c > 1:
            cls = np.where(stay, cls, (cls + rng.integers(1, c, m)) % c)
        return self.offsets[ntype] + self.types[ntype].pick(cls, rng.random(m), skew)

    def edges(self, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(src, dst, etype)`` of a chunk's edges, grouped by etype in :data:`ETYPES` order."""
        rng = np.random.default_rng([self.spec.seed, _EDGE, chunk])
        cites, nauth, nfield = self.degrees(chunk)
        papers = np.arange(*self.chunk_range(chunk, PAPER), dtype=np.int64)
        pcls = self.classes(PAPER, papers)
        cdst = self._pick(rng, PAPER, np.repeat(pcls, cites), self.spec.homophily, DEST_SKEW)
        wp = np.repeat(papers, nauth)
        wa = self._pick(rng, AUTHOR, np.repeat(pcls, nauth), WRITES_SAME, WRITES_SKEW)
        authors = np.arange(*self.chunk_range(chunk, AUTHOR), dtype=np.int64)
        inst = self._pick(rng, INSTITUTION, self.classes(AUTHOR, authors), AFFIL_SAME, AFFIL_SKEW)
        tp = np.repeat(papers, nfield)
        tf = self._pick(rng, FIELD, np.repeat(pcls, nfield), TOPIC_SAME, TOPIC_SKEW)
        parts = [(np.repeat(papers, cites), cdst), (wa, wp), (wp, wa), (authors, inst), (inst, authors),
                 (tp, tf), (tf, tp)]
        etype = np.repeat(np.arange(len(ETYPES), dtype=np.int16), [len(s) for s, _ in parts])
        return np.concatenate([s for s, _ in parts]), np.concatenate([d for _, d in parts]), etype

    def node_data(self, chunk: int) -> dict[str, np.ndarray]:
        """type, feat, label and masks of a chunk's nodes (papers are the chunk's prefix)."""
        spec = self.spec
        lo, hi = self.chunk_range(chunk)
        k = self.chunk_range(chunk, PAPER)[1] - lo
        ids = np.arange(lo, hi, dtype=np.int64)
        ntype = (np.searchsorted(self.offsets[1:], ids, side="right")).astype(np.int16)
        label = np.full(hi - lo, -1, dtype=np.int64)
        label[:k] = self.classes(PAPER, ids[:k])
        feat = np.zeros((hi - lo, spec.feat_dim), dtype=np.float32)
        feat[:k] = np.random.default_rng([spec.seed, _FEAT, chunk]).standard_normal(
            (k, spec.feat_dim), dtype=np.float32) * np.float32(spec.noise) + self.centroids[label[:k]]
        u = np.random.default_rng([spec.seed, _MASK, chunk]).random(hi - lo)
        u[k:] = 2.0  # no split for other types
        t1, t2 = spec.train_frac, spec.train_frac + spec.val_frac
        t3 = t2 + spec.test_frac
        return {"type": ntype, "feat": feat, "label": label, "train_mask": u < t1,
                "val_mask": (u >= t1) & (u < t2), "test_mask": (u >= t2) & (u < t3)}


def generate_hetero_graph(path: str, comm, num_nodes: int, avg_degree: float, feat_dim: int, num_classes: int,
                          seed: int, *, homophily: float = 0.5, noise: float = DEFAULT_NOISE,
                          train_frac: float = 0.6, val_frac: float = 0.2, test_frac: float = 0.2,
                          name: str = "mag", chunk_nodes: int = CHUNK_NODES, overwrite: bool = False) -> dict:
    """Write a MAG-like heterogeneous graph to ``path`` in the raw format; return a summary.

    ``avg_degree`` is the mean ``cites`` out-degree of a paper; the other relations
    have fixed sizes (see the module docstring).  Collective over ``comm`` (``None``:
    this process alone), written as ``path + ".partial"`` and renamed when complete;
    bad parameters raise :class:`InputError` on every rank.  The content depends on
    the parameters only, not on the number of ranks.  The summary has the keys of
    :func:`generate_graph` plus ``ntypes``, ``etypes``, ``nodes_per_type`` (type name
    -> count) and ``edges_per_type`` (relation name -> count).
    """
    t0 = time.perf_counter()
    spec = HeteroSpec(int(num_nodes), float(avg_degree), int(feat_dim), int(num_classes), int(seed),
                      float(homophily), float(noise), float(train_frac), float(val_frac), float(test_frac),
                      False, str(name), int(chunk_nodes))
    with raw.guard(comm):
        spec.check()
    raw.check_output(path, overwrite, comm)
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    model = HeteroModel(spec)
    c_lo, c_hi = raw.slice_bounds(model.num_chunks(), rank, size)
    mine = [model.edge_counts(c) for c in range(c_lo, c_hi)]
    per_chunk = chunked.all_chunk_counts(comm, mine).reshape(-1, len(ETYPES))
    offsets = np.concatenate([[0], np.cumsum(per_chunk.sum(axis=1))])
    num_edges = int(offsets[-1])

    tmp = partial.partial_path(path)
    gen = {"model": "mag", **{k: v for k, v in asdict(spec).items() if k != "edge_feat"}}
    f = raw.create_raw(tmp, comm, graph_name=spec.name, num_nodes=spec.num_nodes, num_edges=num_edges,
                       num_classes=spec.num_classes,
                       attrs={"ntypes": json.dumps(NTYPES), "etypes": json.dumps(ETYPES),
                              "generator": json.dumps(gen)})
    guard = diskspace.WriteGuard(comm, tmp, path)
    guard.reserve(f)                    # before anything is flushed (see diskspace)
    with guard.step("creating and writing its datasets", collective=False):
        n, e = spec.num_nodes, num_edges
        dsets = {"src": raw.create_rows(f, raw.EDGES_SRC, e, np.int64),
                 "dst": raw.create_rows(f, raw.EDGES_DST, e, np.int64),
                 "etype": raw.create_rows(f, raw.EDGE_TYPE, e, np.int16),
                 "type": raw.create_rows(f, raw.NODE_TYPE, n, np.int16),
                 "feat": raw.create_rows(f, f"{raw.NODE_DATA}/feat", n, np.float32, (spec.feat_dim,)),
                 "label": raw.create_rows(f, f"{raw.NODE_DATA}/label", n, np.int64)}
        for m in raw.MASKS:
            dsets[m] = raw.create_rows(f, f"{raw.NODE_DATA}/{m}", n, np.bool_)
        for key in ("feat", "label") + raw.MASKS:
            dsets[key].attrs["ntypes"] = json.dumps(["paper"])  # describes papers only
        guard.reserve(f)
        chunked.write_chunks(dsets, range(c_lo, c_hi), offsets,
                             lambda c: dict(zip(("src", "dst", "etype"), model.edges(c))),
                             lambda c: (model.chunk_range(c)[0], model.node_data(c)))
    guard.close(f)
    partial.commit(tmp, path, comm)
    return {"path": path, "num_nodes": spec.num_nodes, "num_edges": num_edges,
            "num_classes": spec.num_classes, "feat_dim": spec.feat_dim,
            "seconds": time.perf_counter() - t0, "ranks": size,
            "ntypes": list(NTYPES), "etypes": [list(t) for t in ETYPES],
            "nodes_per_type": dict(zip(NTYPES, model.counts)),
            "edges_per_type": {t[1]: int(x) for t, x in zip(ETYPES, per_chunk.sum(axis=0))}}
