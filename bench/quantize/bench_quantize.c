/*
 * bench_quantize.c - the CUDA quantizers against the device-to-device copy
 * bandwidth measured in the same run (the bars: docs/TARGETS.md).
 *
 *   bench_quantize [--warmup N] [--reps N] [--json FILE] [--quick] [--profile] [--no-check]
 *                  [--act RxC]... [--weight RxC]... [--dtype bf16|f32] [--chain] [--no-pdl]
 *                  [--no-warm-l2] [--ab-warm-l2] [--settle-ms N] [--pad-ld BYTES]
 *
 * First a cudaMemcpyAsync device-to-device of a 1 GiB buffer (copy bandwidth
 * = 2 * bytes / time: read + write), then every kernel on the issue's
 * shapes:
 *   activations 16384x4096, 16384x14336, 131072x4096, bf16 and f32:
 *       1x128 dual (both layouts from one read), rows only, cols only
 *   weights 4096x14336, bf16 and f32: 128x128 with W^T, and W only
 * Each timing: warm-up calls, then the median of N calls between CUDA
 * events, rotating over two input/output sets (every working set is far
 * above the 60 MB L2, so nothing is served from the cache). GB/s counts the
 * bytes the kernel must move: x read once, every code and scale written
 * once. After timing, two 128-row slabs of every output (the first and the
 * last) are compared bit for bit with the CPU reference of the same slab,
 * so the large shapes that the tests do not cover are checked too.
 *
 * --profile: no timing and no checks, one launch of each kernel (plus one
 * copy), for `ncu --launch-count` / nsys.
 * --quick: only 16384x4096 and the weight, fewer repetitions.
 * --act / --weight: time these activation (1x128) / weight (128x128) shapes
 * instead of the defaults (given either, only the shapes given run);
 * --dtype: only that input type.
 * --chain: time chains of --reps calls with nothing between them (the copy
 * too), the median over 7 chains, instead of an event between calls.
 * --no-pdl: launch the quantizers without programmatic dependent launch
 * (the context option BFP8_OPTION_QUANTIZE_PDL off; by default each is
 * launched behind the previous kernel of the stream). Timed with events
 * between calls, PDL changes nothing (an event record is not a kernel); in
 * chains it saves a launch's latency per call.
 * --no-warm-l2: the first resident CTAs of a quantizer no longer ask L2 for
 * 64 rows of their tile before they wait for the previous kernel
 * (BFP8_OPTION_QUANTIZE_WARM_L2 off).
 * --ab-warm-l2: after each timing, four more of the same kernel, warm-up
 * off, on, off, on, in the same process (same buffers), printed as % of the
 * copy under the kernel's line.
 * --settle-ms N: the GPU idles N ms (default 300; 0: none) after a
 * workload's buffers are allocated and filled, before they are timed.
 * Right after GiB-sized buffers are freed and others allocated, the first
 * ~10 ms of kernels run up to 9% slower (on an H200, W+W^T's first chains
 * at 67 us a call, then 61), which a short kernel's whole timing can fall
 * into.
 * --pad-ld BYTES: every code matrix gets BYTES (a multiple of 16) more
 * than the canonical ld between its rows (bfp8_qmatrix_layout), to see
 * what the row stride of x^T does to DRAM traffic.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench_device.h"
#include "bench_util.h"
#include "blockfp8.h"

enum { MODE_DUAL, MODE_ROWS, MODE_COLS, MODE_W_WT, MODE_W, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = {"1x128 dual", "1x128 rows", "1x128 cols",
                                                   "128x128 W+W^T", "128x128 W"};
enum { kSets = 2 };

typedef struct result {
    char kernel[32];
    bfp8_dtype dtype;
    int64_t rows, cols;
    double bytes_read, bytes_written;
    bench_timing t;
    double gbps, pct_copy;
    int64_t check_errors; /* -1: not checked */
} result;

