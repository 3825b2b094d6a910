"""Array kernels used by the pipeline.

``np.unique`` of numpy 2.4 is an order of magnitude slower than sort-and-mask on
large int64 arrays (tens of seconds for 10^7 keys); these do the same by sorting.
``np.sort`` of int64 is vectorised (~1.7 s for 3*10^7 keys here) where ``np.argsort``
is not (~9 s): :func:`stable_argsort` packs each key with its position into one
int64 and sorts that.
"""
from __future__ import annotations

import numpy as np

from .. import _ext

#: Key ranges up to this size are ordered by a counting sort (one streaming pass).
COUNTING_MAX_KEYS = 1 << 12


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """Independent: ``np.argsort(keys, kind="stable")`` of a 1-D integer array (int64
    positions): a counting sort for a small key range, else a sort of ``(key - min)``
    and position packed into one int64 when they fit in 63 bits, else NumPy's."""
    keys = np.ascontiguousarray(keys, dtype=np.int64).reshape(-1)
    n = len(keys)
    if n < 2:
        return np.arange(n, dtype=np.int64)
    lo, hi = int(keys.min()), int(keys.max())
    span = hi - lo + 1
    if span <= COUNTING_MAX_KEYS:
        return _ext.counting_order(keys, lo, span)
    pos_bits = (n - 1).bit_length()
    if (span - 1).bit_length() + pos_bits <= 63:
        packed = keys - lo
        packed <<= pos_bits
        packed |= np.arange(n, dtype=np.int64)
        packed.sort()
        packed &= (1 << pos_bits) - 1
        return packed
    return np.argsort(keys, kind="stable")


def unique(x: np.ndarray) -> np.ndarray:
    """Independent: sorted unique values of a 1-D array (as ``np.unique``)."""
    s = np.sort(np.asarray(x).reshape(-1))
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Independent: (sorted unique values, index of each element's value among them)."""
    x = np.asarray(x).reshape(-1)
    order = stable_argsort(x)
    s = x[order]
    keep = np.empty(len(s), dtype=bool)
    if len(s):
        keep[0] = True
        np.not_equal(s[1:], s[:-1], out=keep[1:])
    inv = np.empty(len(s), dtype=np.int64)
    inv[order] = np.cumsum(keep) - 1
    return s[keep], inv


def unique_counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Independent: (sorted unique values, how often each occurs)."""
    s = np.sort(np.asarray(x).reshape(-1))
    if len(s) == 0:
        return s, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    counts = np.diff(np.append(starts, len(s)))
    return s[starts], counts
