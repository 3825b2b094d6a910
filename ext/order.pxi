# Stable counting sort of small-range integer keys (ext/src/order.c): grouping rows
# by destination rank in one streaming pass, where NumPy's stable argsort of int64
# keys compares.  (With many distinct keys the scattered writes miss the cache on
# every row: hpcgnn.partition.arrays.stable_argsort sorts packed keys instead.)
# Independent.
from libc.stdint cimport int64_t

cdef extern from "order.h" nogil:
    int hg_counting_order(int64_t n, const int64_t *keys, int64_t kmin, int64_t nk, int64_t *order)


def counting_order(const int64_t[::1] keys, int64_t kmin, int64_t nk):
    """Stable argsort of ``keys`` (all in ``[kmin, kmin + nk)``) as int64 positions."""
    cdef int64_t n = keys.shape[0]
    order = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = order
    cdef int rc = 0
    if n == 0:
        return order
    with nogil:
        rc = hg_counting_order(n, &keys[0], kmin, nk, &o[0])
    if rc == -2:
        raise ValueError(f"counting_order: a key lies outside [{kmin}, {kmin + nk})")
    if rc < 0:
        raise MemoryError("counting_order: out of memory")
    return order