enum { kMaxResults = 96 }; /* 5 kernels x 2 input types x the shapes given */
static result results[kMaxResults];
static int n_results = 0;

/* GB/s of a call of r's kernel that took ms: the bytes it must move over its time. */
static double gbps_of(const result *r, double ms) { return (r->bytes_read + r->bytes_written) / (ms * 1e-3) / 1e9; }

static bfp8_context *gpu, *cpu;
static cudaStream_t stream;
static int chain_timing; /* --chain */
static int settle_ms = 300; /* --settle-ms */
static int64_t pad_ld; /* --pad-ld: bytes added to the canonical ld of every code matrix */
enum { kChains = 7 };

static bench_timing time_calls(bench_call_fn fn, void *arg, int sets, int warmup, int reps) {
    return chain_timing ? bench_time_chain(fn, arg, sets, warmup, reps, kChains, stream)
                        : bench_time(fn, arg, sets, warmup, reps, stream);
}

/* ------------------------------------------------------------------------ */
/* One (shape, dtype): inputs and outputs of every mode, kSets of each       */

typedef struct qbuf {
    bfp8_qmatrix q;
    size_t data_bytes, scale_bytes;
} qbuf;

typedef struct workload {
    bfp8_dtype dtype;
    int64_t rows, cols;
    bfp8_matrix x[kSets];
    qbuf rows_q[kSets], cols_q[kSets]; /* 1x128: x as stored, x^T; or 128x128 W, W^T */
    int block;
    int mode; /* what `call` runs */
} workload;

static void qbuf_alloc(qbuf *b, int64_t rows, int64_t cols, bfp8_granularity g) {
    BENCH_BFP8_OR_DIE(bfp8_qmatrix_layout(&b->q, rows, cols, g, &b->data_bytes, &b->scale_bytes));
    b->q.ld += pad_ld;
    b->data_bytes = (size_t)(rows * b->q.ld);
    void *d, *s;
    BENCH_BFP8_OR_DIE(bfp8_malloc(gpu, &d, b->data_bytes));
    BENCH_BFP8_OR_DIE(bfp8_malloc(gpu, &s, b->scale_bytes));
    /* never measure on untouched memory: make every page resident and non-zero */
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(d, 0x5a, b->data_bytes, stream));
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(s, 0x5a, b->scale_bytes, stream));
    b->q.data = d;
    b->q.scales = s;
}

static void workload_init(workload *w, bfp8_dtype dtype, int64_t rows, int64_t cols, int block,
                          uint64_t seed) {
    memset(w, 0, sizeof *w);
    w->dtype = dtype;
    w->rows = rows;
    w->cols = cols;
    w->block = block;
    const bfp8_granularity g = block ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128;
    for (int s = 0; s < kSets; ++s) {
        void *x;
        BENCH_BFP8_OR_DIE(bfp8_malloc(gpu, &x, (size_t)(rows * cols) * bfp8_dtype_size(dtype)));
        BENCH_CUDA_OR_DIE(bench_fill_normal(x, dtype, rows, cols, cols, 1.0f, seed + 17 * s, stream));
        w->x[s] = (bfp8_matrix){x, dtype, rows, cols, cols};
        qbuf_alloc(&w->rows_q[s], rows, cols, g);
        qbuf_alloc(&w->cols_q[s], cols, rows, g);
    }
    BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));
}

static void workload_free(workload *w) {
    for (int s = 0; s < kSets; ++s) {
        bfp8_free(gpu, w->x[s].data);
        bfp8_free(gpu, w->rows_q[s].q.data);
        bfp8_free(gpu, w->rows_q[s].q.scales);
        bfp8_free(gpu, w->cols_q[s].q.data);
        bfp8_free(gpu, w->cols_q[s].q.scales);
    }
}

