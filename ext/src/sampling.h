#ifndef HPCGNN_SAMPLING_H
#define HPCGNN_SAMPLING_H
#include <stdint.h>

/* Neighbor-sampling kernels (no Python, no MPI).
 *
 * Every seed i has a candidate range [first[i], end[i]) of global edge ids.  Each
 * kernel has two passes: *_counts writes how many edges seed i gets into counts[i]
 * (and returns the total, or -1 on bad input), the caller allocates, then the fill
 * pass writes the chosen edge ids of seed i at out[offs[i] .. offs[i]+counts[i]),
 * offs = exclusive prefix sum of counts.  Seed i's random stream depends only on
 * (seed, i), so the result does not depend on the number of OpenMP threads.
 *
 * fanout < 0 means "all candidates".  Uniform without replacement: Floyd's
 * algorithm (k <= 64) or selection sampling; with replacement: k independent draws.
 * Weighted (w: the candidates' weights, concatenated seed after seed, woffs[i] the
 * start of seed i's weights, i.e. the exclusive prefix sum of degrees): without
 * replacement by exponential keys (Efraimidis-Spirakis A-Res: the k largest
 * u^(1/w)); zero-weight candidates are never drawn; with replacement by inverse CDF.
 */
int64_t hpcgnn_sample_counts(const int64_t *first, const int64_t *end, int64_t n, int64_t fanout,
                             int replace, int64_t *counts);
void hpcgnn_sample_uniform(const int64_t *first, const int64_t *end, int64_t n, int64_t fanout,
                           int replace, uint64_t seed, const int64_t *offs, int64_t *out, int nthreads);

int64_t hpcgnn_sample_weighted_counts(const int64_t *first, const int64_t *end, int64_t n,
                                      int64_t fanout, int replace, const double *w,
                                      const int64_t *woffs, int64_t *counts);
int hpcgnn_sample_weighted(const int64_t *first, const int64_t *end, int64_t n, int64_t fanout,
                           int replace, const double *w, const int64_t *woffs, uint64_t seed,
                           const int64_t *offs, int64_t *out, int nthreads);

/* An insertion-ordered hash set of int64 ids -> local index (0, 1, 2, ... in
 * first-appearance order).  Open addressing, linear probing, grows at load 1/2. */
typedef struct {
    int64_t *slots;     /* cap pairs (id, local index); id -1: empty (ids must be >= 0) */
    int64_t cap;        /* power of two */
    int64_t *nodes;     /* local index -> id */
    int64_t n, nodes_cap;
} hpcgnn_relabel_t;

int hpcgnn_relabel_init(hpcgnn_relabel_t *r, int64_t expected);
void hpcgnn_relabel_free(hpcgnn_relabel_t *r);
/* empty the set for reuse, keeping its memory (growing it to `expected`); 0 or -1 */
int hpcgnn_relabel_reset(hpcgnn_relabel_t *r, int64_t expected);
/* local[i] = local index of ids[i], inserting unseen ids in order; returns 0, or -1
 * when out of memory.  ids must be >= 0. */
int hpcgnn_relabel_map(hpcgnn_relabel_t *r, const int64_t *ids, int64_t n, int64_t *local);

#endif
