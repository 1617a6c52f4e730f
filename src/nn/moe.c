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
 *
 * The permuted activations are bf16. In fp8-blockwise, gate|up and dh are
 * bf16 too, and SwiGLU and its backward are fused with the quantizers after
 * them (bfp8_swiglu_quantize_1x128, bfp8_swiglu_backward_quantize_1x128):
 * h and dgu exist only as their fp8 layouts. The other recipes keep gate|up
 * and dh in fp32 (their bf16 h and dgu feed bf16 GEMMs).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct qbuffer {
    uint8_t *data;
    float *scales;
} qbuffer;

/* The experts of one kind: the E routed ones (groups = E) or the shared one (groups = 1). */
typedef struct ffn {
    int groups;
    int64_t width;    /* F */
    int64_t max_rows; /* permuted rows the buffers hold */
    int64_t rows;     /* permuted rows of the last forward */
    int64_t *offsets; /* host: groups + 1 */
    /* fp8: W13 (G 2F x H), the W13_g^T stacked (G H x 2F), W2 (G H x F), the W2_g^T stacked (G F x H) */
    qbuffer w13_q, w13t_q, w2_q, w2t_q;
    uint16_t *w13_bf16, *w2_bf16;       /* bf16 recipe */
    uint16_t *xp, *dyp, *h, *dgu;       /* permuted activations, bf16 (h, dgu: not in fp8-blockwise) */
    void *gu, *dh;                      /* bf16 in fp8-blockwise, else f32 */
    float *yp;                          /* holds dxp in backward */
    qbuffer xp_q, xpt_q, h_q, ht_q, dyp_q, dypt_q, dgu_q, dgut_q;
    size_t *scratch_offsets;            /* where the transient buffers sit in the call scratch (transients()) */
} ffn;

struct bfp8_moe {
    bfp8_context *ctx;
    bfp8_moe_config cfg;
    int weights_set;
    int64_t tokens; /* T of the last forward; 0 before one */
    ffn routed, shared;
    uint16_t *router_bf16, *x_bf16, *d_logits_bf16;
    float *logits, *scores, *topk_weight, *d_topk_weight, *bias, *score_sum, *score_grad;
    int32_t *topk_expert, *slot_row, *row_slot, *identity; /* identity: the shared expert's both tables */
    int64_t *plan;      /* backend: offsets (E + 1) then routed (E) */
    int64_t *plan_host; /* the same on the host */
    int64_t *load;      /* host: tokens per expert since the last bfp8_moe_update_bias */
    float *bias_host, *score_sum_host, *score_grad_host;
    float aux_loss;
    int64_t dropped; /* (token, expert) pairs the capacity dropped in the last forward */
};

static int is_fp8(const bfp8_moe *m) { return m->cfg.recipe != BFP8_RECIPE_BF16; }
static int has_fp8_wgrad(const bfp8_moe *m) { return m->cfg.recipe == BFP8_RECIPE_FP8_BLOCKWISE; }
/* fp8-blockwise: SwiGLU and its backward fused with the quantizers around them */
static int fused_swiglu(const bfp8_moe *m) { return has_fp8_wgrad(m); }
static bfp8_dtype gu_dtype(const bfp8_moe *m) { return fused_swiglu(m) ? BFP8_BF16 : BFP8_F32; }

static bfp8_quantize_options options_for(const bfp8_moe *m, int flag) {
    const bfp8_quantize_options o = {m->cfg.pow2_scales, m->cfg.nonfinite_flags ? m->cfg.nonfinite_flags + flag : NULL};
    return o;
}

/* ------------------------------------------------------------------------ */
/* Buffers and views                                                         */

static bfp8_status alloc(bfp8_context *ctx, void *ptr, size_t bytes) {
    return bfp8_malloc(ctx, (void **)ptr, bytes ? bytes : 1);
}

