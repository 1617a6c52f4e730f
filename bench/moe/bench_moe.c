/*
 * bench_moe.c - one mixture-of-experts layer (bfp8_moe), forward and
 * backward, per recipe, on a CUDA context:
 *
 *   y = shared(x) + sum_j w_j expert_{e_j}(x)     x, y, dy, dx: T x H f32
 *
 * times bfp8_moe_set_weights (the experts' re-quantization or conversion,
 * once per optimizer step), bfp8_moe_forward and forward + backward, and
 * prints milliseconds, the speedup over the bf16 recipe, the host's time to
 * issue one forward + backward (the layer synchronizes once a forward: where
 * issuing takes as long as running, the GPU waits on the host), and how far
 * each fp8 recipe's y and dx are from the bf16 recipe's (SQNR).
 * The defaults are one MoE block of the trainer's moe-1b preset (T 8192,
 * H 2048, 32 experts of 768, top-4, a shared expert of 1536); the router's
 * weights are random, so the load is near even.
 *
 *   build/bench/moe/bench_moe [--tokens T] [--hidden H] [--experts E] [--top-k K]
 *                             [--expert-hidden F] [--shared-hidden S] [--recipes a,b,..]
 *                             [--warmup N] [--reps N] [--settle S]
 *
 * Exit code: 0; 1 when an output is non-finite, an fp8 recipe is below
 * 20 dB against bf16, or CUDA breaks; 2 on a setup failure; 77 without a GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_device.h"
#include "bench_util.h"

#define BROKEN_DB 20.0

static const bfp8_recipe kRecipes[] = {BFP8_RECIPE_BF16, BFP8_RECIPE_FP8_BLOCKWISE,
                                       BFP8_RECIPE_FP8_BLOCKWISE_BF16WGRAD};
enum { NUM_RECIPES = 3 };

typedef struct moe_run {
    bfp8_moe *moe;
    int64_t tokens;
    bfp8_moe_weights w, g;
    const float *x, *dy;
    float *y, *dx;
} moe_run;

static int call_set_weights(void *arg, int set, char *reason, size_t size) {
    (void)set;
    moe_run *r = arg;
    return bench_failed_with(bfp8_moe_set_weights(r->moe, &r->w), "bfp8_moe_set_weights", reason, size);
}

static int call_forward(void *arg, int set, char *reason, size_t size) {
    (void)set;
    moe_run *r = arg;
    return bench_failed_with(bfp8_moe_forward(r->moe, r->x, r->tokens, r->y), "bfp8_moe_forward", reason, size);
}

static int call_step(void *arg, int set, char *reason, size_t size) {
    moe_run *r = arg;
    if (call_forward(arg, set, reason, size)) return 1;
    return bench_failed_with(bfp8_moe_backward(r->moe, r->dy, r->dx, &r->g, 0), "bfp8_moe_backward", reason, size);
}

static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static float *device_f32(int64_t n, float scale, uint64_t seed, cudaStream_t stream) {
    float *p = NULL;
    BENCH_CUDA_OR_DIE(cudaMalloc((void **)&p, (size_t)n * 4));
    if (scale > 0.0f) BENCH_CUDA_OR_DIE(bench_fill_normal(p, BFP8_F32, 1, n, n, scale, seed, stream));
    return p;
}

static const char *recipe_label(bfp8_recipe r) { return bfp8_recipe_name(r); }

static int parse_recipes(const char *list, int *use) {
    memset(use, 0, NUM_RECIPES * sizeof *use);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int i = 0; i < NUM_RECIPES; ++i)
            if (strcmp(tok, recipe_label(kRecipes[i])) == 0) use[i] = found = 1;
        if (!found) return 0;
    }
    return 1;
}

static void usage(const char *program) {
    fprintf(stderr,
            "usage: %s [--tokens T] [--hidden H] [--experts E] [--top-k K] [--expert-hidden F]\n"
            "          [--shared-hidden S] [--recipes bf16,fp8-blockwise,fp8-blockwise-bf16wgrad]\n"
            "          [--warmup N] [--reps N] [--settle S]\n",
            program);
    exit(2);
}

int main(int argc, char **argv) {
    int64_t T = 8192, H = 2048, F = 768, S = 1536;
    int E = 32, k = 4, warmup = 3, reps = 20, use[NUM_RECIPES] = {1, 1, 1};
    double settle = 1.0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage(argv[0]);
        if (strcmp(a, "--tokens") == 0) T = atoll(v);
        else if (strcmp(a, "--hidden") == 0) H = atoll(v);
        else if (strcmp(a, "--experts") == 0) E = atoi(v);
        else if (strcmp(a, "--top-k") == 0) k = atoi(v);
        else if (strcmp(a, "--expert-hidden") == 0) F = atoll(v);
        else if (strcmp(a, "--shared-hidden") == 0) S = atoll(v);
        else if (strcmp(a, "--warmup") == 0) warmup = atoi(v);
        else if (strcmp(a, "--reps") == 0) reps = atoi(v);
        else if (strcmp(a, "--settle") == 0) settle = atof(v);
        else if (strcmp(a, "--recipes") == 0) {
            if (!parse_recipes(v, use)) usage(argv[0]);
        } else usage(argv[0]);
        ++i;
    }
    if (T < 1 || warmup < 0 || reps < 1 || !(settle >= 0.0)) usage(argv[0]);
    if (bfp8_cuda_device_count() < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    bench_device_info device;
    bench_device_info_read(0, &device);
    bench_device_info_print(stdout, &device);
    printf("moe: T %lld, H %lld, %d experts of %lld, top-%d, shared %lld; warm-up %d, timed %d (median), "
           "settle %.2f s\n",
           (long long)T, (long long)H, E, (long long)F, k, (long long)S, warmup, reps, settle);

    bfp8_context *ctx = NULL;
    cudaStream_t stream;
    BENCH_BFP8_OR_DIE(bfp8_context_create(&ctx, BFP8_BACKEND_CUDA, 0));
    BENCH_CUDA_OR_DIE(cudaStreamCreate(&stream));
    BENCH_BFP8_OR_DIE(bfp8_context_set_stream(ctx, stream));

    const float wscale = 1.0f / sqrtf((float)H);
    moe_run run = {.tokens = T};
    run.w.router = device_f32(E * H, wscale, 21, stream);
    run.w.experts_w13 = device_f32(E * 2 * F * H, wscale, 22, stream);
    run.w.experts_w2 = device_f32(E * H * F, 1.0f / sqrtf((float)F), 23, stream);
    run.g.router = device_f32(E * H, 0, 0, stream);
    run.g.experts_w13 = device_f32(E * 2 * F * H, 0, 0, stream);
    run.g.experts_w2 = device_f32(E * H * F, 0, 0, stream);
    if (S > 0) {
        run.w.shared_w13 = device_f32(2 * S * H, wscale, 24, stream);
        run.w.shared_w2 = device_f32(H * S, 1.0f / sqrtf((float)S), 25, stream);
        run.g.shared_w13 = device_f32(2 * S * H, 0, 0, stream);
        run.g.shared_w2 = device_f32(H * S, 0, 0, stream);
    }
    run.x = device_f32(T * H, 1.0f, 26, stream);
    run.dy = device_f32(T * H, 1.0f, 27, stream);
    run.y = device_f32(T * H, 0, 0, stream);
    run.dx = device_f32(T * H, 0, 0, stream);
    float *y_ref = device_f32(T * H, 0, 0, stream), *dx_ref = device_f32(T * H, 0, 0, stream);

    double step_ms[NUM_RECIPES] = {0};
    int broken = 0, have_ref = 0;
    for (int i = 0; i < NUM_RECIPES; ++i) {
        if (!use[i]) continue;
        const bfp8_recipe recipe = kRecipes[i];
        const bfp8_moe_config cfg = {.hidden = H, .expert_hidden = F, .shared_hidden = S, .num_experts = E,
                                     .top_k = k, .max_tokens = T, .score_fn = BFP8_MOE_SCORE_SIGMOID,
                                     .normalize_weights = 1, .route_scale = 1.0f, .capacity_factor = 0.0f,
                                     .balance = BFP8_MOE_BALANCE_BIAS, .bias_update_rate = 1e-3f,
                                     .recipe = recipe};
        char reason[640] = "";
        if (bench_failed_with(bfp8_moe_create(&run.moe, ctx, &cfg), "bfp8_moe_create", reason, sizeof reason) ||
            call_set_weights(&run, 0, reason, sizeof reason) || call_step(&run, 0, reason, sizeof reason)) {
            printf("  %-24s n/a: %s\n", recipe_label(recipe), reason);
            bfp8_moe_destroy(run.moe);
            broken++;
            continue;
        }
        BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));
        int64_t routed[1024] = {0}, busiest = 0;
        BENCH_BFP8_OR_DIE(bfp8_moe_last_routing(run.moe, routed, NULL));
        for (int e = 0; e < E && e < 1024; ++e) busiest = routed[e] > busiest ? routed[e] : busiest;
        bench_comparison cy = {0}, cdx = {0};
        if (recipe == BFP8_RECIPE_BF16) {
            BENCH_CUDA_OR_DIE(cudaMemcpyAsync(y_ref, run.y, (size_t)(T * H) * 4, cudaMemcpyDeviceToDevice, stream));
            BENCH_CUDA_OR_DIE(cudaMemcpyAsync(dx_ref, run.dx, (size_t)(T * H) * 4, cudaMemcpyDeviceToDevice, stream));
            have_ref = 1;
        } else if (have_ref) {
            BENCH_CUDA_OR_DIE(bench_compare(y_ref, BFP8_F32, H, run.y, BFP8_F32, H, T, H, stream, &cy));
            BENCH_CUDA_OR_DIE(bench_compare(dx_ref, BFP8_F32, H, run.dx, BFP8_F32, H, T, H, stream, &cdx));
            broken += cy.nonfinite > 0 || cdx.nonfinite > 0 || !(cy.overall_db >= BROKEN_DB) ||
                      !(cdx.overall_db >= BROKEN_DB);
        }
        if (settle > 0.0) {
            const bench_call_fn fns[1] = {call_step};
            void *const args[1] = {&run};
            bench_settle_rounds(fns, args, 1, 1, settle, stream);
        }
        const bench_timing sw = bench_time(call_set_weights, &run, 1, warmup, reps, stream);
        const bench_timing fw = bench_time(call_forward, &run, 1, warmup, reps, stream);
        const bench_timing st = bench_time(call_step, &run, 1, warmup, reps, stream);
        /* the host's time to issue forward + backward, the GPU kept busy before each */
        double issue_ms = 1e30;
        for (int r = 0; r < 5 && st.ok; ++r) {
            BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));
            const double t0 = wall_ms();
            call_step(&run, 0, reason, sizeof reason);
            const double t1 = wall_ms();
            issue_ms = fmin(issue_ms, t1 - t0);
        }
        BENCH_CUDA_OR_DIE(cudaStreamSynchronize(stream));
        if (!sw.ok || !fw.ok || !st.ok) {
            printf("  %-24s n/a while timing: %s\n", recipe_label(recipe), !sw.ok ? sw.reason : !fw.ok ? fw.reason
                                                                                                      : st.reason);
            broken++;
        } else {
            step_ms[i] = st.median_ms;
            printf("  %-24s set_weights %7.3f ms   forward %7.3f ms   forward+backward %7.3f ms", recipe_label(recipe),
                   sw.median_ms, fw.median_ms, st.median_ms);
            if (i > 0 && step_ms[0] > 0) printf("   %.3fx bf16", step_ms[0] / st.median_ms);
            printf("\n      host issue of forward+backward %.3f ms; busiest expert %.2f x the mean\n", issue_ms,
                   (double)busiest * E / ((double)T * k));
            if (recipe != BFP8_RECIPE_BF16 && have_ref)
                printf("      vs bf16 recipe: y %.1f dB, dx %.1f dB\n", cy.overall_db, cdx.overall_db);
        }
        bfp8_moe_destroy(run.moe);
        run.moe = NULL;
    }
    const cudaError_t err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) {
        fprintf(stderr, "FATAL: %s\n", cudaGetErrorString(err));
        return 1;
    }
    bfp8_context_destroy(ctx);
    return broken ? 1 : 0;
}
