# Size-constrained label propagation and cluster contraction (ext/src/label_prop.c),
# the coarsening step before ParMETIS (hpcgnn.partition.coarsen).  Independent.
# ``adjwgt`` (optional, int64, one weight per adjacency entry): None = unit weights.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

cdef extern from "label_prop.h" nogil:
    int64_t hg_lp_cluster(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                          int64_t lo, const int64_t *w, int64_t bound, int rounds, uint64_t seed,
                          int64_t *label)
    int64_t hg_contract(int64_t k, const int64_t *cstart, const int64_t *members,
                        const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                        const int32_t *glab, int64_t K, int64_t cl_lo, int64_t *cxadj, int64_t *cadj,
                        int64_t *cwgt)
    int64_t hg_lp_refine(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                         int64_t lo, int32_t *gpart, int64_t *part, const int64_t *w, int64_t ncon,
                         int64_t nparts, int64_t *pw, const int64_t *cap, uint64_t seed, int swap)
    int64_t hg_ghost_mark(const int64_t *adjncy, int64_t m, int64_t lo, int64_t hi, int64_t N, uint64_t *bits)
    void hg_ghost_local(int64_t *adjncy, int64_t m, int64_t lo, int64_t hi, const uint64_t *bits,
                        const int64_t *before)
    void hg_ghost_global(int64_t *adjncy, int64_t m, int64_t lo, int64_t n, const int64_t *ids)
    int64_t hg_ghost_prefix(const uint64_t *bits, int64_t nw, int64_t *before)
    int64_t hg_lp_view_labels(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *blocks,
                              int64_t nblocks, const int64_t *glab, uint8_t *mark, int32_t *clab, int64_t *uniq,
                              int64_t cap)
    int64_t hg_lp_sweep(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                        const int64_t *w, int32_t *clab, int64_t *cw, const int64_t *cid, int64_t bound,
                        const int64_t *blocks, int64_t nblocks, uint64_t seed, int up, int64_t *scanned)


cdef const int64_t *_weights(const int64_t[::1] adjwgt, const int64_t[::1] adjncy, str who) except? NULL:
    if adjwgt is None or adjwgt.shape[0] == 0:
        return NULL
    if adjwgt.shape[0] != adjncy.shape[0]:
        raise ValueError(f"{who}: adjwgt must have one weight per adjacency entry")
    return &adjwgt[0]


def lp_cluster(const int64_t[::1] xadj, const int64_t[::1] adjncy, int64_t lo,
               const int64_t[::1] w, int64_t bound, int rounds, uint64_t seed,
               const int64_t[::1] adjwgt=None):
    """Size-constrained LP clustering of the local vertices (local neighbours only).

    Returns ``(k, label)``: ``label`` (int64) gives each vertex a cluster in ``[0, k)``.
    """
    cdef int64_t n = xadj.shape[0] - 1
    label = np.empty(max(n, 1), dtype=np.int64)
    cdef int64_t[::1] lab = label
    cdef int64_t k
    if n <= 0:
        return 0, label[:0]
    if w.shape[0] != n:
        raise ValueError("lp_cluster: w must have one weight per vertex")
    cdef const int64_t *pw = _weights(adjwgt, adjncy, "lp_cluster")
    with nogil:
        k = hg_lp_cluster(n, &xadj[0], &adjncy[0] if adjncy.shape[0] else NULL, pw, lo, &w[0],
                          bound, rounds, seed, &lab[0])
    if k == -2:
        raise ValueError("lp_cluster: more than 2**31 - 1 vertices on one rank")
    if k < 0:
        raise MemoryError("lp_cluster: out of memory")
    return int(k), label[:n]


