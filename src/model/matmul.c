/*
 * matmul.c - fp32 GEMM for the CPU: 4 x 16 register tiles, B panels of 16
 * columns reused from L1 across all rows. On x86-64 the panel kernel is
 * also compiled for AVX2 + FMA and picked at run time.
 */
#include "model/matmul.h"
#include "model/parallel.h"

#include <string.h>

enum { TILE_M = 4, TILE_N = 16 };

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MATMUL_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MATMUL_CLONES
#endif

static inline float a_at(const float *a, int64_t lda, int a_transposed, int64_t m, int64_t k) {
    return a_transposed ? a[k * lda + m] : a[m * lda + k];
}

typedef float vec8 __attribute__((vector_size(32)));

/* Unaligned 8-float loads and stores (macros: a vec8 argument would trip
 * GCC's note about the AVX calling convention). */
#define LOAD8(dst, p) memcpy(&(dst), (p), sizeof(vec8))
#define STORE8(p, src) memcpy((p), &(src), sizeof(vec8))

/* Columns [n0, n0 + nn) of C, all rows. nn <= TILE_N. */
MATMUL_CLONES
static void matmul_panel(float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed,
                         const float *b, int64_t ldb, int64_t M, int64_t n0, int64_t nn, int64_t K,
                         int accumulate) {
    int64_t m0 = 0;
    if (nn == TILE_N) {
        for (; m0 + TILE_M <= M; m0 += TILE_M) {
            vec8 acc[TILE_M][2];
            for (int i = 0; i < TILE_M; ++i) {
                const vec8 zero = {0};
                float *crow = c + (m0 + i) * ldc + n0;
                acc[i][0] = zero;
                acc[i][1] = zero;
                if (accumulate) {
                    LOAD8(acc[i][0], crow);
                    LOAD8(acc[i][1], crow + 8);
                }
            }
            for (int64_t k = 0; k < K; ++k) {
                vec8 b0, b1;
                LOAD8(b0, b + k * ldb + n0);
                LOAD8(b1, b + k * ldb + n0 + 8);
                for (int i = 0; i < TILE_M; ++i) {
                    const float av = a_at(a, lda, a_transposed, m0 + i, k);
                    acc[i][0] += av * b0;
                    acc[i][1] += av * b1;
                }
            }
            for (int i = 0; i < TILE_M; ++i) {
                float *crow = c + (m0 + i) * ldc + n0;
                STORE8(crow, acc[i][0]);
                STORE8(crow + 8, acc[i][1]);
            }
        }
    }
    for (; m0 < M; ++m0) { /* ragged rows or a ragged panel */
        float acc[TILE_N];
        for (int64_t j = 0; j < nn; ++j) acc[j] = accumulate ? c[m0 * ldc + n0 + j] : 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            const float av = a_at(a, lda, a_transposed, m0, k);
            const float *brow = b + k * ldb + n0;
            for (int64_t j = 0; j < nn; ++j) acc[j] += av * brow[j];
        }
        for (int64_t j = 0; j < nn; ++j) c[m0 * ldc + n0 + j] = acc[j];
    }
}

void matmul_f32(model_ops_ctx *oc, float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed, const float *b,
                int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate) {
    (void)oc;
    const int64_t panels = (N + TILE_N - 1) / TILE_N;
#pragma omp parallel for schedule(static) if (M * N * K >= PARALLEL_MIN_WORK)
    for (int64_t p = 0; p < panels; ++p) {
        const int64_t n0 = p * TILE_N;
        const int64_t nn = N - n0 < TILE_N ? N - n0 : TILE_N;
        matmul_panel(c, ldc, a, lda, a_transposed, b, ldb, M, n0, nn, K, accumulate);
    }
}

void matmul_f32_serial(float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed,
                       const float *b, int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate) {
    for (int64_t n0 = 0; n0 < N; n0 += TILE_N)
        matmul_panel(c, ldc, a, lda, a_transposed, b, ldb, M, n0, N - n0 < TILE_N ? N - n0 : TILE_N,
                     K, accumulate);
}

void transpose_f32(model_ops_ctx *oc, float *dst, const float *src, int64_t rows, int64_t cols) {
    (void)oc;
    enum { BLOCK = 32 };
#pragma omp parallel for schedule(static) if (rows * cols >= PARALLEL_MIN_WORK)
    for (int64_t r0 = 0; r0 < rows; r0 += BLOCK)
        for (int64_t c0 = 0; c0 < cols; c0 += BLOCK)
            for (int64_t r = r0; r < r0 + BLOCK && r < rows; ++r)
                for (int64_t c = c0; c < c0 + BLOCK && c < cols; ++c)
                    dst[c * rows + r] = src[r * cols + c];
}
