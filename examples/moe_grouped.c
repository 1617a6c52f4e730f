/* moe_grouped.c - the three GEMMs of a mixture-of-experts layer's experts
 * with the grouped FP8 GEMMs, on the CPU backend (for CUDA:
 * BFP8_BACKEND_CUDA and device pointers; the calls are the same):
 *
 *   y[tokens of e]  = x[tokens of e] W_e^T       bfp8_gemm_1d2d_grouped
 *   dW_e            = dy[tokens of e]^T x[...]   bfp8_gemm_1d1d_grouped
 *
 * E experts get uneven numbers of tokens, each run padded to 128 rows (zero
 * rows of x and dy, as a router's permutation would leave them); one
 * expert gets none. Built by CMake (examples/), run by ctest. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockfp8.h"

#define TRY(call)                                                                    \
    do {                                                                             \
        bfp8_status s_ = (call);                                                     \
        if (s_ != BFP8_OK) {                                                         \
            fprintf(stderr, "%s: %s\n", bfp8_status_name(s_), bfp8_last_error());   \
            return 1;                                                                \
        }                                                                            \
    } while (0)

/* In a function that returns a status: return it when it is not BFP8_OK. */
#define PASS_ON(call)                                                                \
    do {                                                                             \
        bfp8_status s_ = (call);                                                     \
        if (s_ != BFP8_OK) return s_;                                                \
    } while (0)

enum { E = 4, N = 256, K = 384 }; /* experts, out-features, in-features */

static float next_uniform(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 8388608.0f - 1.0f;
}

/* A quantized view with its memory (1x128 or 128x128, canonical layout). */
static bfp8_status quantized(bfp8_context *ctx, const float *x, int64_t rows, int64_t cols, int blocks,
                             bfp8_qmatrix *q, bfp8_qmatrix *q_t) {
    size_t data_bytes, scale_bytes;
    bfp8_matrix m = {(void *)x, BFP8_F32, rows, cols, cols};
    if (!blocks) { /* 1x128: x as stored (q) and transposed (q_t), either may be NULL */
        if (q) {
            PASS_ON(bfp8_qmatrix_layout(q, rows, cols, BFP8_GRAN_1X128, &data_bytes, &scale_bytes));
            PASS_ON(bfp8_malloc(ctx, (void **)&q->data, data_bytes));
            PASS_ON(bfp8_malloc(ctx, (void **)&q->scales, scale_bytes));
        }
        if (q_t) {
            PASS_ON(bfp8_qmatrix_layout(q_t, cols, rows, BFP8_GRAN_1X128, &data_bytes, &scale_bytes));
            PASS_ON(bfp8_malloc(ctx, (void **)&q_t->data, data_bytes));
            PASS_ON(bfp8_malloc(ctx, (void **)&q_t->scales, scale_bytes));
        }
        return bfp8_quantize_1x128(ctx, &m, q, q_t, NULL);
    }
    PASS_ON(bfp8_qmatrix_layout(q, rows, cols, BFP8_GRAN_128X128, &data_bytes, &scale_bytes));
    PASS_ON(bfp8_malloc(ctx, (void **)&q->data, data_bytes));
    PASS_ON(bfp8_malloc(ctx, (void **)&q->scales, scale_bytes));
    return bfp8_quantize_128x128(ctx, &m, q, NULL, NULL);
}

int main(void) {
    const int64_t tokens_of[E] = {300, 0, 100, 520};            /* what the router sent each expert */
    int64_t offsets[E + 1] = {0};
    for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + (tokens_of[e] + 127) / 128 * 128;
    const int64_t T = offsets[E];                                /* 1280 rows, padding included */

    float *x = calloc((size_t)(T * K), sizeof(float)), *dy = calloc((size_t)(T * N), sizeof(float));
    float *w = malloc(sizeof(float) * E * N * K), *y = malloc(sizeof(float) * T * N);
    float *dw = malloc(sizeof(float) * E * N * K);
    uint32_t rng = 7;
    for (int e = 0; e < E; ++e)
        for (int64_t t = offsets[e]; t < offsets[e] + tokens_of[e]; ++t) { /* padding rows stay zero */
            for (int k = 0; k < K; ++k) x[t * K + k] = next_uniform(&rng);
            for (int n = 0; n < N; ++n) dy[t * N + n] = next_uniform(&rng);
        }
    for (int i = 0; i < E * N * K; ++i) w[i] = 0.05f * next_uniform(&rng);

    bfp8_context *ctx = NULL;
    TRY(bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0));
    bfp8_qmatrix xq, xq_t, dyq_t, wq; /* W: the E weights stacked, E*N x K, 128x128 */
    TRY(quantized(ctx, x, T, K, 0, &xq, &xq_t));
    TRY(quantized(ctx, dy, T, N, 0, NULL, &dyq_t));
    TRY(quantized(ctx, w, (int64_t)E * N, K, 1, &wq, NULL));
    bfp8_matrix ym = {y, BFP8_F32, T, N, N}, dwm = {dw, BFP8_F32, (int64_t)E * N, K, K};
    TRY(bfp8_gemm_1d2d_grouped(ctx, &xq, &wq, offsets, E, &ym));                /* fprop, every expert */
    TRY(bfp8_gemm_1d1d_grouped(ctx, &dyq_t, &xq_t, offsets, E, NULL, &dwm));   /* wgrad, every expert */

    /* against fp64 products of the unquantized inputs, expert by expert */
    double err_y = 0, ref_y = 0, err_w = 0, ref_w = 0;
    for (int e = 0; e < E; ++e) {
        for (int64_t t = offsets[e]; t < offsets[e + 1]; ++t)
            for (int n = 0; n < N; ++n) {
                double r = 0;
                for (int k = 0; k < K; ++k) r += (double)x[t * K + k] * w[((int64_t)e * N + n) * K + k];
                err_y += (y[t * N + n] - r) * (y[t * N + n] - r), ref_y += r * r;
            }
        for (int n = 0; n < N; ++n)
            for (int k = 0; k < K; ++k) {
                double r = 0;
                for (int64_t t = offsets[e]; t < offsets[e + 1]; ++t) r += (double)dy[t * N + n] * x[t * K + k];
                const double got = dw[((int64_t)e * N + n) * K + k];
                err_w += (got - r) * (got - r), ref_w += r * r;
            }
    }
    const double sqnr_y = 10 * log10(ref_y / err_y), sqnr_w = 10 * log10(ref_w / err_w);
    printf("%d experts (%lld, %lld, %lld, %lld tokens): y %.1f dB, dW %.1f dB vs fp64\n", E, (long long)tokens_of[0],
           (long long)tokens_of[1], (long long)tokens_of[2], (long long)tokens_of[3], sqnr_y, sqnr_w);

    bfp8_free(ctx, xq.data), bfp8_free(ctx, xq.scales), bfp8_free(ctx, xq_t.data), bfp8_free(ctx, xq_t.scales);
    bfp8_free(ctx, dyq_t.data), bfp8_free(ctx, dyq_t.scales), bfp8_free(ctx, wq.data), bfp8_free(ctx, wq.scales);
    bfp8_context_destroy(ctx);
    free(x), free(dy), free(w), free(y), free(dw);
    return sqnr_y >= 25.0 && sqnr_w >= 25.0 ? 0 : 1;
}
