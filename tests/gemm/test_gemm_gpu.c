/*
 * test_gemm_gpu.c - the CUDA FP8 GEMMs (1D2D and 1D1D) against fp64
 * references, on ragged shapes, hard data and the TARGETS.md shapes.
 *
 *   test_gemm_gpu            everything (large outputs: sampled 128x128 tiles)
 *   test_gemm_gpu --small    ragged shapes only: the compute-sanitizer set
 *   test_gemm_gpu --time [FILTER]  time every kernel configuration (or those
 *                            whose name contains FILTER) on the TARGETS.md
 *                            shapes (BFP8_GEMM_CONFIG forced)
 *   test_gemm_gpu --profile  only one 1D2D and one 1D1D launch on 8192^3, for
 *                            ncu -k regex:gemm_fp8
 *   test_gemm_gpu --crash-sweep CONFIG  only the wgrad crash shapes, every
 *                            output mode, under BFP8_GEMM_CONFIG=CONFIG (for
 *                            compute-sanitizer on one configuration)
 *
 * Bars (RECIPE.md section 5): vs the fp64 GEMM of the same fp8 data and
 * scales, SQNR >= 40 dB overall and in every 128x128 tile; vs the fp64 GEMM
 * of the unquantized inputs, SQNR >= 28 dB and calc_diff < 1e-3. Operands
 * are quantized by the CPU reference quantizer, so the fp8 data is exactly
 * what the library produces. Outputs are poisoned with NaN first, so an
 * element the kernel never writes fails the check; 192 canary rows past D
 * and the padding columns of a padded ld must come back untouched.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, clock_gettime */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_gemm_gpu.h"
#include "test_util.h"

#if defined(BFP8_WITH_CUDA)
#include <cuda_runtime.h>
#endif

static bfp8_context *cpu;
bfp8_context *gpu;

/* ------------------------------------------------------------------------ */
/* Quantized operands on the host, and their copies on the device            */

typedef struct operand {
    float *src;        /* host, rows x cols, unquantized */
    bfp8_qmatrix host; /* quantized on the CPU */
    bfp8_qmatrix dev;  /* device copy, same layout */
} operand;

void *gpu_alloc(size_t bytes) {
    void *p = NULL;
    if (bfp8_malloc(gpu, &p, bytes) != BFP8_OK)
        test_fatal("device allocation of %zu bytes: %s", bytes, bfp8_last_error());
    return p;
}

/* BFP8_GEMM_CONFIG for the GEMMs that follow (NULL or "": the heuristic's
 * choice). The library reads it when a context is created, so the GPU
 * context is made again (device memory is not the context's: it stays). */
void use_config(const char *config) {
    if (config && config[0]) setenv("BFP8_GEMM_CONFIG", config, 1);
    else unsetenv("BFP8_GEMM_CONFIG");
    bfp8_context_synchronize(gpu);
    bfp8_context_destroy(gpu);
    gpu = NULL;
    if (bfp8_context_create(&gpu, BFP8_BACKEND_CUDA, 0) != BFP8_OK) test_fatal("context: %s", bfp8_last_error());
}

static void operand_make(operand *op, int64_t rows, int64_t cols, bfp8_granularity gran, unsigned fill,
                         uint64_t seed) {
    size_t data_bytes, scale_bytes;
    op->src = test_malloc((size_t)(rows * cols) * sizeof(float));
    test_fill_f32(op->src, rows, cols, cols, 1.0f, fill, seed);
    bfp8_qmatrix_layout(&op->host, rows, cols, gran, &data_bytes, &scale_bytes);
    op->host.data = test_malloc(data_bytes);
    op->host.scales = test_malloc(scale_bytes);
    memset(op->host.data, 0, data_bytes);
    memset(op->host.scales, 0, scale_bytes);
    bfp8_matrix x = {op->src, BFP8_F32, rows, cols, cols};
    const bfp8_status st = gran == BFP8_GRAN_1X128 ? bfp8_quantize_1x128(cpu, &x, &op->host, NULL, NULL)
                                                   : bfp8_quantize_128x128(cpu, &x, &op->host, NULL, NULL);
    if (st != BFP8_OK) test_fatal("CPU quantization failed: %s", bfp8_last_error());
    op->dev = op->host;
    op->dev.data = gpu_alloc(data_bytes);
    op->dev.scales = gpu_alloc(scale_bytes);
    if (bfp8_copy_to_backend(gpu, op->dev.data, op->host.data, data_bytes) != BFP8_OK ||
        bfp8_copy_to_backend(gpu, op->dev.scales, op->host.scales, scale_bytes) != BFP8_OK)
        test_fatal("copy to device: %s", bfp8_last_error());
}

static void operand_free(operand *op) {
    free(op->src);
    free(op->host.data);
    free(op->host.scales);
    bfp8_free(gpu, op->dev.data);
    bfp8_free(gpu, op->dev.scales);
}

