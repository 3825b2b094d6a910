#ifndef HPCGNN_GATHER_ROWS_H
#define HPCGNN_GATHER_ROWS_H
#include <stdint.h>

/* Rows of a table split into K ranges [bounds[k], bounds[k+1]) held in separate
 * memory (bases[k], or NULL where the range is not directly readable), with an
 * optional cache of rows (cache_n sorted ids, their rows): an id in the cache is
 * copied from it (range_of[i] = -2); else an id in a readable range is copied
 * from there (range_of[i] = -1); else dst[i] is left alone and range_of[i] = k.
 * Returns how many ids were left.  Ids must be in [bounds[0], bounds[K]).
 * Software-prefetches the next block of rows while copying one: random rows of a
 * large table are memory-latency bound, and keeping several misses in flight is
 * what makes this faster than a generic index_select. */
int64_t hpcgnn_gather_ranges(const char *const *bases, const int64_t *bounds, int K, int64_t row_bytes,
                             const int64_t *ids, int64_t n, char *dst, int32_t *range_of,
                             const int64_t *cache_ids, int64_t cache_n, const char *cache_rows);

/* The same lookup without the copy: addr[i] = the address of row ids[i] (in the
 * cache, range_of[i] = -2; in a readable range, -1), or 0 with range_of[i] = k
 * when its range is not readable.  Returns how many ids were left.  Nothing is
 * read from the rows themselves. */
int64_t hpcgnn_row_addresses(const char *const *bases, const int64_t *bounds, int K, int64_t row_bytes,
                             const int64_t *ids, int64_t n, uintptr_t *addr, int32_t *range_of,
                             const int64_t *cache_ids, int64_t cache_n, const char *cache_rows);

/* dst row i = the row_bytes at address addr[i] (none 0), prefetched block by block. */
void hpcgnn_gather_addresses(const uintptr_t *addr, int64_t n, int64_t row_bytes, char *dst);

#endif
