#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "weight_grad.h"
#include "avx512.h"

/* The order of the work, in both variants: rows in chunks of WG_R (their A rows
 * stay in the core's caches while every column uses them); per chunk, one bit mask
 * per column of G marking its nonzero rows; per column j, D[j, :] kept in
 * registers while the chunk's nonzero rows are added in increasing i.  Per
 * nonzero: k loads and multiply-adds, no stores (a row-by-row scatter into D would
 * store k floats per nonzero).  Measured on one Zen 4 core for the README model's
 * first layer (G 13.6k x 256 with 30% nonzeros, A 13.6k x 128): chunks of 32-64
 * rows 7.7-8.3 ms, of 8 rows 11.5 ms; MKL's dense product 10.2-10.6 ms.  About 70%
 * of the time is the multiply-adds (~16 cycles per nonzero, against 9 for the
 * same loop on rows already in L1: the column visits' loads and stores of D and
 * their unpredictable lengths cost the rest), 20% reading G for the masks. */
#ifndef WG_R
#define WG_R 64
#endif

static void columns_range(int64_t m, int nthreads, int t, int64_t *j0, int64_t *j1)
{
    int64_t blocks = (m + 15) / 16;                 /* whole blocks of 16 columns per thread */
    int64_t per = blocks / nthreads, extra = blocks % nthreads;
    int64_t b0 = t * per + (t < extra ? t : extra);
    int64_t b1 = b0 + per + (t < extra);
    *j0 = b0 * 16 < m ? b0 * 16 : m;
    *j1 = b1 * 16 < m ? b1 * 16 : m;
}

static void wg_plain(const float *G, int64_t n, int64_t m, const float *A, int64_t k, float *D, int64_t j0,
                     int64_t j1)
{
    uint64_t mask[16];
    for (int64_t r0 = 0; r0 < n; r0 += WG_R) {
        int rr = (int)(n - r0 < WG_R ? n - r0 : WG_R);
        for (int64_t cb = j0; cb < j1; cb += 16) {
            int w = (int)(j1 - cb < 16 ? j1 - cb : 16);
            memset(mask, 0, sizeof mask);
            for (int r = 0; r < rr; ++r) {
                const float *g = G + (r0 + r) * m + cb;
                for (int c = 0; c < w; ++c)
                    mask[c] |= (uint64_t)(g[c] != 0.0f) << r;
            }
            for (int c = 0; c < w; ++c) {
                float *d = D + (cb + c) * k;
                for (uint64_t mm = mask[c]; mm; mm &= mm - 1) {
                    int r = __builtin_ctzll(mm);
                    float v = G[(r0 + r) * m + cb + c];
                    const float *a = A + (r0 + r) * k;
                    for (int64_t t = 0; t < k; ++t)
                        d[t] += v * a[t];
                }
            }
        }
    }
}

#ifdef HPCGNN_X86

/* Column j's nonzero rows of one chunk (bits of msk) added into D[j, s .. s + 16 NV),
 * kept in NV registers meanwhile; MASKED: the last vector holds `tail`'s lanes. */
#define WG_VLOAD(p, t, NV, MASKED) ((MASKED) && (t) == (NV) - 1 ? _mm512_maskz_loadu_ps(tail, p) : _mm512_loadu_ps(p))
#define WG_SLAB(NAME, NV, MASKED)                                                                     \
    AVX512 static inline __attribute__((always_inline)) void NAME(                                    \
        const float *vals, const float *A, int64_t k, float *D, int64_t r0, int64_t j,               \
        uint64_t msk, int64_t s, __mmask16 tail)                                                      \
    {                                                                                                 \
        __m512 acc[NV];                                                                               \
        float *d = D + j * k + s;                                                                     \
        _Pragma("GCC unroll 8") for (int t = 0; t < NV; ++t)                                         \
            acc[t] = WG_VLOAD(d + 16 * t, t, NV, MASKED);                                                         \
        for (; msk; msk &= msk - 1) {                                                                 \
            int r = __builtin_ctzll(msk);                                                             \
            __m512 v = _mm512_set1_ps(vals[16 * r]);                                                  \
            const float *a = A + (r0 + r) * k + s;                                                    \
            _Pragma("GCC unroll 8") for (int t = 0; t < NV; ++t)                                     \
                acc[t] = _mm512_fmadd_ps(v, WG_VLOAD(a + 16 * t, t, NV, MASKED), acc[t]);                        \
        }                                                                                             \
        _Pragma("GCC unroll 8") for (int t = 0; t < NV; ++t) {                                       \
            if (MASKED && t == NV - 1)                                                                \
                _mm512_mask_storeu_ps(d + 16 * t, tail, acc[t]);                                      \
            else                                                                                      \
                _mm512_storeu_ps(d + 16 * t, acc[t]);                                                 \
        }                                                                                             \
    }
