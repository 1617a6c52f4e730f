/*
 * bench_gemm.c - blockfp8's FP8 blockwise GEMMs against the baselines that C
 * can reach, timed in one run on the same random data (docs/TARGETS.md):
 *
 *   bf16           cuBLASLt bf16 GEMM (bfp8_gemm_bf16) of the dequantized
 *                  operands, fp32 accumulate; bf16 out for 1D2D shapes, f32
 *                  accumulate (D += A.B^T) for wgrad shapes
 *   fp8-tensor     cuBLASLt e4m3 with one scale per tensor, bf16 out: the
 *                  ceiling; fp8-tensor-fa with fast accumulation
 *   lt-1d2d        cuBLASLt e4m3, A VEC128_32F (1x128), B BLK128x128_32F, bf16 out
 *   lt-1d1d        cuBLASLt e4m3, A and B VEC128_32F (wgrad); f32 accumulate
 *                  where cuBLASLt offers it, else bf16 out (printed)
 *   bfp8-1d2d      bfp8_gemm_1d2d, bf16 out
 *   bfp8-1d1d-f32  bfp8_gemm_1d1d, f32 accumulate (c aliases d);  -bf16: bf16 out
 *
 * Every shape is also cross-checked: blockfp8 against cuBLASLt on the same
 * fp8 data and scales (SQNR overall and worst 128x128 tile, on the GPU), and
 * both against an fp64 host reference on a few sampled output tiles.
 *
 *   cmake --build build --target bench_gemm
 *   build/bench/gemm/bench_gemm [--quick] [--shape MxNxK]... [--wgrad-shape NxKxM]...
 *                               [--warmup N] [--reps N] [--settle S] [--soak S] [--json FILE]
 *
 * --shape / --wgrad-shape replace the default shapes (wgrad: N x K over M
 * tokens). --settle S (default 1): before a shape is timed, its variants run
 * interleaved for S seconds, so that every shape, the first of the process
 * included, is timed at the clock the GPU holds under sustained load (timed
 * right after the process's setup, an idle GPU ran the first shape's calls
 * at a boost clock: cuBLASLt's 1D1D 4096x4096 over 16384 read 898-1015
 * TFLOP/s there, 834-845 settled, on an H200). --soak S: after
 * the interleaved timing of a shape, each variant alone for S seconds
 * (bench_time_soak), with the SM clock and board power read through NVML:
 * every FP8 GEMM here holds an H200 at its 700 W limit, so each settles at
 * its own clock, which call-by-call interleaving hides.
 * Exit code: 0; 1 when a cross-check fails (below 40 dB, or non-finite) or
 * CUDA breaks; 2 on a setup failure.
 */
#include <cublasLt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_device.h"
#include "bench_lt.h"
#include "bench_util.h"
#include "test_util.h"

#define CHECK_BAR_DB 40.0
#define MAX_SETS 16
#define MAX_SHAPES 32
#define MAX_VARIANTS 5
#define MAX_CHECKS 6
#define SAMPLE_TILES 3

static const size_t kWorkspaceBytes = BENCH_LT_WORKSPACE_BYTES;

static const int64_t kDefaultShapes[][3] = {
    {16384, 4096, 4096}, {16384, 14336, 4096}, {16384, 4096, 14336}, {4096, 7168, 16384},
    {8192, 8192, 8192}};
static const int64_t kDefaultWgradShapes[][3] = { /* N, K, M */
    {4096, 4096, 16384}, {14336, 4096, 16384}, {4096, 14336, 16384}, {8192, 8192, 8192}};

/* ------------------------------------------------------------------------ */
/* Results                                                                   */

typedef struct variant_result {
    const char *name;
    int ran;             /* 1: timed */
    char reason[640];    /* why not */
    bench_timing timing;
    double tflops;
    bench_soak soak; /* --soak; soak.ok: measured */
    double soak_tflops;
} variant_result;

typedef struct check_result {
    char what[96];
    double bar_db;       /* 0: information only */
    int done;
    char reason[256];    /* why not done */
    bench_comparison cmp;
    int failed;
} check_result;

typedef struct problem_result {
    int wgrad;                 /* 0: 1D2D (fprop, dgrad); 1: 1D1D (wgrad) */
    int64_t rows, cols, depth; /* D is rows x cols, the contraction runs over depth */
    int sets;
    char note[512];
    int skipped;               /* the whole shape: reason in note */
    int nvariants;
    variant_result v[MAX_VARIANTS];
    int nchecks;
    check_result checks[MAX_CHECKS];
} problem_result;

/* ------------------------------------------------------------------------ */
/* Device memory of one shape, freed together; allocation failures are      */
/* reported, not fatal (a custom shape may not fit).                          */

typedef struct device_pool {
    void *ptrs[256];
    int count;
    int failed;
    size_t failed_bytes;
} device_pool;

static void *pool_alloc(device_pool *pool, size_t bytes) {
    if (pool->failed || pool->count == 256) {
        pool->failed = 1;
        return NULL;
    }
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) {
        cudaGetLastError();
        pool->failed = 1;
        pool->failed_bytes = bytes;
        return NULL;
    }
    pool->ptrs[pool->count++] = p;
    return p;
}

static void pool_free_all(device_pool *pool) {
    for (int i = 0; i < pool->count; ++i) cudaFree(pool->ptrs[i]);
    pool->count = 0;
    pool->failed = 0;
}

/* ------------------------------------------------------------------------ */
/* One shape                                                                 */

typedef struct operand_set {
    bfp8_qmatrix a, b;          /* canonical layouts */
    const float *a_lt_scales;   /* what cuBLASLt reads: a.scales or a repacked copy */
    const float *b_lt_scales;
    uint16_t *a_bf16, *b_bf16;  /* dequantized; token-major (transposed) for wgrad */
} operand_set;

typedef struct bench_env {
    bfp8_context *ctx;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;
    int warmup, reps;
    double settle_seconds; /* --settle: interleaved calls before a shape is timed */
    double soak_seconds;   /* --soak: 0 = none */
    bench_device_info device;
} bench_env;

typedef struct problem {
    bench_env *env;
    int wgrad;
    int64_t rows, cols, depth;
    int sets;
    operand_set set[MAX_SETS];
    float *unit_scales;          /* two device floats = 1, for fp8-tensor */
    float *c0;                   /* wgrad: the f32 C that accumulation starts from */
    void *d_bf16base;            /* bf16 (1D2D) or f32 accumulate (wgrad) */
    void *d_tensor;              /* bf16 */
    void *d_lt;                  /* lt-1d2d bf16 / lt-1d1d f32 (on c0) or bf16 */
    void *d_lt_plain;            /* wgrad: lt-1d1d of a.b^T alone (== d_lt when bf16) */
    bfp8_dtype lt_dtype;
    void *d_bfp8;                /* bfp8-1d2d bf16 / bfp8-1d1d-f32 */
    void *d_bfp8_bf16;           /* bfp8-1d1d-bf16 */
    lt_gemm lt_tensor, lt_tensor_fa, lt_block;
} problem;

static int bfp8_call_failed(bfp8_status status, char *reason, size_t size) {
    if (status == BFP8_OK) return 0;
    snprintf(reason, size, "%s: %s", bfp8_status_name(status), bfp8_last_error());
    return 1;
}

