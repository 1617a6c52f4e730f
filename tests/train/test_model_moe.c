/*
 * test_model_moe.c - the decoder with MoE blocks (model_moe.h) on the CPU.
 *
 *   1. Layout: the parameter count of the config, the MoE tensors' names,
 *      the selection bias frozen; exact fp32 linears refused.
 *   2. Gradients through the MoE block (bf16 recipe): for every trained
 *      tensor, the directional derivative along its own gradient by a central
 *      difference of the loss, a step of 1% of the tensor's size (large
 *      enough that the bf16 rounding of the perturbed operands averages out),
 *      against |grad|^2 times the step. The MoE block's tensors and those
 *      after it: within 1% (measured <= 1e-3); those before it, whose
 *      gradient comes through the block's dx: within 10% (measured <= 3%:
 *      bf16 noise and curvature; a wiring error is off by far more). The
 *      router is left out: along its gradient tokens change experts, a jump
 *      of the loss that no derivative has (test_moe_layer checks the
 *      router's gradient against an fp64 reference); its gradient must not
 *      be zero.
 *   3. Balancing: a backward counts its forward's M x k slots per MoE block
 *      (a forward alone counts nothing); the optimizer step moves each bias
 *      by exactly the rate towards the mean load, AdamW leaves it alone, the
 *      counts restart; the window load sums the steps since it last restarted;
 *      a capacity counts the dropped pairs.
 *   4. Checkpoints: saved and loaded into the same shape, the same loss bit
 *      for bit (the bias included); into another MoE shape or a dense model,
 *      refused with the model untouched.
 *
 *   ctest --test-dir build -R train_model_moe
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/model_moe.h"
#include "test_util.h"
#include "train/checkpoint.h"

static const model_config config = {
    .vocab_size = 37, .dim = 128, .n_layers = 2, .n_heads = 2, .ffn_hidden = 128, .max_seq = 8,
    .norm_eps = 1e-5f, .rope_theta = 10000.0f,
    .moe = {.num_experts = 4, .dense_layers = 1, .top_k = 2, .expert_hidden = 128, .shared_hidden = 128,
            .score_fn = BFP8_MOE_SCORE_SIGMOID, .normalize_weights = 1, .route_scale = 1.0f,
            .capacity_factor = 0.0f, .bias_update_rate = 0.01f}};
enum { B = 2, T = 8, M = B * T };

static double loss_of(model *m, const int32_t *tokens, const int32_t *targets) {
    double loss = 0.0;
    CHECK_OK(model_forward(m, tokens, targets, B, T, &loss));
    return loss;
}

static model *make(bfp8_context *ctx, const model_config *c, bfp8_recipe recipe) {
    const model_options opts = {.recipe = recipe, .max_batch = B, .max_seq = T};
    model *m = NULL;
    CHECK_OK(model_create(&m, ctx, c, &opts));
    if (m) CHECK_OK(model_init_weights(m, 11));
    return m;
}

static void check_layout(bfp8_context *ctx) {
    model *m = make(ctx, &config, BFP8_RECIPE_BF16);
    if (!m) return;
    CHECK(m->num_params == (size_t)model_config_num_params(&config), "parameter count %zu vs %lld", m->num_params,
          (long long)model_config_num_params(&config));
    static const char *const moe_names[6] = {"layers.1.moe.router",      "layers.1.moe.router_bias",
                                             "layers.1.moe.experts_w13", "layers.1.moe.experts_w2",
                                             "layers.1.moe.shared_w13",  "layers.1.moe.shared_w2"};
    const int first = 1 + 6 + 4; /* tok_emb, block 0 (dense), block 1's norms and attention */
    CHECK(m->num_tensors == first + 6 + 2, "%d tensors", m->num_tensors);
    for (int i = 0; i < 6 && first + i < m->num_tensors; ++i) {
        const model_tensor *t = &m->tensors[first + i];
        CHECK(strcmp(t->name, moe_names[i]) == 0, "tensor %d is %s, expected %s", first + i, t->name, moe_names[i]);
        CHECK(t->frozen == (i == 1), "%s: frozen %d", t->name, t->frozen);
    }
    CHECK(m->blocks[0].moe == NULL && m->blocks[1].moe != NULL, "block 0 dense, block 1 MoE");
    model_destroy(m);
    const model_options exact = {.recipe = BFP8_RECIPE_BF16, .max_batch = B, .max_seq = T, .exact_linears = 1};
    CHECK_STATUS(model_create(&m, ctx, &config, &exact), BFP8_ERR_UNSUPPORTED);
    model_config bad = config;
    bad.moe.expert_hidden = 96;
    CHECK_STATUS(model_config_validate(&bad), BFP8_ERR_INVALID_VALUE);
    bad = config, bad.moe.dense_layers = 2;
    CHECK_STATUS(model_config_validate(&bad), BFP8_ERR_INVALID_VALUE);
    bad = config, bad.moe.num_experts = 0;
    CHECK_STATUS(model_config_validate(&bad), BFP8_ERR_INVALID_VALUE); /* MoE fields without experts */
}

