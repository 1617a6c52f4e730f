/*
 * test_gemm_grouped.c - the grouped GEMMs of mixture-of-experts layers
 * (bfp8_gemm_1d2d_grouped, bfp8_gemm_1d1d_grouped) on one backend:
 *
 *   test_gemm_grouped cpu     the CPU reference
 *   test_gemm_grouped cuda    the CUDA kernels (exit 77 without a GPU)
 *
 * Each group's output is compared with an fp64 GEMM of the same fp8 data
 * and scales, made here from the dequantized operands (RECIPE.md section 5:
 * SQNR >= 40 dB overall and in every 128x128 tile). Groups come in uneven
 * sizes with empty ones among them; rows of D that no group covers must keep
 * their poison (1D2D), and an expert without tokens must get exactly C or
 * zeros (1D1D). Bad offsets and shapes must fail with nothing written.
 * The _device_offsets forms get their offsets in backend memory, also
 * wrong ones, which must act as their clamped values.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#if defined(BFP8_WITH_CUDA)
#include <cuda_runtime.h>
#endif

static bfp8_context *host; /* quantizes the operands */
static bfp8_context *ctx;  /* the backend under test */
static bfp8_backend ctx_backend;

/* BFP8_GEMM_CONFIG for the GEMMs that follow (NULL: the heuristic's choice).
 * The library reads it when a context is created, so the context under test
 * is made again (its device memory stays). */
static void use_config(const char *config) {
    if (config) setenv("BFP8_GEMM_CONFIG", config, 1);
    else unsetenv("BFP8_GEMM_CONFIG");
    bfp8_context_synchronize(ctx);
    bfp8_context_destroy(ctx);
    ctx = NULL;
    if (bfp8_context_create(&ctx, ctx_backend, 0) != BFP8_OK) test_fatal("context: %s", bfp8_last_error());
}

/* A quantized operand on the host (quantized by the CPU reference), its
 * dequantized values in fp64, and its copy in the backend's memory. */
typedef struct operand {
    bfp8_qmatrix q, dev;
    double *deq; /* rows x cols */
} operand;

static void *backend_alloc(size_t bytes) {
    void *p = NULL;
    if (bfp8_malloc(ctx, &p, bytes) != BFP8_OK) test_fatal("allocation of %zu bytes: %s", bytes, bfp8_last_error());
    return p;
}

static void to_backend(void *dst, const void *src, size_t bytes) {
    if (bfp8_copy_to_backend(ctx, dst, src, bytes) != BFP8_OK) test_fatal("copy: %s", bfp8_last_error());
}

static void operand_make(operand *op, int64_t rows, int64_t cols, bfp8_granularity gran, uint64_t seed) {
    float *src = test_malloc((size_t)(rows * cols) * sizeof(float));
    test_fill_f32(src, rows, cols, cols, 1.0f, TEST_FILL_HARD, seed);
    size_t data_bytes, scale_bytes;
    bfp8_qmatrix_layout(&op->q, rows, cols, gran, &data_bytes, &scale_bytes);
    op->q.data = test_malloc(data_bytes);
    op->q.scales = test_malloc(scale_bytes);
    memset(op->q.data, 0, data_bytes);
    memset(op->q.scales, 0, scale_bytes);
    bfp8_matrix x = {src, BFP8_F32, rows, cols, cols};
    const bfp8_status st = gran == BFP8_GRAN_1X128 ? bfp8_quantize_1x128(host, &x, &op->q, NULL, NULL)
                                                   : bfp8_quantize_128x128(host, &x, &op->q, NULL, NULL);
    if (st != BFP8_OK) test_fatal("quantization: %s", bfp8_last_error());
    free(src);
    op->deq = test_malloc((size_t)(rows * cols) * sizeof(double));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) op->deq[r * cols + c] = test_dequant(&op->q, r, c);
    op->dev = op->q;
    op->dev.data = backend_alloc(data_bytes);
    op->dev.scales = backend_alloc(scale_bytes);
    to_backend(op->dev.data, op->q.data, data_bytes);
    to_backend(op->dev.scales, op->q.scales, scale_bytes);
}

