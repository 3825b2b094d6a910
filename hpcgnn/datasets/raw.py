"""The raw input format (version 1): one HDF5 file holding one graph.

See ``docs/format-raw.md`` for the full specification.  This module holds the
format constants, the slicing rule, helpers to create and fill a raw file (used by
the generator and the converters), a reader (:class:`RawGraph`) and
:func:`validate_raw`.

Parallel rule: every dataset is read (and may be written) by contiguous row slices;
rank ``r`` of ``R`` owns rows ``slice_bounds(n, r, R)``.  Opening and creating files
and datasets is collective over the communicator; reading and writing rows is
independent.
"""
from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import h5py
import numpy as np

from ..comm.agree import agreed
from ..errors import InputError
from ..io.h5 import open_h5

FORMAT = "hpcgnn-raw"
VERSION = 1
EDGES_SRC = "edges/src"
EDGES_DST = "edges/dst"
NODE_DATA = "nodes/data"
EDGE_DATA = "edges/data"
NODE_TYPE = "nodes/type"
EDGE_TYPE = "edges/type"
MASKS = ("train_mask", "val_mask", "test_mask")
#: rows per block when a whole slice is scanned (bounds the memory of validation)
SCAN_ROWS = 1 << 22


def slice_bounds(n: int, rank: int, size: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of ``n`` owned by ``rank`` of ``size`` (independent, pure).

    ``lo = rank * n // size``: slices are contiguous, cover ``[0, n)`` and differ in
    length by at most one.
    """
    if size <= 0 or not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in a communicator of size {size}")
    return rank * n // size, (rank + 1) * n // size


def guard(comm) -> AbstractContextManager:
    """``agreed(comm)`` (collective), or a no-op context when ``comm`` is None."""
    return nullcontext() if comm is None else agreed(comm)


def _rank(comm) -> int:
    return 0 if comm is None else comm.Get_rank()


# --------------------------------------------------------------------- writing

def check_output(path: str, overwrite: bool, comm=None) -> None:
    """Collective: raise InputError on every rank if ``path`` exists and may not be
    replaced, or if its directory does not exist."""
    rank = _rank(comm)

    def check() -> None:
        d = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(d):
            raise InputError(f"{path}: output directory {d} does not exist [rank {rank}]")
        if os.path.isdir(path):
            raise InputError(f"{path}: output path is a directory; name the HDF5 file to write [rank {rank}]")
        if os.path.exists(path) and not overwrite:
            raise InputError(f"{path}: output file exists (pass --overwrite / overwrite=True) [rank {rank}]")

    with guard(comm):
        check()


def create_raw(path: str, comm=None, *, graph_name: str, num_nodes: int, num_edges: int,
               num_classes: int | None = None, attrs: dict[str, Any] | None = None) -> h5py.File:
    """Create (truncate) a raw file and write its root attributes.

    Collective over ``comm`` (every rank passes the same values).  Returns the open
    file; the caller creates datasets with :func:`create_rows` and closes it.
    """
    f = open_h5(path, "w", comm)
    write_attrs(f, graph_name, num_nodes, num_edges, num_classes, attrs)
    return f


def write_attrs(f: h5py.File, graph_name: str, num_nodes: int, num_edges: int,
                num_classes: int | None = None, attrs: dict[str, Any] | None = None) -> None:
    """Write the root attributes of a raw file (collective when ``f`` is parallel)."""
    f.attrs["format"] = FORMAT
    f.attrs["version"] = np.int64(VERSION)
    f.attrs["graph_name"] = str(graph_name)
    f.attrs["num_nodes"] = np.int64(num_nodes)
    f.attrs["num_edges"] = np.int64(num_edges)
    if num_classes is not None:
        f.attrs["num_classes"] = np.int64(num_classes)
    for key, val in (attrs or {}).items():
        f.attrs[key] = val


def create_rows(f: h5py.File, name: str, nrows: int, dtype, tail: tuple[int, ...] = (),
                resizable: bool = False) -> h5py.Dataset:
    """Create dataset ``name`` of shape ``(nrows, *tail)``.

    Collective when ``f`` was opened with ``driver="mpio"``.  Contiguous layout unless
    ``resizable`` (chunked, growable first dimension: single-process writers only).
    """
    shape = (int(nrows),) + tuple(int(t) for t in tail)
    if resizable:
        row_bytes = max(1, int(np.prod(tail, dtype=np.int64)) * np.dtype(dtype).itemsize)
        chunk_rows = max(1, min(1 << 20, (1 << 22) // row_bytes))
        return f.create_dataset(name, shape=shape, maxshape=(None,) + shape[1:], dtype=dtype,
                                chunks=(chunk_rows,) + shape[1:])
    return f.create_dataset(name, shape=shape, dtype=dtype)


def write_rows(dset: h5py.Dataset, lo: int, rows: np.ndarray) -> None:
    """Write ``rows`` into ``dset[lo:lo + len(rows)]`` (independent I/O)."""
    if len(rows):
        dset[lo:lo + len(rows)] = rows


# --------------------------------------------------------------------- reading

class RawGraph:
    """A raw file opened for reading.

    Construction is collective over ``comm`` (``comm=None``: this process alone) and
    checks the root attributes; the ``read_*`` methods are independent and read
    this rank's slice by default, or rows ``[lo, hi)``.  Use :func:`validate_raw`
    for a full check.  Close with :meth:`close` (collective) or a ``with`` block.
    """

    def __init__(self, path: str, comm=None) -> None:
        self.path = path
        self.comm = comm
        self.rank = _rank(comm)
        self.size = 1 if comm is None else comm.Get_size()

        def check_file() -> None:
            if not os.path.isfile(path):
                raise InputError(f"{path}: no such file [rank {self.rank}]")
            if not h5py.is_hdf5(path):
                raise InputError(f"{path}: not an HDF5 file [rank {self.rank}]")

        with guard(comm):
            check_file()
        self.file = open_h5(path, "r", comm)
        try:
            with guard(comm):
                self._read_attrs()
        except BaseException:
            self.file.close()
            raise

    def _err(self, field: str, what: str) -> InputError:
        return InputError(f"{self.path}: {field}: {what} [rank {self.rank}]")

    def _attr_int(self, key: str, required: bool = True) -> int | None:
        a = self.file.attrs
        if key not in a:
            if required:
                raise self._err(f"attribute '{key}'", "missing")
            return None
        val = np.asarray(a[key])
        if val.shape != () or val.dtype.kind not in "iu" or int(val) < 0:
            raise self._err(f"attribute '{key}'", f"must be a non-negative integer, got {a[key]!r}")
        return int(val)

    def _attr_json(self, key: str) -> list | None:
        if key not in self.file.attrs:
            return None
        raw = self.file.attrs[key]
        try:
            val = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
        except ValueError as e:
            raise self._err(f"attribute '{key}'", f"not valid JSON ({e})") from None
        if not isinstance(val, list):
            raise self._err(f"attribute '{key}'", "must be a JSON list")
        return val

    def _read_attrs(self) -> None:
        a = self.file.attrs
        fmt = a.get("format")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        if fmt != FORMAT:
            raise self._err("attribute 'format'", f"expected '{FORMAT}', got {fmt!r}")
        version = self._attr_int("version")
        if version != VERSION:
            raise self._err("attribute 'version'", f"unsupported version {version} (this hpcgnn reads {VERSION})")
        name = a.get("graph_name")
        if name is None:
            raise self._err("attribute 'graph_name'", "missing")
        self.graph_name = name.decode() if isinstance(name, bytes) else str(name)
        self.num_nodes: int = self._attr_int("num_nodes")  # type: ignore[assignment]
        self.num_edges: int = self._attr_int("num_edges")  # type: ignore[assignment]
        self.num_classes = self._attr_int("num_classes", required=False)
        self.ntypes = self._attr_json("ntypes")
        self.etypes = self._attr_json("etypes")

    # -- names and slices
    def node_data_names(self) -> list[str]:
        """Names of the datasets under ``/nodes/data`` (independent)."""
        g = self.file.get(NODE_DATA)
        return sorted(g.keys()) if isinstance(g, h5py.Group) else []

    def edge_data_names(self) -> list[str]:
        """Names of the datasets under ``/edges/data`` (independent)."""
        g = self.file.get(EDGE_DATA)
        return sorted(g.keys()) if isinstance(g, h5py.Group) else []

    def local_node_range(self) -> tuple[int, int]:
        """This rank's node rows ``[lo, hi)`` (independent)."""
        return slice_bounds(self.num_nodes, self.rank, self.size)

    def local_edge_range(self) -> tuple[int, int]:
        """This rank's edge rows ``[lo, hi)`` (independent)."""
        return slice_bounds(self.num_edges, self.rank, self.size)

    def _read(self, name: str, lo: int | None, hi: int | None, edges: bool) -> np.ndarray:
        if lo is None or hi is None:
            lo, hi = self.local_edge_range() if edges else self.local_node_range()
        d = self.file[name]
        out = d[lo:hi]
        return out.view(np.bool_) if name.endswith(MASKS) and out.dtype == np.uint8 else out

    def read_edges(self, lo: int | None = None, hi: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(src, dst)`` of edge rows ``[lo, hi)``, this rank's slice by default (independent)."""
        return self._read(EDGES_SRC, lo, hi, True), self._read(EDGES_DST, lo, hi, True)

    def read_node_data(self, name: str, lo: int | None = None, hi: int | None = None) -> np.ndarray:
        """Rows of ``/nodes/data/<name>`` (masks stored as uint8 come back as bool; independent)."""
        return self._read(f"{NODE_DATA}/{name}", lo, hi, False)

    def read_edge_data(self, name: str, lo: int | None = None, hi: int | None = None) -> np.ndarray:
        """Rows of ``/edges/data/<name>`` (independent)."""
        return self._read(f"{EDGE_DATA}/{name}", lo, hi, True)

    def read_node_types(self, lo: int | None = None, hi: int | None = None) -> np.ndarray | None:
        """Rows of ``/nodes/type`` or None when the graph is untyped (independent)."""
        return self._read(NODE_TYPE, lo, hi, False) if NODE_TYPE in self.file else None

    def read_edge_types(self, lo: int | None = None, hi: int | None = None) -> np.ndarray | None:
        """Rows of ``/edges/type`` or None when the graph is untyped (independent)."""
        return self._read(EDGE_TYPE, lo, hi, True) if EDGE_TYPE in self.file else None

    def close(self) -> None:
        """Close the file (collective over ``comm``)."""
        self.file.close()

    def __enter__(self) -> "RawGraph":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------- validation

def _check_structure(g: RawGraph) -> dict[str, Any]:
    f, n, e = g.file, g.num_nodes, g.num_edges
    info: dict[str, Any] = {"graph_name": g.graph_name, "num_nodes": n, "num_edges": e,
                            "num_classes": g.num_classes, "node_data": {}, "edge_data": {},
                            "node_data_ntypes": {}}

    def dataset(name: str, required: bool) -> h5py.Dataset | None:
        obj = f.get(name)
        if obj is None:
            if required:
                raise g._err(f"dataset /{name}", "missing")
            return None
        if not isinstance(obj, h5py.Dataset):
            raise g._err(f"/{name}", "must be a dataset")
        return obj

    def rows(name: str, d: h5py.Dataset, nrows: int, what: str) -> None:
        if d.ndim < 1 or d.shape[0] != nrows:
            raise g._err(f"dataset /{name}", f"shape {d.shape}: first dimension must be {what} = {nrows}")

    for name in (EDGES_SRC, EDGES_DST):
        d = dataset(name, True)
        rows(name, d, e, "num_edges")
        if d.ndim != 1 or d.dtype != np.int64:
            raise g._err(f"dataset /{name}", f"must be int64 [num_edges], got {d.dtype} {d.shape}")
    for group, nrows, what, key in ((NODE_DATA, n, "num_nodes", "node_data"), (EDGE_DATA, e, "num_edges", "edge_data")):
        obj = f.get(group)
        if obj is not None and not isinstance(obj, h5py.Group):
            raise g._err(f"/{group}", "must be a group")
        for dname in (sorted(obj.keys()) if obj is not None else []):
            full = f"{group}/{dname}"
            d = dataset(full, True)
            rows(full, d, nrows, what)
            if d.dtype.kind not in "biuf":
                raise g._err(f"dataset /{full}", f"must be numeric, got {d.dtype}")
            if group == NODE_DATA and dname in MASKS and (d.ndim != 1 or d.dtype not in (np.bool_, np.uint8)):
                raise g._err(f"dataset /{full}", f"must be bool (or uint8) [num_nodes], got {d.dtype} {d.shape}")
            if group == NODE_DATA and dname == "label" and d.dtype.kind not in "iu":
                raise g._err(f"dataset /{full}", f"must be an integer type, got {d.dtype}")
            if group == NODE_DATA and dname == "feat" and (d.dtype.kind != "f" or d.ndim != 2):
                raise g._err(f"dataset /{full}", f"must be floating [num_nodes, F], got {d.dtype} {d.shape}")
            info[key][dname] = (str(d.dtype), tuple(d.shape))
            if group == NODE_DATA and "ntypes" in d.attrs:
                info["node_data_ntypes"][dname] = _dataset_ntypes(g, full, d)
    for name, attr, nrows, what in ((NODE_TYPE, "ntypes", n, "num_nodes"), (EDGE_TYPE, "etypes", e, "num_edges")):
        d = dataset(name, False)
        if d is None:
            continue
        rows(name, d, nrows, what)
        if d.ndim != 1 or d.dtype != np.int16:
            raise g._err(f"dataset /{name}", f"must be int16 [{what}], got {d.dtype} {d.shape}")
        if getattr(g, attr) is None:
            raise g._err(f"attribute '{attr}'", f"missing (required with /{name})")
    if g.etypes is not None:
        for t in g.etypes:
            if not (isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) for x in t)):
                raise g._err("attribute 'etypes'", f"each entry must be [src_type, relation, dst_type], got {t!r}")
            if g.ntypes is not None and (t[0] not in g.ntypes or t[2] not in g.ntypes):
                raise g._err("attribute 'etypes'", f"{t!r} names a node type not in ntypes {g.ntypes}")
    info["ntypes"], info["etypes"] = g.ntypes, g.etypes
    return info


