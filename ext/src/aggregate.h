#ifndef HPCGNN_AGGREGATE_H
#define HPCGNN_AGGREGATE_H
#include <stdint.h>

/* Mean aggregation along a CSR matrix of ones (a GNN layer's neighbour means):
 *   out[r, :] = mean over e in [indptr[r], indptr[r+1]) of x[indices[e], :]
 * (a row without entries gives zeros).  x is (rows of x) x dim float32, row-major;
 * out is nrows x dim.  The reads of x are random rows, so the source rows of the
 * edges PF ahead are prefetched (PyTorch's sparse.mm "mean" waits on each one).
 * Rows are split among nthreads OpenMP threads.  No bounds checks: the caller
 * guarantees 0 <= indices < rows of x and a monotone indptr. */
void hpcgnn_csr_mean(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *x, int64_t dim,
                     float *out, int nthreads);

/* 0: the means above add into the output row in memory even where an AVX-512 CPU
 * could keep it in registers (rows of up to 256 floats); 1 (the default): they use
 * registers there.  The same numbers either way (tests compare them). */
void hpcgnn_csr_mean_use_registers(int on);

/* The same with the source rows anywhere in memory: source row s is the dim floats
 * at address rows[s] (e.g. a feature table's rows in node-shared memory, read in
 * place instead of gathered into an x first).  Same sums in the same order. */
void hpcgnn_csr_mean_rows(const int64_t *indptr, const int64_t *indices, int64_t nrows, const uintptr_t *rows,
                          int64_t dim, float *out, int nthreads);

/* Its gradient with respect to x:
 *   grad_x[s, :] = sum over the entries (r, s) of grad_out[r, :] / (entries of row r)
 * grad_x (n_src x dim) is overwritten.  The pattern is transposed first, so every
 * row of grad_x is written once, its terms added in increasing r; threads split the
 * rows.  Returns 0, or -1 when out of memory (grad_x untouched). */
int hpcgnn_csr_mean_backward(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *grad_out,
                             int64_t dim, float *grad_x, int64_t n_src, int nthreads);

/* The same, when x = dropout(relu(h + bias)) was written over h (act, n_src x dim):
 * grad_x becomes the gradient with respect to h (kept where act > 0, times scale)
 * and bias_grad (dim doubles, unless NULL) the gradient with respect to bias, each
 * row passing once.  act == NULL: hpcgnn_csr_mean_backward. */
int hpcgnn_csr_mean_backward_act(const int64_t *indptr, const int64_t *indices, int64_t nrows,
                                 const float *grad_out, int64_t dim, const float *act, float scale, float *grad_x,
                                 double *bias_grad, int64_t n_src, int nthreads);

/* The CSR of a bipartite edge list sorted by destination (src[e] -> dst[e]): rows
 * d < num_dst, the sources of row d in edge order.  with_root: 2 * num_dst rows,
 * row 2d the sources of d and row 2d + 1 the single entry d (see
 * hpcgnn.train.kernels.mean_adjacency).  indptr: rows + 1 entries, cols: num_edges
 * (+ num_dst with_root).  Returns 0; -2 when a source is outside [0, num_src); -1
 * when a destination is outside [0, num_dst) or dst is not sorted (indptr, cols
 * then unusable). */
int hpcgnn_build_csr(const int64_t *src, const int64_t *dst, int64_t num_edges, int64_t num_dst, int64_t num_src,
                     int with_root, int64_t *indptr, int64_t *cols);

#endif
