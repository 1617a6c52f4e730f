/*
 * gemm_gpu_timing.c - test_gemm_gpu --time [FILTER]: every kernel
 * configuration of the CUDA FP8 GEMMs (BFP8_GEMM_CONFIG forced; those whose
 * name contains FILTER) timed on the TARGETS.md shapes, on random fp8 codes.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_gemm_gpu.h"
#include "test_util.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bfp8_qmatrix random_device_operand(int64_t rows, int64_t cols, bfp8_granularity gran, uint64_t seed) {
    bfp8_qmatrix q;
    size_t data_bytes, scale_bytes;
    bfp8_qmatrix_layout(&q, rows, cols, gran, &data_bytes, &scale_bytes);
    uint8_t *data = test_malloc(data_bytes);
    float *scales = test_malloc(scale_bytes);
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (size_t i = 0; i < data_bytes; i += 8) {
        uint64_t r = test_rng_next(&rng);
        for (size_t j = 0; j < 8 && i + j < data_bytes; ++j, r >>= 8) data[i + j] = (uint8_t)(r & 0xbf);
    }
    for (size_t i = 0; i < scale_bytes / 4; ++i) scales[i] = 0.5f + 0.5f * (float)test_rng_uniform(&rng);
    q.data = gpu_alloc(data_bytes);
    q.scales = gpu_alloc(scale_bytes);
    bfp8_copy_to_backend(gpu, q.data, data, data_bytes);
    bfp8_copy_to_backend(gpu, q.scales, scales, scale_bytes);
    free(data);
    free(scales);
    return q;
}

void time_configs(const char *filter) {
    static const int64_t fprop[][3] = {{16384, 4096, 4096}, {16384, 14336, 4096}, {16384, 4096, 14336},
                                       {4096, 7168, 16384}, {8192, 8192, 8192}};
    static const int64_t wgrad[][3] = {/* N, K, M(tokens) */ {4096, 4096, 16384}, {14336, 4096, 16384},
                                       {4096, 14336, 16384}, {8192, 8192, 8192}};

    printf("\n%-10s %-22s %-18s %10s %8s\n", "gemm", "shape", "config", "time_us", "TFLOP/s");
    for (int kind = 0; kind < 2; ++kind) {
        const int count = kind == 0 ? 5 : 4;
        for (int s = 0; s < count; ++s) {
            const int64_t *sh = kind == 0 ? fprop[s] : wgrad[s];
            const int64_t rows = sh[0], cols = sh[1], kdim = sh[2];
            bfp8_qmatrix a = random_device_operand(rows, kdim, BFP8_GRAN_1X128, 11);
            bfp8_qmatrix b = random_device_operand(cols, kdim, kind == 0 ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128, 12);
            const bfp8_dtype dt = kind == 0 ? BFP8_BF16 : BFP8_F32;
            bfp8_matrix d = {gpu_alloc((size_t)(rows * cols) * bfp8_dtype_size(dt)), dt, rows, cols, cols};
            for (int c = 0; c < NUM_CONFIGS; ++c) {
                if (filter && configs[c][0] && !strstr(configs[c], filter)) continue;
                if (!config_fits(kind == 0 ? GEMM_1D2D : GEMM_1D1D, configs[c])) continue;
                use_config(configs[c]);
                bfp8_status st = BFP8_OK;
                for (int w = 0; w < 3 && st == BFP8_OK; ++w)
                    st = kind == 0 ? bfp8_gemm_1d2d(gpu, &a, &b, &d) : bfp8_gemm_1d1d(gpu, &a, &b, &d, &d);
                bfp8_context_synchronize(gpu);
                double best = INFINITY;
                for (int rep = 0; rep < 5 && st == BFP8_OK; ++rep) {
                    const int iters = 10;
                    const double t0 = now_seconds();
                    for (int i = 0; i < iters && st == BFP8_OK; ++i)
                        st = kind == 0 ? bfp8_gemm_1d2d(gpu, &a, &b, &d) : bfp8_gemm_1d1d(gpu, &a, &b, &d, &d);
                    if (bfp8_context_synchronize(gpu) != BFP8_OK) st = BFP8_ERR_CUDA;
                    const double t = (now_seconds() - t0) / iters;
                    if (t < best) best = t;
                }
                char shape[64];
                snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)rows, (long long)cols, (long long)kdim);
                if (st != BFP8_OK) {
                    printf("%-10s %-22s %-18s failed: %s\n", kind == 0 ? "1d2d" : "1d1d", shape,
                           configs[c][0] ? configs[c] : "auto", bfp8_last_error());
                    CHECK(0, "timing run failed");
                    continue;
                }
                printf("%-10s %-22s %-18s %10.1f %8.1f\n", kind == 0 ? "1d2d" : "1d1d", shape,
                       configs[c][0] ? configs[c] : "auto", best * 1e6, 2.0 * rows * cols * kdim / best * 1e-12);
            }
            use_config(NULL);
            bfp8_free(gpu, a.data);
            bfp8_free(gpu, a.scales);
            bfp8_free(gpu, b.data);
            bfp8_free(gpu, b.scales);
            bfp8_free(gpu, d.data);
        }
    }
}
