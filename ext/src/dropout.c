#include <string.h>
#include "dropout.h"
#include "colsums.h"

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void hpcgnn_dropout_mask(uint8_t *restrict mask, int64_t n, uint64_t keep_threshold, uint64_t seed)
{
    const uint64_t base = mix64(seed ^ 0x6a09e667f3bcc909ULL);
    int64_t j = 0;
    for (; 4 * j + 3 < n; ++j) {
        uint64_t r = mix64(base + (uint64_t)j * 0x9e3779b97f4a7c15ULL);
        uint8_t *m = mask + 4 * j;
        m[0] = (r & 0xffff) >= keep_threshold;
        m[1] = ((r >> 16) & 0xffff) >= keep_threshold;
        m[2] = ((r >> 32) & 0xffff) >= keep_threshold;
        m[3] = (r >> 48) >= keep_threshold;
    }
    if (4 * j < n) {
        uint64_t r = mix64(base + (uint64_t)j * 0x9e3779b97f4a7c15ULL);
        for (int64_t i = 4 * j; i < n; ++i, r >>= 16)
            mask[i] = (r & 0xffff) >= keep_threshold;
    }
}

/* The draws are 64-bit multiplies, which GCC vectorises well with AVX-512 and
 * passably with AVX2: the kernels are built for both and the baseline, chosen at
 * load time (target_clones); every build draws the same numbers. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

/* Bit-level selects: GCC keeps a branch for float compares feeding arithmetic
 * (trapping-math), and with a random keep pattern that branch mispredicts half the
 * time (~8 ns per element); integer selects vectorise. */

static inline uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float relu_drop1(float x, uint32_t draw, uint32_t thr, uint32_t scale_bits)
{
    uint32_t xb = fbits(x);
    uint32_t pos = -(uint32_t)((int32_t)xb > 0);          /* x > 0 (and not NaN-negative) */
    uint32_t keep = -(uint32_t)(draw >= thr);
    return bitsf(xb & pos) * bitsf(scale_bits & keep);
}

#define CHUNK 1024     /* draws made at a time (16-bit each), on the stack */

/* The 64-bit numbers j0 .. j0+nj-1 of the stream: element i's 16-bit draw is bits
 * 16*(i%4) .. of number i/4, i.e. (little-endian) the i-th uint16 of this buffer
 * when j0 = 0.  A plain loop of multiplies: vectorised where the CPU allows. */
#define INLINE static inline __attribute__((always_inline))

INLINE void draws(uint64_t base, int64_t j0, int64_t nj, uint64_t *restrict buf)
{
    for (int64_t j = 0; j < nj; ++j) buf[j] = mix64(base + (uint64_t)(j0 + j) * 0x9e3779b97f4a7c15ULL);
}

/* x[k] (+ bias[k] when bias) for k < len, flat positions i0 + k: relu, dropout */
INLINE void relu_drop_span(const float *x, const float *bias, float *out, int64_t len, int64_t i0, uint64_t base,
                           uint32_t thr, uint32_t sb)
{
    uint64_t buf[CHUNK / 4 + 2];
    const uint16_t *d = (const uint16_t *)buf + (i0 & 3);
    draws(base, i0 >> 2, ((i0 & 3) + len + 3) >> 2, buf);
    if (bias)
        for (int64_t k = 0; k < len; ++k) out[k] = relu_drop1(x[k] + bias[k], d[k], thr, sb);
    else
        for (int64_t k = 0; k < len; ++k) out[k] = relu_drop1(x[k], d[k], thr, sb);
}

CLONES void hpcgnn_relu_dropout(const float *restrict x, float *restrict out, int64_t n, uint64_t keep_threshold,
                                uint64_t seed, float scale)
{
    /* the same draws as hpcgnn_dropout_mask: element i is kept exactly when the
     * mask would keep it; branchless (the keep pattern is random) */
    const uint64_t base = mix64(seed ^ 0x6a09e667f3bcc909ULL);
    const uint32_t sb = fbits(scale);
    for (int64_t i = 0; i < n; i += CHUNK)
        relu_drop_span(x + i, NULL, out + i, n - i < CHUNK ? n - i : CHUNK, i, base, keep_threshold, sb);
}

