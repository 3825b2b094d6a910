"""Sorting kernels of the partitioning pipeline (ext/src/order.c, partition.arrays) against NumPy."""
import numpy as np
import pytest

from hpcgnn import _ext
from hpcgnn.partition.arrays import stable_argsort
from hpcgnn.partition.edges import _order_by


@pytest.mark.parametrize("n,lo,nk", [(0, 0, 1), (1, 5, 1), (1000, 0, 3), (100_000, -50, 10_000)])
def test_counting_order_is_a_stable_argsort(n, lo, nk):
    keys = np.random.default_rng(n).integers(lo, lo + nk, n).astype(np.int64)
    np.testing.assert_array_equal(_ext.counting_order(keys, lo, nk), np.argsort(keys, kind="stable"))


def test_counting_order_rejects_keys_outside_the_range():
    with pytest.raises(ValueError, match="outside"):
        _ext.counting_order(np.array([0, 3], dtype=np.int64), 0, 3)
    with pytest.raises(ValueError, match="outside"):
        _ext.counting_order(np.array([-1], dtype=np.int64), 0, 3)


@pytest.mark.parametrize("n,lo,span", [(0, 0, 1), (1, 3, 1), (5000, -7, 100), (5000, 0, 1 << 30),
                                       (5000, -(1 << 62), 1 << 62), (200_000, 10, 3_000_000)])
def test_stable_argsort_all_paths(n, lo, span):
    """Counting sort (small span), packed sort (fits 63 bits), NumPy's (does not)."""
    keys = lo + np.random.default_rng(n).integers(0, span, n).astype(np.int64)
    keys[: n // 3] = keys[n // 3: 2 * (n // 3)]                # ties: stability matters
    np.testing.assert_array_equal(stable_argsort(keys), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("ascending", [True, False])
def test_order_by_both_paths(ascending):
    rng = np.random.default_rng(3)
    major = rng.integers(100, 200, 5000).astype(np.int64)
    minor = np.arange(5000, dtype=np.int64) * 3 if ascending else rng.permutation(5000).astype(np.int64)
    np.testing.assert_array_equal(_order_by(major, minor), np.lexsort((minor, major)))


@pytest.mark.parametrize("rows,avg", [(1, 0), (50, 3), (2000, 40), (300, 200)])
def test_csr_fill_then_sort_dedup_is_the_unique_pairs(rows, avg):
    rng = np.random.default_rng(rows)
    n = rows * avg
    r = rng.integers(0, rows, n).astype(np.int64) + 7          # rows of a block starting at 7
    c = rng.integers(0, max(avg, 1) * 2, n).astype(np.int64)   # many repeats
    xadj = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(r - 7, minlength=rows), out=xadj[1:])
    adj = np.empty(n, dtype=np.int64)
    pos = xadj[:-1].copy()
    half = n // 2                                             # two chunks, as the exchange files them
    _ext.csr_fill(r[:half], c[:half], 7, pos, xadj[1:], adj)
    _ext.csr_fill(r[half:], c[half:], 7, pos, xadj[1:], adj)
    assert np.array_equal(pos, xadj[1:])
    nnz = _ext.csr_sort_dedup(xadj, adj)
    key = np.unique((r - 7) * (1 << 32) + c)
    assert nnz == len(key) == xadj[-1]
    np.testing.assert_array_equal(adj[:nnz], key % (1 << 32))
    np.testing.assert_array_equal(xadj, np.searchsorted(key >> 32, np.arange(rows + 1)))


def test_csr_fill_refuses_a_row_outside_the_block_or_past_its_degree():
    pos, end, out = np.array([0, 1]), np.array([1, 2]), np.zeros(2, dtype=np.int64)
    with pytest.raises(ValueError, match="outside the block"):
        _ext.csr_fill(np.array([9]), np.array([1]), 7, pos, end, out)
    _ext.csr_fill(np.array([7]), np.array([1]), 7, pos, end, out)
    with pytest.raises(ValueError, match="more pairs than"):
        _ext.csr_fill(np.array([7]), np.array([2]), 7, pos, end, out)
