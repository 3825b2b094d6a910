#include "csr_build.h"
#include <stdlib.h>

int hg_csr_fill(int64_t n, const int64_t *rows, const int64_t *cols, int64_t row0, int64_t nrows,
                int64_t *pos, const int64_t *end, int64_t *cols_out) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = (uint64_t)(rows[i] - row0);
        if (r >= (uint64_t)nrows || pos[r] >= end[r]) return -2;
        cols_out[pos[r]++] = cols[i];
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void sort_row(int64_t *a, int64_t n) {
    if (n > 24) {
        qsort(a, (size_t)n, sizeof(int64_t), cmp_i64);
        return;
    }
    for (int64_t i = 1; i < n; i++) {           /* short rows: insertion sort */
        int64_t v = a[i], j = i - 1;
        while (j >= 0 && a[j] > v) { a[j + 1] = a[j]; j--; }
        a[j + 1] = v;
    }
}

int64_t hg_csr_sort_dedup(int64_t nrows, int64_t *xadj, int64_t *adjncy) {
    int64_t out = 0, start = xadj[0];
    for (int64_t r = 0; r < nrows; r++) {
        int64_t lo = start, hi = xadj[r + 1];
        start = hi;                              /* xadj[r + 1] is rewritten below */
        sort_row(adjncy + lo, hi - lo);
        xadj[r] = out;
        for (int64_t i = lo; i < hi; i++)
            if (i == lo || adjncy[i] != adjncy[i - 1]) adjncy[out++] = adjncy[i];
    }
    xadj[nrows] = out;
    return out;
}
