"""The streaming check of a partitioned graph against its raw input (``hpcgnn verify
--raw``): collective, at any number of ranks, reading both files in bounded chunks.

It checks what the partitioning tests check in memory (tests/harness/),
without any rank holding the graph:

* **one owner per node**: the original ids (``/part<p>/orig_nid``) of all partitions
  are a permutation of ``0 .. N-1`` (exact: each rank marks the owners of its block of
  original ids; a duplicate, a missing id or one out of range is named);
* **every edge once**: the stored edges, as (original source, original destination)
  through ``orig_nid``, are the raw edges owned by that partition, as a multiset; the
  original edge ids (``orig_eid``) name their raw rows; edge data and types match
  under ``orig_eid``;
* **node data match** under ``orig_nid`` (features, labels, masks, node types): a
  feature stored at half precision (``--feat-dtype``) must equal the raw values
  rounded by :mod:`.featdtype`; node and edge types agree with the id ranges and CSR.

Multisets are compared by digests (:mod:`.digest`): the check is probabilistic, a
damaged partition passes with probability about 2**-64.  It needs the original ids,
so the graph must have been partitioned with ``return_mapping`` (``--return-mapping``).
Each rank holds 12 bytes per node of its block of ``N / ranks`` node ids (original ->
partition, new -> original) plus one chunk of rows (``chunk_rows``, at most
``READ_BYTES`` of a field).  A problem raises an :class:`InputError` naming the file,
the dataset and the partition, alike on every rank.
"""
from __future__ import annotations

import os
import time

import h5py
import numpy as np

from ..comm.agree import agreed, raise_if_any
from ..comm.collectives import all_max, all_sum
from ..comm.alltoall import alltoallv
from ..comm.mpi import MPI
from ..errors import InputError
from ..io.h5 import open_h5
from .assign import owner_of
from .check_edges import edge_rounds, raw_fields
from .config import read_config
from .digest import Tally, hash_ids, hash_rows
from .source import block

#: rows read (and hashed) at a time per rank
CHUNK_ROWS = 1 << 19
#: at most this many bytes of one field are read at a time
READ_BYTES = 64 << 20


def check_partition_stream(raw_path: str, config: str, comm=None, chunk_rows: int = CHUNK_ROWS) -> dict:
    """Collective over ``comm`` (default ``MPI.COMM_WORLD``): check the partitioned graph
    of the JSON ``config`` against the raw graph ``raw_path`` (module docstring).
    Returns a summary (the same on every rank); raises :class:`InputError` on every rank
    at the first problem found (one line: file, dataset, partition)."""
    comm = MPI.COMM_WORLD if comm is None else comm
    t0 = time.perf_counter()
    c = None
    try:
        with agreed(comm):
            c = _Check(comm, raw_path, config, chunk_rows)
        times = {}
        new2orig = c.part_nodes()
        raise_if_any(comm, c.error())
        owner = c.owners(new2orig)
        raise_if_any(comm, c.error())
        c.raw_nodes(owner)
        times["nodes_s"] = time.perf_counter() - t0
        edge_rounds(c, new2orig, owner)
        raise_if_any(comm, c.error())
        times["edges_s"] = time.perf_counter() - t0 - times["nodes_s"]
        c.tally.reduce(comm)
        raise_if_any(comm, c.digest_error())
    finally:
        if c is not None:
            c.close()
    ms = {k: all_max(comm, int(1000 * v)) / 1000 for k, v in times.items()}
    return {"raw": os.path.abspath(raw_path), "config": os.path.abspath(config), "num_nodes": c.N,
            "num_edges": c.E, "num_parts": c.P, "ranks": c.R, "chunk_rows": c.chunk, "ok": True,
            "fields": ["edges", "orig_eid"] + [f.key for f in c.efields + c.nfields],
            "half_precision": {f.key: f.conv.logical for f in c.nfields if f.conv is not None},
            "bytes_read": all_sum(comm, c.nbytes),
            "seconds": all_max(comm, int(1000 * (time.perf_counter() - t0))) / 1000, **ms}


