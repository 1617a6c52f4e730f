/*
 * bench_gemm_grid.c - blockfp8's FP8 GEMMs against cuBLASLt FP8 blockwise on
 * a grid of shapes, small ones included, each timed as CUDA graphs of many
 * calls so that what is measured is the GPU's time, not the launch path.
 *
 *   kinds   1d2d-bf16  D[M, N] = A[M, K] B[N, K]^T, bf16 out     (fprop, dgrad)
 *           1d2d-f32   the same with f32 out
 *           1d1d       dW[N, K] += dY[N, M] X[K, M]^T, f32        (wgrad: M tokens are the reduction)
 *   grid    M in {1, 8, 64, 128, 512, 2048, 8192, 32768} x N, K in {256, 512, 1024, 2048, 4096, 7168}
 *
 * For every cell both libraries run the same fp8 codes and scales; their
 * outputs are compared first (SQNR of the worst 128 x 128 tile, bar 40 dB).
 * Where cuBLASLt refuses a cell, cuBLAS bf16 on the dequantized operands is
 * timed instead, and the ratio is against it. Prints, per kind, the ratio
 * table (rows M, columns N x K), the median and the slowest cells; --json
 * writes every cell.
 *
 *   cmake --build build --target bench_gemm_grid
 *   build/bench/gemm/bench_gemm_grid [--quick] [--kinds 1d2d-bf16,1d2d-f32,1d1d] [--m LIST] [--nk LIST]
 *                                    [--graph-us US] [--reps N] [--no-gemm-pdl] [--json FILE]
 *
 * Exit code: 0; 1 when an output check fails or CUDA breaks; 2 on bad
 * arguments or a setup failure; 77 without a GPU.
 */
#include <cublasLt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_device.h"
#include "bench_lt.h"
#include "bench_util.h"

#define MAX_AXIS 16
#define CHECK_BAR_DB 40.0

static const int64_t kDefaultM[] = {1, 8, 64, 128, 512, 2048, 8192, 32768};
static const int64_t kDefaultNK[] = {256, 512, 1024, 2048, 4096, 7168};
static const int64_t kQuickM[] = {1, 64, 2048};
static const int64_t kQuickNK[] = {512, 4096};

typedef enum grid_kind { KIND_1D2D_BF16, KIND_1D2D_F32, KIND_1D1D, NUM_KINDS } grid_kind;
static const char *const kKindNames[NUM_KINDS] = {"1d2d-bf16", "1d2d-f32", "1d1d"};

typedef struct cell_result {
    grid_kind kind;
    int64_t m, n, k;        /* tokens, and the two other dims (1d1d: dW is n x k) */
    int baseline_bf16;      /* 1: cuBLASLt refused the cell; the baseline is cuBLAS bf16 */
    char baseline_note[400];
    double bfp8_us, base_us, ratio; /* ratio = base_us / bfp8_us (> 1: blockfp8 faster) */
    double worst_tile_db;   /* blockfp8 against the baseline's output */
    int calls;              /* GEMMs per graph */
    int failed;
    char reason[520];
} cell_result;

typedef struct grid_env {
    bfp8_context *ctx;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;
    int reps;
    double graph_us;
} grid_env;

/* ------------------------------------------------------------------------ */
/* One cell's operands                                                       */

typedef struct cell {
    grid_env *env;
    grid_kind kind;
    int64_t rows, cols, depth; /* D is rows x cols, contraction over depth */
    bfp8_qmatrix a, b;
    float *a_lt_scales, *b_lt_scales; /* cuBLASLt's scale layouts (copies where ours differ) */
    uint16_t *a_bf16, *b_bf16;        /* the bf16 baseline's operands */
    void *d_bfp8, *d_base;
    bfp8_dtype out_dtype, base_dtype;
    lt_gemm plan;
    int use_lt;
    void *allocs[16];
    int nallocs;
} cell;

static void *cell_alloc(cell *c, size_t bytes) {
    void *p = NULL;
    BENCH_CUDA_OR_DIE(cudaMalloc(&p, bytes ? bytes : 16));
    c->allocs[c->nallocs++] = p;
    return p;
}

