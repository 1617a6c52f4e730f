/*
 * moe.c - bfp8_moe: a mixture-of-experts SwiGLU layer written over the
 * public ops only (as linear.c), so one code path serves both backends.
 *
 * Forward: x to bf16 -> router logits (bf16 GEMM, fp32 out) ->
 * bfp8_moe_route (scores, top-k, weights) -> bfp8_moe_dispatch (offsets,
 * slot <-> row tables) -> the offsets to the host -> per kind of expert (the
 * E routed ones, the shared one as a single group that every token enters
 * with weight 1): permute the bf16 x (+ 1x128 rows of the fp8 recipes fused)
 * -> gate|up GEMM -> SwiGLU -> down GEMM -> combine into y. Backward runs the
 * same in reverse; the router's gradient comes from the combine's weight
 * gradient.
 * The experts of each kind, their buffers, forward and backward: moe_ffn.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/moe_ffn.h"

/* ------------------------------------------------------------------------ */
/* Create, destroy, weights                                                  */

void bfp8_moe_destroy(bfp8_moe *m) {
    if (!m) return;
    bfp8_moe_ffn_free(m, &m->routed);
    bfp8_moe_ffn_free(m, &m->shared);
    void *p[] = {m->router_bf16, m->x_bf16, m->d_logits_bf16, m->logits, m->scores, m->topk_weight,
                 m->d_topk_weight, m->bias, m->score_sum, m->score_grad, m->topk_expert, m->slot_row,
                 m->row_slot, m->identity, m->plan};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; ++i) bfp8_free(m->ctx, p[i]);
    free(m->plan_host), free(m->load), free(m->bias_host), free(m->score_sum_host), free(m->score_grad_host);
    free(m);
}

static bfp8_status check_config(const bfp8_context *ctx, const bfp8_moe_config *c) {
    static const char fn[] = "bfp8_moe_create";
    if (c->hidden < 128 || c->hidden % 128 || c->expert_hidden < 128 || c->expert_hidden % 128 ||
        c->shared_hidden < 0 || c->shared_hidden % 128)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "%s: hidden %lld, expert_hidden %lld, shared_hidden %lld (multiples of 128; shared may be 0)",
                         fn, (long long)c->hidden, (long long)c->expert_hidden, (long long)c->shared_hidden);
    if (c->num_experts < 1 || c->num_experts > 1024 || c->top_k < 1 || c->top_k > 16 || c->top_k > c->num_experts)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: num_experts %d, top_k %d (1 <= top_k <= min(E, 16), E <= 1024)",
                         fn, c->num_experts, c->top_k);
    if (c->max_tokens < 1 || c->max_tokens > (((int64_t)1 << 30) - 128 * (int64_t)c->num_experts) / c->top_k ||
        c->hidden > ((int64_t)1 << 20) || c->expert_hidden > ((int64_t)1 << 20) ||
        c->shared_hidden > ((int64_t)1 << 20))
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: max_tokens %lld or a width is out of range", fn,
                         (long long)c->max_tokens);
    if (c->score_fn != BFP8_MOE_SCORE_SOFTMAX && c->score_fn != BFP8_MOE_SCORE_SIGMOID)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: unknown score_fn %d", fn, (int)c->score_fn);
    if ((c->normalize_weights != 0 && c->normalize_weights != 1) || !(c->route_scale > 0.0f) ||
        c->route_scale > 3.0e38f || !(c->capacity_factor >= 0.0f) || c->capacity_factor > 1.0e6f)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "%s: normalize_weights 0 or 1, route_scale finite > 0, capacity_factor in [0, 1e6]", fn);
    if (c->balance < BFP8_MOE_BALANCE_NONE || c->balance > BFP8_MOE_BALANCE_AUX_LOSS ||
        !(c->bias_update_rate >= 0.0f) || c->bias_update_rate > 1.0e6f || !(c->aux_loss_coef >= 0.0f) ||
        c->aux_loss_coef > 1.0e6f)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: balance %d, bias_update_rate and aux_loss_coef finite >= 0", fn,
                         (int)c->balance);
    if (!bfp8_recipe_name(c->recipe)) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: unknown recipe %d", fn, c->recipe);
    if (c->pow2_scales != 0 && c->pow2_scales != 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: pow2_scales must be 0 or 1", fn);
    if (c->nonfinite_flags) {
        if ((uintptr_t)c->nonfinite_flags % 4 != 0)
            return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s: nonfinite_flags not 4-byte aligned", fn);
        BFP8_TRY(bfp8_check_pointer(ctx, c->nonfinite_flags, "bfp8_moe_create: nonfinite_flags"));
    }
    return BFP8_OK;
}

