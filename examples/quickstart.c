/* quickstart.c - quantize x (1x128) and W (128x128), then y = x W^T with the
 * 1D2D FP8 GEMM, on the CPU backend. Built by CMake (examples/), run by ctest. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "blockfp8.h"

#define TRY(call)                                                                    \
    do {                                                                             \
        bfp8_status s_ = (call);                                                     \
        if (s_ != BFP8_OK) {                                                         \
            fprintf(stderr, "%s: %s\n", bfp8_status_name(s_), bfp8_last_error());   \
            return 1;                                                                \
        }                                                                            \
    } while (0)

/* Uniform in [-1, 1) from a small linear congruential generator. */
static float next_uniform(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 8388608.0f - 1.0f;
}

int main(void) {
    enum { M = 64, N = 256, K = 384 }; /* tokens, out-features, in-features */
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K);
    float *y = malloc(sizeof(float) * M * N);
    uint32_t rng = 1;
    for (int i = 0; i < M * K; ++i) x[i] = next_uniform(&rng);
    for (int i = 0; i < N * K; ++i) w[i] = 0.05f * next_uniform(&rng);

    bfp8_context *ctx;
    TRY(bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0));

    /* Canonical layouts for x (M x K, 1x128 groups) and W (N x K, 128x128 blocks). */
    bfp8_qmatrix xq, wq;
    size_t x_bytes, x_scale_bytes, w_bytes, w_scale_bytes;
    TRY(bfp8_qmatrix_layout(&xq, M, K, BFP8_GRAN_1X128, &x_bytes, &x_scale_bytes));
    TRY(bfp8_qmatrix_layout(&wq, N, K, BFP8_GRAN_128X128, &w_bytes, &w_scale_bytes));
    TRY(bfp8_malloc(ctx, (void **)&xq.data, x_bytes));
    TRY(bfp8_malloc(ctx, (void **)&xq.scales, x_scale_bytes));
    TRY(bfp8_malloc(ctx, (void **)&wq.data, w_bytes));
    TRY(bfp8_malloc(ctx, (void **)&wq.scales, w_scale_bytes));

    const bfp8_matrix xm = {x, BFP8_F32, M, K, K}, wm = {w, BFP8_F32, N, K, K};
    bfp8_matrix ym = {y, BFP8_F32, M, N, N};
    TRY(bfp8_quantize_1x128(ctx, &xm, &xq, NULL, NULL));    /* activations: 1 x 128 */
    TRY(bfp8_quantize_128x128(ctx, &wm, &wq, NULL, NULL));  /* weights: 128 x 128 */
    TRY(bfp8_gemm_1d2d(ctx, &xq, &wq, &ym));                /* y = x W^T */
    TRY(bfp8_context_synchronize(ctx));

    double err = 0, ref = 0; /* against the fp32 product of the unquantized inputs */
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            double r = 0;
            for (int k = 0; k < K; ++k) r += (double)x[m * K + k] * w[n * K + k];
            err += (y[m * N + n] - r) * (y[m * N + n] - r);
            ref += r * r;
        }
    const double sqnr = 10 * log10(ref / err);
    printf("y = x W^T, %d x %d x %d, e4m3 blockwise: SQNR %.1f dB vs fp32\n", M, N, K, sqnr);

    bfp8_free(ctx, xq.data), bfp8_free(ctx, xq.scales);
    bfp8_free(ctx, wq.data), bfp8_free(ctx, wq.scales);
    bfp8_context_destroy(ctx);
    free(x), free(w), free(y);
    return sqnr >= 25.0 ? 0 : 1;
}
