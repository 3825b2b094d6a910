/* See aggregate.h. */
#include "aggregate.h"
#include "colsums.h"
#include "avx512.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* built for AVX-512, AVX2 and the baseline, chosen at load time */
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

/* edges ahead whose source rows are prefetched: on a Zen 4 core 16 made the first
 * layer's mean over rows in node-shared memory (13.3k rows, 135k edges x 256 bytes)
 * ~15-25% faster than 8 (medians 3.0-3.5 against 4.1-4.4 ms in a C harness); on a
 * Cascade Lake core 4-32 had measured alike */
#define PF 16
#define PF_BACK 4       /* gradient rows ahead in the backward's gathers */
#define LINE 64

static inline void prefetch_row(const float *row, int64_t bytes)
{
    const char *p = (const char *)row;
    for (int64_t b = 0; b < bytes; b += LINE) __builtin_prefetch(p + b, 0, 3);
}

/* Source row idx: row idx of x, or at the address rows[idx] when rows is given. */
static inline const float *src_row(const float *x, const uintptr_t *rows, int64_t idx, int64_t dim)
{
    return rows ? (const float *)rows[idx] : x + idx * dim;
}

/* rows [r0, r1): prefetches run over the flattened edge list, across row ends */
CLONES static void mean_rows(const int64_t *indptr, const int64_t *indices, int64_t r0, int64_t r1,
                             const float *restrict x, const uintptr_t *rows, int64_t dim, float *restrict out)
{
    const int64_t bytes = dim * (int64_t)sizeof(float);
    const int64_t e_end = indptr[r1];
    int64_t ep = indptr[r0];
    for (int64_t k = 0; k < PF && ep < e_end; ++k, ++ep) prefetch_row(src_row(x, rows, indices[ep], dim), bytes);
    for (int64_t r = r0; r < r1; ++r) {
        float *o = out + r * dim;
        const int64_t e0 = indptr[r], e1 = indptr[r + 1];
        memset(o, 0, (size_t)bytes);
        for (int64_t e = e0; e < e1; ++e) {
            if (ep < e_end) { prefetch_row(src_row(x, rows, indices[ep], dim), bytes); ++ep; }
            const float *restrict s = src_row(x, rows, indices[e], dim);
            for (int64_t j = 0; j < dim; ++j) o[j] += s[j];
        }
        if (e1 > e0) {
            const float inv = 1.0f / (float)(e1 - e0);
            for (int64_t j = 0; j < dim; ++j) o[j] *= inv;
        }
    }
}

#ifdef HPCGNN_X86

/* mean_rows with each output row summed in NV registers (rows of up to 256 floats;
 * MASKED: the last register holds `tail`'s lanes) instead of in memory: the same
 * additions in the same order, so the same numbers bitwise, without a load and a
 * store of the output row per edge. */