/* ------------------------------------------------------------------------ */
/* Checking                                                                  */

typedef struct bars_seen { double same_db, tile_db, unquant_db, calc_diff; } bars_seen;
static bars_seen seen = {INFINITY, INFINITY, INFINITY, 0.0};

/* got: the GEMM's product on [r0,r1) x [c0,c1) (nr x nc, dense). */
static void check_region(const char *name, const operand *a, const operand *b, const float *got, int64_t r0,
                         int64_t r1, int64_t c0, int64_t c1, int check_unquantized) {
    const int64_t nr = r1 - r0, nc = c1 - c0;
    double *ref = test_malloc((size_t)(nr * nc) * sizeof(double));
    test_ref_gemm_q_f64(&a->host, &b->host, r0, r1, c0, c1, ref, nc);
    const test_sqnr_report rep = test_sqnr_tiles(ref, nc, got, nc, nr, nc, 128);
    if (rep.overall_db < seen.same_db) seen.same_db = rep.overall_db;
    if (rep.worst_tile_db < seen.tile_db) seen.tile_db = rep.worst_tile_db;
    CHECK(rep.overall_db >= 40.0 && rep.worst_tile_db >= 40.0,
          "%s rows [%lld,%lld) cols [%lld,%lld): same-data SQNR %.1f dB, worst tile %.1f dB at tile (%lld,%lld)",
          name, (long long)r0, (long long)r1, (long long)c0, (long long)c1, rep.overall_db, rep.worst_tile_db,
          (long long)rep.worst_tile_row, (long long)rep.worst_tile_col);
    if (check_unquantized) {
        test_ref_gemm_f64(a->src, a->host.cols, b->src, b->host.cols, a->host.cols, r0, r1, c0, c1, ref, nc);
        const double db = test_sqnr_db(ref, nc, got, nc, nr, nc);
        const double cd = test_calc_diff(ref, nc, got, nc, nr, nc);
        if (db < seen.unquant_db) seen.unquant_db = db;
        if (cd > seen.calc_diff) seen.calc_diff = cd;
        CHECK(db >= 28.0 && cd < 1e-3, "%s: vs unquantized SQNR %.1f dB, calc_diff %.2e", name, db, cd);
    }
    free(ref);
}

/* Host copy of a device output as f32, dense rows x cols. */
static float *download(const bfp8_matrix *d) {
    const size_t esize = bfp8_dtype_size(d->dtype), bytes = (size_t)(d->rows * d->ld) * esize;
    void *raw = test_malloc(bytes);
    if (bfp8_copy_to_host(gpu, raw, d->data, bytes) != BFP8_OK) test_fatal("copy to host: %s", bfp8_last_error());
    float *out = test_malloc((size_t)(d->rows * d->cols) * sizeof(float));
    bfp8_matrix host = *d;
    host.data = raw;
    test_matrix_to_f32(&host, out);
    free(raw);
    return out;
}

/* bytes of device memory at dst, each set to byte */
static void fill_device_bytes(void *dst, unsigned char byte, size_t bytes) {
    unsigned char *host = test_malloc(bytes);
    memset(host, byte, bytes);
    CHECK_OK(bfp8_copy_to_backend(gpu, dst, host, bytes));
    free(host);
}

static const unsigned char kPoisonByte = 0xff; /* all-ones: NaN in bf16 and f32 */

static void poison(bfp8_matrix *d) {
    fill_device_bytes(d->data, kPoisonByte, (size_t)(d->rows * d->ld) * bfp8_dtype_size(d->dtype));
}

/* Rows past D that no kernel may write: D is allocated with them, filled
 * with kCanaryByte before the product and checked after it (the last row of
 * 192-row tiles can leave two warpgroups' 64-row boxes wholly past D). */
enum { kCanaryRows = 192 };
static const unsigned char kCanaryByte = 0xa5;

/* Nothing written past D's last row, nor (poisoned = D was poisoned before
 * the product) into the padding columns of a row, which keep the poison. */
static void check_untouched(const char *name, const bfp8_matrix *d, size_t d_bytes, size_t canary_bytes,
                            int poisoned) {
    unsigned char *raw = test_malloc(canary_bytes);
    if (bfp8_copy_to_host(gpu, raw, (const unsigned char *)d->data + d_bytes, canary_bytes) != BFP8_OK)
        test_fatal("copy to host: %s", bfp8_last_error());
    size_t bad = 0;
    for (size_t i = 0; i < canary_bytes; ++i) bad += raw[i] != kCanaryByte;
    CHECK(bad == 0, "%s: %zu bytes written in the %d rows past D", name, bad, (int)kCanaryRows);
    free(raw);
    if (!poisoned || d->ld == d->cols) return;
    const size_t esize = bfp8_dtype_size(d->dtype), row_bytes = (size_t)d->ld * esize;
    raw = test_malloc(d_bytes);
    if (bfp8_copy_to_host(gpu, raw, d->data, d_bytes) != BFP8_OK) test_fatal("copy to host: %s", bfp8_last_error());
    bad = 0;
    for (int64_t r = 0; r < d->rows; ++r)
        for (size_t i = (size_t)d->cols * esize; i < row_bytes; ++i)
            bad += raw[(size_t)r * row_bytes + i] != kPoisonByte;
    CHECK(bad == 0, "%s: %zu bytes written in the padding columns of D's rows", name, bad);
    free(raw);
}

