/*
 * test_model_cuda.c - the whole decoder on the GPU (model_ops.h's CUDA table,
 * the CUDA GEMMs and quantizers behind bfp8_linear) against the same decoder
 * on the CPU: the same weights and tokens in both, then the loss of a
 * forward, every parameter tensor's gradient after a backward (and after a
 * second, accumulating one), and the weights after an AdamW step.
 *
 * Bars: with fp32 ("exact") linear layers both sides compute the same math in
 * another order, so loss within 1e-5 relative and every gradient within
 * 60 dB SQNR of the CPU's. Through bfp8_linear the quantizers are bit-exact
 * but the GEMMs sum in another order, so a code may round the other way
 * downstream and the two fp8 results differ by about their own quantization
 * noise (about 17 dB between CPU and GPU fp8 gradients): there the bar
 * is the loss within 1e-3 relative and the GPU's gradients as close to the
 * exact fp32 gradients as the CPU's are (worst tensor within 3 dB of the
 * CPU's SQNR; bf16 also at least 40 dB). With flash attention on the GPU
 * (bf16 attention products) the bars are the loss within 5e-3 and the
 * gradients within 6 dB of the CPU's (bf16 also at least 30 dB). Measured
 * values are printed.
 *
 * The output head: fp32 products on both sides in the exact run, bf16
 * products on both sides (the GPU's default) in the others.
 *
 * Also: three GPU models stepped in turn keep apart (tf32 in one reaches no
 * other; the step profile in one changes no bit and times every class).
 *
 *   ctest --test-dir build -R test_model_cuda
 */
#include <math.h>
#include <string.h>

#include "model/model.h"
#include "test_util.h"

static const model_config config = {
    .vocab_size = 500, .dim = 256, .n_layers = 2, .n_heads = 4, .ffn_hidden = 384,
    .max_seq = 64, .norm_eps = 1e-5f, .rope_theta = 10000.0f};
enum { B = 2, T = 64 };

/* 20 log10(|ref| / |ref - x|) over n floats */
static double sqnr_db(const float *ref, const float *x, size_t n) {
    double s = 0.0, e = 0.0;
    for (size_t i = 0; i < n; ++i) {
        s += (double)ref[i] * ref[i];
        e += ((double)ref[i] - x[i]) * ((double)ref[i] - x[i]);
    }
    if (e == 0.0) return INFINITY;
    return 10.0 * log10(s / e);
}

/* The worst tensor's SQNR of b against a (host copies). */
static double worst_tensor_db(const model *m, const float *a, const float *b, const char **worst) {
    double lowest = INFINITY;
    for (int i = 0; i < m->num_tensors; ++i) {
        const model_tensor *t = &m->tensors[i];
        const double db = sqnr_db(a + t->offset, b + t->offset, t->count);
        if (db < lowest) {
            lowest = db;
            *worst = t->name;
        }
    }
    return lowest;
}

/* exact_grads: the fp32-linear model's gradient at the same weights and
 * tokens (NULL for the exact run itself); fills it when exact. */