static void cell_free(cell *c) {
    for (int i = 0; i < c->nallocs; ++i) cudaFree(c->allocs[i]);
    c->nallocs = 0;
    if (c->plan.ok) lt_gemm_destroy(&c->plan);
}

static void make_operand(cell *c, bfp8_qmatrix *q, int64_t rows, int64_t cols, bfp8_granularity gran,
                         uint64_t seed) {
    size_t data_bytes = 0, scale_bytes = 0;
    BENCH_BFP8_OR_DIE(bfp8_qmatrix_layout(q, rows, cols, gran, &data_bytes, &scale_bytes));
    q->data = cell_alloc(c, data_bytes);
    q->scales = cell_alloc(c, scale_bytes);
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(q->data, 0, data_bytes, c->env->stream));
    BENCH_CUDA_OR_DIE(bench_fill_e4m3(q->data, rows, cols, q->ld, seed, c->env->stream));
    BENCH_CUDA_OR_DIE(bench_fill_scales(q->scales, (int64_t)(scale_bytes / 4), seed + 1, c->env->stream));
}

/* q's scales in the layout cuBLASLt reads: 1x128 with scale_ld == rows;
 * 128x128 with the row of blocks padded to a multiple of 4. */
static float *lt_scales(cell *c, const bfp8_qmatrix *q) {
    const int64_t kblocks = bench_ceil_div(q->cols, 128);
    const int gran_1x128 = q->granularity == BFP8_GRAN_1X128;
    const int64_t width = gran_1x128 ? q->rows : bench_round_up(kblocks, 4);
    const int64_t height = gran_1x128 ? kblocks : bench_ceil_div(q->rows, 128);
    const int64_t used = gran_1x128 ? q->rows : kblocks;
    if (q->scale_ld == width) return q->scales;
    float *packed = cell_alloc(c, (size_t)(width * height) * 4);
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(packed, 0, (size_t)(width * height) * 4, c->env->stream));
    BENCH_CUDA_OR_DIE(cudaMemcpy2DAsync(packed, (size_t)width * 4, q->scales, (size_t)q->scale_ld * 4,
                                        (size_t)used * 4, (size_t)height, cudaMemcpyDeviceToDevice,
                                        c->env->stream));
    return packed;
}

static void cell_setup(cell *c, grid_env *env, grid_kind kind, int64_t m, int64_t n, int64_t k) {
    memset(c, 0, sizeof *c);
    c->env = env;
    c->kind = kind;
    const int wgrad = kind == KIND_1D1D;
    c->rows = wgrad ? n : m;
    c->cols = wgrad ? k : n;
    c->depth = wgrad ? m : k;
    c->out_dtype = kind == KIND_1D2D_BF16 ? BFP8_BF16 : BFP8_F32;
    const uint64_t seed = (uint64_t)(m * 7919 + n * 104729 + k * 1299709);
    make_operand(c, &c->a, c->rows, c->depth, BFP8_GRAN_1X128, seed);
    make_operand(c, &c->b, c->cols, c->depth, wgrad ? BFP8_GRAN_1X128 : BFP8_GRAN_128X128, seed + 17);
    const size_t n_out = (size_t)(c->rows * c->cols);
    c->d_bfp8 = cell_alloc(c, n_out * 4);
    c->d_base = cell_alloc(c, n_out * 4);
    c->a_lt_scales = lt_scales(c, &c->a);
    c->b_lt_scales = lt_scales(c, &c->b);

    lt_gemm_spec spec = {c->rows, c->cols, c->depth, c->a.ld, c->b.ld, c->cols,
                         CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                         wgrad ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                         c->a_lt_scales, c->b_lt_scales, c->out_dtype == BFP8_BF16 ? CUDA_R_16BF : CUDA_R_32F,
                         wgrad, 0};
    c->use_lt = lt_gemm_create(&c->plan, env->lt, &spec);
    c->base_dtype = c->out_dtype;
    if (!c->use_lt) {
        /* the bf16 baseline: dequantized operands, token-major for wgrad as a bf16 recipe holds them */
        c->a_bf16 = cell_alloc(c, (size_t)(c->rows * c->depth) * 2);
        c->b_bf16 = cell_alloc(c, (size_t)(c->cols * c->depth) * 2);
        BENCH_CUDA_OR_DIE(bench_dequantize_bf16(&c->a, c->a_bf16, wgrad ? c->rows : c->depth, wgrad, env->stream));
        BENCH_CUDA_OR_DIE(bench_dequantize_bf16(&c->b, c->b_bf16, wgrad ? c->cols : c->depth, wgrad, env->stream));
    }
    BENCH_CUDA_OR_DIE(cudaStreamSynchronize(env->stream));
}