def contract_clusters(const int64_t[::1] cstart, const int64_t[::1] members,
                      const int64_t[::1] xadj, const int64_t[::1] adjncy,
                      const int32_t[::1] glab, int64_t K, int64_t cl_lo,
                      const int64_t[::1] adjwgt=None):
    """CSR of the local clusters over global cluster ids (``glab``: int32 global cluster
    of every global vertex): ``(cxadj, cadj, cwgt)``."""
    cdef int64_t k = cstart.shape[0] - 1
    cxadj = np.zeros(k + 1, dtype=np.int64)
    cdef int64_t[::1] cx = cxadj
    cdef int64_t m
    cdef const int64_t *pa = &adjncy[0] if adjncy.shape[0] else NULL
    cdef const int64_t *pm = &members[0] if members.shape[0] else NULL
    cdef const int32_t *pg = &glab[0] if glab.shape[0] else NULL
    cdef const int64_t *pw = _weights(adjwgt, adjncy, "contract_clusters")
    with nogil:
        m = hg_contract(k, &cstart[0], pm, &xadj[0], pa, pw, pg, K, cl_lo, &cx[0], NULL, NULL)
    if m < 0:
        raise MemoryError("contract_clusters: out of memory")
    cadj = np.empty(max(m, 1), dtype=np.int64)
    cwgt = np.empty(max(m, 1), dtype=np.int64)
    cdef int64_t[::1] ca = cadj
    cdef int64_t[::1] cw = cwgt
    with nogil:
        m = hg_contract(k, &cstart[0], pm, &xadj[0], pa, pw, pg, K, cl_lo, &cx[0], &ca[0], &cw[0])
    if m < 0:
        raise MemoryError("contract_clusters: out of memory")
    return cxadj, cadj[:m], cwgt[:m]


def lp_refine(const int64_t[::1] xadj, const int64_t[::1] adjncy, int64_t lo,
              int32_t[::1] gpart, int64_t[::1] part, const int64_t[:, ::1] w,
              int64_t[:, ::1] pw, const int64_t[:, ::1] cap, uint64_t seed,
              const int64_t[::1] adjwgt=None, bint swap=False):
    """One sweep of k-way LP refinement of the local parts (``part`` and ``pw`` updated
    in place; ``gpart``, int32 parts of all vertices, gets this rank's entries from
    ``part``).  ``w``: ``(n, ncon)`` vertex weights; ``pw``/``cap``: ``(nparts, ncon)``
    part weights and the most each may reach.  ``swap``: a vertex whose better part is
    full waits for one of that part that wants its part, and the two trade places when
    both parts stay within ``cap``.  Returns the number of moves."""
    cdef int64_t n = xadj.shape[0] - 1
    cdef int64_t m
    if n <= 0:
        return 0
    if (part.shape[0] != n or w.shape[0] != n or cap.shape[0] != pw.shape[0] or gpart.shape[0] < lo + n
            or w.shape[1] != pw.shape[1] or cap.shape[1] != pw.shape[1]):
        raise ValueError("lp_refine: array sizes do not match")
    cdef const int64_t *pa = &adjncy[0] if adjncy.shape[0] else NULL
    cdef const int64_t *pwt = _weights(adjwgt, adjncy, "lp_refine")
    with nogil:
        m = hg_lp_refine(n, &xadj[0], pa, pwt, lo, &gpart[0], &part[0], &w[0, 0], w.shape[1], pw.shape[0],
                         &pw[0, 0], &cap[0, 0], seed, swap)
    if m < 0:
        raise MemoryError("lp_refine: out of memory")
    return int(m)


def ghost_mark(const int64_t[::1] adjncy, int64_t lo, int64_t hi, int64_t N, uint64_t[::1] bits):
    """Set bit ``v`` of ``bits`` for every entry ``v`` of ``adjncy`` outside ``[lo, hi)``.
    Returns how many entries lie outside the ids ``[0, N)`` (left unmarked)."""
    cdef int64_t bad
    if adjncy.shape[0] == 0:
        return 0
    if 64 * bits.shape[0] < N:
        raise ValueError("ghost_mark: bits holds fewer than N bits")
    with nogil:
        bad = hg_ghost_mark(&adjncy[0], adjncy.shape[0], lo, hi, N, &bits[0])
    return int(bad)


def ghost_local(int64_t[::1] adjncy, int64_t lo, int64_t hi, const uint64_t[::1] bits,
                const int64_t[::1] before):
    """In place: own ids ``v`` -> ``v - lo``, ghosts -> ``hi - lo`` + their rank among
    the marked bits (``before[w]``: marked bits of the words below ``w``)."""
    if adjncy.shape[0] == 0:
        return
    with nogil:
        hg_ghost_local(&adjncy[0], adjncy.shape[0], lo, hi, &bits[0], &before[0])


def ghost_global(int64_t[::1] adjncy, int64_t lo, int64_t n, const int64_t[::1] ids):
    """In place: undo :func:`ghost_local` (``ids``: the ghosts' sorted global ids)."""
    if adjncy.shape[0] == 0:
        return
    cdef const int64_t *pi = &ids[0] if ids.shape[0] else NULL
    with nogil:
        hg_ghost_global(&adjncy[0], adjncy.shape[0], lo, n, pi)


