/*
 * matmul_bf16.c - the CPU reference of the bf16-operand products
 * (matmul_bf16.h): plain loops, each element of C summed in k order in fp32
 * by the thread that owns its row.
 */
#include "model/matmul_bf16.h"
#include "model/parallel.h"

#include "formats/formats.h"

enum { COLUMN_BLOCK = 256 }; /* the columns of C one row pass accumulates at once */

static inline float a_at(const uint16_t *a, int64_t lda, int a_transposed, int64_t m, int64_t k) {
    return bfp8_decode_bf16(a_transposed ? a[k * lda + m] : a[m * lda + k]);
}

static inline void store(float *c, float sum, float alpha, int accumulate) {
    *c = accumulate ? *c + alpha * sum : alpha * sum;
}

void matmul_bf16(model_ops_ctx *oc, float *c, int64_t ldc, const uint16_t *a, int64_t lda, int a_transposed,
                 const uint16_t *b, int64_t ldb, int b_transposed, int64_t M, int64_t N, int64_t K, float alpha,
                 int accumulate) {
    (void)oc;
#pragma omp parallel for schedule(static) if (M * N * K >= PARALLEL_MIN_WORK)
    for (int64_t m = 0; m < M; ++m) {
        float *crow = c + m * ldc;
        if (b_transposed) { /* B's column n is a row of b: dot products */
            for (int64_t n = 0; n < N; ++n) {
                const uint16_t *bcol = b + n * ldb;
                float sum = 0.0f;
                for (int64_t k = 0; k < K; ++k) sum += a_at(a, lda, a_transposed, m, k) * bfp8_decode_bf16(bcol[k]);
                store(crow + n, sum, alpha, accumulate);
            }
            continue;
        }
        for (int64_t n0 = 0; n0 < N; n0 += COLUMN_BLOCK) { /* B's rows are contiguous: row updates */
            const int64_t nn = N - n0 < COLUMN_BLOCK ? N - n0 : COLUMN_BLOCK;
            float sum[COLUMN_BLOCK] = {0};
            for (int64_t k = 0; k < K; ++k) {
                const float amk = a_at(a, lda, a_transposed, m, k);
                const uint16_t *brow = b + k * ldb + n0;
                for (int64_t j = 0; j < nn; ++j) sum[j] += amk * bfp8_decode_bf16(brow[j]);
            }
            for (int64_t j = 0; j < nn; ++j) store(crow + n0 + j, sum[j], alpha, accumulate);
        }
    }
}