static void run_recipe(bfp8_context *cpu, bfp8_context *gpu, const char *name, bfp8_recipe recipe,
                       int exact, double loss_bar, double grad_bar_db, float *exact_grads, int flash) {
    /* the head's products as the GPU makes them by default (exact: fp32, else bf16), on both sides */
    const model_options opts = {.recipe = recipe, .max_batch = B, .max_seq = T, .exact_linears = exact,
                                .head_products = exact ? MODEL_HEAD_AUTO : MODEL_HEAD_BF16};
    model_options gpu_opts = opts;
    gpu_opts.flash_attention = flash;
    model *mc = NULL, *mg = NULL;
    CHECK_OK(model_create(&mc, cpu, &config, &opts));
    CHECK_OK(model_create(&mg, gpu, &config, &gpu_opts));
    if (!mc || !mg) {
        model_destroy(mc);
        model_destroy(mg);
        return;
    }
    CHECK(mg->head_layer.bf16 == !exact && mc->head_layer.bf16 == !exact, "%s: head in bf16: cpu %d gpu %d", name,
          mc->head_layer.bf16, mg->head_layer.bf16);
    const size_t P = mc->num_params;
    float *params = test_malloc(P * sizeof(float)), *gc = test_malloc(P * sizeof(float));
    float *gg = test_malloc(P * sizeof(float)), *pg = test_malloc(P * sizeof(float));
    /* the training initialisation, the same on both */
    CHECK_OK(model_init_weights(mc, 1337));
    CHECK_OK(model_init_weights(mg, 1337));
    test_rng rng;
    test_rng_seed(&rng, 7);
    int32_t tokens[B * T], targets[B * T];
    for (int i = 0; i < B * T; ++i) {
        tokens[i] = (int32_t)test_rng_range(&rng, 0, config.vocab_size - 1);
        targets[i] = (int32_t)test_rng_range(&rng, 0, config.vocab_size - 1);
    }

    double loss_c = 0.0, loss_g = 0.0;
    CHECK_OK(model_forward(mc, tokens, targets, B, T, &loss_c));
    CHECK_OK(model_forward(mg, tokens, targets, B, T, &loss_g));
    const double loss_rel = fabs(loss_g - loss_c) / fabs(loss_c);
    CHECK(isfinite(loss_g) && loss_rel <= loss_bar, "%s: loss cpu %.8f gpu %.8f (rel %.2e, bar %.0e)", name,
          loss_c, loss_g, loss_rel, loss_bar);

    /* logits of the last position, through model_logits_row */
    float *row_c = test_malloc((size_t)config.vocab_size * sizeof(float));
    float *row_g = test_malloc((size_t)config.vocab_size * sizeof(float));
    CHECK_OK(model_logits_row(mc, B * T - 1, row_c));
    CHECK_OK(model_logits_row(mg, B * T - 1, row_g));
    const double logits_db = sqnr_db(row_c, row_g, (size_t)config.vocab_size);

    CHECK_OK(model_backward(mc, tokens, targets, 1.0f, 0));
    CHECK_OK(model_backward(mg, tokens, targets, 1.0f, 0));
    CHECK_OK(bfp8_copy_to_host(cpu, gc, mc->grads, P * sizeof(float)));
    CHECK_OK(bfp8_copy_to_host(gpu, gg, mg->grads, P * sizeof(float)));
    const char *worst = "", *worst_cpu = "", *worst_gpu = "";
    const double grad_db = worst_tensor_db(mc, gc, gg, &worst);
    double cpu_exact_db = INFINITY, gpu_exact_db = INFINITY;
    if (exact) {
        memcpy(exact_grads, gc, P * sizeof(float));
        CHECK(grad_db >= grad_bar_db, "%s: gradient of %s at %.1f dB (bar %.0f)", name, worst, grad_db,
              grad_bar_db);
    } else {
        cpu_exact_db = worst_tensor_db(mc, exact_grads, gc, &worst_cpu);
        gpu_exact_db = worst_tensor_db(mc, exact_grads, gg, &worst_gpu);
        const double below_cpu = flash ? 6.0 : 3.0;
        CHECK(gpu_exact_db >= cpu_exact_db - below_cpu && gpu_exact_db >= grad_bar_db,
              "%s: against the exact gradient, GPU worst %s %.1f dB, CPU worst %s %.1f dB (bar: CPU - %.0f, "
              "and %.0f)", name, worst_gpu, gpu_exact_db, worst_cpu, cpu_exact_db, below_cpu, grad_bar_db);
    }

    /* a second forward and an accumulating backward: twice the gradient */
    CHECK_OK(model_forward(mg, tokens, targets, B, T, &loss_g));
    CHECK_OK(model_backward(mg, tokens, targets, 1.0f, 1));
    CHECK_OK(bfp8_copy_to_host(gpu, pg, mg->grads, P * sizeof(float)));
    for (size_t k = 0; k < P; ++k) gg[k] *= 2.0f;
    const double accum_db = sqnr_db(gg, pg, P);
    CHECK(accum_db >= 100.0, "%s: accumulated gradient at %.1f dB of twice the first", name, accum_db);

    /* one AdamW step from the (CPU) gradient doubled the same way on both sides */
    CHECK_OK(model_forward(mc, tokens, targets, B, T, &loss_c));
    CHECK_OK(model_backward(mc, tokens, targets, 1.0f, 1));
    double norm_c = 0.0, norm_g = 0.0;
    CHECK_OK(model_gradient_norm(mc, &norm_c));
    CHECK_OK(model_gradient_norm(mg, &norm_g));
    CHECK(fabs(norm_g - norm_c) <= 0.05 * norm_c, "%s: gradient norm cpu %.6g gpu %.6g", name, norm_c, norm_g);
    const adamw_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    CHECK_OK(model_adamw_step(mc, &h, 0.5f, 1));
    CHECK_OK(model_adamw_step(mg, &h, 0.5f, 1));
    CHECK_OK(model_copy_state(mc, params, NULL, NULL));
    CHECK_OK(model_copy_state(mg, pg, NULL, NULL));
    const double step_db = worst_tensor_db(mc, params, pg, &worst);
    /* AdamW's first step moves each weight by about lr * sign(g): where a
     * gradient is tiny, its sign may differ (through bfp8_linear), so the
     * bar is on the weights, loose except for the exact run */
    const double step_bar = exact ? 60.0 : 20.0;
    CHECK(step_db >= step_bar, "%s: weights after a step: %s at %.1f dB (bar %.0f)", name, worst, step_db,
          step_bar);
    printf("%-24s loss cpu %.6f gpu %.6f (rel %.1e); last logits %.1f dB; gradients: gpu~cpu worst %.1f dB "
           "(%s), vs exact fp32 cpu %.1f / gpu %.1f dB; accumulated %.1f dB; grad norm %.6g / %.6g; "
           "weights after a step %.1f dB\n",
           name, loss_c, loss_g, loss_rel, logits_db, grad_db, worst, cpu_exact_db, gpu_exact_db, accum_db,
           norm_c, norm_g, step_db);

    free(params), free(gc), free(gg), free(pg), free(row_c), free(row_g);
    model_destroy(mc);
    model_destroy(mg);
}

