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
