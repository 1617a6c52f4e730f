/*
 * test_model_profile.c - the model's ops context and step profile on the CPU:
 *   - two models keep their own ops context: a failure kept in one is not
 *     seen by the other, and is cleared once reported;
 *   - a model with the profile on computes the same bits as one with it off
 *     (the profile only reads clocks), over enough steps (some 46 marks each)
 *     that the buffer of 1024 marks fills and is read more than once;
 *   - the totals: the steps counted by model_adamw_step, time in every class
 *     the model marks, none in communication nor (a dense model) in mixture
 *     of experts, and no more in all than the wall-clock time of the loop
 *     (each interval counted once); an MoE model's blocks count as mixture
 *     of experts;
 *   - the printed table, pause and reset; a weight sync's time ends with it.
 *
 *   ctest --test-dir build -R train_model_profile
 */
#include <math.h>
#include <string.h>
#include <time.h>

#include "model/model.h"
#include "model/model_profile.h"
#include "test_util.h"

static const model_config tiny = {
    .vocab_size = 37, .dim = 16, .n_layers = 2, .n_heads = 2, .ffn_hidden = 24,
    .max_seq = 8, .norm_eps = 1e-5f, .rope_theta = 10000.0f};

enum { BATCH = 2, SEQ = 7, STEPS = 40 };

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* STEPS training steps on fixed data; the losses into losses[STEPS]. */
static void train(model *m, double *losses) {
    const adamw_hparams h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    for (int i = 0; i < BATCH * SEQ; ++i) {
        tokens[i] = (7 * i + 3) % tiny.vocab_size;
        targets[i] = (5 * i + 1) % tiny.vocab_size;
    }
    for (int s = 0; s < STEPS; ++s) {
        double norm = 0.0;
        CHECK_OK(model_forward(m, tokens, targets, BATCH, SEQ, &losses[s]));
        CHECK_OK(model_backward(m, tokens, targets, 1.0f, 0));
        CHECK_OK(model_gradient_norm(m, &norm));
        CHECK_OK(model_adamw_step(m, &h, 1.0f, s + 1));
    }
}