static int lt_call_failed(cublasStatus_t status, char *reason, size_t size) {
    if (status == CUBLAS_STATUS_SUCCESS) return 0;
    snprintf(reason, size, "cublasLtMatmul: %s", cublasLtGetStatusName(status));
    return 1;
}

static int call_bf16(void *arg, int set, char *reason, size_t size) {
    problem *p = arg;
    const operand_set *s = &p->set[set];
    if (!p->wgrad) {
        bfp8_matrix a = {s->a_bf16, BFP8_BF16, p->rows, p->depth, p->depth};
        bfp8_matrix b = {s->b_bf16, BFP8_BF16, p->cols, p->depth, p->depth};
        bfp8_matrix d = {p->d_bf16base, BFP8_BF16, p->rows, p->cols, p->cols};
        return bfp8_call_failed(bfp8_gemm_bf16(p->env->ctx, &a, 0, &b, 0, NULL, &d), reason, size);
    }
    /* wgrad as a bf16 recipe runs it: dW[N, K] += dy^T x with dy (M x N) and x (M x K) token-major. */
    bfp8_matrix a = {s->a_bf16, BFP8_BF16, p->depth, p->rows, p->rows};
    bfp8_matrix b = {s->b_bf16, BFP8_BF16, p->depth, p->cols, p->cols};
    bfp8_matrix d = {p->d_bf16base, BFP8_F32, p->rows, p->cols, p->cols};
    return bfp8_call_failed(bfp8_gemm_bf16(p->env->ctx, &a, 1, &b, 1, &d, &d), reason, size);
}

static int call_lt_tensor_impl(problem *p, lt_gemm *g, int set, char *reason, size_t size) {
    const operand_set *s = &p->set[set];
    return lt_call_failed(lt_gemm_run(g, p->env->lt, s->a.data, &p->unit_scales[0], s->b.data,
                                      &p->unit_scales[1], p->d_tensor, p->env->workspace,
                                      p->env->stream),
                          reason, size);
}
static int call_lt_tensor(void *arg, int set, char *reason, size_t size) {
    problem *p = arg;
    return call_lt_tensor_impl(p, &p->lt_tensor, set, reason, size);
}
static int call_lt_tensor_fa(void *arg, int set, char *reason, size_t size) {
    problem *p = arg;
    return call_lt_tensor_impl(p, &p->lt_tensor_fa, set, reason, size);
}

static int lt_block_into(problem *p, int set, void *d, char *reason, size_t size) {
    const operand_set *s = &p->set[set];
    return lt_call_failed(lt_gemm_run(&p->lt_block, p->env->lt, s->a.data, s->a_lt_scales, s->b.data,
                                      s->b_lt_scales, d, p->env->workspace, p->env->stream),
                          reason, size);
}
static int call_lt_block(void *arg, int set, char *reason, size_t size) {
    problem *p = arg;
    return lt_block_into(p, set, p->d_lt, reason, size);
}

static int call_bfp8(void *arg, int set, char *reason, size_t size) {
    problem *p = arg;
    const operand_set *s = &p->set[set];
    if (!p->wgrad) {
        bfp8_matrix d = {p->d_bfp8, BFP8_BF16, p->rows, p->cols, p->cols};
        return bfp8_call_failed(bfp8_gemm_1d2d(p->env->ctx, &s->a, &s->b, &d), reason, size);
    }
    bfp8_matrix d = {p->d_bfp8, BFP8_F32, p->rows, p->cols, p->cols};
    return bfp8_call_failed(bfp8_gemm_1d1d(p->env->ctx, &s->a, &s->b, &d, &d), reason, size);
}

static int call_bfp8_bf16(void *arg, int set, char *reason, size_t size) {
    problem *p = arg;
    const operand_set *s = &p->set[set];
    bfp8_matrix d = {p->d_bfp8_bf16, BFP8_BF16, p->rows, p->cols, p->cols};
    return bfp8_call_failed(bfp8_gemm_1d1d(p->env->ctx, &s->a, &s->b, NULL, &d), reason, size);
}

/* ------------------------------------------------------------------------ */

/* Copies q's scales into the layout cuBLASLt reads, when they differ. */
static const float *scales_for_cublaslt(device_pool *pool, const bfp8_qmatrix *q, cudaStream_t stream,
                                        int *repacked) {
    const int64_t kblocks = bench_ceil_div(q->cols, 128);
    if (q->granularity == BFP8_GRAN_1X128) {
        if (q->scale_ld == q->rows) return q->scales;
        float *packed = pool_alloc(pool, (size_t)(kblocks * q->rows) * sizeof(float));
        if (!packed) return NULL;
        BENCH_CUDA_OR_DIE(cudaMemcpy2DAsync(packed, (size_t)q->rows * 4, q->scales, (size_t)q->scale_ld * 4,
                                            (size_t)q->rows * 4, (size_t)kblocks, cudaMemcpyDeviceToDevice,
                                            stream));
        *repacked = 1;
        return packed;
    }
    const int64_t ld4 = bench_round_up(kblocks, 4), row_blocks = bench_ceil_div(q->rows, 128);
    if (q->scale_ld == ld4) return q->scales;
    float *packed = pool_alloc(pool, (size_t)(ld4 * row_blocks) * sizeof(float));
    if (!packed) return NULL;
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(packed, 0, (size_t)(ld4 * row_blocks) * sizeof(float), stream));
    BENCH_CUDA_OR_DIE(cudaMemcpy2DAsync(packed, (size_t)ld4 * 4, q->scales, (size_t)q->scale_ld * 4,
                                        (size_t)kblocks * 4, (size_t)row_blocks, cudaMemcpyDeviceToDevice,
                                        stream));
    *repacked = 1;
    return packed;
}

static int alloc_qmatrix(device_pool *pool, bfp8_qmatrix *q, int64_t rows, int64_t cols,
                         bfp8_granularity gran, uint64_t seed, cudaStream_t stream) {
    size_t data_bytes = 0, scale_bytes = 0;
    BENCH_BFP8_OR_DIE(bfp8_qmatrix_layout(q, rows, cols, gran, &data_bytes, &scale_bytes));
    q->data = pool_alloc(pool, data_bytes);
    q->scales = pool_alloc(pool, scale_bytes);
    if (!q->data || !q->scales) return 0;
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(q->data, 0, data_bytes, stream));
    BENCH_CUDA_OR_DIE(bench_fill_e4m3(q->data, rows, cols, q->ld, seed, stream));
    BENCH_CUDA_OR_DIE(bench_fill_scales(q->scales, (int64_t)(scale_bytes / sizeof(float)), seed + 1, stream));
    return 1;
}

static void add_check(problem_result *r, const char *what, double bar_db) {
    check_result *c = &r->checks[r->nchecks++];
    memset(c, 0, sizeof *c);
    snprintf(c->what, sizeof c->what, "%s", what);
    c->bar_db = bar_db;
}

static int judge(check_result *c) {
    c->done = 1;
    c->failed = c->bar_db > 0.0 && (c->cmp.nonfinite > 0 || !(c->cmp.overall_db >= c->bar_db) ||
                                    !(c->cmp.worst_tile_db >= c->bar_db));
    return c->failed;
}

