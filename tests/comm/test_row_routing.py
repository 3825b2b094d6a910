"""The compiled grouping of a gather's remote ids by range (hpcgnn._ext.route_by_range,
with the ranges found or given as labels) and how a gather from another host is cut
into pieces."""
import numpy as np
import pytest

from hpcgnn._ext import route_by_range


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_route_by_range_with_labels_matches_a_stable_sort(seed):
    rng = np.random.default_rng(seed)
    bounds = np.array([0, 7, 7, 30, 100], dtype=np.int64)       # one empty range
    K = len(bounds) - 1
    ids = rng.integers(0, 100, 500).astype(np.int64)
    range_of = (np.searchsorted(bounds, ids, side="right") - 1).astype(np.int32)
    range_of[rng.random(500) < 0.2] = -1                         # read in place
    range_of[rng.random(500) < 0.1] = -2                         # from a cache
    labels = range_of.copy()
    skip = np.array([0, 0, 1, 0], dtype=np.uint8)                # range 2 read directly
    seg_row0 = np.array([0, 0, 0, 7], dtype=np.int64)            # ranges 0 and 3 share an owner
    pos, disps, counts = route_by_range(bounds, skip, ids, seg_row0, 8, labels=labels)
    assert np.array_equal(labels, range_of)                      # the labels are not changed
    keep = np.flatnonzero((range_of >= 0) & (skip[np.maximum(range_of, 0)] == 0))
    want = keep[np.argsort(range_of[keep], kind="stable")]
    assert np.array_equal(pos, want)
    k = range_of[want]
    assert np.array_equal(disps, (ids[want] - bounds[k] + seg_row0[k]) * 8)
    assert np.array_equal(counts, np.bincount(range_of[keep], minlength=K))
    assert counts[2] == 0


def test_route_by_range_labels_out_of_range_are_not_fetched():
    bounds = np.array([0, 5, 9], dtype=np.int64)
    ids = np.array([1, 6, 2, 8], dtype=np.int64)
    pos, disps, counts = route_by_range(bounds, np.zeros(2, np.uint8), ids, np.zeros(2, np.int64), 4,
                                        labels=np.array([0, 7, -1, 1], np.int32))
    assert pos.tolist() == [0, 3] and disps.tolist() == [4, 12] and counts.tolist() == [1, 1]
    with pytest.raises(ValueError, match="one label per id"):
        route_by_range(bounds, np.zeros(2, np.uint8), ids, np.zeros(2, np.int64), 4,
                       labels=np.zeros(3, np.int32))


@pytest.mark.parametrize("seed", [0, 1])
def test_route_by_range_finds_ranges_and_byte_displacements(seed):
    rng = np.random.default_rng(seed)
    bounds = np.array([0, 7, 7, 30, 100, 100], dtype=np.int64)  # two empty ranges
    K = len(bounds) - 1
    ids = rng.integers(0, 100, 700).astype(np.int64)
    skip = np.array([0, 0, 0, 1, 0], dtype=np.uint8)             # range 3 read in place
    seg_row0 = np.array([0, 7, 0, 23, 0], dtype=np.int64)        # ranges 0-1 share an owner
    pos, disps, counts = route_by_range(bounds, skip, ids, seg_row0, 12)
    range_of = np.searchsorted(bounds, ids, side="right") - 1
    keep = np.flatnonzero(skip[range_of] == 0)
    want = keep[np.argsort(range_of[keep], kind="stable")]
    assert np.array_equal(pos, want)
    k = range_of[want]
    assert np.array_equal(disps, (ids[want] - bounds[k] + seg_row0[k]) * 12)
    assert np.array_equal(counts, np.bincount(range_of[keep], minlength=K))
    assert counts[3] == 0 and counts.sum() == len(keep)
    # the same grouping as the labelled path
    p2, d2, c2 = route_by_range(bounds, skip, ids, seg_row0, 12, labels=range_of.astype(np.int32))
    assert np.array_equal(p2, pos) and np.array_equal(d2, disps) and np.array_equal(c2, counts)


def test_route_by_range_empty_and_bad_shapes():
    pos, disps, counts = route_by_range(np.array([0, 5, 9]), np.zeros(2, np.uint8), np.zeros(0, np.int64),
                                        np.zeros(2, np.int64), 4)
    assert len(pos) == len(disps) == 0 and counts.tolist() == [0, 0]
    with pytest.raises(ValueError, match="segment row per range"):
        route_by_range(np.array([0, 5, 9]), np.zeros(2, np.uint8), np.zeros(1, np.int64), np.zeros(1, np.int64), 4)
    with pytest.raises(ValueError, match="K >= 1"):
        route_by_range(np.array([0]), np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64), 4)


def test_pipeline_spans_grow_threefold_up_to_the_cap():
    from hpcgnn.comm.rma.rowchecks import pipeline_spans

    spans = pipeline_spans(10_000, 400, 3 << 17, 1 << 22)
    assert spans == [(0, 983), (983, 3932), (3932, 10_000)]
    assert pipeline_spans(5, 4, 4, 3) == [(0, 1), (1, 4), (4, 5)]          # 1, 3, then capped
    assert pipeline_spans(0, 400, 1 << 20, 10) == []
    assert pipeline_spans(7, 0, 1 << 20, 10) == [(0, 7)]                  # rows of 0 bytes
    for n, rb, first, cap in ((1, 8, 1, 1), (12_345, 24, 1000, 700), (100, 400, 1, 1000)):
        spans = pipeline_spans(n, rb, first, cap)
        assert spans[0][0] == 0 and spans[-1][1] == n                     # covers 0..n once
        assert all(a == b for (_, a), (b, _) in zip(spans, spans[1:]))
        assert all(0 < e - s <= cap for s, e in spans)
