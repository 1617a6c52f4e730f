/* Session 18 probes: device inputs, random data and quantization through the public API (shared by
 * 2026-12-02_gemm_1d2d_s18_repeat_probe.c and 2026-12-02_gemm_s18_repeat_product_probe.c). */
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "blockfp8.h"
#define T(x) do { bfp8_status s_ = (x); if (s_ != BFP8_OK) { printf("FAIL %s: %s\n", #x, bfp8_last_error()); exit(1); } } while (0)
static bfp8_context *g;
static void *dev(size_t n) { void *p; T(bfp8_malloc(g, &p, n)); return p; }
static float *randf(int64_t n, uint64_t seed) {
    float *h = malloc((size_t)n * 4); uint64_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; ++i) { s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = ((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 23); }
    float *d = dev((size_t)n * 4); T(bfp8_copy_to_backend(g, d, h, (size_t)n * 4)); free(h); return d;
}
static bfp8_qmatrix quant(float *x, int64_t r, int64_t c, int block) {
    bfp8_qmatrix q; size_t db, sb;
    T(bfp8_qmatrix_layout(&q, r, c, block ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128, &db, &sb));
    q.data = dev(db); q.scales = dev(sb);
    bfp8_matrix m = {x, BFP8_F32, r, c, c};
    if (block) T(bfp8_quantize_128x128(g, &m, &q, NULL, NULL)); else T(bfp8_quantize_1x128(g, &m, &q, NULL, NULL));
    return q;
}