static bfp8_status moe_alloc(bfp8_moe *m) {
    bfp8_context *ctx = m->ctx;
    const bfp8_moe_config *c = &m->cfg;
    const int64_t T = c->max_tokens, H = c->hidden, E = c->num_experts, k = c->top_k;
    const int64_t shared_rows = bfp8_round_up(T, 128), routed_rows = bfp8_moe_max_rows(T, c->top_k, c->num_experts);
    BFP8_TRY(bfp8_moe_ffn_alloc(m, &m->routed, c->num_experts, c->expert_hidden, routed_rows));
    if (c->shared_hidden > 0) BFP8_TRY(bfp8_moe_ffn_alloc(m, &m->shared, 1, c->shared_hidden, shared_rows));
    BFP8_TRY(alloc(ctx, &m->router_bf16, (size_t)(E * H) * 2));
    BFP8_TRY(alloc(ctx, &m->x_bf16, (size_t)(T * H) * 2));
    BFP8_TRY(alloc(ctx, &m->d_logits_bf16, (size_t)(T * E) * 2));
    BFP8_TRY(alloc(ctx, &m->logits, (size_t)(T * E) * 4));
    BFP8_TRY(alloc(ctx, &m->scores, (size_t)(T * E) * 4));
    BFP8_TRY(alloc(ctx, &m->topk_weight, (size_t)(T * k) * 4));
    BFP8_TRY(alloc(ctx, &m->d_topk_weight, (size_t)(T * k) * 4));
    BFP8_TRY(alloc(ctx, &m->bias, (size_t)E * 4));
    BFP8_TRY(alloc(ctx, &m->score_sum, (size_t)E * 4));
    BFP8_TRY(alloc(ctx, &m->score_grad, (size_t)E * 4));
    BFP8_TRY(alloc(ctx, &m->topk_expert, (size_t)(T * k) * 4));
    BFP8_TRY(alloc(ctx, &m->slot_row, (size_t)(T * k) * 4));
    BFP8_TRY(alloc(ctx, &m->row_slot, (size_t)routed_rows * 4));
    BFP8_TRY(alloc(ctx, &m->identity, (size_t)shared_rows * 4));
    BFP8_TRY(alloc(ctx, &m->plan, (size_t)(2 * E + 1) * 8));
    m->plan_host = calloc((size_t)(2 * E + 1), 8);
    m->load = calloc((size_t)E, 8);
    m->bias_host = calloc((size_t)E, 4);
    m->score_sum_host = calloc((size_t)E, 4);
    m->score_grad_host = calloc((size_t)E, 4);
    int32_t *identity = malloc((size_t)shared_rows * 4);
    if (!m->plan_host || !m->load || !m->bias_host || !m->score_sum_host || !m->score_grad_host || !identity) {
        free(identity);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_moe_create: out of host memory");
    }
    /* row r <-> slot r of a top-1 routing: rows past the tokens read as padding */
    for (int64_t r = 0; r < shared_rows; ++r) identity[r] = (int32_t)r;
    bfp8_status st = bfp8_copy_to_backend(ctx, m->identity, identity, (size_t)shared_rows * 4);
    free(identity);
    BFP8_TRY(st);
    return bfp8_memset_zero(ctx, m->bias, (size_t)E * 4);
}

bfp8_status bfp8_moe_create(bfp8_moe **out, bfp8_context *ctx, const bfp8_moe_config *cfg) {
    if (!out || !ctx || !cfg) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_moe_create: moe, ctx or cfg is NULL");
    BFP8_TRY(check_config(ctx, cfg));
    bfp8_moe *m = calloc(1, sizeof *m);
    if (!m) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_moe_create: out of host memory");
    m->ctx = ctx;
    m->cfg = *cfg;
    const bfp8_status st = moe_alloc(m);
    if (st != BFP8_OK) {
        bfp8_moe_destroy(m);
        return st;
    }
    *out = m;
    return BFP8_OK;
}