static bfp8_status alloc_q(bfp8_context *ctx, qbuffer *b, int64_t rows, int64_t cols, bfp8_granularity gran) {
    bfp8_qmatrix layout;
    size_t data_bytes, scale_bytes;
    BFP8_TRY(bfp8_qmatrix_layout(&layout, rows, cols, gran, &data_bytes, &scale_bytes));
    BFP8_TRY(alloc(ctx, &b->data, data_bytes));
    return alloc(ctx, &b->scales, scale_bytes);
}

static void free_q(bfp8_context *ctx, qbuffer *b) {
    bfp8_free(ctx, b->data);
    bfp8_free(ctx, b->scales);
}

/* Canonical rows x cols view of b; with 128x128 blocks, group g of a stack
 * of such matrices (rows a multiple of 128). */
static bfp8_qmatrix qview(const qbuffer *b, int64_t rows, int64_t cols, bfp8_granularity gran, int g) {
    bfp8_qmatrix q;
    (void)bfp8_qmatrix_layout(&q, rows, cols, gran, NULL, NULL);
    q.data = b->data + (int64_t)g * rows * q.ld;
    q.scales = b->scales + (int64_t)g * (rows / 128) * q.scale_ld;
    return q;
}

/* Rows [r0, r0 + rows) of a dense matrix with `cols` columns at base. */
static bfp8_matrix dense(void *base, bfp8_dtype dtype, int64_t r0, int64_t rows, int64_t cols) {
    const bfp8_matrix m = {(char *)base + (size_t)(r0 * cols) * bfp8_dtype_size(dtype), dtype, rows, cols, cols};
    return m;
}

/* ------------------------------------------------------------------------ */
/* Transient buffers                                                         */

/* One buffer an ffn needs only within one call: a pointer field of the
 * ffn, its size, and whether a forward or a backward uses it. */
typedef struct transient {
    void **field;
    size_t bytes;
    int backward;
} transient;

enum { MAX_TRANSIENTS = 20 }; /* (transients() lists at most 15) */

static void add_transient(transient *t, int *n, void *field, size_t bytes, int backward) {
    t[*n] = (transient){(void **)field, (bytes + 255) / 256 * 256, backward};
    ++*n;
}

static void add_transient_q(transient *t, int *n, qbuffer *b, int64_t rows, int64_t cols, int backward) {
    bfp8_qmatrix layout;
    size_t data_bytes = 0, scale_bytes = 0;
    (void)bfp8_qmatrix_layout(&layout, rows, cols, BFP8_GRAN_1X128, &data_bytes, &scale_bytes);
    add_transient(t, n, &b->data, data_bytes, backward);
    add_transient(t, n, &b->scales, scale_bytes, backward);
}

/* The buffers of f that no later call reads: a forward's fp8 inputs of its
 * GEMMs (and, in fp8-blockwise, the bf16 xp they come from), a backward's
 * dyp, dh, dgu and their fp8 layouts. They live in the context's call
 * scratch, which the layers of a context share; what a backward reads of
 * its forward (xp^T, h^T or the bf16 xp, h; gate|up, yp) has buffers of
 * its own. */
static int transients(const bfp8_moe *m, ffn *f, transient *t) {
    const int64_t H = m->cfg.hidden, F = f->width, P = f->max_rows;
    const size_t gu = bfp8_dtype_size(gu_dtype(m));
    int n = 0;
    if (fused_swiglu(m)) add_transient(t, &n, &f->xp, (size_t)(P * H) * 2, 0);
    if (is_fp8(m)) {
        add_transient_q(t, &n, &f->xp_q, P, H, 0);
        add_transient_q(t, &n, &f->h_q, P, F, 0);
        add_transient_q(t, &n, &f->dyp_q, P, H, 1);
        add_transient_q(t, &n, &f->dgu_q, P, 2 * F, 1);
    }
    if (has_fp8_wgrad(m)) {
        add_transient_q(t, &n, &f->dypt_q, H, P, 1);
        add_transient_q(t, &n, &f->dgut_q, 2 * F, P, 1);
    }
    add_transient(t, &n, &f->dyp, (size_t)(P * H) * 2, 1);
    add_transient(t, &n, &f->dh, (size_t)(P * F) * gu, 1);
    if (!fused_swiglu(m)) add_transient(t, &n, &f->dgu, (size_t)(P * 2 * F) * 2, 1);
    return n;
}

