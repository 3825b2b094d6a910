# Dropout for CPU training (hpcgnn.train.kernels): a mask from a counter-based
# generator and its application, without the GIL.  See ext/src/dropout.h.
from libc.stdint cimport int64_t, uint64_t, uint8_t


cdef extern from "dropout.h" nogil:
    void hpcgnn_dropout_mask(uint8_t *mask, int64_t n, uint64_t keep_threshold, uint64_t seed)
    void hpcgnn_dropout_apply(const float *x, const uint8_t *mask, float scale, float *out, int64_t n)


def dropout_mask(uint8_t[::1] mask, double p, uint64_t seed):
    """Fill ``mask`` (uint8) with 1 (keep, probability ``1 - p``) or 0.
    Deterministic in (seed, len(mask)).  Independent."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout_mask: p={p} outside [0, 1]")
    cdef uint64_t thr = <uint64_t>(p * 65536.0 + 0.5)
    cdef int64_t n = mask.shape[0]
    if n == 0:
        return
    with nogil:
        hpcgnn_dropout_mask(&mask[0], n, thr, seed)


def dropout_apply(const float[::1] x, const uint8_t[::1] mask, float scale, float[::1] out):
    """``out = x * scale`` where ``mask`` is set, else 0 (float32, same length)."""
    cdef int64_t n = x.shape[0]
    if mask.shape[0] != n or out.shape[0] != n:
        raise ValueError("dropout_apply: x, mask and out must have the same length")
    if n == 0:
        return
    with nogil:
        hpcgnn_dropout_apply(&x[0], &mask[0], scale, &out[0], n)