/* GPU comparison of two device outputs of the problem's shape. */
static void compare_outputs(problem *p, check_result *c, const void *ref, bfp8_dtype ref_dtype,
                            const void *out, bfp8_dtype out_dtype) {
    const cudaError_t err = bench_compare(ref, ref_dtype, p->cols, out, out_dtype, p->cols, p->rows,
                                          p->cols, p->env->stream, &c->cmp);
    if (err != cudaSuccess) {
        snprintf(c->reason, sizeof c->reason, "bench_compare: %s", cudaGetErrorName(err));
        return;
    }
    judge(c);
}

/* fp64 host reference of the same fp8 data and scales on SAMPLE_TILES
 * 128x128 output tiles (first, middle, last), against a device output. */
static void check_against_fp64(problem *p, check_result *c, const void *out, bfp8_dtype out_dtype) {
    const operand_set *s = &p->set[0];
    const int64_t kblocks = bench_ceil_div(p->depth, 128);
    const int64_t tiles_r = bench_ceil_div(p->rows, 128), tiles_c = bench_ceil_div(p->cols, 128);
    const int64_t picks[SAMPLE_TILES][2] = {{0, 0}, {tiles_r / 2, tiles_c / 2}, {tiles_r - 1, tiles_c - 1}};
    const size_t esize = bfp8_dtype_size(out_dtype);
    cudaStream_t stream = p->env->stream;
    double signal = 0.0, noise = 0.0, xy = 0.0, yy = 0.0;
    c->cmp.worst_tile_db = INFINITY;
    c->cmp.nonfinite = 0;
    for (int t = 0; t < SAMPLE_TILES; ++t) {
        const int64_t r0 = picks[t][0] * 128, c0 = picks[t][1] * 128;
        const int64_t nr = p->rows - r0 < 128 ? p->rows - r0 : 128;
        const int64_t nc = p->cols - c0 < 128 ? p->cols - c0 : 128;
        /* Host views of rows [r0, r0 + nr) of a and [c0, c0 + nc) of b. */
        bfp8_qmatrix ha = s->a, hb = s->b;
        ha.rows = nr; ha.ld = p->depth;
        hb.rows = nc; hb.ld = p->depth;
        ha.data = test_malloc((size_t)(nr * p->depth));
        hb.data = test_malloc((size_t)(nc * p->depth));
        BENCH_CUDA_OR_DIE(cudaMemcpy2DAsync(ha.data, (size_t)p->depth, s->a.data + r0 * s->a.ld,
                                            (size_t)s->a.ld, (size_t)p->depth, (size_t)nr,
                                            cudaMemcpyDeviceToHost, stream));
        BENCH_CUDA_OR_DIE(cudaMemcpy2DAsync(hb.data, (size_t)p->depth, s->b.data + c0 * s->b.ld,
                                            (size_t)s->b.ld, (size_t)p->depth, (size_t)nc,
                                            cudaMemcpyDeviceToHost, stream));
        ha.scale_ld = bench_round_up(nr, 4);
        ha.scales = test_malloc((size_t)(kblocks * ha.scale_ld) * sizeof(float));
        BENCH_CUDA_OR_DIE(cudaMemcpy2DAsync(ha.scales, (size_t)ha.scale_ld * 4, s->a.scales + r0,
                                            (size_t)s->a.scale_ld * 4, (size_t)nr * 4, (size_t)kblocks,
                                            cudaMemcpyDeviceToHost, stream));
        if (s->b.granularity == BFP8_GRAN_1X128) {
            hb.scale_ld = bench_round_up(nc, 4);
            hb.scales = test_malloc((size_t)(kblocks * hb.scale_ld) * sizeof(float));
            BENCH_CUDA_OR_DIE(cudaMemcpy2DAsync(hb.scales, (size_t)hb.scale_ld * 4, s->b.scales + c0,
                                                (size_t)s->b.scale_ld * 4, (size_t)nc * 4,
                                                (size_t)kblocks, cudaMemcpyDeviceToHost, stream));
        } else { /* c0 is a multiple of 128: the tile's b rows are one block row */
            hb.scale_ld = kblocks;
            hb.scales = test_malloc((size_t)kblocks * sizeof(float));
            BENCH_CUDA_OR_DIE(cudaMemcpyAsync(hb.scales, s->b.scales + (c0 / 128) * s->b.scale_ld,
                                              (size_t)kblocks * 4, cudaMemcpyDeviceToHost, stream));
        }
        uint8_t *tile = test_malloc((size_t)(nr * nc) * esize);
        BENCH_CUDA_OR_DIE(cudaMemcpy2DAsync(tile, (size_t)nc * esize,
                                            (const uint8_t *)out + (r0 * p->cols + c0) * (int64_t)esize,
                                            (size_t)p->cols * esize, (size_t)nc * esize, (size_t)nr,
                                            cudaMemcpyDeviceToHost, stream));
        BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));

        double *ref = test_malloc((size_t)(nr * nc) * sizeof(double));
        test_ref_gemm_q_f64(&ha, &hb, 0, nr, 0, nc, ref, nc);
        double tile_signal = 0.0, tile_noise = 0.0;
        int64_t tile_nonfinite = 0;
        for (int64_t i = 0; i < nr * nc; ++i) {
            const double y = out_dtype == BFP8_F32 ? ((const float *)tile)[i]
                                                   : bfp8_bf16_to_f32(((const uint16_t *)tile)[i]);
            if (!isfinite(y)) {
                ++tile_nonfinite;
                continue;
            }
            tile_signal += ref[i] * ref[i];
            tile_noise += (ref[i] - y) * (ref[i] - y);
            xy += ref[i] * y;
            yy += y * y;
        }
        signal += tile_signal;
        noise += tile_noise;
        c->cmp.nonfinite += tile_nonfinite;
        const double db = tile_nonfinite ? -INFINITY
                          : tile_noise == 0.0 ? INFINITY
                          : tile_signal == 0.0 ? -INFINITY
                                               : 10.0 * log10(tile_signal / tile_noise);
        if (db < c->cmp.worst_tile_db || t == 0) {
            c->cmp.worst_tile_db = db;
            c->cmp.worst_tile_row = picks[t][0];
            c->cmp.worst_tile_col = picks[t][1];
        }
        free(ha.data); free(hb.data); free(ha.scales); free(hb.scales); free(tile); free(ref);
    }
    c->cmp.overall_db = noise == 0.0 ? INFINITY : signal == 0.0 ? -INFINITY : 10.0 * log10(signal / noise);
    c->cmp.calc_diff = signal + yy == 0.0 ? 0.0 : 1.0 - 2.0 * xy / (signal + yy);
    judge(c);
}

/* Runs fn once on set 0 (the cross-check run) and drains the stream: a
 * variant whose call fails is n/a; a CUDA error that outlives the call
 * (a faulting kernel poisons the context) ends the benchmark. */
static int first_call(problem *p, variant_result *v, bench_call_fn fn) {
    if (fn(p, 0, v->reason, sizeof v->reason) != 0) {
        cudaGetLastError();
        return 0;
    }
    const cudaError_t err = cudaStreamSynchronize(p->env->stream);
    if (err != cudaSuccess) {
        fprintf(stderr, "FATAL: %s left a CUDA error: %s (%s); the context is unusable\n", v->name,
                cudaGetErrorName(err), cudaGetErrorString(err));
        snprintf(v->reason, sizeof v->reason, "CUDA error %s", cudaGetErrorName(err));
        return -1;
    }
    v->ran = 1; /* called fine; timed below */
    return 1;
}