static void operand_free(operand *op) {
    free(op->q.data);
    free(op->q.scales);
    free(op->deq);
    bfp8_free(ctx, op->dev.data);
    bfp8_free(ctx, op->dev.scales);
}

/* An output matrix in backend memory, rows x cols with a padded ld. */
static bfp8_matrix output_make(int64_t rows, int64_t cols, bfp8_dtype dt) {
    const int64_t ld = cols + 8;
    bfp8_matrix d = {backend_alloc((size_t)(rows * ld) * bfp8_dtype_size(dt)), dt, rows, cols, ld};
    return d;
}

static void poison(const bfp8_matrix *d) {
    const size_t bytes = (size_t)(d->rows * d->ld) * bfp8_dtype_size(d->dtype);
    unsigned char *ones = test_malloc(bytes);
    memset(ones, 0xff, bytes); /* NaN in bf16 and f32 */
    to_backend(d->data, ones, bytes);
    free(ones);
}

/* Raw bytes of a backend matrix (rows x ld). */
static unsigned char *download_raw(const bfp8_matrix *d) {
    const size_t bytes = (size_t)(d->rows * d->ld) * bfp8_dtype_size(d->dtype);
    unsigned char *raw = test_malloc(bytes);
    if (bfp8_copy_to_host(ctx, raw, d->data, bytes) != BFP8_OK) test_fatal("copy back: %s", bfp8_last_error());
    return raw;
}

