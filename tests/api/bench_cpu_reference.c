/*
 * bench_cpu_reference.c - speed of the CPU reference ops, the ones the CPU
 * trainer leans on: the three GEMMs (GFLOP/s) and the quantizers (GB/s,
 * bytes read + written). Not a test; prints a table.
 *
 *   build/tests/api/bench_cpu_reference            default shapes
 *   build/tests/api/bench_cpu_reference M N K      one GEMM shape
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "test_util.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *alloc_or_die(bfp8_context *ctx, size_t bytes) {
    void *p = NULL;
    if (bfp8_malloc(ctx, &p, bytes) != BFP8_OK) test_fatal("bfp8_malloc(%zu): %s", bytes, bfp8_last_error());
    return p;
}

static bfp8_qmatrix make_q(bfp8_context *ctx, int64_t rows, int64_t cols, bfp8_granularity g) {
    bfp8_qmatrix q;
    size_t db, sb;
    if (bfp8_qmatrix_layout(&q, rows, cols, g, &db, &sb) != BFP8_OK) test_fatal("%s", bfp8_last_error());
    q.data = alloc_or_die(ctx, db);
    q.scales = alloc_or_die(ctx, sb);
    return q;
}

/* Median-free but warm: one warm-up call, then repeat until 0.5 s has passed. */
#define TIME_IT(seconds_out, call)                                                          \
    do {                                                                                    \
        if ((call) != BFP8_OK) test_fatal("%s: %s", #call, bfp8_last_error());            \
        int reps_ = 0;                                                                      \
        const double t0_ = now_s();                                                         \
        double t_;                                                                          \
        do {                                                                                \
            (void)(call);                                                                   \
            ++reps_;                                                                        \
            t_ = now_s() - t0_;                                                             \
        } while (t_ < 0.5);                                                                 \
        seconds_out = t_ / reps_;                                                           \
    } while (0)

static void bench_shape(bfp8_context *ctx, int64_t m, int64_t n, int64_t k) {
    uint16_t *x = alloc_or_die(ctx, (size_t)(m * k) * 2), *w = alloc_or_die(ctx, (size_t)(n * k) * 2);
    float *y32 = alloc_or_die(ctx, (size_t)(m * n) * 4);
    test_fill_bf16(x, m, k, k, 1.0f, 0, 1);
    test_fill_bf16(w, n, k, k, 1.0f, 0, 2);
    bfp8_matrix xm = {x, BFP8_BF16, m, k, k}, wm = {w, BFP8_BF16, n, k, k};
    bfp8_matrix ym = {y32, BFP8_F32, m, n, n};
    bfp8_qmatrix xq = make_q(ctx, m, k, BFP8_GRAN_1X128), xtq = make_q(ctx, k, m, BFP8_GRAN_1X128);
    bfp8_qmatrix wq = make_q(ctx, n, k, BFP8_GRAN_128X128);
    bfp8_qmatrix yq = make_q(ctx, m, n, BFP8_GRAN_1X128), ytq = make_q(ctx, n, m, BFP8_GRAN_1X128);
    double t_dual, t_w, t_1d2d, t_1d1d, t_bf16;
    TIME_IT(t_dual, bfp8_quantize_1x128(ctx, &xm, &xq, &xtq, NULL));
    TIME_IT(t_w, bfp8_quantize_128x128(ctx, &wm, &wq, NULL, NULL));
    (void)bfp8_quantize_1x128(ctx, &(bfp8_matrix){y32, BFP8_F32, m, n, n}, &yq, &ytq, NULL);
    TIME_IT(t_1d2d, bfp8_gemm_1d2d(ctx, &xq, &wq, &ym));
    bfp8_matrix dwm = {alloc_or_die(ctx, (size_t)(n * k) * 4), BFP8_F32, n, k, k};
    TIME_IT(t_1d1d, bfp8_gemm_1d1d(ctx, &ytq, &xtq, &dwm, &dwm));
    TIME_IT(t_bf16, bfp8_gemm_bf16(ctx, &xm, 0, &wm, 0, NULL, &ym));
    const double flops = 2.0 * (double)m * (double)n * (double)k;
    const double dual_bytes = (double)(m * k) * (2 + 2) + 2.0 * 4 * (double)(m * k) / 128;
    printf("%6lld x %6lld x %6lld | 1d2d %6.1f | 1d1d(acc) %6.1f | bf16 %6.1f GFLOP/s | "
           "quantize dual %5.2f GB/s, 128x128 %5.2f GB/s\n",
           (long long)m, (long long)n, (long long)k, flops / t_1d2d * 1e-9, flops / t_1d1d * 1e-9,
           flops / t_bf16 * 1e-9, dual_bytes / t_dual * 1e-9,
           (double)(n * k) * 3 / t_w * 1e-9);
    bfp8_free(ctx, x); bfp8_free(ctx, w); bfp8_free(ctx, y32); bfp8_free(ctx, dwm.data);
    bfp8_qmatrix *qs[] = {&xq, &xtq, &wq, &yq, &ytq};
    for (int i = 0; i < 5; ++i) { bfp8_free(ctx, qs[i]->data); bfp8_free(ctx, qs[i]->scales); }
}

int main(int argc, char **argv) {
    bfp8_context *ctx;
    if (bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0) != BFP8_OK) test_fatal("%s", bfp8_last_error());
    if (argc == 4) {
        bench_shape(ctx, atoll(argv[1]), atoll(argv[2]), atoll(argv[3]));
    } else {
        const int64_t shapes[][3] = {{512, 512, 512}, {2048, 1024, 1024}, {4096, 512, 512},
                                     {4096, 1536, 512}, {4096, 512, 1536}, {1000, 129, 257}};
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
            bench_shape(ctx, shapes[i][0], shapes[i][1], shapes[i][2]);
    }
    bfp8_context_destroy(ctx);
    return 0;
}