static int bfp8_failed(bfp8_status s, char *reason, size_t size) {
    if (s == BFP8_OK) return 0;
    snprintf(reason, size, "%s: %s", bfp8_status_name(s), bfp8_last_error());
    return 1;
}

static int call_bfp8(void *arg, int set, char *reason, size_t size) {
    (void)set;
    cell *c = arg;
    bfp8_matrix d = {c->d_bfp8, c->out_dtype, c->rows, c->cols, c->cols};
    if (c->kind == KIND_1D1D) return bfp8_failed(bfp8_gemm_1d1d(c->env->ctx, &c->a, &c->b, &d, &d), reason, size);
    return bfp8_failed(bfp8_gemm_1d2d(c->env->ctx, &c->a, &c->b, &d), reason, size);
}

static int call_baseline(void *arg, int set, char *reason, size_t size) {
    (void)set;
    cell *c = arg;
    if (c->use_lt) {
        const cublasStatus_t s = lt_gemm_run(&c->plan, c->env->lt, c->a.data, c->a_lt_scales, c->b.data,
                                             c->b_lt_scales, c->d_base, c->env->workspace, c->env->stream);
        if (s == CUBLAS_STATUS_SUCCESS) return 0;
        snprintf(reason, size, "cublasLtMatmul: %s", cublasLtGetStatusName(s));
        return 1;
    }
    const int wgrad = c->kind == KIND_1D1D;
    bfp8_matrix d = {c->d_base, c->out_dtype, c->rows, c->cols, c->cols};
    bfp8_matrix a = {c->a_bf16, BFP8_BF16, wgrad ? c->depth : c->rows, wgrad ? c->rows : c->depth,
                     wgrad ? c->rows : c->depth};
    bfp8_matrix b = {c->b_bf16, BFP8_BF16, wgrad ? c->depth : c->cols, wgrad ? c->cols : c->depth,
                     wgrad ? c->cols : c->depth};
    return bfp8_failed(bfp8_gemm_bf16(c->env->ctx, &a, wgrad, &b, wgrad, wgrad ? &d : NULL, &d), reason, size);
}

/* ------------------------------------------------------------------------ */
/* CUDA graphs of `calls` back-to-back calls                                 */

typedef struct graph_call {
    cudaGraphExec_t exec;
    cudaStream_t stream;
} graph_call;

static int launch_graph(void *arg, int set, char *reason, size_t size) {
    (void)set;
    graph_call *g = arg;
    const cudaError_t err = cudaGraphLaunch(g->exec, g->stream);
    if (err == cudaSuccess) return 0;
    snprintf(reason, size, "cudaGraphLaunch: %s", cudaGetErrorName(err));
    return 1;
}

static int capture(bench_call_fn fn, void *arg, int calls, cudaStream_t stream, graph_call *out, char *reason,
                   size_t size) {
    out->stream = stream;
    out->exec = NULL;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        snprintf(reason, size, "cudaStreamBeginCapture failed");
        return 1;
    }
    int failed = 0;
    for (int i = 0; i < calls && !failed; ++i) failed = fn(arg, 0, reason, size);
    cudaGraph_t graph = NULL;
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    if (!failed && end != cudaSuccess) {
        snprintf(reason, size, "cudaStreamEndCapture: %s", cudaGetErrorName(end));
        failed = 1;
    }
    if (!failed && cudaGraphInstantiate(&out->exec, graph, 0) != cudaSuccess) {
        snprintf(reason, size, "cudaGraphInstantiate failed");
        failed = 1;
    }
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return failed;
}

