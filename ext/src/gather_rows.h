#ifndef HPCGNN_GATHER_ROWS_H
#define HPCGNN_GATHER_ROWS_H
#include <stdint.h>

/* dst[i] = src[ids[i]] for rows of row_bytes bytes; ids must be in range.
 * Software-prefetches the rows a few iterations ahead: random rows of a large
 * table are memory-latency bound, and keeping several misses in flight is what
 * makes this faster than a generic index_select. */
void hpcgnn_gather_rows(const char *src, int64_t row_bytes, const int64_t *ids, int64_t n, char *dst);

#endif