static int64_t input_set_bytes(const problem *p) {
    size_t a_data = 0, a_scales = 0, b_data = 0, b_scales = 0;
    bfp8_qmatrix q;
    bfp8_qmatrix_layout(&q, p->rows, p->depth, BFP8_GRAN_1X128, &a_data, &a_scales);
    bfp8_qmatrix_layout(&q, p->cols, p->depth, p->wgrad ? BFP8_GRAN_1X128 : BFP8_GRAN_128X128,
                        &b_data, &b_scales);
    return (int64_t)(a_data + a_scales + b_data + b_scales);
}

static void print_variant(const variant_result *v) {
    if (v->ran)
        printf("  %-16s %9.3f ms  %8.1f TFLOP/s  (min %.3f ms)\n", v->name, v->timing.median_ms,
               v->tflops, v->timing.min_ms);
    else
        printf("  %-16s n/a: %s\n", v->name, v->reason);
}

static void print_check(const check_result *c) {
    if (!c->done) {
        printf("  check %-34s n/a%s%s\n", c->what, c->reason[0] ? ": " : "", c->reason);
        return;
    }
    printf("  check %-34s SQNR %6.1f dB, worst tile %6.1f dB (%lld,%lld), calc_diff %.2e%s%s\n",
           c->what, c->cmp.overall_db, c->cmp.worst_tile_db, (long long)c->cmp.worst_tile_row,
           (long long)c->cmp.worst_tile_col, c->cmp.calc_diff,
           c->cmp.nonfinite ? ", NON-FINITE values" : "",
           c->failed ? "  << FAILED" : c->bar_db > 0.0 ? "  ok" : "  (info)");
}