/*
 * One product. 1D2D: a = M x K (1x128), b = N x K (128x128), out M x N.
 * 1D1D: a = N x M (1x128), b = K x M (1x128), out N x K; with accumulate 1,
 * out = C + 3 (a . b^T) through three in-place calls (D is C: the kernel adds
 * into D through the TMA unit where D is aligned for it); with accumulate 2,
 * out = C + a . b^T from a separate C (the kernel reads C, writes D).
 */
static void run_case(enum gemm_kind kind, int64_t out_rows, int64_t out_cols, int64_t contraction,
                     bfp8_dtype out_dtype, int accumulate, unsigned fill, uint64_t seed) {
    char name[160];
    snprintf(name, sizeof name, "%s %lldx%lld over %lld -> %s%s", kind == GEMM_1D2D ? "1d2d" : "1d1d",
             (long long)out_rows, (long long)out_cols, (long long)contraction, bfp8_dtype_name(out_dtype),
             accumulate == 1 ? " (accumulate x3)" : accumulate == 2 ? " (accumulate from another C)" : "");
    operand a, b;
    operand_make(&a, out_rows, contraction, BFP8_GRAN_1X128, fill, seed);
    operand_make(&b, out_cols, contraction, kind == GEMM_1D2D ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128, fill,
                 seed + 1);

    const int64_t ld = out_cols + (out_cols % 3 == 0 ? 8 : 0); /* sometimes a padded ld */
    const size_t d_bytes = (size_t)(out_rows * ld) * bfp8_dtype_size(out_dtype),
                 canary_bytes = (size_t)(kCanaryRows * ld) * bfp8_dtype_size(out_dtype);
    bfp8_matrix d = {gpu_alloc(d_bytes + canary_bytes), out_dtype, out_rows, out_cols, ld};
    fill_device_bytes((unsigned char *)d.data + d_bytes, kCanaryByte, canary_bytes);
    float *c_host = NULL;
    const int calls = accumulate == 1 ? 3 : 1;
    if (accumulate) {
        c_host = test_malloc((size_t)(out_rows * ld) * sizeof(float));
        test_fill_f32(c_host, out_rows, out_cols, ld, 10.0f, 0, seed + 2);
        if (accumulate == 1) {
            bfp8_copy_to_backend(gpu, d.data, c_host, (size_t)(out_rows * ld) * sizeof(float));
            for (int rep = 0; rep < calls; ++rep) CHECK_OK(bfp8_gemm_1d1d(gpu, &a.dev, &b.dev, &d, &d));
        } else {
            bfp8_matrix c = d;
            c.data = gpu_alloc((size_t)(out_rows * ld) * sizeof(float));
            bfp8_copy_to_backend(gpu, c.data, c_host, (size_t)(out_rows * ld) * sizeof(float));
            poison(&d);
            CHECK_OK(bfp8_gemm_1d1d(gpu, &a.dev, &b.dev, &c, &d));
            CHECK_OK(bfp8_context_synchronize(gpu));
            bfp8_free(gpu, c.data);
        }
    } else {
        poison(&d);
        if (kind == GEMM_1D2D)
            CHECK_OK(bfp8_gemm_1d2d(gpu, &a.dev, &b.dev, &d));
        else
            CHECK_OK(bfp8_gemm_1d1d(gpu, &a.dev, &b.dev, NULL, &d));
    }
    CHECK_OK(bfp8_context_synchronize(gpu));
    check_untouched(name, &d, d_bytes, canary_bytes, accumulate != 1);
    float *out = download(&d);
    if (accumulate)
        for (int64_t r = 0; r < out_rows; ++r)
            for (int64_t c = 0; c < out_cols; ++c)
                out[r * out_cols + c] = (out[r * out_cols + c] - c_host[r * ld + c]) / (float)calls;

    /* Whole output when it is cheap, else sampled tiles: the corners (ragged
     * edges included) and a few random ones. */
    const int check_unquantized = !(fill & (TEST_FILL_OUTLIERS | TEST_FILL_WIDE_RANGE)) && !accumulate;
    if ((double)out_rows * out_cols * contraction <= 4e9) {
        check_region(name, &a, &b, out, 0, out_rows, 0, out_cols, check_unquantized);
    } else {
        const int64_t last_r = (out_rows - 1) / 128, last_c = (out_cols - 1) / 128;
        test_rng rng;
        test_rng_seed(&rng, seed + 3);
        for (int i = 0; i < 8; ++i) {
            const int64_t tr = i == 0 || i == 1 ? 0 : i == 2 || i == 3 ? last_r : test_rng_range(&rng, 0, last_r);
            const int64_t tc = i == 0 || i == 2 ? 0 : i == 1 || i == 3 ? last_c : test_rng_range(&rng, 0, last_c);
            const int64_t r0 = tr * 128, c0 = tc * 128;
            const int64_t r1 = r0 + 128 < out_rows ? r0 + 128 : out_rows,
                          c1 = c0 + 128 < out_cols ? c0 + 128 : out_cols;
            float *tile = test_malloc((size_t)((r1 - r0) * (c1 - c0)) * sizeof(float));
            for (int64_t r = r0; r < r1; ++r)
                memcpy(tile + (r - r0) * (c1 - c0), out + r * out_cols + c0, (size_t)(c1 - c0) * sizeof(float));
            check_region(name, &a, &b, tile, r0, r1, c0, c1, check_unquantized);
            free(tile);
        }
    }
    const char *forced = getenv("BFP8_GEMM_CONFIG");
    printf("  checked %s [%s]\n", name, forced ? forced : "auto");
    free(out);
    free(c_host);
    bfp8_free(gpu, d.data);
    operand_free(&a);
    operand_free(&b);
}