def _open(path: str, what: str) -> h5py.File:
    try:
        return open_h5(path, "r")
    except OSError as e:
        raise InputError(f"{path}: cannot open {what} ({e})") from e


class _Check:
    """Independent constructor (call it inside :func:`agreed`): both files opened, the
    JSON and the raw file's datasets checked against each other."""

    def __init__(self, comm, raw_path: str, config: str, chunk_rows: int) -> None:
        self.comm, self.rank, self.R = comm, comm.Get_rank(), comm.Get_size()
        self.raw_path, self.config, self.chunk = raw_path, config, max(1, int(chunk_rows))
        self.raw = self.part = None
        self.problem, self.nbytes = None, 0
        conf, base = read_config(config)
        self.h5 = os.path.join(base, conf["h5_file"])
        if not conf.get("return_mapping"):
            raise InputError(f"{config}: the graph was partitioned without --return-mapping, so its partitions "
                             f"do not store the original node and edge ids (/part<p>/orig_nid, orig_eid) that "
                             f"relate them to {raw_path}; partition again with --return-mapping to check it "
                             f"against the raw graph (hpcgnn verify without --raw checks the checksums)")
        self.N, self.E, self.P = int(conf["num_nodes"]), int(conf["num_edges"]), int(conf["num_parts"])
        self.edge_dir = conf.get("edge_dir", "in")
        self.nstart, self.estart, self.type_bins, self.NT = _ranges(conf)
        self.T = max(1, len(conf.get("etypes") or {}))
        self.nb = np.array([block(self.N, r, self.R)[0] for r in range(self.R)] + [self.N], dtype=np.int64)
        try:
            self.raw = _open(raw_path, "the raw graph")
            self.part = _open(self.h5, f"the partition file named by {config}")
            self._check_files(conf)
        except BaseException:
            self.close()
            raise
        self.tally = Tally(["edges", "orig_eid"] + [f.key for f in self.efields + self.nfields], self.P)

    def _check_files(self, conf: dict) -> None:
        """The raw file's totals and datasets against the JSON, and every partition's
        datasets there with the JSON's rows."""
        for attr, want in (("num_nodes", self.N), ("num_edges", self.E)):
            got = self.raw.attrs.get(attr)
            if got is None or int(got) != want:
                raise InputError(f"{self.raw_path}: attribute '{attr}' is {got}, but {self.config} has {want}: "
                                 f"is this the graph that was partitioned?")
        self.nfields = raw_fields(self, conf, "node")
        self.efields = raw_fields(self, conf, "edge")
        for p in range(self.P):
            g = self.part.get(f"part{p}")
            if not isinstance(g, h5py.Group):
                raise InputError(f"{self.h5}: group /part{p} is missing; {self.config} describes partition {p}")
            n, e = self.part_nodes_of(p), int(self.estart[p + 1] - self.estart[p])
            want = {"orig_nid": n, "orig_eid": e, "csr/indptr": self.T * n + 1, "csr/indices": e,
                    **{f.key: n for f in self.nfields}, **{f.key: e for f in self.efields}}
            for name, rows in want.items():
                d = g.get(name)
                if not isinstance(d, h5py.Dataset) or d.ndim < 1 or d.shape[0] != rows:
                    got = "is missing" if not isinstance(d, h5py.Dataset) else f"has shape {d.shape}"
                    raise InputError(f"{self.h5}: dataset /part{p}/{name} (partition {p}) {got}; {self.config} "
                                     f"gives it {rows} rows")

    def part_nodes_of(self, p: int) -> int:
        return int(self.nstart[p + 1] - self.nstart[p])

    def step(self, fields) -> int:
        """Rows per chunk: ``chunk`` rows, fewer when a field's rows are wide."""
        widest = max([8] + [f.row_bytes for f in fields])
        return max(1, min(self.chunk, READ_BYTES // widest))

    def read(self, d: h5py.Dataset, lo: int, hi: int) -> np.ndarray:
        rows = d[lo:hi]
        self.nbytes += rows.nbytes
        return rows

    def fail(self, line: str) -> None:
        """Record a problem (the first one found on this rank is reported)."""
        if self.problem is None:
            self.problem = line

    def node_ids(self, ids: np.ndarray, where: str, row0: int) -> np.ndarray:
        """``ids`` (read from ``where``, its rows from ``row0``), a problem recorded for
        the first that is not a node id, and clipped into range so the check goes on."""
        bad = (ids < 0) | (ids >= self.N)
        if not bad.any():
            return ids
        i = int(np.argmax(bad))
        self.fail(f"{where}: value {int(ids[i])} at row {row0 + i} is not a node id ([0, {self.N}))")
        return np.clip(ids, 0, self.N - 1)

    def error(self) -> InputError | None:
        return InputError(self.problem) if self.problem else None

    def part_nodes(self) -> np.ndarray:
        """The original ids of this rank's block of new ids (``orig_nid``), and the
        partitions' node rows there hashed under them."""
        a, b = int(self.nb[self.rank]), int(self.nb[self.rank + 1])
        orig = np.zeros(b - a, dtype=np.int64)
        step = self.step(self.nfields)
        for p in range(self.P):
            g, first = self.part[f"part{p}"], int(self.nstart[p])
            for c in range(max(a, first), min(b, int(self.nstart[p + 1])), step):
                c1 = min(c + step, b, int(self.nstart[p + 1]))
                ids = self.node_ids(self.read(g["orig_nid"], c - first, c1 - first).astype(np.int64),
                                    f"{self.h5}: dataset /part{p}/orig_nid (partition {p})", c - first)
                orig[c - a:c1 - a] = ids
                base = hash_ids("node", ids)
                for f in self.nfields:
                    rows = self.read(g[f.key], c - first, c1 - first)
                    if f.key == "node_type":
                        self._check_node_types(p, c, rows)
                    self.tally.add(Tally.PART, f.key, p, hash_rows(base, rows))
        return orig

    def _check_node_types(self, p: int, c: int, rows: np.ndarray) -> None:
        want = (owner_of(self.type_bins, np.arange(c, c + len(rows))) % self.NT).astype(np.int64)
        bad = np.flatnonzero(rows.astype(np.int64) != want)
        if len(bad):
            v = c + int(bad[0])
            self.fail(f"{self.h5}: dataset /part{p}/node_type (partition {p}): node {v} has type "
                      f"{int(rows[bad[0]])} but lies in node_map's range of type {int(want[bad[0]])}")

    def owners(self, new2orig: np.ndarray) -> np.ndarray:
        """Collective: the partition owning each original id of this rank's block, each
        checked to be stored by exactly one partition."""
        lo, hi = int(self.nb[self.rank]), int(self.nb[self.rank + 1])
        owner = np.full(hi - lo, -1, dtype=np.int32)
        rounds = all_max(self.comm, -(-len(new2orig) // self.chunk))
        for k in range(rounds):
            ids = new2orig[k * self.chunk:(k + 1) * self.chunk]
            parts = owner_of(self.nstart, lo + k * self.chunk + np.arange(len(ids))).astype(np.int32)
            got, got_parts = alltoallv(self.comm, owner_of(self.nb, ids), ids, parts)
            self._claim(owner, got - lo, got_parts)
        missing = np.flatnonzero(owner < 0)
        if len(missing):
            self.fail(f"{self.h5}: node {lo + int(missing[0])} of {self.raw_path} is in no partition (no "
                      f"/part<p>/orig_nid holds it; {len(missing)} such node(s) in [{lo}, {hi})): every node "
                      f"must have one owner")
        return owner

    def _claim(self, owner: np.ndarray, idx: np.ndarray, parts: np.ndarray) -> None:
        order = np.argsort(idx, kind="stable")
        dup = np.flatnonzero(idx[order][1:] == idx[order][:-1])
        taken = np.flatnonzero(owner[idx] >= 0)
        if len(dup) or len(taken):
            i, j = (order[dup[0]], order[dup[0] + 1]) if len(dup) else (None, taken[0])
            p0 = int(parts[i]) if i is not None else int(owner[idx[j]])
            p, q = sorted((p0, int(parts[j])))
            v = int(idx[j]) + int(self.nb[self.rank])
            held = f"twice by partition {p}" if p == q else f"by partitions {p} and {q}"
            self.fail(f"{self.h5}: dataset /part{q}/orig_nid (partition {q}): node {v} of {self.raw_path} is "
                      f"stored {held}: every node must have one owner")
        owner[idx] = parts

    def raw_nodes(self, owner: np.ndarray) -> None:
        """The raw node rows of this rank's block hashed, each under its owner."""
        lo, hi = int(self.nb[self.rank]), int(self.nb[self.rank + 1])
        step = self.step(self.nfields)
        for c in range(lo, hi, step):
            c1 = min(c + step, hi)
            parts, base = owner[c - lo:c1 - lo], hash_ids("node", np.arange(c, c1, dtype=np.int64))
            for f in self.nfields:
                try:
                    rows = f.from_raw(self.read(self.raw[f.raw], c, c1), f"{self.raw_path}: dataset /{f.raw}")
                except InputError as e:         # beyond float16: the partitioner would have refused it
                    self.fail(str(e))
                    continue
                self.tally.add(Tally.RAW, f.key, parts, hash_rows(base, rows))

    def digest_error(self) -> InputError | None:
        """After :meth:`Tally.reduce`: the digests that differ, as one line."""
        bad = self.tally.mismatches()
        if not bad:
            return None
        lines = [self._mismatch(*b) for b in bad]
        more = "" if len(bad) == 1 else "; also differing: " + ", ".join(
            f"/part{p}/{_dataset(k)}" for k, p, _, _ in bad[1:9]) + (" ..." if len(bad) > 9 else "")
        return InputError(lines[0] + more)

    def _mismatch(self, key: str, p: int, n_raw: int, n_part: int) -> str:
        where = f"{self.h5}: dataset /part{p}/{_dataset(key)} (partition {p})"
        rows = f"{n_part} rows stored, {n_raw} expected"
        if key == "edges":
            end = "destination" if self.edge_dir == "in" else "source"
            return (f"{where} does not hold the edges of {self.raw_path} whose {end} it owns, mapped by "
                    f"orig_nid ({rows}): an edge is missing, repeated or has another endpoint")
        if key == "orig_eid":
            return f"{where}: the original edge ids do not name the raw rows (/edges/src, /edges/dst) of its edges"
        f = next(f for f in self.nfields + self.efields if f.key == key)
        how = f" rounded to {f.conv.logical}" if f.conv is not None and f.conv.logical != "float32" else ""
        ids = "orig_nid" if key.startswith("node") else "orig_eid"
        return f"{where} differs from {self.raw_path}'s /{f.raw}{how} under the mapping {ids} ({rows})"

    def close(self) -> None:
        for f in (self.raw, self.part):
            if f is not None:
                f.close()
        self.raw = self.part = None


def _dataset(key: str) -> str:
    return {"edges": "csr/indices", "orig_eid": "orig_eid"}.get(key, key)


def _ranges(conf: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Partition starts of node and edge ids (``[P + 1]``), the starts of the node
    (partition, type) bins (``[P * T + 1]``) and the number of node types."""
    out = []
    for key, types in (("node_map", "ntypes"), ("edge_map", "etypes")):
        order = conf.get(types) or {}
        names = sorted(conf[key], key=lambda k: order.get(k, 0))
        r = np.stack([np.asarray(conf[key][k], dtype=np.int64).reshape(-1, 2) for k in names], axis=1)
        out.append((np.append(r[:, 0, 0], r[-1, -1, 1]), np.append(r.reshape(-1, 2)[:, 0], r[-1, -1, 1]), len(names)))
    (nstart, bins, nt), (estart, _, _) = out
    return nstart, estart, bins, nt
