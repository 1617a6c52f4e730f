/*
 * model_linear.c - a model linear layer over bfp8_linear: bf16 activations
 * in and out (the op next to a layer reads or writes bf16 itself: a NULL x,
 * dy or dx), or fp32 ones converted on the way in and out with the
 * operations of the context's backend (model_ops.h); fp8-blockwise quantizes
 * an fp32 dy as it is. With the step profile on, the time of bfp8_linear
 * counts as "linear" and that of the conversions and residual adds as "norms
 * and elementwise" (model_profile.h).
 */
#include "model/model_linear.h"

#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "model/model_profile.h"

/* The step profile: from here on the time belongs to this class (model_profile.h). */
#define PROFILE(oc, class) model_profile_mark((oc), MODEL_PROFILE_##class)

int model_linear_keeps_input(bfp8_recipe recipe, int exact) {
    return exact || recipe != BFP8_RECIPE_FP8_BLOCKWISE;
}

size_t model_linear_saved_bytes(int64_t in_features, int64_t max_tokens, bfp8_recipe recipe, int exact) {
    if (!model_linear_keeps_input(recipe, exact)) return 0;
    return (size_t)(in_features * max_tokens) * (exact ? sizeof(float) : sizeof(uint16_t));
}

bfp8_status model_linear_init(model_linear *l, bfp8_context *ctx, model_ops_ctx *oc, const char *name, int layer,
                              int64_t in_features, int64_t out_features, int64_t max_tokens, bfp8_recipe recipe,
                              int exact, float *weight, float *grad, uint32_t *nonfinite_flags, void *saved_input) {
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->layer = layer;
    l->in_features = in_features;
    l->out_features = out_features;
    l->max_tokens = max_tokens;
    l->exact = exact;
    l->recipe = recipe;
    l->weight = weight;
    l->grad = grad;
    l->nonfinite_flags = nonfinite_flags;
    l->saved_input = saved_input;
    l->ctx = ctx;
    l->ops = model_ops_for(ctx);
    l->oc = oc;
    if (!l->ops)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "model_linear_init: no model operations for this backend");
    if (exact) return BFP8_OK;
    const bfp8_linear_config cfg = {.in_features = in_features,
                                    .out_features = out_features,
                                    .max_tokens = max_tokens,
                                    .recipe = recipe,
                                    .pow2_scales = 0,
                                    .nonfinite_flags = nonfinite_flags};
    return bfp8_linear_create(&l->lin, ctx, &cfg);
}

void model_linear_release(model_linear *l) {
    bfp8_linear_destroy(l->lin);
    l->lin = NULL;
}

bfp8_status model_linear_set_weight(model_linear *l) {
    if (l->exact) return BFP8_OK;
    PROFILE(l->oc, LINEAR);
    return bfp8_linear_set_weight(l->lin, l->weight);
}

uint16_t *model_linear_input_bf16(const model_linear *l) {
    return l->exact ? NULL : l->saved_input;
}

bfp8_status model_linear_forward(model_linear *l, const model_linear_scratch *s, const float *x,
                                 int64_t tokens, float *y, const float *residual) {
    const int64_t K = l->in_features, N = l->out_features;
    if (tokens > l->max_tokens)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: %lld tokens, at most %lld", l->name,
                         (long long)tokens, (long long)l->max_tokens);
    uint16_t *x_bf16 = model_linear_input_bf16(l);
    if (!x && !x_bf16)
        return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: no input (only a bf16 layer takes it in place)", l->name);
    model_ops_ctx *oc = l->oc;
    if (l->exact) {
        float *x_saved = l->saved_input;
        PROFILE(oc, LINEAR);
        l->ops->copy_f32(oc, x_saved, x, tokens * K);
        l->ops->transpose_f32(oc, s->weight_t, l->weight, N, K);
        if (residual) l->ops->copy_f32(oc, y, residual, tokens * N);
        l->ops->matmul_f32(oc, y, N, x_saved, K, 0, s->weight_t, N, tokens, N, K, residual != NULL);
        return BFP8_OK;
    }
    PROFILE(oc, ELEMENTWISE);
    if (x) l->ops->f32_to_bf16(oc, x_bf16, x, tokens * K);
    PROFILE(oc, LINEAR);
    BFP8_TRY(bfp8_linear_forward(l->lin, x_bf16, tokens, s->out_bf16));
    PROFILE(oc, ELEMENTWISE);
    if (residual)
        l->ops->add_bf16_f32(oc, y, residual, s->out_bf16, tokens * N);
    else
        l->ops->bf16_to_f32(oc, y, s->out_bf16, tokens * N, 0);
    return BFP8_OK;
}