static float element(const bfp8_matrix *d, const unsigned char *raw, int64_t r, int64_t c) {
    if (d->dtype == BFP8_F32) {
        float v;
        memcpy(&v, raw + (size_t)(r * d->ld + c) * 4, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, raw + (size_t)(r * d->ld + c) * 2, 2);
    const uint32_t bits = (uint32_t)h << 16;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* Rows [r0, r0 + rows) of D (raw) against ref (rows x cols, fp64): the SQNR bars. */
static void check_block(const char *name, const bfp8_matrix *d, const unsigned char *raw, int64_t r0, int64_t rows,
                        const double *ref) {
    const int64_t cols = d->cols;
    float *got = test_malloc((size_t)(rows * cols) * sizeof(float));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) got[r * cols + c] = element(d, raw, r0 + r, c);
    const test_sqnr_report rep = test_sqnr_tiles(ref, cols, got, cols, rows, cols, 128);
    CHECK(rep.overall_db >= 40.0 && rep.worst_tile_db >= 40.0,
          "%s rows [%lld, %lld): SQNR %.1f dB, worst tile %.1f dB at (%lld, %lld)", name, (long long)r0,
          (long long)(r0 + rows), rep.overall_db, rep.worst_tile_db, (long long)rep.worst_tile_row,
          (long long)rep.worst_tile_col);
    free(got);
}

/* Offsets from group sizes: offsets[0] = 0, offsets[g + 1] = offsets[g] + sizes[g] (caller frees). */
static int64_t *offsets_of(const int64_t *sizes, int groups) {
    int64_t *offsets = test_malloc((size_t)(groups + 1) * sizeof(int64_t));
    offsets[0] = 0;
    for (int g = 0; g < groups; ++g) offsets[g + 1] = offsets[g] + sizes[g];
    return offsets;
}

/* Offsets for the _device_offsets calls: `raw` (G + 1 values, as a router
 * might write them) in backend memory, or NULL when raw is NULL. */
static int64_t *device_offsets(const int64_t *raw, int groups) {
    if (!raw) return NULL;
    int64_t *dev = backend_alloc((size_t)(groups + 1) * sizeof(int64_t));
    to_backend(dev, raw, (size_t)(groups + 1) * sizeof(int64_t));
    return dev;
}

/* ------------------------------------------------------------------------ */
/* 1D2D, grouped along M                                                     */

/* sizes[g]: group g's rows (multiples of 128); `spare` rows of A after the
 * last group, which D must not see written. raw_offsets: NULL (host
 * offsets), or offsets for bfp8_gemm_1d2d_grouped_device_offsets that clamp
 * to those of sizes. */
static void case_1d2d(const int64_t *sizes, int groups, int64_t spare, int64_t n, int64_t k, bfp8_dtype dt,
                      uint64_t seed, const int64_t *raw_offsets) {
    int64_t *offsets = offsets_of(sizes, groups);
    const int64_t m = offsets[groups] + spare;
    char name[128];
    snprintf(name, sizeof name, "1d2d grouped: %d groups, %lld rows (+%lld spare), N %lld, K %lld -> %s%s", groups,
             (long long)offsets[groups], (long long)spare, (long long)n, (long long)k, bfp8_dtype_name(dt),
             raw_offsets ? " (device offsets)" : "");
    operand a, b;
    operand_make(&a, m, k, BFP8_GRAN_1X128, seed);
    operand_make(&b, groups * n, k, BFP8_GRAN_128X128, seed + 1);
    bfp8_matrix d = output_make(m, n, dt);
    poison(&d);
    int64_t *dev_offsets = device_offsets(raw_offsets, groups);
    if (dev_offsets)
        CHECK_OK(bfp8_gemm_1d2d_grouped_device_offsets(ctx, &a.dev, &b.dev, dev_offsets, groups, &d));
    else
        CHECK_OK(bfp8_gemm_1d2d_grouped(ctx, &a.dev, &b.dev, offsets, groups, &d));
    CHECK_OK(bfp8_context_synchronize(ctx));
    unsigned char *raw = download_raw(&d);
    for (int g = 0; g < groups; ++g) {
        const int64_t rows = sizes[g];
        if (rows == 0) continue;
        double *ref = test_malloc((size_t)(rows * n) * sizeof(double));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < n; ++c) {
                const double *x = a.deq + (offsets[g] + r) * k, *w = b.deq + (g * n + c) * k;
                double s = 0.0;
                for (int64_t i = 0; i < k; ++i) s += x[i] * w[i];
                ref[r * n + c] = s;
            }
        char gname[160];
        snprintf(gname, sizeof gname, "%s, group %d", name, g);
        check_block(gname, &d, raw, offsets[g], rows, ref);
        free(ref);
    }
    /* the spare rows: never written */
    const size_t esize = bfp8_dtype_size(dt);
    int64_t touched = 0;
    for (int64_t r = offsets[groups]; r < m; ++r)
        for (size_t i = 0; i < (size_t)d.ld * esize; ++i) touched += raw[(size_t)r * d.ld * esize + i] != 0xff;
    CHECK(touched == 0, "%s: %lld bytes of the rows past the last group were written", name, (long long)touched);
    printf("  checked %s\n", name);
    free(raw);
    free(offsets);
    bfp8_free(ctx, dev_offsets);
    bfp8_free(ctx, d.data);
    operand_free(&a);
    operand_free(&b);
}

/* ------------------------------------------------------------------------ */
/* 1D1D, grouped along the tokens                                            */

/* accumulate: 0 D = A.B^T; 1 D += A.B^T in place (c = d); 2 D = C + A.B^T,
 * C separate. raw_offsets: as for case_1d2d. */