#define MEAN_REGS_FN(NAME, NV, MASKED)                                                                \
    AVX512 static void NAME(const int64_t *indptr, const int64_t *indices, int64_t r0, int64_t r1,    \
                            const float *x, const uintptr_t *rows, int64_t dim, float *out,           \
                            __mmask16 tail)                                                           \
    {                                                                                                 \
        const int64_t bytes = dim * (int64_t)sizeof(float);                                           \
        const int64_t e_end = indptr[r1];                                                             \
        int64_t ep = indptr[r0];                                                                      \
        for (int64_t k = 0; k < PF && ep < e_end; ++k, ++ep)                                          \
            prefetch_row(src_row(x, rows, indices[ep], dim), bytes);                                  \
        for (int64_t r = r0; r < r1; ++r) {                                                           \
            __m512 acc[NV];                                                                           \
            _Pragma("GCC unroll 16") for (int t = 0; t < NV; ++t) acc[t] = _mm512_setzero_ps();      \
            const int64_t e0 = indptr[r], e1 = indptr[r + 1];                                         \
            for (int64_t e = e0; e < e1; ++e) {                                                       \
                if (ep < e_end) { prefetch_row(src_row(x, rows, indices[ep], dim), bytes); ++ep; }    \
                const float *sr = src_row(x, rows, indices[e], dim);                                  \
                _Pragma("GCC unroll 16") for (int t = 0; t < NV; ++t)                                \
                    acc[t] = _mm512_add_ps(acc[t], (MASKED) && t == NV - 1                            \
                                                       ? _mm512_maskz_loadu_ps(tail, sr + 16 * t)     \
                                                       : _mm512_loadu_ps(sr + 16 * t));               \
            }                                                                                         \
            if (e1 > e0) {                                                                            \
                const __m512 inv = _mm512_set1_ps(1.0f / (float)(e1 - e0));                           \
                _Pragma("GCC unroll 16") for (int t = 0; t < NV; ++t) acc[t] = _mm512_mul_ps(acc[t], inv); \
            }                                                                                         \
            float *o = out + r * dim;                                                                 \
            _Pragma("GCC unroll 16") for (int t = 0; t < NV; ++t) {                                  \
                if ((MASKED) && t == NV - 1)                                                          \
                    _mm512_mask_storeu_ps(o + 16 * t, tail, acc[t]);                                  \
                else                                                                                  \
                    _mm512_storeu_ps(o + 16 * t, acc[t]);                                             \
            }                                                                                         \
        }                                                                                             \
    }
#define MEAN_REGS_PAIR(NV) MEAN_REGS_FN(mean_full##NV, NV, 0) MEAN_REGS_FN(mean_tail##NV, NV, 1)
MEAN_REGS_PAIR(1) MEAN_REGS_PAIR(2) MEAN_REGS_PAIR(3) MEAN_REGS_PAIR(4) MEAN_REGS_PAIR(5) MEAN_REGS_PAIR(6)
MEAN_REGS_PAIR(7) MEAN_REGS_PAIR(8) MEAN_REGS_PAIR(9) MEAN_REGS_PAIR(10) MEAN_REGS_PAIR(11) MEAN_REGS_PAIR(12)
MEAN_REGS_PAIR(13) MEAN_REGS_PAIR(14) MEAN_REGS_PAIR(15) MEAN_REGS_PAIR(16)

typedef void (*mean_regs_fn)(const int64_t *, const int64_t *, int64_t, int64_t, const float *, const uintptr_t *,
                             int64_t, float *, __mmask16);
#define MEAN_REGS_ENTRY(NV) {mean_full##NV, mean_tail##NV}
static const mean_regs_fn mean_regs_table[16][2] = {
    MEAN_REGS_ENTRY(1), MEAN_REGS_ENTRY(2), MEAN_REGS_ENTRY(3), MEAN_REGS_ENTRY(4), MEAN_REGS_ENTRY(5),
    MEAN_REGS_ENTRY(6), MEAN_REGS_ENTRY(7), MEAN_REGS_ENTRY(8), MEAN_REGS_ENTRY(9), MEAN_REGS_ENTRY(10),
    MEAN_REGS_ENTRY(11), MEAN_REGS_ENTRY(12), MEAN_REGS_ENTRY(13), MEAN_REGS_ENTRY(14), MEAN_REGS_ENTRY(15),
    MEAN_REGS_ENTRY(16)};
#endif

/* 0 turns the register variant off (tests compare the two). */
static int mean_regs_allowed = 1;

void hpcgnn_csr_mean_use_registers(int on) { mean_regs_allowed = on; }

/* mean_rows, in registers where the CPU and the row width allow. */
static void mean_rows_any(const int64_t *indptr, const int64_t *indices, int64_t r0, int64_t r1, const float *x,
                          const uintptr_t *rows, int64_t dim, float *out)
{
#ifdef HPCGNN_X86
    if (mean_regs_allowed && dim > 0 && dim <= 256 && hpcgnn_has_avx512()) {
        __mmask16 tail = hpcgnn_tail_lanes(dim);
        mean_regs_table[(dim + 15) / 16 - 1][tail != 0xffff](indptr, indices, r0, r1, x, rows, dim, out, tail);
        return;
    }
#endif
    mean_rows(indptr, indices, r0, r1, x, rows, dim, out);
}

