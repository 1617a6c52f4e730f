/*
 * model_moe.c - a decoder block's mixture-of-experts feed-forward: its
 * tensors, its bfp8_moe layer, forward, backward and the balancing step.
 */
#include "model/model_moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model/model_profile.h"

#define PROFILE(oc, class) model_profile_mark((oc), MODEL_PROFILE_##class)

enum { TENSOR_ROUTER, TENSOR_BIAS, TENSOR_W13, TENSOR_W2, TENSOR_SHARED_W13, TENSOR_SHARED_W2 };

static void describe(model_moe_tensor *t, int layer, const char *what, int64_t rows, int64_t cols, int decay,
                     int frozen) {
    snprintf(t->name, sizeof t->name, "layers.%d.moe.%s", layer, what);
    t->rows = rows;
    t->cols = cols;
    t->weight_decay = decay;
    t->frozen = frozen;
}

int model_moe_tensors(const model_config *c, int layer, model_moe_tensor *out) {
    const model_moe_config *e = &c->moe;
    const int64_t D = c->dim, E = e->num_experts, F = e->expert_hidden, S = e->shared_hidden;
    int n = 0;
    describe(&out[n++], layer, "router", E, D, 1, 0);
    if (e->bias_update_rate > 0.0f) describe(&out[n++], layer, "router_bias", 1, E, 0, 1);
    describe(&out[n++], layer, "experts_w13", E * 2 * F, D, 1, 0);
    describe(&out[n++], layer, "experts_w2", E * D, F, 1, 0);
    if (S > 0) {
        describe(&out[n++], layer, "shared_w13", 2 * S, D, 1, 0);
        describe(&out[n++], layer, "shared_w2", D, S, 1, 0);
    }
    return n;
}

bfp8_status model_moe_init(model *m, int layer, int *tensor) {
    const model_config *c = &m->config;
    const model_moe_config *e = &c->moe;
    model_block *blk = &m->blocks[layer];
    if (m->options.exact_linears)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "model_create: the MoE feed-forward has no exact fp32 form "
                                               "(exact_linears)");
    model_moe_block *b = calloc(1, sizeof *b);
    if (!b) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "model_create: out of memory");
    blk->moe = b;
    b->ctx = m->ctx;
    b->num_experts = e->num_experts;
    b->bias_update_rate = e->bias_update_rate;
    b->bias_host = calloc((size_t)e->num_experts, sizeof *b->bias_host);
    b->routed = calloc((size_t)e->num_experts, sizeof *b->routed);
    b->counts = calloc((size_t)e->num_experts + 1, sizeof *b->counts);
    b->window = calloc((size_t)e->num_experts, sizeof *b->window);
    if (!b->bias_host || !b->routed || !b->counts || !b->window)
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "model_create: out of memory");
    model_moe_tensor specs[MODEL_MOE_MAX_TENSORS];
    const int n = model_moe_tensors(c, layer, specs);
    float **weights[] = {&b->weights.router, &b->bias, &b->weights.experts_w13, &b->weights.experts_w2,
                         &b->weights.shared_w13, &b->weights.shared_w2};
    float **grads[] = {&b->grads.router, NULL, &b->grads.experts_w13, &b->grads.experts_w2,
                       &b->grads.shared_w13, &b->grads.shared_w2};
    for (int i = 0, kind = 0; i < n; ++i, ++kind, ++*tensor) {
        if (kind == TENSOR_BIAS && !specs[i].frozen) ++kind; /* no bias */
        const size_t offset = m->tensors[*tensor].offset;
        *weights[kind] = m->params + offset;
        if (grads[kind]) *grads[kind] = m->grads + offset;
    }
    /* the non-finite flags of the dense MLP's gate|up layer, under the layer's name */
    uint32_t *flags = m->nonfinite_flags + ((size_t)layer * 4 + 2) * BFP8_LINEAR_NUM_FLAGS;
    snprintf(blk->gate_up.name, sizeof blk->gate_up.name, "moe.experts");
    blk->gate_up.layer = layer;
    const bfp8_moe_config cfg = {.hidden = c->dim,
                                 .expert_hidden = e->expert_hidden,
                                 .shared_hidden = e->shared_hidden,
                                 .num_experts = e->num_experts,
                                 .top_k = e->top_k,
                                 .max_tokens = m->options.max_batch * m->options.max_seq,
                                 .score_fn = (bfp8_moe_score_fn)e->score_fn,
                                 .normalize_weights = e->normalize_weights,
                                 .route_scale = e->route_scale,
                                 .capacity_factor = e->capacity_factor,
                                 .balance = b->bias ? BFP8_MOE_BALANCE_BIAS : BFP8_MOE_BALANCE_NONE,
                                 .bias_update_rate = e->bias_update_rate, /* (the model moves the bias) */
                                 .recipe = m->options.recipe,
                                 .pow2_scales = 0,
                                 .nonfinite_flags = flags};
    return bfp8_moe_create(&b->layer, m->ctx, &cfg);
}

