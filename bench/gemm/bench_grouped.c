/*
 * bench_grouped.c - the grouped GEMMs of a mixture-of-experts layer
 * (bfp8_gemm_1d2d_grouped, bfp8_gemm_1d1d_grouped) against what C can
 * reach otherwise, timed in one run on the same random data:
 *
 *   bfp8-grouped   one call for all experts
 *   bfp8-loop      one bfp8_gemm_1d2d / bfp8_gemm_1d1d call per expert
 *   lt-loop        one cuBLASLt FP8 blockwise call per expert (1D2D: A
 *                  VEC128_32F, B BLK128x128_32F, bf16 out; wgrad: both
 *                  VEC128_32F, f32 accumulate where cuBLASLt offers it)
 *   bf16-loop      one cuBLASLt bf16 GEMM per expert (bfp8_gemm_bf16)
 *
 * fprop: D[tokens of g, N] = X[tokens of g, K] . W_g^T, bf16 out;
 * wgrad: dW_g[N, K] += dY_g^T . X_g over the expert's tokens, f32.
 * Before timing, the outputs of bfp8-grouped, bfp8-loop and lt-loop from
 * one call on zeroed outputs are compared (SQNR >= 40 dB, on the GPU).
 *
 *   bench_grouped [--tokens T0,T1,...] [--shape NxK]... [--warmup N] [--reps N] [--settle S]
 *
 * --tokens: the tokens routed to each expert (multiples of 128; default 8
 * uneven experts, 32768 tokens); --shape: an expert's weight, N x K
 * (default 4096x7168 and 7168x2048: DeepSeek-V3's gate+up and down
 * projections); --settle S (default 1): before a problem is timed, its
 * variants run interleaved for S seconds, so that each is timed at the
 * clock the GPU's power cap holds, not the first on an idle GPU (see
 * bench_gemm). Exit code: 0; 1 when a check fails; 2 on a setup failure.
 */
#include <cublasLt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_device.h"
#include "bench_lt.h"
#include "bench_util.h"

#define MAX_GROUPS 256
#define MAX_SHAPES 8
#define CHECK_BAR_DB 40.0

enum { V_GROUPED, V_LOOP, V_LT, V_BF16, NUM_VARIANTS };
static const char *const kVariantNames[NUM_VARIANTS] = {"bfp8-grouped", "bfp8-loop", "lt-loop", "bf16-loop"};

typedef struct problem {
    bfp8_context *ctx;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;
    int wgrad, groups;
    const int64_t *offsets; /* groups + 1 */
    int64_t tokens, n, k;
    bfp8_qmatrix a, b;        /* fprop: a = X (T x K), b = W (G*N x K); wgrad: a = dY^T (N x T), b = X^T (K x T) */
    float **lt_a_scales;      /* fprop: expert g's a scales packed for cuBLASLt (scale_ld = its rows) */
    uint16_t *a_bf16, *b_bf16; /* fprop: X (T x K), W (G*N x K); wgrad: dY (T x N), X (T x K) */
    void *d[NUM_VARIANTS];
    lt_gemm *lt_g;            /* per expert; ok = 0 where cuBLASLt has no algorithm */
    bfp8_dtype lt_dtype;
} problem;

static int failed_bfp8(bfp8_status st, char *reason, size_t size) {
    if (st == BFP8_OK) return 0;
    snprintf(reason, size, "%s: %s", bfp8_status_name(st), bfp8_last_error());
    return 1;
}

static int64_t rows_of(const problem *p, int g) { return p->offsets[g + 1] - p->offsets[g]; }

static int call_grouped(void *arg, int set, char *reason, size_t size) {
    (void)set;
    problem *p = arg;
    if (!p->wgrad) {
        bfp8_matrix d = {p->d[V_GROUPED], BFP8_BF16, p->tokens, p->n, p->n};
        return failed_bfp8(bfp8_gemm_1d2d_grouped(p->ctx, &p->a, &p->b, p->offsets, p->groups, &d), reason, size);
    }
    bfp8_matrix d = {p->d[V_GROUPED], BFP8_F32, p->groups * p->n, p->k, p->k};
    return failed_bfp8(bfp8_gemm_1d1d_grouped(p->ctx, &p->a, &p->b, p->offsets, p->groups, &d, &d), reason, size);
}