/* f's transients laid out in the call scratch (a forward's and a
 * backward's from its start each), the scratch grown to hold them. */
static bfp8_status plan_transients(bfp8_moe *m, ffn *f) {
    transient t[MAX_TRANSIENTS];
    const int n = transients(m, f, t);
    f->scratch_offsets = calloc((size_t)n, sizeof *f->scratch_offsets);
    if (!f->scratch_offsets) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_moe_create: out of host memory");
    size_t end[2] = {0, 0};
    for (int i = 0; i < n; ++i) {
        f->scratch_offsets[i] = end[t[i].backward];
        end[t[i].backward] += t[i].bytes;
    }
    return bfp8_context_reserve_call_scratch(m->ctx, end[0] > end[1] ? end[0] : end[1]);
}

/* Points f's transient fields into the call scratch (NULL: away from it),
 * at the start of a call: another layer may have moved the scratch. */
static void bind_transients(const bfp8_moe *m, ffn *f, int away) {
    transient t[MAX_TRANSIENTS];
    const int n = transients(m, f, t);
    for (int i = 0; i < n; ++i)
        *t[i].field = away || !f->scratch_offsets ? NULL : (char *)m->ctx->call_scratch + f->scratch_offsets[i];
}

static void ffn_free(bfp8_moe *m, ffn *f) {
    bfp8_context *ctx = m->ctx;
    bind_transients(m, f, 1);
    qbuffer *q[] = {&f->w13_q, &f->w13t_q, &f->w2_q, &f->w2t_q, &f->xp_q, &f->xpt_q, &f->h_q, &f->ht_q,
                    &f->dyp_q, &f->dypt_q, &f->dgu_q, &f->dgut_q};
    for (size_t i = 0; i < sizeof q / sizeof q[0]; ++i) free_q(ctx, q[i]);
    void *p[] = {f->w13_bf16, f->w2_bf16, f->xp, f->h, f->dyp, f->dgu, f->gu, f->yp, f->dh};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; ++i) bfp8_free(ctx, p[i]);
    free(f->offsets);
    free(f->scratch_offsets);
}

static bfp8_status ffn_alloc(bfp8_moe *m, ffn *f, int groups, int64_t width, int64_t max_rows) {
    bfp8_context *ctx = m->ctx;
    const int64_t H = m->cfg.hidden, F = width, G = groups, P = max_rows;
    const size_t gu = bfp8_dtype_size(gu_dtype(m));
    f->groups = groups, f->width = width, f->max_rows = max_rows;
    f->offsets = calloc((size_t)G + 1, sizeof(int64_t));
    if (!f->offsets) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_moe_create: out of host memory");
    if (is_fp8(m)) {
        BFP8_TRY(alloc_q(ctx, &f->w13_q, G * 2 * F, H, BFP8_GRAN_128X128));
        BFP8_TRY(alloc_q(ctx, &f->w13t_q, G * H, 2 * F, BFP8_GRAN_128X128));
        BFP8_TRY(alloc_q(ctx, &f->w2_q, G * H, F, BFP8_GRAN_128X128));
        BFP8_TRY(alloc_q(ctx, &f->w2t_q, G * F, H, BFP8_GRAN_128X128));
    } else {
        BFP8_TRY(alloc(ctx, &f->w13_bf16, (size_t)(G * 2 * F * H) * 2));
        BFP8_TRY(alloc(ctx, &f->w2_bf16, (size_t)(G * H * F) * 2));
    }
    if (has_fp8_wgrad(m)) {
        BFP8_TRY(alloc_q(ctx, &f->xpt_q, H, P, BFP8_GRAN_1X128));
        BFP8_TRY(alloc_q(ctx, &f->ht_q, F, P, BFP8_GRAN_1X128));
    }
    if (!fused_swiglu(m)) { /* the bf16 wgrad's inputs */
        BFP8_TRY(alloc(ctx, &f->xp, (size_t)(P * H) * 2));
        BFP8_TRY(alloc(ctx, &f->h, (size_t)(P * F) * 2));
    }
    BFP8_TRY(alloc(ctx, &f->gu, (size_t)(P * 2 * F) * gu));
    BFP8_TRY(alloc(ctx, &f->yp, (size_t)(P * H) * 4));
    return plan_transients(m, f);
}

