#ifndef HPCGNN_COLSUMS_H
#define HPCGNN_COLSUMS_H
#include <stdint.h>

/* A bias gradient is the column sums of a gradient matrix.  Every kernel that
 * computes one (dropout.c, aggregate.c) adds the same way, so a fused kernel and
 * the unfused path it replaces give bitwise the same sums for any thread count:
 * rows are taken in blocks of HPCGNN_SUM_ROWS consecutive rows, each block summed
 * in float in row order, and the blocks' float sums added into double in block
 * order. */
#define HPCGNN_SUM_ROWS 128

/* part[c] += g[r * stride + c] for rows r0 <= r < r1 in order, columns c < w */
static inline __attribute__((always_inline)) void hpcgnn_add_rows(float *restrict part, const float *restrict g,
                                                                  int64_t r0, int64_t r1, int64_t stride,
                                                                  int64_t w)
{
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < w; ++c) part[c] += g[r * stride + c];
}

#endif