static bfp8_status run_mode(workload *w, int mode, int set) {
    bfp8_qmatrix *q = &w->rows_q[set].q, *t = &w->cols_q[set].q;
    switch (mode) {
    case MODE_DUAL: return bfp8_quantize_1x128(gpu, &w->x[set], q, t, NULL);
    case MODE_ROWS: return bfp8_quantize_1x128(gpu, &w->x[set], q, NULL, NULL);
    case MODE_COLS: return bfp8_quantize_1x128(gpu, &w->x[set], NULL, t, NULL);
    case MODE_W_WT: return bfp8_quantize_128x128(gpu, &w->x[set], q, t, NULL);
    default: return bfp8_quantize_128x128(gpu, &w->x[set], q, NULL, NULL);
    }
}

static int call_quantize(void *arg, int set, char *reason, size_t reason_size) {
    workload *w = arg;
    const bfp8_status st = run_mode(w, w->mode, set);
    if (st != BFP8_OK) {
        snprintf(reason, reason_size, "%s: %s", bfp8_status_name(st), bfp8_last_error());
        return 1;
    }
    return 0;
}

/* Bytes a mode must move: x once, codes and scales of each output once. */
static void mode_bytes(const workload *w, int mode, double *read, double *written) {
    *read = (double)w->rows * (double)w->cols * (double)bfp8_dtype_size(w->dtype);
    const double codes = (double)w->rows * (double)w->cols;
    const double rb = (double)bench_ceil_div(w->rows, 128), cb = (double)bench_ceil_div(w->cols, 128);
    double wr = 0.0;
    if (mode == MODE_DUAL || mode == MODE_ROWS) wr += codes + 4.0 * (double)w->rows * cb;
    if (mode == MODE_DUAL || mode == MODE_COLS) wr += codes + 4.0 * (double)w->cols * rb;
    if (mode == MODE_W_WT || mode == MODE_W) wr += codes + 4.0 * rb * cb;
    if (mode == MODE_W_WT) wr += codes + 4.0 * rb * cb;
    *written = wr;
}

/* ------------------------------------------------------------------------ */
/* Check: two 128-row slabs of set 0's outputs against the CPU reference     */

static int64_t compare_bytes(const char *what, const uint8_t *got, const uint8_t *want, size_t n,
                             int64_t *shown) {
    int64_t bad = 0;
    for (size_t i = 0; i < n; ++i)
        if (got[i] != want[i]) {
            if ((*shown)++ < 5)
                fprintf(stderr, "  CHECK %s: byte %zu = 0x%02x, expected 0x%02x\n", what, i, got[i], want[i]);
            ++bad;
        }
    return bad;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) bench_die("out of host memory (%zu bytes)", n);
    return p;
}

/* Codes: rows [r0, r0+nr) x all cols of q (device, q->ld) into dense host. */
static void fetch_rows(const bfp8_qmatrix *q, int64_t r0, int64_t nr, uint8_t *host) {
    BENCH_CUDA_OR_DIE(cudaMemcpy2D(host, (size_t)q->cols, q->data + r0 * q->ld, (size_t)q->ld,
                                   (size_t)q->cols, (size_t)nr, cudaMemcpyDeviceToHost));
}
/* Codes: all rows x cols [c0, c0+nc) of q into dense host (nc wide). */
static void fetch_cols(const bfp8_qmatrix *q, int64_t c0, int64_t nc, uint8_t *host) {
    BENCH_CUDA_OR_DIE(cudaMemcpy2D(host, (size_t)nc, q->data + c0, (size_t)q->ld, (size_t)nc,
                                   (size_t)q->rows, cudaMemcpyDeviceToHost));
}

