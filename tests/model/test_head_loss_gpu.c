/*
 * test_head_loss_gpu.c - the output head and loss layer (head_loss.h) on the
 * GPU against the same layer on the CPU, on ragged shapes: tokens not a
 * multiple of the chunk, vocabularies of 1000, 1001 (no float4 rows) and
 * 32768, a dim of 48. Each case runs a forward with targets and a backward
 * (loss_scale 0.5, d_head starting from random values, so it must add) and
 * compares the loss, the row losses, the bf16 dlogits, dx and d_head.
 *
 * Bars:
 *   - bf16 form, GPU against the CPU's bf16 form (the same bf16 operands;
 *     the products of two bf16 values are exact in fp32, so only the order
 *     of the fp32 sums differs): loss within 1e-5 relative, row losses
 *     within 1e-5 of 1 + |loss|, dlogits at most one bf16 step apart (bf16
 *     roundings of fp32 values an ulp or two apart), dx and d_head at least
 *     60 dB SQNR (measured figures are printed);
 *   - bf16 form on the GPU against the fp32 form on the CPU (what the bf16
 *     products cost: x and head rounded to 8 bits of mantissa): loss within
 *     1e-3 relative, dx and d_head at least 30 dB;
 *   - fp32 form, GPU against CPU: loss within 1e-5 relative, dx and d_head
 *     at least 60 dB.
 * Also: the logits of the last row after a forward without targets (bf16:
 * only the last chunk's rows are made, an earlier row is refused), and a
 * backward after such a forward gives the dx of the one after a forward with
 * targets, bit for bit.
 *
 * Needs a GPU (exits 77, "skipped", without one). Run: ctest -R test_head_loss_gpu
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockfp8.h"
#include "formats/formats.h"
#include "model/head_loss.h"
#include "model/model_ops.h"
#include "test_util.h"

/* One backend's layer and its inputs and outputs, in that backend's memory. */
typedef struct side {
    bfp8_context *ctx;
    const model_ops *ops;
    model_ops_ctx oc;
    head_loss h;
    void *buffers;
    float *weight, *x, *dx, *dweight;
    int32_t *targets;
} side;

typedef struct head_case {
    int64_t dim, vocab, tokens, chunk;
    float *weight, *x, *dweight0; /* host: vocab x dim, tokens x dim, vocab x dim */
    int32_t *targets;
} head_case;

static void *backend_copy(bfp8_context *ctx, const void *host, size_t bytes) {
    void *p = NULL;
    if (bfp8_malloc(ctx, &p, bytes) != BFP8_OK || !p) test_fatal("bfp8_malloc(%zu): %s", bytes, bfp8_last_error());
    if (host) CHECK_OK(bfp8_copy_to_backend(ctx, p, host, bytes));
    return p;
}

static void side_make(side *s, bfp8_context *ctx, const head_case *c, int bf16) {
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->ops = model_ops_for(ctx);
    model_ops_ctx_init(&s->oc, ctx, 0, 0);
    head_loss_init(&s->h, c->dim, c->vocab, c->tokens, bf16, c->chunk);
    s->buffers = backend_copy(ctx, NULL, head_loss_buffer_bytes(&s->h));
    head_loss_carve(&s->h, s->buffers);
    const size_t w_bytes = (size_t)(c->vocab * c->dim) * sizeof(float);
    const size_t x_bytes = (size_t)(c->tokens * c->dim) * sizeof(float);
    s->weight = backend_copy(ctx, c->weight, w_bytes);
    s->x = backend_copy(ctx, c->x, x_bytes);
    s->dx = backend_copy(ctx, c->x, x_bytes); /* overwritten by the backward */
    s->dweight = backend_copy(ctx, c->dweight0, w_bytes);
    s->targets = backend_copy(ctx, c->targets, (size_t)c->tokens * sizeof(int32_t));
    head_loss_sync_weight(&s->h, s->ops, &s->oc, s->weight);
}

static void side_free(side *s) {
    model_ops_ctx_release(&s->oc);
    void *ptrs[] = {s->buffers, s->weight, s->x, s->dx, s->dweight, s->targets};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; ++i) bfp8_free(s->ctx, ptrs[i]);
}