static bfp8_status check_weight(const bfp8_moe *m, const float *p, const char *name, const char *fn) {
    char what[96];
    snprintf(what, sizeof what, "%s: %s", fn, name);
    if (!p) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s is NULL", what);
    if ((uintptr_t)p % 4 != 0) return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s is not 4-byte aligned", what);
    return bfp8_check_pointer(m->ctx, p, what);
}

static bfp8_status check_weights(const bfp8_moe *m, const bfp8_moe_weights *w, const char *fn) {
    if (!w) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: weights is NULL", fn);
    BFP8_TRY(check_weight(m, w->router, "router", fn));
    BFP8_TRY(check_weight(m, w->experts_w13, "experts_w13", fn));
    BFP8_TRY(check_weight(m, w->experts_w2, "experts_w2", fn));
    if (m->cfg.shared_hidden > 0) {
        BFP8_TRY(check_weight(m, w->shared_w13, "shared_w13", fn));
        BFP8_TRY(check_weight(m, w->shared_w2, "shared_w2", fn));
    }
    return BFP8_OK;
}

bfp8_status bfp8_moe_set_weights(bfp8_moe *m, const bfp8_moe_weights *w) {
    static const char fn[] = "bfp8_moe_set_weights";
    if (!m) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: moe is NULL", fn);
    BFP8_TRY(check_weights(m, w, fn));
    m->weights_set = 0;
    const bfp8_matrix r = dense(w->router, BFP8_F32, 0, m->cfg.num_experts, m->cfg.hidden);
    bfp8_matrix rb = dense(m->router_bf16, BFP8_BF16, 0, m->cfg.num_experts, m->cfg.hidden);
    BFP8_TRY(bfp8_convert(m->ctx, &r, &rb));
    BFP8_TRY(bfp8_moe_ffn_set_weights(m, &m->routed, w->experts_w13, w->experts_w2));
    if (m->cfg.shared_hidden > 0) BFP8_TRY(bfp8_moe_ffn_set_weights(m, &m->shared, w->shared_w13, w->shared_w2));
    m->weights_set = 1;
    return BFP8_OK;
}

/* ------------------------------------------------------------------------ */
/* The layer                                                                 */

static bfp8_status check_activation(const bfp8_moe *m, const float *p, const char *name, const char *fn) {
    return check_weight(m, p, name, fn);
}

/* The router: logits, scores, top-k, the dispatch plan, its offsets on the host. */
static bfp8_status route_tokens(bfp8_moe *m, int64_t T) {
    bfp8_context *ctx = m->ctx;
    const bfp8_moe_config *c = &m->cfg;
    const int E = c->num_experts, k = c->top_k;
    const int aux = c->balance == BFP8_MOE_BALANCE_AUX_LOSS;
    const bfp8_matrix xb = dense(m->x_bf16, BFP8_BF16, 0, T, c->hidden);
    const bfp8_matrix rb = dense(m->router_bf16, BFP8_BF16, 0, E, c->hidden);
    bfp8_matrix logits = dense(m->logits, BFP8_F32, 0, T, E);
    BFP8_TRY(bfp8_gemm_bf16(ctx, &xb, 0, &rb, 0, NULL, &logits));
    BFP8_TRY(bfp8_moe_route(ctx, m->logits, c->balance == BFP8_MOE_BALANCE_BIAS ? m->bias : NULL, T, E, k,
                            c->score_fn, c->normalize_weights, c->route_scale, m->scores, m->topk_expert,
                            m->topk_weight, aux ? m->score_sum : NULL));
    int64_t capacity = 0;
    if (c->capacity_factor > 0.0f) {
        capacity = (int64_t)ceil((double)c->capacity_factor * (double)T * k / E);
        if (capacity < 1) capacity = 1;
    }
    BFP8_TRY(bfp8_moe_dispatch(ctx, m->topk_expert, T, k, E, capacity, m->routed.max_rows, m->slot_row, m->row_slot,
                               m->plan, m->plan + E + 1));
    BFP8_TRY(bfp8_copy_to_host(ctx, m->plan_host, m->plan, (size_t)(2 * E + 1) * 8));
    memcpy(m->routed.offsets, m->plan_host, (size_t)(E + 1) * 8);
    m->routed.rows = m->plan_host[E];
    const int64_t *routed = m->plan_host + E + 1;
    m->dropped = 0;
    for (int e = 0; e < E; ++e) {
        m->load[e] += routed[e];
        if (capacity > 0 && routed[e] > capacity) m->dropped += routed[e] - capacity;
    }
    m->aux_loss = 0.0f;
    if (!aux) return BFP8_OK;
    /* aux = coef E sum_e f_e P_e;  d aux / d score[t, e] = coef E f_e / T */
    BFP8_TRY(bfp8_copy_to_host(ctx, m->score_sum_host, m->score_sum, (size_t)E * 4));
    double loss = 0.0;
    for (int e = 0; e < E; ++e) {
        const double f = (double)routed[e] / ((double)T * k);
        loss += f * m->score_sum_host[e] / (double)T;
        m->score_grad_host[e] = (float)(c->aux_loss_coef * E * f / (double)T);
    }
    m->aux_loss = (float)(c->aux_loss_coef * E * loss);
    return bfp8_copy_to_backend(ctx, m->score_grad, m->score_grad_host, (size_t)E * 4);
}

