# Derived datatypes for one-sided row transfers (hpcgnn.comm.rma.windows).
# mpi4py's Datatype.Create_hindexed_block converts its displacements entry by entry
# (~0.4 us each: 40 ms for a 100k-row gather); here the NumPy array is handed to
# MPI as it is, without the GIL.
from libc.stdint cimport int64_t, int32_t, uint8_t, uintptr_t
from libc.limits cimport INT_MAX
from mpi4py cimport MPI as _MPI
from mpi4py import MPI as _pyMPI
from mpi4py.libmpi cimport (MPI_Aint, MPI_Type_create_hindexed_block, MPI_Type_commit,
                            MPI_SUCCESS)


def hindexed_blocks(_MPI.Datatype oldtype, int blocklength, const int64_t[::1] byte_disps):
    """A new committed datatype: ``blocklength`` x ``oldtype`` at each byte
    displacement (``MPI_Type_create_hindexed_block``).

    ``byte_disps`` is a C-contiguous int64 array (at most ``INT_MAX`` entries).
    The caller frees the datatype.  Independent (no communication).
    """
    cdef Py_ssize_t n = byte_disps.shape[0]
    if n > INT_MAX:
        raise ValueError(f"hindexed_blocks: {n} blocks in one datatype (at most {INT_MAX})")
    if sizeof(MPI_Aint) != sizeof(int64_t):
        return oldtype.Create_hindexed_block(blocklength, list(byte_disps)).Commit()
    cdef _MPI.Datatype dt = _MPI.Datatype()
    cdef const int64_t *p = &byte_disps[0] if n > 0 else NULL
    cdef int ierr
    with nogil:
        ierr = MPI_Type_create_hindexed_block(<int>n, blocklength, <MPI_Aint *>p, oldtype.ob_mpi, &dt.ob_mpi)
        if ierr == MPI_SUCCESS:
            ierr = MPI_Type_commit(&dt.ob_mpi)
    if ierr != MPI_SUCCESS:
        raise _pyMPI.Exception(ierr)
    return dt


cdef extern from "gather_rows.h" nogil:
    int64_t hpcgnn_gather_ranges(const char *const *bases, const int64_t *bounds, int K, int64_t row_bytes,
                                 const int64_t *ids, int64_t n, char *dst, int32_t *range_of,
                                 const int64_t *cache_ids, int64_t cache_n, const char *cache_rows)
    void hpcgnn_gather_addresses(const uintptr_t *addr, int64_t n, int64_t row_bytes, char *dst)
    int64_t hpcgnn_row_addresses(const char *const *bases, const int64_t *bounds, int K, int64_t row_bytes,
                                 const int64_t *ids, int64_t n, uintptr_t *addr, int32_t *range_of,
                                 const int64_t *cache_ids, int64_t cache_n, const char *cache_rows)


def gather_ranges(const uintptr_t[::1] bases, const int64_t[::1] bounds, const int64_t[::1] ids, dst,
                  int32_t[::1] range_of, cache_ids=None, cache_rows=None):
    """Rows of a table split into ranges held in separate memory: for every id in
    ``cache_ids`` (sorted; rows ``cache_rows``) ``dst[i]`` is the cached row and
    ``range_of[i] = -2``; else for an id in a range whose ``bases[k]`` (the address
    of that range's first row) is non-zero, ``dst[i]`` = that row and ``range_of[i]
    = -1``; otherwise ``range_of[i] = k`` and ``dst[i]`` is left for the caller.
    Returns the number of ids left.  ``bounds``: ``K+1`` row ids; ids must lie in
    ``[bounds[0], bounds[K])`` (not checked).  The GIL is released.  Independent."""
    cdef unsigned char[:, ::1] d = dst.reshape(dst.shape[0], -1).view("u1")
    cdef int64_t n = ids.shape[0]
    cdef int K = <int>(bounds.shape[0] - 1)
    if bases.shape[0] != K or range_of.shape[0] != n or d.shape[0] != n:
        raise ValueError("gather_ranges: need one base per range and one range_of / dst row per id")
    if n == 0 or d.shape[1] == 0:
        return 0
    cdef int64_t rb = d.shape[1]
    cdef const int64_t[::1] cid
    cdef const unsigned char[:, ::1] crow
    cdef const int64_t *cid_p = NULL
    cdef const char *crow_p = NULL
    cdef int64_t cn = 0
    if cache_ids is not None and len(cache_ids):
        cid = cache_ids
        if not cache_rows.flags.c_contiguous:     # a reshape would copy: the rows must stay put
            raise ValueError("cache_rows must be C-contiguous")
        crow = cache_rows.reshape(cache_rows.shape[0], -1).view("u1")
        if crow.shape[0] != cid.shape[0] or crow.shape[1] != rb:
            raise ValueError("gather_ranges: cache_rows must hold one row of dst's size per cache id")
        cid_p = &cid[0]
        crow_p = <const char *>&crow[0, 0]
        cn = cid.shape[0]
    cdef int64_t left
    with nogil:
        left = hpcgnn_gather_ranges(<const char *const *>&bases[0], &bounds[0], K, rb, &ids[0], n,
                                    <char *>&d[0, 0], &range_of[0], cid_p, cn, crow_p)
    return left


