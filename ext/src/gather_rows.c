#include <string.h>
#include "gather_rows.h"

#define PREFETCH_AHEAD 8

void hpcgnn_gather_rows(const char *src, int64_t row_bytes, const int64_t *ids, int64_t n, char *dst)
{
    for (int64_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n) {
            const char *p = src + ids[i + PREFETCH_AHEAD] * row_bytes;
            for (int64_t b = 0; b < row_bytes; b += 64)
                __builtin_prefetch(p + b, 0, 0);
        }
        memcpy(dst + i * row_bytes, src + ids[i] * row_bytes, (size_t)row_bytes);
    }
}

/* Range index of id: bounds[k] <= id < bounds[k+1]; k_hint first (ids cluster). */
static inline int find_range(const int64_t *bounds, int K, int64_t id, int k_hint)
{
    if (id >= bounds[k_hint] && id < bounds[k_hint + 1])
        return k_hint;
    int lo = 0, hi = K;              /* bounds[lo] <= id < bounds[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (id >= bounds[mid]) lo = mid; else hi = mid;
    }
    return lo;
}

/* Position of id in the sorted cache_ids, or -1. */
static inline int64_t find_cached(const int64_t *cache_ids, int64_t cache_n, int64_t id)
{
    int64_t lo = 0, hi = cache_n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cache_ids[mid] < id) lo = mid + 1; else hi = mid;
    }
    return (lo < cache_n && cache_ids[lo] == id) ? lo : -1;
}

int64_t hpcgnn_gather_ranges(const char *const *bases, const int64_t *bounds, int K, int64_t row_bytes,
                             const int64_t *ids, int64_t n, char *dst, int32_t *range_of,
                             const int64_t *cache_ids, int64_t cache_n, const char *cache_rows)
{
    int64_t other = 0;
    int k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n) {
            int64_t j = ids[i + PREFETCH_AHEAD];
            int kj = find_range(bounds, K, j, k);
            if (bases[kj]) {
                const char *p = bases[kj] + (j - bounds[kj]) * row_bytes;
                for (int64_t b = 0; b < row_bytes; b += 64)
                    __builtin_prefetch(p + b, 0, 0);
            }
        }
        if (cache_n) {
            int64_t c = find_cached(cache_ids, cache_n, ids[i]);
            if (c >= 0) {
                memcpy(dst + i * row_bytes, cache_rows + c * row_bytes, (size_t)row_bytes);
                range_of[i] = -2;
                continue;
            }
        }
        k = find_range(bounds, K, ids[i], k);
        if (bases[k]) {
            memcpy(dst + i * row_bytes, bases[k] + (ids[i] - bounds[k]) * row_bytes, (size_t)row_bytes);
            range_of[i] = -1;
        } else {
            range_of[i] = k;
            other++;
        }
    }
    return other;
}
