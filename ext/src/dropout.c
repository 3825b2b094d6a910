#include <string.h>
#include "dropout.h"

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

/* Bit-level selects: GCC keeps a branch for float compares feeding arithmetic
 * (trapping-math), and with a random keep pattern that branch mispredicts half the
 * time (~8 ns per element); integer selects vectorise. */
static inline uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float relu_drop1(float x, uint64_t draw, uint64_t thr, uint32_t scale_bits)
{
    uint32_t xb = fbits(x);
    uint32_t pos = -(uint32_t)((int32_t)xb > 0);          /* x > 0 (and not NaN-negative) */
    uint32_t keep = -(uint32_t)(draw >= thr);
    return bitsf(xb & pos) * bitsf(scale_bits & keep);
}

void hpcgnn_relu_dropout(const float *restrict x, float *restrict out, int64_t n, uint64_t keep_threshold,
                         uint64_t seed, float scale)
{
    /* the same draws as hpcgnn_dropout_mask: element i is kept exactly when the
     * mask would keep it; branchless (the keep pattern is random) */
    const uint64_t base = mix64(seed ^ 0x6a09e667f3bcc909ULL);
    const uint32_t sb = fbits(scale);
    int64_t j = 0;
    for (; 4 * j + 3 < n; ++j) {
        uint64_t r = mix64(base + (uint64_t)j * 0x9e3779b97f4a7c15ULL);
        const float *xi = x + 4 * j;
        float *oi = out + 4 * j;
        oi[0] = relu_drop1(xi[0], r & 0xffff, keep_threshold, sb);
        oi[1] = relu_drop1(xi[1], (r >> 16) & 0xffff, keep_threshold, sb);
        oi[2] = relu_drop1(xi[2], (r >> 32) & 0xffff, keep_threshold, sb);
        oi[3] = relu_drop1(xi[3], r >> 48, keep_threshold, sb);
    }
    if (4 * j < n) {
        uint64_t r = mix64(base + (uint64_t)j * 0x9e3779b97f4a7c15ULL);
        for (int64_t i = 4 * j; i < n; ++i, r >>= 16)
            out[i] = relu_drop1(x[i], r & 0xffff, keep_threshold, sb);
    }
}

void hpcgnn_relu_dropout_grad(const float *restrict grad, const float *restrict out, float scale,
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
