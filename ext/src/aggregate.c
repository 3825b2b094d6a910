/* See aggregate.h. */
#include "aggregate.h"

#include <string.h>

#define PF 8            /* edges ahead whose source rows are prefetched */
#define LINE 64

static inline void prefetch_row(const float *row, int64_t bytes)
{
    const char *p = (const char *)row;
    for (int64_t b = 0; b < bytes; b += LINE) __builtin_prefetch(p + b, 0, 3);
}

/* rows [r0, r1): prefetches run over the flattened edge list, across row ends */
static void mean_rows(const int64_t *indptr, const int64_t *indices, int64_t r0, int64_t r1, const float *x,
                      int64_t dim, float *out)
{
    const int64_t bytes = dim * (int64_t)sizeof(float);
    const int64_t e_end = indptr[r1];
    int64_t ep = indptr[r0];
    for (int64_t k = 0; k < PF && ep < e_end; ++k, ++ep) prefetch_row(x + indices[ep] * dim, bytes);
    for (int64_t r = r0; r < r1; ++r) {
        float *o = out + r * dim;
        const int64_t e0 = indptr[r], e1 = indptr[r + 1];
        memset(o, 0, (size_t)bytes);
        for (int64_t e = e0; e < e1; ++e) {
            if (ep < e_end) { prefetch_row(x + indices[ep] * dim, bytes); ++ep; }
            const float *s = x + indices[e] * dim;
            for (int64_t j = 0; j < dim; ++j) o[j] += s[j];
        }
        if (e1 > e0) {
            const float inv = 1.0f / (float)(e1 - e0);
            for (int64_t j = 0; j < dim; ++j) o[j] *= inv;
        }
    }
}

void hpcgnn_csr_mean(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *x, int64_t dim,
                     float *out, int nthreads)
{
    if (nrows <= 0) return;
    if (nthreads <= 1 || nrows < 1024) {
        mean_rows(indptr, indices, 0, nrows, x, dim, out);
        return;
    }
    const int64_t chunk = 256;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int64_t c = 0; c < (nrows + chunk - 1) / chunk; ++c) {
        const int64_t r0 = c * chunk, r1 = r0 + chunk < nrows ? r0 + chunk : nrows;
        mean_rows(indptr, indices, r0, r1, x, dim, out);
    }
}
