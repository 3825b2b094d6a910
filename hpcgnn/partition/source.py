"""Reading the raw input graph (docs/format-raw.md) for the partitioner.

The one place where the partitioner touches the raw file: :class:`RawSource` opens
it collectively, checks its schema on every rank (agreed: a bad file raises the same
:class:`~hpcgnn.errors.InputError` on all ranks, naming file, dataset and rank), and
reads contiguous row slices.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import h5py
import numpy as np

from ..comm.agree import agreed
from ..datasets.raw import first_outside
from ..errors import InputError
from ..io.h5 import open_h5

FORMAT = "hpcgnn-raw"
VERSION = 1
FEAT_NAMES_FINITE = ("feat",)  # float node data that must hold no NaN/inf


def block(n: int, rank: int, size: int) -> tuple[int, int]:
    """Independent: rows ``[lo, hi)`` of ``n`` that rank ``rank`` of ``size`` reads."""
    return rank * n // size, (rank + 1) * n // size


@dataclass(frozen=True)
class Column:
    """One dataset of the input: its path in the file, dtype and per-row shape."""

    name: str
    path: str
    dtype: np.dtype
    tail: tuple


def _open(path: str, comm):
    if comm.Get_size() > 1 or h5py.get_config().mpi:
        if not h5py.get_config().mpi:
            raise InputError("h5py was built without MPI: parallel reading needs h5py with driver='mpio'")
        return open_h5(path, "r", comm)
    return open_h5(path, "r")


class RawSource:
    """Collective over ``comm``: an opened and validated raw graph file.

    Attributes: ``path``, ``graph_name``, ``num_nodes``, ``num_edges``,
    ``num_classes`` (or None), ``node_cols`` / ``edge_cols`` (name -> :class:`Column`,
    including ``node_type``/``edge_type`` when the file has types), ``ntypes`` and
    ``etypes`` (lists of names or None).
    """

    def __init__(self, path: str, comm) -> None:
        self.path = path
        self.comm = comm
        self.rank = comm.Get_rank()
        self.f = None
        with agreed(comm):
            if not os.path.isfile(path):
                raise InputError(f"{path}: no such input file (rank {self.rank})")
        with agreed(comm):
            try:
                self.f = _open(path, comm)
            except OSError as e:
                raise InputError(f"{path}: cannot open as HDF5 ({e}) (rank {self.rank})") from e
        try:
            with agreed(comm):
                self._check_schema()
        except Exception:
            self.close()
            raise

    # -- schema -------------------------------------------------------------------------
    def _err(self, field: str, what: str) -> InputError:
        return InputError(f"{self.path}: {field}: {what} (rank {self.rank})")

    def _attr(self, key: str, required: bool = True):
        if key not in self.f.attrs:
            if required:
                raise self._err(f"attribute '{key}'", "missing")
            return None
        v = self.f.attrs[key]
        return v.decode() if isinstance(v, bytes) else v

    def _int_attr(self, key: str, required: bool = True):
        """An integer root attribute (a float that is a whole number is accepted)."""
        v = self._attr(key, required)
        if v is None:
            return None
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            return int(v)                 # exact, however large
        try:
            f = float(v)
            ok = f == int(f)
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise self._err(f"attribute '{key}'", f"is {v!r}, expected an integer")
        return int(f)

    def _column(self, name: str, path: str, nrows: int, field: str) -> Column:
        if path not in self.f:
            raise self._err(f"dataset '/{path}'", "missing")
        d = self.f[path]
        if not hasattr(d, "shape"):
            raise self._err(f"'/{path}'", "is a group, expected a dataset")
        if d.ndim < 1 or d.shape[0] != nrows:
            raise self._err(f"dataset '/{path}'", f"shape {d.shape}, expected {nrows} rows ({field})")
        if d.dtype.kind not in "biuf":
            raise self._err(f"dataset '/{path}'", f"dtype {d.dtype} is not numeric or bool")
        # read into (and written out in) this machine's byte order: readers map the rows
        return Column(name, path, np.dtype(d.dtype).newbyteorder("="), tuple(d.shape[1:]))

    def _check_schema(self) -> None:
        fmt = self._attr("format")
        if fmt != FORMAT:
            raise self._err("attribute 'format'", f"is {fmt!r}, expected {FORMAT!r}")
        ver = self._int_attr("version")
        if ver != VERSION:
            raise self._err("attribute 'version'", f"is {ver}, this hpcgnn reads version {VERSION}")
        self.graph_name = str(self._attr("graph_name"))
        self.num_nodes = self._int_attr("num_nodes")
        self.num_edges = self._int_attr("num_edges")
        self.num_classes = self._int_attr("num_classes", required=False)
        if self.num_nodes < 1:
            raise self._err("attribute 'num_nodes'", f"is {self.num_nodes}, expected >= 1")
        if self.num_edges < 0:
            raise self._err("attribute 'num_edges'", f"is {self.num_edges}, expected >= 0")
        n, e = self.num_nodes, self.num_edges
        for end in ("src", "dst"):
            c = self._column(end, f"edges/{end}", e, "num_edges")
            if c.dtype.kind not in "iu" or c.tail:
                raise self._err(f"dataset '/edges/{end}'", f"dtype {c.dtype} shape {(e,) + c.tail}, "
                                f"expected a 1-D integer array (int64)")
        self.node_cols, self.edge_cols = {}, {}
        if "nodes/data" in self.f:
            for name in sorted(self.f["nodes/data"]):
                self.node_cols[name] = self._column(name, f"nodes/data/{name}", n, "num_nodes")
        if "edges/data" in self.f:
            for name in sorted(self.f["edges/data"]):
                self.edge_cols[name] = self._column(name, f"edges/data/{name}", e, "num_edges")
        for name in ("train_mask", "val_mask", "test_mask"):
            c = self.node_cols.get(name)
            if c is not None and (c.dtype.kind not in "bu" or c.tail):
                raise self._err(f"dataset '/nodes/data/{name}'", f"dtype {c.dtype} shape {(n,) + c.tail}, "
                                "expected 1-D bool or uint8")
        c = self.node_cols.get("label")
        if c is not None and c.dtype.kind not in "iu":
            raise self._err("dataset '/nodes/data/label'", f"dtype {c.dtype}, expected integers (int64)")
        c = self.node_cols.get("feat")
        if c is not None and (c.dtype.kind != "f" or len(c.tail) != 1):
            raise self._err("dataset '/nodes/data/feat'", f"dtype {c.dtype} shape {(n,) + c.tail}, "
                            "expected a 2-D float array (one row of features per node)")
        self.ntypes = self.etypes = None
        for kind, rows, attr in (("nodes", n, "ntypes"), ("edges", e, "etypes")):
            if f"{kind}/type" in self.f:
                c = self._column(f"{kind[:-1]}_type", f"{kind}/type", rows, f"num_{kind}")
                if c.dtype.kind not in "iu" or c.tail:
                    raise self._err(f"dataset '/{kind}/type'", f"dtype {c.dtype}, expected 1-D int16")
                (self.node_cols if kind == "nodes" else self.edge_cols)[c.name] = c
                names = self.f.attrs.get(attr, self.f[f"{kind}/type"].attrs.get(attr, None))
                if names is not None:
                    try:
                        names = json.loads(names.decode() if isinstance(names, bytes) else names)
                    except ValueError as err:
                        raise self._err(f"attribute '/{kind}/type' {attr}", f"not JSON ({err})") from err
                    if not isinstance(names, list) or (attr == "ntypes" and not all(isinstance(x, str) for x in names)):
                        raise self._err(f"attribute {attr}", f"is {names!r}, expected a JSON list of type names")
                setattr(self, attr, names)

        self.col_ntypes = {}   # node dataset -> the node types it describes (attribute 'ntypes')
        for name, c in self.node_cols.items():
            v = self.f[c.path].attrs.get("ntypes", None) if name != "node_type" else None
            if v is None:
                continue
            try:
                v = json.loads(v.decode() if isinstance(v, bytes) else v)
            except ValueError as err:
                raise self._err(f"attribute '/{c.path}' ntypes", f"not JSON ({err})") from err
            if not self.ntypes:
                raise self._err(f"attribute '/{c.path}' ntypes", f"{v!r} names node types, but the file has no "
                                "root attribute 'ntypes' (with /nodes/type) that declares them")
            if not isinstance(v, list) or any(t not in self.ntypes for t in v):
                raise self._err(f"attribute '/{c.path}' ntypes", f"{v!r} must list node types of {self.ntypes}")
            self.col_ntypes[name] = [str(t) for t in v]

    # -- reading ------------------------------------------------------------------------
    def node_block(self) -> tuple[int, int]:
        return block(self.num_nodes, self.rank, self.comm.Get_size())

    def edge_block(self) -> tuple[int, int]:
        return block(self.num_edges, self.rank, self.comm.Get_size())

    def read(self, col: Column, lo: int, hi: int) -> np.ndarray:
        """Independent: rows ``[lo, hi)`` of one column."""
        out = np.empty((hi - lo,) + col.tail, dtype=col.dtype)
        if hi > lo:
            self.f[col.path].read_direct(out, np.s_[lo:hi])
        return out

    def read_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Collective (agreed): this rank's block of (src, dst) as int64, ids checked."""
        lo, hi = self.edge_block()
        with agreed(self.comm):
            ends = []
            for end in ("src", "dst"):
                a = np.asarray(self.f[f"edges/{end}"][lo:hi]).astype(np.int64, copy=False)
                if len(a) and (a.min() < 0 or a.max() >= self.num_nodes):
                    bad = int(np.flatnonzero((a < 0) | (a >= self.num_nodes))[0])
                    raise self._err(f"dataset '/edges/{end}'", f"row {lo + bad} holds node id {int(a[bad])} "
                                    f"outside [0, {self.num_nodes})")
                ends.append(a)
        return ends[0], ends[1]

    def read_node_col(self, name: str, mask: bool = False, rows: tuple[int, int] | None = None) -> np.ndarray:
        """Independent: this rank's node block of node column ``name`` (``rows``: only the
        block's rows ``[start, stop)``); feat checked finite, labels and masks (the split
        masks, or any column read with ``mask=True``) checked in range (call inside
        :func:`~hpcgnn.comm.agree.agreed`)."""
        lo, hi = self.node_block()
        if rows is not None:
            lo, hi = lo + rows[0], lo + rows[1]
        col = self.node_cols[name]
        a = self.read(col, lo, hi)
        if name in FEAT_NAMES_FINITE and a.dtype.kind == "f" and a.size and not np.isfinite(a).all():
            bad = int(np.flatnonzero(~np.isfinite(a.reshape(len(a), -1)).all(axis=1))[0])
            raise self._err(f"dataset '/{col.path}'", f"row {lo + bad} holds NaN or inf")
        if mask and (a.ndim != 1 or a.dtype.kind not in "biu"):
            raise self._err(f"dataset '/{col.path}'", f"dtype {a.dtype} shape {(self.num_nodes,) + a.shape[1:]}; "
                            "a mask is one bool or 0/1 integer per node")
        ranges = []
        if name == "label":
            ranges.append((-1, self.num_classes if self.num_classes is not None else None,
                           "the label range [-1, num_classes) (-1 = unlabeled)"))
        if (mask or name in ("train_mask", "val_mask", "test_mask")) and a.dtype.kind != "b":
            ranges.append((0, 2, "a mask's values {0, 1}"))
        for rng in ranges:
            bad = first_outside(a, rng[0], rng[1])
            if bad is not None:
                raise self._err(f"dataset '/{col.path}'", f"value {bad[1]} at row {lo + bad[0]} is outside {rng[2]}")
        return a

    def read_edge_col(self, name: str) -> np.ndarray:
        """Independent: this rank's edge block of edge column ``name``."""
        lo, hi = self.edge_block()
        return self.read(self.edge_cols[name], lo, hi)

    def close(self) -> None:
        """Collective: close the file."""
        if self.f is not None:
            self.f.close()
            self.f = None