void model_moe_release(model_block *blk) {
    model_moe_block *b = blk->moe;
    if (!b) return;
    bfp8_moe_destroy(b->layer);
    free(b->bias_host);
    free(b->routed);
    free(b->counts);
    free(b->window);
    free(b);
    blk->moe = NULL;
}

bfp8_status model_moe_sync(model *m, model_moe_block *b) {
    PROFILE(&m->oc, MOE);
    if (b->bias) { /* the arena's bias (a checkpoint's, rank 0's, a balancing step's) */
        BFP8_TRY(bfp8_copy_to_host(b->ctx, b->bias_host, b->bias, (size_t)b->num_experts * sizeof *b->bias));
        BFP8_TRY(bfp8_moe_set_bias(b->layer, b->bias_host));
    }
    return bfp8_moe_set_weights(b->layer, &b->weights);
}

bfp8_status model_moe_forward(model *m, model_moe_block *b, const float *x, int64_t tokens, float *out,
                              const float *residual) {
    PROFILE(&m->oc, MOE);
    BFP8_TRY(bfp8_moe_forward(b->layer, x, tokens, out));
    PROFILE(&m->oc, ELEMENTWISE);
    m->ops->add_f32(&m->oc, out, residual, tokens * m->config.dim);
    return BFP8_OK;
}

bfp8_status model_moe_backward(model *m, model_moe_block *b, const float *dy, float *dx, int accumulate) {
    PROFILE(&m->oc, MOE);
    BFP8_TRY(bfp8_moe_backward(b->layer, dy, dx, &b->grads, accumulate));
    int64_t dropped = 0;
    BFP8_TRY(bfp8_moe_last_routing(b->layer, b->routed, &dropped));
    for (int e = 0; e < b->num_experts; ++e) b->counts[e] += (double)b->routed[e];
    b->counts[b->num_experts] += (double)dropped;
    return BFP8_OK;
}

/* The busiest expert's tokens over the mean of counts[0..E) (0 when none); their sum in *total. */
static double max_over_mean(const double *counts, int E, double *total) {
    double sum = 0.0, busiest = 0.0;
    for (int e = 0; e < E; ++e) {
        sum += counts[e];
        if (counts[e] > busiest) busiest = counts[e];
    }
    *total = sum;
    return sum > 0.0 ? busiest / (sum / E) : 0.0;
}

bfp8_status model_moe_balance_step(model *m) {
    for (int l = 0; l < m->config.n_layers; ++l) {
        model_moe_block *b = m->blocks[l].moe;
        if (!b) continue;
        const int E = b->num_experts;
        double total;
        b->load_max_over_mean = max_over_mean(b->counts, E, &total);
        const double mean = total / E;
        for (int e = 0; e < E; ++e) b->window[e] += b->counts[e];
        b->dropped = b->counts[E];
        if (b->bias && total > 0.0) {
            const float rate = b->bias_update_rate;
            for (int e = 0; e < E; ++e)
                b->bias_host[e] += b->counts[e] < mean ? rate : b->counts[e] > mean ? -rate : 0.0f;
            BFP8_TRY(bfp8_copy_to_backend(m->ctx, b->bias, b->bias_host, (size_t)E * sizeof *b->bias));
        }
        memset(b->counts, 0, (size_t)(E + 1) * sizeof *b->counts);
    }
    return BFP8_OK;
}

int model_moe_load_summary(const model *m, double *worst_max_over_mean, double *dropped) {
    int blocks = 0;
    *worst_max_over_mean = 0.0;
    *dropped = 0.0;
    for (int l = 0; l < m->config.n_layers; ++l) {
        const model_moe_block *b = m->blocks[l].moe;
        if (!b) continue;
        ++blocks;
        if (b->load_max_over_mean > *worst_max_over_mean) *worst_max_over_mean = b->load_max_over_mean;
        *dropped += b->dropped;
    }
    return blocks;
}

int model_moe_window_load(model *m, double *worst, double *per_block) {
    int blocks = 0;
    *worst = 0.0;
    for (int l = 0; l < m->config.n_layers; ++l) {
        model_moe_block *b = m->blocks[l].moe;
        if (!b) continue;
        double total;
        const double load = max_over_mean(b->window, b->num_experts, &total);
        if (per_block) per_block[blocks] = load;
        if (load > *worst) *worst = load;
        memset(b->window, 0, (size_t)b->num_experts * sizeof *b->window);
        ++blocks;
    }
    return blocks;
}