/* Expert g's operands as views of the whole ones (rows for fprop, token columns for wgrad). */
static void expert_views(const problem *p, int g, bfp8_qmatrix *a, bfp8_qmatrix *b) {
    const int64_t t0 = p->offsets[g], rows = rows_of(p, g);
    *a = p->a;
    *b = p->b;
    if (!p->wgrad) {
        a->data += t0 * p->a.ld;
        a->scales += t0;
        a->rows = rows;
        b->data += g * p->n * p->b.ld;
        b->scales += (g * p->n / 128) * p->b.scale_ld;
        b->rows = p->n;
    } else {
        a->data += t0;
        a->scales += (t0 / 128) * p->a.scale_ld;
        a->cols = rows;
        b->data += t0;
        b->scales += (t0 / 128) * p->b.scale_ld;
        b->cols = rows;
    }
}

static int call_loop(void *arg, int set, char *reason, size_t size) {
    (void)set;
    problem *p = arg;
    for (int g = 0; g < p->groups; ++g) {
        if (rows_of(p, g) == 0) continue;
        bfp8_qmatrix a, b;
        expert_views(p, g, &a, &b);
        if (!p->wgrad) {
            bfp8_matrix d = {(uint16_t *)p->d[V_LOOP] + p->offsets[g] * p->n, BFP8_BF16, a.rows, p->n, p->n};
            if (failed_bfp8(bfp8_gemm_1d2d(p->ctx, &a, &b, &d), reason, size)) return 1;
        } else {
            bfp8_matrix d = {(float *)p->d[V_LOOP] + g * p->n * p->k, BFP8_F32, p->n, p->k, p->k};
            if (failed_bfp8(bfp8_gemm_1d1d(p->ctx, &a, &b, &d, &d), reason, size)) return 1;
        }
    }
    return 0;
}

static int call_lt(void *arg, int set, char *reason, size_t size) {
    (void)set;
    problem *p = arg;
    for (int g = 0; g < p->groups; ++g) {
        if (rows_of(p, g) == 0) continue;
        if (!p->lt_g[g].ok) {
            snprintf(reason, size, "expert %d: %s", g, p->lt_g[g].reason);
            return 1;
        }
        bfp8_qmatrix a, b;
        expert_views(p, g, &a, &b);
        const size_t esize = bfp8_dtype_size(p->lt_dtype);
        void *d = p->wgrad ? (uint8_t *)p->d[V_LT] + (size_t)(g * p->n * p->k) * esize
                           : (uint8_t *)p->d[V_LT] + (size_t)(p->offsets[g] * p->n) * esize;
        const void *a_scales = p->wgrad ? a.scales : p->lt_a_scales[g];
        const cublasStatus_t st =
            lt_gemm_run(&p->lt_g[g], p->lt, a.data, a_scales, b.data, b.scales, d, p->workspace, p->stream);
        if (st != CUBLAS_STATUS_SUCCESS) {
            snprintf(reason, size, "cublasLtMatmul: %s", cublasLtGetStatusName(st));
            return 1;
        }
    }
    return 0;
}