static void case_1d1d(const int64_t *sizes, int groups, int64_t spare, int64_t n, int64_t k, bfp8_dtype dt,
                      int accumulate, uint64_t seed, const int64_t *raw_offsets) {
    int64_t *offsets = offsets_of(sizes, groups);
    const int64_t m = offsets[groups] + spare;
    char name[160];
    snprintf(name, sizeof name, "1d1d grouped: %d groups, %lld tokens (+%lld spare), N %lld, K %lld -> %s%s", groups,
             (long long)offsets[groups], (long long)spare, (long long)n, (long long)k, bfp8_dtype_name(dt),
             accumulate == 1 ? " (in place)" : accumulate == 2 ? " (from another C)" : "");
    if (raw_offsets) strncat(name, " (device offsets)", sizeof name - strlen(name) - 1);
    operand a, b;
    operand_make(&a, n, m, BFP8_GRAN_1X128, seed);
    operand_make(&b, k, m, BFP8_GRAN_1X128, seed + 1);
    bfp8_matrix d = output_make(groups * n, k, dt), c = d;
    float *c_host = NULL;
    if (accumulate) {
        c_host = test_malloc((size_t)(d.rows * d.ld) * sizeof(float));
        test_fill_f32(c_host, d.rows, d.cols, d.ld, 10.0f, 0, seed + 2);
        if (accumulate == 2) c.data = backend_alloc((size_t)(d.rows * d.ld) * sizeof(float));
        to_backend(c.data, c_host, (size_t)(d.rows * d.ld) * sizeof(float));
        if (accumulate == 2) poison(&d);
    } else {
        poison(&d);
    }
    int64_t *dev_offsets = device_offsets(raw_offsets, groups);
    if (dev_offsets)
        CHECK_OK(bfp8_gemm_1d1d_grouped_device_offsets(ctx, &a.dev, &b.dev, dev_offsets, groups, accumulate ? &c : NULL,
                                                       &d));
    else
        CHECK_OK(bfp8_gemm_1d1d_grouped(ctx, &a.dev, &b.dev, offsets, groups, accumulate ? &c : NULL, &d));
    CHECK_OK(bfp8_context_synchronize(ctx));
    unsigned char *raw = download_raw(&d);
    for (int g = 0; g < groups; ++g) {
        const int64_t t0 = offsets[g], tokens = sizes[g];
        if (tokens == 0) { /* exactly C, or zeros */
            int64_t wrong = 0;
            for (int64_t r = g * n; r < (g + 1) * n; ++r)
                for (int64_t col = 0; col < k; ++col) {
                    const float want = c_host ? c_host[r * d.ld + col] : 0.0f, got = element(&d, raw, r, col);
                    wrong += memcmp(&want, &got, 4) != 0;
                }
            CHECK(wrong == 0, "%s, group %d (no tokens): %lld outputs are not %s", name, g, (long long)wrong,
                  c_host ? "C" : "zero");
            continue;
        }
        double *ref = test_malloc((size_t)(n * k) * sizeof(double));
        for (int64_t r = 0; r < n; ++r)
            for (int64_t col = 0; col < k; ++col) {
                const double *x = a.deq + r * m + t0, *y = b.deq + col * m + t0;
                double s = 0.0;
                for (int64_t i = 0; i < tokens; ++i) s += x[i] * y[i];
                ref[r * k + col] = s + (c_host ? c_host[(g * n + r) * d.ld + col] : 0.0);
            }
        char gname[200];
        snprintf(gname, sizeof gname, "%s, group %d", name, g);
        check_block(gname, &d, raw, g * n, n, ref);
        free(ref);
    }
    printf("  checked %s\n", name);
    free(raw);
    free(c_host);
    free(offsets);
    bfp8_free(ctx, dev_offsets);
    if (accumulate == 2) bfp8_free(ctx, c.data);
    bfp8_free(ctx, d.data);
    operand_free(&a);
    operand_free(&b);
}

/* ------------------------------------------------------------------------ */
/* Bad input: a status, and D as it was                                      */