/* ------------------------------------------------------------------------ */
/* Create, destroy, weights                                                  */

void bfp8_moe_destroy(bfp8_moe *m) {
    if (!m) return;
    ffn_free(m, &m->routed);
    ffn_free(m, &m->shared);
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
    BFP8_TRY(ffn_alloc(m, &m->routed, c->num_experts, c->expert_hidden, routed_rows));
    if (c->shared_hidden > 0) BFP8_TRY(ffn_alloc(m, &m->shared, 1, c->shared_hidden, shared_rows));
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

static bfp8_status ffn_set_weights(bfp8_moe *m, ffn *f, const float *w13, const float *w2) {
    const int64_t H = m->cfg.hidden, F = f->width, G = f->groups;
    if (!is_fp8(m)) {
        const bfp8_matrix s13 = dense((void *)w13, BFP8_F32, 0, G * 2 * F, H);
        const bfp8_matrix s2 = dense((void *)w2, BFP8_F32, 0, G * H, F);
        bfp8_matrix d13 = dense(f->w13_bf16, BFP8_BF16, 0, G * 2 * F, H);
        bfp8_matrix d2 = dense(f->w2_bf16, BFP8_BF16, 0, G * H, F);
        BFP8_TRY(bfp8_convert(m->ctx, &s13, &d13));
        return bfp8_convert(m->ctx, &s2, &d2);
    }
    const bfp8_quantize_options o = options_for(m, BFP8_LINEAR_FLAG_W);
    for (int g = 0; g < f->groups; ++g) { /* each expert's W and W^T, so the W^T are stacked by expert */
        const bfp8_matrix s13 = dense((void *)w13, BFP8_F32, g * 2 * F, 2 * F, H);
        bfp8_qmatrix q13 = qview(&f->w13_q, 2 * F, H, BFP8_GRAN_128X128, g);
        bfp8_qmatrix q13t = qview(&f->w13t_q, H, 2 * F, BFP8_GRAN_128X128, g);
        BFP8_TRY(bfp8_quantize_128x128(m->ctx, &s13, &q13, &q13t, &o));
        const bfp8_matrix s2 = dense((void *)w2, BFP8_F32, g * H, H, F);
        bfp8_qmatrix q2 = qview(&f->w2_q, H, F, BFP8_GRAN_128X128, g);
        bfp8_qmatrix q2t = qview(&f->w2t_q, F, H, BFP8_GRAN_128X128, g);
        BFP8_TRY(bfp8_quantize_128x128(m->ctx, &s2, &q2, &q2t, &o));
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
    BFP8_TRY(ffn_set_weights(m, &m->routed, w->experts_w13, w->experts_w2));
    if (m->cfg.shared_hidden > 0) BFP8_TRY(ffn_set_weights(m, &m->shared, w->shared_w13, w->shared_w2));
    m->weights_set = 1;
    return BFP8_OK;
}

/* ------------------------------------------------------------------------ */
/* Forward and backward of one kind of expert                                */

/* One bf16 GEMM per group with rows: D_g = op(A_g) op(B_g)^T (+ C_g), for
 * the bf16 recipe's products and the bf16 wgrad. A_g and, when b_grouped is
 * 0, B_g are the group's rows of the permuted matrices a, b; when b_grouped
 * is 1, B_g is rows [g b_rows, (g + 1) b_rows) of b. D_g is the group's
 * rows of d (d_grouped 0) or rows [g d_rows, ...) of d (d_grouped 1: a
 * weight gradient, zeroed for an empty group unless accumulating). */
typedef struct group_gemm {
    void *a, *b;
    float *d;
    int64_t a_cols, b_rows, b_cols, d_rows, d_cols;
    int a_transposed, b_transposed, b_grouped, d_grouped, accumulate;
} group_gemm;

static bfp8_status run_group_gemms(bfp8_moe *m, const ffn *f, const group_gemm *p) {
    for (int g = 0; g < f->groups; ++g) {
        const int64_t r0 = f->offsets[g], n = f->offsets[g + 1] - r0;
        bfp8_matrix d = p->d_grouped ? dense(p->d, BFP8_F32, g * p->d_rows, p->d_rows, p->d_cols)
                                     : dense(p->d, BFP8_F32, r0, n, p->d_cols);
        if (n == 0) {
            if (p->d_grouped && !p->accumulate)
                BFP8_TRY(bfp8_memset_zero(m->ctx, d.data, (size_t)(p->d_rows * p->d_cols) * 4));
            continue;
        }
        const bfp8_matrix a = dense(p->a, BFP8_BF16, r0, n, p->a_cols);
        const bfp8_matrix b = p->b_grouped ? dense(p->b, BFP8_BF16, g * p->b_rows, p->b_rows, p->b_cols)
                                           : dense(p->b, BFP8_BF16, r0, n, p->b_cols);
        BFP8_TRY(bfp8_gemm_bf16(m->ctx, &a, p->a_transposed, &b, p->b_transposed, p->accumulate ? &d : NULL, &d));
    }
    return BFP8_OK;
}

static bfp8_status ffn_forward(bfp8_moe *m, ffn *f, const bfp8_matrix *x, const int32_t *row_slot, int top_k) {
    bfp8_context *ctx = m->ctx;
    const int64_t H = m->cfg.hidden, F = f->width, G = f->groups, P = f->rows;
    const bfp8_quantize_options o = options_for(m, BFP8_LINEAR_FLAG_X);
    bind_transients(m, f, 0);
    bfp8_matrix xp = dense(f->xp, BFP8_BF16, 0, P, H), gu = dense(f->gu, gu_dtype(m), 0, P, 2 * F);
    bfp8_matrix h = dense(f->h, BFP8_BF16, 0, P, F), yp = dense(f->yp, BFP8_F32, 0, P, H);
    bfp8_qmatrix xp_q = qview(&f->xp_q, P, H, BFP8_GRAN_1X128, 0), xpt_q = qview(&f->xpt_q, H, P, BFP8_GRAN_1X128, 0);
    bfp8_qmatrix h_q = qview(&f->h_q, P, F, BFP8_GRAN_1X128, 0), ht_q = qview(&f->ht_q, F, P, BFP8_GRAN_1X128, 0);
    BFP8_TRY(bfp8_moe_permute(ctx, x, row_slot, top_k, &xp, is_fp8(m) ? &xp_q : NULL, &o));
    if (has_fp8_wgrad(m)) BFP8_TRY(bfp8_quantize_1x128(ctx, &xp, NULL, &xpt_q, &o));
    if (is_fp8(m)) {
        const bfp8_qmatrix w13 = qview(&f->w13_q, G * 2 * F, H, BFP8_GRAN_128X128, 0);
        const bfp8_qmatrix w2 = qview(&f->w2_q, G * H, F, BFP8_GRAN_128X128, 0);
        BFP8_TRY(bfp8_gemm_1d2d_grouped(ctx, &xp_q, &w13, f->offsets, f->groups, &gu));
        if (fused_swiglu(m)) {
            BFP8_TRY(bfp8_swiglu_quantize_1x128(ctx, &gu, &h_q, &ht_q, &o));
        } else {
            BFP8_TRY(bfp8_moe_swiglu(ctx, &gu, &h));
            BFP8_TRY(bfp8_quantize_1x128(ctx, &h, &h_q, NULL, &o));
        }
        return bfp8_gemm_1d2d_grouped(ctx, &h_q, &w2, f->offsets, f->groups, &yp);
    }
    const group_gemm up = {f->xp, f->w13_bf16, f->gu, H, 2 * F, H, 0, 2 * F, 0, 0, 1, 0, 0};
    BFP8_TRY(run_group_gemms(m, f, &up));
    BFP8_TRY(bfp8_moe_swiglu(ctx, &gu, &h));
    const group_gemm down = {f->h, f->w2_bf16, f->yp, F, H, F, 0, H, 0, 0, 1, 0, 0};
    return run_group_gemms(m, f, &down);
}

/* Backward of ffn_forward and of the combine after it (weights, or NULL for
 * weight 1): d_topk_weight (may be NULL), the weight gradients, and dx
 * (may be NULL) stored or added (dx_accumulate). */
static bfp8_status ffn_backward(bfp8_moe *m, ffn *f, const bfp8_matrix *dy, const int32_t *row_slot,
                                const int32_t *slot_row, const float *weights, int top_k, float *d_topk_weight,
                                bfp8_matrix *dx, int dx_accumulate, float *dw13, float *dw2, int accumulate) {
    bfp8_context *ctx = m->ctx;
    const int64_t H = m->cfg.hidden, F = f->width, G = f->groups, P = f->rows;
    const bfp8_quantize_options o = options_for(m, BFP8_LINEAR_FLAG_DY);
    bind_transients(m, f, 0);
    bfp8_matrix dyp = dense(f->dyp, BFP8_BF16, 0, P, H), yp = dense(f->yp, BFP8_F32, 0, P, H);
    bfp8_matrix gu = dense(f->gu, gu_dtype(m), 0, P, 2 * F), dh = dense(f->dh, gu_dtype(m), 0, P, F);
    bfp8_matrix dgu = dense(f->dgu, BFP8_BF16, 0, P, 2 * F);
    bfp8_matrix dw13m = dense(dw13, BFP8_F32, 0, G * 2 * F, H), dw2m = dense(dw2, BFP8_F32, 0, G * H, F);
    bfp8_qmatrix dyp_q = qview(&f->dyp_q, P, H, BFP8_GRAN_1X128, 0);
    bfp8_qmatrix dypt_q = qview(&f->dypt_q, H, P, BFP8_GRAN_1X128, 0);
    bfp8_qmatrix dgu_q = qview(&f->dgu_q, P, 2 * F, BFP8_GRAN_1X128, 0);
    bfp8_qmatrix dgut_q = qview(&f->dgut_q, 2 * F, P, BFP8_GRAN_1X128, 0);
    /* dyp in bf16; fp8-blockwise quantizes both layouts from it, bf16wgrad its rows from the fp32 products */
    const int dyp_rows_fused = is_fp8(m) && !has_fp8_wgrad(m);
    BFP8_TRY(bfp8_moe_combine_backward(ctx, dy, d_topk_weight ? &yp : NULL, row_slot, slot_row, weights, top_k, &dyp,
                                       dyp_rows_fused ? &dyp_q : NULL, &o, d_topk_weight));
    /* wgrad of the down projection, then its dgrad */
    if (has_fp8_wgrad(m)) {
        const bfp8_qmatrix ht_q = qview(&f->ht_q, F, P, BFP8_GRAN_1X128, 0);
        BFP8_TRY(bfp8_quantize_1x128(ctx, &dyp, &dyp_q, &dypt_q, &o));
        BFP8_TRY(bfp8_gemm_1d1d_grouped(ctx, &dypt_q, &ht_q, f->offsets, f->groups, accumulate ? &dw2m : NULL, &dw2m));
    } else {
        const group_gemm wg = {f->dyp, f->h, dw2, H, 0, F, H, F, 1, 1, 0, 1, accumulate};
        BFP8_TRY(run_group_gemms(m, f, &wg));
    }
    if (is_fp8(m)) {
        const bfp8_qmatrix w2t = qview(&f->w2t_q, G * F, H, BFP8_GRAN_128X128, 0);
        BFP8_TRY(bfp8_gemm_1d2d_grouped(ctx, &dyp_q, &w2t, f->offsets, f->groups, &dh));
    } else {
        const group_gemm dg = {f->dyp, f->w2_bf16, f->dh, H, H, F, 0, F, 0, 1, 1, 0, 0};
        BFP8_TRY(run_group_gemms(m, f, &dg));
    }
    if (fused_swiglu(m)) {
        BFP8_TRY(bfp8_swiglu_backward_quantize_1x128(ctx, &dh, &gu, &dgu_q, &dgut_q, &o));
    } else {
        BFP8_TRY(bfp8_moe_swiglu_backward(ctx, &gu, &dh, &dgu));
        if (is_fp8(m)) BFP8_TRY(bfp8_quantize_1x128(ctx, &dgu, &dgu_q, NULL, &o));
    }
    /* wgrad of gate|up, then its dgrad into the permuted dx (in yp's buffer) */
    if (has_fp8_wgrad(m)) {
        const bfp8_qmatrix xpt_q = qview(&f->xpt_q, H, P, BFP8_GRAN_1X128, 0);
        BFP8_TRY(bfp8_gemm_1d1d_grouped(ctx, &dgut_q, &xpt_q, f->offsets, f->groups, accumulate ? &dw13m : NULL,
                                        &dw13m));
    } else {
        const group_gemm wg = {f->dgu, f->xp, dw13, 2 * F, 0, H, 2 * F, H, 1, 1, 0, 1, accumulate};
        BFP8_TRY(run_group_gemms(m, f, &wg));
    }
    if (!dx) return BFP8_OK;
    bfp8_matrix dxp = dense(f->yp, BFP8_F32, 0, P, H);
    if (is_fp8(m)) {
        const bfp8_qmatrix w13t = qview(&f->w13t_q, G * H, 2 * F, BFP8_GRAN_128X128, 0);
        BFP8_TRY(bfp8_gemm_1d2d_grouped(ctx, &dgu_q, &w13t, f->offsets, f->groups, &dxp));
    } else {
        const group_gemm dg = {f->dgu, f->w13_bf16, f->yp, 2 * F, 2 * F, H, 0, H, 0, 1, 1, 0, 0};
        BFP8_TRY(run_group_gemms(m, f, &dg));
    }
    return bfp8_moe_combine(ctx, &dxp, slot_row, NULL, top_k, dx_accumulate, dx);
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
    BFP8_TRY(ffn_forward(m, &m->routed, &xb, m->row_slot, m->cfg.top_k));
    const int shared = m->cfg.shared_hidden > 0;
    if (shared) {
        ffn *s = &m->shared;
        s->offsets[1] = s->rows = bfp8_round_up(T, 128);
        BFP8_TRY(ffn_forward(m, s, &xb, m->identity, 1));
        const bfp8_matrix ysp = dense(s->yp, BFP8_F32, 0, s->rows, H);
        BFP8_TRY(bfp8_moe_combine(m->ctx, &ysp, m->identity, NULL, 1, 0, &ym));
    }
    const bfp8_matrix yp = dense(m->routed.yp, BFP8_F32, 0, m->routed.rows, H);
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
    BFP8_TRY(ffn_backward(m, &m->routed, &dym, m->row_slot, m->slot_row, m->topk_weight, k, m->d_topk_weight,
                          dx ? &dxm : NULL, 0, grads->experts_w13, grads->experts_w2, accumulate));
    if (c->shared_hidden > 0)
        BFP8_TRY(ffn_backward(m, &m->shared, &dym, m->identity, m->identity, NULL, 1, NULL, dx ? &dxm : NULL, 1,
                              grads->shared_w13, grads->shared_w2, accumulate));
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
