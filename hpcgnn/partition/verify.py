"""Checking a partitioned graph against its JSON: the partition groups' counts and
every dataset's checksum (``checksums`` -> ``datasets``, see docs/format.md).

Used where partitions are read anyway — the servers filling their tables
(:class:`hpcgnn.graph.tables.GraphTables`), :func:`hpcgnn.partition.load_partition` —
on the arrays as they are read, and by ``hpcgnn verify``, which reads every
dataset.  The checksum is the writer's (:func:`hpcgnn.io.checksum.fletcher_partial`),
computed here by blocks of bytes with float32 row and column sums (exact: every
partial sum stays below 2**24), about 5x faster than the writer's loop (2-2.8 GB/s
on one core).
"""
from __future__ import annotations

import h5py
import numpy as np

from ..errors import InputError
from ..io.checksum import CHECKSUM_ALGORITHM, checksum_hex
from .config import VERIFY_ENV
from .featdtype import LOGICAL_KEY

_MOD = 1 << 64
_L = 2048                  # bytes per row of the matrix a block is viewed as
_BLOCK = 1 << 19           # bytes per block (256 rows): every row and column sum stays below 2**24
_COL = np.arange(_L, dtype=np.int64)
_ROW = np.arange(_BLOCK // _L, dtype=np.int64)
_READ_BYTES = 64 << 20     # rows read at a time by dataset_checksum


def fletcher(arr: np.ndarray, byte_offset: int = 0) -> tuple[int, int]:
    """Independent: the same ``(s1, s2)`` as :func:`~hpcgnn.io.checksum.fletcher_partial`.

    A block of bytes ``b_j`` viewed as rows of ``_L`` bytes has ``sum(j * b_j) =
    L * sum(r * rowsum_r) + sum(c * colsum_c)``: two float32 sums per block (exact,
    below 2**24; no BLAS, whose threads crawl on a core shared with other ranks)
    instead of a uint64 copy of every byte and a dot product."""
    a = np.ascontiguousarray(arr)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    b = a.reshape(-1).view(np.uint8)
    whole = len(b) - len(b) % _L
    s1 = sk = 0                                  # sk: sum of j * b_j, j from 0
    for c in range(0, whole, _BLOCK):
        x = b[c:min(c + _BLOCK, whole)].reshape(-1, _L).astype(np.float32)
        rows = x.sum(axis=1).astype(np.int64)
        cols = x.sum(axis=0).astype(np.int64)
        rs = int(rows.sum())
        s1 += rs
        sk += c * rs + _L * int(rows @ _ROW[:len(x)]) + int(cols @ _COL)
    tail = b[whole:].astype(np.int64)
    ts = int(tail.sum())
    s1 += ts
    sk += whole * ts + int(tail @ np.arange(len(tail), dtype=np.int64))
    return s1 % _MOD, ((byte_offset + 1) * s1 + sk) % _MOD


class Checksum:
    """A dataset's checksum from its rows, given in order (one array or several)."""

    def __init__(self) -> None:
        self.s1 = self.s2 = self.nbytes = 0

    def add(self, arr: np.ndarray) -> None:
        s1, s2 = fletcher(arr, self.nbytes)
        self.s1, self.s2 = (self.s1 + s1) % _MOD, (self.s2 + s2) % _MOD
        self.nbytes += int(np.asarray(arr).nbytes)

    def hex(self) -> str:
        return checksum_hex(self.s1, self.s2)


def dataset_checksum(d: h5py.Dataset) -> Checksum:
    """Independent: the checksum of an HDF5 dataset, read about 64 MiB at a time."""
    s = Checksum()
    if d.ndim == 0:
        s.add(np.asarray(d[()]))
        return s
    row = int(np.prod(d.shape[1:], dtype=np.int64)) * d.dtype.itemsize
    step = max(1, _READ_BYTES // max(row, 1))
    for i in range(0, d.shape[0], step):
        s.add(d[i:i + step])
    if d.shape[0] == 0:
        s.add(np.zeros(0, np.uint8))
    return s


def expected(conf: dict, p: int) -> dict[str, str] | None:
    """The JSON's checksums of partition ``p``'s datasets, by name in the group
    (``node/feat``); None when the JSON has none of an algorithm this hpcgnn knows."""
    sums = conf.get("checksums")
    if not isinstance(sums, dict) or sums.get("algorithm") != CHECKSUM_ALGORITHM:
        return None
    prefix = f"part{p}/"
    return {k[len(prefix):]: v for k, v in sums.get("datasets", {}).items() if k.startswith(prefix)}


def mismatch(h5: str, config: str, p: int, name: str, got: str, want: str) -> str:
    """The line for a dataset whose checksum is not the JSON's."""
    return (f"{h5}: dataset /part{p}/{name} (partition {p}) differs from what was written: checksum {got}, "
            f"{config} records {want} (the file changed after partitioning, or the JSON's h5_file names "
            f"another file); `hpcgnn verify` lists every difference, {VERIFY_ENV}=0 loads it anyway")


class PartChecks:
    """Partition ``p``'s datasets checked against the JSON's checksums as a reader
    reads them: :meth:`check` each array read, then :meth:`check_rest` reads and
    checks the datasets with a checksum that the reader does not need.  With
    ``enabled`` False (``HPCGNN_VERIFY=0``) nothing is checked."""

    def __init__(self, conf: dict, p: int, h5: str, config: str, enabled: bool = True) -> None:
        self.p, self.h5, self.config = p, h5, config
        self.want = (expected(conf, p) or {}) if enabled else {}

    def check(self, name: str, *arrays: np.ndarray) -> None:
        """``name`` (in the group, e.g. ``node/feat``) read as ``arrays`` (its rows
        in order): raise :class:`InputError` when its checksum is not the JSON's."""
        want = self.want.pop(name, None)
        if want is None:
            return
        s = Checksum()
        for a in arrays:
            s.add(a)
        if s.hex() != want:
            raise InputError(mismatch(self.h5, self.config, self.p, name, s.hex(), want))

    def check_rest(self, grp: h5py.Group) -> None:
        for name in sorted(self.want):
            line = dataset_problem(grp, self.p, name, self.want.pop(name), self.h5, self.config)
            if line:
                raise InputError(line)


def dataset_problem(grp: h5py.Group, p: int, name: str, want: str, h5: str, config: str) -> str | None:
    """Independent: read dataset ``name`` of partition ``p`` and compare its checksum;
    the problem's line, or None."""
    d = grp.get(name)
    if not isinstance(d, h5py.Dataset):
        return f"{h5}: dataset /part{p}/{name} (partition {p}) is missing; {config} records a checksum for it"
    try:
        got = dataset_checksum(d).hex()
    except OSError as e:
        return f"{h5}: dataset /part{p}/{name} (partition {p}) cannot be read ({e})"
    return None if got == want else mismatch(h5, config, p, name, got, want)


def dtype_problems(grp: h5py.Group, p: int, conf: dict, h5: str, config: str) -> list[str]:
    """Independent: partition ``p``'s node and edge data against the JSON's dtypes
    (``node_feats``/``edge_feats``), and the logical dtype of features stored at
    another precision (``--feat-dtype``: the datasets' attribute ``logical_dtype``)."""
    out = []
    for kind in ("node", "edge"):
        for name, schema in sorted(conf.get(f"{kind}_feats", {}).items()):
            d = grp.get(f"{kind}/{name}")
            if not isinstance(d, h5py.Dataset):
                continue                   # a missing dataset is named by its checksum
            want, got = schema.get(LOGICAL_KEY), d.attrs.get(LOGICAL_KEY)
            got = got.decode() if isinstance(got, bytes) else got
            if str(d.dtype) != schema.get("dtype") or want != got:
                out.append(f"{h5}: dataset /part{p}/{kind}/{name} (partition {p}) is {d.dtype}"
                           f"{f' holding {got}' if got else ''}; {config} says {schema.get('dtype')}"
                           f"{f' holding {want}' if want else ''}")
    return out


def structure_problems(f: h5py.File, p: int, nodes: tuple[int, int], edges: tuple[int, int], h5: str,
                       config: str) -> list[str]:
    """Independent: partition ``p``'s group attributes against the JSON's id ranges
    (``nodes``/``edges``: its ``[start, end)`` in ``node_map``/``edge_map``)."""
    g = f.get(f"part{p}")
    if not isinstance(g, h5py.Group):
        return [f"{h5}: group /part{p} is missing; {config} describes partition {p}"]
    want = {"node_start": (nodes[0], "node_map"), "node_end": (nodes[1], "node_map"),
            "num_inner_nodes": (nodes[1] - nodes[0], "node_map"),
            "edge_start": (edges[0], "edge_map"), "edge_end": (edges[1], "edge_map"),
            "num_edges": (edges[1] - edges[0], "edge_map")}
    out = []
    for attr, (value, key) in want.items():
        if attr in g.attrs and int(g.attrs[attr]) != value:
            out.append(f"{h5}: /part{p} attribute '{attr}' is {int(g.attrs[attr])}, but {config}'s '{key}' "
                       f"gives {value} (partition {p}; is the JSON's h5_file another graph's?)")
    return out
