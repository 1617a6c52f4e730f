/*
 * moe_ops.c - the public mixture-of-experts ops: validate once (sizes,
 * dtypes, layouts, pointers), then dispatch to the CPU reference
 * (src/cpu/moe_cpu.c) or the CUDA kernels (src/cuda/moe.cu). Routing tables
 * in backend memory cannot be checked before a kernel reads them; the
 * backends treat an out-of-range entry as a dropped slot or a padding row.
 */
#include <stdio.h>

#include "internal.h"

#define MOE_MAX_EXPERTS 1024
#define MOE_MAX_TOP_K 16
#define MOE_MAX_SLOTS ((int64_t)1 << 30) /* slots and rows index as int32 */

static int is_cuda(const bfp8_context *ctx) { return ctx->backend == BFP8_BACKEND_CUDA; }

int64_t bfp8_moe_max_rows(int64_t tokens, int top_k, int num_experts) {
    if (tokens < 1 || top_k < 1 || num_experts < 1) return 0;
    const int64_t slots = tokens * top_k, busy = slots < num_experts ? slots : num_experts; /* experts with rows */
    return (slots + (int64_t)(BFP8_GROUP_ALIGN - 1) * busy) / BFP8_GROUP_ALIGN * BFP8_GROUP_ALIGN;
}

static bfp8_status check_array(const bfp8_context *ctx, const void *p, size_t align, const char *name,
                               const char *fn) {
    char what[96];
    snprintf(what, sizeof what, "%s: %s", fn, name);
    if (!p) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s is NULL", what);
    if ((uintptr_t)p % align != 0) return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s is not %zu-byte aligned", what, align);
    return bfp8_check_pointer(ctx, p, what);
}

static bfp8_status check_routing(const bfp8_context *ctx, int64_t tokens, int num_experts, int top_k,
                                 const char *fn) {
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    if (tokens < 1 || num_experts < 1 || num_experts > MOE_MAX_EXPERTS || top_k < 1 || top_k > MOE_MAX_TOP_K ||
        top_k > num_experts)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "%s: tokens %lld, num_experts %d, top_k %d (tokens >= 1, 1 <= experts <= %d, "
                         "1 <= top_k <= min(experts, %d))",
                         fn, (long long)tokens, num_experts, top_k, MOE_MAX_EXPERTS, MOE_MAX_TOP_K);
    if (tokens > MOE_MAX_SLOTS / top_k)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: %lld tokens x top_k %d is too many", fn, (long long)tokens,
                         top_k);
    return BFP8_OK;
}

