/*
 * moe_ffn.c - one kind of bfp8_moe's experts (moe_ffn.h): the E routed
 * ones or the shared one as a single group. Their buffers (what a backward
 * reads of its forward kept, the rest in the context's call scratch), their
 * weights in the recipe's forms, and the SwiGLU experts' forward and
 * backward over the permuted rows: grouped FP8 GEMMs, or a bf16 GEMM per
 * expert.
 *
 * The permuted activations are bf16, the experts' outputs (yp, and dxp in
 * backward) too. In fp8-blockwise the permuted x and dy exist only as their
 * two fp8 layouts, which the permutation writes from one read
 * (bfp8_moe_permute, bfp8_moe_combine_backward); gate|up and dh are bf16,
 * and SwiGLU and its backward are fused with the quantizers after them
 * (bfp8_swiglu_quantize_1x128, bfp8_swiglu_backward_quantize_1x128): h and
 * dgu exist only as their fp8 layouts. The other recipes keep gate|up and dh
 * in fp32 (their bf16 h and dgu feed bf16 GEMMs).
 */
#include <stdlib.h>

#include "nn/moe_ffn.h"

/* ------------------------------------------------------------------------ */
/* Buffers                                                                   */

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
 * GEMMs, a backward's dyp, dh, dgu and their fp8 layouts. They live in the
 * context's call scratch, which the layers of a context share; what a
 * backward reads of its forward (xp^T, h^T or the bf16 xp, h; gate|up, yp)
 * has buffers of its own. */