static int64_t check_slab(workload *w, int mode, int64_t r0) {
    const int64_t R = w->rows, C = w->cols, nr = R - r0 < 128 ? R - r0 : 128;
    const int64_t cb = bench_ceil_div(C, 128), rb = r0 / 128;
    const size_t es = bfp8_dtype_size(w->dtype);
    uint8_t *hx = xmalloc((size_t)(nr * C) * es);
    BENCH_CUDA_OR_DIE(cudaMemcpy(hx, (const uint8_t *)w->x[0].data + (size_t)(r0 * C) * es,
                                 (size_t)(nr * C) * es, cudaMemcpyDeviceToHost));
    const bfp8_matrix hm = {hx, w->dtype, nr, C, C};
    const int block = mode == MODE_W_WT || mode == MODE_W;
    const int want_q = mode != MODE_COLS, want_t = mode == MODE_DUAL || mode == MODE_COLS || mode == MODE_W_WT;
    const bfp8_granularity g = block ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128;
    bfp8_qmatrix rq, rt; /* CPU reference of the slab: nr x C and C x nr, dense codes */
    size_t db, sb, tdb, tsb;
    BENCH_BFP8_OR_DIE(bfp8_qmatrix_layout(&rq, nr, C, g, &db, &sb));
    BENCH_BFP8_OR_DIE(bfp8_qmatrix_layout(&rt, C, nr, g, &tdb, &tsb));
    rq.ld = C; rt.ld = nr; /* dense, so the code comparison is one memcmp */
    rq.data = xmalloc((size_t)(nr * C)); rq.scales = xmalloc(sb);
    rt.data = xmalloc((size_t)(nr * C)); rt.scales = xmalloc(tsb);
    if (block)
        BENCH_BFP8_OR_DIE(bfp8_quantize_128x128(cpu, &hm, &rq, &rt, NULL));
    else
        BENCH_BFP8_OR_DIE(bfp8_quantize_1x128(cpu, &hm, &rq, &rt, NULL));

    int64_t bad = 0, shown = 0;
    char what[128];
    uint8_t *codes = xmalloc((size_t)(nr * C));
    float *sc = xmalloc((size_t)(C > cb ? C : cb) * sizeof(float));
    if (want_q) {
        const bfp8_qmatrix *q = &w->rows_q[0].q;
        snprintf(what, sizeof what, "%s rows %lld.. codes", mode_names[mode], (long long)r0);
        fetch_rows(q, r0, nr, codes);
        bad += compare_bytes(what, codes, rq.data, (size_t)(nr * C), &shown);
        snprintf(what, sizeof what, "%s rows %lld.. scales", mode_names[mode], (long long)r0);
        if (block) {
            BENCH_CUDA_OR_DIE(cudaMemcpy(sc, q->scales + rb * q->scale_ld, (size_t)cb * 4, cudaMemcpyDeviceToHost));
            bad += compare_bytes(what, (uint8_t *)sc, (uint8_t *)rq.scales, (size_t)cb * 4, &shown);
        } else {
            /* scales[kb * scale_ld + r]: nr floats per k-block */
            float *ref = xmalloc((size_t)(nr * cb) * 4);
            BENCH_CUDA_OR_DIE(cudaMemcpy2D(ref, (size_t)nr * 4, q->scales + r0,
                                           (size_t)q->scale_ld * 4, (size_t)nr * 4, (size_t)cb,
                                           cudaMemcpyDeviceToHost));
            for (int64_t kb = 0; kb < cb; ++kb)
                bad += compare_bytes(what, (uint8_t *)(ref + kb * nr), (uint8_t *)(rq.scales + kb * rq.scale_ld),
                                     (size_t)nr * 4, &shown);
            free(ref);
        }
    }
    if (want_t) {
        const bfp8_qmatrix *t = &w->cols_q[0].q;
        snprintf(what, sizeof what, "%s transposed cols %lld.. codes", mode_names[mode], (long long)r0);
        fetch_cols(t, r0, nr, codes);
        bad += compare_bytes(what, codes, rt.data, (size_t)(nr * C), &shown);
        snprintf(what, sizeof what, "%s transposed cols %lld.. scales", mode_names[mode], (long long)r0);
        if (block) { /* t_scales[kb * t_scale_ld + rb], kb over C's blocks */
            BENCH_CUDA_OR_DIE(cudaMemcpy2D(sc, 4, t->scales + rb, (size_t)t->scale_ld * 4, 4, (size_t)cb,
                                           cudaMemcpyDeviceToHost));
            for (int64_t kb = 0; kb < cb; ++kb)
                bad += compare_bytes(what, (uint8_t *)(sc + kb), (uint8_t *)(rt.scales + kb * rt.scale_ld),
                                     4, &shown);
        } else { /* t_scales[rb * t_scale_ld + c], C of them */
            BENCH_CUDA_OR_DIE(cudaMemcpy(sc, t->scales + rb * t->scale_ld, (size_t)C * 4, cudaMemcpyDeviceToHost));
            bad += compare_bytes(what, (uint8_t *)sc, (uint8_t *)rt.scales, (size_t)C * 4, &shown);
        }
    }
    free(codes);
    free(sc);
    free(rq.data); free(rq.scales); free(rt.data); free(rt.scales);
    free(hx);
    return bad;
}