static bfp8_status check_score(bfp8_moe_score_fn score_fn, int normalize, float scale, const char *fn) {
    if (score_fn != BFP8_MOE_SCORE_SOFTMAX && score_fn != BFP8_MOE_SCORE_SIGMOID)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: unknown score_fn %d", fn, (int)score_fn);
    if (normalize != 0 && normalize != 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: normalize must be 0 or 1", fn);
    if (!(scale > 0.0f) || scale > 3.0e38f)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: scale must be finite and > 0", fn);
    return BFP8_OK;
}

bfp8_status bfp8_moe_route(bfp8_context *ctx, const float *logits, const float *bias, int64_t tokens,
                           int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize, float scale,
                           float *scores, int32_t *topk_expert, float *topk_weight, float *score_sum) {
    static const char fn[] = "bfp8_moe_route";
    BFP8_TRY(check_routing(ctx, tokens, num_experts, top_k, fn));
    BFP8_TRY(check_score(score_fn, normalize, scale, fn));
    BFP8_TRY(check_array(ctx, logits, 4, "logits", fn));
    if (bias) BFP8_TRY(check_array(ctx, bias, 4, "bias", fn));
    BFP8_TRY(check_array(ctx, scores, 4, "scores", fn));
    BFP8_TRY(check_array(ctx, topk_expert, 4, "topk_expert", fn));
    BFP8_TRY(check_array(ctx, topk_weight, 4, "topk_weight", fn));
    if (score_sum) BFP8_TRY(check_array(ctx, score_sum, 4, "score_sum", fn));
    return is_cuda(ctx) ? bfp8_cuda_moe_route(ctx, logits, bias, tokens, num_experts, top_k, score_fn, normalize,
                                              scale, scores, topk_expert, topk_weight, score_sum)
                        : bfp8_cpu_moe_route(ctx, logits, bias, tokens, num_experts, top_k, score_fn, normalize,
                                             scale, scores, topk_expert, topk_weight, score_sum);
}

bfp8_status bfp8_moe_route_backward(bfp8_context *ctx, const float *scores, const int32_t *topk_expert,
                                    const float *d_topk_weight, const float *score_grad, int64_t tokens,
                                    int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize,
                                    float scale, float *d_logits) {
    static const char fn[] = "bfp8_moe_route_backward";
    BFP8_TRY(check_routing(ctx, tokens, num_experts, top_k, fn));
    BFP8_TRY(check_score(score_fn, normalize, scale, fn));
    BFP8_TRY(check_array(ctx, scores, 4, "scores", fn));
    BFP8_TRY(check_array(ctx, topk_expert, 4, "topk_expert", fn));
    BFP8_TRY(check_array(ctx, d_topk_weight, 4, "d_topk_weight", fn));
    if (score_grad) BFP8_TRY(check_array(ctx, score_grad, 4, "score_grad", fn));
    BFP8_TRY(check_array(ctx, d_logits, 4, "d_logits", fn));
    return is_cuda(ctx) ? bfp8_cuda_moe_route_backward(ctx, scores, topk_expert, d_topk_weight, score_grad, tokens,
                                                       num_experts, top_k, score_fn, normalize, scale, d_logits)
                        : bfp8_cpu_moe_route_backward(ctx, scores, topk_expert, d_topk_weight, score_grad, tokens,
                                                      num_experts, top_k, score_fn, normalize, scale, d_logits);
}

bfp8_status bfp8_moe_dispatch(bfp8_context *ctx, const int32_t *topk_expert, int64_t tokens, int top_k,
                              int num_experts, int64_t capacity, int64_t max_rows, int32_t *slot_row,
                              int32_t *row_slot, int64_t *offsets, int64_t *routed) {
    static const char fn[] = "bfp8_moe_dispatch";
    BFP8_TRY(check_routing(ctx, tokens, num_experts, top_k, fn));
    if (capacity < 0) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: capacity %lld < 0", fn, (long long)capacity);
    const int64_t need = bfp8_moe_max_rows(tokens, top_k, num_experts);
    if (max_rows < need || max_rows > MOE_MAX_SLOTS)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: max_rows %lld, expected %lld..%lld (bfp8_moe_max_rows)", fn,
                         (long long)max_rows, (long long)need, (long long)MOE_MAX_SLOTS);
    BFP8_TRY(check_array(ctx, topk_expert, 4, "topk_expert", fn));
    BFP8_TRY(check_array(ctx, slot_row, 4, "slot_row", fn));
    BFP8_TRY(check_array(ctx, row_slot, 4, "row_slot", fn));
    BFP8_TRY(check_array(ctx, offsets, 8, "offsets", fn));
    BFP8_TRY(check_array(ctx, routed, 8, "routed", fn));
    return is_cuda(ctx) ? bfp8_cuda_moe_dispatch(ctx, topk_expert, tokens, top_k, num_experts, capacity, max_rows,
                                                 slot_row, row_slot, offsets, routed)
                        : bfp8_cpu_moe_dispatch(ctx, topk_expert, tokens, top_k, num_experts, capacity, max_rows,
                                                slot_row, row_slot, offsets, routed);
}

/* A high-precision (f32 / bf16) matrix operand with the given shape (cols
 * always; rows when want_rows >= 0). */
static bfp8_status check_dense(const bfp8_context *ctx, const bfp8_matrix *m, int64_t want_rows, int64_t want_cols,
                               const char *name, const char *fn) {
    char what[96];
    snprintf(what, sizeof what, "%s: %s", fn, name);
    if (!m) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s is NULL", what);
    BFP8_TRY(bfp8_check_matrix(ctx, m, what));
    if (m->dtype != BFP8_F32 && m->dtype != BFP8_BF16)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: dtype %s (expected f32 or bf16)", what, bfp8_dtype_name(m->dtype));
    if ((want_rows >= 0 && m->rows != want_rows) || m->cols != want_cols)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: shape %lld x %lld, expected %lld x %lld", what, (long long)m->rows,
                         (long long)m->cols, (long long)(want_rows >= 0 ? want_rows : m->rows),
                         (long long)want_cols);
    if (m->rows > MOE_MAX_SLOTS)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: %lld rows is too many", what, (long long)m->rows);
    return BFP8_OK;
}