/* The same product `calls` times, each bit for bit the first, with output
 * dtype dt: a split tile's slices are summed in slice order, whichever
 * finishes first, and no stage of the pipeline is refilled before its
 * scales are read. */
static void check_repeatable(enum gemm_kind kind, int64_t out_rows, int64_t out_cols, int64_t contraction,
                             bfp8_dtype dt, uint64_t seed, int calls) {
    operand a, b;
    operand_make(&a, out_rows, contraction, BFP8_GRAN_1X128, 0, seed);
    operand_make(&b, out_cols, contraction, kind == GEMM_1D2D ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128, 0, seed + 1);
    const size_t bytes = (size_t)(out_rows * out_cols) * bfp8_dtype_size(dt);
    bfp8_matrix d = {gpu_alloc(bytes), dt, out_rows, out_cols, out_cols};
    unsigned char *first = test_malloc(bytes), *again = test_malloc(bytes);
    int differ = 0;
    for (int call = 0; call < calls; ++call) {
        poison(&d);
        if (kind == GEMM_1D2D) CHECK_OK(bfp8_gemm_1d2d(gpu, &a.dev, &b.dev, &d));
        else CHECK_OK(bfp8_gemm_1d1d(gpu, &a.dev, &b.dev, NULL, &d));
        CHECK_OK(bfp8_context_synchronize(gpu));
        CHECK_OK(bfp8_copy_to_host(gpu, call ? again : first, d.data, bytes));
        if (call > 0 && memcmp(first, again, bytes) != 0) differ++;
    }
    CHECK(differ == 0, "%s %lldx%lld over %lld: %d of %d calls differ from the first",
          kind == GEMM_1D2D ? "1d2d" : "1d1d", (long long)out_rows, (long long)out_cols, (long long)contraction, differ,
          calls - 1);
    printf("  repeatable %s %lldx%lld over %lld -> %s, %d calls [%s]\n", kind == GEMM_1D2D ? "1d2d" : "1d1d",
           (long long)out_rows, (long long)out_cols, (long long)contraction, bfp8_dtype_name(dt), calls,
           getenv("BFP8_GEMM_CONFIG") ? getenv("BFP8_GEMM_CONFIG") : "auto");
    free(first);
    free(again);
    bfp8_free(gpu, d.data);
    operand_free(&a);
    operand_free(&b);
}

/* Calls that each read what the call before them wrote, with nothing
 * between them on the stream: D1 = D0 + A B^T, D0 = D1 + A B^T, ... (1D1D,
 * C another buffer than D, so the epilogue reads C with plain loads), under
 * `config`. Each GEMM is a programmatic dependent launch of the one before
 * (BFP8_OPTION_GEMM_PDL, the default) and must wait for it before its loads:
 * the chain must give the bits of the same chain launched plainly with a
 * synchronization after every call. */
