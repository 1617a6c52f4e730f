/*
 * bench_linear.c - one linear layer, forward and backward, per recipe
 * (docs/TARGETS.md, "Linear layer forward + backward"):
 *
 *   forward   y  = x W^T          x: M x K bf16, W: N x K (f32 master), y: M x N bf16
 *   backward  dx = dy W,  dW = dy^T x     dy, dx bf16, dW f32
 *
 * times bfp8_linear_forward + bfp8_linear_backward on a CUDA context, all
 * quantization included, for the recipes bf16, fp8-blockwise and
 * fp8-blockwise-bf16wgrad; bfp8_linear_set_weight (the weight quantization,
 * once per optimizer step) is timed on its own. Prints microseconds and the
 * speedup over the bf16 recipe, and how far each fp8 recipe's y, dx, dW are
 * from the bf16 recipe's (SQNR, for orientation; docs/RECIPE.md's bars are
 * against unquantized fp32).
 *
 *   cmake --build build --target bench_linear
 *   build/bench/linear/bench_linear [--quick] [--shape MxNxK]... [--warmup N] [--reps N]
 *                                   [--settle S] [--accumulate] [--json FILE]
 *
 * --settle S (default 1; --quick 0.25; 0: none): before a recipe is timed,
 * its forward + backward runs for S seconds, so that every recipe is timed
 * at the clock the GPU's power cap holds (see bench_gemm), not the first
 * on an idle GPU.
 *
 * Exit code: 0; 1 when an output is non-finite, an fp8 recipe is below
 * 20 dB against bf16 (broken, not merely imprecise), or CUDA breaks;
 * 2 on a setup failure.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_device.h"
#include "bench_util.h"

#define MAX_SHAPES 16
#define BROKEN_DB 20.0

static const int64_t kDefaultShapes[][3] = {{16384, 4096, 4096}, {16384, 14336, 4096}, {16384, 4096, 14336}};
static const bfp8_recipe kRecipes[] = {BFP8_RECIPE_BF16, BFP8_RECIPE_FP8_BLOCKWISE,
                                       BFP8_RECIPE_FP8_BLOCKWISE_BF16WGRAD};
enum { NUM_RECIPES = 3 };
/* Named here rather than by bfp8_recipe_name: the benchmark needs only bfp8_linear_*. */
static const char *recipe_label(bfp8_recipe recipe) {
    return recipe == BFP8_RECIPE_BF16                   ? "bf16"
           : recipe == BFP8_RECIPE_FP8_BLOCKWISE        ? "fp8-blockwise"
                                                        : "fp8-blockwise-bf16wgrad";
}
static const double kRecipeBarDb[3] = {25.0, 30.0, 30.0}; /* y, dx, dW: docs/RECIPE.md section 5 */
static const char *const kOutputNames[3] = {"y", "dx", "dW"};

typedef struct recipe_result {
    bfp8_recipe recipe;
    int ran;
    char reason[640];
    bench_timing set_weight, forward, step; /* step = forward + backward */
    int compared;
    bench_comparison vs_bf16[3]; /* y, dx, dW against the bf16 recipe */
} recipe_result;

typedef struct shape_result {
    int64_t m, n, k;
    int skipped;
    char note[256];
    recipe_result r[NUM_RECIPES];
} shape_result;

typedef struct linear_run {
    bfp8_linear *lin;
    int64_t m;
    const float *w;
    const uint16_t *x, *dy;
    uint16_t *y, *dx;
    float *dw;
    int accumulate;
} linear_run;

static int call_set_weight(void *arg, int set, char *reason, size_t size) {
    (void)set;
    linear_run *run = arg;
    return bench_failed_with(bfp8_linear_set_weight(run->lin, run->w), "bfp8_linear_set_weight", reason, size);
}

static int call_forward(void *arg, int set, char *reason, size_t size) {
    (void)set;
    linear_run *run = arg;
    return bench_failed_with(bfp8_linear_forward(run->lin, run->x, run->m, run->y), "bfp8_linear_forward",
                       reason, size);
}

static int call_step(void *arg, int set, char *reason, size_t size) {
    linear_run *run = arg;
    if (call_forward(arg, set, reason, size)) return 1;
    return bench_failed_with(bfp8_linear_backward(run->lin, run->dy, run->dx, run->dw, run->accumulate),
                       "bfp8_linear_backward", reason, size);
}