/* ------------------------------------------------------------------------ */
/* Copy bandwidth                                                            */

typedef struct copy_arg {
    void *src, *dst;
    size_t bytes;
} copy_arg;

static int call_copy(void *arg, int set, char *reason, size_t reason_size) {
    (void)set;
    copy_arg *c = arg;
    const cudaError_t e = cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) {
        snprintf(reason, reason_size, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

/* After a workload's buffers were allocated and filled: drain the stream and
 * let the GPU idle settle_ms, so that no timing starts inside the
 * allocations' aftermath. */
static void settle_after_allocation(void) {
    BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));
    bench_sleep_ms(settle_ms);
}

static double measure_copy(size_t bytes, int warmup, int reps, bench_timing *out) {
    copy_arg c = {NULL, NULL, bytes};
    BENCH_CUDA_OR_DIE(cudaMalloc(&c.src, bytes));
    BENCH_CUDA_OR_DIE(cudaMalloc(&c.dst, bytes));
    BENCH_CUDA_OR_DIE(bench_fill_normal(c.src, BFP8_F32, 1, (int64_t)(bytes / 4), (int64_t)(bytes / 4),
                                        1.0f, 99, stream));
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(c.dst, 0x5a, bytes, stream));
    /* (not settled: its chains are flat right after the allocation, and settled it read
     * 0.6% lower on an H200, which would flatter every kernel's percentage) */
    *out = time_calls(call_copy, &c, 1, warmup, reps);
    BENCH_CUDA_OR_DIE(cudaFree(c.src));
    BENCH_CUDA_OR_DIE(cudaFree(c.dst));
    if (!out->ok) return 0.0;
    return 2.0 * (double)bytes / (out->median_ms * 1e-3) / 1e9;
}

/* ------------------------------------------------------------------------ */

static void usage(const char *prog) {
    fprintf(stderr,
            "usage: %s [--warmup N] [--reps N] [--json FILE] [--quick] [--profile] [--no-check]\n"
            "          [--act RxC]... [--weight RxC]... [--dtype bf16|f32] [--chain] [--no-pdl]\n"
            "          [--no-warm-l2] [--ab-warm-l2] [--settle-ms N] [--pad-ld BYTES]\n", prog);
    exit(2);
}