static int call_bf16(void *arg, int set, char *reason, size_t size) {
    (void)set;
    problem *p = arg;
    for (int g = 0; g < p->groups; ++g) {
        const int64_t t0 = p->offsets[g], rows = rows_of(p, g);
        if (rows == 0) continue;
        bfp8_status st;
        if (!p->wgrad) {
            bfp8_matrix a = {p->a_bf16 + t0 * p->k, BFP8_BF16, rows, p->k, p->k};
            bfp8_matrix b = {p->b_bf16 + g * p->n * p->k, BFP8_BF16, p->n, p->k, p->k};
            bfp8_matrix d = {(uint16_t *)p->d[V_BF16] + t0 * p->n, BFP8_BF16, rows, p->n, p->n};
            st = bfp8_gemm_bf16(p->ctx, &a, 0, &b, 0, NULL, &d);
        } else { /* dW_g[N, K] += dY_g^T X_g, dY and X token-major */
            bfp8_matrix a = {p->a_bf16 + t0 * p->n, BFP8_BF16, rows, p->n, p->n};
            bfp8_matrix b = {p->b_bf16 + t0 * p->k, BFP8_BF16, rows, p->k, p->k};
            bfp8_matrix d = {(float *)p->d[V_BF16] + g * p->n * p->k, BFP8_F32, p->n, p->k, p->k};
            st = bfp8_gemm_bf16(p->ctx, &a, 1, &b, 1, &d, &d);
        }
        if (failed_bfp8(st, reason, size)) return 1;
    }
    return 0;
}