/* Returns 0, or -1 when CUDA broke (stop everything). */
static int run_problem(bench_env *env, problem_result *r) {
    problem p;
    memset(&p, 0, sizeof p);
    p.env = env;
    p.wgrad = r->wgrad;
    p.rows = r->rows;
    p.cols = r->cols;
    p.depth = r->depth;
    cudaStream_t stream = env->stream;
    const double flops = 2.0 * (double)p.rows * (double)p.cols * (double)p.depth;
    device_pool pool;
    memset(&pool, 0, sizeof pool);

    /* Rotate input sets when one set would sit in L2 between calls. */
    const int64_t set_bytes = input_set_bytes(&p);
    const int64_t bf16_bytes = 2 * (p.rows + p.cols) * p.depth;
    const int64_t l2 = env->device.l2_bytes > 0 ? env->device.l2_bytes : (60 << 20);
    p.sets = set_bytes >= 2 * l2 ? 1 : (int)((2 * l2 + set_bytes - 1) / set_bytes);
    if (p.sets > MAX_SETS) p.sets = MAX_SETS;
    size_t free_bytes = 0, total_bytes = 0;
    BENCH_CUDA_OR_DIE(cudaMemGetInfo(&free_bytes, &total_bytes));
    const int64_t out_bytes = 8 * 4 * p.rows * p.cols; /* generous: the outputs and c0 */
    while (p.sets > 1 && p.sets * (set_bytes + bf16_bytes) + out_bytes > (int64_t)(free_bytes * 0.8)) --p.sets;
    r->sets = p.sets;

    printf("\n== %s %lldx%lldx%lld %s (%d input set%s) ==\n", p.wgrad ? "wgrad 1D1D" : "1D2D",
           (long long)p.rows, (long long)p.cols, (long long)p.depth,
           p.wgrad ? "(N x K over M)" : "(M x N x K)", p.sets, p.sets > 1 ? "s" : "");

    /* Inputs: fp8 data and scales, cuBLASLt's view of the scales, dequantized bf16. */
    int repacked = 0;
    for (int i = 0; i < p.sets && !pool.failed; ++i) {
        operand_set *s = &p.set[i];
        const uint64_t seed = 1000u * (uint64_t)(i + 1);
        if (!alloc_qmatrix(&pool, &s->a, p.rows, p.depth, BFP8_GRAN_1X128, seed, stream)) break;
        if (!alloc_qmatrix(&pool, &s->b, p.cols, p.depth, p.wgrad ? BFP8_GRAN_1X128 : BFP8_GRAN_128X128,
                           seed + 500, stream))
            break;
        s->a_lt_scales = scales_for_cublaslt(&pool, &s->a, stream, &repacked);
        s->b_lt_scales = scales_for_cublaslt(&pool, &s->b, stream, &repacked);
        s->a_bf16 = pool_alloc(&pool, (size_t)(p.rows * p.depth) * 2);
        s->b_bf16 = pool_alloc(&pool, (size_t)(p.cols * p.depth) * 2);
        if (pool.failed) break;
        /* wgrad's bf16 operands are token-major, as a bf16 recipe holds dy and x. */
        BENCH_CUDA_OR_DIE(bench_dequantize_bf16(&s->a, s->a_bf16, p.wgrad ? p.rows : p.depth, p.wgrad, stream));
        BENCH_CUDA_OR_DIE(bench_dequantize_bf16(&s->b, s->b_bf16, p.wgrad ? p.cols : p.depth, p.wgrad, stream));
    }
    const size_t n_out = (size_t)(p.rows * p.cols);
    p.unit_scales = pool_alloc(&pool, 2 * sizeof(float));
    p.d_bf16base = pool_alloc(&pool, n_out * (p.wgrad ? 4 : 2));
    p.d_lt = pool_alloc(&pool, n_out * 4);
    if (!p.wgrad) {
        p.d_tensor = pool_alloc(&pool, n_out * 2);
        p.d_bfp8 = pool_alloc(&pool, n_out * 2);
    } else {
        p.c0 = pool_alloc(&pool, n_out * 4);
        p.d_lt_plain = pool_alloc(&pool, n_out * 4);
        p.d_bfp8 = pool_alloc(&pool, n_out * 4);
        p.d_bfp8_bf16 = pool_alloc(&pool, n_out * 2);
    }
    if (pool.failed) {
        snprintf(r->note, sizeof r->note, "skipped: out of device memory (a %zu-byte allocation failed)",
                 pool.failed_bytes);
        r->skipped = 1;
        printf("  %s\n", r->note);
        pool_free_all(&pool);
        return 0;
    }
    const float ones[2] = {1.0f, 1.0f};
    BENCH_CUDA_OR_DIE(cudaMemcpyAsync(p.unit_scales, ones, sizeof ones, cudaMemcpyHostToDevice, stream));
    if (p.wgrad) BENCH_CUDA_OR_DIE(bench_fill_normal(p.c0, BFP8_F32, p.rows, p.cols, p.cols, 64.0f, 77, stream));
    BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));

    /* cuBLASLt plans. */
    const operand_set *s0 = &p.set[0];
    lt_gemm_spec spec = {p.rows, p.cols, p.depth, s0->a.ld, s0->b.ld, p.cols,
                         CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                         p.wgrad ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                 : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                         s0->a_lt_scales, s0->b_lt_scales, CUDA_R_16BF, 0, 0};
    const char *lt_out = "bf16";
    if (!p.wgrad) {
        lt_gemm_create(&p.lt_block, env->lt, &spec);
        lt_gemm_spec tensor = spec;
        tensor.a_scale_mode = tensor.b_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
        tensor.a_scales = &p.unit_scales[0];
        tensor.b_scales = &p.unit_scales[1];
        lt_gemm_create(&p.lt_tensor, env->lt, &tensor);
        tensor.fast_accum = 1;
        lt_gemm_create(&p.lt_tensor_fa, env->lt, &tensor);
        p.lt_dtype = BFP8_BF16;
    } else {
        spec.d_type = CUDA_R_32F;
        spec.accumulate = 1;
        lt_out = "f32 accumulate";
        p.lt_dtype = BFP8_F32;
        if (!lt_gemm_create(&p.lt_block, env->lt, &spec)) {
            printf("  lt-1d1d with f32 accumulate: n/a (%s); trying bf16 out\n", p.lt_block.reason);
            spec.d_type = CUDA_R_16BF;
            spec.accumulate = 0;
            lt_out = "bf16";
            p.lt_dtype = BFP8_BF16;
            lt_gemm_create(&p.lt_block, env->lt, &spec);
        }
    }
    snprintf(r->note, sizeof r->note, "%s%s%s", p.wgrad ? "lt-1d1d out: " : "", p.wgrad ? lt_out : "",
             repacked ? (p.wgrad ? "; scales repacked for cuBLASLt" : "scales repacked for cuBLASLt") : "");
    if (r->note[0]) printf("  note: %s\n", r->note);

    /* The variants of this kind. */
    typedef struct variant_def { const char *name; bench_call_fn fn; lt_gemm *plan; } variant_def;
    const variant_def defs_1d2d[] = {{"bf16", call_bf16, NULL},
                                     {"fp8-tensor", call_lt_tensor, &p.lt_tensor},
                                     {"fp8-tensor-fa", call_lt_tensor_fa, &p.lt_tensor_fa},
                                     {"lt-1d2d", call_lt_block, &p.lt_block},
                                     {"bfp8-1d2d", call_bfp8, NULL}};
    const variant_def defs_wgrad[] = {{"bf16", call_bf16, NULL},
                                      {"lt-1d1d", call_lt_block, &p.lt_block},
                                      {"bfp8-1d1d-f32", call_bfp8, NULL},
                                      {"bfp8-1d1d-bf16", call_bfp8_bf16, NULL}};
    const variant_def *defs = p.wgrad ? defs_wgrad : defs_1d2d;
    r->nvariants = p.wgrad ? 4 : 5;
    enum { V_BF16 = 0 };
    const int v_lt = p.wgrad ? 1 : 3, v_bfp8 = p.wgrad ? 2 : 4, v_bfp8_bf16 = 3;

    /* Cross-check run: every output poisoned (NaN), then one call each on set 0. */
    const size_t d_bytes_bf16base = n_out * (p.wgrad ? 4 : 2);
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(p.d_bf16base, p.wgrad ? 0 : 0xff, d_bytes_bf16base, stream));
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(p.d_lt, 0xff, n_out * 4, stream));
    if (p.wgrad) {
        BENCH_CUDA_OR_DIE(cudaMemsetAsync(p.d_lt_plain, 0, n_out * 4, stream));
        BENCH_CUDA_OR_DIE(cudaMemsetAsync(p.d_bfp8_bf16, 0xff, n_out * 2, stream));
        /* Accumulating outputs start from c0 when cuBLASLt accumulates too, else from zero. */
        if (p.lt_dtype == BFP8_F32) {
            BENCH_CUDA_OR_DIE(cudaMemcpyAsync(p.d_lt, p.c0, n_out * 4, cudaMemcpyDeviceToDevice, stream));
            BENCH_CUDA_OR_DIE(cudaMemcpyAsync(p.d_bfp8, p.c0, n_out * 4, cudaMemcpyDeviceToDevice, stream));
        } else {
            BENCH_CUDA_OR_DIE(cudaMemsetAsync(p.d_bfp8, 0, n_out * 4, stream));
        }
    } else {
        BENCH_CUDA_OR_DIE(cudaMemsetAsync(p.d_tensor, 0xff, n_out * 2, stream));
        BENCH_CUDA_OR_DIE(cudaMemsetAsync(p.d_bfp8, 0xff, n_out * 2, stream));
    }
    for (int i = 0; i < r->nvariants; ++i) {
        variant_result *v = &r->v[i];
        memset(v, 0, sizeof *v);
        v->name = defs[i].name;
        if (defs[i].plan && !defs[i].plan->ok) {
            snprintf(v->reason, sizeof v->reason, "%s", defs[i].plan->reason);
            continue;
        }
        if (first_call(&p, v, defs[i].fn) < 0) {
            pool_free_all(&pool);
            return -1;
        }
    }
    /* wgrad with an f32 cuBLASLt: a.b^T alone, for the outputs that start from zero. */
    const void *lt_plain = p.d_lt;
    if (p.wgrad && p.lt_dtype == BFP8_F32 && r->v[v_lt].ran) {
        char reason[256];
        if (lt_block_into(&p, 0, p.d_lt_plain, reason, sizeof reason) != 0)
            bench_die("lt-1d1d into a second buffer failed after the first call worked: %s", reason);
        BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));
        lt_plain = p.d_lt_plain;
    }

    /* Cross-checks. */
    const variant_result *lt = &r->v[v_lt], *bfp8 = &r->v[v_bfp8];
    if (!p.wgrad) {
        add_check(r, "bfp8-1d2d vs lt-1d2d", CHECK_BAR_DB);
        if (bfp8->ran && lt->ran)
            compare_outputs(&p, &r->checks[r->nchecks - 1], p.d_lt, BFP8_BF16, p.d_bfp8, BFP8_BF16);
        add_check(r, "bf16 vs lt-1d2d", 0.0);
        if (r->v[V_BF16].ran && lt->ran)
            compare_outputs(&p, &r->checks[r->nchecks - 1], p.d_lt, BFP8_BF16, p.d_bf16base, BFP8_BF16);
        add_check(r, "lt-1d2d vs fp64 (3 tiles)", CHECK_BAR_DB);
        if (lt->ran) check_against_fp64(&p, &r->checks[r->nchecks - 1], p.d_lt, BFP8_BF16);
        add_check(r, "bfp8-1d2d vs fp64 (3 tiles)", CHECK_BAR_DB);
        if (bfp8->ran) check_against_fp64(&p, &r->checks[r->nchecks - 1], p.d_bfp8, BFP8_BF16);
    } else {
        const variant_result *bfp8_bf16 = &r->v[v_bfp8_bf16];
        add_check(r, p.lt_dtype == BFP8_F32 ? "bfp8-1d1d-f32 vs lt-1d1d (on c0)" : "bfp8-1d1d-f32 vs lt-1d1d",
                  CHECK_BAR_DB);
        if (bfp8->ran && lt->ran)
            compare_outputs(&p, &r->checks[r->nchecks - 1], p.d_lt, p.lt_dtype, p.d_bfp8, BFP8_F32);
        add_check(r, "bfp8-1d1d-bf16 vs lt-1d1d", CHECK_BAR_DB);
        if (bfp8_bf16->ran && lt->ran)
            compare_outputs(&p, &r->checks[r->nchecks - 1], lt_plain, p.lt_dtype, p.d_bfp8_bf16, BFP8_BF16);
        add_check(r, "bf16 vs lt-1d1d", 0.0);
        if (r->v[V_BF16].ran && lt->ran)
            compare_outputs(&p, &r->checks[r->nchecks - 1], lt_plain, p.lt_dtype, p.d_bf16base, BFP8_F32);
        add_check(r, "lt-1d1d vs fp64 (3 tiles)", CHECK_BAR_DB);
        if (lt->ran) check_against_fp64(&p, &r->checks[r->nchecks - 1], lt_plain, p.lt_dtype);
        add_check(r, "bfp8-1d1d-bf16 vs fp64 (3 tiles)", CHECK_BAR_DB);
        if (bfp8_bf16->ran) check_against_fp64(&p, &r->checks[r->nchecks - 1], p.d_bfp8_bf16, BFP8_BF16);
    }

    /* Timings: every variant that ran, interleaved call by call (bench_time_rounds);
     * if that fails, each one alone, so the failing one is named. */
    bench_call_fn round_fns[8];
    void *round_args[8];
    bench_timing round_timings[8];
    int round_of[8], nround = 0;
    for (int i = 0; i < r->nvariants; ++i)
        if (r->v[i].ran) {
            round_of[nround] = i;
            round_fns[nround] = defs[i].fn;
            round_args[nround++] = &p;
        }
    int rounds_ok = nround > 0;
    if (nround > 0) {
        if (env->settle_seconds > 0.0)
            bench_settle_rounds(round_fns, round_args, nround, p.sets, env->settle_seconds, stream);
        bench_time_rounds(round_fns, round_args, nround, p.sets, env->warmup, env->reps, stream, round_timings);
        rounds_ok = round_timings[0].ok;
        for (int j = 0; j < nround && rounds_ok; ++j) r->v[round_of[j]].timing = round_timings[j];
        if (!rounds_ok) {
            printf("  note: interleaved timing failed (%s); timing each variant alone\n", round_timings[0].reason);
            BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));
        }
    }
    for (int i = 0; i < r->nvariants; ++i) {
        variant_result *v = &r->v[i];
        if (v->ran) {
            if (!rounds_ok) v->timing = bench_time(defs[i].fn, &p, p.sets, env->warmup, env->reps, stream);
            if (!v->timing.ok) {
                v->ran = 0;
                char why[sizeof v->timing.reason];
                memcpy(why, v->timing.reason, sizeof why);
                snprintf(v->reason, sizeof v->reason, "while timing: %s", why);
                const cudaError_t err = cudaStreamSynchronize(stream);
                if (err != cudaSuccess) {
                    fprintf(stderr, "FATAL: %s left a CUDA error while timing: %s\n", v->name,
                            cudaGetErrorName(err));
                    pool_free_all(&pool);
                    return -1;
                }
            } else {
                v->tflops = bench_tflops(flops, v->timing.median_ms);
            }
        }
        print_variant(v);
    }
    for (int i = 0; i < r->nchecks; ++i) print_check(&r->checks[i]);
    for (int i = 0; i < r->nvariants && env->soak_seconds > 0.0; ++i) {
        variant_result *v = &r->v[i];
        if (!v->ran) continue;
        v->soak = bench_time_soak(defs[i].fn, &p, p.sets, env->soak_seconds, stream, &env->device);
        if (!v->soak.ok) {
            printf("  soak %-16s failed\n", v->name);
            continue;
        }
        v->soak_tflops = bench_tflops(flops, v->soak.ms_per_call);
        printf("  soak %-16s %8.1f TFLOP/s alone for %.1f s", v->name, v->soak_tflops, v->soak.seconds);
        if (v->soak.samples)
            printf(", SM %4.0f MHz, %3.0f W: %.3f TFLOP/s per GHz", v->soak.sm_clock_mhz, v->soak.watts,
                   1e3 * v->soak_tflops / v->soak.sm_clock_mhz);
        printf("\n");
    }

    lt_gemm_destroy(&p.lt_block);
    lt_gemm_destroy(&p.lt_tensor);
    lt_gemm_destroy(&p.lt_tensor_fa);
    pool_free_all(&pool);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Report                                                                    */

