# Mean aggregation along a CSR adjacency for a first GNN layer (hpcgnn.train.kernels).
# See ext/src/aggregate.h.
from libc.stdint cimport int64_t, uintptr_t


cdef extern from "aggregate.h" nogil:
    void hpcgnn_csr_mean(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *x,
                         int64_t dim, float *out, int nthreads)
    void hpcgnn_csr_mean_rows(const int64_t *indptr, const int64_t *indices, int64_t nrows, const uintptr_t *rows,
                              int64_t dim, float *out, int nthreads)
    int hpcgnn_csr_mean_backward_act(const int64_t *indptr, const int64_t *indices, int64_t nrows,
                                     const float *grad_out, int64_t dim, const float *act, float scale,
                                     float *grad_x, double *bias_grad, int64_t n_src, int nthreads)
    int hpcgnn_build_csr(const int64_t *src, const int64_t *dst, int64_t num_edges, int64_t num_dst,
                         int64_t num_src, int with_root, int64_t *indptr, int64_t *cols)
    void hpcgnn_csr_mean_use_registers(int on)


def csr_mean_use_registers(bint on):
    """Whether :func:`csr_mean` (and ``csr_mean_rows``) may sum each output row in
    AVX-512 registers (rows of up to 256 floats; the default) or always in memory:
    the same numbers either way.  Process-wide; for tests and measurements."""
    hpcgnn_csr_mean_use_registers(on)


def build_csr(const int64_t[::1] src, const int64_t[::1] dst, int64_t num_dst, int64_t num_src, bint with_root,
              int64_t[::1] indptr, int64_t[::1] cols):
    """Fill ``indptr``/``cols`` with the CSR of edges ``src -> dst`` sorted by ``dst``
    (see ext/src/aggregate.h; ``with_root``: interleaved root rows).  Returns 0, -1
    (a destination outside ``[0, num_dst)`` or not sorted) or -2 (a source outside
    ``[0, num_src)``)."""
    cdef int64_t E = src.shape[0]
    cdef int rows = 2 if with_root else 1
    cdef int rc
    if dst.shape[0] != E or indptr.shape[0] != rows * num_dst + 1 or cols.shape[0] != E + (num_dst if with_root else 0):
        raise ValueError(f"build_csr: {E} sources, {dst.shape[0]} destinations, indptr of {indptr.shape[0]} "
                         f"and cols of {cols.shape[0]} entries for {num_dst} rows")
    if num_dst < 0 or num_src < 0:
        raise ValueError("build_csr: negative sizes")
    with nogil:
        rc = hpcgnn_build_csr(&src[0] if E else NULL, &dst[0] if E else NULL, E, num_dst, num_src, with_root,
                              &indptr[0], &cols[0] if cols.shape[0] else NULL)
    return rc


cdef _check_csr(const int64_t[::1] indptr, const int64_t[::1] indices, int64_t nrows, int64_t n, str what):
    """A CSR of nrows rows over n columns: indptr from 0 to len(indices), never
    decreasing; every index in [0, n).  ValueError naming the first bad entry."""
    cdef int64_t i, m = indices.shape[0]
    if indptr[0] != 0 or indptr[nrows] != m:
        raise ValueError(f"{what}: indptr spans [{indptr[0]}, {indptr[nrows]}) for {m} indices")
    with nogil:
        for i in range(nrows):
            if indptr[i + 1] < indptr[i]:
                break
        else:
            i = -1
    if i >= 0:
        raise ValueError(f"{what}: indptr decreases at row {i}")
    with nogil:
        for i in range(m):
            if indices[i] < 0 or indices[i] >= n:
                break
        else:
            i = -1
    if i >= 0:
        raise ValueError(f"{what}: index {indices[i]} at position {i} outside [0, {n})")


def csr_mean(const int64_t[::1] indptr, const int64_t[::1] indices, const float[:, ::1] x, float[:, ::1] out,
             int nthreads=1):
    """``out[r] = mean of x[indices[indptr[r]:indptr[r+1]]]`` (zeros for an empty
    row), float32, ``nthreads`` OpenMP threads.  Checks shapes and that every index
    lies in ``[0, len(x))``; raises ValueError otherwise."""
    cdef int64_t nrows = out.shape[0], dim = x.shape[1], n = x.shape[0], m
    if indptr.shape[0] != nrows + 1 or out.shape[1] != dim:
        raise ValueError(f"csr_mean: indptr has {indptr.shape[0]} entries for {nrows} rows, "
                         f"out has {out.shape[1]} columns for {dim}")
    _check_csr(indptr, indices, nrows, n, "csr_mean")
    m = indices.shape[0]
    if nrows == 0:
        return
    if m == 0 or dim == 0:
        out[:, :] = 0
        return
    with nogil:
        hpcgnn_csr_mean(&indptr[0], &indices[0], nrows, &x[0, 0], dim, &out[0, 0], nthreads)