def row_addresses(const uintptr_t[::1] bases, const int64_t[::1] bounds, int64_t row_bytes, const int64_t[::1] ids,
                  uintptr_t[::1] addr, int32_t[::1] range_of, cache_ids=None, cache_rows=None):
    """:func:`gather_ranges` without the copy: ``addr[i]`` = the address of row
    ``ids[i]`` (``row_bytes`` each) in the cache or a readable range, else 0 with
    ``range_of[i] = k``.  Returns the number of ids left.  Independent."""
    cdef int64_t n = ids.shape[0]
    cdef int K = <int>(bounds.shape[0] - 1)
    if bases.shape[0] != K or range_of.shape[0] != n or addr.shape[0] != n:
        raise ValueError("row_addresses: need one base per range and one addr / range_of entry per id")
    if n == 0:
        return 0
    cdef const int64_t[::1] cid
    cdef const unsigned char[:, ::1] crow
    cdef const int64_t *cid_p = NULL
    cdef const char *crow_p = NULL
    cdef int64_t cn = 0
    if cache_ids is not None and len(cache_ids):
        cid = cache_ids
        if not cache_rows.flags.c_contiguous:     # a reshape would copy: the rows must stay put
            raise ValueError("cache_rows must be C-contiguous")
        crow = cache_rows.reshape(cache_rows.shape[0], -1).view("u1")
        if crow.shape[0] != cid.shape[0] or crow.shape[1] != row_bytes:
            raise ValueError("row_addresses: cache_rows must hold one row of row_bytes per cache id")
        cid_p = &cid[0]
        crow_p = <const char *>&crow[0, 0]
        cn = cid.shape[0]
    cdef int64_t left
    with nogil:
        left = hpcgnn_row_addresses(<const char *const *>&bases[0], &bounds[0], K, row_bytes, &ids[0], n,
                                    &addr[0], &range_of[0], cid_p, cn, crow_p)
    return left


def gather_addresses(const uintptr_t[::1] addr, dst):
    """``dst[i]`` = the row at address ``addr[i]`` (``dst``'s row size; every address
    readable and non-zero: ValueError for a 0).  The GIL is released."""
    cdef unsigned char[:, ::1] d
    cdef int64_t n = addr.shape[0], i
    if dst.shape[0] != n:
        raise ValueError(f"gather_addresses: {n} addresses for {dst.shape[0]} rows")
    if n == 0 or dst.size == 0:
        return
    d = dst.reshape(n, -1).view("u1")
    with nogil:
        for i in range(n):
            if addr[i] == 0:
                break
        else:
            i = -1
    if i >= 0:
        raise ValueError(f"gather_addresses: row {i} has no address")
    with nogil:
        hpcgnn_gather_addresses(&addr[0], n, d.shape[1], <char *>&d[0, 0])


def route_by_range(const int64_t[::1] bounds, const uint8_t[::1] skip, const int64_t[::1] ids,
                   const int64_t[::1] seg_row0, int64_t row_bytes, labels=None):
    """The ids a gather reads one-sidedly, grouped by range, in one call:
    ``(pos, disps, counts)``, where ``pos`` lists, range by range and in order inside
    each (a counting sort), every ``i`` whose range ``k`` has ``skip[k] == 0``,
    ``disps[j]`` is the byte displacement of row ``ids[pos[j]]`` in its owner's
    segment (``(ids[pos[j]] - bounds[k] + seg_row0[k]) * row_bytes``) and
    ``counts[k]`` the number of positions of range ``k`` (0 where skipped).

    ``labels`` (int32, one per id, optional): each id's range as a labelling pass
    already found it, negative for ids not to fetch (e.g. cache hits); without it the
    ranges are found here and ids must lie in ``[bounds[0], bounds[K])`` (not
    checked).  The GIL is released.  Independent."""
    cdef int64_t n = ids.shape[0], i, j, v, total = 0
    cdef int K = <int>(bounds.shape[0] - 1)
    cdef int k = 0, lo, hi, mid
    if K < 1 or skip.shape[0] != K or seg_row0.shape[0] != K:
        raise ValueError("route_by_range: need K+1 bounds (K >= 1) and one skip flag and segment row per range")
    cdef bint labelled = labels is not None
    if labelled:
        range_a = np.ascontiguousarray(labels, dtype=np.int32)
        if range_a.shape[0] != n:
            raise ValueError("route_by_range: need one label per id")
    else:
        range_a = np.empty(n, dtype=np.int32)
    counts_a = np.zeros(K, dtype=np.int64)
    cdef int32_t[::1] range_of = range_a
    cdef int64_t[::1] counts = counts_a
    with nogil:
        for i in range(n):
            if labelled:
                k = range_of[i]
                if k < 0 or k >= K:
                    continue
            else:
                v = ids[i]
                if v < bounds[k] or v >= bounds[k + 1]:
                    lo, hi = 0, K                  # bounds[lo] <= v < bounds[hi]
                    while hi - lo > 1:
                        mid = (lo + hi) // 2
                        if v >= bounds[mid]:
                            lo = mid
                        else:
                            hi = mid
                    k = lo
                range_of[i] = k
            if skip[k] == 0:
                counts[k] += 1
                total += 1
    pos_a = np.empty(total, dtype=np.int64)
    disps_a = np.empty(total, dtype=np.int64)
    start_a = np.zeros(K, dtype=np.int64)
    cdef int64_t[::1] pos = pos_a, disps = disps_a, start = start_a
    with nogil:
        for k in range(1, K):
            start[k] = start[k - 1] + counts[k - 1]
        for i in range(n):
            k = range_of[i]
            if k >= 0 and k < K and skip[k] == 0:
                j = start[k]
                pos[j] = i
                disps[j] = (ids[i] - bounds[k] + seg_row0[k]) * row_bytes
                start[k] = j + 1
    return pos_a, disps_a, counts_a