static void check_dependent_chain(const char *config, int64_t rows, int64_t cols, int64_t tokens, uint64_t seed,
                                  int calls) {
    use_config(config);
    operand a, b;
    operand_make(&a, rows, tokens, BFP8_GRAN_1X128, 0, seed);
    operand_make(&b, cols, tokens, BFP8_GRAN_1X128, 0, seed + 1);
    const size_t bytes = (size_t)(rows * cols) * sizeof(float);
    bfp8_matrix d[2];
    float *result[2];
    for (int i = 0; i < 2; ++i) {
        d[i] = (bfp8_matrix){gpu_alloc(bytes), BFP8_F32, rows, cols, cols};
        result[i] = test_malloc(bytes);
    }
    for (int pdl = 1; pdl >= 0; --pdl) {
        CHECK_OK(bfp8_context_set_option(gpu, BFP8_OPTION_GEMM_PDL, pdl));
        CHECK_OK(bfp8_memset_zero(gpu, d[0].data, bytes));
        for (int call = 0; call < calls; ++call) {
            CHECK_OK(bfp8_gemm_1d1d(gpu, &a.dev, &b.dev, &d[call % 2], &d[(call + 1) % 2]));
            if (!pdl) CHECK_OK(bfp8_context_synchronize(gpu));
        }
        CHECK_OK(bfp8_context_synchronize(gpu));
        CHECK_OK(bfp8_copy_to_host(gpu, result[pdl], d[calls % 2].data, bytes));
    }
    CHECK(memcmp(result[0], result[1], bytes) == 0,
          "dependent chain of %d 1d1d calls %lldx%lld over %lld [%s]: launched as programmatic dependents, the "
          "result differs from the synchronized chain's",
          calls, (long long)rows, (long long)cols, (long long)tokens, config && config[0] ? config : "auto");
    printf("  dependent chain of %d 1d1d calls %lldx%lld over %lld [%s]\n", calls, (long long)rows, (long long)cols,
           (long long)tokens, config && config[0] ? config : "auto");
    for (int i = 0; i < 2; ++i) {
        bfp8_free(gpu, d[i].data);
        free(result[i]);
    }
    operand_free(&a);
    operand_free(&b);
    use_config(NULL);
}

#if defined(BFP8_WITH_CUDA)
/* A GEMM captured into a CUDA graph and replayed. Round 0: the first GEMM of
 * a fresh context, whose split plan would need the workspace made inside the
 * capture (a cudaMalloc there would break it): it must run unsplit, as the
 * same tile with split=1 does. Round 1: after an uncaptured call made the
 * workspace, the captured plan splits; every replay must give the bits of
 * the uncaptured call (slice 0 returns each flag to zero). */
