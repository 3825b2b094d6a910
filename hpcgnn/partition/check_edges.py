"""The edges of the streaming partition check (:mod:`.check`), and the fields (node
and edge datasets) it compares.

Rank ``r`` reads a share of each partition's CSR rows (``csr/indptr``) and the edges
under them, in chunks, and a block of the raw edge rows.  The endpoints of a stored
edge become original ids by asking the rank that holds their block of ``orig_nid``;
a raw edge's partition is that of its owner endpoint, asked of the rank holding the
owner's block of original ids.  Every chunk is one round of those two exchanges,
and every rank takes part in every round (an empty chunk when it has none left).
"""
from __future__ import annotations

from dataclasses import dataclass

import h5py
import numpy as np

from ..comm.collectives import all_max
from ..comm.alltoall import query
from ..errors import InputError
from .assign import owner_of
from .digest import Tally, hash_ids, hash_rows, mix
from .featdtype import LOGICAL_KEY, FeatConversion
from .source import block


@dataclass(frozen=True)
class Field:
    """A node or edge dataset compared row by row: ``key`` its name in a partition group
    (``node/feat``, ``edge_type``), ``raw`` the raw file's dataset, ``dtype`` the stored
    dtype (the JSON's), ``conv`` the ``--feat-dtype`` conversion of a feature."""

    key: str
    raw: str
    dtype: np.dtype
    row_bytes: int
    conv: FeatConversion | None = None

    def from_raw(self, rows: np.ndarray, where: str) -> np.ndarray:
        """Raw rows as the partitioner stores them (rounded to half precision for a
        converted feature)."""
        if self.conv is not None:
            return self.conv.convert(rows, where)
        return np.asarray(rows, dtype=self.dtype)


def raw_fields(c, conf: dict, kind: str) -> list[Field]:
    """Independent: the ``kind`` (``node``/``edge``) datasets of the JSON, each checked
    to exist in the raw file ``c.raw`` with the right rows; a raw dataset the
    partitions lack is refused."""
    side, rows = ("nodes", c.N) if kind == "node" else ("edges", c.E)
    schema = conf.get(f"{kind}_feats") or {}
    out = []
    for name, s in sorted(schema.items()):
        conv = FeatConversion(name, s[LOGICAL_KEY], np.dtype(s.get("raw_dtype", "float32"))) \
            if LOGICAL_KEY in s else None
        dt = np.dtype(s["dtype"])
        out.append(Field(f"{kind}/{name}", f"{side}/data/{name}", dt,
                         int(np.prod(s.get("shape", []), dtype=np.int64)) * dt.itemsize, conv))
    if conf.get(f"has_{kind}_type"):
        out.append(Field(f"{kind}_type", f"{side}/type", np.dtype(np.int16), 2))
    data = c.raw.get(f"{side}/data")
    extra = sorted(set(data) - set(schema)) if isinstance(data, h5py.Group) else []
    if f"{side}/type" in c.raw and not conf.get(f"has_{kind}_type"):
        extra.append("type")
    if extra:
        raise InputError(f"{c.raw_path}: dataset /{side}/{'data/' if extra[0] != 'type' else ''}{extra[0]} is in "
                         f"no partition ({c.config} does not list it): not the graph that was partitioned?")
    for f in out:
        d = c.raw.get(f.raw)
        tail = list(schema.get(f.key.split("/", 1)[-1], {}).get("shape", [])) if "/" in f.key else []
        if not isinstance(d, h5py.Dataset) or d.ndim < 1 or d.shape[0] != rows or list(d.shape[1:]) != tail:
            got = "is missing" if not isinstance(d, h5py.Dataset) else f"has shape {d.shape}"
            raise InputError(f"{c.raw_path}: dataset /{f.raw} {got}; {c.config} has {f.key} with rows "
                             f"{[rows] + tail}")
    return out


def edge_rounds(c, new2orig: np.ndarray, owner: np.ndarray) -> None:
    """Collective: hash every stored edge and every raw edge of this rank's shares,
    one chunk of each per round, until no rank has any left."""
    mine, raws = _part_chunks(c), _raw_chunks(c)
    while True:
        pt, rt = next(mine, None), next(raws, None)
        if not all_max(c.comm, int(pt is not None or rt is not None)):
            return
        _part_edges(c, pt, new2orig)
        _raw_edges(c, rt, owner)


def _raw_chunks(c):
    lo, hi = block(c.E, c.rank, c.R)
    step = c.step(c.efields)
    for k in range(lo, hi, step):
        yield k, min(k + step, hi)


def _part_chunks(c):
    """This rank's chunks of stored edges: ``(p, first CSR row, indptr rows, e0, e1)``,
    the CSR rows checked on the way (every rank reads one row past its share, so the
    shares' boundaries are checked too)."""
    step = c.step(c.efields)
    for p in range(c.P):
        g, n = c.part[f"part{p}"], c.part_nodes_of(p)
        rows, e_p = c.T * n, int(c.estart[p + 1] - c.estart[p])
        r0, r1 = block(rows, c.rank, c.R)
        for r in range(r0, r1, c.chunk):
            r2 = min(r + c.chunk, r1)
            ip = c.read(g["csr/indptr"], r, r2 + 1).astype(np.int64)
            line = _indptr_problem(ip, r, rows, e_p)
            if line:
                c.fail(f"{c.h5}: dataset /part{p}/csr/indptr (partition {p}): {line}")
                break
            for e0 in range(int(ip[0]), int(ip[-1]), step):
                yield p, r, ip, e0, min(e0 + step, int(ip[-1]))


