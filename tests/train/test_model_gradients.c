/*
 * test_model_gradients.c - the whole decoder's backward against central
 * finite differences, with fp32 ("exact") linear layers so that nothing is
 * rounded: this checks the wiring (residuals, norms, RoPE, attention, MLP,
 * head, loss) end to end. One random direction per parameter tensor: the
 * directional derivative by the fourth-order central stencil
 *   (L(-2e) - 8 L(-e) + 8 L(e) - L(2e)) / 12 e     (L(x) = loss at p + x v)
 * against grad . v, relative to |grad| |v|: bar 1e-3 (RECIPE.md section 5).
 * Measured 1e-6 .. 1.1e-4; the larger ones are fp32 rounding of the loss at
 * eps = 1e-3 (a larger eps lets the attention's curvature in instead).
 *
 * Also: gradient accumulation (two backwards with accumulate = the sum),
 * bit-identical repeats (the step is deterministic), and the same model
 * through bfp8_linear in each recipe, from the training initialisation: loss
 * within 0.1% and every tensor's gradient within 40 dB (bf16) / 20 dB (fp8)
 * SQNR of the fp32 one.
 *
 *   ctest --test-dir build -R train_model_gradients
 */
#include <math.h>
#include <string.h>

#include "model/model.h"
#include "test_util.h"

static const model_config tiny = {
    .vocab_size = 37, .dim = 16, .n_layers = 2, .n_heads = 2, .ffn_hidden = 24,
    .max_seq = 8, .norm_eps = 1e-5f, .rope_theta = 10000.0f};

static double loss_at(model *m, const int32_t *tokens, const int32_t *targets, int64_t B,
                      int64_t T) {
    double loss = 0.0;
    CHECK_OK(model_forward(m, tokens, targets, B, T, &loss));
    return loss;
}

