# A linear layer's weight gradient skipping the zeros of its output gradient
# (hpcgnn.train.kernels), without the GIL.  See ext/src/weight_grad.h.
from libc.stdint cimport int64_t


cdef extern from "weight_grad.h" nogil:
    void hpcgnn_weight_grad(const float *G, int64_t n, int64_t m, const float *A, int64_t k, float *D, int nthreads,
                            int vectorised)
    int hpcgnn_weight_grad_vectorised()


def weight_grad(const float[:, ::1] grad_out, const float[:, ::1] inp, float[:, ::1] out, int nthreads=1,
                bint vectorised=True):
    """``out = grad_out.T @ inp`` (``grad_out`` n x m, ``inp`` n x k, ``out`` m x k,
    overwritten), one multiply-add of a row of ``inp`` per nonzero of ``grad_out``:
    a weight's gradient when its output gradient is mostly zeros (relu and dropout
    behind it).  Each ``out`` row sums its terms in increasing row order, whatever
    ``nthreads``.  ``vectorised=False``: the plain C loops even where the AVX-512
    kernel runs (for tests)."""
    cdef int64_t n = grad_out.shape[0], m = grad_out.shape[1], k = inp.shape[1]
    if inp.shape[0] != n or out.shape[0] != m or out.shape[1] != k:
        raise ValueError(f"weight_grad: grad_out {n} x {m}, inp {inp.shape[0]} x {k}, out {out.shape[0]} x "
                         f"{out.shape[1]} (want {m} x {k})")
    if m == 0 or k == 0:
        return
    with nogil:
        hpcgnn_weight_grad(&grad_out[0, 0] if n else NULL, n, m, &inp[0, 0] if n else NULL, k, &out[0, 0],
                           nthreads, vectorised)


def weight_grad_vectorised():
    """True when :func:`weight_grad` runs its AVX-512 kernel on this CPU."""
    return hpcgnn_weight_grad_vectorised() == 1