static void csr_mean_any(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *x,
                         const uintptr_t *rows, int64_t dim, float *out, int nthreads)
{
    if (nrows <= 0) return;
    if (nthreads <= 1 || nrows < 1024) {
        mean_rows_any(indptr, indices, 0, nrows, x, rows, dim, out);
        return;
    }
    const int64_t chunk = 256;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int64_t c = 0; c < (nrows + chunk - 1) / chunk; ++c) {
        const int64_t r0 = c * chunk, r1 = r0 + chunk < nrows ? r0 + chunk : nrows;
        mean_rows_any(indptr, indices, r0, r1, x, rows, dim, out);
    }
}

void hpcgnn_csr_mean(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *x, int64_t dim,
                     float *out, int nthreads)
{
    csr_mean_any(indptr, indices, nrows, x, NULL, dim, out, nthreads);
}

void hpcgnn_csr_mean_rows(const int64_t *indptr, const int64_t *indices, int64_t nrows, const uintptr_t *rows,
                          int64_t dim, float *out, int nthreads)
{
    csr_mean_any(indptr, indices, nrows, NULL, rows, dim, out, nthreads);
}

/* The transpose of a CSR's pattern: for every column s, the rows r with an entry
 * (r, s), in increasing r (tptr: n_src + 1 offsets, trow: one row per entry). */
static void transpose(const int64_t *indptr, const int64_t *indices, int64_t nrows, int64_t n_src, int64_t *tptr,
                      int64_t *trow)
{
    memset(tptr, 0, (size_t)(n_src + 1) * sizeof(int64_t));
    const int64_t m = indptr[nrows];
    for (int64_t e = 0; e < m; ++e) tptr[indices[e] + 1]++;
    for (int64_t s = 0; s < n_src; ++s) tptr[s + 1] += tptr[s];
    for (int64_t r = 0; r < nrows; ++r)
        for (int64_t e = indptr[r]; e < indptr[r + 1]; ++e) trow[tptr[indices[e]]++] = r;
    for (int64_t s = n_src; s > 0; --s) tptr[s] = tptr[s - 1];
    tptr[0] = 0;
}

/* grad_x rows [s0, s1) from the transpose: each row written once, its entries
 * added in increasing r (the order a scatter over rows adds them).  With act: the
 * row then passes relu+dropout's gradient (kept where act > 0, times scale). */
CLONES static void gather_rows_back(const int64_t *tptr, const int64_t *trow, const float *inv, int64_t s0,
                                    int64_t s1, const float *restrict grad_out, int64_t dim,
                                    const float *restrict act, float scale, float *restrict grad_x)
{
    for (int64_t s = s0; s < s1; ++s) {
        float *o = grad_x + s * dim;
        const int64_t t0 = tptr[s], t1 = tptr[s + 1];
        if (t1 + PF_BACK < tptr[s1]) __builtin_prefetch(grad_out + trow[t1 + PF_BACK] * dim, 0, 3);
        for (int64_t j = 0; j < dim; ++j) o[j] = 0.0f;
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t r = trow[t];
            const float w = inv[r], *g = grad_out + r * dim;
            for (int64_t j = 0; j < dim; ++j) o[j] += g[j] * w;
        }
        if (act) {
            const float *a = act + s * dim;
            for (int64_t j = 0; j < dim; ++j) {
                uint32_t ob, ab;
                float v = o[j] * scale;
                memcpy(&ob, &v, 4);
                memcpy(&ab, &a[j], 4);
                ob &= -(uint32_t)((int32_t)ab > 0);
                memcpy(&o[j], &ob, 4);
            }
        }
    }
}

enum { SUM = HPCGNN_SUM_ROWS };   /* rows per float partial sum of the bias gradient (colsums.h) */

