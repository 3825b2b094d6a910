/* Attention-weighted aggregation along a CSR adjacency, several heads: the product
 * a GAT layer computes after its softmax, without an edges x heads x dim message
 * tensor.
 *
 *   out[d, h, :] = sum over e in [indptr[d], indptr[d+1]) of alpha[e, h] * x[indices[e], h, :]
 *
 * x is (n_src, heads, dim), alpha (num_edges, heads), out (nrows, heads, dim), all
 * float32, row-major.  Returns 0, or -1 when indptr does not start at 0 or decreases,
 * or an index lies outside [0, n_src). */
#ifndef HPCGNN_ATTENTION_H
#define HPCGNN_ATTENTION_H
#include <stdint.h>

int hpcgnn_csr_attend(const int64_t *indptr, const int64_t *indices, int64_t nrows, const float *alpha,
                      int64_t heads, const float *x, int64_t dim, int64_t n_src, float *out, int nthreads);

/* The backward pass: grad_x (n_src, heads, dim; zeroed here) gets alpha[e, h] *
 * grad_out[d, h, :] at row indices[e]; grad_alpha[e, h] = <grad_out[d, h, :],
 * x[indices[e], h, :]>.  Either output may be NULL (not needed). */
int hpcgnn_csr_attend_backward(const int64_t *indptr, const int64_t *indices, int64_t nrows,
                               const float *alpha, int64_t heads, const float *x, int64_t dim, int64_t n_src,
                               const float *grad_out, float *grad_x, float *grad_alpha, int nthreads);
#endif