def _dataset_ntypes(g: RawGraph, name: str, d: h5py.Dataset) -> list[str]:
    """The node types a node dataset describes (its ``ntypes`` attribute, a JSON list
    of names of the root ``ntypes``); rows of other types hold no data."""
    val = d.attrs["ntypes"]
    try:
        val = json.loads(val.decode() if isinstance(val, bytes) else str(val))
    except ValueError as e:
        raise g._err(f"dataset /{name}", f"attribute 'ntypes' is not valid JSON ({e})") from None
    if not (isinstance(val, list) and all(isinstance(t, str) for t in val)):
        raise g._err(f"dataset /{name}", f"attribute 'ntypes' must be a JSON list of type names, got {val!r}")
    unknown = [t for t in val if g.ntypes is None or t not in g.ntypes]
    if unknown:
        raise g._err(f"dataset /{name}", f"attribute 'ntypes' names {unknown} not in the root ntypes {g.ntypes}")
    return val


def first_outside(block: np.ndarray, vmin: int, vmax: int | None) -> tuple[int, int] | None:
    """``(row, value)`` of the first row of ``block`` holding a value outside
    ``[vmin, vmax)`` (``vmax`` None: no upper bound), or None (pure)."""
    if block.dtype == np.bool_ or not block.size:
        return None
    flat = block.reshape(len(block), -1)
    out = (flat < vmin) if vmax is None else ((flat < vmin) | (flat >= vmax))
    if not out.any():
        return None
    row = int(np.flatnonzero(out.any(axis=1))[0])
    return row, int(flat[row][out[row]][0])