def _indptr_problem(ip: np.ndarray, first: int, rows: int, num_edges: int) -> str | None:
    if first == 0 and ip[0] != 0:
        return f"starts at {int(ip[0])}, not 0"
    if first + len(ip) - 1 == rows and ip[-1] != num_edges:
        return f"ends at {int(ip[-1])}, but the partition has {num_edges} edges (edge_map)"
    down = np.flatnonzero(np.diff(ip) < 0)
    if len(down):
        return f"decreases at row {first + int(down[0]) + 1} ({int(ip[down[0]])} -> {int(ip[down[0] + 1])})"
    if ip[0] < 0 or ip[-1] > num_edges:
        return f"entries outside [0, {num_edges}] between rows {first} and {first + len(ip) - 1}"
    return None


def _rows_of(ip: np.ndarray, first: int, e0: int, e1: int) -> np.ndarray:
    """The CSR row of each edge ``e0 .. e1 - 1`` (``ip``: rows ``first ..`` of indptr)."""
    a = int(np.searchsorted(ip, e0, side="right")) - 1
    b = int(np.searchsorted(ip, e1 - 1, side="right"))
    lo, hi = np.maximum(ip[a:b], e0), np.minimum(ip[a + 1:b + 1], e1)
    return np.repeat(np.arange(first + a, first + b, dtype=np.int64), hi - lo)


def _part_edges(c, task, new2orig: np.ndarray) -> None:
    """Collective (the endpoint lookup): one chunk of stored edges hashed under the
    original ids (``task`` None: take part in the round only)."""
    own = other = np.zeros(0, dtype=np.int64)
    if task is not None:
        p, r, ip, e0, e1 = task
        g, n = c.part[f"part{p}"], c.part_nodes_of(p)
        row = _rows_of(ip, r, e0, e1)
        own = c.nstart[p] + row % n
        other = c.node_ids(c.read(g["csr/indices"], e0, e1).astype(np.int64),
                           f"{c.h5}: dataset /part{p}/csr/indices (partition {p})", e0)
    ids = np.concatenate([own, other])
    lo = int(c.nb[c.rank])
    orig = query(c.comm, owner_of(c.nb, ids), ids, lambda keys: new2orig[keys - lo])
    if task is None:
        return
    o_own, o_other = orig[:len(own)], orig[len(own):]
    h = hash_ids("edge", *((o_other, o_own) if c.edge_dir == "in" else (o_own, o_other)))
    c.tally.add(Tally.PART, "edges", p, h)
    base = hash_ids("eid", c.read(g["orig_eid"], e0, e1))
    c.tally.add(Tally.PART, "orig_eid", p, mix(h ^ base))
    for f in c.efields:
        rows = c.read(g[f.key], e0, e1)
        if f.key == "edge_type" and np.any(rows.astype(np.int64) != row // n):
            i = int(np.argmax(rows.astype(np.int64) != row // n))
            c.fail(f"{c.h5}: dataset /part{p}/edge_type (partition {p}): edge {int(c.estart[p]) + e0 + i} has "
                   f"type {int(rows[i])} but csr/indptr holds it in the rows of type {int(row[i] // n)}")
        c.tally.add(Tally.PART, f.key, p, hash_rows(base, rows))


def _raw_edges(c, task, owner: np.ndarray) -> None:
    """Collective (the owner lookup): one chunk of raw edges hashed, each under the
    partition owning its owner endpoint (``task`` None: take part in the round only)."""
    k0, k1 = task if task is not None else (0, 0)
    src = c.read(c.raw["edges/src"], k0, k1).astype(np.int64)
    dst = c.read(c.raw["edges/dst"], k0, k1).astype(np.int64)
    own = c.node_ids(dst if c.edge_dir == "in" else src,
                     f"{c.raw_path}: dataset /edges/{'dst' if c.edge_dir == 'in' else 'src'}", k0)
    lo = int(c.nb[c.rank])
    parts = query(c.comm, owner_of(c.nb, own), own, lambda keys: owner[keys - lo]).astype(np.int64)
    if task is None:
        return
    h = hash_ids("edge", src, dst)
    c.tally.add(Tally.RAW, "edges", parts, h)
    base = hash_ids("eid", np.arange(k0, k1, dtype=np.int64))
    c.tally.add(Tally.RAW, "orig_eid", parts, mix(h ^ base))
    for f in c.efields:
        rows = f.from_raw(c.read(c.raw[f.raw], k0, k1), f"{c.raw_path}: dataset /{f.raw}")
        c.tally.add(Tally.RAW, f.key, parts, hash_rows(base, rows))