static void *device_alloc(size_t bytes, int *failed) {
    void *p = NULL;
    if (*failed) return NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        *failed = 1;
        return NULL;
    }
    return p;
}

static double us(const bench_timing *t) { return t->ok ? t->median_ms * 1e3 : NAN; }

/* Returns -1 when CUDA broke, else the number of outputs judged broken. */
static int run_shape(bfp8_context *ctx, cudaStream_t stream, shape_result *s, int warmup, int reps,
                     double settle, int accumulate) {
    const int64_t m = s->m, n = s->n, k = s->k;
    int alloc_failed = 0;
    uint16_t *x = device_alloc((size_t)(m * k) * 2, &alloc_failed);
    uint16_t *dy = device_alloc((size_t)(m * n) * 2, &alloc_failed);
    float *w = device_alloc((size_t)(n * k) * 4, &alloc_failed);
    uint16_t *y = device_alloc((size_t)(m * n) * 2, &alloc_failed);
    uint16_t *dx = device_alloc((size_t)(m * k) * 2, &alloc_failed);
    float *dw = device_alloc((size_t)(n * k) * 4, &alloc_failed);
    uint16_t *y_ref = device_alloc((size_t)(m * n) * 2, &alloc_failed);
    uint16_t *dx_ref = device_alloc((size_t)(m * k) * 2, &alloc_failed);
    float *dw_ref = device_alloc((size_t)(n * k) * 4, &alloc_failed);
    void *buffers[] = {x, dy, w, y, dx, dw, y_ref, dx_ref, dw_ref};
    int broken = 0;

    printf("\n== linear M x N x K = %lld x %lld x %lld ==\n", (long long)m, (long long)n, (long long)k);
    if (alloc_failed) {
        s->skipped = 1;
        snprintf(s->note, sizeof s->note, "skipped: out of device memory");
        printf("  %s\n", s->note);
        goto done;
    }
    BENCH_CUDA_OR_DIE(bench_fill_normal(x, BFP8_BF16, m, k, k, 1.0f, 11, stream));
    BENCH_CUDA_OR_DIE(bench_fill_normal(dy, BFP8_BF16, m, n, n, 1.0f, 12, stream));
    BENCH_CUDA_OR_DIE(bench_fill_normal(w, BFP8_F32, n, k, k, 1.0f / sqrtf((float)k), 13, stream));
    BENCH_CUDA_OR_DIE(cudaMemsetAsync(dw, 0, (size_t)(n * k) * 4, stream));
    BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));

    for (int i = 0; i < NUM_RECIPES; ++i) {
        recipe_result *r = &s->r[i];
        memset(r, 0, sizeof *r);
        r->recipe = kRecipes[i];
        const bfp8_linear_config cfg = {k, n, m, r->recipe, 0, NULL};
        linear_run run = {NULL, m, w, x, dy, y, dx, dw, accumulate};
        if (bench_failed_with(bfp8_linear_create(&run.lin, ctx, &cfg), "bfp8_linear_create", r->reason,
                        sizeof r->reason)) {
            printf("  %-24s n/a: %s\n", recipe_label(r->recipe), r->reason);
            continue;
        }
        /* The first step, checked: outputs poisoned first so unwritten ones show. */
        BENCH_CUDA_OR_DIE(cudaMemsetAsync(y, 0xff, (size_t)(m * n) * 2, stream));
        BENCH_CUDA_OR_DIE(cudaMemsetAsync(dx, 0xff, (size_t)(m * k) * 2, stream));
        if (!accumulate) BENCH_CUDA_OR_DIE(cudaMemsetAsync(dw, 0xff, (size_t)(n * k) * 4, stream));
        else BENCH_CUDA_OR_DIE(cudaMemsetAsync(dw, 0, (size_t)(n * k) * 4, stream));
        if (call_set_weight(&run, 0, r->reason, sizeof r->reason) ||
            call_step(&run, 0, r->reason, sizeof r->reason)) {
            printf("  %-24s n/a: %s\n", recipe_label(r->recipe), r->reason);
            bfp8_linear_destroy(run.lin);
            continue;
        }
        const cudaError_t err = cudaStreamSynchronize(stream);
        if (err != cudaSuccess) {
            fprintf(stderr, "FATAL: recipe %s left a CUDA error: %s (%s)\n", recipe_label(r->recipe),
                    cudaGetErrorName(err), cudaGetErrorString(err));
            bfp8_linear_destroy(run.lin);
            broken = -1;
            goto done;
        }
        if (r->recipe == BFP8_RECIPE_BF16) {
            BENCH_CUDA_OR_DIE(cudaMemcpyAsync(y_ref, y, (size_t)(m * n) * 2, cudaMemcpyDeviceToDevice, stream));
            BENCH_CUDA_OR_DIE(cudaMemcpyAsync(dx_ref, dx, (size_t)(m * k) * 2, cudaMemcpyDeviceToDevice, stream));
            BENCH_CUDA_OR_DIE(cudaMemcpyAsync(dw_ref, dw, (size_t)(n * k) * 4, cudaMemcpyDeviceToDevice, stream));
            /* The reference must itself be finite. */
            bench_comparison self;
            BENCH_CUDA_OR_DIE(bench_compare(y_ref, BFP8_BF16, n, y, BFP8_BF16, n, m, n, stream, &self));
            int64_t nonfinite = self.nonfinite;
            BENCH_CUDA_OR_DIE(bench_compare(dx_ref, BFP8_BF16, k, dx, BFP8_BF16, k, m, k, stream, &self));
            nonfinite += self.nonfinite;
            BENCH_CUDA_OR_DIE(bench_compare(dw_ref, BFP8_F32, k, dw, BFP8_F32, k, n, k, stream, &self));
            nonfinite += self.nonfinite;
            if (nonfinite) {
                printf("  bf16 recipe: %lld non-finite outputs (unwritten or broken)\n", (long long)nonfinite);
                ++broken;
            }
        } else if (s->r[0].ran) {
            BENCH_CUDA_OR_DIE(bench_compare(y_ref, BFP8_BF16, n, y, BFP8_BF16, n, m, n, stream, &r->vs_bf16[0]));
            BENCH_CUDA_OR_DIE(bench_compare(dx_ref, BFP8_BF16, k, dx, BFP8_BF16, k, m, k, stream, &r->vs_bf16[1]));
            BENCH_CUDA_OR_DIE(bench_compare(dw_ref, BFP8_F32, k, dw, BFP8_F32, k, n, k, stream, &r->vs_bf16[2]));
            r->compared = 1;
            for (int j = 0; j < 3; ++j)
                broken += r->vs_bf16[j].nonfinite > 0 || !(r->vs_bf16[j].overall_db >= BROKEN_DB);
        }

        if (settle > 0.0) {
            const bench_call_fn step_fn[1] = {call_step};
            void *const step_arg[1] = {&run};
            bench_settle_rounds(step_fn, step_arg, 1, 1, settle, stream);
        }
        r->set_weight = bench_time(call_set_weight, &run, 1, warmup, reps, stream);
        r->forward = bench_time(call_forward, &run, 1, warmup, reps, stream);
        r->step = bench_time(call_step, &run, 1, warmup, reps, stream);
        r->ran = r->step.ok;
        if (!r->step.ok) {
            char why[sizeof r->step.reason];
            memcpy(why, r->step.reason, sizeof why);
            snprintf(r->reason, sizeof r->reason, "while timing: %s", why);
        }
        bfp8_linear_destroy(run.lin);
        if (cudaStreamSynchronize(stream) != cudaSuccess) {
            fprintf(stderr, "FATAL: CUDA error after timing recipe %s\n", recipe_label(r->recipe));
            broken = -1;
            goto done;
        }

        printf("  %-24s set_weight %9.1f us   forward %9.1f us   forward+backward %9.1f us",
               recipe_label(r->recipe), us(&r->set_weight), us(&r->forward), us(&r->step));
        if (r->ran && s->r[0].ran && i > 0) printf("   %.3fx bf16", s->r[0].step.median_ms / r->step.median_ms);
        printf("\n");
        if (r->compared)
            for (int j = 0; j < 3; ++j)
                printf("      %-3s vs bf16 recipe: SQNR %5.1f dB, worst tile %5.1f dB%s%s\n", kOutputNames[j],
                       r->vs_bf16[j].overall_db, r->vs_bf16[j].worst_tile_db,
                       r->vs_bf16[j].nonfinite ? ", NON-FINITE" : "",
                       r->vs_bf16[j].overall_db < kRecipeBarDb[j] ? "  (below the RECIPE bar vs fp32)" : "");
        if (!r->ran) printf("      n/a: %s\n", r->reason);
    }