def _scan(g: RawGraph, name: str, lo: int, hi: int, vmin: int, vmax: int, what: str) -> None:
    """Check that rows [lo, hi) of dataset ``name`` lie in [vmin, vmax)."""
    d = g.file[name]
    for a in range(lo, hi, SCAN_ROWS):
        block = d[a:min(hi, a + SCAN_ROWS)]
        bad = first_outside(block, vmin, vmax)
        if bad is not None:
            raise g._err(f"dataset /{name}", f"value {bad[1]} at row {a + bad[0]} is outside {what} "
                                             f"[{vmin}, {vmax}) (slice min {int(block.min())}, max {int(block.max())})")


def _check_values(g: RawGraph, check_features: bool) -> None:
    elo, ehi = g.local_edge_range()
    nlo, nhi = g.local_node_range()
    for name in (EDGES_SRC, EDGES_DST):
        _scan(g, name, elo, ehi, 0, g.num_nodes, "the node id range")
    if g.ntypes is not None and NODE_TYPE in g.file:
        _scan(g, NODE_TYPE, nlo, nhi, 0, len(g.ntypes), "the node type range")
    if g.etypes is not None and EDGE_TYPE in g.file:
        _scan(g, EDGE_TYPE, elo, ehi, 0, len(g.etypes), "the edge type range")
    names = g.node_data_names()
    for m in MASKS:
        if m in names:
            _scan(g, f"{NODE_DATA}/{m}", nlo, nhi, 0, 2, "a mask's values")
    if "label" in names:
        top = g.num_classes if g.num_classes is not None else np.iinfo(np.int64).max
        _scan(g, f"{NODE_DATA}/label", nlo, nhi, -1, top, "the label range (-1 = unlabeled)")
    if check_features and "feat" in names:
        d = g.file[f"{NODE_DATA}/feat"]
        for a in range(nlo, nhi, SCAN_ROWS):
            block = d[a:min(nhi, a + SCAN_ROWS)]
            if not np.isfinite(block).all():
                bad = a + int(np.flatnonzero(~np.isfinite(block).reshape(len(block), -1).all(axis=1))[0])
                raise g._err(f"dataset /{NODE_DATA}/feat", f"row {bad} is not finite (NaN or inf)")


