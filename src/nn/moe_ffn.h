/*
 * moe_ffn.h - inside bfp8_moe: the layer's state (moe.c: create, the
 * router, forward and backward of the layer) and one kind of its experts,
 * the E routed ones or the shared one as a single group (moe_ffn.c: their
 * buffers, weights, forward and backward).
 */
#ifndef BFP8_NN_MOE_FFN_H
#define BFP8_NN_MOE_FFN_H

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
    uint16_t *yp;                       /* bf16; holds dxp in backward */
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

static inline int is_fp8(const bfp8_moe *m) { return m->cfg.recipe != BFP8_RECIPE_BF16; }
static inline int has_fp8_wgrad(const bfp8_moe *m) { return m->cfg.recipe == BFP8_RECIPE_FP8_BLOCKWISE; }
/* fp8-blockwise: SwiGLU and its backward fused with the quantizers around them */
static inline int fused_swiglu(const bfp8_moe *m) { return has_fp8_wgrad(m); }
static inline bfp8_dtype gu_dtype(const bfp8_moe *m) { return fused_swiglu(m) ? BFP8_BF16 : BFP8_F32; }

static inline bfp8_quantize_options options_for(const bfp8_moe *m, int flag) {
    const bfp8_quantize_options o = {m->cfg.pow2_scales, m->cfg.nonfinite_flags ? m->cfg.nonfinite_flags + flag : NULL};
    return o;
}

static inline bfp8_status alloc(bfp8_context *ctx, void *ptr, size_t bytes) {
    return bfp8_malloc(ctx, (void **)ptr, bytes ? bytes : 1);
}

/* Canonical rows x cols view of b; with 128x128 blocks, group g of a stack
 * of such matrices (rows a multiple of 128). */
static inline bfp8_qmatrix qview(const qbuffer *b, int64_t rows, int64_t cols, bfp8_granularity gran, int g) {
    bfp8_qmatrix q;
    (void)bfp8_qmatrix_layout(&q, rows, cols, gran, NULL, NULL);
    q.data = b->data + (int64_t)g * rows * q.ld;
    q.scales = b->scales + (int64_t)g * (rows / 128) * q.scale_ld;
    return q;
}

/* Rows [r0, r0 + rows) of a dense matrix with `cols` columns at base. */
static inline bfp8_matrix dense(void *base, bfp8_dtype dtype, int64_t r0, int64_t rows, int64_t cols) {
    const bfp8_matrix m = {(char *)base + (size_t)(r0 * cols) * bfp8_dtype_size(dtype), dtype, rows, cols, cols};
    return m;
}

/* f's buffers for `groups` experts of `width` over max_rows permuted rows
 * (moe_ffn.c); free: what alloc made (a zeroed f is fine). */
bfp8_status bfp8_moe_ffn_alloc(bfp8_moe *m, ffn *f, int groups, int64_t width, int64_t max_rows);
void bfp8_moe_ffn_free(bfp8_moe *m, ffn *f);
/* The experts' weights (fp32, stacked by expert) in the recipe's forms. */
bfp8_status bfp8_moe_ffn_set_weights(bfp8_moe *m, ffn *f, const float *w13, const float *w2);
/* yp = the experts' SwiGLU of x's rows permuted by row_slot (f->rows, f->offsets set). */
bfp8_status bfp8_moe_ffn_forward(bfp8_moe *m, ffn *f, const bfp8_matrix *x, const int32_t *row_slot, int top_k);
/* Backward of bfp8_moe_ffn_forward and of the combine after it (weights, or
 * NULL for weight 1): d_topk_weight (may be NULL), the weight gradients, and
 * dx (may be NULL) stored or added (dx_accumulate). */
bfp8_status bfp8_moe_ffn_backward(bfp8_moe *m, ffn *f, const bfp8_matrix *dy, const int32_t *row_slot,
                                  const int32_t *slot_row, const float *weights, int top_k, float *d_topk_weight,
                                  bfp8_matrix *dx, int dx_accumulate, float *dw13, float *dw2, int accumulate);

#endif /* BFP8_NN_MOE_FFN_H */