bfp8_status bfp8_moe_forward(bfp8_moe *m, const float *x, int64_t tokens, float *y) {
    static const char fn[] = "bfp8_moe_forward";
    if (!m) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: moe is NULL", fn);
    if (!m->weights_set) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: no weights: call bfp8_moe_set_weights", fn);
    BFP8_TRY(check_activation(m, x, "x", fn));
    BFP8_TRY(check_activation(m, y, "y", fn));
    if (tokens < 1 || tokens > m->cfg.max_tokens)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: tokens %lld, expected 1..max_tokens (%lld)", fn, (long long)tokens,
                         (long long)m->cfg.max_tokens);
    const int64_t T = tokens, H = m->cfg.hidden;
    m->tokens = 0; /* what a failed forward leaves cannot be differentiated */
    const bfp8_matrix xm = dense((void *)x, BFP8_F32, 0, T, H);
    bfp8_matrix xb = dense(m->x_bf16, BFP8_BF16, 0, T, H), ym = dense(y, BFP8_F32, 0, T, H);
    BFP8_TRY(bfp8_convert(m->ctx, &xm, &xb));
    BFP8_TRY(route_tokens(m, T));
    BFP8_TRY(bfp8_moe_ffn_forward(m, &m->routed, &xb, m->row_slot, m->cfg.top_k));
    const int shared = m->cfg.shared_hidden > 0;
    if (shared) {
        ffn *s = &m->shared;
        s->offsets[1] = s->rows = bfp8_round_up(T, 128);
        BFP8_TRY(bfp8_moe_ffn_forward(m, s, &xb, m->identity, 1));
        const bfp8_matrix ysp = dense(s->yp, BFP8_BF16, 0, s->rows, H);
        BFP8_TRY(bfp8_moe_combine(m->ctx, &ysp, m->identity, NULL, 1, 0, &ym));
    }
    const bfp8_matrix yp = dense(m->routed.yp, BFP8_BF16, 0, m->routed.rows, H);
    BFP8_TRY(bfp8_moe_combine(m->ctx, &yp, m->slot_row, m->topk_weight, m->cfg.top_k, shared, &ym));
    m->tokens = T;
    return BFP8_OK;
}

