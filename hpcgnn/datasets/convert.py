"""Converters into the raw format: OGB node-property directories, edge lists
(``.npy``, CSV/TSV, parquet) and in-memory PyG ``Data`` objects.

The OGB and edge-list converters run in one process: they stream their input in
blocks (bounded memory) and write with the default HDF5 driver.  Under ``mpirun``
rank 0 does the work and the other ranks wait; an error is raised on every rank.
:func:`from_pyg` can write in parallel when every rank holds the same ``Data``.
Every converter writes ``OUT.partial`` and renames it when complete, so a failed
conversion leaves no output.  Bad input raises :class:`InputError` naming the file
and the field.
"""
from __future__ import annotations

import gzip
import io
import os
import warnings
from typing import Any, Callable, Iterator

import numpy as np

from ..comm.agree import agreed
from ..errors import InputError
from ..io import diskspace, h5, partial
from . import raw

BLOCK_BYTES = 1 << 26  # text read per block
BLOCK_ROWS = 1 << 22   # rows per block from .npy / parquet
OGB_SPLIT_FILES = (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask"))


def _on_root(comm, fn: Callable[[], Any]) -> Any:
    """Collective: run ``fn`` on rank 0 alone, agree its error, broadcast its result."""
    if comm is None or comm.Get_size() == 1:
        return fn()
    result = None
    with agreed(comm):
        if comm.Get_rank() == 0:
            result = fn()
    return comm.bcast(result, root=0)


def _write_file(out: str, overwrite: bool, body: Callable[[Any], dict]) -> dict:
    """Single process: check ``out``, let ``body(file)`` fill ``out.partial``, rename."""
    raw.check_output(out, overwrite)
    tmp = partial.partial_path(out)
    f = h5.open_h5(tmp, "w")
    try:
        info = body(f)
        f.close()
        partial.commit(tmp, out)
    except BaseException as e:
        try:
            f.close()
        except Exception:               # noqa: BLE001 - a close that flushes onto a full disk fails too
            pass
        partial.remove_quietly(tmp)
        if isinstance(e, Exception) and diskspace.disk_full(e):
            raise InputError(f"{out}: the disk filled while writing it ({getattr(e, 'strerror', None) or e}): "
                             "disk full; the partial file was removed") from None
        raise
    return info


def _check_ids(ids: np.ndarray, n: int | None, path: str, field: str, row0: int) -> None:
    if not len(ids):
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or (n is not None and hi >= n):
        flat = ids.reshape(len(ids), -1)
        out = (flat < 0) | (flat >= (n if n is not None else np.inf))
        row, col = divmod(int(np.flatnonzero(out)[0]), flat.shape[1])
        raise InputError(f"{path}: {field}: id {int(flat[row, col])} at row {row0 + row} is outside "
                         f"[0, {n if n is not None else 'inf'})")


# ----------------------------------------------------------------- text input

def _open_text(path: str):
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _text_blocks(path: str) -> Iterator[str]:
    """Whole lines of a (gzipped) text file, about ``BLOCK_BYTES`` at a time."""
    block_bytes = BLOCK_BYTES
    with _open_text(path) as fh:
        carry = b""
        while True:
            try:
                buf = fh.read(block_bytes)
            except OSError as e:  # e.g. gzip.BadGzipFile
                raise InputError(f"{path}: cannot read ({e})") from None
            if not buf:
                break
            buf = carry + buf
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf
                continue
            carry = buf[cut + 1:]
            yield buf[:cut + 1].decode("utf-8", errors="replace")
        if carry.strip():
            yield carry.decode("utf-8", errors="replace")


def _parse(text: str, path: str, field: str, dtype, delimiter: str | None, usecols=None) -> np.ndarray:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
            return np.loadtxt(io.StringIO(text), delimiter=delimiter, dtype=dtype, ndmin=2, comments="#",
                              usecols=usecols)
    except ValueError as e:
        raise InputError(f"{path}: {field}: cannot parse ({e})") from None


def _csv_rows(path: str, field: str, dtype, ncols: int | None = None) -> Iterator[np.ndarray]:
    """Blocks of rows of a headerless CSV file, checking the column count."""
    for text in _text_blocks(path):
        block = _parse(text, path, field, dtype, ",")
        if not block.size:
            continue
        if ncols is not None and block.shape[1] != ncols:
            raise InputError(f"{path}: {field}: expected {ncols} column(s), found {block.shape[1]}")
        yield block


def _read_small(path: str, field: str) -> np.ndarray:
    return np.concatenate(list(_csv_rows(path, field, np.float64)) or [np.empty((0, 1))])


# ----------------------------------------------------------------- OGB

def convert_ogb(src_dir: str, out: str, *, split: str | None = None, name: str | None = None,
                overwrite: bool = False, comm=None) -> dict:
    """Convert an OGB node-property dataset directory (``<dir>/raw/*.csv.gz`` and
    ``<dir>/split/<split>/{train,valid,test}.csv.gz``) to a raw file at ``out``.

    Collective over ``comm`` when given (rank 0 works, see the module docstring).
    Returns a summary dict.
    """
    return _on_root(comm, lambda: _convert_ogb(src_dir, out, split, name, overwrite))


def _convert_ogb(src_dir: str, out: str, split: str | None, name: str | None, overwrite: bool) -> dict:
    if not os.path.isdir(src_dir):
        raise InputError(f"{src_dir}: no such directory")
    rdir = os.path.join(src_dir, "raw") if os.path.isdir(os.path.join(src_dir, "raw")) else src_dir
    p = lambda fname: os.path.join(rdir, fname)  # noqa: E731
    if os.path.exists(p("num-node-dict.csv.gz")):
        raise InputError(f"{rdir}: heterogeneous OGB datasets (num-node-dict.csv.gz) are not supported yet")
    if os.path.exists(p("data.npz")) and not os.path.exists(p("edge.csv.gz")):
        raise InputError(f"{rdir}: the binary OGB layout (data.npz) is not supported yet")
    for need in ("edge.csv.gz", "num-node-list.csv.gz", "num-edge-list.csv.gz"):
        if not os.path.isfile(p(need)):
            raise InputError(f"{p(need)}: no such file (required in an OGB raw directory)")
    n_list = _read_small(p("num-node-list.csv.gz"), "num-node-list").ravel()
    e_list = _read_small(p("num-edge-list.csv.gz"), "num-edge-list").ravel()
    if len(n_list) != 1 or len(e_list) != 1:
        raise InputError(f"{rdir}: num-node-list/num-edge-list: expected one graph, found {len(n_list)}")
    for what, v in (("num-node-list", n_list[0]), ("num-edge-list", e_list[0])):
        if not (np.isfinite(v) and v >= 0 and v == int(v)):
            raise InputError(f"{p(what + '.csv.gz')}: {what}: {v} is not a count (a whole number >= 0)")
    n, e = int(n_list[0]), int(e_list[0])
    masks = _ogb_split(src_dir, split, n)
    label, num_classes = None, None
    if os.path.isfile(p("node-label.csv.gz")):
        blocks = list(_csv_rows(p("node-label.csv.gz"), "node-label", np.float64))
        if not blocks:
            raise InputError(f"{p('node-label.csv.gz')}: node-label: the file holds no rows, num-node-list says {n}")
        lab = np.concatenate(blocks)
        bad = ~np.isnan(lab) & ((lab < 0) | (lab != np.floor(lab)))
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            raise InputError(f"{p('node-label.csv.gz')}: node-label: row {row} holds {lab[row].tolist()}; "
                             "labels are class numbers (whole numbers >= 0, or NaN for none)")
        if lab.shape[0] != n:
            raise InputError(f"{p('node-label.csv.gz')}: node-label: {lab.shape[0]} rows, num-node-list says {n}")
        label = np.where(np.isnan(lab), -1, lab).astype(np.int64)
        if label.shape[1] == 1:
            label = label[:, 0]
            num_classes = int(label.max()) + 1 if n else 0
    gname = name or os.path.basename(os.path.normpath(src_dir))

    def body(f) -> dict:
        raw.write_attrs(f, gname, n, e, num_classes)
        src = raw.create_rows(f, raw.EDGES_SRC, e, np.int64)
        dst = raw.create_rows(f, raw.EDGES_DST, e, np.int64)

        def put_edges(lo: int, b: np.ndarray) -> None:
            raw.write_rows(src, lo, b[:, 0])
            raw.write_rows(dst, lo, b[:, 1])
        _stream_rows(p("edge.csv.gz"), "edge", e, "num-edge-list.csv.gz", put_edges, np.int64, 2, n)
        for fname, dname, rows, declared in (
                ("node-feat.csv.gz", f"{raw.NODE_DATA}/feat", n, "num-node-list.csv.gz"),
                ("edge-feat.csv.gz", f"{raw.EDGE_DATA}/feat", e, "num-edge-list.csv.gz")):
            if os.path.isfile(p(fname)):
                width = _first_row(p(fname), fname[:-7]).shape[1]
                d = raw.create_rows(f, dname, rows, np.float32, (width,))
                _stream_rows(p(fname), fname[:-7], rows, declared, lambda lo, b, d=d: raw.write_rows(d, lo, b),
                             np.float32, width)
        if label is not None:
            f.create_dataset(f"{raw.NODE_DATA}/label", data=label)
        for key, mask in masks.items():
            f.create_dataset(f"{raw.NODE_DATA}/{key}", data=mask)
        return {"path": out, "num_nodes": n, "num_edges": e, "num_classes": num_classes}

    return _write_file(out, overwrite, body)


def _first_row(path: str, field: str) -> np.ndarray:
    for block in _csv_rows(path, field, np.float64):
        return block[:1]
    raise InputError(f"{path}: {field}: the file has no rows")


def _stream_rows(path: str, field: str, expect: int, declared: str, put: Callable[[int, np.ndarray], Any],
                 dtype, ncols: int, num_nodes: int | None = None) -> None:
    """Stream the rows of a CSV file into ``put(row0, block)``, checking the row count
    against ``expect`` (from the file ``declared``) and, with ``num_nodes``, the ids."""
    row = 0
    for block in _csv_rows(path, field, dtype, ncols):
        if row + len(block) > expect:
            raise InputError(f"{path}: {field}: more than {expect} rows, the count {declared} declares")
        if num_nodes is not None:
            _check_ids(block, num_nodes, path, field, row)
        put(row, block)
        row += len(block)
    if row != expect:
        raise InputError(f"{path}: {field}: {row} rows, but {declared} declares {expect}")


def _ogb_split(src_dir: str, split: str | None, n: int) -> dict[str, np.ndarray]:
    sdir = os.path.join(src_dir, "split")
    if split is None:
        names = sorted(os.listdir(sdir)) if os.path.isdir(sdir) else []
        if not names:
            return {}
        if len(names) > 1:
            raise InputError(f"{sdir}: several splits {names}: choose one with --split")
        split = names[0]
    masks = {}
    for fname, key in OGB_SPLIT_FILES:
        path = os.path.join(sdir, split, fname + ".csv.gz")
        idx = np.concatenate(list(_csv_rows(path, fname, np.int64, 1)) or [np.empty((0, 1), np.int64)])[:, 0]
        _check_ids(idx, n, path, fname, 0)
        mask = np.zeros(n, dtype=np.bool_)
        mask[idx] = True
        for (other, _), prev in zip(OGB_SPLIT_FILES, masks.values()):
            both = np.flatnonzero(mask & prev)
            if len(both):     # a node trained on and tested on would make the accuracy wrong
                raise InputError(f"{path}: node {int(both[0])} is also in {other}.csv.gz "
                                 f"({len(both)} nodes in both): the splits must not overlap")
        masks[key] = mask
    return masks


# ----------------------------------------------------------------- edge lists

def convert_edges(src_file: str, out: str, *, fmt: str | None = None, num_nodes: int | None = None,
                  src_col: str | int | None = None, dst_col: str | int | None = None,
                  name: str | None = None, overwrite: bool = False, comm=None) -> dict:
    """Convert an edge list (``.npy`` [E, 2] or [2, E]; CSV/TSV with optional header and
    ``#`` comments, gzipped or not; parquet) to a raw file without node data.

    ``num_nodes`` defaults to the largest id + 1.  Columns are chosen by name (with a
    header) or 0-based index; default: ``src``/``dst`` if named so, else the first two.
    Collective over ``comm`` when given (rank 0 works).  Returns a summary dict.
    """
    return _on_root(comm, lambda: _convert_edges(src_file, out, fmt, num_nodes, src_col, dst_col, name,
                                                 overwrite))


def _guess_format(path: str) -> str:
    low = path.lower().removesuffix(".gz")
    return "npy" if low.endswith(".npy") else "parquet" if low.endswith((".parquet", ".pq")) else "csv"


def _convert_edges(path: str, out: str, fmt: str | None, num_nodes: int | None, src_col, dst_col,
                   name: str | None, overwrite: bool) -> dict:
    fmt = fmt or _guess_format(path)
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    if num_nodes is not None and num_nodes < 0:
        raise InputError(f"{path}: --num-nodes must be >= 0, got {num_nodes}")
    blocks = {"npy": _npy_blocks, "csv": _csv_edge_blocks, "parquet": _parquet_blocks}.get(fmt)
    if blocks is None:
        raise InputError(f"{path}: unknown edge-list format {fmt!r} (npy, csv or parquet)")
    gname = name or os.path.basename(path).split(".")[0]

    def body(f) -> dict:
        src = raw.create_rows(f, raw.EDGES_SRC, 0, np.int64, resizable=True)
        dst = raw.create_rows(f, raw.EDGES_DST, 0, np.int64, resizable=True)
        e, top = 0, -1
        for s, d in blocks(path, src_col, dst_col):
            _check_ids(s, num_nodes, path, "src", e)
            _check_ids(d, num_nodes, path, "dst", e)
            if len(s):
                top = max(top, int(s.max()), int(d.max()))
            src.resize((e + len(s),))
            dst.resize((e + len(s),))
            raw.write_rows(src, e, s.astype(np.int64))
            raw.write_rows(dst, e, d.astype(np.int64))
            e += len(s)
        n = num_nodes if num_nodes is not None else top + 1
        raw.write_attrs(f, gname, n, e, None)
        return {"path": out, "num_nodes": n, "num_edges": e, "num_classes": None}

    return _write_file(out, overwrite, body)


def _npy_blocks(path: str, src_col, dst_col) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as e:
        raise InputError(f"{path}: not a readable .npy array ({e})") from None
    if a.ndim != 2 or 2 not in a.shape or a.dtype.kind not in "iu":
        raise InputError(f"{path}: edge array: expected integer shape [E, 2] or [2, E], got {a.dtype} {a.shape}")
    rows = a if a.shape[1] == 2 else a.T
    for lo in range(0, rows.shape[0], BLOCK_ROWS):
        b = np.asarray(rows[lo:lo + BLOCK_ROWS])
        yield b[:, 0].astype(np.int64), b[:, 1].astype(np.int64)


def _pick(cols: list[str] | None, want, default: int, path: str, field: str) -> int:
    if want is None:
        return cols.index(field) if cols and field in cols else default
    if isinstance(want, int) or str(want).isdigit():
        return int(want)
    if not cols or want not in cols:
        raise InputError(f"{path}: column {want!r} ({field}) not found; columns: {cols or 'no header'}")
    return cols.index(want)


def _csv_edge_blocks(path: str, src_col, dst_col) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    with _open_text(path) as fh:
        first = b""
        for line in fh:
            if line.strip() and not line.lstrip().startswith(b"#"):
                first = line.strip()
                break
    text = first.decode()
    delim = "," if "," in text else ("\t" if "\t" in text else None)
    fields = [x.strip() for x in (text.split(delim) if delim else text.split())]
    header = bool(fields) and not all(_is_number(x) for x in fields)
    cols = fields if header else None
    si, di = _pick(cols, src_col, 0, path, "src"), _pick(cols, dst_col, 1, path, "dst")
    if max(si, di) >= max(len(fields), 2):
        raise InputError(f"{path}: column index {max(si, di)} out of range: the file has {len(fields)} column(s)")
    skip_header = header
    for text in _text_blocks(path):
        if skip_header:
            text, skip_header = _drop_first_data_line(text)
        block = _parse(text, path, "edges", np.int64, delim, (si, di))
        if block.size:
            yield block[:, 0], block[:, 1]


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _drop_first_data_line(text: str) -> tuple[str, bool]:
    """Remove the first line that is neither blank nor a comment (the header);
    return the rest and whether the header is still to be found."""
    pos = 0
    while pos < len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end + 1
        line = text[pos:end].strip()
        if line and not line.startswith("#"):
            return text[:pos] + text[end:], False
        pos = end
    return text, True


def _parquet_blocks(path: str, src_col, dst_col) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    try:
        import pyarrow.parquet as pq   # optional: only for Parquet edge lists
    except ImportError:
        raise InputError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types
        raise InputError(f"{path}: not a readable parquet file ({e})") from None
    cols = list(pf.schema_arrow.names)
    picks = [_pick(cols, src_col, 0, path, "src"), _pick(cols, dst_col, 1, path, "dst")]
    if max(picks) >= len(cols):
        raise InputError(f"{path}: column index {max(picks)} out of range: columns are {cols}")
    names = [cols[i] for i in picks]
    for batch in pf.iter_batches(batch_size=BLOCK_ROWS, columns=names):
        s, d = (batch.column(i).to_numpy(zero_copy_only=False) for i in range(2))
        if s.dtype.kind not in "iu" or d.dtype.kind not in "iu":
            raise InputError(f"{path}: columns {names}: must be integers, got {s.dtype}/{d.dtype}")
        yield s.astype(np.int64), d.astype(np.int64)


# ----------------------------------------------------------------- PyG

def from_pyg(data, path: str, comm=None, name: str = "pyg", overwrite: bool = False) -> dict:
    """Write a ``torch_geometric.data.Data`` to a raw file.

    ``x`` -> ``feat`` (float32), integer ``y`` -> ``label`` (int64; [N, 1] squeezed),
    float ``y`` -> ``target``, ``train_mask``/``val_mask``/``test_mask`` -> bool masks,
    ``edge_index`` -> ``/edges/src``, ``/edges/dst``, ``edge_attr`` -> ``/edges/data/feat``.
    ``comm=None``: this process alone.  With ``comm``, collective: every rank must hold
    the same ``data`` and writes its own slice in parallel.
    """
    def arr(key: str) -> np.ndarray | None:
        v = getattr(data, key, None)
        return None if v is None else np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v)

    with raw.guard(comm):
        if hasattr(data, "node_types") and hasattr(data, "edge_types"):
            raise InputError("from_pyg: a HeteroData (typed graph) is not converted; write the raw format's "
                             "/nodes/type and /edges/type yourself (docs/format.md) or convert one Data")
        ei = arr("edge_index")
        if ei is None or ei.ndim != 2 or ei.shape[0] != 2 or ei.dtype.kind not in "iu":
            raise InputError(f"{path}: data.edge_index: expected an integer [2, E] tensor, got "
                             f"{None if ei is None else (ei.dtype, ei.shape)}")
        n, e = int(data.num_nodes), int(ei.shape[1])
        node: dict[str, np.ndarray] = {}
        edge: dict[str, np.ndarray] = {}
        x, y, ea = arr("x"), arr("y"), arr("edge_attr")
        if x is not None:
            node["feat"] = (x if x.ndim == 2 else x.reshape(len(x), -1)).astype(np.float32)
        if y is not None:
            y = y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y
            node["label" if y.dtype.kind in "iub" else "target"] = \
                y.astype(np.int64) if y.dtype.kind in "iub" else y.astype(np.float32)
        for m in raw.MASKS:
            if arr(m) is not None:
                node[m] = arr(m).astype(np.bool_)
        if ea is not None:
            edge["feat"] = ea.astype(np.float32) if ea.dtype.kind == "f" else ea
        for group, rows, what in ((node, n, "num_nodes"), (edge, e, "num_edges")):
            for key, v in group.items():
                if v.ndim < 1 or v.shape[0] != rows:
                    src_key = {"feat": "x" if group is node else "edge_attr", "label": "y", "target": "y"}.get(key, key)
                    raise InputError(f"{path}: data.{src_key}: first dimension {v.shape[:1]} != {what} = {rows}")
        rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
        lo, hi = raw.slice_bounds(e, rank, size)
        _check_ids(ei[:, lo:hi].T, n, path, "data.edge_index", lo)
    num_classes = int(node["label"].max()) + 1 if "label" in node and n else None
    raw.check_output(path, overwrite, comm)
    tmp = partial.partial_path(path)
    f = raw.create_raw(tmp, comm, graph_name=name, num_nodes=n, num_edges=e, num_classes=num_classes)
    guard = diskspace.WriteGuard(comm, tmp, path)
    guard.reserve(f)                    # before anything is flushed (see diskspace)
    with guard.step("creating and writing its datasets", collective=False):
        nlo, nhi = raw.slice_bounds(n, rank, size)
        writes = [(raw.create_rows(f, dname, e, np.int64), lo, ei[row, lo:hi].astype(np.int64))
                  for row, dname in enumerate((raw.EDGES_SRC, raw.EDGES_DST))]
        for group, prefix, a, b in ((node, raw.NODE_DATA, nlo, nhi), (edge, raw.EDGE_DATA, lo, hi)):
            for key in sorted(group):
                v = group[key]
                writes.append((raw.create_rows(f, f"{prefix}/{key}", v.shape[0], v.dtype, v.shape[1:]), a, v[a:b]))
        guard.reserve(f)        # every dataset created: their blocks, before any write
        for d, start, rows in writes:
            raw.write_rows(d, start, rows)
    guard.close(f)
    partial.commit(tmp, path, comm)
    return {"path": path, "num_nodes": n, "num_edges": e, "num_classes": num_classes}
