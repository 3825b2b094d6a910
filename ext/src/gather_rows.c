#include <string.h>
#include "gather_rows.h"

/* Rows are copied in blocks while the rows some way ahead are requested (every
 * cache line of each, into all cache levels).  Random 400-byte rows of an 800 MB
 * table, 10k at a time, medians of interleaved repeats in a C harness: on a
 * Cascade Lake core, blocks of 4-8 requested one block ahead were 25-35% faster
 * than a plain memcpy loop; on an AMD EPYC (Zen 4) core, from 4 KB pages
 * (node-shared memory without huge pages), blocks of 2 requested 12 rows ahead were
 * another ~10% faster (1.06-1.14 -> 0.94-1.00 ms) and no slower on huge pages.
 * Rows of one cache line keep blocks of 8 one block ahead: the deeper scheme's
 * extra lookups cost more there (127k random 8-byte rows 1.4 -> 1.8 ms). */
static inline int64_t block_of(int64_t row_bytes) { return row_bytes <= 64 ? 8 : 2; }
static inline int64_t ahead_of(int64_t row_bytes) { return row_bytes <= 64 ? 8 : 12; }

static inline void prefetch_row(const char *p, int64_t row_bytes)
{
    for (int64_t b = 0; b < row_bytes; b += 64)
        __builtin_prefetch(p + b, 0, 3);
    if (row_bytes > 64)
        __builtin_prefetch(p + row_bytes - 1, 0, 3);      /* a row that ends in one more line */
}

/* One row: rows of 8 and 16 bytes (graph structure: edge endpoints, CSR ranges)
 * and whole cache lines copied inline, the rest by memcpy.  In a C harness timing
 * both interleaved (minimum of 200): 127k random 8-byte rows 1.27 -> 1.05 ms, 33k
 * 256-byte rows 1.26 -> 1.21 ms against a memcpy call per row; larger blocks for
 * small rows (16-64) were slower. */
static inline void copy_row(char *restrict d, const char *restrict s, int64_t row_bytes)
{
    if (row_bytes == 8) {
        __builtin_memcpy(d, s, 8);
    } else if (row_bytes == 16) {
        __builtin_memcpy(d, s, 16);
    } else if ((row_bytes & 63) == 0 && row_bytes <= 1024) {
        for (int64_t b = 0; b < row_bytes; b += 64) __builtin_memcpy(d + b, s + b, 64);
    } else {
        memcpy(d, s, (size_t)row_bytes);
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

/* Request the table rows of ids[a:b) (those in readable ranges). */
static inline void prefetch_ids(const char *const *bases, const int64_t *bounds, int K, int64_t row_bytes,
                                const int64_t *ids, int64_t a, int64_t b, int *k_hint)
{
    for (int64_t j = a; j < b; j++) {
        int kj = find_range(bounds, K, ids[j], *k_hint);
        *k_hint = kj;
        if (bases[kj])
            prefetch_row(bases[kj] + (ids[j] - bounds[kj]) * row_bytes, row_bytes);
    }
}

int64_t hpcgnn_gather_ranges(const char *const *bases, const int64_t *bounds, int K, int64_t row_bytes,
                             const int64_t *ids, int64_t n, char *dst, int32_t *range_of,
                             const int64_t *cache_ids, int64_t cache_n, const char *cache_rows)
{
    int64_t other = 0;
    int k = 0, kp = 0;
    const int64_t B = block_of(row_bytes), AHEAD = ahead_of(row_bytes);
    prefetch_ids(bases, bounds, K, row_bytes, ids, 0, n < AHEAD ? n : AHEAD, &kp);
    for (int64_t i0 = 0; i0 < n; i0 += B) {
        int64_t e = i0 + B < n ? i0 + B : n;
        if (i0 + AHEAD < n)
            prefetch_ids(bases, bounds, K, row_bytes, ids, i0 + AHEAD, e + AHEAD < n ? e + AHEAD : n, &kp);
        for (int64_t i = i0; i < e; i++) {
            if (cache_n) {
                int64_t c = find_cached(cache_ids, cache_n, ids[i]);
                if (c >= 0) {
                    copy_row(dst + i * row_bytes, cache_rows + c * row_bytes, row_bytes);
                    range_of[i] = -2;
                    continue;
                }
            }
            k = find_range(bounds, K, ids[i], k);
            if (bases[k]) {
                copy_row(dst + i * row_bytes, bases[k] + (ids[i] - bounds[k]) * row_bytes, row_bytes);
                range_of[i] = -1;
            } else {
                range_of[i] = k;
                other++;
            }
        }
    }
    return other;
}

int64_t hpcgnn_row_addresses(const char *const *bases, const int64_t *bounds, int K, int64_t row_bytes,
                             const int64_t *ids, int64_t n, uintptr_t *addr, int32_t *range_of,
                             const int64_t *cache_ids, int64_t cache_n, const char *cache_rows)
{
    int64_t other = 0;
    int k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (cache_n) {
            int64_t c = find_cached(cache_ids, cache_n, ids[i]);
            if (c >= 0) {
                addr[i] = (uintptr_t)(cache_rows + c * row_bytes);
                range_of[i] = -2;
                continue;
            }
        }
        k = find_range(bounds, K, ids[i], k);
        if (bases[k]) {
            addr[i] = (uintptr_t)(bases[k] + (ids[i] - bounds[k]) * row_bytes);
            range_of[i] = -1;
        } else {
            addr[i] = 0;
            range_of[i] = k;
            other++;
        }
    }
    return other;
}

void hpcgnn_gather_addresses(const uintptr_t *addr, int64_t n, int64_t row_bytes, char *dst)
{
    const int64_t B = block_of(row_bytes), AHEAD = ahead_of(row_bytes);
    for (int64_t j = 0; j < n && j < AHEAD; j++) prefetch_row((const char *)addr[j], row_bytes);
    for (int64_t i0 = 0; i0 < n; i0 += B) {
        int64_t e = i0 + B < n ? i0 + B : n;
        for (int64_t j = i0 + AHEAD; j < n && j < e + AHEAD; j++) prefetch_row((const char *)addr[j], row_bytes);
        for (int64_t i = i0; i < e; i++) copy_row(dst + i * row_bytes, (const char *)addr[i], row_bytes);
    }
}