/* columns sums of rows [s0, s1) of g into part (float, in row order) */
CLONES static void col_sums(const float *restrict g, int64_t s0, int64_t s1, int64_t dim, float *restrict part)
{
    for (int64_t j = 0; j < dim; ++j) part[j] = 0.0f;
    hpcgnn_add_rows(part, g, s0, s1, dim, dim);
}

int hpcgnn_csr_mean_backward_act(const int64_t *indptr, const int64_t *indices, int64_t nrows,
                                 const float *grad_out, int64_t dim, const float *act, float scale, float *grad_x,
                                 double *bias_grad, int64_t n_src, int nthreads)
{
    const int64_t m = nrows > 0 ? indptr[nrows] : 0;
    const int64_t nchunks = (n_src + SUM - 1) / SUM;
    int64_t *tptr = malloc((size_t)(n_src + 1) * sizeof(int64_t));
    int64_t *trow = malloc((size_t)(m > 0 ? m : 1) * sizeof(int64_t));
    float *inv = malloc((size_t)(nrows > 0 ? nrows : 1) * sizeof(float));
    float *parts = bias_grad ? malloc((size_t)(nchunks > 0 ? nchunks : 1) * (size_t)dim * sizeof(float)) : NULL;
    if (!tptr || !trow || !inv || (bias_grad && !parts)) {
        free(tptr); free(trow); free(inv); free(parts);
        return -1;
    }
    transpose(indptr, indices, nrows, n_src, tptr, trow);
    for (int64_t r = 0; r < nrows; ++r) {
        const int64_t d = indptr[r + 1] - indptr[r];
        inv[r] = d > 0 ? 1.0f / (float)d : 0.0f;
    }
    /* chunks of SUM rows: threads never share a row, and the bias sums come out the
     * same for any thread count */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads > 1 && nchunks > 1 ? nthreads : 1)
    for (int64_t c = 0; c < nchunks; ++c) {
        const int64_t s0 = c * SUM, s1 = s0 + SUM < n_src ? s0 + SUM : n_src;
        gather_rows_back(tptr, trow, inv, s0, s1, grad_out, dim, act, scale, grad_x);
        if (parts) col_sums(grad_x, s0, s1, dim, parts + c * dim);
    }
    if (bias_grad) {
        memset(bias_grad, 0, (size_t)dim * sizeof(double));
        for (int64_t c = 0; c < nchunks; ++c)
            for (int64_t j = 0; j < dim; ++j) bias_grad[j] += parts[c * dim + j];
    }
    free(tptr); free(trow); free(inv); free(parts);
    return 0;
}

int hpcgnn_csr_mean_backward(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *grad_out,
                             int64_t dim, float *grad_x, int64_t n_src, int nthreads)
{
    return hpcgnn_csr_mean_backward_act(indptr, indices, nrows, grad_out, dim, NULL, 1.0f, grad_x, NULL, n_src,
                                        nthreads);
}

int hpcgnn_build_csr(const int64_t *src, const int64_t *dst, int64_t num_edges, int64_t num_dst, int64_t num_src,
                     int with_root, int64_t *indptr, int64_t *cols)
{
    for (int64_t e = 0; e < num_edges; ++e)
        if (src[e] < 0 || src[e] >= num_src) return -2;
    const int64_t step = with_root ? 2 : 1;
    int64_t e = 0;
    for (int64_t d = 0; d < num_dst; ++d) {
        const int64_t shift = with_root ? d : 0;       /* root entries placed before this row's */
        indptr[step * d] = e + shift;
        while (e < num_edges && dst[e] == d) {
            cols[e + shift] = src[e];
            ++e;
        }
        if (with_root) {
            indptr[2 * d + 1] = e + d;
            cols[e + d] = d;
        }
    }
    indptr[step * num_dst] = e + (with_root ? num_dst : 0);
    return e == num_edges ? 0 : -1;         /* an id outside [0, num_dst), or out of order */
}