static const variant_result *find_variant(const problem_result *r, const char *name) {
    for (int i = 0; i < r->nvariants; ++i)
        if (strcmp(r->v[i].name, name) == 0) return &r->v[i];
    return NULL;
}

/* Speed ratio num/den (as TFLOP/s), NAN when either did not run. */
static double speedup(const problem_result *r, const char *num, const char *den) {
    const variant_result *a = find_variant(r, num), *b = find_variant(r, den);
    if (!a || !b || !a->ran || !b->ran || a->tflops <= 0.0) return NAN;
    return a->tflops / b->tflops;
}

static void print_cell(double v, const char *fmt, int width) {
    if (isfinite(v)) printf(fmt, width, v); /* fmt starts with the separating space */
    else printf(" %*s", width, "n/a");
}

static double tflops_of(const problem_result *r, const char *name) {
    const variant_result *v = find_variant(r, name);
    return v && v->ran ? v->tflops : NAN;
}

static double check_db(const problem_result *r, int index) {
    return index < r->nchecks && r->checks[index].done ? r->checks[index].cmp.worst_tile_db : NAN;
}

static void print_tables(const problem_result *results, int count) {
    printf("\n==== Summary: TFLOP/s (2MNK / median time) ====\n");
    printf("1D2D, bf16 out          %9s %9s %9s %9s %9s %8s %9s %10s %10s\n", "bf16", "fp8-tens",
           "fp8-t-fa", "lt-1d2d", "bfp8-1d2d", "bfp8/lt", "bfp8/bf16", "bfp8~lt dB", "lt~fp64 dB");
    for (int i = 0; i < count; ++i) {
        const problem_result *r = &results[i];
        if (r->wgrad) continue;
        char shape[64];
        snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)r->rows, (long long)r->cols,
                 (long long)r->depth);
        printf("%-23s", shape);
        if (r->skipped) {
            printf(" %s\n", r->note);
            continue;
        }
        print_cell(tflops_of(r, "bf16"), " %*.1f", 9);
        print_cell(tflops_of(r, "fp8-tensor"), " %*.1f", 9);
        print_cell(tflops_of(r, "fp8-tensor-fa"), " %*.1f", 9);
        print_cell(tflops_of(r, "lt-1d2d"), " %*.1f", 9);
        print_cell(tflops_of(r, "bfp8-1d2d"), " %*.1f", 9);
        print_cell(speedup(r, "bfp8-1d2d", "lt-1d2d"), " %*.3f", 8);
        print_cell(speedup(r, "bfp8-1d2d", "bf16"), " %*.3f", 9);
        print_cell(check_db(r, 0), " %*.1f", 10);
        print_cell(check_db(r, 2), " %*.1f", 10);
        printf("\n");
    }
    printf("wgrad 1D1D (NxK over M) %9s %9s %9s %9s %8s %9s %10s %10s\n", "bf16", "lt-1d1d",
           "bfp8-f32", "bfp8-bf16", "bfp8/lt", "bfp8/bf16", "bfp8~lt dB", "lt~fp64 dB");
    for (int i = 0; i < count; ++i) {
        const problem_result *r = &results[i];
        if (!r->wgrad) continue;
        char shape[64];
        snprintf(shape, sizeof shape, "%lldx%lld/%lld", (long long)r->rows, (long long)r->cols,
                 (long long)r->depth);
        printf("%-23s", shape);
        if (r->skipped) {
            printf(" %s\n", r->note);
            continue;
        }
        print_cell(tflops_of(r, "bf16"), " %*.1f", 9);
        print_cell(tflops_of(r, "lt-1d1d"), " %*.1f", 9);
        print_cell(tflops_of(r, "bfp8-1d1d-f32"), " %*.1f", 9);
        print_cell(tflops_of(r, "bfp8-1d1d-bf16"), " %*.1f", 9);
        print_cell(speedup(r, "bfp8-1d1d-f32", "lt-1d1d"), " %*.3f", 8);
        print_cell(speedup(r, "bfp8-1d1d-f32", "bf16"), " %*.3f", 9);
        print_cell(check_db(r, 0), " %*.1f", 10);
        print_cell(check_db(r, 3), " %*.1f", 10);
        printf("  %s\n", r->note);
    }
    printf("(bf16 for wgrad: f32 accumulate; ratios are speed ratios; dB columns: worst 128x128 tile)\n");
}

