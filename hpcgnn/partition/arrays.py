"""Array kernels used by the pipeline.

``np.unique`` of numpy 2.4 is an order of magnitude slower than sort-and-mask on
large int64 arrays (tens of seconds for 10^7 keys); these do the same by sorting.
"""
from __future__ import annotations

import numpy as np


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
    order = np.argsort(x)
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
