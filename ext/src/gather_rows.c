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