static double soak_of(const problem_result *r, const char *name, int what) {
    const variant_result *v = find_variant(r, name);
    if (!v || !v->ran || !v->soak.ok) return NAN;
    if (what == 0) return v->soak_tflops;
    return v->soak.samples ? v->soak.sm_clock_mhz : NAN;
}

/* --soak: each variant alone at its own steady-state clock. */
static void print_soak_table(const problem_result *results, int count) {
    printf("\n==== Steady state (--soak): TFLOP/s and SM MHz of each variant alone ====\n");
    printf("%-23s %-14s %9s %7s %-14s %9s %7s %8s %8s\n", "shape", "blockfp8", "TFLOP/s", "MHz", "cuBLASLt",
           "TFLOP/s", "MHz", "ratio", "per-clk");
    for (int i = 0; i < count; ++i) {
        const problem_result *r = &results[i];
        if (r->skipped) continue;
        const char *ours = r->wgrad ? "bfp8-1d1d-f32" : "bfp8-1d2d", *lt = r->wgrad ? "lt-1d1d" : "lt-1d2d";
        char shape[64];
        snprintf(shape, sizeof shape, r->wgrad ? "%lldx%lld/%lld" : "%lldx%lldx%lld", (long long)r->rows,
                 (long long)r->cols, (long long)r->depth);
        const double t0 = soak_of(r, ours, 0), c0 = soak_of(r, ours, 1), t1 = soak_of(r, lt, 0),
                     c1 = soak_of(r, lt, 1);
        printf("%-23s %-14s", shape, ours);
        print_cell(t0, " %*.1f", 9);
        print_cell(c0, " %*.0f", 7);
        printf(" %-14s", lt);
        print_cell(t1, " %*.1f", 9);
        print_cell(c1, " %*.0f", 7);
        print_cell(t0 / t1, " %*.3f", 8);
        print_cell((t0 / c0) / (t1 / c1), " %*.3f", 8);
        printf("\n");
    }
    printf("(ratio: blockfp8 over cuBLASLt, each at its own clock; per-clk: the same per MHz)\n");
}

static void write_json(const char *path, const bench_env *env, const bench_device_info *after,
                       const problem_result *results, int count, int failures, const char *aborted) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        return;
    }
    fprintf(f, "{\"benchmark\": \"bench_gemm\", ");
    bench_device_info_json(f, "device", &env->device);
    fprintf(f, ", \"sm_clock_mhz_after\": %d, \"temperature_c_after\": %d", after->sm_clock_mhz,
            after->temperature_c);
    fprintf(f, ", \"settle_s\": %.2f, \"warmup\": %d, \"reps\": %d", env->settle_seconds, env->warmup, env->reps);
    fprintf(f, ", \"check_bar_db\": %.1f, \"check_failures\": %d", CHECK_BAR_DB, failures);
    fprintf(f, ", \"aborted\": ");
    if (aborted) bench_json_string(f, aborted);
    else fprintf(f, "null");
    fprintf(f, ", \"problems\": [");
    for (int i = 0; i < count; ++i) {
        const problem_result *r = &results[i];
        fprintf(f, "%s\n  {\"kind\": \"%s\", ", i ? "," : "", r->wgrad ? "wgrad_1d1d" : "1d2d");
        if (r->wgrad)
            fprintf(f, "\"N\": %lld, \"K\": %lld, \"M\": %lld", (long long)r->rows, (long long)r->cols,
                    (long long)r->depth);
        else
            fprintf(f, "\"M\": %lld, \"N\": %lld, \"K\": %lld", (long long)r->rows, (long long)r->cols,
                    (long long)r->depth);
        fprintf(f, ", \"flops\": %.0f, \"input_sets\": %d, \"skipped\": %s, \"note\": ",
                2.0 * (double)r->rows * (double)r->cols * (double)r->depth, r->sets,
                r->skipped ? "true" : "false");
        bench_json_string(f, r->note);
        fprintf(f, ", \"variants\": {");
        for (int j = 0; j < r->nvariants; ++j) {
            const variant_result *v = &r->v[j];
            fprintf(f, "%s\"%s\": {", j ? ", " : "", v->name);
            if (v->ran) {
                fprintf(f, "\"status\": \"ok\", \"median_ms\": ");
                bench_json_number(f, v->timing.median_ms);
                fprintf(f, ", \"min_ms\": ");
                bench_json_number(f, v->timing.min_ms);
                fprintf(f, ", \"max_ms\": ");
                bench_json_number(f, v->timing.max_ms);
                fprintf(f, ", \"reps\": %d, \"tflops\": ", v->timing.reps);
                bench_json_number(f, v->tflops);
                if (v->soak.ok) {
                    fprintf(f, ", \"soak\": {\"seconds\": ");
                    bench_json_number(f, v->soak.seconds);
                    fprintf(f, ", \"tflops\": ");
                    bench_json_number(f, v->soak_tflops);
                    fprintf(f, ", \"sm_clock_mhz\": ");
                    bench_json_number(f, v->soak.samples ? v->soak.sm_clock_mhz : NAN);
                    fprintf(f, ", \"watts\": ");
                    bench_json_number(f, v->soak.samples ? v->soak.watts : NAN);
                    fprintf(f, "}");
                }
            } else {
                fprintf(f, "\"status\": \"n/a\", \"reason\": ");
                bench_json_string(f, v->reason);
            }
            fprintf(f, "}");
        }
        const char *bfp8 = r->wgrad ? "bfp8-1d1d-f32" : "bfp8-1d2d";
        fprintf(f, "}, \"ratios\": {\"bfp8_over_cublaslt_blockwise\": ");
        bench_json_number(f, speedup(r, bfp8, r->wgrad ? "lt-1d1d" : "lt-1d2d"));
        fprintf(f, ", \"bfp8_over_bf16\": ");
        bench_json_number(f, speedup(r, bfp8, "bf16"));
        if (r->wgrad) {
            fprintf(f, ", \"bfp8_bf16_out_over_cublaslt_blockwise\": ");
            bench_json_number(f, speedup(r, "bfp8-1d1d-bf16", "lt-1d1d"));
        } else {
            fprintf(f, ", \"cublaslt_blockwise_over_tensorwide\": ");
            bench_json_number(f, speedup(r, "lt-1d2d", "fp8-tensor"));
        }
        fprintf(f, "}, \"checks\": [");
        for (int j = 0; j < r->nchecks; ++j) {
            const check_result *c = &r->checks[j];
            fprintf(f, "%s{\"what\": ", j ? ", " : "");
            bench_json_string(f, c->what);
            fprintf(f, ", \"bar_db\": %.1f, \"done\": %s", c->bar_db, c->done ? "true" : "false");
            if (c->done) {
                fprintf(f, ", \"sqnr_db\": ");
                bench_json_number(f, c->cmp.overall_db);
                fprintf(f, ", \"worst_tile_db\": ");
                bench_json_number(f, c->cmp.worst_tile_db);
                fprintf(f, ", \"worst_tile\": [%lld, %lld], \"calc_diff\": ",
                        (long long)c->cmp.worst_tile_row, (long long)c->cmp.worst_tile_col);
                bench_json_number(f, c->cmp.calc_diff);
                fprintf(f, ", \"nonfinite\": %lld, \"failed\": %s", (long long)c->cmp.nonfinite,
                        c->failed ? "true" : "false");
            } else if (c->reason[0]) {
                fprintf(f, ", \"reason\": ");
                bench_json_string(f, c->reason);
            }
            fprintf(f, "}");
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n]}\n");
    fclose(f);
    printf("wrote %s\n", path);
}