int main(void) {
    bfp8_context *ctx = NULL;
    CHECK_OK(bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0));
    const int64_t B = 2, T = 7;
    const model_options opts = {.recipe = BFP8_RECIPE_BF16, .max_batch = B, .max_seq = T,
                                .exact_linears = 1};
    model *m = NULL;
    CHECK_OK(model_create(&m, ctx, &tiny, &opts));
    if (!m) return test_exit_code("train_model_gradients");
    CHECK(m->num_params == (size_t)model_config_num_params(&tiny), "parameter count %zu vs %lld",
          m->num_params, (long long)model_config_num_params(&tiny));

    /* Larger weights than the training init, so every path carries gradient. */
    test_rng rng;
    test_rng_seed(&rng, 42);
    for (int i = 0; i < m->num_tensors; ++i) {
        const model_tensor *t = &m->tensors[i];
        for (size_t k = 0; k < t->count; ++k)
            m->params[t->offset + k] = t->weight_decay ? 0.3f * (float)test_rng_normal(&rng)
                                                       : 1.0f + 0.2f * (float)test_rng_normal(&rng);
    }
    CHECK_OK(model_sync_weights(m));
    int32_t tokens[14], targets[14];
    for (int i = 0; i < 14; ++i) {
        tokens[i] = (int32_t)test_rng_range(&rng, 0, tiny.vocab_size - 1);
        targets[i] = (int32_t)test_rng_range(&rng, 0, tiny.vocab_size - 1);
    }
    tokens[3] = tokens[5]; /* a repeated token: the embedding gradient must sum */

    const double loss0 = loss_at(m, tokens, targets, B, T);
    CHECK_OK(model_backward(m, tokens, targets, 1.0f, 0));
    float *grads = test_malloc(m->num_params * sizeof(float));
    memcpy(grads, m->grads, m->num_params * sizeof(float));

    float *direction = test_malloc(m->num_params * sizeof(float));
    const float eps = 1e-3f;
    double worst = 0.0;
    for (int i = 0; i < m->num_tensors; ++i) {
        const model_tensor *t = &m->tensors[i];
        float *p = m->params + t->offset;
        double analytic = 0.0, v_norm = 0.0;
        for (size_t k = 0; k < t->count; ++k) {
            direction[k] = (float)test_rng_normal(&rng);
            analytic += (double)grads[t->offset + k] * direction[k];
            v_norm += (double)direction[k] * direction[k];
        }
        float *saved = test_malloc(t->count * sizeof(float));
        memcpy(saved, p, t->count * sizeof(float));
        static const float steps[4] = {-2.0f, -1.0f, 1.0f, 2.0f};
        static const double weights[4] = {1.0, -8.0, 8.0, -1.0};
        double numeric = 0.0;
        for (int j = 0; j < 4; ++j) {
            for (size_t k = 0; k < t->count; ++k) p[k] = saved[k] + steps[j] * eps * direction[k];
            numeric += weights[j] * loss_at(m, tokens, targets, B, T);
        }
        numeric /= 12.0 * eps;
        memcpy(p, saved, t->count * sizeof(float));
        free(saved);
        /* relative to the gradient's size along unit directions */
        double g_norm = 0.0;
        for (size_t k = 0; k < t->count; ++k) g_norm += (double)grads[t->offset + k] * grads[t->offset + k];
        const double scale = sqrt(g_norm * v_norm);
        const double rel = fabs(analytic - numeric) / fmax(scale, 1e-30);
        worst = fmax(worst, rel);
        printf("  %-24s grad.v %+.6e  numeric %+.6e  rel %.2e\n", t->name, analytic, numeric, rel);
        CHECK(rel < 1e-3, "%s: analytic %.6e vs numeric %.6e (rel %.2e)", t->name, analytic,
              numeric, rel);
        CHECK(g_norm > 0.0, "%s: zero gradient", t->name);
    }
    printf("  worst relative error %.2e, loss %.6f\n", worst, loss0);

    /* Accumulation: a second backward of the same batch with accumulate doubles it. */
    (void)loss_at(m, tokens, targets, B, T);
    CHECK_OK(model_backward(m, tokens, targets, 1.0f, 0));
    CHECK(test_compare_f32_bits("repeat grads", m->grads, grads, (int64_t)m->num_params) == 0,
          "a repeated forward+backward must give bit-identical gradients");
    (void)loss_at(m, tokens, targets, B, T);
    CHECK_OK(model_backward(m, tokens, targets, 1.0f, 1));
    double acc_diff = 0.0, acc_ref = 0.0;
    for (size_t k = 0; k < m->num_params; ++k) {
        acc_diff += (m->grads[k] - 2.0 * grads[k]) * (m->grads[k] - 2.0 * grads[k]);
        acc_ref += 4.0 * grads[k] * grads[k];
    }
    CHECK(sqrt(acc_diff / acc_ref) < 1e-6, "accumulated gradients differ from 2x by %g (norm-wise)",
          sqrt(acc_diff / acc_ref));

    /* A shorter sequence than max_seq works, and out-of-range tokens are refused. */
    double short_loss = 0.0;
    CHECK_OK(model_forward(m, tokens, targets, 1, 3, &short_loss));
    CHECK(isfinite(short_loss) && short_loss > 0.0, "short forward loss %g", short_loss);
    int32_t bad[14];
    memcpy(bad, tokens, sizeof bad);
    bad[4] = tiny.vocab_size;
    CHECK_STATUS(model_forward(m, bad, targets, B, T, &short_loss), BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(model_forward(m, tokens, targets, B, T + 1, &short_loss), BFP8_ERR_SHAPE);

    /* The same model through bfp8_linear in each recipe, from the training
     * initialisation: the loss and every tensor's gradient stay close to the
     * fp32 ones. The recipes round the linear layers' operands to bf16 or
     * fp8, so this is a closeness bar, not a finite-difference one. (From
     * the large weights above the model is chaotic: it amplifies any
     * rounding ~25x, which would hide nothing and prove nothing.) */
    CHECK_OK(model_init_weights(m, 7));
    double init_loss = 0.0;
    CHECK_OK(model_forward(m, tokens, targets, B, T, &init_loss));
    CHECK_OK(model_backward(m, tokens, targets, 1.0f, 0));
    memcpy(grads, m->grads, m->num_params * sizeof(float));
    static const struct { bfp8_recipe recipe; double min_sqnr_db; } recipes[] = {
        /* measured worst tensor: 46.4, 23.1, 23.1 dB (a norm weight, through dgrad) */
        {BFP8_RECIPE_BF16, 40.0}, {BFP8_RECIPE_FP8_BLOCKWISE, 20.0},
        {BFP8_RECIPE_FP8_BLOCKWISE_BF16WGRAD, 20.0}};
    for (size_t r = 0; r < sizeof recipes / sizeof recipes[0]; ++r) {
        const model_options ropts = {.recipe = recipes[r].recipe, .max_batch = B, .max_seq = T,
                                     .exact_linears = 0};
        model *q = NULL;
        CHECK_OK(model_create(&q, ctx, &tiny, &ropts));
        if (!q) continue;
        memcpy(q->params, m->params, m->num_params * sizeof(float));
        CHECK_OK(model_sync_weights(q));
        double qloss = 0.0;
        CHECK_OK(model_forward(q, tokens, targets, B, T, &qloss));
        CHECK_OK(model_backward(q, tokens, targets, 1.0f, 0));
        CHECK_OK(model_check_nonfinite(q));
        double worst_db = 1e9;
        const char *worst_name = "";
        for (int i = 0; i < q->num_tensors; ++i) {
            const model_tensor *t = &q->tensors[i];
            double ref = 0.0, err = 0.0;
            for (size_t k = 0; k < t->count; ++k) {
                const double a = grads[t->offset + k], d = a - q->grads[t->offset + k];
                ref += a * a, err += d * d;
            }
            const double db = 10.0 * log10(ref / fmax(err, 1e-300));
            if (db < worst_db) worst_db = db, worst_name = t->name;
        }
        printf("  %-24s loss %.6f (fp32 %.6f), worst gradient SQNR %.1f dB (%s)\n",
               bfp8_recipe_name(recipes[r].recipe), qloss, init_loss, worst_db, worst_name);
        CHECK(fabs(qloss - init_loss) < 1e-3 * init_loss, "%s: loss %g vs fp32 %g",
              bfp8_recipe_name(recipes[r].recipe), qloss, init_loss);
        CHECK(worst_db > recipes[r].min_sqnr_db, "%s: gradient of %s at %.1f dB",
              bfp8_recipe_name(recipes[r].recipe), worst_name, worst_db);
        model_destroy(q);
    }

    free(grads);
    free(direction);
    model_destroy(m);
    bfp8_context_destroy(ctx);
    return test_exit_code("train_model_gradients");
}