done:
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; ++i)
        if (buffers[i]) cudaFree(buffers[i]);
    return broken;
}

static void json_timing(FILE *f, const char *key, const bench_timing *t) {
    fprintf(f, "\"%s\": ", key);
    bench_json_number(f, us(t));
}

static void write_json(const char *path, const bench_device_info *device, double settle, int warmup, int reps,
                       int accumulate, const shape_result *shapes, int count, int broken, const char *aborted) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        return;
    }
    fprintf(f, "{\"benchmark\": \"bench_linear\", ");
    bench_device_info_json(f, "device", device);
    fprintf(f, ", \"settle_s\": %.2f, \"warmup\": %d, \"reps\": %d, \"dw_accumulate\": %s, \"broken_outputs\": %d, "
            "\"aborted\": ",
            settle, warmup, reps, accumulate ? "true" : "false", broken);
    if (aborted) bench_json_string(f, aborted);
    else fprintf(f, "null");
    fprintf(f, ", \"shapes\": [");
    for (int i = 0; i < count; ++i) {
        const shape_result *s = &shapes[i];
        fprintf(f, "%s\n  {\"M\": %lld, \"N\": %lld, \"K\": %lld, \"skipped\": %s, \"note\": ", i ? "," : "",
                (long long)s->m, (long long)s->n, (long long)s->k, s->skipped ? "true" : "false");
        bench_json_string(f, s->note);
        fprintf(f, ", \"recipes\": {");
        for (int j = 0; j < NUM_RECIPES && !s->skipped; ++j) {
            const recipe_result *r = &s->r[j];
            fprintf(f, "%s\"%s\": {\"status\": \"%s\"", j ? ", " : "", recipe_label(r->recipe),
                    r->ran ? "ok" : "n/a");
            if (!r->ran) {
                fprintf(f, ", \"reason\": ");
                bench_json_string(f, r->reason);
            } else {
                fprintf(f, ", ");
                json_timing(f, "set_weight_us", &r->set_weight);
                fprintf(f, ", ");
                json_timing(f, "forward_us", &r->forward);
                fprintf(f, ", ");
                json_timing(f, "forward_backward_us", &r->step);
                fprintf(f, ", \"speedup_over_bf16\": ");
                bench_json_number(f, s->r[0].ran ? s->r[0].step.median_ms / r->step.median_ms : NAN);
            }
            if (r->compared)
                for (int o = 0; o < 3; ++o) {
                    fprintf(f, ", \"%s_vs_bf16_sqnr_db\": ", kOutputNames[o]);
                    bench_json_number(f, r->vs_bf16[o].overall_db);
                    fprintf(f, ", \"%s_vs_bf16_worst_tile_db\": ", kOutputNames[o]);
                    bench_json_number(f, r->vs_bf16[o].worst_tile_db);
                }
            fprintf(f, "}");
        }
        fprintf(f, "}}");
    }
    fprintf(f, "\n]}\n");
    fclose(f);
    printf("wrote %s\n", path);
}