/* What a side's forward and backward gave, on the host. */
typedef struct result {
    double loss;
    float *row_losses, *dx, *dweight;
    uint16_t *dlogits; /* bf16 form only */
} result;

static void run(side *s, const head_case *c, result *r) {
    const int64_t D = c->dim, V = c->vocab, M = c->tokens;
    head_loss_forward(&s->h, s->ops, &s->oc, s->weight, s->x, s->targets, M, &r->loss);
    CHECK_OK(model_ops_status(&s->oc));
    r->row_losses = test_malloc((size_t)M * sizeof(float));
    CHECK_OK(bfp8_copy_to_host(s->ctx, r->row_losses, s->h.row_losses, (size_t)M * sizeof(float)));
    r->dlogits = NULL;
    if (s->h.bf16) {
        r->dlogits = test_malloc((size_t)(M * V) * sizeof(uint16_t));
        CHECK_OK(bfp8_copy_to_host(s->ctx, r->dlogits, s->h.dlogits_bf16, (size_t)(M * V) * sizeof(uint16_t)));
    }
    CHECK_OK(head_loss_backward(&s->h, s->ops, &s->oc, s->dx, s->dweight, s->weight, s->x, s->targets, 0.5f));
    CHECK_OK(model_ops_status(&s->oc));
    r->dx = test_malloc((size_t)(M * D) * sizeof(float));
    r->dweight = test_malloc((size_t)(V * D) * sizeof(float));
    CHECK_OK(bfp8_copy_to_host(s->ctx, r->dx, s->dx, (size_t)(M * D) * sizeof(float)));
    CHECK_OK(bfp8_copy_to_host(s->ctx, r->dweight, s->dweight, (size_t)(V * D) * sizeof(float)));
}

static void result_free(result *r) { free(r->row_losses), free(r->dx), free(r->dweight), free(r->dlogits); }

/* 10 log10(|ref|^2 / |ref - x|^2); d_head is compared as its change, the
 * gradient added to the starting values. */
static double sqnr_db(const float *ref, const float *x, const float *base, size_t n) {
    double s = 0.0, e = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double r = base ? (double)ref[i] - base[i] : ref[i], y = base ? (double)x[i] - base[i] : x[i];
        s += r * r;
        e += (r - y) * (r - y);
    }
    return e == 0.0 ? INFINITY : 10.0 * log10(s / e);
}

