cdef extern from "src/attention.h" nogil:
    int hpcgnn_csr_attend(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *alpha,
                          int64_t heads, const float *x, int64_t dim, int64_t n_src, float *out, int nthreads)
    int hpcgnn_csr_attend_backward(const int64_t *indptr, const int64_t *indices, int64_t nrows,
                                   const float *alpha, int64_t heads, const float *x, int64_t dim, int64_t n_src,
                                   const float *grad_out, float *grad_x, float *grad_alpha, int nthreads)


def csr_attend(const int64_t[::1] indptr, const int64_t[::1] indices, const float[:, ::1] alpha,
               const float[:, :, ::1] x, float[:, :, ::1] out, int nthreads=1):
    """``out[d, h] = sum_e alpha[e, h] * x[indices[e], h]`` over row ``d``'s edges
    (see ext/src/attention.h).  Checks shapes and indices; ValueError otherwise."""
    cdef int64_t nrows = out.shape[0], heads = x.shape[1], dim = x.shape[2], n = x.shape[0]
    cdef int rc
    if indptr.shape[0] != nrows + 1 or alpha.shape[1] != heads or out.shape[1] != heads or out.shape[2] != dim:
        raise ValueError("csr_attend: shapes do not fit")
    if indptr[0] != 0 or indptr[nrows] != indices.shape[0] or alpha.shape[0] != indices.shape[0]:
        raise ValueError(f"csr_attend: indptr spans [{indptr[0]}, {indptr[nrows]}) for {indices.shape[0]} "
                         f"indices and {alpha.shape[0]} weights")
    if nrows == 0:
        return
    with nogil:
        rc = hpcgnn_csr_attend(&indptr[0], &indices[0] if indices.shape[0] else NULL, nrows,
                               &alpha[0, 0] if alpha.shape[0] else NULL, heads,
                               &x[0, 0, 0] if n else NULL, dim, n, &out[0, 0, 0], nthreads)
    if rc:
        raise ValueError(f"csr_attend: indptr does not start at 0 or decreases, or an index outside [0, {n})")


def csr_attend_backward(const int64_t[::1] indptr, const int64_t[::1] indices, const float[:, ::1] alpha,
                        const float[:, :, ::1] x, const float[:, :, ::1] grad_out, float[:, :, ::1] grad_x,
                        float[:, ::1] grad_alpha, int nthreads=1):
    """The gradients of :func:`csr_attend` (``grad_x`` is overwritten)."""
    cdef int64_t nrows = grad_out.shape[0], heads = x.shape[1], dim = x.shape[2], n = x.shape[0]
    cdef int rc
    if (grad_x.shape[0] != n or grad_x.shape[1] != heads or grad_x.shape[2] != dim
            or grad_out.shape[1] != heads or grad_out.shape[2] != dim
            or alpha.shape[0] != indices.shape[0] or alpha.shape[1] != heads
            or grad_alpha.shape[0] != indices.shape[0] or grad_alpha.shape[1] != heads
            or indptr.shape[0] != nrows + 1):
        raise ValueError("csr_attend_backward: shapes do not fit")
    if indptr[0] != 0 or indptr[nrows] != indices.shape[0]:
        raise ValueError(f"csr_attend_backward: indptr spans [{indptr[0]}, {indptr[nrows]}) for "
                         f"{indices.shape[0]} indices")
    if nrows == 0 or n == 0:
        grad_x[:, :, :] = 0
        grad_alpha[:, :] = 0
        return
    with nogil:
        rc = hpcgnn_csr_attend_backward(&indptr[0], &indices[0] if indices.shape[0] else NULL, nrows,
                                        &alpha[0, 0] if alpha.shape[0] else NULL, heads, &x[0, 0, 0], dim, n,
                                        &grad_out[0, 0, 0], &grad_x[0, 0, 0],
                                        &grad_alpha[0, 0] if alpha.shape[0] else NULL, nthreads)
    if rc:
        raise ValueError(f"csr_attend_backward: indptr decreases, or an index outside [0, {n})")
