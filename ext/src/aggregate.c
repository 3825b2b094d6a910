/* See aggregate.h. */
#include "aggregate.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* built for AVX-512, AVX2 and the baseline, chosen at load time */
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

#define PF 8            /* edges ahead whose source rows are prefetched */
#define LINE 64

static inline void prefetch_row(const float *row, int64_t bytes)
{
    const char *p = (const char *)row;
    for (int64_t b = 0; b < bytes; b += LINE) __builtin_prefetch(p + b, 0, 3);
}

/* rows [r0, r1): prefetches run over the flattened edge list, across row ends */
CLONES static void mean_rows(const int64_t *indptr, const int64_t *indices, int64_t r0, int64_t r1,
                             const float *restrict x, int64_t dim, float *restrict out)
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

/* columns [c0, c1) of every row: grad_x[indices[e], c] += grad_out[r, c] / deg(r) */
CLONES static void scatter_cols(const int64_t *indptr, const int64_t *indices, int64_t nrows,
                                const float *restrict grad_out, int64_t dim, float *restrict grad_x, int64_t c0,
                                int64_t c1)
{
    const int64_t w = c1 - c0;
    for (int64_t r = 0; r < nrows; ++r) {
        const int64_t e0 = indptr[r], e1 = indptr[r + 1];
        if (e1 == e0) continue;
        const float inv = 1.0f / (float)(e1 - e0);
        const float *g = grad_out + r * dim + c0;
        for (int64_t e = e0; e < e1; ++e) {
            if (e + PF < e1) __builtin_prefetch(grad_x + indices[e + PF] * dim + c0, 1, 3);
            float *o = grad_x + indices[e] * dim + c0;
            for (int64_t j = 0; j < w; ++j) o[j] += g[j] * inv;
        }
    }
}

void hpcgnn_csr_mean_backward(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *grad_out,
                              int64_t dim, float *grad_x, int64_t n_src, int nthreads)
{
    const int64_t block = 64;                   /* columns per task: 256 bytes */
    const int64_t nblocks = (dim + block - 1) / block;
    if (nthreads <= 1 || nblocks < 2 || nrows < 256) {
        memset(grad_x, 0, (size_t)(n_src * dim) * sizeof(float));
        scatter_cols(indptr, indices, nrows, grad_out, dim, grad_x, 0, dim);
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_src; ++r) memset(grad_x + r * dim, 0, (size_t)dim * sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < nblocks; ++b)
            scatter_cols(indptr, indices, nrows, grad_out, dim, grad_x, b * block,
                         (b + 1) * block < dim ? (b + 1) * block : dim);
    }
}
