/*
 * matmul.h - fp32 matrix products on the CPU for the parts of the model that
 * stay in high precision (the output head) and for the exact-fp32 linear
 * layers that the gradient checks use. OpenMP over output tiles; every
 * output element is summed by one thread in a fixed order, so results do not
 * depend on the number of threads.
 */
#ifndef BFP8_MODEL_MATMUL_H
#define BFP8_MODEL_MATMUL_H

#include <stdint.h>

#include "model/model_ops_ctx.h"

/* C[M, N] = (accumulate ? C : 0) + A . B, with B row-major K x N (ldb) and
 * A(m, k) = a[m * lda + k], or a[k * lda + m] when a_transposed. */
void matmul_f32(model_ops_ctx *oc, float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed, const float *b,
                int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate);

/* The same on the calling thread only: for callers that are already
 * parallel over independent problems (attention heads). */
void matmul_f32_serial(float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed,
                       const float *b, int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate);

/* dst[C, R] = src[R, C]^T (both dense). */
void transpose_f32(model_ops_ctx *oc, float *dst, const float *src, int64_t rows, int64_t cols);

#endif /* BFP8_MODEL_MATMUL_H */
