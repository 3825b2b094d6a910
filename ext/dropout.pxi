# Dropout for CPU training (hpcgnn.train.kernels): a mask from a counter-based
# generator and its application, without the GIL.  See ext/src/dropout.h.
from libc.stdint cimport int64_t, uint64_t, uint8_t


cdef extern from "dropout.h" nogil:
    void hpcgnn_dropout_mask(uint8_t *mask, int64_t n, uint64_t keep_threshold, uint64_t seed)
    void hpcgnn_dropout_apply(const float *x, const uint8_t *mask, float scale, float *out, int64_t n)
    void hpcgnn_relu_dropout(const float *x, float *out, int64_t n, uint64_t keep_threshold, uint64_t seed,
                             float scale)
    void hpcgnn_relu_dropout_grad(const float *grad, const float *out, float scale, float *grad_in, int64_t n)
    void hpcgnn_bias_relu_dropout(float *x, const float *bias, int64_t rows, int64_t dim, uint64_t keep_threshold,
                                  uint64_t seed, float scale)
    void hpcgnn_relu_dropout_grad_bias(const float *grad, const float *out, float scale, float *grad_in,
                                       int64_t rows, int64_t dim, double *acc)
    void hpcgnn_bernoulli_f32(float *out, int64_t n, uint64_t threshold, uint64_t seed)
    void hpcgnn_bernoulli_f64(double *out, int64_t n, uint64_t threshold, uint64_t seed)
    void hpcgnn_bernoulli_u8(uint8_t *out, int64_t n, uint64_t threshold, uint64_t seed)


cdef uint64_t _threshold(double p, str what) except? 0:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{what}: p={p} outside [0, 1]")
    return <uint64_t>(p * 65536.0 + 0.5)


def dropout_scale(double p):
    """The factor kept elements are multiplied by: ``1 / (1 - p')`` for the
    probability ``p' = round(p * 2^16) / 2^16`` the masks really drop with (so the
    expectation is exact); 0 when every element is dropped."""
    cdef uint64_t thr = _threshold(p, "dropout_scale")
    return 65536.0 / (65536 - thr) if thr < 65536 else 0.0


def dropout_mask(uint8_t[::1] mask, double p, uint64_t seed):
    """Fill ``mask`` (uint8) with 1 (keep, probability ``1 - p``) or 0.
    Deterministic in (seed, len(mask)).  Independent.  Returns :func:`dropout_scale`."""
    cdef uint64_t thr = _threshold(p, "dropout_mask")
    cdef int64_t n = mask.shape[0]
    if n > 0:
        with nogil:
            hpcgnn_dropout_mask(&mask[0], n, thr, seed)
    return dropout_scale(p)


def dropout_apply(const float[::1] x, const uint8_t[::1] mask, float scale, float[::1] out):
    """``out = x * scale`` where ``mask`` is set, else 0 (float32, same length)."""
    cdef int64_t n = x.shape[0]
    if mask.shape[0] != n or out.shape[0] != n:
        raise ValueError("dropout_apply: x, mask and out must have the same length")
    if n == 0:
        return
    with nogil:
        hpcgnn_dropout_apply(&x[0], &mask[0], scale, &out[0], n)


def relu_dropout(const float[::1] x, double p, uint64_t seed, float[::1] out):
    """``out = dropout(relu(x))`` with the mask :func:`dropout_mask` draws for
    ``(seed, len(x))``, scaled by :func:`dropout_scale`; returns that scale."""
    cdef uint64_t thr = _threshold(p, "relu_dropout")
    cdef int64_t n = x.shape[0]
    if out.shape[0] != n:
        raise ValueError("relu_dropout: x and out must have the same length")
    cdef double sc = dropout_scale(p)
    cdef float scale = <float>sc
    if n > 0:
        with nogil:
            hpcgnn_relu_dropout(&x[0], &out[0], n, thr, seed, scale)
    return sc


def relu_dropout_grad(const float[::1] grad, const float[::1] out, float scale, float[::1] grad_in):
    """``grad_in = grad * scale`` where ``out > 0``, else 0."""
    cdef int64_t n = grad.shape[0]
    if out.shape[0] != n or grad_in.shape[0] != n:
        raise ValueError("relu_dropout_grad: grad, out and grad_in must have the same length")
    if n == 0:
        return
    with nogil:
        hpcgnn_relu_dropout_grad(&grad[0], &out[0], scale, &grad_in[0], n)


def bias_relu_dropout(float[:, ::1] x, const float[::1] bias, double p, uint64_t seed):
    """In place: ``x = dropout(relu(x + bias))`` (bias broadcast over rows), the
    same mask :func:`relu_dropout` draws for ``(seed, x.size)``; returns the scale."""
    cdef uint64_t thr = _threshold(p, "bias_relu_dropout")
    cdef int64_t rows = x.shape[0], dim = x.shape[1]
    if bias.shape[0] != dim:
        raise ValueError(f"bias_relu_dropout: bias has {bias.shape[0]} entries for {dim} columns")
    cdef double sc = dropout_scale(p)
    cdef float scale = <float>sc
    if rows > 0 and dim > 0:
        with nogil:
            hpcgnn_bias_relu_dropout(&x[0, 0], &bias[0], rows, dim, thr, seed, scale)
    return sc


def relu_dropout_grad_bias(const float[:, ::1] grad, const float[:, ::1] out, float scale, float[:, ::1] grad_in,
                           double[::1] bias_grad):
    """:func:`relu_dropout_grad` on rows, and ``bias_grad`` = the column sums of
    ``grad_in`` (the bias's gradient)."""
    cdef int64_t rows = grad.shape[0], dim = grad.shape[1]
    if out.shape[0] != rows or out.shape[1] != dim or grad_in.shape[0] != rows or grad_in.shape[1] != dim \
            or bias_grad.shape[0] != dim:
        raise ValueError("relu_dropout_grad_bias: grad, out and grad_in must have one shape, bias_grad its width")
    if dim == 0:
        return
    if rows == 0:
        bias_grad[:] = 0
        return
    with nogil:
        hpcgnn_relu_dropout_grad_bias(&grad[0, 0], &out[0, 0], scale, &grad_in[0, 0], rows, dim, &bias_grad[0])


cdef uint64_t _threshold32(double p) except? 0:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"bernoulli: p={p} outside [0, 1]")
    return <uint64_t>(p * 4294967296.0 + 0.5)


def bernoulli_f32(float[::1] out, double p, uint64_t seed):
    """``out[i] = 1.0`` with probability ``p`` (to 2^-33), else 0.0; deterministic
    in ``(seed, len(out))`` (see ext/src/dropout.h)."""
    cdef uint64_t thr = _threshold32(p)
    if out.shape[0] > 0:
        with nogil:
            hpcgnn_bernoulli_f32(&out[0], out.shape[0], thr, seed)


def bernoulli_f64(double[::1] out, double p, uint64_t seed):
    """:func:`bernoulli_f32` for float64."""
    cdef uint64_t thr = _threshold32(p)
    if out.shape[0] > 0:
        with nogil:
            hpcgnn_bernoulli_f64(&out[0], out.shape[0], thr, seed)


def bernoulli_u8(uint8_t[::1] out, double p, uint64_t seed):
    """:func:`bernoulli_f32` for uint8 (and bool) buffers: 1 or 0."""
    cdef uint64_t thr = _threshold32(p)
    if out.shape[0] > 0:
        with nogil:
            hpcgnn_bernoulli_u8(&out[0], out.shape[0], thr, seed)