bfp8_status bfp8_moe_backward(bfp8_moe *m, const float *dy, float *dx, const bfp8_moe_weights *grads,
                              int accumulate) {
    static const char fn[] = "bfp8_moe_backward";
    if (!m) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: moe is NULL", fn);
    if (m->tokens == 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: no forward to differentiate (call bfp8_moe_forward first)", fn);
    if (accumulate != 0 && accumulate != 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: accumulate must be 0 or 1", fn);
    BFP8_TRY(check_activation(m, dy, "dy", fn));
    if (dx) BFP8_TRY(check_activation(m, dx, "dx", fn));
    BFP8_TRY(check_weights(m, grads, fn));
    bfp8_context *ctx = m->ctx;
    const bfp8_moe_config *c = &m->cfg;
    const int64_t T = m->tokens, H = c->hidden;
    const int E = c->num_experts, k = c->top_k;
    const bfp8_matrix dym = dense((void *)dy, BFP8_F32, 0, T, H);
    bfp8_matrix dxm = dense(dx, BFP8_F32, 0, T, H);
    BFP8_TRY(bfp8_moe_ffn_backward(m, &m->routed, &dym, m->row_slot, m->slot_row, m->topk_weight, k,
                                   m->d_topk_weight, dx ? &dxm : NULL, 0, grads->experts_w13, grads->experts_w2,
                                   accumulate));
    if (c->shared_hidden > 0)
        BFP8_TRY(bfp8_moe_ffn_backward(m, &m->shared, &dym, m->identity, m->identity, NULL, 1, NULL,
                                       dx ? &dxm : NULL, 1, grads->shared_w13, grads->shared_w2, accumulate));
    /* the router: d_logits (in the logits' buffer), then its two bf16 GEMMs */
    BFP8_TRY(bfp8_moe_route_backward(ctx, m->scores, m->topk_expert, m->d_topk_weight,
                                     c->balance == BFP8_MOE_BALANCE_AUX_LOSS ? m->score_grad : NULL, T, E, k,
                                     c->score_fn, c->normalize_weights, c->route_scale, m->logits));
    const bfp8_matrix dl = dense(m->logits, BFP8_F32, 0, T, E);
    bfp8_matrix dlb = dense(m->d_logits_bf16, BFP8_BF16, 0, T, E);
    BFP8_TRY(bfp8_convert(ctx, &dl, &dlb));
    const bfp8_matrix xb = dense(m->x_bf16, BFP8_BF16, 0, T, H), rb = dense(m->router_bf16, BFP8_BF16, 0, E, H);
    bfp8_matrix dr = dense(grads->router, BFP8_F32, 0, E, H);
    BFP8_TRY(bfp8_gemm_bf16(ctx, &dlb, 1, &xb, 1, accumulate ? &dr : NULL, &dr));
    if (dx) BFP8_TRY(bfp8_gemm_bf16(ctx, &dlb, 0, &rb, 1, &dxm, &dxm));
    return BFP8_OK;
}

bfp8_status bfp8_moe_aux_loss(const bfp8_moe *m, float *loss) {
    if (!m || !loss) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_moe_aux_loss: moe or loss is NULL");
    *loss = m->aux_loss;
    return BFP8_OK;
}

bfp8_status bfp8_moe_update_bias(bfp8_moe *m, int64_t *load, float *bias) {
    if (!m) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_moe_update_bias: moe is NULL");
    const int E = m->cfg.num_experts;
    if (m->cfg.balance == BFP8_MOE_BALANCE_BIAS) {
        double total = 0.0;
        for (int e = 0; e < E; ++e) total += (double)m->load[e];
        const double mean = total / E;
        for (int e = 0; e < E; ++e) {
            const double gap = mean - (double)m->load[e];
            m->bias_host[e] += gap > 0 ? m->cfg.bias_update_rate : gap < 0 ? -m->cfg.bias_update_rate : 0.0f;
        }
        BFP8_TRY(bfp8_copy_to_backend(m->ctx, m->bias, m->bias_host, (size_t)E * 4));
    }
    if (load) memcpy(load, m->load, (size_t)E * 8);
    if (bias) memcpy(bias, m->bias_host, (size_t)E * 4);
    memset(m->load, 0, (size_t)E * 8);
    return BFP8_OK;
}

bfp8_status bfp8_moe_set_bias(bfp8_moe *m, const float *bias) {
    if (!m || !bias) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_moe_set_bias: moe or bias is NULL");
    const int E = m->cfg.num_experts;
    for (int e = 0; e < E; ++e)
        if (!isfinite(bias[e]))
            return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_moe_set_bias: bias[%d] is not finite", e);
    memcpy(m->bias_host, bias, (size_t)E * 4);
    return bfp8_copy_to_backend(m->ctx, m->bias, m->bias_host, (size_t)E * 4);
}

bfp8_status bfp8_moe_last_routing(const bfp8_moe *m, int64_t *routed, int64_t *dropped) {
    if (!m) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_moe_last_routing: moe is NULL");
    if (m->tokens == 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_moe_last_routing: no forward (call bfp8_moe_forward first)");
    if (routed) memcpy(routed, m->plan_host + m->cfg.num_experts + 1, (size_t)m->cfg.num_experts * 8);
    if (dropped) *dropped = m->dropped;
    return BFP8_OK;
}
