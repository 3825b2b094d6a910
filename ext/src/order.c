#include "order.h"
#include <stdlib.h>

int hg_counting_order(int64_t n, const int64_t *keys, int64_t kmin, int64_t nk, int64_t *order) {
    int64_t *pos = calloc((size_t)(nk > 0 ? nk : 1) + 1, sizeof(int64_t));
    if (!pos) return -1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)(keys[i] - kmin);
        if (k >= (uint64_t)nk) { free(pos); return -2; }
        pos[k + 1]++;
    }
    for (int64_t k = 0; k < nk; k++) pos[k + 1] += pos[k];
    for (int64_t i = 0; i < n; i++) order[pos[keys[i] - kmin]++] = i;
    free(pos);
    return 0;
}