static void check_gradients(bfp8_context *ctx, const int32_t *tokens, const int32_t *targets) {
    model *m = make(ctx, &config, BFP8_RECIPE_BF16);
    if (!m) return;
    (void)loss_of(m, tokens, targets);
    CHECK_OK(model_backward(m, tokens, targets, 1.0f, 0));
    float *grads = test_malloc(m->num_params * sizeof(float)), *keep = test_malloc(m->num_params * sizeof(float));
    memcpy(grads, m->grads, m->num_params * sizeof(float));
    double worst = 0.0;
    for (int i = 0; i < m->num_tensors; ++i) {
        const model_tensor *t = &m->tensors[i];
        if (t->frozen) continue;
        float *p = m->params + t->offset;
        const float *g = grads + t->offset;
        double rms = 0.0, grad_sq = 0.0;
        for (size_t k = 0; k < t->count; ++k) rms += (double)p[k] * p[k], grad_sq += (double)g[k] * g[k];
        CHECK(grad_sq > 0.0, "%s: zero gradient", t->name);
        if (strstr(t->name, "moe.router")) continue; /* (see above) */
        const double step = 0.01 * sqrt(rms / grad_sq);
        memcpy(keep, p, t->count * sizeof(float));
        for (size_t k = 0; k < t->count; ++k) p[k] = keep[k] + (float)(step * g[k]);
        CHECK_OK(model_sync_weights(m));
        const double plus = loss_of(m, tokens, targets);
        for (size_t k = 0; k < t->count; ++k) p[k] = keep[k] - (float)(step * g[k]);
        CHECK_OK(model_sync_weights(m));
        const double minus = loss_of(m, tokens, targets);
        memcpy(p, keep, t->count * sizeof(float));
        const double numeric = (plus - minus) / 2.0, analytic = step * grad_sq;
        const double rel = fabs(numeric - analytic) / analytic;
        worst = fmax(worst, rel);
        printf("  %-26s step %.3g  numeric %+.6e  analytic %+.6e  rel %.2e\n", t->name, step, numeric, analytic, rel);
        const double bar = strstr(t->name, "moe.") || strstr(t->name, "final_norm") || strstr(t->name, "head") ? 0.01
                                                                                                        : 0.1;
        CHECK(rel < bar, "%s: central difference %.6e vs analytic %.6e (rel %.2e, bar %g)", t->name, numeric, analytic,
              rel, bar);
    }
    CHECK_OK(model_sync_weights(m));
    printf("  worst relative error %.2e\n", worst);
    free(grads), free(keep);
    model_destroy(m);
}

