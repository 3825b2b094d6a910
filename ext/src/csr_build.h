/* Building a CSR in place from (row, column) pairs that arrive in chunks: the
 * partitioner's symmetric view without a sort of every pair.  Plain C. */
#ifndef HPCGNN_CSR_BUILD_H
#define HPCGNN_CSR_BUILD_H
#include <stdint.h>

/* For each i: cols_out[pos[rows[i] - row0]++] = cols[i].  Returns 0, or -2 when a
 * row lies outside [row0, row0 + nrows) or a row's slots are full (pos reaching
 * end[row]). */
int hg_csr_fill(int64_t n, const int64_t *rows, const int64_t *cols, int64_t row0, int64_t nrows,
                int64_t *pos, const int64_t *end, int64_t *cols_out);

/* Sorts each row's columns and drops repeats, compacting adjncy in place and
 * rewriting xadj[0..nrows]; returns the new number of entries. */
int64_t hg_csr_sort_dedup(int64_t nrows, int64_t *xadj, int64_t *adjncy);

#endif
