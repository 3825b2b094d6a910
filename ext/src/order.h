/* Stable counting sort of small-range integer keys (all-to-all grouping by rank).
 * Plain C, no Python or MPI.  Meant for few distinct keys: with many, the scattered
 * writes miss the cache on every row. */
#ifndef HPCGNN_ORDER_H
#define HPCGNN_ORDER_H
#include <stdint.h>

/* order[0..n): the positions of keys sorted by key, ties in position order (what a
 * stable argsort gives), for keys in [kmin, kmin + nk).  Returns 0, -1 when out of
 * memory, -2 when a key lies outside the range. */
int hg_counting_order(int64_t n, const int64_t *keys, int64_t kmin, int64_t nk, int64_t *order);

#endif