int main(int argc, char **argv) {
    int warmup = 5, reps = 30, quick = 0, profile = 0, check = 1;
    const char *json = NULL;
    int ab_warm = 0, pdl = 1, warm_l2 = 1;
    enum { kMaxShapes = 8 };
    int64_t shapes[2 * kMaxShapes][2]; /* activations, then weights */
    int is_weight[2 * kMaxShapes], n_given = 0, d_first = 0, d_last = 1;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--warmup") == 0 && v) { warmup = atoi(v); ++i; }
        else if (strcmp(a, "--reps") == 0 && v) { reps = atoi(v); ++i; }
        else if (strcmp(a, "--json") == 0 && v) { json = v; ++i; }
        else if (strcmp(a, "--quick") == 0) quick = 1;
        else if (strcmp(a, "--profile") == 0) profile = 1;
        else if (strcmp(a, "--no-check") == 0) check = 0;
        else if (strcmp(a, "--chain") == 0) chain_timing = 1;
        else if (strcmp(a, "--no-pdl") == 0) pdl = 0;
        else if (strcmp(a, "--no-warm-l2") == 0) warm_l2 = 0;
        else if (strcmp(a, "--ab-warm-l2") == 0) ab_warm = 1;
        else if (strcmp(a, "--settle-ms") == 0 && v) {
            settle_ms = atoi(v);
            if (settle_ms < 0) usage(argv[0]);
            ++i;
        }
        else if (strcmp(a, "--pad-ld") == 0 && v) {
            pad_ld = atoll(v);
            if (pad_ld < 0 || pad_ld % 16 != 0) usage(argv[0]);
            ++i;
        }
        else if ((strcmp(a, "--act") == 0 || strcmp(a, "--weight") == 0) && v) {
            long long r = 0, c = 0;
            char tail = 0;
            if (n_given == 2 * kMaxShapes || sscanf(v, "%lldx%lld%c", &r, &c, &tail) != 2 || r < 1 || c < 1)
                usage(argv[0]);
            shapes[n_given][0] = r;
            shapes[n_given][1] = c;
            is_weight[n_given++] = a[2] == 'w';
            ++i;
        }
        else if (strcmp(a, "--dtype") == 0 && v) {
            if (strcmp(v, "bf16") == 0) d_first = d_last = 0;
            else if (strcmp(v, "f32") == 0) d_first = d_last = 1;
            else usage(argv[0]);
            ++i;
        }
        else usage(argv[0]);
    }
    if (quick) reps = reps > 10 ? 10 : reps;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (bfp8_cuda_device_count() < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    BENCH_BFP8_OR_DIE(bfp8_context_create(&gpu, BFP8_BACKEND_CUDA, 0));
    BENCH_BFP8_OR_DIE(bfp8_context_create(&cpu, BFP8_BACKEND_CPU, 0));
    BENCH_CUDA_OR_DIE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    BENCH_BFP8_OR_DIE(bfp8_context_set_stream(gpu, stream));
    bench_device_info dev;
    bench_device_info_read(0, &dev);
    bench_device_info_print(stdout, &dev);
    BENCH_BFP8_OR_DIE(bfp8_context_set_option(gpu, BFP8_OPTION_QUANTIZE_PDL, pdl));
    BENCH_BFP8_OR_DIE(bfp8_context_set_option(gpu, BFP8_OPTION_QUANTIZE_WARM_L2, warm_l2));
    printf("timing: %s; quantizers launched %s programmatic dependent launch, L2 warm-up %s; "
           "%d ms idle after each workload's allocation\n",
           chain_timing ? "chains of calls with nothing between them (median of 7 chains)"
                        : "an event between calls (median call)",
           pdl ? "with" : "without", warm_l2 ? "on" : "off", settle_ms);
    if (pad_ld) printf("code matrices: %lld bytes between rows beyond the canonical ld\n", (long long)pad_ld);

    /* The ceiling: a device-to-device copy of 1 GiB (and 256 MiB, for reference). */
    bench_timing copy_t, copy_small_t;
    const size_t copy_bytes = (size_t)1 << 30;
    double copy_gbps = 0.0, copy_small_gbps = 0.0;
    if (profile) {
        copy_gbps = measure_copy(copy_bytes, 0, 1, &copy_t);
    } else {
        copy_gbps = measure_copy(copy_bytes, warmup, reps, &copy_t);
        copy_small_gbps = measure_copy(copy_bytes / 4, warmup, reps, &copy_small_t);
        if (!copy_t.ok) bench_die("copy: %s", copy_t.reason);
        printf("D2D copy 1 GiB: %.3f ms median, %.0f GB/s (read + write); 256 MiB: %.0f GB/s\n",
               copy_t.median_ms, copy_gbps, copy_small_gbps);
    }

    if (n_given == 0) { /* the shapes: activations, then the weight */
        static const int64_t defaults[][2] = {{16384, 4096}, {16384, 14336}, {131072, 4096}, {4096, 14336}};
        const int n_act = quick ? 1 : 3;
        for (int k = 0; k < n_act; ++k, ++n_given) {
            memcpy(shapes[n_given], defaults[k], sizeof shapes[0]);
            is_weight[n_given] = 0;
        }
        memcpy(shapes[n_given], defaults[3], sizeof shapes[0]);
        is_weight[n_given++] = 1;
    }
    const bfp8_dtype dtypes[2] = {BFP8_BF16, BFP8_F32};
    int64_t total_bad = 0;
    uint64_t seed = 1;

    for (int k = 0; k < n_given; ++k) {
        const int block = is_weight[k];
        const int64_t R = shapes[k][0], C = shapes[k][1];
        for (int d = d_first; d <= d_last; ++d) {
            workload w;
            workload_init(&w, dtypes[d], R, C, block, seed++);
            settle_after_allocation();
            const int m0 = block ? MODE_W_WT : MODE_DUAL, m1 = block ? MODE_W : MODE_COLS;
            for (int mode = m0; mode <= m1; ++mode) {
                w.mode = mode;
                if (n_results == kMaxResults) bench_die("more than %d results", kMaxResults);
                result *r = &results[n_results++];
                memset(r, 0, sizeof *r);
                snprintf(r->kernel, sizeof r->kernel, "%s", mode_names[mode]);
                r->dtype = w.dtype;
                r->rows = R;
                r->cols = C;
                r->check_errors = -1;
                mode_bytes(&w, mode, &r->bytes_read, &r->bytes_written);
                if (profile) {
                    BENCH_BFP8_OR_DIE(run_mode(&w, mode, 0));
                    BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));
                    continue;
                }
                r->t = time_calls(call_quantize, &w, kSets, warmup, reps);
                if (r->t.ok) {
                    r->gbps = gbps_of(r, r->t.median_ms);
                    r->pct_copy = 100.0 * r->gbps / copy_gbps;
                }
                if (check && r->t.ok) {
                    BENCH_BFP8_OR_DIE(run_mode(&w, mode, 0));
                    BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));
                    r->check_errors = check_slab(&w, mode, 0) + check_slab(&w, mode, (R - 1) / 128 * 128);
                    total_bad += r->check_errors;
                }
                printf("%-17s %-4s %6lldx%-6lld %s %9.1f us %7.0f GB/s %5.1f%% of copy%s\n", r->kernel,
                       bfp8_dtype_name(r->dtype), (long long)R, (long long)C, r->t.ok ? "" : "FAILED",
                       r->t.median_ms * 1e3, r->gbps, r->pct_copy,
                       r->check_errors > 0 ? "  << CHECK FAILED" : r->check_errors == 0 ? "  (checked)" : "");
                if (!r->t.ok) printf("    %s\n", r->t.reason);
                if (ab_warm && r->t.ok) { /* off, on, off, on: the same buffers, one process */
                    double pct[2][2];
                    for (int k = 0; k < 4; ++k) {
                        BENCH_BFP8_OR_DIE(bfp8_context_set_option(gpu, BFP8_OPTION_QUANTIZE_WARM_L2, k % 2));
                        const bench_timing t = time_calls(call_quantize, &w, kSets, warmup, reps);
                        pct[k % 2][k / 2] =
                            t.ok ? 100.0 * gbps_of(r, t.median_ms) / copy_gbps : NAN;
                    }
                    BENCH_BFP8_OR_DIE(bfp8_context_set_option(gpu, BFP8_OPTION_QUANTIZE_WARM_L2, warm_l2));
                    printf("    L2 warm-up A/B, %% of copy: off %.1f / %.1f, on %.1f / %.1f\n", pct[0][0], pct[0][1],
                           pct[1][0], pct[1][1]);
                }
            }
            workload_free(&w);
        }
    }
    if (profile) {
        printf("profile: one launch of each of %d kernels done\n", n_results);
        return 0;
    }

    printf("\n==== Summary (copy %.0f GB/s = 100%%; GB/s counts x read + codes and scales written) ====\n",
           copy_gbps);
    printf("%-17s %-4s %-13s %9s %9s %7s %6s %s\n", "kernel", "in", "shape", "median", "min", "GB/s",
           "%copy", "check");
    int all_ok = 1;
    for (int i = 0; i < n_results; ++i) {
        const result *r = &results[i];
        char shape[32];
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)r->rows, (long long)r->cols);
        if (!r->t.ok) all_ok = 0;
        printf("%-17s %-4s %-13s %7.1fus %7.1fus %7.0f %5.1f%% %s\n", r->kernel, bfp8_dtype_name(r->dtype),
               shape, r->t.median_ms * 1e3, r->t.min_ms * 1e3, r->gbps, r->pct_copy,
               r->check_errors < 0 ? "-" : r->check_errors == 0 ? "ok" : "FAILED");
    }

    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) bench_die("cannot write %s", json);
        fprintf(f, "{\n  ");
        bench_device_info_json(f, "device", &dev);
        fprintf(f, ",\n  \"copy\": {\"bytes\": %zu, \"median_ms\": ", copy_bytes);
        bench_json_number(f, copy_t.median_ms);
        fprintf(f, ", \"gbps\": ");
        bench_json_number(f, copy_gbps);
        fprintf(f, ", \"gbps_256mib\": ");
        bench_json_number(f, copy_small_gbps);
        fprintf(f, "},\n  \"warmup\": %d, \"reps\": %d, \"sets\": %d, \"settle_ms\": %d,\n  \"results\": [\n", warmup,
                reps, kSets, settle_ms);
        for (int i = 0; i < n_results; ++i) {
            const result *r = &results[i];
            fprintf(f, "    {\"kernel\": ");
            bench_json_string(f, r->kernel);
            fprintf(f, ", \"dtype\": ");
            bench_json_string(f, bfp8_dtype_name(r->dtype));
            fprintf(f, ", \"rows\": %lld, \"cols\": %lld, \"bytes_read\": %.0f, \"bytes_written\": %.0f, \"ok\": %d",
                    (long long)r->rows, (long long)r->cols, r->bytes_read, r->bytes_written, r->t.ok);
            fprintf(f, ", \"median_ms\": ");
            bench_json_number(f, r->t.median_ms);
            fprintf(f, ", \"min_ms\": ");
            bench_json_number(f, r->t.min_ms);
            fprintf(f, ", \"max_ms\": ");
            bench_json_number(f, r->t.max_ms);
            fprintf(f, ", \"gbps\": ");
            bench_json_number(f, r->gbps);
            fprintf(f, ", \"pct_copy\": ");
            bench_json_number(f, r->pct_copy);
            fprintf(f, ", \"check_errors\": %lld}%s\n", (long long)r->check_errors, i + 1 < n_results ? "," : "");
        }
        fprintf(f, "  ]\n}\n");
        fclose(f);
    }
    bfp8_context_destroy(cpu);
    bfp8_context_destroy(gpu);
    cudaStreamDestroy(stream);
    if (total_bad) printf("CHECK FAILED: %lld bytes differ from the CPU reference\n", (long long)total_bad);
    return all_ok && total_bad == 0 ? 0 : 1;
}