def _check_edge_endpoints(g: RawGraph) -> None:
    """On this rank's edge slice: an edge of type ``[s, r, d]`` joins a node of type
    ``s`` to one of type ``d``.  Node types are looked up run-length encoded (little
    memory when types are blocked), or in the whole ``/nodes/type`` when they are mixed."""
    if g.ntypes is None or g.etypes is None or NODE_TYPE not in g.file or EDGE_TYPE not in g.file:
        return
    d, n = g.file[NODE_TYPE], g.num_nodes
    starts, vals, runs, full, last = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], 0, None, None
    for a in range(0, n, SCAN_ROWS):
        block = d[a:min(n, a + SCAN_ROWS)].astype(np.int64)
        cut = np.flatnonzero(np.diff(block)) + 1
        if block[0] != last:
            cut = np.concatenate([[0], cut])
        starts.append(cut + a)
        vals.append(block[cut])
        runs, last = runs + len(cut), block[-1]
        if runs > n // 16 + 64:
            full = d[:]
            break
    if full is None:
        starts_a, vals_a = np.concatenate(starts), np.concatenate(vals)

    def ntype_of(ids: np.ndarray) -> np.ndarray:
        return full[ids] if full is not None else vals_a[np.searchsorted(starts_a, ids, side="right") - 1]

    index = {t: i for i, t in enumerate(g.ntypes)}
    want_src = np.array([index[t[0]] for t in g.etypes], dtype=np.int64)
    want_dst = np.array([index[t[2]] for t in g.etypes], dtype=np.int64)
    elo, ehi = g.local_edge_range()
    for a in range(elo, ehi, SCAN_ROWS):
        b = min(ehi, a + SCAN_ROWS)
        et = g.file[EDGE_TYPE][a:b].astype(np.int64)
        for name, want in ((EDGES_SRC, want_src), (EDGES_DST, want_dst)):
            got = ntype_of(g.file[name][a:b])
            bad = np.flatnonzero(got != want[et])
            if len(bad):
                k = int(bad[0])
                node, t = int(g.file[name][a + k]), int(got[k])
                tname = repr(g.ntypes[t]) if 0 <= t < len(g.ntypes) else "out of range"
                raise g._err(f"dataset /{name}", f"node {node} at row {a + k} has type {t} ({tname}), but "
                                                 f"edge type {g.etypes[et[k]]} needs {g.ntypes[want[et[k]]]!r}")


def validate_raw(path: str, comm=None, check_values: bool = True,
                 check_features: bool = False, check_endpoint_types: bool = True) -> dict[str, Any]:
    """Check that ``path`` is a valid raw file; return a summary dict.

    Collective over ``comm`` (``None``: this process alone).  Checks the root
    attributes, the presence, dtype and shape of every dataset (and the ``ntypes``
    attribute of node datasets), and (``check_values``) on each rank's slice: edge ids
    in ``[0, num_nodes)``, types, labels in ``[-1, num_classes)``, uint8 masks in
    {0, 1}; ``check_features`` also requires finite ``feat``; ``check_endpoint_types``
    also requires that an edge of type ``[s, r, d]`` joins a node of type ``s`` to one
    of type ``d`` (each rank looks up node types outside its slice).  A failure raises
    the same :class:`InputError`, naming the file, the dataset and the rank that found
    it, on every rank.
    """
    with RawGraph(path, comm) as g:
        with guard(comm):
            info = _check_structure(g)
        if check_values:
            with guard(comm):
                _check_values(g, check_features)
            if check_endpoint_types:
                with guard(comm):
                    _check_edge_endpoints(g)
        return info