bfp8_status model_linear_forward_to_bf16(model_linear *l, const float *x, int64_t tokens, uint16_t *y) {
    const int64_t K = l->in_features;
    uint16_t *x_bf16 = model_linear_input_bf16(l);
    if (!x_bf16)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: a bf16 output from a layer that works in fp32", l->name);
    if (tokens > l->max_tokens)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: %lld tokens, at most %lld", l->name,
                         (long long)tokens, (long long)l->max_tokens);
    model_ops_ctx *oc = l->oc;
    PROFILE(oc, ELEMENTWISE);
    if (x) l->ops->f32_to_bf16(oc, x_bf16, x, tokens * K);
    PROFILE(oc, LINEAR);
    return bfp8_linear_forward(l->lin, x_bf16, tokens, y);
}

bfp8_status model_linear_backward(model_linear *l, const model_linear_scratch *s, const float *dy,
                                  int64_t tokens, float *dx, int accumulate) {
    const int64_t K = l->in_features, N = l->out_features;
    model_ops_ctx *oc = l->oc;
    if ((!dy || !dx) && l->exact)
        return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: dy and dx stay bf16 in the scratch only in a bf16 layer",
                         l->name);
    if (l->exact) {
        PROFILE(oc, LINEAR);
        l->ops->matmul_f32(oc, dx, K, dy, N, 0, l->weight, K, tokens, K, N, 0);
        l->ops->matmul_f32(oc, l->grad, K, dy, N, 1, l->saved_input, K, N, K, tokens, accumulate);
        return BFP8_OK;
    }
    if (dy && l->recipe == BFP8_RECIPE_FP8_BLOCKWISE) { /* dy quantized from fp32 as it is */
        PROFILE(oc, LINEAR);
        BFP8_TRY(bfp8_linear_backward_f32_dy(l->lin, dy, s->in_bf16, l->grad, accumulate));
    } else {
        PROFILE(oc, ELEMENTWISE);
        if (dy) l->ops->f32_to_bf16(oc, s->out_bf16, dy, tokens * N);
        PROFILE(oc, LINEAR);
        BFP8_TRY(bfp8_linear_backward(l->lin, s->out_bf16, s->in_bf16, l->grad, accumulate));
    }
    PROFILE(oc, ELEMENTWISE);
    if (dx) l->ops->bf16_to_f32(oc, dx, s->in_bf16, tokens * K, 0);
    return BFP8_OK;
}

int model_linear_fuses_swiglu(const model_linear *down) {
    return !down->exact && down->recipe == BFP8_RECIPE_FP8_BLOCKWISE && down->in_features % 128 == 0;
}

bfp8_status model_linear_forward_swiglu(model_linear *down, const model_linear_scratch *s, const uint16_t *gate_up,
                                        int64_t tokens, float *y, const float *residual) {
    const int64_t F = down->in_features, N = down->out_features;
    bfp8_qmatrix x_q, xt_q;
    bfp8_quantize_options o;
    model_ops_ctx *oc = down->oc;
    PROFILE(oc, LINEAR);
    BFP8_TRY(bfp8_linear_input_views(down->lin, tokens, &x_q, &xt_q, &o));
    const bfp8_matrix gu = {(void *)gate_up, BFP8_BF16, tokens, 2 * F, 2 * F};
    BFP8_TRY(bfp8_swiglu_quantize_1x128(down->ctx, &gu, &x_q, &xt_q, &o));
    BFP8_TRY(bfp8_linear_forward_quantized(down->lin, tokens, s->out_bf16, BFP8_BF16));
    PROFILE(oc, ELEMENTWISE);
    if (residual)
        down->ops->add_bf16_f32(oc, y, residual, s->out_bf16, tokens * N);
    else
        down->ops->bf16_to_f32(oc, y, s->out_bf16, tokens * N, 0);
    return BFP8_OK;
}

bfp8_status model_linear_backward_swiglu(model_linear *gate_up_layer, const model_linear_scratch *s,
                                         const uint16_t *dout, const uint16_t *gate_up, int64_t tokens,
                                         int accumulate) {
    const int64_t F = gate_up_layer->out_features / 2;
    bfp8_qmatrix dy_q, dyt_q;
    bfp8_quantize_options o;
    PROFILE(gate_up_layer->oc, LINEAR);
    BFP8_TRY(bfp8_linear_dy_views(gate_up_layer->lin, &dy_q, &dyt_q, &o));
    const bfp8_matrix d = {(void *)dout, BFP8_BF16, tokens, F, F};
    const bfp8_matrix gu = {(void *)gate_up, BFP8_BF16, tokens, 2 * F, 2 * F};
    BFP8_TRY(bfp8_swiglu_backward_quantize_1x128(gate_up_layer->ctx, &d, &gu, &dy_q, &dyt_q,
                                                 &o));
    return bfp8_linear_backward_quantized(gate_up_layer->lin, s->in_bf16, BFP8_BF16, gate_up_layer->grad, accumulate);
}