static void check_balancing(bfp8_context *ctx, const int32_t *tokens, const int32_t *targets) {
    model *m = make(ctx, &config, BFP8_RECIPE_FP8_BLOCKWISE);
    if (!m) return;
    model_moe_block *b = m->blocks[1].moe;
    const int E = config.moe.num_experts;
    (void)loss_of(m, tokens, targets); /* a forward alone: validation, not counted */
    double total = 0.0;
    for (int e = 0; e <= E; ++e) total += b->counts[e];
    CHECK(total == 0.0, "a forward without backward counted %g slots", total);
    (void)loss_of(m, tokens, targets);
    CHECK_OK(model_backward(m, tokens, targets, 1.0f, 0));
    double counts[1024], mean = 0.0;
    for (int e = 0; e <= E; ++e) counts[e] = b->counts[e];
    for (int e = 0; e < E; ++e) mean += counts[e] / E;
    CHECK(mean * E == (double)M * config.moe.top_k && counts[E] == 0.0, "counted %g slots (expected %d), %g dropped",
          mean * E, M * config.moe.top_k, counts[E]);
    const adamw_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    CHECK_OK(model_adamw_step(m, &h, 1.0f, 1));
    int moved = 0;
    for (int e = 0; e < E; ++e) {
        const float want = counts[e] < mean ? 0.01f : counts[e] > mean ? -0.01f : 0.0f;
        CHECK(b->bias[e] == want && b->bias_host[e] == want, "expert %d: load %g (mean %g), bias %g, expected %g", e,
              counts[e], mean, (double)b->bias[e], (double)want);
        moved += want != 0.0f;
        const size_t at = (size_t)(b->bias - m->params) + (size_t)e;
        CHECK(m->adam_m[at] == 0.0f && m->adam_v[at] == 0.0f, "AdamW touched the bias of expert %d", e);
    }
    CHECK(moved > 0, "an even load of %d tokens: no bias moved", M);
    double busiest = 0.0;
    for (int e = 0; e < E; ++e) busiest = fmax(busiest, counts[e]);
    CHECK(b->load_max_over_mean == busiest / mean && b->dropped == 0.0, "load max/mean %g (expected %g), dropped %g",
          b->load_max_over_mean, busiest / mean, b->dropped);
    total = 0.0;
    for (int e = 0; e <= E; ++e) total += b->counts[e];
    CHECK(total == 0.0, "the counts do not restart after the step (%g)", total);
    /* the window: a second step's counts added to the first's, then a restart */
    (void)loss_of(m, tokens, targets);
    CHECK_OK(model_backward(m, tokens, targets, 1.0f, 0));
    double sums[1024], sum_total = 0.0, sum_busiest = 0.0, window_worst = 0.0, per_block[2] = {0, 0};
    for (int e = 0; e < E; ++e) sums[e] = counts[e] + b->counts[e];
    CHECK_OK(model_adamw_step(m, &h, 1.0f, 2));
    for (int e = 0; e < E; ++e) sum_total += sums[e], sum_busiest = fmax(sum_busiest, sums[e]);
    CHECK(model_moe_window_load(m, &window_worst, per_block) == 1, "one MoE block in the window");
    CHECK(fabs(window_worst - sum_busiest * E / sum_total) < 1e-12 && per_block[0] == window_worst,
          "window load %g (block %g), expected %g over two steps", window_worst, per_block[0],
          sum_busiest * E / sum_total);
    CHECK(model_moe_window_load(m, &window_worst, NULL) == 1 && window_worst == 0.0,
          "the window does not restart (%g)", window_worst);
    model_destroy(m);

    model_config capped = config;
    capped.moe.capacity_factor = 0.5f;
    m = make(ctx, &capped, BFP8_RECIPE_BF16);
    if (!m) return;
    (void)loss_of(m, tokens, targets);
    CHECK_OK(model_backward(m, tokens, targets, 1.0f, 0));
    CHECK_OK(model_adamw_step(m, &h, 1.0f, 1));
    double worst, dropped;
    CHECK(model_moe_load_summary(m, &worst, &dropped) == 1, "one MoE block");
    CHECK(dropped > 0.0 && worst >= 1.0, "capacity 0.5: %g pairs dropped, load max/mean %g", dropped, worst);
    model_destroy(m);
}