static int transients(const bfp8_moe *m, ffn *f, transient *t) {
    const int64_t H = m->cfg.hidden, F = f->width, P = f->max_rows;
    const size_t gu = bfp8_dtype_size(gu_dtype(m));
    int n = 0;
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
    if (!has_fp8_wgrad(m)) add_transient(t, &n, &f->dyp, (size_t)(P * H) * 2, 1);
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

void bfp8_moe_ffn_free(bfp8_moe *m, ffn *f) {
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

bfp8_status bfp8_moe_ffn_alloc(bfp8_moe *m, ffn *f, int groups, int64_t width, int64_t max_rows) {
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
    BFP8_TRY(alloc(ctx, &f->yp, (size_t)(P * H) * 2));
    return plan_transients(m, f);
}

bfp8_status bfp8_moe_ffn_set_weights(bfp8_moe *m, ffn *f, const float *w13, const float *w2) {
    const int64_t H = m->cfg.hidden, F = f->width, G = f->groups;
    const bfp8_matrix s13 = dense((void *)w13, BFP8_F32, 0, G * 2 * F, H);
    const bfp8_matrix s2 = dense((void *)w2, BFP8_F32, 0, G * H, F);
    if (!is_fp8(m)) {
        bfp8_matrix d13 = dense(f->w13_bf16, BFP8_BF16, 0, G * 2 * F, H);
        bfp8_matrix d2 = dense(f->w2_bf16, BFP8_BF16, 0, G * H, F);
        BFP8_TRY(bfp8_convert(m->ctx, &s13, &d13));
        return bfp8_convert(m->ctx, &s2, &d2);
    }
    /* every expert's W and W^T, one call per stack (the W^T stacked by expert) */
    const bfp8_quantize_options o = options_for(m, BFP8_LINEAR_FLAG_W);
    bfp8_qmatrix q13 = qview(&f->w13_q, G * 2 * F, H, BFP8_GRAN_128X128, 0);
    bfp8_qmatrix q13t = qview(&f->w13t_q, G * H, 2 * F, BFP8_GRAN_128X128, 0);
    BFP8_TRY(bfp8_quantize_128x128_stacked(m->ctx, &s13, 2 * F, &q13, &q13t, &o));
    bfp8_qmatrix q2 = qview(&f->w2_q, G * H, F, BFP8_GRAN_128X128, 0);
    bfp8_qmatrix q2t = qview(&f->w2t_q, G * F, H, BFP8_GRAN_128X128, 0);
    return bfp8_quantize_128x128_stacked(m->ctx, &s2, H, &q2, &q2t, &o);
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
    void *a, *b, *d;
    bfp8_dtype d_dtype;
    int64_t a_cols, b_rows, b_cols, d_rows, d_cols;
    int a_transposed, b_transposed, b_grouped, d_grouped, accumulate;
} group_gemm;

static bfp8_status run_group_gemms(bfp8_moe *m, const ffn *f, const group_gemm *p) {
    for (int g = 0; g < f->groups; ++g) {
        const int64_t r0 = f->offsets[g], n = f->offsets[g + 1] - r0;
        bfp8_matrix d = p->d_grouped ? dense(p->d, p->d_dtype, g * p->d_rows, p->d_rows, p->d_cols)
                                     : dense(p->d, p->d_dtype, r0, n, p->d_cols);
        if (n == 0) {
            if (p->d_grouped && !p->accumulate)
                BFP8_TRY(bfp8_memset_zero(m->ctx, d.data, (size_t)(p->d_rows * p->d_cols) * 4)); /* f32 */
            continue;
        }
        const bfp8_matrix a = dense(p->a, BFP8_BF16, r0, n, p->a_cols);
        const bfp8_matrix b = p->b_grouped ? dense(p->b, BFP8_BF16, g * p->b_rows, p->b_rows, p->b_cols)
                                           : dense(p->b, BFP8_BF16, r0, n, p->b_cols);
        BFP8_TRY(bfp8_gemm_bf16(m->ctx, &a, p->a_transposed, &b, p->b_transposed, p->accumulate ? &d : NULL, &d));
    }
    return BFP8_OK;
}

bfp8_status bfp8_moe_ffn_forward(bfp8_moe *m, ffn *f, const bfp8_matrix *x, const int32_t *row_slot, int top_k) {
    bfp8_context *ctx = m->ctx;
    const int64_t H = m->cfg.hidden, F = f->width, G = f->groups, P = f->rows;
    const bfp8_quantize_options o = options_for(m, BFP8_LINEAR_FLAG_X);
    bind_transients(m, f, 0);
    bfp8_matrix xp = dense(f->xp, BFP8_BF16, 0, P, H), gu = dense(f->gu, gu_dtype(m), 0, P, 2 * F);
    bfp8_matrix h = dense(f->h, BFP8_BF16, 0, P, F), yp = dense(f->yp, BFP8_BF16, 0, P, H);
    bfp8_qmatrix xp_q = qview(&f->xp_q, P, H, BFP8_GRAN_1X128, 0), xpt_q = qview(&f->xpt_q, H, P, BFP8_GRAN_1X128, 0);
    bfp8_qmatrix h_q = qview(&f->h_q, P, F, BFP8_GRAN_1X128, 0), ht_q = qview(&f->ht_q, F, P, BFP8_GRAN_1X128, 0);
    /* fp8-blockwise: xp's two fp8 layouts only (one pass); bf16wgrad: xp and its rows; bf16: xp */
    BFP8_TRY(bfp8_moe_permute(ctx, x, row_slot, top_k, has_fp8_wgrad(m) ? NULL : &xp, is_fp8(m) ? &xp_q : NULL,
                              has_fp8_wgrad(m) ? &xpt_q : NULL, &o));
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
    const group_gemm up = {f->xp, f->w13_bf16, f->gu, BFP8_F32, H, 2 * F, H, 0, 2 * F, 0, 0, 1, 0, 0};
    BFP8_TRY(run_group_gemms(m, f, &up));
    BFP8_TRY(bfp8_moe_swiglu(ctx, &gu, &h));
    const group_gemm down = {f->h, f->w2_bf16, f->yp, BFP8_BF16, F, H, F, 0, H, 0, 0, 1, 0, 0};
    return run_group_gemms(m, f, &down);
}

bfp8_status bfp8_moe_ffn_backward(bfp8_moe *m, ffn *f, const bfp8_matrix *dy, const int32_t *row_slot,
                                  const int32_t *slot_row, const float *weights, int top_k, float *d_topk_weight,
                                  bfp8_matrix *dx, int dx_accumulate, float *dw13, float *dw2, int accumulate) {
    bfp8_context *ctx = m->ctx;
    const int64_t H = m->cfg.hidden, F = f->width, G = f->groups, P = f->rows;
    const bfp8_quantize_options o = options_for(m, BFP8_LINEAR_FLAG_DY);
    bind_transients(m, f, 0);
    bfp8_matrix dyp = dense(f->dyp, BFP8_BF16, 0, P, H), yp = dense(f->yp, BFP8_BF16, 0, P, H);
    bfp8_matrix gu = dense(f->gu, gu_dtype(m), 0, P, 2 * F), dh = dense(f->dh, gu_dtype(m), 0, P, F);
    bfp8_matrix dgu = dense(f->dgu, BFP8_BF16, 0, P, 2 * F);
    bfp8_matrix dw13m = dense(dw13, BFP8_F32, 0, G * 2 * F, H), dw2m = dense(dw2, BFP8_F32, 0, G * H, F);
    bfp8_qmatrix dyp_q = qview(&f->dyp_q, P, H, BFP8_GRAN_1X128, 0);
    bfp8_qmatrix dypt_q = qview(&f->dypt_q, H, P, BFP8_GRAN_1X128, 0);
    bfp8_qmatrix dgu_q = qview(&f->dgu_q, P, 2 * F, BFP8_GRAN_1X128, 0);
    bfp8_qmatrix dgut_q = qview(&f->dgut_q, 2 * F, P, BFP8_GRAN_1X128, 0);
    /* fp8-blockwise: dyp's two fp8 layouts only; bf16wgrad: dyp in bf16 and its rows; bf16: dyp (all from
     * the fp32 products) */
    const int fp8_wgrad = has_fp8_wgrad(m);
    BFP8_TRY(bfp8_moe_combine_backward(ctx, dy, d_topk_weight ? &yp : NULL, row_slot, slot_row, weights, top_k,
                                       fp8_wgrad ? NULL : &dyp, is_fp8(m) ? &dyp_q : NULL, fp8_wgrad ? &dypt_q : NULL,
                                       &o, d_topk_weight));
    /* wgrad of the down projection, then its dgrad */
    if (has_fp8_wgrad(m)) {
        const bfp8_qmatrix ht_q = qview(&f->ht_q, F, P, BFP8_GRAN_1X128, 0);
        BFP8_TRY(bfp8_gemm_1d1d_grouped(ctx, &dypt_q, &ht_q, f->offsets, f->groups, accumulate ? &dw2m : NULL, &dw2m));
    } else {
        const group_gemm wg = {f->dyp, f->h, dw2, BFP8_F32, H, 0, F, H, F, 1, 1, 0, 1, accumulate};
        BFP8_TRY(run_group_gemms(m, f, &wg));
    }
    if (is_fp8(m)) {
        const bfp8_qmatrix w2t = qview(&f->w2t_q, G * F, H, BFP8_GRAN_128X128, 0);
        BFP8_TRY(bfp8_gemm_1d2d_grouped(ctx, &dyp_q, &w2t, f->offsets, f->groups, &dh));
    } else {
        const group_gemm dg = {f->dyp, f->w2_bf16, f->dh, BFP8_F32, H, H, F, 0, F, 0, 1, 1, 0, 0};
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
        const group_gemm wg = {f->dgu, f->xp, dw13, BFP8_F32, 2 * F, 0, H, 2 * F, H, 1, 1, 0, 1, accumulate};
        BFP8_TRY(run_group_gemms(m, f, &wg));
    }
    if (!dx) return BFP8_OK;
    bfp8_matrix dxp = dense(f->yp, BFP8_BF16, 0, P, H);
    if (is_fp8(m)) {
        const bfp8_qmatrix w13t = qview(&f->w13t_q, G * H, 2 * F, BFP8_GRAN_128X128, 0);
        BFP8_TRY(bfp8_gemm_1d2d_grouped(ctx, &dgu_q, &w13t, f->offsets, f->groups, &dxp));
    } else {
        const group_gemm dg = {f->dgu, f->w13_bf16, f->yp, BFP8_BF16, 2 * F, 2 * F, H, 0, H, 0, 1, 1, 0, 0};
        BFP8_TRY(run_group_gemms(m, f, &dg));
    }
    return bfp8_moe_combine(ctx, &dxp, slot_row, NULL, top_k, dx_accumulate, dx);
}