def csr_mean_rows(const int64_t[::1] indptr, const int64_t[::1] indices, const uintptr_t[::1] rows,
                  float[:, ::1] out, int nthreads=1):
    """:func:`csr_mean` with ``x``'s rows anywhere in memory: source row ``s`` is the
    ``out.shape[1]`` float32 values at address ``rows[s]``, which the caller keeps
    alive and readable.  The same checks as :func:`csr_mean` against ``len(rows)``,
    and no address may be 0; raises ValueError otherwise."""
    cdef int64_t nrows = out.shape[0], dim = out.shape[1], n = rows.shape[0], m, i
    if indptr.shape[0] != nrows + 1:
        raise ValueError(f"csr_mean_rows: indptr has {indptr.shape[0]} entries for {nrows} rows")
    _check_csr(indptr, indices, nrows, n, "csr_mean_rows")
    with nogil:
        for i in range(n):
            if rows[i] == 0:
                break
        else:
            i = -1
    if i >= 0:
        raise ValueError(f"csr_mean_rows: source row {i} has no address")
    m = indices.shape[0]
    if nrows == 0:
        return
    if m == 0 or dim == 0:
        out[:, :] = 0
        return
    with nogil:
        hpcgnn_csr_mean_rows(&indptr[0], &indices[0], nrows, &rows[0], dim, &out[0, 0], nthreads)


def csr_mean_backward(const int64_t[::1] indptr, const int64_t[::1] indices, const float[:, ::1] grad_out,
                      float[:, ::1] grad_x, int nthreads=1, const float[:, ::1] act=None, float scale=1.0,
                      double[::1] bias_grad=None):
    """The gradient of :func:`csr_mean` with respect to ``x``: ``grad_x`` (the
    shape of ``x``) is overwritten with ``sum over entries (r, s) of grad_out[r] /
    deg(r)`` in row ``s``.  The same checks as :func:`csr_mean`.

    ``act`` (the shape of ``x``): ``x`` was ``dropout(relu(h + bias))`` written over
    ``h`` (:func:`bias_relu_dropout`); ``grad_x`` becomes the gradient with respect
    to ``h`` (``* scale`` where ``act > 0``, else 0) and ``bias_grad`` (when given,
    ``x``'s width) the column sums of it, in the same pass."""
    cdef int64_t nrows = grad_out.shape[0], dim = grad_x.shape[1], n = grad_x.shape[0]
    cdef int rc
    cdef const float *a = NULL
    cdef double *bg = NULL
    if indptr.shape[0] != nrows + 1 or grad_out.shape[1] != dim:
        raise ValueError(f"csr_mean_backward: indptr has {indptr.shape[0]} entries for {nrows} rows, "
                         f"grad_out has {grad_out.shape[1]} columns for {dim}")
    if act is not None and (act.shape[0] != n or act.shape[1] != dim):
        raise ValueError(f"csr_mean_backward: act is {act.shape[0]} x {act.shape[1]}, grad_x {n} x {dim}")
    if bias_grad is not None and (act is None or bias_grad.shape[0] != dim):
        raise ValueError(f"csr_mean_backward: bias_grad needs act and {dim} entries")
    _check_csr(indptr, indices, nrows, n, "csr_mean_backward")
    if dim == 0:
        return
    if bias_grad is not None:
        bias_grad[:] = 0
        bg = &bias_grad[0]
    if n == 0:
        return
    if act is not None:
        a = &act[0, 0]
    with nogil:
        rc = hpcgnn_csr_mean_backward_act(&indptr[0], &indices[0] if indices.shape[0] else NULL, nrows,
                                          &grad_out[0, 0] if nrows else NULL, dim, a, scale, &grad_x[0, 0], bg, n,
                                          nthreads)
    if rc != 0:
        raise MemoryError("csr_mean_backward: out of memory for the transposed pattern")