static double worst_row_loss_error(const result *ref, const result *got, int64_t tokens) {
    double worst = 0.0;
    for (int64_t t = 0; t < tokens; ++t) {
        const double e = fabs((double)ref->row_losses[t] - got->row_losses[t]) / (1.0 + fabs(ref->loss));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static int64_t worst_bf16_steps(const uint16_t *a, const uint16_t *b, int64_t n) {
    int64_t worst = 0;
    for (int64_t i = 0; i < n; ++i) {
        const float fa = bfp8_decode_bf16(a[i]), fb = bfp8_decode_bf16(b[i]);
        if (isnan(fa) || isnan(fb)) return isnan(fa) && isnan(fb) ? worst : INT64_MAX;
        /* same sign: the patterns' distance; across zero: both sides' steps from it */
        const int64_t ia = a[i] & 0x7fff, ib = b[i] & 0x7fff;
        const int64_t d = (a[i] ^ b[i]) & 0x8000 ? ia + ib : ia > ib ? ia - ib : ib - ia;
        if (d > worst) worst = d;
    }
    return worst;
}

static void compare(const char *what, const head_case *c, const result *ref, const result *got, double loss_bar,
                    double row_bar, double grad_bar_db, int dlogits_steps_bar) {
    const int64_t D = c->dim, V = c->vocab, M = c->tokens;
    const double loss_rel = fabs(got->loss - ref->loss) / fabs(ref->loss);
    const double row_err = worst_row_loss_error(ref, got, M);
    const double dx_db = sqnr_db(ref->dx, got->dx, NULL, (size_t)(M * D));
    const double dw_db = sqnr_db(ref->dweight, got->dweight, c->dweight0, (size_t)(V * D));
    CHECK(isfinite(got->loss) && loss_rel <= loss_bar, "%s: loss %.8f vs %.8f (rel %.2e, bar %.0e)", what, got->loss,
          ref->loss, loss_rel, loss_bar);
    CHECK(row_err <= row_bar, "%s: row losses off by %.2e of 1 + |loss| (bar %.0e)", what, row_err, row_bar);
    CHECK(dx_db >= grad_bar_db && dw_db >= grad_bar_db, "%s: dx %.1f dB, d_head %.1f dB (bar %.0f)", what, dx_db,
          dw_db, grad_bar_db);
    int64_t steps = 0;
    if (ref->dlogits && got->dlogits) {
        steps = worst_bf16_steps(ref->dlogits, got->dlogits, M * V);
        CHECK(steps <= dlogits_steps_bar, "%s: bf16 dlogits %lld steps apart (bar %d)", what, (long long)steps,
              dlogits_steps_bar);
    }
    printf("  %-34s loss %.7f vs %.7f (rel %.1e), row losses %.1e, dx %.1f dB, d_head %.1f dB", what, got->loss,
           ref->loss, loss_rel, row_err, dx_db, dw_db);
    if (ref->dlogits && got->dlogits) printf(", dlogits <= %lld bf16 steps", (long long)steps);
    printf("\n");
}

/* Logits of the last row after a forward without targets, on both sides;
 * the bf16 form refuses a row before its last chunk. Then a backward after
 * it: the same dx as after the forward with targets (dx_with_targets). */
static void check_generation(side *cpu, side *gpu, const head_case *c, const float *dx_with_targets) {
    const int64_t V = c->vocab, M = c->tokens, D = c->dim;
    float *row_c = test_malloc((size_t)V * sizeof(float)), *row_g = test_malloc((size_t)V * sizeof(float));
    head_loss_forward(&cpu->h, cpu->ops, &cpu->oc, cpu->weight, cpu->x, NULL, M, NULL);
    head_loss_forward(&gpu->h, gpu->ops, &gpu->oc, gpu->weight, gpu->x, NULL, M, NULL);
    CHECK_OK(model_ops_status(&gpu->oc));
    CHECK_OK(head_loss_logits_row(&cpu->h, cpu->ctx, M - 1, row_c));
    CHECK_OK(head_loss_logits_row(&gpu->h, gpu->ctx, M - 1, row_g));
    double err = 0.0, scale = 0.0;
    for (int64_t v = 0; v < V; ++v) {
        err = fmax(err, fabs((double)row_c[v] - row_g[v]));
        scale = fmax(scale, fabs((double)row_c[v]));
    }
    CHECK(err <= 1e-5 * (1.0 + scale), "last row's logits: max error %.2e (row max %.3g)", err, scale);
    if (gpu->h.bf16 && M > gpu->h.chunk_tokens)
        CHECK_STATUS(head_loss_logits_row(&gpu->h, gpu->ctx, M - gpu->h.chunk_tokens - 1, row_g),
                     BFP8_ERR_INVALID_VALUE);
    float *dx = test_malloc((size_t)(M * D) * sizeof(float));
    CHECK_OK(head_loss_backward(&gpu->h, gpu->ops, &gpu->oc, gpu->dx, gpu->dweight, gpu->weight, gpu->x, gpu->targets,
                                0.5f));
    CHECK_OK(model_ops_status(&gpu->oc));
    CHECK_OK(bfp8_copy_to_host(gpu->ctx, dx, gpu->dx, (size_t)(M * D) * sizeof(float)));
    CHECK(memcmp(dx, dx_with_targets, (size_t)(M * D) * sizeof(float)) == 0,
          "a backward after a forward without targets gives another dx");
    free(row_c), free(row_g), free(dx);
}

static void run_case(bfp8_context *cpu_ctx, bfp8_context *gpu_ctx, int64_t dim, int64_t vocab, int64_t tokens,
                     int64_t chunk, uint64_t seed) {
    head_case c = {.dim = dim, .vocab = vocab, .tokens = tokens, .chunk = chunk};
    test_rng rng;
    test_rng_seed(&rng, seed);
    c.weight = test_malloc((size_t)(vocab * dim) * sizeof(float));
    c.dweight0 = test_malloc((size_t)(vocab * dim) * sizeof(float));
    c.x = test_malloc((size_t)(tokens * dim) * sizeof(float));
    c.targets = test_malloc((size_t)tokens * sizeof(int32_t));
    /* x like an RMSNorm's output; a head large enough for a peaked softmax */
    const float w_scale = 3.0f / sqrtf((float)dim);
    for (int64_t i = 0; i < vocab * dim; ++i) c.weight[i] = w_scale * (float)test_rng_normal(&rng);
    for (int64_t i = 0; i < vocab * dim; ++i) c.dweight0[i] = 1e-3f * (float)test_rng_normal(&rng);
    for (int64_t i = 0; i < tokens * dim; ++i) c.x[i] = (float)test_rng_normal(&rng);
    for (int64_t t = 0; t < tokens; ++t) c.targets[t] = (int32_t)test_rng_range(&rng, 0, vocab - 1);
    printf("dim %lld, vocab %lld, tokens %lld, chunk %lld\n", (long long)dim, (long long)vocab, (long long)tokens,
           (long long)chunk);

    side cpu_bf16, gpu_bf16, cpu_f32, gpu_f32;
    result r_cpu_bf16, r_gpu_bf16, r_cpu_f32, r_gpu_f32;
    side_make(&cpu_bf16, cpu_ctx, &c, 1);
    side_make(&gpu_bf16, gpu_ctx, &c, 1);
    side_make(&cpu_f32, cpu_ctx, &c, 0);
    side_make(&gpu_f32, gpu_ctx, &c, 0);
    CHECK(gpu_bf16.h.chunk_tokens == chunk && tokens % chunk != 0, "chunk %lld of %lld tokens: not ragged",
          (long long)gpu_bf16.h.chunk_tokens, (long long)tokens);
    run(&cpu_bf16, &c, &r_cpu_bf16);
    run(&gpu_bf16, &c, &r_gpu_bf16);
    run(&cpu_f32, &c, &r_cpu_f32);
    run(&gpu_f32, &c, &r_gpu_f32);
    compare("bf16 products: GPU vs CPU", &c, &r_cpu_bf16, &r_gpu_bf16, 1e-5, 1e-5, 60.0, 1);
    compare("bf16 GPU vs the fp32 CPU", &c, &r_cpu_f32, &r_gpu_bf16, 1e-3, 1e-2, 30.0, 0);
    compare("fp32 products: GPU vs CPU", &c, &r_cpu_f32, &r_gpu_f32, 1e-5, 1e-5, 60.0, 0);
    check_generation(&cpu_bf16, &gpu_bf16, &c, r_gpu_bf16.dx);

    result_free(&r_cpu_bf16), result_free(&r_gpu_bf16), result_free(&r_cpu_f32), result_free(&r_gpu_f32);
    side_free(&cpu_bf16), side_free(&gpu_bf16), side_free(&cpu_f32), side_free(&gpu_f32);
    free(c.weight), free(c.dweight0), free(c.x), free(c.targets);
}

int main(void) {
    TEST_REQUIRE_GPU();
    bfp8_context *cpu = NULL, *gpu = NULL;
    CHECK_OK(bfp8_context_create(&cpu, BFP8_BACKEND_CPU, 0));
    CHECK_OK(bfp8_context_create(&gpu, BFP8_BACKEND_CUDA, 0));
    if (!cpu || !gpu) return test_exit_code("test_head_loss_gpu");
    run_case(cpu, gpu, 128, 1000, 300, 128, 1);  /* chunks of 128, 128, 44 */
    run_case(cpu, gpu, 48, 1001, 203, 100, 2);   /* odd vocabulary: one logit at a time */
    run_case(cpu, gpu, 64, 32768, 260, 96, 3);   /* the 1b shape's vocabulary */
    bfp8_context_destroy(gpu);
    bfp8_context_destroy(cpu);
    return test_exit_code("test_head_loss_gpu");
}
