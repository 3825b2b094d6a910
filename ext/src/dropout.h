#ifndef HPCGNN_DROPOUT_H
#define HPCGNN_DROPOUT_H
#include <stdint.h>

/* Dropout masks for training on CPUs (no Python, no MPI).
 *
 * PyTorch's CPU dropout draws one Mersenne-Twister number per element (~17 ns
 * each): on a hidden layer of 17k x 256 that is 70 ms, more than the layer's
 * matrix products.  Here mask[i] = 1 with probability 1 - p from a counter-based
 * generator (splitmix64 of the seed and the element's position; four 16-bit draws
 * per 64-bit number), ~1 ns per element, the same for a given (seed, n) on every
 * machine.  keep_threshold: keep when the 16-bit draw is >= it, i.e.
 * round(p * 2^16), so p is honoured to within 2^-17. */
void hpcgnn_dropout_mask(uint8_t *mask, int64_t n, uint64_t keep_threshold, uint64_t seed);

/* relu then dropout in one pass: out[i] = x[i] * scale where x[i] > 0 and the draw
 * of hpcgnn_dropout_mask keeps i, else 0 (scale = 1 / (1 - p)). */
void hpcgnn_relu_dropout(const float *x, float *out, int64_t n, uint64_t keep_threshold, uint64_t seed,
                         float scale);

/* Its gradient: grad_in[i] = grad[i] * scale where out[i] > 0, else 0. */
void hpcgnn_relu_dropout_grad(const float *grad, const float *out, float scale, float *grad_in, int64_t n);

/* A hidden layer's bias, relu and dropout in place on x (rows x dim, row-major):
 * x[r, c] = relu_dropout(x[r, c] + bias[c]) with the draws hpcgnn_relu_dropout makes
 * for the flat position r * dim + c (so the same mask for the same seed). */
void hpcgnn_bias_relu_dropout(float *x, const float *bias, int64_t rows, int64_t dim, uint64_t keep_threshold,
                              uint64_t seed, float scale);

/* Its gradient: grad_in as hpcgnn_relu_dropout_grad, and the bias gradient (the
 * column sums of grad_in) accumulated in double into acc[dim]. */
void hpcgnn_relu_dropout_grad_bias(const float *grad, const float *out, float scale, float *grad_in, int64_t rows,
                                   int64_t dim, double *acc);

/* out[i] = mask[i] ? x[i] * scale : 0 (forward and backward of dropout). */
void hpcgnn_dropout_apply(const float *x, const uint8_t *mask, float scale, float *out, int64_t n);

/* PyTorch's bernoulli_(p) for CPU tensors: out[i] = 1 with probability
 * threshold / 2^32 (threshold = round(p * 2^32), 0 .. 2^32), else 0; 32-bit draws
 * of a splitmix64 stream of seed, the same for a given (seed, n) everywhere. */
void hpcgnn_bernoulli_f32(float *out, int64_t n, uint64_t threshold, uint64_t seed);
void hpcgnn_bernoulli_f64(double *out, int64_t n, uint64_t threshold, uint64_t seed);
void hpcgnn_bernoulli_u8(uint8_t *out, int64_t n, uint64_t threshold, uint64_t seed);

#endif