static bfp8_status check_quantize_options(const bfp8_context *ctx, const bfp8_quantize_options *o,
                                          const char *fn) {
    if (!o) return BFP8_OK;
    if (o->pow2_scales != 0 && o->pow2_scales != 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: pow2_scales must be 0 or 1", fn);
    if (o->nonfinite_flag) BFP8_TRY(check_array(ctx, o->nonfinite_flag, 4, "nonfinite_flag", fn));
    return BFP8_OK;
}

/* The permuted outputs of permute / combine_backward: a dense and / or a
 * 1x128 quantized P x cols matrix, the same P when both are given; the
 * quantized columns (cols x P, P and cols multiples of 128). */
/* Every row of m starts at a multiple of 16 bytes. */
static int rows_16_byte_aligned(const bfp8_matrix *m) {
    const size_t size = bfp8_dtype_size(m->dtype);
    return (uintptr_t)m->data % 16 == 0 && (m->ld * (int64_t)size) % 16 == 0;
}

static bfp8_status check_permuted_outputs(const bfp8_context *ctx, const bfp8_matrix *src, const bfp8_matrix *out,
                                          const bfp8_qmatrix *out_q, const bfp8_qmatrix *out_qt,
                                          const bfp8_quantize_options *options, const char *name, const char *fn) {
    const int64_t cols = src->cols;
    if (!out && !out_q && !out_qt)
        return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: %s, %s_q and %s_qt are all NULL", fn, name, name, name);
    if (out) BFP8_TRY(check_dense(ctx, out, -1, cols, name, fn));
    if (out_q) {
        char what[96];
        snprintf(what, sizeof what, "%s: %s_q", fn, name);
        BFP8_TRY(bfp8_check_qmatrix(ctx, out_q, BFP8_GRAN_1X128, what));
        if (out_q->cols != cols || (out && out_q->rows != out->rows) || out_q->rows > MOE_MAX_SLOTS)
            return bfp8_fail(BFP8_ERR_SHAPE, "%s: %s_q is %lld x %lld, expected %lld x %lld", fn, name,
                             (long long)out_q->rows, (long long)out_q->cols,
                             (long long)(out ? out->rows : out_q->rows), (long long)cols);
    }
    if (out_qt) {
        char what[96];
        snprintf(what, sizeof what, "%s: %s_qt", fn, name);
        BFP8_TRY(bfp8_check_qmatrix(ctx, out_qt, BFP8_GRAN_1X128, what));
        const int64_t rows = out ? out->rows : out_q ? out_q->rows : out_qt->cols;
        if (out_qt->rows != cols || out_qt->cols != rows || rows % 128 || cols % 128 || rows > MOE_MAX_SLOTS)
            return bfp8_fail(BFP8_ERR_SHAPE, "%s: %s_qt is %lld x %lld, expected %lld x %lld (multiples of 128)", fn,
                             name, (long long)out_qt->rows, (long long)out_qt->cols, (long long)cols, (long long)rows);
        /* one pass writes every layout by 16-byte accesses */
        const int aligned = rows_16_byte_aligned(src) && (!out || rows_16_byte_aligned(out)) &&
                            (!out_q || ((uintptr_t)out_q->data % 16 == 0 && out_q->ld % 16 == 0)) &&
                            (uintptr_t)out_qt->data % 16 == 0 && out_qt->ld % 16 == 0;
        if (!aligned)
            return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s: with %s_qt, the rows of every matrix must start at multiples of "
                             "16 bytes", fn, name);
    }
    return check_quantize_options(ctx, options, fn);
}

bfp8_status bfp8_moe_permute(bfp8_context *ctx, const bfp8_matrix *x, const int32_t *row_slot, int top_k,
                             bfp8_matrix *xp, bfp8_qmatrix *xp_q, bfp8_qmatrix *xp_qt,
                             const bfp8_quantize_options *options) {
    static const char fn[] = "bfp8_moe_permute";
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    if (top_k < 1 || top_k > MOE_MAX_TOP_K)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: top_k %d (1..%d)", fn, top_k, MOE_MAX_TOP_K);
    if (!x) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: x is NULL", fn);
    BFP8_TRY(check_dense(ctx, x, -1, x->cols, "x", fn));
    BFP8_TRY(check_permuted_outputs(ctx, x, xp, xp_q, xp_qt, options, "xp", fn));
    BFP8_TRY(check_array(ctx, row_slot, 4, "row_slot", fn));
    return is_cuda(ctx) ? bfp8_cuda_moe_permute(ctx, x, row_slot, top_k, xp, xp_q, xp_qt, options)
                        : bfp8_cpu_moe_permute(ctx, x, row_slot, top_k, xp, xp_q, xp_qt, options);
}