static void usage(const char *program) {
    fprintf(stderr,
            "usage: %s [--quick] [--shape MxNxK]... [--warmup N] [--reps N] [--settle S] [--accumulate]\n"
            "          [--json FILE]\n"
            "  --shape       y[M,N] = x[M,K] W[N,K]^T (replaces the defaults)\n"
            "  --settle S    run each recipe's step for S seconds before timing it (default 1; --quick: 0.25)\n"
            "  --accumulate  backward adds into dW (default: stores it)\n"
            "  --quick       the first shape, 2 warm-up and 10 timed steps\n",
            program);
    exit(2);
}

int main(int argc, char **argv) {
    int quick = 0, warmup = 3, reps = 20, accumulate = 0;
    double settle = -1.0;
    const char *json_path = NULL;
    int64_t shapes[MAX_SHAPES][3];
    int n_shapes = 0;
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--quick") == 0) quick = 1;
        else if (strcmp(arg, "--accumulate") == 0) accumulate = 1;
        else if (strcmp(arg, "--shape") == 0 && value) {
            if (n_shapes == MAX_SHAPES || !bench_parse_triple(value, shapes[n_shapes])) usage(argv[0]);
            ++n_shapes;
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
        } else if (strcmp(arg, "--json") == 0 && value) {
            json_path = value;
            ++i;
        } else {
            usage(argv[0]);
        }
    }
    if (quick) {
        warmup = 2;
        reps = 10;
    }
    if (settle < 0.0) settle = quick ? 0.25 : 1.0;
    if (warmup < 0 || reps < 1) usage(argv[0]);
    if (n_shapes == 0) {
        const int n = quick ? 1 : (int)(sizeof kDefaultShapes / sizeof kDefaultShapes[0]);
        for (int i = 0; i < n; ++i) memcpy(shapes[n_shapes++], kDefaultShapes[i], sizeof shapes[0]);
    }
    if (bfp8_cuda_device_count() < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    bench_device_info device;
    bench_device_info_read(0, &device);
    bench_device_info_print(stdout, &device);
    printf("settle %.2f s, warm-up %d, timed steps %d (median), dW %s\n", settle, warmup, reps,
           accumulate ? "accumulated" : "stored");

    bfp8_context *ctx = NULL;
    cudaStream_t stream;
    BENCH_BFP8_OR_DIE(bfp8_context_create(&ctx, BFP8_BACKEND_CUDA, 0));
    BENCH_CUDA_OR_DIE(cudaStreamCreate(&stream));
    BENCH_BFP8_OR_DIE(bfp8_context_set_stream(ctx, stream));

    static shape_result results[MAX_SHAPES];
    int count = 0, broken = 0;
    const char *aborted = NULL;
    for (int i = 0; i < n_shapes && !aborted; ++i) {
        shape_result *s = &results[count++];
        memset(s, 0, sizeof *s);
        s->m = shapes[i][0];
        s->n = shapes[i][1];
        s->k = shapes[i][2];
        const int b = run_shape(ctx, stream, s, warmup, reps, settle, accumulate);
        if (b < 0) aborted = "a CUDA error left the context unusable (see the log)";
        else broken += b;
    }

    printf("\n==== Summary: linear forward + backward, microseconds (speedup over bf16) ====\n");
    printf("%-22s %14s %22s %22s %12s %12s\n", "M x N x K", "bf16", "fp8-blockwise", "fp8-bw-bf16wgrad",
           "W quant fp8", "W cvt bf16");
    for (int i = 0; i < count; ++i) {
        const shape_result *s = &results[i];
        char shape[64];
        snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)s->m, (long long)s->n, (long long)s->k);
        printf("%-22s", shape);
        if (s->skipped) {
            printf(" %s\n", s->note);
            continue;
        }
        for (int j = 0; j < NUM_RECIPES; ++j) {
            const recipe_result *r = &s->r[j];
            if (!r->ran) {
                printf(" %*s", j == 0 ? 14 : 22, "n/a");
            } else if (j == 0) {
                printf(" %14.1f", us(&r->step));
            } else {
                char cell[64];
                if (s->r[0].ran) snprintf(cell, sizeof cell, "%.1f (%.2fx)", us(&r->step),
                                          s->r[0].step.median_ms / r->step.median_ms);
                else snprintf(cell, sizeof cell, "%.1f", us(&r->step));
                printf(" %22s", cell);
            }
        }
        const double quant_us = s->r[1].ran ? us(&s->r[1].set_weight) : NAN;
        const double convert_us = s->r[0].ran ? us(&s->r[0].set_weight) : NAN;
        if (isfinite(quant_us)) printf(" %12.1f", quant_us);
        else printf(" %12s", "n/a");
        if (isfinite(convert_us)) printf(" %12.1f\n", convert_us);
        else printf(" %12s\n", "n/a");
    }
    printf("(TARGETS.md: fp8-blockwise >= 1.45x / 1.65x / 1.65x over bf16 on these three shapes)\n");
    if (json_path) write_json(json_path, &device, settle, warmup, reps, accumulate, results, count, broken, aborted);
    if (aborted) printf("ABORTED: %s\n", aborted);
    printf("broken outputs: %d\n", broken);

    bfp8_context_destroy(ctx);
    cudaStreamDestroy(stream);
    return aborted || broken ? 1 : 0;
}