#define WG_SLABS(NV) WG_SLAB(wg_full##NV, NV, 0) WG_SLAB(wg_tail##NV, NV, 1)
WG_SLABS(1)
WG_SLABS(2)
WG_SLABS(3)
WG_SLABS(4)
WG_SLABS(5)
WG_SLABS(6)
WG_SLABS(7)
WG_SLABS(8)

#define WG_CASE(NV)                                                                                   \
    case NV:                                                                                          \
        if (tail == 0xffff)                                                                           \
            wg_full##NV(vals, A, k, D, r0, j, msk, s, tail);                                          \
        else                                                                                          \
            wg_tail##NV(vals, A, k, D, r0, j, msk, s, tail);                                          \
        break;

AVX512 static void wg_column(const float *vals, const float *A, int64_t k, float *D, int64_t r0, int64_t j,
                             uint64_t msk)
{
    for (int64_t s = 0; s < k; s += 128) {
        int64_t width = k - s < 128 ? k - s : 128;
        int nv = (int)((width + 15) / 16);
        __mmask16 tail = hpcgnn_tail_lanes(width);
        switch (nv) {
        WG_CASE(8) WG_CASE(7) WG_CASE(6) WG_CASE(5) WG_CASE(4) WG_CASE(3) WG_CASE(2) WG_CASE(1)
        }
    }
}

AVX512 static void wg_avx512(const float *G, int64_t n, int64_t m, const float *A, int64_t k, float *D,
                             int64_t j0, int64_t j1)
{
    uint32_t lo[16] __attribute__((aligned(64))), hi[16] __attribute__((aligned(64)));
    float vals[WG_R * 16] __attribute__((aligned(64)));     /* the chunk's values of 16 columns, row-major */
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t r0 = 0; r0 < n; r0 += WG_R) {
        int rr = (int)(n - r0 < WG_R ? n - r0 : WG_R);
        for (int64_t cb = j0; cb < j1; cb += 16) {
            int w = (int)(j1 - cb < 16 ? j1 - cb : 16);
            __mmask16 lanes = (__mmask16)(w == 16 ? 0xffff : (1u << w) - 1);
            __m512i cm = _mm512_setzero_si512(), ch = _mm512_setzero_si512();
            for (int r = 0; r < rr; ++r) {
                __m512 g = _mm512_maskz_loadu_ps(lanes, G + (r0 + r) * m + cb);
                _mm512_store_ps(vals + 16 * r, g);
                __mmask16 nz = _mm512_mask_cmp_ps_mask(lanes, g, zero, _CMP_NEQ_UQ);   /* NaN: nonzero */
                if (r < 32)
                    cm = _mm512_mask_or_epi32(cm, nz, cm, _mm512_set1_epi32((int)(1u << r)));
                else
                    ch = _mm512_mask_or_epi32(ch, nz, ch, _mm512_set1_epi32((int)(1u << (r - 32))));
            }
            _mm512_store_si512((void *)lo, cm);
            if (rr > 32)
                _mm512_store_si512((void *)hi, ch);
            for (int c = 0; c < w; ++c) {
                uint64_t msk = lo[c] | (rr > 32 ? (uint64_t)hi[c] << 32 : 0);
                if (msk)
                    wg_column(vals + c, A, k, D, r0, cb + c, msk);
            }
        }
    }
}
#endif

int hpcgnn_weight_grad_vectorised(void)
{
#ifdef HPCGNN_X86
    return hpcgnn_has_avx512();
#else
    return 0;
#endif
}

void hpcgnn_weight_grad(const float *G, int64_t n, int64_t m, const float *A, int64_t k, float *D, int nthreads,
                        int vectorised)
{
    if (m <= 0 || k <= 0)
        return;
    memset(D, 0, (size_t)m * (size_t)k * sizeof(float));
    if (n <= 0)
        return;
    int vec = vectorised && hpcgnn_weight_grad_vectorised();
    int64_t blocks = (m + 15) / 16;
    if (nthreads < 1)
        nthreads = 1;
    if (nthreads > blocks)
        nthreads = (int)blocks;
#pragma omp parallel num_threads(nthreads)
    {
        int t = 0, nt = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        int64_t j0, j1;
        columns_range(m, nt, t, &j0, &j1);
#ifdef HPCGNN_X86
        if (vec)
            wg_avx512(G, n, m, A, k, D, j0, j1);
        else
#endif
            wg_plain(G, n, m, A, k, D, j0, j1);
    }
}