static void bad_input(void) {
    operand a, b, at, bt;
    operand_make(&a, 512, 256, BFP8_GRAN_1X128, 7);    /* 1d2d: M x K */
    operand_make(&b, 2 * 256, 256, BFP8_GRAN_128X128, 8); /* 2 groups of N = 256 */
    operand_make(&at, 256, 512, BFP8_GRAN_1X128, 9);   /* 1d1d: N x M */
    operand_make(&bt, 128, 512, BFP8_GRAN_1X128, 10);  /* K x M */
    bfp8_matrix d = output_make(512, 256, BFP8_F32), dw = output_make(2 * 256, 128, BFP8_F32);
    poison(&d);
    poison(&dw);
    const int64_t good[] = {0, 256, 512}, not_zero[] = {128, 256, 512}, falling[] = {0, 384, 256},
                  unaligned[] = {0, 200, 512}, too_far[] = {0, 256, 640};
    CHECK_STATUS(bfp8_gemm_1d2d_grouped(ctx, &a.dev, &b.dev, NULL, 2, &d), BFP8_ERR_NULL_POINTER);
    CHECK_STATUS(bfp8_gemm_1d2d_grouped(ctx, &a.dev, &b.dev, good, 0, &d), BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bfp8_gemm_1d2d_grouped(ctx, &a.dev, &b.dev, not_zero, 2, &d), BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bfp8_gemm_1d2d_grouped(ctx, &a.dev, &b.dev, falling, 2, &d), BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bfp8_gemm_1d2d_grouped(ctx, &a.dev, &b.dev, unaligned, 2, &d), BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bfp8_gemm_1d2d_grouped(ctx, &a.dev, &b.dev, too_far, 2, &d), BFP8_ERR_SHAPE);
    const int64_t three[] = {0, 128, 256, 512};
    CHECK_STATUS(bfp8_gemm_1d2d_grouped(ctx, &a.dev, &b.dev, three, 3, &d), BFP8_ERR_SHAPE); /* 512 rows / 3 */
    bfp8_matrix d_wrong = d;
    d_wrong.cols = 128;
    CHECK_STATUS(bfp8_gemm_1d2d_grouped(ctx, &a.dev, &b.dev, good, 2, &d_wrong), BFP8_ERR_SHAPE);
    CHECK_STATUS(bfp8_gemm_1d1d_grouped(ctx, &at.dev, &bt.dev, unaligned, 2, NULL, &dw), BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bfp8_gemm_1d1d_grouped(ctx, &at.dev, &bt.dev, too_far, 2, NULL, &dw), BFP8_ERR_SHAPE);
    CHECK_STATUS(bfp8_gemm_1d1d_grouped(ctx, &at.dev, &bt.dev, good, 1, NULL, &dw), BFP8_ERR_SHAPE); /* d: 1 x N rows */
    CHECK_STATUS(bfp8_gemm_1d1d_grouped(ctx, &bt.dev, &at.dev, good, 2, NULL, &dw), BFP8_ERR_SHAPE);
    CHECK_STATUS(bfp8_gemm_1d1d_grouped(ctx, &at.dev, &bt.dev, good, 2, &d, &dw), BFP8_ERR_SHAPE); /* c's shape */
    CHECK_STATUS(bfp8_gemm_1d2d_grouped_device_offsets(ctx, &a.dev, &b.dev, NULL, 2, &d), BFP8_ERR_NULL_POINTER);
    int64_t *dev_good = device_offsets(good, 2);
    CHECK_STATUS(bfp8_gemm_1d2d_grouped_device_offsets(ctx, &a.dev, &b.dev, dev_good, 0, &d), BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bfp8_gemm_1d1d_grouped_device_offsets(ctx, &at.dev, &bt.dev, dev_good, 1, NULL, &dw), BFP8_ERR_SHAPE);
    bfp8_free(ctx, dev_good);
    CHECK_OK(bfp8_context_synchronize(ctx));
    unsigned char *raw = download_raw(&d), *raw_w = download_raw(&dw);
    int64_t touched = 0;
    for (size_t i = 0; i < (size_t)(d.rows * d.ld) * 4; ++i) touched += raw[i] != 0xff;
    for (size_t i = 0; i < (size_t)(dw.rows * dw.ld) * 4; ++i) touched += raw_w[i] != 0xff;
    CHECK(touched == 0, "bad input: %lld output bytes written", (long long)touched);
    printf("  checked bad input\n");
    free(raw);
    free(raw_w);
    bfp8_free(ctx, d.data);
    bfp8_free(ctx, dw.data);
    operand_free(&a);
    operand_free(&b);
    operand_free(&at);
    operand_free(&bt);
}

#if defined(BFP8_WITH_CUDA)
/* Both grouped GEMMs with device offsets captured into a CUDA graph after
 * one uncaptured call (which makes the context's table), replayed: the bits
 * of the uncaptured call every time. */