/* ------------------------------------------------------------------------ */

static void run_cell(grid_env *env, cell_result *r) {
    cell c;
    cell_setup(&c, env, r->kind, r->m, r->n, r->k);
    r->baseline_bf16 = !c.use_lt;
    if (!c.use_lt) snprintf(r->baseline_note, sizeof r->baseline_note, "%s", c.plan.reason);
    const size_t out_bytes = (size_t)(c.rows * c.cols) * bfp8_dtype_size(c.out_dtype);

    /* Outputs first: one call each from zero (also the warm-up that makes any lazily allocated
     * workspace before a graph is captured). */
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(c.d_bfp8, 0, out_bytes, env->stream));
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(c.d_base, 0, out_bytes, env->stream));
    if (call_bfp8(&c, 0, r->reason, sizeof r->reason) || call_baseline(&c, 0, r->reason, sizeof r->reason)) {
        r->failed = 1;
        cell_free(&c);
        return;
    }
    bench_comparison cmp;
    const cudaError_t cmp_err = bench_compare(c.d_base, c.out_dtype, c.cols, c.d_bfp8, c.out_dtype, c.cols, c.rows,
                                              c.cols, env->stream, &cmp);
    if (cmp_err != cudaSuccess) bench_die("bench_compare: %s", cudaGetErrorName(cmp_err));
    r->worst_tile_db = cmp.worst_tile_db;
    if (cmp.nonfinite > 0 || !(cmp.worst_tile_db >= CHECK_BAR_DB)) {
        r->failed = 1;
        snprintf(r->reason, sizeof r->reason, "output check: worst tile %.1f dB, %lld non-finite",
                 cmp.worst_tile_db, (long long)cmp.nonfinite);
    }

    /* Enough calls per graph that one graph runs about graph_us (from one timed call of each). */
    bench_call_fn fns[2] = {call_bfp8, call_baseline};
    void *args[2] = {&c, &c};
    bench_timing once[2];
    bench_time_rounds(fns, args, 2, 1, 1, 3, env->stream, once);
    if (!once[0].ok || !once[1].ok) {
        r->failed = 1;
        snprintf(r->reason, sizeof r->reason, "%s", once[0].ok ? once[1].reason : once[0].reason);
        cell_free(&c);
        return;
    }
    const double est_us = 1000.0 * (once[0].median_ms < once[1].median_ms ? once[0].median_ms : once[1].median_ms);
    int calls = (int)(env->graph_us / (est_us > 1.0 ? est_us : 1.0));
    calls = calls < 4 ? 4 : calls > 200 ? 200 : calls;
    r->calls = calls;

    graph_call graphs[2];
    memset(graphs, 0, sizeof graphs);
    int failed = 0;
    for (int i = 0; i < 2 && !failed; ++i)
        failed = capture(fns[i], args[i], calls, env->stream, &graphs[i], r->reason, sizeof r->reason);
    if (!failed) {
        bench_call_fn gfns[2] = {launch_graph, launch_graph};
        void *gargs[2] = {&graphs[0], &graphs[1]};
        bench_timing t[2];
        bench_time_rounds(gfns, gargs, 2, 1, 2, env->reps, env->stream, t);
        if (t[0].ok && t[1].ok) {
            r->bfp8_us = 1000.0 * t[0].median_ms / calls;
            r->base_us = 1000.0 * t[1].median_ms / calls;
            r->ratio = r->base_us / r->bfp8_us;
        } else {
            failed = 1;
            snprintf(r->reason, sizeof r->reason, "%s", t[0].ok ? t[1].reason : t[0].reason);
        }
    }
    if (failed) r->failed = 1;
    for (int i = 0; i < 2; ++i)
        if (graphs[i].exec) cudaGraphExecDestroy(graphs[i].exec);
    cell_free(&c);
}