static void *device_alloc(size_t bytes) {
    void *p = NULL;
    BENCH_CUDA_OR_DIE(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

static void make_qmatrix(bfp8_qmatrix *q, int64_t rows, int64_t cols, bfp8_granularity gran, uint64_t seed,
                         cudaStream_t stream) {
    size_t data_bytes, scale_bytes;
    BENCH_BFP8_OR_DIE(bfp8_qmatrix_layout(q, rows, cols, gran, &data_bytes, &scale_bytes));
    q->data = device_alloc(data_bytes);
    q->scales = device_alloc(scale_bytes);
    BENCH_CUDA_OR_DIE(bench_fill_e4m3(q->data, rows, cols, q->ld, seed, stream));
    BENCH_CUDA_OR_DIE(bench_fill_scales(q->scales, (int64_t)(scale_bytes / sizeof(float)), seed + 1, stream));
}

/* Zero the outputs, one call of each of the three FP8 variants, and compare. */
static int cross_check(problem *p, size_t out_bytes) {
    int failures = 0;
    char reason[512];
    for (int v = 0; v < V_BF16; ++v) BENCH_CUDA_OR_DIE(cudaMemsetAsync(p->d[v], 0, out_bytes, p->stream));
    const int lt_ran = call_lt(p, 0, reason, sizeof reason) == 0;
    if (!lt_ran) printf("    lt-loop did not run: %s\n", reason);
    if (call_grouped(p, 0, reason, sizeof reason) || call_loop(p, 0, reason, sizeof reason))
        bench_die("bfp8 call failed: %s", reason);
    const bfp8_dtype dt = p->wgrad ? BFP8_F32 : BFP8_BF16;
    const int64_t rows = p->wgrad ? p->groups * p->n : p->offsets[p->groups], cols = p->wgrad ? p->k : p->n;
    const int64_t ld = cols;
    for (int v = V_LOOP; v <= V_LT; ++v) {
        if (v == V_LT && (!lt_ran || p->lt_dtype != dt)) continue;
        bench_comparison c;
        BENCH_CUDA_OR_DIE(bench_compare(p->d[v], dt, ld, p->d[V_GROUPED], dt, ld, rows, cols, p->stream, &c));
        const int ok = c.nonfinite == 0 && c.overall_db >= CHECK_BAR_DB && c.worst_tile_db >= CHECK_BAR_DB;
        if (isinf(c.overall_db) && c.nonfinite == 0)
            printf("    check bfp8-grouped vs %-9s: identical\n", kVariantNames[v]);
        else
            printf("    check bfp8-grouped vs %-9s: %.1f dB overall, worst tile %.1f dB%s\n", kVariantNames[v],
                   c.overall_db, c.worst_tile_db, ok ? "" : "  FAILED");
        failures += !ok;
    }
    return failures;
}

static int run_problem(problem *p, int warmup, int reps, double settle) {
    const int64_t t = p->tokens;
    printf("\n==== %s: %d experts, %lld tokens, expert weight %lld x %lld ====\n", p->wgrad ? "wgrad" : "fprop",
           p->groups, (long long)t, (long long)p->n, (long long)p->k);
    /* operands */
    if (!p->wgrad) {
        make_qmatrix(&p->a, t, p->k, BFP8_GRAN_1X128, 11, p->stream);
        make_qmatrix(&p->b, p->groups * p->n, p->k, BFP8_GRAN_128X128, 13, p->stream);
    } else {
        make_qmatrix(&p->a, p->n, t, BFP8_GRAN_1X128, 17, p->stream);
        make_qmatrix(&p->b, p->k, t, BFP8_GRAN_1X128, 19, p->stream);
    }
    const int64_t a_elems = t * (p->wgrad ? p->n : p->k), b_elems = p->wgrad ? t * p->k : p->groups * p->n * p->k;
    p->a_bf16 = device_alloc((size_t)a_elems * 2);
    p->b_bf16 = device_alloc((size_t)b_elems * 2);
    BENCH_CUDA_OR_DIE(bench_fill_normal(p->a_bf16, BFP8_BF16, a_elems / (p->wgrad ? p->n : p->k),
                                        p->wgrad ? p->n : p->k, p->wgrad ? p->n : p->k, 1.0f, 23, p->stream));
    BENCH_CUDA_OR_DIE(bench_fill_normal(p->b_bf16, BFP8_BF16, b_elems / p->k, p->k, p->k, 1.0f, 29, p->stream));
    const int64_t out_elems = p->wgrad ? p->groups * p->n * p->k : t * p->n;
    const size_t out_bytes = (size_t)out_elems * (p->wgrad ? 4 : 2);
    for (int v = 0; v < NUM_VARIANTS; ++v) p->d[v] = device_alloc(out_bytes);

    /* cuBLASLt, one descriptor per expert (its shape) */
    p->lt_g = calloc((size_t)p->groups, sizeof *p->lt_g);
    p->lt_a_scales = calloc((size_t)p->groups, sizeof *p->lt_a_scales);
    if (!p->lt_g || !p->lt_a_scales) bench_die("out of host memory");
    p->lt_dtype = p->wgrad ? BFP8_F32 : BFP8_BF16;
    for (int g = 0; g < p->groups; ++g) {
        const int64_t rows = rows_of(p, g);
        if (rows == 0) continue;
        bfp8_qmatrix a, b;
        expert_views(p, g, &a, &b);
        if (!p->wgrad) { /* the expert's rows of X's scales, packed (scale_ld = its rows) */
            const int64_t kb = bench_ceil_div(p->k, 128);
            p->lt_a_scales[g] = device_alloc((size_t)(kb * rows) * sizeof(float));
            BENCH_CUDA_OR_DIE(cudaMemcpy2DAsync(p->lt_a_scales[g], (size_t)rows * 4, a.scales,
                                                (size_t)p->a.scale_ld * 4, (size_t)rows * 4, (size_t)kb,
                                                cudaMemcpyDeviceToDevice, p->stream));
        }
        if (!p->wgrad && bench_ceil_div(p->k, 128) % 4 != 0) { /* cuBLASLt reads W's scales 4-aligned */
            snprintf(p->lt_g[g].reason, sizeof p->lt_g[g].reason, "K / 128 not a multiple of 4 (scale layout)");
            continue;
        }
        lt_gemm_spec spec = {a.rows, b.rows, a.cols, a.ld, b.ld, b.rows,
                             CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                             p->wgrad ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                      : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                             p->wgrad ? (const void *)a.scales : (const void *)p->lt_a_scales[g], b.scales,
                             p->wgrad ? CUDA_R_32F : CUDA_R_16BF, p->wgrad, 0};
        if (!lt_gemm_create(&p->lt_g[g], p->lt, &spec) && p->wgrad) { /* no f32 accumulate: bf16 out */
            spec.d_type = CUDA_R_16BF;
            spec.accumulate = 0;
            if (lt_gemm_create(&p->lt_g[g], p->lt, &spec)) p->lt_dtype = BFP8_BF16;
        }
    }
    BENCH_CUDA_OR_DIE(cudaStreamSynchronize(p->stream));

    const int failures = cross_check(p, out_bytes);

    bench_call_fn fns[NUM_VARIANTS] = {call_grouped, call_loop, call_lt, call_bf16};
    void *args[NUM_VARIANTS] = {p, p, p, p};
    bench_timing timing[NUM_VARIANTS];
    char reason[512];
    int n = 0;
    bench_call_fn run_fns[NUM_VARIANTS];
    void *run_args[NUM_VARIANTS];
    int index[NUM_VARIANTS];
    for (int v = 0; v < NUM_VARIANTS; ++v) { /* those that run */
        if (fns[v](p, 0, reason, sizeof reason)) {
            printf("    %-12s not timed: %s\n", kVariantNames[v], reason);
            continue;
        }
        run_fns[n] = fns[v];
        run_args[n] = args[v];
        index[n++] = v;
    }
    BENCH_CUDA_OR_DIE(cudaStreamSynchronize(p->stream));
    if (settle > 0.0) bench_settle_rounds(run_fns, run_args, n, 1, settle, p->stream);
    bench_timing out[NUM_VARIANTS];
    bench_time_rounds(run_fns, run_args, n, 1, warmup, reps, p->stream, out);
    for (int v = 0; v < NUM_VARIANTS; ++v) timing[v].ok = 0;
    for (int i = 0; i < n; ++i) timing[index[i]] = out[i];
    const double flops = 2.0 * (double)p->offsets[p->groups] * (double)p->n * (double)p->k;
    double tf[NUM_VARIANTS];
    for (int v = 0; v < NUM_VARIANTS; ++v) {
        tf[v] = timing[v].ok ? bench_tflops(flops, timing[v].median_ms) : NAN;
        if (timing[v].ok)
            printf("    %-12s %9.1f us  %7.1f TFLOP/s\n", kVariantNames[v], timing[v].median_ms * 1e3, tf[v]);
        else if (timing[v].reason[0])
            printf("    %-12s failed: %s\n", kVariantNames[v], timing[v].reason);
    }
    printf("    bfp8-grouped: %.3fx bfp8-loop, %.3fx lt-loop, %.3fx bf16-loop%s\n", tf[V_GROUPED] / tf[V_LOOP],
           tf[V_GROUPED] / tf[V_LT], tf[V_GROUPED] / tf[V_BF16],
           p->wgrad && p->lt_dtype == BFP8_BF16 ? "  (lt-loop: bf16 out, no f32 accumulate)" : "");

    for (int v = 0; v < NUM_VARIANTS; ++v) cudaFree(p->d[v]);
    for (int g = 0; g < p->groups; ++g) {
        if (p->lt_g[g].ok) lt_gemm_destroy(&p->lt_g[g]);
        cudaFree(p->lt_a_scales[g]);
    }
    free(p->lt_g);
    free(p->lt_a_scales);
    cudaFree(p->a.data);
    cudaFree(p->a.scales);
    cudaFree(p->b.data);
    cudaFree(p->b.scales);
    cudaFree(p->a_bf16);
    cudaFree(p->b_bf16);
    return failures;
}

static void usage(const char *program) {
    fprintf(stderr, "usage: %s [--tokens T0,T1,...] [--shape NxK]... [--warmup N] [--reps N] [--settle S]\n",
            program);
    exit(2);
}

int main(int argc, char **argv) {
    int64_t sizes[MAX_GROUPS] = {3072, 5120, 4096, 2048, 6144, 4096, 3584, 4608};
    int groups = 8, warmup = 5, reps = 20, n_shapes = 0;
    double settle = 1.0;
    int64_t shapes[MAX_SHAPES][2];
    for (int i = 1; i < argc; ++i) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--tokens") && value) {
            groups = 0;
            for (const char *s = value; *s && groups < MAX_GROUPS;) {
                char *end;
                sizes[groups] = strtoll(s, &end, 10);
                if (end == s || sizes[groups] < 0 || sizes[groups] % 128) usage(argv[0]);
                ++groups;
                s = *end == ',' ? end + 1 : end;
                if (*end && *end != ',') usage(argv[0]);
            }
            ++i;
        } else if (!strcmp(argv[i], "--shape") && value && n_shapes < MAX_SHAPES) {
            int64_t t[3];
            char buf[64];
            snprintf(buf, sizeof buf, "%sx1", value);
            if (!bench_parse_triple(buf, t)) usage(argv[0]);
            shapes[n_shapes][0] = t[0];
            shapes[n_shapes++][1] = t[1];
            ++i;
        } else if (!strcmp(argv[i], "--warmup") && value) {
            warmup = atoi(value);
            ++i;
        } else if (!strcmp(argv[i], "--reps") && value) {
            reps = atoi(value);
            ++i;
        } else if (!strcmp(argv[i], "--settle") && value) {
            settle = atof(value);
            if (!(settle >= 0.0 && settle <= 60.0)) usage(argv[0]);
            ++i;
        } else {
            usage(argv[0]);
        }
    }
    if (groups < 1 || warmup < 0 || reps < 1) usage(argv[0]);
    if (n_shapes == 0) {
        shapes[0][0] = 4096, shapes[0][1] = 7168;
        shapes[1][0] = 7168, shapes[1][1] = 2048;
        n_shapes = 2;
    }
    if (bfp8_cuda_device_count() < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    int64_t offsets[MAX_GROUPS + 1] = {0};
    for (int g = 0; g < groups; ++g) offsets[g + 1] = offsets[g] + sizes[g];
    bench_device_info info;
    bench_device_info_read(0, &info);
    bench_device_info_print(stdout, &info);
    printf("tokens per expert:");
    for (int g = 0; g < groups; ++g) printf(" %lld", (long long)sizes[g]);
    printf(" (%lld in all); settle %.2f s, warm-up %d, timed calls %d (median, variants interleaved call by call)\n",
           (long long)offsets[groups], settle, warmup, reps);

    problem base;
    memset(&base, 0, sizeof base);
    BENCH_BFP8_OR_DIE(bfp8_context_create(&base.ctx, BFP8_BACKEND_CUDA, 0));
    BENCH_CUDA_OR_DIE(cudaStreamCreate(&base.stream));
    BENCH_BFP8_OR_DIE(bfp8_context_set_stream(base.ctx, base.stream));
    if (cublasLtCreate(&base.lt) != CUBLAS_STATUS_SUCCESS) bench_die("cublasLtCreate failed");
    base.workspace = device_alloc(BENCH_LT_WORKSPACE_BYTES);
    base.groups = groups;
    base.offsets = offsets;
    base.tokens = offsets[groups] > 0 ? offsets[groups] : 128;
    int failures = 0;
    for (int s = 0; s < n_shapes; ++s)
        for (int wgrad = 0; wgrad < 2; ++wgrad) {
            problem p = base;
            p.wgrad = wgrad;
            p.n = shapes[s][0];
            p.k = shapes[s][1];
            failures += run_problem(&p, warmup, reps, settle);
        }
    bench_device_info_refresh_clocks(&info);
    if (info.sm_clock_mhz >= 0)
        printf("\nSM clock after the runs: %d MHz (max %d), %d C\n", info.sm_clock_mhz, info.max_sm_clock_mhz,
               info.temperature_c);
    printf("checks: %d failed\n", failures);
    cudaFree(base.workspace);
    cublasLtDestroy(base.lt);
    bfp8_context_destroy(base.ctx);
    cudaStreamDestroy(base.stream);
    return failures ? 1 : 0;
}
