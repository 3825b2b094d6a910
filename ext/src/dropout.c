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

void hpcgnn_dropout_apply(const float *restrict x, const uint8_t *restrict mask, float scale,
                          float *restrict out, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        out[i] = x[i] * (scale * (float)mask[i]);
}
