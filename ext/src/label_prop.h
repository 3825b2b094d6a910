/* Size-constrained label propagation and cluster contraction (hpcgnn partitioning).
 * Plain C, no Python or MPI: the Cython wrapper (ext/labelprop.pxi) calls these
 * without the GIL.  See hpcgnn/partition/coarsen.py for how they are used.
 * adjwgt, where given (NULL: every edge weighs 1), holds one weight per adjncy entry. */
#ifndef HPCGNN_LABEL_PROP_H
#define HPCGNN_LABEL_PROP_H
#include <stdint.h>

/* Cluster the n local vertices [lo, lo+n) of a CSR (xadj local offsets, adjncy global
 * ids): `rounds` sweeps, each over blocks of consecutive vertices in a seeded random
 * order; each vertex joins the neighbouring cluster (local neighbours only) with the
 * largest edge weight to it whose weight (sum of w) stays <= bound.  label[i]
 * receives a cluster id in [0, k); returns k, -1 when out of memory, -2 when n does
 * not fit in int32. */
int64_t hg_lp_cluster(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                      int64_t lo, const int64_t *w, int64_t bound, int rounds, uint64_t seed,
                      int64_t *label);

/* Contract the local clusters: members lists the n local vertices grouped by cluster
 * (cluster c owns members[cstart[c]:cstart[c+1]]), glab[g] is the global cluster of
 * global vertex g (K clusters in all; this rank's are cl_lo..cl_lo+k-1).  Fills cxadj
 * (k+1) and, when cadj/cwgt are not NULL, the cluster adjacency (global cluster ids,
 * no self loops, one entry per neighbour cluster) with summed edge weights.
 * Returns the number of entries, or -1 when out of memory. */
int64_t hg_contract(int64_t k, const int64_t *cstart, const int64_t *members,
                    const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                    const int32_t *glab, int64_t K, int64_t cl_lo, int64_t *cxadj, int64_t *cadj,
                    int64_t *cwgt);

/* One sweep of k-way label-propagation refinement of the n local vertices [lo, lo+n):
 * over blocks of consecutive vertices in a seeded random order, each vertex moves to
 * the part with the largest edge weight to it (strictly more than its own part) if
 * every one of that part's ncon weights stays <= its cap (w: n x ncon vertex weights,
 * pw and cap: nparts x ncon, row-major).  gpart[g]: part of every global vertex (remote
 * entries may be stale; this rank's entries gpart[lo:lo+n] are overwritten from part
 * and kept current as vertices move); part: local parts, updated; pw: updated with
 * the moves.  Returns the number of moves, or -1 when out of
 * memory. */
int64_t hg_lp_refine(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                     int64_t lo, int32_t *gpart, int64_t *part, const int64_t *w, int64_t ncon,
                     int64_t nparts, int64_t *pw, const int64_t *cap, uint64_t seed, int swap);

/* Ghosts of the local block [lo, hi) of a graph with global ids in [0, N): mark every
 * adjncy entry outside the block in the bitmap bits ((N+63)/64 words, zeroed by the
 * caller).  Returns the number of entries outside [0, N) (left unmarked). */
int64_t hg_ghost_mark(const int64_t *adjncy, int64_t m, int64_t lo, int64_t hi, int64_t N, uint64_t *bits);

/* Rewrite adjncy in place into table indices: v in [lo, hi) -> v - lo; a ghost v ->
 * (hi - lo) + (marked bits below v), where before[w] counts the marked bits of words
 * 0..w-1. */
void hg_ghost_local(int64_t *adjncy, int64_t m, int64_t lo, int64_t hi, const uint64_t *bits,
                    const int64_t *before);

/* before[w] = marked bits of words 0..w-1 (nw words); returns the marked bits in all. */
int64_t hg_ghost_prefix(const uint64_t *bits, int64_t nw, int64_t *before);

/* Undo hg_ghost_local: i < n -> lo + i, else ids[i - n] (the ghosts' sorted global ids). */
void hg_ghost_global(int64_t *adjncy, int64_t m, int64_t lo, int64_t n, const int64_t *ids);

/* One sweep of size-constrained LP over the vertex blocks `blocks` (BLK = 256
 * consecutive local vertices each, visited in the given order) of the n local vertices
 * of a CSR whose adjncy holds table indices (own vertices [0, n), then ghosts).
 * clab[i]: the cluster (a compact index) of table entry i; this rank's entries
 * clab[0:n] are updated as vertices move.  cw[c]: cluster c's weight when the sweep
 * began plus the weight that joined it during the sweep (leaving does not lower it:
 * another rank may fill the room, and the owner accepts arrivals on the weight at
 * the start).  A vertex joins the neighbouring cluster with the largest edge weight
 * to it (ties broken by a seeded hash of its global id cid[c], the same choice on
 * every rank; staying put on a tie with its own) if
 * cw + w[v] <= bound; with `up`, only to a cluster whose hash is above its own's (two
 * vertices on different ranks cannot swap clusters, nor two clusters each other's
 * members, in the same sweep).  *scanned receives the adjacency entries read.  Returns the
 * number of moves, or -1 when out of memory. */
int64_t hg_lp_sweep(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *adjwgt,
                    const int64_t *w, int32_t *clab, int64_t *cw, const int64_t *cid, int64_t bound,
                    const int64_t *blocks, int64_t nblocks, uint64_t seed, int up, int64_t *scanned);

/* The clusters one LP sweep over ``blocks`` reads (the blocks' vertices and their
 * neighbours, as table indices): uniq[0..k) receives each distinct label glab[i] of
 * those entries once, in the order first met, and clab[i] its position there, for
 * every such entry i (other entries are left as they are).  mark (one byte per table
 * index) is scratch: all zero on entry, and again on return.  uniq has room for cap
 * labels, at least the number of distinct table indices read.  Returns k, or -1 when
 * out of memory. */
int64_t hg_lp_view_labels(int64_t n, const int64_t *xadj, const int64_t *adjncy, const int64_t *blocks,
                          int64_t nblocks, const int64_t *glab, uint8_t *mark, int32_t *clab, int64_t *uniq,
                          int64_t cap);
#endif