static void check_graph_capture(uint64_t seed) {
    const int64_t m = 384, n = 1024, k = 8192; /* few tiles, long K: a split plan */
    operand a, b;
    operand_make(&a, m, k, BFP8_GRAN_1X128, 0, seed);
    operand_make(&b, n, k, BFP8_GRAN_128X128, 0, seed + 1);
    const size_t bytes = (size_t)(m * n) * 2;
    bfp8_matrix d = {gpu_alloc(bytes), BFP8_BF16, m, n, n};
    unsigned char *want = test_malloc(bytes), *got = test_malloc(bytes);
    bfp8_context *fresh = NULL;
    CHECK_OK(bfp8_context_create(&fresh, BFP8_BACKEND_CUDA, 0));
    cudaStream_t stream = NULL;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
    CHECK_OK(bfp8_context_set_stream(fresh, stream));
    for (int round = 0; round < 2; ++round) {
        poison(&d);
        if (round == 0) { /* the reference: the same tile, never split */
            use_config("split=1");
            CHECK_OK(bfp8_gemm_1d2d(gpu, &a.dev, &b.dev, &d));
            CHECK_OK(bfp8_context_synchronize(gpu));
            use_config(NULL);
        } else { /* the reference: the fresh context uncaptured (makes its workspace) */
            CHECK_OK(bfp8_gemm_1d2d(fresh, &a.dev, &b.dev, &d));
            CHECK_OK(bfp8_context_synchronize(fresh));
        }
        bfp8_copy_to_host(gpu, want, d.data, bytes);
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture");
        CHECK_OK(bfp8_gemm_1d2d(fresh, &a.dev, &b.dev, &d));
        const cudaError_t end = cudaStreamEndCapture(stream, &graph);
        CHECK(end == cudaSuccess, "round %d: the capture broke: %s", round, cudaGetErrorString(end));
        if (end != cudaSuccess) break;
        CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate the graph");
        for (int replay = 0; replay < 3; ++replay) {
            poison(&d);
            CHECK(cudaGraphLaunch(exec, stream) == cudaSuccess && cudaStreamSynchronize(stream) == cudaSuccess,
                  "replay the graph");
            bfp8_copy_to_host(gpu, got, d.data, bytes);
            CHECK(memcmp(want, got, bytes) == 0, "round %d replay %d: the captured GEMM differs from the reference",
                  round, replay);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
    }
    printf("  graph capture 1d2d %lldx%lldx%lld: first call captured, then a captured split plan, replayed\n",
           (long long)m, (long long)n, (long long)k);
    bfp8_context_destroy(fresh);
    cudaStreamDestroy(stream);
    free(want);
    free(got);
    bfp8_free(gpu, d.data);
    operand_free(&a);
    operand_free(&b);
}
#endif

/* Every tile the heuristic chooses among (src/cuda/gemm_fp8_host.h), with outputs
 * through the TMA unit and from registers, and "" for the heuristic's choice.
 * (bm=256 and the narrow bm=64 exist for 1D1D only: config_fits) */
const char *const configs[] = {"bn=128",        "bn=192",        "bm=192,bn=128", "bn=128,store=direct",
                                "bn=192,store=direct", "bm=256,bn=112", "bm=64,bn=32",   "bm=64,bn=64", ""};
const int NUM_CONFIGS = (int)(sizeof configs / sizeof configs[0]);
int config_fits(enum gemm_kind kind, const char *config) {
    return kind == GEMM_1D2D ? !strstr(config, "bm=256") && !strstr(config, "bm=64") : 1;
}

/* wgrad shapes that crash other implementations, and ragged token counts */
static const int64_t crash_shapes[][3] = {/* N, K, M tokens */ {1536, 256, 2048}, {512, 1024, 147456 / 8},
                                          {768, 768, 133},  {768, 256, 1},    {256, 768, 4095},
                                          {384, 136, 4097}, {1000, 129, 127}};
enum { NUM_CRASH_SHAPES = sizeof crash_shapes / sizeof crash_shapes[0] };

/* --crash-sweep CONFIG: the crash shapes alone (every output mode, and the
 * full 147456 tokens) under one forced configuration: short enough for
 * compute-sanitizer. */
static void crash_sweep(const char *config, uint64_t seed) {
    use_config(config);
    for (int i = 0; i < NUM_CRASH_SHAPES; ++i) {
        const int64_t *w = crash_shapes[i];
        run_case(GEMM_1D1D, w[0], w[1], w[2], BFP8_F32, 0, TEST_FILL_HARD, seed++);
        run_case(GEMM_1D1D, w[0], w[1], w[2], BFP8_F32, 1, 0, seed++);
        run_case(GEMM_1D1D, w[0], w[1], w[2], BFP8_F32, 2, 0, seed++);
        run_case(GEMM_1D1D, w[0], w[1], w[2], BFP8_BF16, 0, 0, seed++);
    }
    run_case(GEMM_1D1D, 512, 1024, 147456, BFP8_F32, 1, 0, seed++);
    use_config(NULL);
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    int small = 0, timing = 0, profile = 0;
    const char *sweep_config = NULL;
    const char *time_filter = NULL; /* --time FILTER: only configurations containing FILTER */
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress survives a kill */
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--small")) small = 1;
        else if (!strcmp(argv[i], "--time")) {
            timing = 1;
            if (i + 1 < argc && argv[i + 1][0] != '-') time_filter = argv[++i];
        }
        else if (!strcmp(argv[i], "--profile")) profile = 1;
        else if (!strcmp(argv[i], "--crash-sweep") && i + 1 < argc) sweep_config = argv[++i];
        else test_fatal("unknown option %s (use --small, --time, --profile or --crash-sweep CONFIG)", argv[i]);
    }
    TEST_REQUIRE_GPU();
    if (bfp8_context_create(&cpu, BFP8_BACKEND_CPU, 0) != BFP8_OK ||
        bfp8_context_create(&gpu, BFP8_BACKEND_CUDA, 0) != BFP8_OK)
        test_fatal("context: %s", bfp8_last_error());

    if (sweep_config) {
        crash_sweep(sweep_config, 500);
        bfp8_context_destroy(cpu);
        bfp8_context_destroy(gpu);
        return test_exit_code("test_gemm_gpu --crash-sweep");
    }
    if (profile) {
        bfp8_qmatrix a = random_device_operand(8192, 8192, BFP8_GRAN_1X128, 1);
        bfp8_qmatrix b2 = random_device_operand(8192, 8192, BFP8_GRAN_128X128, 2);
        bfp8_qmatrix b1 = random_device_operand(8192, 8192, BFP8_GRAN_1X128, 3);
        bfp8_matrix d16 = {gpu_alloc((size_t)8192 * 8192 * 2), BFP8_BF16, 8192, 8192, 8192};
        bfp8_matrix d32 = {gpu_alloc((size_t)8192 * 8192 * 4), BFP8_F32, 8192, 8192, 8192};
        CHECK_OK(bfp8_gemm_1d2d(gpu, &a, &b2, &d16));
        CHECK_OK(bfp8_gemm_1d1d(gpu, &a, &b1, &d32, &d32));
        CHECK_OK(bfp8_context_synchronize(gpu));
        return test_exit_code("test_gemm_gpu --profile");
    }

    /* Ragged shapes (RECIPE.md section 6), hard data. */
    static const int64_t ms[] = {1, 64, 127, 129, 1000};
    static const int64_t ns[] = {128, 2112, 7176};
    static const int64_t ks[] = {128, 1000, 4096};
    uint64_t seed = 100;
    for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 3; ++j) {
            const int64_t k = ks[(i + j) % 3];
            run_case(GEMM_1D2D, ms[i], ns[j], k, BFP8_BF16, 0, TEST_FILL_HARD, seed++);
            if (!small || i == 4) run_case(GEMM_1D2D, ms[i], ns[j], k, BFP8_F32, 0, 0, seed++);
        }
    /* every configuration on ragged shapes: partial tiles at both edges */
    for (int c = 0; c + 1 < NUM_CONFIGS; ++c) {
        use_config(configs[c]);
        if (config_fits(GEMM_1D2D, configs[c])) {
            run_case(GEMM_1D2D, 1000, 2120, 1000, BFP8_BF16, 0, TEST_FILL_HARD, seed++);
            run_case(GEMM_1D2D, 300, 200, 4096, BFP8_F32, 0, 0, seed++);
        }
        if (!config_fits(GEMM_1D1D, configs[c])) continue;
        run_case(GEMM_1D1D, 1000, 136, 4097, BFP8_F32, 1, 0, seed++);
        run_case(GEMM_1D1D, 1000, 136, 4097, BFP8_F32, 2, 0, seed++);
        run_case(GEMM_1D1D, 300, 260, 1000, BFP8_F32, 2, TEST_FILL_HARD, seed++);
        run_case(GEMM_1D1D, 520, 392, 133, BFP8_BF16, 0, TEST_FILL_HARD, seed++);
    }
    /* the last wave split along K (few tiles, long K: every tile split), with
     * slices of one k-block up to the most slices, and ragged edges */
    static const struct { const char *config; int kind; int64_t m, n, k; int accumulate; } splits[] = {
        {"split=16", GEMM_1D2D, 64, 128, 4096, 0},       {"split=2", GEMM_1D2D, 129, 2112, 1000, 0},
        {"bn=192,split=3", GEMM_1D2D, 300, 200, 4096, 0}, {"bm=192,bn=128,split=5", GEMM_1D2D, 1000, 136, 4097, 0},
        {"split=8", GEMM_1D1D, 300, 260, 1000, 2},        {"bm=192,bn=128,split=7", GEMM_1D1D, 520, 392, 4097, 1},
        {"split=1", GEMM_1D1D, 127, 129, 4096, 0},         {"bm=256,bn=112,split=6", GEMM_1D1D, 600, 300, 4097, 1},
        {"bm=256,bn=112,split=1", GEMM_1D1D, 600, 300, 4097, 0}, {"bm=64,bn=32,split=5", GEMM_1D1D, 300, 260, 1000, 2},
        {"bm=64,bn=64,split=16", GEMM_1D1D, 130, 200, 4097, 1}, {"bm=64,bn=64,split=3", GEMM_1D1D, 72, 60, 300, 0},
        /* a full wave of whole tiles (one launch) and a split last wave (another) */
        {"bn=128", GEMM_1D2D, 2048, 1152, 4096, 0}, {"bn=128", GEMM_1D1D, 2048, 1152, 4096, 1},
    };
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; ++i) {
        use_config(splits[i].config);
        run_case(splits[i].kind, splits[i].m, splits[i].n, splits[i].k,
                 splits[i].kind == GEMM_1D2D ? BFP8_BF16 : BFP8_F32, splits[i].accumulate, TEST_FILL_HARD, seed++);
    }
    /* Few rows (1D2D, M <= 16), few tokens or small outputs (1D1D): the
     * small kernel, where the heuristic picks it ("") and forced (small=1)
     * up to its limits, ragged edges (K not a multiple of 16: a masked last
     * chunk), K split over k-warps and over the CTAs of a cluster (1D2D
     * M = 1 and 16 over 56 k-blocks, 1D1D 72 x 60 over 4095 tokens: 32
     * slices, clusters of 4); then turned off (small=0) and forced beyond (1D1D over
     * many tokens, several k-blocks a warp). */
    static const struct { const char *config; int kind; int64_t m, n, k; bfp8_dtype dt; int accumulate; } smalls[] = {
        {"small=1", GEMM_1D2D, 13, 2112, 4104, BFP8_F32, 0},  {"small=1", GEMM_1D2D, 16, 200, 1000, BFP8_BF16, 0},
        {"", GEMM_1D2D, 5, 136, 7168, BFP8_F32, 0},    {"small=1", GEMM_1D2D, 9, 7176, 136, BFP8_BF16, 0},
        {"small=1", GEMM_1D1D, 1000, 136, 17, BFP8_F32, 1},   {"small=1", GEMM_1D1D, 300, 260, 32, BFP8_F32, 2},
        {"", GEMM_1D1D, 520, 392, 1, BFP8_BF16, 0},    {"", GEMM_1D1D, 130, 202, 7, BFP8_F32, 0},
        {"small=1", GEMM_1D1D, 129, 1000, 25, BFP8_F32, 1},   {"small=0", GEMM_1D2D, 1, 2112, 1000, BFP8_BF16, 0},
        {"small=0", GEMM_1D1D, 300, 260, 8, BFP8_F32, 2}, {"small=1", GEMM_1D1D, 200, 136, 1000, BFP8_F32, 2},
        {"small=1", GEMM_1D1D, 72, 260, 300, BFP8_BF16, 0},   {"", GEMM_1D2D, 1, 200, 7160, BFP8_BF16, 0},
        {"small=1", GEMM_1D2D, 16, 200, 7168, BFP8_F32, 0},   {"", GEMM_1D1D, 72, 60, 4095, BFP8_F32, 2},
        {"", GEMM_1D1D, 200, 136, 1000, BFP8_F32, 1},         {"", GEMM_1D1D, 264, 250, 520, BFP8_BF16, 0},
        {"small=1", GEMM_1D1D, 136, 264, 4097, BFP8_F32, 2},
    };
    for (size_t i = 0; i < sizeof smalls / sizeof smalls[0]; ++i) {
        use_config(smalls[i].config);
        run_case(smalls[i].kind, smalls[i].m, smalls[i].n, smalls[i].k, smalls[i].dt, smalls[i].accumulate,
                 i % 2 ? TEST_FILL_HARD : 0, seed++);
    }
    use_config(NULL);
    check_repeatable(GEMM_1D2D, 8, 256, 7168, BFP8_F32, seed++, 3); /* 32 slices: k-warps, a cluster of 4 */
    check_repeatable(GEMM_1D1D, 64, 64, 4096, BFP8_F32, seed++, 3); /* 32 slices: k-warps, a cluster of 4 */
    check_repeatable(GEMM_1D2D, 384, 1024, 8192, BFP8_BF16, seed++, 2);
    check_repeatable(GEMM_1D2D, 384, 1024, 8192, BFP8_F32, seed++, 2); /* the trainer's fprop / dgrad output */
    check_repeatable(GEMM_1D2D, 4096, 6144, 2048, BFP8_F32, seed++, 2);
    check_repeatable(GEMM_1D1D, 512, 1024, 18432, BFP8_F32, seed++, 2);
    /* the tensor-core kernel whole, a split plan (two grids, every tile split
     * into 8, or a full wave then a split one), and the small kernel */
    check_dependent_chain("split=1", 1024, 1024, 2048, seed++, 6);
    check_dependent_chain("split=8", 300, 260, 4096, seed++, 6);
    check_dependent_chain("bn=128", 2048, 1152, 4096, seed++, 6);
    check_dependent_chain("small=1", 72, 60, 4095, seed++, 6);
