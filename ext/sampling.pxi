# Neighbor-sampling kernels (hpcgnn.sampling): draw edge positions from per-seed
# candidate ranges, and relabel global node ids to local ones.  The C side
# (ext/src/sampling.c) holds no Python object; the GIL is released around it.
from libc.stdint cimport int64_t, uint64_t
import numpy as _np_s


cdef extern from "sampling.h" nogil:
    int64_t hpcgnn_sample_counts(const int64_t *first, const int64_t *end, int64_t n, int64_t fanout,
                                 int replace, int64_t *counts)
    void hpcgnn_sample_uniform(const int64_t *first, const int64_t *end, int64_t n, int64_t fanout,
                               int replace, uint64_t seed, const int64_t *offs, int64_t *out, int nthreads)
    int64_t hpcgnn_sample_weighted_counts(const int64_t *first, const int64_t *end, int64_t n,
                                          int64_t fanout, int replace, const double *w,
                                          const int64_t *woffs, int64_t *counts)
    int hpcgnn_sample_weighted(const int64_t *first, const int64_t *end, int64_t n, int64_t fanout,
                               int replace, const double *w, const int64_t *woffs, uint64_t seed,
                               const int64_t *offs, int64_t *out, int nthreads)
    ctypedef struct hpcgnn_relabel_t:
        int64_t *nodes
        int64_t n
    int hpcgnn_relabel_init(hpcgnn_relabel_t *r, int64_t expected)
    void hpcgnn_relabel_free(hpcgnn_relabel_t *r)
    int hpcgnn_relabel_reset(hpcgnn_relabel_t *r, int64_t expected)
    int hpcgnn_relabel_map(hpcgnn_relabel_t *r, const int64_t *ids, int64_t n, int64_t *local)


cdef inline int64_t *_p64(const int64_t[::1] a) noexcept nogil:
    return <int64_t *>&a[0] if a.shape[0] > 0 else NULL


def sample_ranges(const int64_t[::1] rows, int64_t fanout, bint replace, uint64_t seed,
                  const double[::1] weights=None, int nthreads=1):
    """Draw up to ``fanout`` edge ids per seed from candidate ranges.

    ``rows``: the flattened ``(n, 2)`` int64 array of ``[first, end)`` ranges (C order).
    ``fanout < 0``: every candidate.  ``weights``: None (uniform) or the candidates'
    weights concatenated seed after seed (``sum(end - first)`` float64, >= 0; the
    caller validates).  Returns ``(eids, counts)``: the chosen edge ids grouped by
    seed, and how many each seed got.  Independent; the result depends only on the
    arguments (not on ``nthreads``)."""
    cdef int64_t n = rows.shape[0] // 2
    if rows.shape[0] != 2 * n:
        raise ValueError("sample_ranges: rows must hold (first, end) pairs")
    ranges = _np_s.asarray(rows).reshape(n, 2)
    first_a = _np_s.ascontiguousarray(ranges[:, 0])
    end_a = _np_s.ascontiguousarray(ranges[:, 1])
    cdef const int64_t[::1] first = first_a
    cdef const int64_t[::1] end = end_a
    counts_a = _np_s.empty(n, dtype=_np_s.int64)
    cdef int64_t[::1] counts = counts_a
    cdef int64_t total
    cdef int64_t[::1] woffs
    cdef const double *wp = NULL
    if weights is not None:
        deg = end_a - first_a
        if (deg < 0).any():
            raise ValueError("sample_ranges: a range has end < first")
        woffs_a = _np_s.zeros(n, dtype=_np_s.int64)
        if n > 1:
            _np_s.cumsum(deg[:n - 1], out=woffs_a[1:])
        if int(deg.sum()) != weights.shape[0]:
            raise ValueError("sample_ranges: weights must hold one entry per candidate edge")
        woffs = woffs_a
        if weights.shape[0] > 0:
            wp = &weights[0]
        with nogil:
            total = hpcgnn_sample_weighted_counts(_p64(first), _p64(end), n, fanout, replace, wp,
                                                  _p64(woffs), _p64(counts))
    else:
        with nogil:
            total = hpcgnn_sample_counts(_p64(first), _p64(end), n, fanout, replace, _p64(counts))
    if total == -2:
        raise ValueError(f"sample_ranges: fanout {fanout} asks for more than 2**63-1 edges in all "
                         f"for {n} seeds")
    if total < 0:
        raise ValueError("sample_ranges: a range has end < first")
    offs_a = _np_s.zeros(n, dtype=_np_s.int64)
    if n > 1:
        _np_s.cumsum(counts_a[:n - 1], out=offs_a[1:])
    cdef const int64_t[::1] offs = offs_a
    out_a = _np_s.empty(total, dtype=_np_s.int64)
    cdef int64_t[::1] out = out_a
    cdef int rc = 0
    if total > 0:
        with nogil:
            if wp != NULL:
                rc = hpcgnn_sample_weighted(_p64(first), _p64(end), n, fanout, replace, wp, _p64(woffs),
                                            seed, _p64(offs), _p64(out), nthreads)
            else:
                hpcgnn_sample_uniform(_p64(first), _p64(end), n, fanout, replace, seed, _p64(offs),
                                      _p64(out), nthreads)
        if rc != 0:
            raise MemoryError("sample_ranges: out of memory")
    return out_a, counts_a


cdef class Relabeler:
    """Global node ids -> local ids 0, 1, 2, ... in first-appearance order (a C hash
    table, not a sort).  ``map(ids)`` returns the local id of each entry and adds the
    unseen ones; ``nodes()`` the global id of every local id so far."""
    cdef hpcgnn_relabel_t r

    def __cinit__(self, int64_t expected=0):
        if hpcgnn_relabel_init(&self.r, expected) != 0:
            raise MemoryError("Relabeler: out of memory")

    def __dealloc__(self):
        hpcgnn_relabel_free(&self.r)

    def __len__(self):
        return self.r.n

    def reset(self, int64_t expected=0):
        """Forget every id, keeping the table's memory (cheaper than a new one)."""
        cdef int rc
        with nogil:
            rc = hpcgnn_relabel_reset(&self.r, expected)
        if rc != 0:
            raise MemoryError("Relabeler: out of memory")

    def map(self, const int64_t[::1] ids):
        """Local ids of ``ids`` (int64, each >= 0; the caller validates)."""
        cdef int64_t n = ids.shape[0]
        out_a = _np_s.empty(n, dtype=_np_s.int64)
        cdef int64_t[::1] out = out_a
        cdef int rc = 0
        if n:
            with nogil:
                rc = hpcgnn_relabel_map(&self.r, &ids[0], n, &out[0])
        if rc != 0:
            raise MemoryError("Relabeler: out of memory")
        return out_a

    def nodes(self):
        """A copy of the global ids in local order."""
        out_a = _np_s.empty(self.r.n, dtype=_np_s.int64)
        cdef int64_t[::1] out = out_a
        cdef int64_t i
        with nogil:
            for i in range(self.r.n):
                out[i] = self.r.nodes[i]
        return out_a


def relabel(const int64_t[::1] seeds, const int64_t[::1] nbrs):
    """``(nodes, local)``: the unique ids, seeds first (in order, repeats dropped) then
    unseen neighbors in first-appearance order, and the local id of each neighbor."""
    r = Relabeler(seeds.shape[0] + nbrs.shape[0])
    r.map(seeds)
    local = r.map(nbrs)
    return r.nodes(), local