static void check_graph_capture(uint64_t seed) {
    static const int64_t sizes[] = {384, 0, 640, 256};
    int64_t *offsets = offsets_of(sizes, 4);
    int64_t *dev = device_offsets(offsets, 4);
    operand x, w, dyt, xt;
    operand_make(&x, 1280, 512, BFP8_GRAN_1X128, seed);
    operand_make(&w, 4 * 256, 512, BFP8_GRAN_128X128, seed + 1);
    operand_make(&dyt, 256, 1280, BFP8_GRAN_1X128, seed + 2);
    operand_make(&xt, 384, 1280, BFP8_GRAN_1X128, seed + 3);
    bfp8_matrix y = output_make(1280, 256, BFP8_BF16), dw = output_make(4 * 256, 384, BFP8_F32);
    const size_t y_bytes = (size_t)(y.rows * y.ld) * 2, dw_bytes = (size_t)(dw.rows * dw.ld) * 4;
    unsigned char *want_y = test_malloc(y_bytes), *want_dw = test_malloc(dw_bytes);
    unsigned char *got_y = test_malloc(y_bytes), *got_dw = test_malloc(dw_bytes);
    cudaStream_t stream = NULL;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
    CHECK_OK(bfp8_context_set_stream(ctx, stream));
    poison(&y);
    poison(&dw); /* (the padding of each row too: compared below) */
    CHECK_OK(bfp8_gemm_1d2d_grouped_device_offsets(ctx, &x.dev, &w.dev, dev, 4, &y));
    CHECK_OK(bfp8_gemm_1d1d_grouped_device_offsets(ctx, &dyt.dev, &xt.dev, dev, 4, NULL, &dw));
    CHECK_OK(bfp8_context_synchronize(ctx));
    bfp8_copy_to_host(ctx, want_y, y.data, y_bytes);
    bfp8_copy_to_host(ctx, want_dw, dw.data, dw_bytes);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture");
    CHECK_OK(bfp8_gemm_1d2d_grouped_device_offsets(ctx, &x.dev, &w.dev, dev, 4, &y));
    CHECK_OK(bfp8_gemm_1d1d_grouped_device_offsets(ctx, &dyt.dev, &xt.dev, dev, 4, NULL, &dw));
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    CHECK(end == cudaSuccess, "the capture broke: %s", cudaGetErrorString(end));
    if (end == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
        for (int replay = 0; replay < 2; ++replay) {
            poison(&y);
            poison(&dw);
            CHECK(cudaGraphLaunch(exec, stream) == cudaSuccess && cudaStreamSynchronize(stream) == cudaSuccess,
                  "replay the graph");
            bfp8_copy_to_host(ctx, got_y, y.data, y_bytes);
            bfp8_copy_to_host(ctx, got_dw, dw.data, dw_bytes);
            CHECK(memcmp(want_y, got_y, y_bytes) == 0, "replay %d: the captured 1D2D differs from the uncaptured one",
                  replay);
            CHECK(memcmp(want_dw, got_dw, dw_bytes) == 0,
                  "replay %d: the captured 1D1D differs from the uncaptured one", replay);
        }
        cudaGraphExecDestroy(exec);
    } else {
        CHECK(0, "instantiate the graph");
    }
    if (graph) cudaGraphDestroy(graph);
    CHECK_OK(bfp8_context_set_stream(ctx, NULL));
    cudaStreamDestroy(stream);
    printf("  checked graph capture of both grouped GEMMs with device offsets\n");
    free(want_y), free(want_dw), free(got_y), free(got_dw), free(offsets);
    bfp8_free(ctx, dev), bfp8_free(ctx, y.data), bfp8_free(ctx, dw.data);
    operand_free(&x), operand_free(&w), operand_free(&dyt), operand_free(&xt);
}
#endif

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const int cuda = argc > 1 && !strcmp(argv[1], "cuda");
    if (argc != 2 || (!cuda && strcmp(argv[1], "cpu")))
        test_fatal("usage: test_gemm_grouped cpu|cuda");
    if (cuda) TEST_REQUIRE_GPU();
    if (bfp8_context_create(&host, BFP8_BACKEND_CPU, 0) != BFP8_OK ||
        bfp8_context_create(&ctx, ctx_backend = cuda ? BFP8_BACKEND_CUDA : BFP8_BACKEND_CPU, 0) != BFP8_OK)
        test_fatal("context: %s", bfp8_last_error());

    uint64_t seed = 1000;
    /* uneven experts, empty ones first, in the middle and last */
    const int64_t moe[] = {0, 384, 128, 0, 1024, 256, 0};
    const int64_t one[] = {640};
    case_1d2d(moe, 7, 0, 256, 1000, BFP8_BF16, seed++, NULL);
    case_1d2d(moe, 7, 200, 384, 256, BFP8_F32, seed++, NULL);  /* spare rows, three 128-column blocks */
    case_1d2d(one, 1, 77, 128, 4097, BFP8_BF16, seed++, NULL); /* one group: the plain GEMM's job */
    /* tiles forced: 192 columns straddle weights (N = 384: 2 tiles of 192) */
    use_config("bn=192");
    case_1d2d(moe, 7, 0, 384, 512, BFP8_BF16, seed++, NULL);
    /* 192-row tiles: a group's last tile ends past it (its rows there are not stored) */
    use_config("bm=192");
    case_1d2d(moe, 7, 0, 256, 1000, BFP8_BF16, seed++, NULL);
    case_1d2d(moe, 7, 200, 384, 256, BFP8_F32, seed++, NULL); /* f32: stored from registers */
    use_config("bn=128,store=direct");
    case_1d2d(moe, 7, 0, 256, 640, BFP8_BF16, seed++, NULL);
    use_config(NULL);
    const int64_t none[] = {0, 0};
    case_1d2d(none, 2, 128, 128, 256, BFP8_BF16, seed++, NULL); /* no tokens at all: nothing written */
    case_1d1d(moe, 7, 0, 256, 200, BFP8_F32, 0, seed++, NULL);
    case_1d1d(moe, 7, 128, 128, 384, BFP8_F32, 1, seed++, NULL);
    case_1d1d(moe, 7, 0, 256, 136, BFP8_F32, 2, seed++, NULL);
    case_1d1d(moe, 7, 0, 128, 129, BFP8_BF16, 0, seed++, NULL);
    case_1d1d(moe, 7, 0, 200, 136, BFP8_F32, 0, seed++, NULL); /* N not a multiple of a tile: rows clipped per group */
    case_1d1d(moe, 7, 0, 200, 264, BFP8_F32, 1, seed++, NULL);
    case_1d1d(one, 1, 5, 384, 1000, BFP8_F32, 1, seed++, NULL);
    case_1d1d(none, 2, 128, 128, 256, BFP8_F32, 2, seed++, NULL); /* no tokens at all: D = C */
    use_config("store=direct");
    case_1d1d(moe, 7, 0, 256, 200, BFP8_F32, 0, seed++, NULL);
    use_config(NULL);
    /* offsets in backend memory: as given, and as a router might get them
     * wrong (unaligned, decreasing, past the tokens), clamped as documented */
    {
        static const int64_t moe_raw[] = {0, 0, 384, 512, 512, 1536, 1792, 1792};
        static const int64_t bad_raw[] = {5, 300, 200, 700, 100000};  /* clamps to 0, 256, 256, 640, 768 */
        static const int64_t bad_sizes[] = {256, 0, 384, 128};
        case_1d2d(moe, 7, 200, 256, 1000, BFP8_BF16, seed++, moe_raw);
        case_1d2d(bad_sizes, 4, 100, 384, 256, BFP8_BF16, seed++, bad_raw); /* 868 rows: the last group ends at 768 */
        case_1d1d(moe, 7, 0, 200, 264, BFP8_F32, 1, seed++, moe_raw);
        case_1d1d(bad_sizes, 4, 100, 256, 136, BFP8_F32, 2, seed++, bad_raw);
    }
    bad_input();
#if defined(BFP8_WITH_CUDA)
    if (cuda) check_graph_capture(seed++);
#endif

    bfp8_context_destroy(ctx);
    bfp8_context_destroy(host);
    return test_exit_code(cuda ? "test_gemm_grouped cuda" : "test_gemm_grouped cpu");
}