#if defined(BFP8_WITH_CUDA)
    check_graph_capture(seed++);
    seed++;
#endif
    for (int i = 0; i < NUM_CRASH_SHAPES; ++i) {
        const int64_t *w = crash_shapes[i];
        run_case(GEMM_1D1D, w[0], w[1], w[2], BFP8_F32, 0, TEST_FILL_HARD, seed++);
        if (!small || i < 3) run_case(GEMM_1D1D, w[0], w[1], w[2], BFP8_F32, 1, 0, seed++);
        if (!small) run_case(GEMM_1D1D, w[0], w[1], w[2], BFP8_BF16, 0, 0, seed++);
    }
    if (!small) {
        /* the 1b trainer's largest fprop: 192x128 tiles, 3 stages beside the
         * f32 staging buffers; a stage refilled before its row scales were
         * read changed about one call in eight here (the race that
         * release_stage closes) */
        check_repeatable(GEMM_1D2D, 16384, 11264, 2048, BFP8_F32, seed++, 12);
        run_case(GEMM_1D1D, 512, 1024, 147456, BFP8_F32, 0, 0, seed++);
        /* TARGETS.md shapes, sampled tiles */
        run_case(GEMM_1D2D, 16384, 4096, 4096, BFP8_BF16, 0, 0, seed++);
        run_case(GEMM_1D2D, 4096, 7168, 16384, BFP8_BF16, 0, 0, seed++);
        run_case(GEMM_1D2D, 8192, 8192, 8192, BFP8_BF16, 0, TEST_FILL_HARD, seed++);
        run_case(GEMM_1D1D, 4096, 14336, 16384, BFP8_F32, 0, 0, seed++);
        run_case(GEMM_1D1D, 8192, 8192, 8192, BFP8_F32, 1, 0, seed++);
    }
    printf("lowest seen: same-data %.1f dB (worst tile %.1f dB), unquantized %.1f dB, calc_diff %.2e\n",
           seen.same_db, seen.tile_db, seen.unquant_db, seen.calc_diff);
    if (timing) time_configs(time_filter);
    bfp8_context_destroy(cpu);
    bfp8_context_destroy(gpu);
    return test_exit_code("test_gemm_gpu");
}
