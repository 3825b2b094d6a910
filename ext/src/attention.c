/* See attention.h. */
#include "attention.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

static int check(const int64_t *indptr, const int64_t *indices, int64_t nrows, int64_t n_src)
{
    if (indptr[0] != 0) return -1;
    for (int64_t r = 0; r < nrows; ++r)
        if (indptr[r + 1] < indptr[r]) return -1;
    const int64_t m = indptr[nrows];
    for (int64_t e = 0; e < m; ++e)
        if (indices[e] < 0 || indices[e] >= n_src) return -1;
    return 0;
}

CLONES static void attend_rows(const int64_t *indptr, const int64_t *indices, int64_t r0, int64_t r1,
                               const float *restrict alpha, int64_t heads, const float *restrict x, int64_t dim,
                               float *restrict out)
{
    const int64_t width = heads * dim;
    for (int64_t r = r0; r < r1; ++r) {
        float *o = out + r * width;
        memset(o, 0, (size_t)width * sizeof(float));
        for (int64_t e = indptr[r]; e < indptr[r + 1]; ++e) {
            const float *restrict s = x + indices[e] * width;
            if (e + 4 < indptr[r + 1]) __builtin_prefetch(x + indices[e + 4] * width, 0, 3);
            for (int64_t h = 0; h < heads; ++h) {
                const float a = alpha[e * heads + h];
                float *restrict oh = o + h * dim;
                const float *restrict sh = s + h * dim;
                for (int64_t j = 0; j < dim; ++j) oh[j] += a * sh[j];
            }
        }
    }
}

int hpcgnn_csr_attend(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *alpha,
                      int64_t heads, const float *x, int64_t dim, int64_t n_src, float *out, int nthreads)
{
    if (check(indptr, indices, nrows, n_src)) return -1;
    if (nthreads <= 1 || nrows < 256) {
        attend_rows(indptr, indices, 0, nrows, alpha, heads, x, dim, out);
        return 0;
    }
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 64)
    for (int64_t r = 0; r < nrows; r += 64)
        attend_rows(indptr, indices, r, r + 64 < nrows ? r + 64 : nrows, alpha, heads, x, dim, out);
    return 0;
}

CLONES static void grad_alpha_rows(const int64_t *indptr, const int64_t *indices, int64_t r0, int64_t r1,
                                   int64_t heads, const float *restrict x, int64_t dim,
                                   const float *restrict grad_out, float *restrict grad_alpha)
{
    const int64_t width = heads * dim;
    for (int64_t r = r0; r < r1; ++r) {
        const float *g = grad_out + r * width;
        for (int64_t e = indptr[r]; e < indptr[r + 1]; ++e) {
            const float *restrict s = x + indices[e] * width;
            for (int64_t h = 0; h < heads; ++h) {
                float acc = 0.0f;
                const float *restrict gh = g + h * dim;
                const float *restrict sh = s + h * dim;
                for (int64_t j = 0; j < dim; ++j) acc += gh[j] * sh[j];
                grad_alpha[e * heads + h] = acc;
            }
        }
    }
}

CLONES static void grad_x_rows(const int64_t *indptr, const int64_t *indices, int64_t nrows,
                               const float *restrict alpha, int64_t heads, int64_t dim,
                               const float *restrict grad_out, float *restrict grad_x)
{
    const int64_t width = heads * dim;
    for (int64_t r = 0; r < nrows; ++r) {
        const float *g = grad_out + r * width;
        for (int64_t e = indptr[r]; e < indptr[r + 1]; ++e) {
            float *restrict t = grad_x + indices[e] * width;
            for (int64_t h = 0; h < heads; ++h) {
                const float a = alpha[e * heads + h];
                float *restrict th = t + h * dim;
                const float *restrict gh = g + h * dim;
                for (int64_t j = 0; j < dim; ++j) th[j] += a * gh[j];
            }
        }
    }
}

int hpcgnn_csr_attend_backward(const int64_t *indptr, const int64_t *indices, int64_t nrows,
                               const float *alpha, int64_t heads, const float *x, int64_t dim, int64_t n_src,
                               const float *grad_out, float *grad_x, float *grad_alpha, int nthreads)
{
    if (check(indptr, indices, nrows, n_src)) return -1;
    if (grad_alpha) {
        if (nthreads <= 1 || nrows < 256) {
            grad_alpha_rows(indptr, indices, 0, nrows, heads, x, dim, grad_out, grad_alpha);
        } else {
            #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 64)
            for (int64_t r = 0; r < nrows; r += 64)
                grad_alpha_rows(indptr, indices, r, r + 64 < nrows ? r + 64 : nrows, heads, x, dim, grad_out,
                                grad_alpha);
        }
    }
    if (grad_x) {           /* a scatter into shared rows: one thread */
        memset(grad_x, 0, (size_t)(n_src * heads * dim) * sizeof(float));
        grad_x_rows(indptr, indices, nrows, alpha, heads, dim, grad_out, grad_x);
    }
    return 0;
}
