# A CSR built in place from (row, column) pairs arriving in chunks (ext/src/csr_build.c):
# the partitioner's symmetric view in one array of its final size, no sort of all pairs.
# Independent.
from libc.stdint cimport int64_t

cdef extern from "csr_build.h" nogil:
    int hg_csr_fill(int64_t n, const int64_t *rows, const int64_t *cols, int64_t row0, int64_t nrows,
                    int64_t *pos, const int64_t *end, int64_t *cols_out)
    int64_t hg_csr_sort_dedup(int64_t nrows, int64_t *xadj, int64_t *adjncy)


def csr_fill(const int64_t[::1] rows, const int64_t[::1] cols, int64_t row0, int64_t[::1] pos,
             const int64_t[::1] end, int64_t[::1] cols_out):
    """``cols_out[pos[rows[i] - row0]++] = cols[i]`` for each pair (rows' slots end at ``end``)."""
    cdef int64_t n = rows.shape[0]
    cdef int rc = 0
    if cols.shape[0] != n or end.shape[0] != pos.shape[0]:
        raise ValueError("csr_fill: rows/cols or pos/end lengths differ")
    if n == 0:
        return
    with nogil:
        rc = hg_csr_fill(n, &rows[0], &cols[0], row0, pos.shape[0], &pos[0], &end[0], &cols_out[0])
    if rc:
        raise ValueError("csr_fill: a row lies outside the block, or more pairs than its counted degree")


def csr_sort_dedup(int64_t[::1] xadj, int64_t[::1] adjncy):
    """Sort each row's columns, drop repeats; compacts ``adjncy`` and rewrites ``xadj``
    in place; returns the new number of entries."""
    cdef int64_t nrows = xadj.shape[0] - 1, out
    if nrows < 0 or xadj[nrows] > adjncy.shape[0]:
        raise ValueError("csr_sort_dedup: xadj does not fit adjncy")
    if nrows == 0:
        return 0
    with nogil:
        out = hg_csr_sort_dedup(nrows, &xadj[0], &adjncy[0] if adjncy.shape[0] else NULL)
    return out