def ghost_prefix(const uint64_t[::1] bits, int64_t[::1] before):
    """``before[w]``: the set bits of the words below ``w``; returns the set bits in all."""
    cdef int64_t total = 0
    if bits.shape[0] != before.shape[0]:
        raise ValueError("ghost_prefix: bits and before differ in length")
    if bits.shape[0] == 0:
        return 0
    with nogil:
        total = hg_ghost_prefix(&bits[0], bits.shape[0], &before[0])
    return int(total)


def lp_sweep(const int64_t[::1] xadj, const int64_t[::1] adjncy, const int64_t[::1] w, int32_t[::1] clab,
             int64_t[::1] cw, const int64_t[::1] cid, int64_t bound, const int64_t[::1] blocks, uint64_t seed,
             const int64_t[::1] adjwgt=None, bint up=False):
    """One LP sweep over the vertex blocks ``blocks`` (256 local vertices each) of a CSR
    in ghost-table indices: ``clab`` (int32 cluster of every table entry; own entries
    updated) and ``cw`` (cluster weights; arrivals added) in place; ``cid``: each
    cluster's global id (ties go by a seeded hash of it); ``up``: moves only to clusters
    whose hash is above the vertex's own cluster's.  Returns
    ``(moves, adjacency entries scanned)``."""
    cdef int64_t n = xadj.shape[0] - 1
    cdef int64_t m, scanned = 0
    if n <= 0 or blocks.shape[0] == 0:
        return 0, 0
    if w.shape[0] != n or clab.shape[0] < n:
        raise ValueError("lp_sweep: w and clab need one entry per local vertex")
    if cid.shape[0] != cw.shape[0]:
        raise ValueError("lp_sweep: cid and cw need one entry per cluster")
    if int(np.max(blocks)) * 256 >= n or int(np.min(blocks)) < 0:
        raise ValueError("lp_sweep: a block lies outside the local vertices")
    cdef const int64_t *pa = &adjncy[0] if adjncy.shape[0] else NULL
    cdef const int64_t *pwt = _weights(adjwgt, adjncy, "lp_sweep")
    with nogil:
        m = hg_lp_sweep(n, &xadj[0], pa, pwt, &w[0], &clab[0], &cw[0] if cw.shape[0] else NULL,
                        &cid[0] if cid.shape[0] else NULL, bound,
                        &blocks[0], blocks.shape[0], seed, up, &scanned)
    if m < 0:
        raise MemoryError("lp_sweep: out of memory")
    return int(m), int(scanned)


def lp_view_labels(const int64_t[::1] xadj, const int64_t[::1] adjncy, const int64_t[::1] blocks,
                   const int64_t[::1] glab, uint8_t[::1] mark, int32_t[::1] clab):
    """The clusters an :func:`lp_sweep` over ``blocks`` reads: returns ``uniq``
    (int64), each distinct label ``glab[i]`` of the blocks' vertices and their
    neighbours (table indices ``i``) once, in the order first met, and sets ``clab[i]``
    to its position in ``uniq`` for those entries (no others).  ``mark``: zeros, one per
    table index (uint8, or a bool array's ``view(np.uint8)``), zeros again after."""
    cdef int64_t n = xadj.shape[0] - 1, size = glab.shape[0], cap = 0, bi, v0, v1, k
    if mark.shape[0] != size or clab.shape[0] != size or size < n:
        raise ValueError("lp_view_labels: glab, mark and clab need an entry per table index")
    if n <= 0 or blocks.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    if int(np.max(blocks)) * 256 >= n or int(np.min(blocks)) < 0:
        raise ValueError("lp_view_labels: a block lies outside the local vertices")
    for bi in range(blocks.shape[0]):       # the entries read bound the distinct labels
        v0 = blocks[bi] * 256
        v1 = min(v0 + 256, n)
        cap += v1 - v0 + xadj[v1] - xadj[v0]
    cap = min(cap, size)
    uniq = np.empty(cap, dtype=np.int64)
    cdef int64_t[::1] u = uniq
    cdef const int64_t *pa = &adjncy[0] if adjncy.shape[0] else NULL
    with nogil:
        k = hg_lp_view_labels(n, &xadj[0], pa, &blocks[0], blocks.shape[0], &glab[0], &mark[0], &clab[0],
                              &u[0], cap)
    if k < 0:
        raise MemoryError("lp_view_labels: out of memory")
    return uniq[:k].copy()
