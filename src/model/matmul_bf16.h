/*
 * matmul_bf16.h - matrix products of bf16 operands with fp32 sums and an
 * fp32 result: the output head's products on CUDA (head_loss.h), where
 * cuBLAS runs them on the tensor cores, and their CPU reference here.
 */
#ifndef BFP8_MODEL_MATMUL_BF16_H
#define BFP8_MODEL_MATMUL_BF16_H

#include <stdint.h>

#include "model/model_ops_ctx.h"

/* C[M, N] = alpha * A . B + (accumulate ? C : 0), row-major, where
 *   A(m, k) = a[m * lda + k], or a[k * lda + m] when a_transposed,
 *   B(k, n) = b[k * ldb + n], or b[n * ldb + k] when b_transposed,
 * a and b bf16 bit patterns. The CPU sums each element in k order in fp32
 * (one thread per row of C, so the result does not depend on the thread
 * count) and then scales it by alpha; the GPU sums in its own order. */
void matmul_bf16(model_ops_ctx *oc, float *c, int64_t ldc, const uint16_t *a, int64_t lda, int a_transposed,
                 const uint16_t *b, int64_t ldb, int b_transposed, int64_t M, int64_t N, int64_t K, float alpha,
                 int accumulate);

#endif /* BFP8_MODEL_MATMUL_BF16_H */
