"""The compiled grouping of a gather's remote ids by range (hpcgnn._ext.group_by_range)."""
import numpy as np
import pytest

from hpcgnn._ext import group_by_range


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_group_by_range_matches_a_stable_sort(seed):
    rng = np.random.default_rng(seed)
    bounds = np.array([0, 7, 7, 30, 100], dtype=np.int64)       # one empty range
    K = len(bounds) - 1
    ids = rng.integers(0, 100, 500).astype(np.int64)
    range_of = (np.searchsorted(bounds, ids, side="right") - 1).astype(np.int32)
    range_of[rng.random(500) < 0.2] = -1                         # read in place
    range_of[rng.random(500) < 0.1] = -2                         # from a cache
    skip = np.array([0, 0, 1, 0], dtype=np.uint8)                # range 2 read directly
    pos, offs, counts = group_by_range(range_of, skip, ids, bounds)
    keep = np.flatnonzero((range_of >= 0) & (skip[np.maximum(range_of, 0)] == 0))
    want = keep[np.argsort(range_of[keep], kind="stable")]
    assert np.array_equal(pos, want)
    assert np.array_equal(offs, ids[want] - bounds[range_of[want]])
    assert np.array_equal(counts, np.bincount(range_of[keep], minlength=K))
    assert counts[2] == 0


def test_group_by_range_empty_and_bad_shapes():
    pos, offs, counts = group_by_range(np.zeros(0, np.int32), np.zeros(2, np.uint8),
                                       np.zeros(0, np.int64), np.array([0, 5, 9]))
    assert len(pos) == len(offs) == 0 and counts.tolist() == [0, 0]
    with pytest.raises(ValueError, match="one skip flag per range"):
        group_by_range(np.zeros(3, np.int32), np.zeros(1, np.uint8), np.zeros(3, np.int64), np.array([0, 5, 9]))
