"""Pure helpers of :mod:`hpcgnn.comm.rma.rowstore`: validating ids and values, grouping
rows by owner, combining duplicate writes.  No MPI here (independent, no
communication), so they are tested in a single process.
"""
from __future__ import annotations

import numpy as np

from ...errors import InputError

#: Reductions ``RowStore.accumulate`` accepts, by name.
OPS = ("sum", "max", "min", "replace")
#: How a rank reaches a range: read in place (its own node), through the host's
#: shared window, or through the world window (another host).
DIRECT, SHM, WORLD = 0, 1, 2


def as_ids(ids, nrows: int, where: str) -> np.ndarray:
    """Row ids as a 1-D int64 array, checked against ``[0, nrows)``.

    ``ids`` may be a NumPy array, a torch tensor or a sequence of integers.  Raises
    :class:`InputError` (naming ``where``: the table and the rank) for another
    dtype, another shape or an id out of range.
    """
    if hasattr(ids, "detach") and hasattr(ids, "numpy"):  # a torch tensor, without importing torch
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids)
    if arr.size == 0:
        if arr.ndim > 1:
            raise InputError(f"{where}: ids must be 1-D, got shape {arr.shape}")
        return np.empty(0, dtype=np.int64)
    if arr.ndim != 1:
        raise InputError(f"{where}: ids must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise InputError(f"{where}: ids must be integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and int(arr.max()) >= nrows:     # before int64 wraps it to a negative id
        raise InputError(f"{where}: id {int(arr.max())} is out of range [0, {nrows})")
    arr = arr.astype(np.int64, copy=False)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= nrows:
        bad = lo if lo < 0 else hi
        raise InputError(f"{where}: id {bad} is out of range [0, {nrows})")
    return arr


_SORTED_CACHE: list = []        # the last cache ids found sorted (kept alive: ids stay unique)


def check_cache(cache, row_shape: tuple, dtype: np.dtype, where: str):
    """``cache`` (``(sorted ids, their rows)`` or None) checked: ``(ids, rows)``, the
    ids a 1-D C-contiguous int64 array sorted ascending, the rows a C-contiguous
    ``(len(ids), *row_shape)`` array of ``dtype`` (they are read, or pointed to, in
    place).  Raises :class:`InputError` naming ``where``.  Sortedness is checked once
    per ids array (the last one seen is remembered)."""
    if cache is None:
        return None, None
    try:
        cids, crows = cache
    except (TypeError, ValueError):
        raise InputError(f"{where}: cache must be a pair (sorted ids, rows), got {type(cache).__name__}") from None
    if not (isinstance(cids, np.ndarray) and cids.dtype == np.int64 and cids.ndim == 1
            and cids.flags.c_contiguous):
        raise InputError(f"{where}: cache ids must be a 1-D C-contiguous int64 NumPy array")
    want = (len(cids),) + tuple(row_shape)
    if not (isinstance(crows, np.ndarray) and crows.dtype == dtype and crows.shape == want
            and crows.flags.c_contiguous):
        got = (getattr(crows, "dtype", type(crows).__name__), getattr(crows, "shape", None))
        raise InputError(f"{where}: cache rows must be a C-contiguous {dtype} array of shape {want}, "
                         f"got {got[0]} {got[1]}")
    if not any(c is cids for c in _SORTED_CACHE):
        if len(cids) > 1 and not bool(np.all(cids[1:] >= cids[:-1])):
            raise InputError(f"{where}: cache ids must be sorted ascending")
        _SORTED_CACHE[:] = [cids]
    return cids, crows


def as_rows(values, n: int, row_shape: tuple, dtype: np.dtype, where: str) -> np.ndarray:
    """``values`` as a C-contiguous ``(n, *row_shape)`` array of ``dtype``.

    Only safe casts are made (int32 into float64, not float64 into float32); a
    scalar or a single row is not broadcast.  Raises :class:`InputError` otherwise.
    """
    if hasattr(values, "detach") and hasattr(values, "numpy"):
        values = values.detach().cpu().numpy()
    arr = np.asarray(values)
    want = (n,) + tuple(row_shape)
    if arr.shape != want:
        raise InputError(f"{where}: values have shape {arr.shape}, expected {want}")
    if arr.dtype != dtype and not np.can_cast(arr.dtype, dtype, "safe"):
        raise InputError(f"{where}: values have dtype {arr.dtype}, which does not cast safely to {dtype}")
    return np.ascontiguousarray(arr, dtype=dtype)


def pipeline_spans(n: int, row_bytes: int, first_bytes: int, max_rows: int) -> list[tuple[int, int]]:
    """Cut ``n`` rows into ``[(start, end), ...]`` pieces that grow: the first of about
    ``first_bytes``, each next one 3x the last, none over ``max_rows`` rows.  A
    gather from another host issues one ``Rget`` per piece, back to back: the owner
    starts on a small first piece at once and packs it while the next pieces'
    datatypes are built here."""
    rows = max(1, int(first_bytes) // max(int(row_bytes), 1))
    cap = max(1, int(max_rows))
    spans, s = [], 0
    while s < n:
        e = min(n, s + min(rows, cap))
        spans.append((s, e))
        s, rows = e, rows * 3
    return spans


def owner_of(ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Range index of every id (``bounds[k] <= id < bounds[k+1]``)."""
    return np.searchsorted(bounds, ids, side="right") - 1


def group(ids: np.ndarray, bounds: np.ndarray):
    """Group ids by range: ``(perm, counts)``.

    ``ids[perm]`` lists the ids of range 0, then of range 1, ...; each group keeps the
    caller's order.  ``perm`` is ``None`` when the ids are already grouped (all in
    one range, the common case), so no reordering is needed.
    """
    k = len(bounds) - 1
    if k == 1:
        return None, np.array([len(ids)], dtype=np.int64)
    if len(ids):
        first, last = owner_of(np.array([ids.min(), ids.max()]), bounds)
        if first == last:                      # one owner: no per-id search
            counts = np.zeros(k, dtype=np.int64)
            counts[first] = len(ids)
            return None, counts
    own = owner_of(ids, bounds)
    counts = np.bincount(own, minlength=k).astype(np.int64)
    if len(ids) == 0 or np.all(own[1:] >= own[:-1]):
        return None, counts
    small = own.astype(np.int16 if k < (1 << 15) else np.int64)  # int16: numpy's stable sort is a radix sort
    return np.argsort(small, kind="stable"), counts


def last_wins(ids: np.ndarray, values: np.ndarray):
    """Drop all but the last write of every repeated id (``ids`` unchanged when unique)."""
    uniq, first_from_end = np.unique(ids[::-1], return_index=True)
    if len(uniq) == len(ids):
        return ids, values
    keep = np.sort(len(ids) - 1 - first_from_end)
    return ids[keep], values[keep]


def combine(ids: np.ndarray, values: np.ndarray, op: str):
    """Fold repeated ids into one row with ``op`` (``sum``, ``max``, ``min``,
    ``replace``): an accumulate of the result equals the accumulates of every
    row one after the other."""
    uniq, inv = np.unique(ids, return_inverse=True)
    if len(uniq) == len(ids):
        return ids, values
    if op == "replace":
        return last_wins(ids, values)
    if op == "sum":
        out = np.zeros((len(uniq),) + values.shape[1:], dtype=values.dtype)
        np.add.at(out, inv, values)
    else:
        ufunc = np.maximum if op == "max" else np.minimum
        first = np.full(len(uniq), -1, dtype=np.int64)
        first[inv[::-1]] = np.arange(len(ids))[::-1]
        out = values[first].copy()
        ufunc.at(out, inv, values)
    return uniq, out


def check_layout(nrows_bounds, owners, world_size: int, name: str):
    """Validate range boundaries and owners; return ``(bounds, owners)`` as arrays."""
    bounds = np.asarray(nrows_bounds)
    if bounds.ndim != 1 or len(bounds) < 2 or bounds.dtype.kind not in "iu":
        raise InputError(f"RowStore {name!r}: boundaries must be a 1-D integer array of at least two "
                         f"entries, got {bounds!r}")
    bounds = bounds.astype(np.int64)
    if bounds[0] != 0 or np.any(np.diff(bounds) < 0):
        raise InputError(f"RowStore {name!r}: boundaries must start at 0 and never decrease, got {bounds.tolist()}")
    owners = np.asarray(owners, dtype=np.int64).reshape(-1)
    if len(owners) != len(bounds) - 1:
        raise InputError(f"RowStore {name!r}: {len(bounds) - 1} row range(s) but {len(owners)} owner(s)")
    if len(owners) and (owners.min() < 0 or owners.max() >= world_size):
        raise InputError(f"RowStore {name!r}: owner ranks {owners.tolist()} outside the {world_size} ranks")
    return bounds, owners