/* Three GPU models on one context, their steps interleaved: tf32 on in one
 * must not reach the others (each model has its own ops context), and the
 * profile on in another must change no bit (it only records events). */
static void test_models_apart(bfp8_context *gpu) {
    enum { STEPS = 2 };
    model_options opts = {.recipe = BFP8_RECIPE_FP8_BLOCKWISE, .max_batch = B, .max_seq = T};
    model *plain = NULL, *profiled = NULL, *tf32 = NULL;
    CHECK_OK(model_create(&plain, gpu, &config, &opts));
    opts.profile = 1;
    CHECK_OK(model_create(&profiled, gpu, &config, &opts));
    opts.profile = 0;
    opts.tf32 = 1;
    CHECK_OK(model_create(&tf32, gpu, &config, &opts));
    if (!plain || !profiled || !tf32) return;
    CHECK(plain->head_layer.bf16 == 1, "a CUDA model's default head is not the bf16 one");
    model *models[3] = {plain, profiled, tf32};
    double losses[3][STEPS];
    int32_t tokens[B * T], targets[B * T];
    for (int i = 0; i < B * T; ++i) {
        tokens[i] = (int32_t)((i * 37 + 11) % config.vocab_size);
        targets[i] = (int32_t)((i * 53 + 5) % config.vocab_size);
    }
    const adamw_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    for (int k = 0; k < 3; ++k) CHECK_OK(model_init_weights(models[k], 1234));
    for (int s = 0; s < STEPS; ++s)
        for (int k = 0; k < 3; ++k) {
            CHECK_OK(model_forward(models[k], tokens, targets, B, T, &losses[k][s]));
            CHECK_OK(model_backward(models[k], tokens, targets, 1.0f, 0));
            CHECK_OK(model_adamw_step(models[k], &h, 1.0f, s + 1));
        }
    CHECK(memcmp(losses[0], losses[1], sizeof losses[0]) == 0, "the profile changed a loss: %.9g vs %.9g",
          losses[0][STEPS - 1], losses[1][STEPS - 1]);
    CHECK(memcmp(losses[0], losses[2], sizeof losses[0]) != 0, "tf32 in its model changed no loss");
    double ms[MODEL_PROFILE_NUM_CLASSES];
    int64_t steps = 0;
    CHECK_OK(model_profile_totals(&profiled->oc, ms, &steps));
    CHECK(steps == STEPS, "%lld steps profiled", (long long)steps);
    for (int c = 0; c < MODEL_PROFILE_NUM_CLASSES; ++c)
        CHECK(c == MODEL_PROFILE_COMMUNICATION || c == MODEL_PROFILE_MOE ? ms[c] == 0.0 : ms[c] > 0.0, "%s: %g ms",
              model_profile_class_name((model_profile_class)c), ms[c]);
    CHECK_OK(model_profile_print(&profiled->oc, stdout));
    for (int k = 0; k < 3; ++k) model_destroy(models[k]);
}