/* ------------------------------------------------------------------------ */

static void usage(const char *program) {
    fprintf(stderr,
            "usage: %s [--quick] [--shape MxNxK]... [--wgrad-shape NxKxM]... [--warmup N] [--reps N]\n"
            "          [--settle SECONDS] [--soak SECONDS] [--json FILE]\n"
            "  --shape        a 1D2D shape: D[M,N] = A[M,K] B[N,K]^T (replaces the defaults)\n"
            "  --wgrad-shape  a wgrad shape: dW[N,K] over M tokens (replaces the defaults)\n"
            "  --quick        the first shape of each kind, 3 warm-up and 20 timed calls\n"
            "  --settle S     run each shape's variants interleaved for S seconds before timing them\n"
            "                 (default 1; 0: none; --quick: 0.25)\n"
            "  --soak S       also each variant alone for S seconds (steady-state clock and power)\n",
            program);
    exit(2);
}

int main(int argc, char **argv) {
    int quick = 0, warmup = 5, reps = 30;
    double soak = 0.0, settle = -1.0;
    const char *json_path = NULL;
    int64_t shapes[MAX_SHAPES][3], wgrad_shapes[MAX_SHAPES][3];
    int n_shapes = 0, n_wgrad = 0;
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--quick") == 0) {
            quick = 1;
        } else if (strcmp(arg, "--shape") == 0 && value) {
            if (n_shapes == MAX_SHAPES || !bench_parse_triple(value, shapes[n_shapes])) usage(argv[0]);
            ++n_shapes;
            ++i;
        } else if (strcmp(arg, "--wgrad-shape") == 0 && value) {
            if (n_wgrad == MAX_SHAPES || !bench_parse_triple(value, wgrad_shapes[n_wgrad])) usage(argv[0]);
            ++n_wgrad;
            ++i;
        } else if (strcmp(arg, "--warmup") == 0 && value) {
            warmup = atoi(value);
            ++i;
        } else if (strcmp(arg, "--reps") == 0 && value) {
            reps = atoi(value);
            ++i;
        } else if (strcmp(arg, "--settle") == 0 && value) {
            settle = atof(value);
            if (!(settle >= 0.0 && settle <= 60.0)) usage(argv[0]);
            ++i;
        } else if (strcmp(arg, "--soak") == 0 && value) {
            soak = atof(value);
            if (!(soak > 0.0 && soak <= 600.0)) usage(argv[0]);
            ++i;
        } else if (strcmp(arg, "--json") == 0 && value) {
            json_path = value;
            ++i;
        } else {
            usage(argv[0]);
        }
    }
    if (quick) {
        warmup = 3;
        reps = 20;
    }
    if (settle < 0.0) settle = quick ? 0.25 : 1.0;
    if (warmup < 0 || reps < 1) usage(argv[0]);
    if (n_shapes == 0 && n_wgrad == 0) {
        const int n1 = quick ? 1 : (int)(sizeof kDefaultShapes / sizeof kDefaultShapes[0]);
        const int n2 = quick ? 1 : (int)(sizeof kDefaultWgradShapes / sizeof kDefaultWgradShapes[0]);
        for (int i = 0; i < n1; ++i) memcpy(shapes[n_shapes++], kDefaultShapes[i], sizeof shapes[0]);
        for (int i = 0; i < n2; ++i) memcpy(wgrad_shapes[n_wgrad++], kDefaultWgradShapes[i], sizeof wgrad_shapes[0]);
    }

    if (bfp8_cuda_device_count() < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    bench_env env;
    memset(&env, 0, sizeof env);
    env.warmup = warmup;
    env.reps = reps;
    env.settle_seconds = settle;
    env.soak_seconds = soak;
    bench_device_info_read(0, &env.device);
    bench_device_info_print(stdout, &env.device);
    printf("settle %.2f s, warm-up %d, timed calls %d (median; the variants of a shape interleaved call by call), "
           "cross-check bar %.0f dB\n",
           settle, warmup, reps, CHECK_BAR_DB);
    BENCH_BFP8_OR_DIE(bfp8_context_create(&env.ctx, BFP8_BACKEND_CUDA, 0));
    BENCH_CUDA_OR_DIE(cudaStreamCreate(&env.stream));
    BENCH_BFP8_OR_DIE(bfp8_context_set_stream(env.ctx, env.stream));
    const cublasStatus_t lt_status = cublasLtCreate(&env.lt);
    if (lt_status != CUBLAS_STATUS_SUCCESS) bench_die("cublasLtCreate: %s", cublasLtGetStatusName(lt_status));
    BENCH_CUDA_OR_DIE(cudaMalloc(&env.workspace, kWorkspaceBytes));

    static problem_result results[2 * MAX_SHAPES];
    int count = 0, failures = 0;
    const char *aborted = NULL;
    for (int i = 0; i < n_shapes + n_wgrad && !aborted; ++i) {
        problem_result *r = &results[count++];
        memset(r, 0, sizeof *r);
        const int64_t *shape = i < n_shapes ? shapes[i] : wgrad_shapes[i - n_shapes];
        r->wgrad = i >= n_shapes;
        r->rows = shape[0];
        r->cols = shape[1];
        r->depth = shape[2];
        if (run_problem(&env, r) < 0) aborted = "a CUDA error left the context unusable (see the log)";
        for (int j = 0; j < r->nchecks; ++j) failures += r->checks[j].failed;
    }
    bench_device_info after = env.device;
    bench_device_info_refresh_clocks(&after);

    print_tables(results, count);
    if (soak > 0.0) print_soak_table(results, count);
    if (after.sm_clock_mhz >= 0)
        printf("SM clock after the runs: %d MHz (max %d), %d C\n", after.sm_clock_mhz,
               after.max_sm_clock_mhz, after.temperature_c);
    if (json_path) write_json(json_path, &env, &after, results, count, failures, aborted);
    if (aborted) printf("ABORTED: %s\n", aborted);
    printf("cross-checks: %d failed\n", failures);

    cudaFree(env.workspace);
    cublasLtDestroy(env.lt);
    bfp8_context_destroy(env.ctx);
    cudaStreamDestroy(env.stream);
    return aborted || failures ? 1 : 0;
}