CLONES void hpcgnn_relu_dropout_grad(const float *restrict grad, const float *restrict out, float scale,
                                     float *restrict grad_in, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        grad_in[i] = bitsf(fbits(grad[i] * scale) & -(uint32_t)((int32_t)fbits(out[i]) > 0));
}

void hpcgnn_dropout_apply(const float *restrict x, const uint8_t *restrict mask, float scale,
                          float *restrict out, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        out[i] = x[i] * bitsf(fbits(scale) & -(uint32_t)mask[i]);
}

CLONES void hpcgnn_bias_relu_dropout(float *x, const float *bias, int64_t rows, int64_t dim,
                                     uint64_t keep_threshold, uint64_t seed, float scale)
{
    /* the draws of hpcgnn_relu_dropout for the flat positions r * dim + c */
    const uint64_t base = mix64(seed ^ 0x6a09e667f3bcc909ULL);
    const uint32_t sb = fbits(scale);
    for (int64_t row = 0; row < rows; ++row)
        for (int64_t c = 0; c < dim; c += CHUNK) {
            float *xr = x + row * dim + c;
            relu_drop_span(xr, bias + c, xr, dim - c < CHUNK ? dim - c : CHUNK, row * dim + c, base,
                           keep_threshold, sb);
        }
}

CLONES void hpcgnn_relu_dropout_grad_bias(const float *restrict grad, const float *restrict out, float scale,
                                          float *restrict grad_in, int64_t rows, int64_t dim, double *restrict acc)
{
    /* column sums as colsums.h says.  Per block of ROWS rows: the gradient first
     * (one streaming loop), then its column sums read back from cache - one loop
     * doing both ran at half the speed (its float sums were kept in memory between
     * the loads and the stores of every row). */
    enum { COLS = 512, ROWS = 32, SUM = HPCGNN_SUM_ROWS };
    _Static_assert(SUM % ROWS == 0, "a block of the sums must be whole blocks of ROWS rows");
    float part[COLS];
    memset(acc, 0, (size_t)dim * sizeof(double));
    for (int64_t c0 = 0; c0 < dim; c0 += COLS) {
        const int64_t w = dim - c0 < COLS ? dim - c0 : COLS;
        memset(part, 0, sizeof(part));
        for (int64_t r0 = 0; r0 < rows; r0 += ROWS) {
            const int64_t r1 = r0 + ROWS < rows ? r0 + ROWS : rows;
            for (int64_t row = r0; row < r1; ++row) {
                const float *g = grad + row * dim + c0, *o = out + row * dim + c0;
                float *gi = grad_in + row * dim + c0;
                for (int64_t c = 0; c < w; ++c)
                    gi[c] = bitsf(fbits(g[c] * scale) & -(uint32_t)((int32_t)fbits(o[c]) > 0));
            }
            hpcgnn_add_rows(part, grad_in + c0, r0, r1, dim, w);
            if (r1 % SUM == 0 || r1 == rows) {
                for (int64_t c = 0; c < w; ++c) acc[c0 + c] += part[c];
                memset(part, 0, sizeof(part));
            }
        }
    }
}

/* Bernoulli draws for PyTorch's bernoulli_(p) on CPU tensors: 32-bit draws, two
 * per 64-bit number of the same splitmix64 stream (another seed mix than the
 * masks'), element i is 1 when its draw is < threshold = round(p * 2^32). */
#define BERNOULLI_FILL(NAME, T)                                                                  \
    CLONES void NAME(T *restrict out, int64_t n, uint64_t threshold, uint64_t seed)              \
    {                                                                                            \
        const uint64_t base = mix64(seed ^ 0xbb67ae8584caa73bULL);                               \
        uint64_t buf[CHUNK / 2];                                                                 \
        for (int64_t i = 0; i < n; i += CHUNK) {                                                 \
            const int64_t len = n - i < CHUNK ? n - i : CHUNK;                                   \
            const uint32_t *d = (const uint32_t *)buf;                                           \
            T *o = out + i;                                                                      \
            draws(base, i >> 1, (len + 1) >> 1, buf);                                            \
            for (int64_t k = 0; k < len; ++k) o[k] = (T)((uint64_t)d[k] < threshold);            \
        }                                                                                        \
    }

BERNOULLI_FILL(hpcgnn_bernoulli_f32, float)
BERNOULLI_FILL(hpcgnn_bernoulli_f64, double)
BERNOULLI_FILL(hpcgnn_bernoulli_u8, uint8_t)