static void check_checkpoints(bfp8_context *ctx, const int32_t *tokens, const int32_t *targets) {
    model *m = make(ctx, &config, BFP8_RECIPE_FP8_BLOCKWISE);
    if (!m) return;
    const adamw_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    for (int step = 1; step <= 2; ++step) { /* a moved bias and non-zero moments */
        (void)loss_of(m, tokens, targets);
        CHECK_OK(model_backward(m, tokens, targets, 1.0f, 0));
        CHECK_OK(model_adamw_step(m, &h, 1.0f, step));
    }
    const double loss = loss_of(m, tokens, targets);
    char path[64];
    snprintf(path, sizeof path, "/tmp/bfp8_model_moe_%d.bin", (int)getpid());
    checkpoint_info info = {.config = config, .recipe = BFP8_RECIPE_FP8_BLOCKWISE, .step = 2, .num_params = m->num_params,
                            .total_steps = 2, .batch = B, .seq = T, .grad_accum = 1, .ranks = 1};
    snprintf(info.model_name, sizeof info.model_name, "test");
    CHECK_OK(checkpoint_save(path, &info, m));
    checkpoint_info back;
    CHECK_OK(checkpoint_read_info(path, &back));
    CHECK(memcmp(&back.config, &config, sizeof config) == 0, "the header does not give the MoE config back");

    model *same = make(ctx, &config, BFP8_RECIPE_FP8_BLOCKWISE);
    if (same) {
        CHECK_OK(checkpoint_load(path, &back, same));
        CHECK(test_compare_f32_bits("params", same->params, m->params, (int64_t)m->num_params) == 0 &&
                  test_compare_f32_bits("adam_v", same->adam_v, m->adam_v, (int64_t)m->num_params) == 0,
              "the loaded state differs");
        const double loaded = loss_of(same, tokens, targets);
        CHECK(loaded == loss, "loss after the load %.9g, before the save %.9g", loaded, loss);
        model_destroy(same);
    }
    model_config other = config;
    other.moe.top_k = 1;
    const model_config dense = {.vocab_size = 37, .dim = 128, .n_layers = 2, .n_heads = 2, .ffn_hidden = 128,
                                .max_seq = 8, .norm_eps = 1e-5f, .rope_theta = 10000.0f};
    const model_config *refused[2] = {&other, &dense};
    for (int i = 0; i < 2; ++i) {
        model *q = make(ctx, refused[i], BFP8_RECIPE_FP8_BLOCKWISE);
        if (!q) continue;
        const float first = q->params[0];
        CHECK_STATUS(checkpoint_load(path, &back, q), BFP8_ERR_INVALID_VALUE);
        CHECK(strstr(bfp8_last_error(), "holds a different model") != NULL, "message: %s", bfp8_last_error());
        CHECK(q->params[0] == first, "a refused load changed the model");
        model_destroy(q);
    }
    remove(path);
    model_destroy(m);
}

int main(void) {
    bfp8_context *ctx = NULL;
    CHECK_OK(bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0));
    test_rng rng;
    test_rng_seed(&rng, 5);
    int32_t tokens[M], targets[M];
    for (int i = 0; i < M; ++i) {
        tokens[i] = (int32_t)test_rng_range(&rng, 0, config.vocab_size - 1);
        targets[i] = (int32_t)test_rng_range(&rng, 0, config.vocab_size - 1);
    }
    check_layout(ctx);
    check_gradients(ctx, tokens, targets);
    check_balancing(ctx, tokens, targets);
    check_checkpoints(ctx, tokens, targets);
    bfp8_context_destroy(ctx);
    return test_exit_code("train_model_moe");
}