bfp8_status bfp8_moe_combine(bfp8_context *ctx, const bfp8_matrix *yp, const int32_t *slot_row,
                             const float *topk_weight, int top_k, int accumulate, bfp8_matrix *y) {
    static const char fn[] = "bfp8_moe_combine";
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    if (top_k < 1 || top_k > MOE_MAX_TOP_K)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: top_k %d (1..%d)", fn, top_k, MOE_MAX_TOP_K);
    if (accumulate != 0 && accumulate != 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: accumulate must be 0 or 1", fn);
    if (!y) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: y is NULL", fn);
    BFP8_TRY(check_dense(ctx, y, -1, y->cols, "y", fn));
    BFP8_TRY(check_dense(ctx, yp, -1, y->cols, "yp", fn));
    if (y->rows > MOE_MAX_SLOTS / top_k)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: %lld tokens x top_k %d is too many", fn, (long long)y->rows, top_k);
    BFP8_TRY(check_array(ctx, slot_row, 4, "slot_row", fn));
    if (topk_weight) BFP8_TRY(check_array(ctx, topk_weight, 4, "topk_weight", fn));
    return is_cuda(ctx) ? bfp8_cuda_moe_combine(ctx, yp, slot_row, topk_weight, top_k, accumulate, y)
                        : bfp8_cpu_moe_combine(ctx, yp, slot_row, topk_weight, top_k, accumulate, y);
}

bfp8_status bfp8_moe_combine_backward(bfp8_context *ctx, const bfp8_matrix *dy, const bfp8_matrix *yp,
                                      const int32_t *row_slot, const int32_t *slot_row, const float *topk_weight,
                                      int top_k, bfp8_matrix *dyp, bfp8_qmatrix *dyp_q, bfp8_qmatrix *dyp_qt,
                                      const bfp8_quantize_options *options, float *d_topk_weight) {
    static const char fn[] = "bfp8_moe_combine_backward";
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    if (top_k < 1 || top_k > MOE_MAX_TOP_K)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: top_k %d (1..%d)", fn, top_k, MOE_MAX_TOP_K);
    if (!dy) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: dy is NULL", fn);
    BFP8_TRY(check_dense(ctx, dy, -1, dy->cols, "dy", fn));
    if (dy->rows > MOE_MAX_SLOTS / top_k)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: %lld tokens x top_k %d is too many", fn, (long long)dy->rows, top_k);
    if (!dyp && !dyp_q && !dyp_qt && !d_topk_weight)
        return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: dyp, dyp_q, dyp_qt and d_topk_weight are all NULL", fn);
    if (dyp || dyp_q || dyp_qt) {
        BFP8_TRY(check_permuted_outputs(ctx, dy, dyp, dyp_q, dyp_qt, options, "dyp", fn));
        BFP8_TRY(check_array(ctx, row_slot, 4, "row_slot", fn));
    }
    if (d_topk_weight) {
        BFP8_TRY(check_dense(ctx, yp, dyp ? dyp->rows : dyp_q ? dyp_q->rows : dyp_qt ? dyp_qt->cols : -1, dy->cols,
                             "yp", fn));
        BFP8_TRY(check_array(ctx, row_slot, 4, "row_slot", fn));
        BFP8_TRY(check_array(ctx, slot_row, 4, "slot_row", fn));
        BFP8_TRY(check_array(ctx, d_topk_weight, 4, "d_topk_weight", fn));
    }
    if (topk_weight) BFP8_TRY(check_array(ctx, topk_weight, 4, "topk_weight", fn));
    return is_cuda(ctx) ? bfp8_cuda_moe_combine_backward(ctx, dy, yp, row_slot, slot_row, topk_weight, top_k, dyp,
                                                         dyp_q, dyp_qt, options, d_topk_weight)
                        : bfp8_cpu_moe_combine_backward(ctx, dy, yp, row_slot, slot_row, topk_weight, top_k, dyp,
                                                        dyp_q, dyp_qt, options, d_topk_weight);
}

bfp8_status bfp8_moe_swiglu(bfp8_context *ctx, const bfp8_matrix *gu, bfp8_matrix *h) {
    static const char fn[] = "bfp8_moe_swiglu";
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    if (!h) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: h is NULL", fn);
    BFP8_TRY(check_dense(ctx, h, -1, h->cols, "h", fn));
    BFP8_TRY(check_dense(ctx, gu, h->rows, 2 * h->cols, "gu", fn));
    if (gu->dtype != BFP8_F32) return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: gu must be f32", fn);
    return is_cuda(ctx) ? bfp8_cuda_moe_swiglu(ctx, gu, h) : bfp8_cpu_moe_swiglu(ctx, gu, h);
}

bfp8_status bfp8_moe_swiglu_backward(bfp8_context *ctx, const bfp8_matrix *gu, const bfp8_matrix *dh,
                                     bfp8_matrix *dgu) {
    static const char fn[] = "bfp8_moe_swiglu_backward";
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    if (!dh) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: dh is NULL", fn);
    BFP8_TRY(check_dense(ctx, dh, -1, dh->cols, "dh", fn));
    BFP8_TRY(check_dense(ctx, gu, dh->rows, 2 * dh->cols, "gu", fn));
    BFP8_TRY(check_dense(ctx, dgu, dh->rows, 2 * dh->cols, "dgu", fn));
    if (gu->dtype != BFP8_F32 || dh->dtype != BFP8_F32)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: gu and dh must be f32", fn);
    return is_cuda(ctx) ? bfp8_cuda_moe_swiglu_backward(ctx, gu, dh, dgu)
                        : bfp8_cpu_moe_swiglu_backward(ctx, gu, dh, dgu);
}