int main(void) {
    TEST_REQUIRE_GPU();
    bfp8_context *cpu = NULL, *gpu = NULL;
    CHECK_OK(bfp8_context_create(&cpu, BFP8_BACKEND_CPU, 0));
    CHECK_OK(bfp8_context_create(&gpu, BFP8_BACKEND_CUDA, 0));
    if (!cpu || !gpu) return test_exit_code("test_model_cuda");
    float *exact_grads = test_malloc((size_t)model_config_num_params(&config) * sizeof(float));
    run_recipe(cpu, gpu, "exact fp32 linears", BFP8_RECIPE_BF16, 1, 1e-5, 60.0, exact_grads, 0);
    run_recipe(cpu, gpu, "bf16", BFP8_RECIPE_BF16, 0, 1e-3, 40.0, exact_grads, 0);
    run_recipe(cpu, gpu, "fp8-blockwise", BFP8_RECIPE_FP8_BLOCKWISE, 0, 1e-3, 0.0, exact_grads, 0);
    run_recipe(cpu, gpu, "fp8-blockwise-bf16wgrad", BFP8_RECIPE_FP8_BLOCKWISE_BF16WGRAD, 0, 1e-3, 0.0,
               exact_grads, 0);
    /* The GPU model with flash attention (RoPE folded into its bf16 copies of
     * q, k and of dq, dk; the bf16 recipe's attention reads and writes bf16)
     * against the CPU model without: bf16 attention products cost some
     * precision, a wrong rotation or layout costs everything. */
    run_recipe(cpu, gpu, "bf16, flash attention", BFP8_RECIPE_BF16, 0, 5e-3, 30.0, exact_grads, 1);
    run_recipe(cpu, gpu, "fp8-blockwise, flash", BFP8_RECIPE_FP8_BLOCKWISE, 0, 5e-3, 0.0, exact_grads, 1);
    free(exact_grads);
    test_models_apart(gpu);

    /* bad input still fails cleanly on the GPU model */
    const model_options opts = {.recipe = BFP8_RECIPE_BF16, .max_batch = B, .max_seq = T, .exact_linears = 0};
    model *m = NULL;
    CHECK_OK(model_create(&m, gpu, &config, &opts));
    if (m) {
        int32_t tokens[T] = {0}, targets[T] = {0};
        tokens[3] = config.vocab_size; /* out of range */
        double loss;
        CHECK_STATUS(model_forward(m, tokens, targets, 1, T, &loss), BFP8_ERR_INVALID_VALUE);
        CHECK_STATUS(model_forward(m, tokens, targets, B + 1, T, &loss), BFP8_ERR_SHAPE);
        model_destroy(m);
    }
    bfp8_context_destroy(gpu);
    bfp8_context_destroy(cpu);
    return test_exit_code("test_model_cuda");
}