/* ------------------------------------------------------------------------ */
/* Reports                                                                   */

static int compare_ratio(const void *x, const void *y) {
    const cell_result *a = *(cell_result *const *)x, *b = *(cell_result *const *)y;
    return (a->ratio > b->ratio) - (a->ratio < b->ratio);
}

static double median_of(double *v, int n) {
    for (int i = 1; i < n; ++i) /* insertion sort: n is small */
        for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
            const double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void print_kind(const cell_result *cells, int count, grid_kind kind, const int64_t *ms, int nm,
                       const int64_t *nks, int nnk) {
    printf("\n== %s: blockfp8 speed over cuBLASLt FP8 blockwise (* : over cuBLAS bf16, cuBLASLt refused) ==\n",
           kKindNames[kind]);
    printf("%7s |", "M \\ N");
    for (int i = 0; i < nnk; ++i) printf(" %-*lld|", 6 * nnk - 1, (long long)nks[i]);
    printf("\n%7s |", "K");
    for (int i = 0; i < nnk; ++i) {
        for (int j = 0; j < nnk; ++j) printf("%6lld", (long long)nks[j]);
        printf("|");
    }
    printf("\n");
    double *ratios = malloc(sizeof(double) * (size_t)count);
    int nr = 0, below = 0, failed = 0, bf16_slower = 0;
    for (int mi = 0; mi < nm; ++mi) {
        printf("%7lld |", (long long)ms[mi]);
        for (int ni = 0; ni < nnk; ++ni) {
            for (int ki = 0; ki < nnk; ++ki) {
                const cell_result *r = NULL;
                for (int i = 0; i < count && !r; ++i)
                    if (cells[i].kind == kind && cells[i].m == ms[mi] && cells[i].n == nks[ni] && cells[i].k == nks[ki])
                        r = &cells[i];
                if (!r || r->failed || !(r->ratio > 0)) {
                    printf("%6s", r && r->failed ? "FAIL" : "-");
                    failed += r && r->failed;
                    continue;
                }
                printf(" %4.2f%s", r->ratio, r->baseline_bf16 ? "*" : " ");
                if (r->baseline_bf16) {
                    bf16_slower += r->ratio < 1.0;
                } else {
                    ratios[nr++] = r->ratio;
                    below += r->ratio < 1.0;
                }
            }
            printf("|");
        }
        printf("\n");
    }
    const double med = median_of(ratios, nr);
    printf("%s: %d cells against cuBLASLt, median %.3fx, min %.3fx, %d below 1.0x; %d against bf16 slower than it; "
           "%d failed\n",
           kKindNames[kind], nr, med, nr ? ratios[0] : NAN, below, bf16_slower, failed);
    free(ratios);
}

static void print_slowest(const cell_result *cells, int count, int n) {
    const cell_result **sorted = malloc(sizeof *sorted * (size_t)count);
    int m = 0;
    for (int i = 0; i < count; ++i)
        if (!cells[i].failed && cells[i].ratio > 0) sorted[m++] = &cells[i];
    qsort(sorted, (size_t)m, sizeof *sorted, compare_ratio);
    printf("\n== the %d slowest cells (blockfp8 us / baseline us, calls per graph) ==\n", n < m ? n : m);
    for (int i = 0; i < n && i < m; ++i) {
        const cell_result *r = sorted[i];
        printf("  %-9s M=%-6lld N=%-5lld K=%-5lld  %.3fx  %9.2f / %9.2f us  (%s, %d calls)\n", kKindNames[r->kind],
               (long long)r->m, (long long)r->n, (long long)r->k, r->ratio, r->bfp8_us, r->base_us,
               r->baseline_bf16 ? "cuBLAS bf16" : "cuBLASLt", r->calls);
    }
    free(sorted);
}

static void write_json(const char *path, const bench_device_info *dev, const cell_result *cells, int count) {
    FILE *f = fopen(path, "w");
    if (!f) bench_die("cannot write %s", path);
    fprintf(f, "{\n  ");
    bench_device_info_json(f, "device", dev);
    fprintf(f, ",\n  \"cells\": [\n");
    for (int i = 0; i < count; ++i) {
        const cell_result *r = &cells[i];
        fprintf(f, "    {\"kind\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"baseline\": \"%s\", ",
                kKindNames[r->kind], (long long)r->m, (long long)r->n, (long long)r->k,
                r->baseline_bf16 ? "cublas-bf16" : "cublaslt-fp8-blockwise");
        fprintf(f, "\"bfp8_us\": ");
        bench_json_number(f, r->bfp8_us);
        fprintf(f, ", \"baseline_us\": ");
        bench_json_number(f, r->base_us);
        fprintf(f, ", \"ratio\": ");
        bench_json_number(f, r->ratio);
        fprintf(f, ", \"worst_tile_db\": ");
        bench_json_number(f, r->worst_tile_db);
        fprintf(f, ", \"calls_per_graph\": %d, \"failed\": %d, \"reason\": ", r->calls, r->failed);
        bench_json_string(f, r->reason);
        fprintf(f, "}%s\n", i + 1 < count ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
}

/* ------------------------------------------------------------------------ */

static void usage(const char *program) {
    fprintf(stderr,
            "usage: %s [--quick] [--kinds LIST] [--m LIST] [--nk LIST] [--graph-us US] [--reps N] [--no-gemm-pdl]\n"
            "          [--json FILE]\n"
            "  --kinds    comma-separated of 1d2d-bf16, 1d2d-f32, 1d1d (default: all)\n"
            "  --m LIST   token counts (default 1,8,64,128,512,2048,8192,32768)\n"
            "  --nk LIST  the values of N and of K (default 256,512,1024,2048,4096,7168)\n"
            "  --graph-us the GPU time one captured graph should take (default 2000)\n"
            "  --reps N   graph launches timed per contender (default 7)\n"
            "  --quick    M 1,64,2048 and N, K 512,4096\n"
            "  --no-gemm-pdl  blockfp8's GEMMs launched as plain kernels (BFP8_OPTION_GEMM_PDL off)\n",
            program);
    exit(2);
}

static int parse_list(const char *text, int64_t *out, int max) {
    int n = 0;
    for (const char *p = text; *p;) {
        char *end = NULL;
        const long long v = strtoll(p, &end, 10);
        if (end == p || v < 1 || v > (1ll << 20) || n == max) return 0;
        out[n++] = v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return n;
}

int main(int argc, char **argv) {
    int64_t ms[MAX_AXIS], nks[MAX_AXIS];
    int nm = 0, nnk = 0, kinds[NUM_KINDS] = {1, 1, 1}, reps = 7, quick = 0, gemm_pdl = 1;
    double graph_us = 2000.0;
    const char *json_path = NULL;
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--quick") == 0) {
            quick = 1;
        } else if (strcmp(arg, "--no-gemm-pdl") == 0) {
            gemm_pdl = 0;
        } else if (strcmp(arg, "--m") == 0 && value) {
            if (!(nm = parse_list(value, ms, MAX_AXIS))) usage(argv[0]);
            ++i;
        } else if (strcmp(arg, "--nk") == 0 && value) {
            if (!(nnk = parse_list(value, nks, MAX_AXIS))) usage(argv[0]);
            ++i;
        } else if (strcmp(arg, "--kinds") == 0 && value) {
            memset(kinds, 0, sizeof kinds);
            char buf[128];
            snprintf(buf, sizeof buf, "%s", value);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                int found = 0;
                for (int k = 0; k < NUM_KINDS; ++k)
                    if (strcmp(tok, kKindNames[k]) == 0) kinds[k] = found = 1;
                if (!found) usage(argv[0]);
            }
            ++i;
        } else if (strcmp(arg, "--graph-us") == 0 && value) {
            graph_us = atof(value);
            if (!(graph_us >= 10.0 && graph_us <= 1e6)) usage(argv[0]);
            ++i;
        } else if (strcmp(arg, "--reps") == 0 && value) {
            reps = atoi(value);
            if (reps < 1 || reps > 1000) usage(argv[0]);
            ++i;
        } else if (strcmp(arg, "--json") == 0 && value) {
            json_path = value;
            ++i;
        } else {
            usage(argv[0]);
        }
    }
    if (!nm) {
        nm = quick ? 3 : 8;
        memcpy(ms, quick ? kQuickM : kDefaultM, sizeof(int64_t) * (size_t)nm);
    }
    if (!nnk) {
        nnk = quick ? 2 : 6;
        memcpy(nks, quick ? kQuickNK : kDefaultNK, sizeof(int64_t) * (size_t)nnk);
    }
    if (bfp8_cuda_device_count() < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    grid_env env;
    memset(&env, 0, sizeof env);
    env.reps = reps;
    env.graph_us = graph_us;
    bench_device_info dev;
    bench_device_info_read(0, &dev);
    bench_device_info_print(stdout, &dev);
    printf("CUDA graphs of calls totalling ~%.0f us each, %d timed launches per contender (median), interleaved\n",
           graph_us, reps);
    BENCH_BFP8_OR_DIE(bfp8_context_create(&env.ctx, BFP8_BACKEND_CUDA, 0));
    BENCH_BFP8_OR_DIE(bfp8_context_set_option(env.ctx, BFP8_OPTION_GEMM_PDL, gemm_pdl));
    printf("blockfp8 GEMMs launched as programmatic dependents: %s\n", gemm_pdl ? "yes" : "no (--no-gemm-pdl)");
    BENCH_CUDA_OR_DIE(cudaStreamCreate(&env.stream));
    BENCH_BFP8_OR_DIE(bfp8_context_set_stream(env.ctx, env.stream));
    if (cublasLtCreate(&env.lt) != CUBLAS_STATUS_SUCCESS) bench_die("cublasLtCreate failed");
    BENCH_CUDA_OR_DIE(cudaMalloc(&env.workspace, BENCH_LT_WORKSPACE_BYTES));

    const int total = NUM_KINDS * nm * nnk * nnk;
    cell_result *cells = calloc((size_t)total, sizeof *cells);
    if (!cells) bench_die("out of host memory");
    int count = 0, failures = 0;
    for (int kind = 0; kind < NUM_KINDS; ++kind) {
        if (!kinds[kind]) continue;
        for (int mi = 0; mi < nm; ++mi)
            for (int ni = 0; ni < nnk; ++ni)
                for (int ki = 0; ki < nnk; ++ki) {
                    cell_result *r = &cells[count++];
                    r->kind = (grid_kind)kind;
                    r->m = ms[mi];
                    r->n = nks[ni];
                    r->k = nks[ki];
                    run_cell(&env, r);
                    if (r->failed) {
                        ++failures;
                        printf("  FAILED %s M=%lld N=%lld K=%lld: %s\n", kKindNames[kind], (long long)r->m,
                               (long long)r->n, (long long)r->k, r->reason);
                        if (cudaGetLastError() != cudaSuccess || cudaStreamSynchronize(env.stream) != cudaSuccess)
                            bench_die("CUDA is broken after that failure");
                    }
                }
    }
    for (int kind = 0; kind < NUM_KINDS; ++kind)
        if (kinds[kind]) print_kind(cells, count, (grid_kind)kind, ms, nm, nks, nnk);
    print_slowest(cells, count, 15);
    int refused = 0;
    const char *why = "";
    for (int i = 0; i < count; ++i)
        if (cells[i].baseline_bf16 && refused++ == 0) why = cells[i].baseline_note;
    if (refused) printf("cuBLASLt refused %d cells (the first: %s)\n", refused, why);
    if (json_path) write_json(json_path, &dev, cells, count);
    printf("output checks and calls: %d failed\n", failures);

    free(cells);
    cudaFree(env.workspace);
    cublasLtDestroy(env.lt);
    bfp8_context_destroy(env.ctx);
    cudaStreamDestroy(env.stream);
    return failures ? 1 : 0;
}
