#ifndef HPCGNN_WEIGHT_GRAD_H
#define HPCGNN_WEIGHT_GRAD_H
#include <stdint.h>

/* A linear layer's weight gradient when its output gradient is mostly zeros (the
 * gradient that comes back through relu and dropout):
 *   D[j, :] = sum over rows i of G[i, j] * A[i, :]        (D = G^T A)
 * G is n x m, A is n x k, D is m x k (a weight's [out, in] layout), all float32,
 * row-major, D overwritten.  Zero entries of G are skipped, so the work is one
 * k-wide multiply-add per nonzero of G (a dense product does one per entry).  Each
 * D[j, :] adds its terms in increasing i (the same sums on every thread count);
 * threads split the columns of G.  NaN entries of G count as nonzero; an infinite
 * A[i, :] meets a zero G[i, j] as nothing (a dense product would give NaN).
 * vectorised: 0 forces the plain C loops (tests compare the two). */
void hpcgnn_weight_grad(const float *G, int64_t n, int64_t m, const float *A, int64_t k, float *D, int nthreads,
                        int vectorised);

/* 1 when the vectorised kernel runs on this CPU (AVX-512F), 0 for the plain one. */
int hpcgnn_weight_grad_vectorised(void);

#endif