int main(void) {
    bfp8_context *ctx = NULL;
    CHECK_OK(bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0));
    model_options opts = {.recipe = BFP8_RECIPE_BF16, .max_batch = BATCH, .max_seq = SEQ, .exact_linears = 1};
    model *plain = NULL, *profiled = NULL;
    CHECK_OK(model_create(&plain, ctx, &tiny, &opts));
    opts.profile = 1;
    CHECK_OK(model_create(&profiled, ctx, &tiny, &opts));
    if (!plain || !profiled) return test_exit_code("train_model_profile");
    CHECK(plain->oc.profile == NULL && profiled->oc.profile != NULL, "the profile follows model_options.profile");

    /* one ops context per model */
    model_ops_fail(&profiled->oc, "a kept failure");
    CHECK_OK(model_ops_status(&plain->oc));
    CHECK(model_ops_status(&profiled->oc) != BFP8_OK && strstr(bfp8_last_error(), "a kept failure"),
          "the failure kept in one model's ops context is reported: %s", bfp8_last_error());
    CHECK_OK(model_ops_status(&profiled->oc)); /* and cleared */

    CHECK_OK(model_init_weights(plain, 7));
    CHECK_OK(model_init_weights(profiled, 7));
    model_profile_reset(&profiled->oc); /* the initial weight sync is no step's */
    double plain_losses[STEPS], profiled_losses[STEPS];
    train(plain, plain_losses);
    const double t0 = now_ms();
    train(profiled, profiled_losses);
    const double wall = now_ms() - t0;
    CHECK(memcmp(plain_losses, profiled_losses, sizeof plain_losses) == 0, "the profile changed a loss");
    CHECK(plain_losses[STEPS - 1] < plain_losses[0], "no training: loss %g -> %g", plain_losses[0],
          plain_losses[STEPS - 1]);
    float *p_plain = malloc(plain->num_params * sizeof(float)), *p_prof = malloc(plain->num_params * sizeof(float));
    CHECK_OK(model_copy_state(plain, p_plain, NULL, NULL));
    CHECK_OK(model_copy_state(profiled, p_prof, NULL, NULL));
    CHECK(memcmp(p_plain, p_prof, plain->num_params * sizeof(float)) == 0, "the profile changed a parameter");
    free(p_plain);
    free(p_prof);

    double ms[MODEL_PROFILE_NUM_CLASSES];
    int64_t steps = 0;
    CHECK_OK(model_profile_totals(&profiled->oc, ms, &steps));
    CHECK(steps == STEPS, "%lld steps counted, %d made", (long long)steps, STEPS);
    double sum = 0.0;
    for (int c = 0; c < MODEL_PROFILE_NUM_CLASSES; ++c) {
        sum += ms[c];
        if (c == MODEL_PROFILE_COMMUNICATION || c == MODEL_PROFILE_MOE)
            CHECK(ms[c] == 0.0, "%s: %g ms (no data parallelism, no MoE block)",
                  model_profile_class_name((model_profile_class)c), ms[c]);
        else
            CHECK(ms[c] > 0.0, "no time in %s", model_profile_class_name((model_profile_class)c));
    }
    CHECK(sum <= wall * 1.0001 + 1e-3, "the classes sum to %g ms, more than the %g ms of the loop", sum, wall);
    double again[MODEL_PROFILE_NUM_CLASSES];
    CHECK_OK(model_profile_totals(&profiled->oc, again, &steps));
    CHECK(memcmp(ms, again, sizeof ms) == 0, "reading the totals twice changed them");

    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    if (f) {
        CHECK_OK(model_profile_print(&profiled->oc, f));
        char text[2048] = {0};
        rewind(f);
        const size_t n = fread(text, 1, sizeof text - 1, f);
        CHECK(n > 0 && strstr(text, "40 steps") && strstr(text, "attention") && strstr(text, "head + loss") &&
                  strstr(text, "total"),
              "the table:\n%s", text);
        fclose(f);
    }
    /* paused: a forward adds nothing */
    model_profile_pause(&profiled->oc, 1);
    int32_t ids[SEQ] = {1, 2, 3, 4, 5, 6, 7};
    double loss = 0.0;
    CHECK_OK(model_forward(profiled, ids, ids, 1, SEQ, &loss));
    model_profile_pause(&profiled->oc, 0);
    CHECK_OK(model_profile_totals(&profiled->oc, again, &steps));
    CHECK(memcmp(ms, again, sizeof ms) == 0, "a paused profile counted a forward");
    CHECK_OK(model_forward(profiled, ids, ids, 1, SEQ, &loss));
    CHECK_OK(model_profile_totals(&profiled->oc, again, &steps));
    CHECK(again[MODEL_PROFILE_ATTENTION] > ms[MODEL_PROFILE_ATTENTION], "a resumed profile missed a forward");

    model_profile_reset(&profiled->oc);
    CHECK_OK(model_profile_totals(&profiled->oc, ms, &steps));
    CHECK(steps == 0 && ms[MODEL_PROFILE_LINEAR] == 0.0, "reset left %lld steps, %g ms", (long long)steps,
          ms[MODEL_PROFILE_LINEAR]);
    CHECK(model_profile_totals(&plain->oc, ms, &steps) != BFP8_OK, "totals of a model without a profile");

    /* bfp8_linear layers: re-quantizing the weights is "linear" time, and it ends there (the host's
     * time after it is no class's) */
    model *bf16 = NULL;
    opts.exact_linears = 0;
    CHECK_OK(model_create(&bf16, ctx, &tiny, &opts));
    if (bf16) {
        CHECK_OK(model_init_weights(bf16, 7));
        const struct timespec pause = {0, 50 * 1000 * 1000};
        nanosleep(&pause, NULL);
        CHECK_OK(model_profile_totals(&bf16->oc, ms, &steps));
        CHECK(ms[MODEL_PROFILE_LINEAR] > 0.0 && ms[MODEL_PROFILE_LINEAR] < 40.0,
              "re-quantizing the weights: %g ms of linear (the 50 ms after it counted?)", ms[MODEL_PROFILE_LINEAR]);
        model_destroy(bf16);
    }

    /* an MoE block's forward, backward and weight sync are mixture-of-experts time */
    model_config moe_config = tiny;
    moe_config.dim = 128;
    moe_config.moe = (model_moe_config){.num_experts = 4, .dense_layers = 1, .top_k = 2, .expert_hidden = 128,
                                        .route_scale = 1.0f};
    model *moe = NULL;
    CHECK_OK(model_create(&moe, ctx, &moe_config, &opts));
    if (moe) {
        CHECK_OK(model_init_weights(moe, 7));
        model_profile_reset(&moe->oc);
        int32_t tokens[BATCH * SEQ];
        for (int i = 0; i < BATCH * SEQ; ++i) tokens[i] = (3 * i + 1) % tiny.vocab_size;
        CHECK_OK(model_forward(moe, tokens, tokens, BATCH, SEQ, &loss));
        CHECK_OK(model_backward(moe, tokens, tokens, 1.0f, 0));
        CHECK_OK(model_profile_totals(&moe->oc, ms, &steps));
        CHECK(ms[MODEL_PROFILE_MOE] > 0.0 && ms[MODEL_PROFILE_LINEAR] > 0.0, "MoE model: moe %g ms, linear %g ms",
              ms[MODEL_PROFILE_MOE], ms[MODEL_PROFILE_LINEAR]);
        model_destroy(moe);
    }

    model_destroy(plain);
    model_destroy(profiled);
    bfp8_context_destroy(ctx);
    return test_exit_code("train_model_profile");
}
