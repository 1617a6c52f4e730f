/*
 * linear.c - the linear layer y = x W^T in the three recipes of
 * docs/RECIPE.md section 7, written over the public ops only, so the same
 * code runs on the CPU reference and on the CUDA kernels.
 *
 *   fp8-blockwise            set_weight  W -> W_q, W^T_q (128x128, one pass)
 *                            forward     x -> x_q (1x128 along K), x^T_q (1x128 along M), one pass
 *                                        y = gemm_1d2d(x_q, W_q)
 *                            backward    dy -> dy_q, dy^T_q, one pass
 *                                        dx = gemm_1d2d(dy_q, W^T_q)
 *                                        dW (+)= gemm_1d1d(dy^T_q, x^T_q)          fp32
 *   fp8-blockwise-bf16wgrad  as above, but x is kept as given (bf16) and
 *                                        dW (+)= gemm_bf16(dy^T, x^T transposed)   fp32
 *   bf16                     W converted to bf16 at set_weight; the three GEMMs are bf16.
 *
 * The activations (x, y, dy, dx) are bf16, or f32 in the _f32 forms
 * (fp8-blockwise only): the same calls on matrices of the other dtype.
 *
 * Every buffer is allocated at create, sized by max_tokens; forward and
 * backward build views of them for the current token count and allocate
 * nothing. A layer keeps only what its backward reads (W_q, W^T_q, x^T_q);
 * x_q, dy_q and dy^T_q live within one call, so they are views of the
 * context's call scratch (internal.h), which all layers of a context
 * share: a model's layers hold one set of them, not one each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const recipe_names[] = {"bf16", "fp8-blockwise", "fp8-blockwise-bf16wgrad"};
#define RECIPE_COUNT 3

const char *bfp8_recipe_name(bfp8_recipe recipe) {
    return (int)recipe >= 0 && (int)recipe < RECIPE_COUNT ? recipe_names[recipe] : NULL;
}

bfp8_status bfp8_recipe_from_name(const char *name, bfp8_recipe *recipe) {
    if (!name || !recipe) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_recipe_from_name: NULL argument");
    for (int i = 0; i < RECIPE_COUNT; ++i)
        if (strcmp(name, recipe_names[i]) == 0) {
            *recipe = (bfp8_recipe)i;
            return BFP8_OK;
        }
    return bfp8_fail(
        BFP8_ERR_INVALID_VALUE,
        "bfp8_recipe_from_name: unknown recipe \"%s\" (expected bf16, fp8-blockwise or fp8-blockwise-bf16wgrad)", name);
}

/* ------------------------------------------------------------------------ */

/* Backend memory for one quantized operand of up to rows x cols. */
typedef struct qbuffer {
    uint8_t *data;
    float *scales;
} qbuffer;

struct bfp8_linear {
    bfp8_context *ctx;
    bfp8_linear_config cfg;
    int weight_set;
    int64_t tokens;          /* M of the last forward; 0 before the first */
    const uint16_t *x_saved; /* the last forward's x (recipes with a bf16 wgrad) */
    qbuffer w_q, wt_q;       /* fp8 recipes: W (N x K) and W^T (K x N), 128x128 */
    qbuffer xt_q;            /* x^T (K x M, fp8 wgrad only), 1x128 */
    /* in the context's call scratch, at these offsets: x (M x K) in a forward; dy (M x N) and dy^T
     * (N x M, fp8 wgrad only) in a backward; 1x128 */
    size_t x_q_scales, dy_q_scales, dyt_q_data, dyt_q_scales;
    uint16_t *w_bf16; /* bf16 recipe: W (N x K) */
};

static int is_fp8(const bfp8_linear *lin) { return lin->cfg.recipe != BFP8_RECIPE_BF16; }
static int has_fp8_wgrad(const bfp8_linear *lin) { return lin->cfg.recipe == BFP8_RECIPE_FP8_BLOCKWISE; }

static bfp8_status alloc_qbuffer(bfp8_context *ctx, qbuffer *b, int64_t rows, int64_t cols,
                                 bfp8_granularity gran) {
    bfp8_qmatrix layout;
    size_t data_bytes, scale_bytes;
    BFP8_TRY(bfp8_qmatrix_layout(&layout, rows, cols, gran, &data_bytes, &scale_bytes));
    BFP8_TRY(bfp8_malloc(ctx, (void **)&b->data, data_bytes));
    return bfp8_malloc(ctx, (void **)&b->scales, scale_bytes);
}

/* Bytes of a rows x cols quantized operand's codes and scales, each rounded up to 256 (a place in the scratch
 * for the next one). */
static bfp8_status operand_bytes(int64_t rows, int64_t cols, size_t *data_bytes, size_t *scale_bytes) {
    bfp8_qmatrix layout;
    BFP8_TRY(bfp8_qmatrix_layout(&layout, rows, cols, BFP8_GRAN_1X128, data_bytes, scale_bytes));
    *data_bytes = (*data_bytes + 255) / 256 * 256;
    *scale_bytes = (*scale_bytes + 255) / 256 * 256;
    return BFP8_OK;
}

/* The offsets of the transient operands in the context's call scratch, and the scratch grown to hold them. */
static bfp8_status plan_scratch(bfp8_linear *lin) {
    const int64_t n = lin->cfg.out_features, k = lin->cfg.in_features, m = lin->cfg.max_tokens;
    size_t x_data, x_scales, dy_data, dy_scales, dyt_data = 0, dyt_scales = 0;
    BFP8_TRY(operand_bytes(m, k, &x_data, &x_scales));
    BFP8_TRY(operand_bytes(m, n, &dy_data, &dy_scales));
    if (has_fp8_wgrad(lin)) BFP8_TRY(operand_bytes(n, m, &dyt_data, &dyt_scales));
    lin->x_q_scales = x_data;
    lin->dy_q_scales = dy_data;
    lin->dyt_q_data = dy_data + dy_scales;
    lin->dyt_q_scales = lin->dyt_q_data + dyt_data;
    const size_t forward = x_data + x_scales, backward = lin->dyt_q_scales + dyt_scales;
    return bfp8_context_reserve_call_scratch(lin->ctx, forward > backward ? forward : backward);
}

/* A view of the scratch at the offsets of one operand. */
static qbuffer scratch_operand(const bfp8_linear *lin, size_t data_offset, size_t scales_offset) {
    uint8_t *base = lin->ctx->call_scratch;
    const qbuffer b = {base + data_offset, (float *)(base + scales_offset)};
    return b;
}

static void free_qbuffer(bfp8_context *ctx, qbuffer *b) {
    bfp8_free(ctx, b->data);
    bfp8_free(ctx, b->scales);
}

/* A view of buffer b as a rows x cols quantized matrix in the canonical layout.
 * The canonical layout of fewer rows or columns fits in the buffer of the most. */
static bfp8_qmatrix view(const qbuffer *b, int64_t rows, int64_t cols, bfp8_granularity gran) {
    bfp8_qmatrix q;
    (void)bfp8_qmatrix_layout(&q, rows, cols, gran, NULL, NULL);
    q.data = b->data;
    q.scales = b->scales;
    return q;
}

static bfp8_quantize_options options_for(const bfp8_linear *lin, int flag) {
    const bfp8_quantize_options o = {lin->cfg.pow2_scales,
                                     lin->cfg.nonfinite_flags ? lin->cfg.nonfinite_flags + flag : NULL};
    return o;
}

void bfp8_linear_destroy(bfp8_linear *lin) {
    if (!lin) return;
    qbuffer *buffers[] = {&lin->w_q, &lin->wt_q, &lin->xt_q};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; ++i) free_qbuffer(lin->ctx, buffers[i]);
    bfp8_free(lin->ctx, lin->w_bf16);
    free(lin);
}

static bfp8_status check_config(const bfp8_context *ctx, const bfp8_linear_config *cfg) {
    static const char fn[] = "bfp8_linear_create";
    if (cfg->in_features < 1 || cfg->out_features < 1 || cfg->max_tokens < 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "%s: in_features %lld, out_features %lld, max_tokens %lld (each must be >= 1)", fn,
                         (long long)cfg->in_features, (long long)cfg->out_features,
                         (long long)cfg->max_tokens);
    if (!bfp8_recipe_name(cfg->recipe))
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: unknown recipe %d", fn, (int)cfg->recipe);
    if (cfg->pow2_scales != 0 && cfg->pow2_scales != 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: pow2_scales must be 0 or 1", fn);
    if (cfg->nonfinite_flags) {
        if ((uintptr_t)cfg->nonfinite_flags % sizeof(uint32_t) != 0)
            return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s: nonfinite_flags not 4-byte aligned", fn);
        BFP8_TRY(bfp8_check_pointer(ctx, cfg->nonfinite_flags, "bfp8_linear_create: nonfinite_flags"));
    }
    return BFP8_OK;
}

bfp8_status bfp8_linear_create(bfp8_linear **out, bfp8_context *ctx, const bfp8_linear_config *cfg) {
    if (!out || !ctx || !cfg)
        return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_linear_create: lin, ctx or cfg is NULL");
    BFP8_TRY(check_config(ctx, cfg));
    bfp8_linear *lin = calloc(1, sizeof *lin);
    if (!lin) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_linear_create: out of host memory");
    lin->ctx = ctx;
    lin->cfg = *cfg;
    const int64_t n = cfg->out_features, k = cfg->in_features, m = cfg->max_tokens;
    bfp8_status st = BFP8_OK;
    if (is_fp8(lin)) {
        if (st == BFP8_OK) st = alloc_qbuffer(ctx, &lin->w_q, n, k, BFP8_GRAN_128X128);
        if (st == BFP8_OK) st = alloc_qbuffer(ctx, &lin->wt_q, k, n, BFP8_GRAN_128X128);
        if (st == BFP8_OK && has_fp8_wgrad(lin)) st = alloc_qbuffer(ctx, &lin->xt_q, k, m, BFP8_GRAN_1X128);
        if (st == BFP8_OK) st = plan_scratch(lin);
    } else {
        st = bfp8_malloc(ctx, (void **)&lin->w_bf16, (size_t)(n * k) * sizeof(uint16_t));
    }
    if (st != BFP8_OK) {
        bfp8_linear_destroy(lin);
        return st;
    }
    *out = lin;
    return BFP8_OK;
}

bfp8_status bfp8_linear_set_weight(bfp8_linear *lin, const float *weight) {
    static const char fn[] = "bfp8_linear_set_weight";
    if (!lin) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: lin is NULL", fn);
    /* Check the pointer here, so that a bad one leaves the last weight in use. */
    if (!weight) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: weight is NULL", fn);
    if ((uintptr_t)weight % sizeof(float) != 0)
        return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s: weight is not 4-byte aligned", fn);
    BFP8_TRY(bfp8_check_pointer(lin->ctx, weight, "bfp8_linear_set_weight: weight"));
    const int64_t n = lin->cfg.out_features, k = lin->cfg.in_features;
    const bfp8_matrix w = {(void *)weight, BFP8_F32, n, k, k};
    lin->weight_set = 0;
    if (is_fp8(lin)) {
        bfp8_qmatrix w_q = view(&lin->w_q, n, k, BFP8_GRAN_128X128);
        bfp8_qmatrix wt_q = view(&lin->wt_q, k, n, BFP8_GRAN_128X128);
        const bfp8_quantize_options o = options_for(lin, BFP8_LINEAR_FLAG_W);
        BFP8_TRY(bfp8_quantize_128x128(lin->ctx, &w, &w_q, &wt_q, &o));
    } else {
        bfp8_matrix w_bf16 = {lin->w_bf16, BFP8_BF16, n, k, k};
        BFP8_TRY(bfp8_convert(lin->ctx, &w, &w_bf16));
    }
    lin->weight_set = 1;
    return BFP8_OK;
}

static bfp8_status check_ready(const bfp8_linear *lin, const char *fn) {
    if (!lin->weight_set)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: no weight: call bfp8_linear_set_weight first", fn);
    return BFP8_OK;
}

/* An activation pointer (bf16 or f32): present, aligned, in the backend's memory. */
static bfp8_status check_activation_pointer(const bfp8_linear *lin, const void *p, bfp8_dtype dtype,
                                            const char *what) {
    if (!p) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s is NULL", what);
    const size_t size = bfp8_dtype_size(dtype);
    if ((uintptr_t)p % size != 0) return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s is not %zu-byte aligned", what, size);
    return bfp8_check_pointer(lin->ctx, p, what);
}

/* f32 activations: fp8-blockwise only (the other recipes keep a bf16 x). */
static bfp8_status check_f32_recipe(const bfp8_linear *lin, const char *fn) {
    if (!has_fp8_wgrad(lin))
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: f32 activations need the fp8-blockwise recipe (this layer: %s)",
                         fn, bfp8_recipe_name(lin->cfg.recipe));
    return BFP8_OK;
}

/* y = x W^T with x and y of dtype (bf16, or f32 for fp8-blockwise). */
static bfp8_status linear_forward(bfp8_linear *lin, const void *x, bfp8_dtype dtype, int64_t tokens, void *y,
                                  const char *fn) {
    if (!lin) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: lin is NULL", fn);
    BFP8_TRY(check_ready(lin, fn));
    if (dtype == BFP8_F32) BFP8_TRY(check_f32_recipe(lin, fn));
    char what[64];
    snprintf(what, sizeof what, "%s: x", fn);
    BFP8_TRY(check_activation_pointer(lin, x, dtype, what));
    snprintf(what, sizeof what, "%s: y", fn);
    BFP8_TRY(check_activation_pointer(lin, y, dtype, what));
    if (tokens < 1 || tokens > lin->cfg.max_tokens)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: tokens %lld, expected 1..max_tokens (%lld)", fn,
                         (long long)tokens, (long long)lin->cfg.max_tokens);
    const int64_t m = tokens, n = lin->cfg.out_features, k = lin->cfg.in_features;
    const bfp8_matrix xm = {(void *)x, dtype, m, k, k};
    bfp8_matrix ym = {y, dtype, m, n, n};
    lin->tokens = 0; /* what a failed forward leaves cannot be differentiated */
    if (is_fp8(lin)) {
        const qbuffer x_buffer = scratch_operand(lin, 0, lin->x_q_scales);
        bfp8_qmatrix x_q = view(&x_buffer, m, k, BFP8_GRAN_1X128);
        bfp8_qmatrix xt_q = view(&lin->xt_q, k, m, BFP8_GRAN_1X128);
        const bfp8_qmatrix w_q = view(&lin->w_q, n, k, BFP8_GRAN_128X128);
        const bfp8_quantize_options o = options_for(lin, BFP8_LINEAR_FLAG_X);
        BFP8_TRY(bfp8_quantize_1x128(lin->ctx, &xm, &x_q, has_fp8_wgrad(lin) ? &xt_q : NULL, &o));
        BFP8_TRY(bfp8_gemm_1d2d(lin->ctx, &x_q, &w_q, &ym));
    } else {
        const bfp8_matrix w = {lin->w_bf16, BFP8_BF16, n, k, k};
        BFP8_TRY(bfp8_gemm_bf16(lin->ctx, &xm, 0, &w, 0, NULL, &ym));
    }
    lin->x_saved = has_fp8_wgrad(lin) ? NULL : (const uint16_t *)x; /* bf16: the only form of those recipes */
    lin->tokens = m;
    return BFP8_OK;
}

bfp8_status bfp8_linear_forward(bfp8_linear *lin, const uint16_t *x, int64_t tokens, uint16_t *y) {
    return linear_forward(lin, x, BFP8_BF16, tokens, y, "bfp8_linear_forward");
}

bfp8_status bfp8_linear_forward_f32(bfp8_linear *lin, const float *x, int64_t tokens, float *y) {
    return linear_forward(lin, x, BFP8_F32, tokens, y, "bfp8_linear_forward_f32");
}

/* Backward of the last forward with dy of dtype and dx of dx_dtype. */
static bfp8_status linear_backward(bfp8_linear *lin, const void *dy, bfp8_dtype dtype, void *dx, bfp8_dtype dx_dtype,
                                   float *dw, int accumulate, const char *fn) {
    if (!lin) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: lin is NULL", fn);
    BFP8_TRY(check_ready(lin, fn));
    if (dtype == BFP8_F32 || dx_dtype == BFP8_F32) BFP8_TRY(check_f32_recipe(lin, fn));
    if (lin->tokens == 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: no forward to differentiate (call bfp8_linear_forward first)",
                         fn);
    if (accumulate != 0 && accumulate != 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: accumulate must be 0 or 1", fn);
    char what[64];
    snprintf(what, sizeof what, "%s: dy", fn);
    BFP8_TRY(check_activation_pointer(lin, dy, dtype, what));
    snprintf(what, sizeof what, "%s: dx", fn);
    if (dx) BFP8_TRY(check_activation_pointer(lin, dx, dx_dtype, what));
    if (!dw) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: dw is NULL", fn);
    if ((uintptr_t)dw % sizeof(float) != 0)
        return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s: dw is not 4-byte aligned", fn);
    snprintf(what, sizeof what, "%s: dw", fn);
    BFP8_TRY(bfp8_check_pointer(lin->ctx, dw, what));

    const int64_t m = lin->tokens, n = lin->cfg.out_features, k = lin->cfg.in_features;
    const bfp8_matrix dym = {(void *)dy, dtype, m, n, n};
    bfp8_matrix dwm = {dw, BFP8_F32, n, k, k};
    const bfp8_matrix *c = accumulate ? &dwm : NULL;
    if (is_fp8(lin)) {
        const qbuffer dy_buffer = scratch_operand(lin, 0, lin->dy_q_scales);
        const qbuffer dyt_buffer = scratch_operand(lin, lin->dyt_q_data, lin->dyt_q_scales);
        bfp8_qmatrix dy_q = view(&dy_buffer, m, n, BFP8_GRAN_1X128);
        bfp8_qmatrix dyt_q = view(&dyt_buffer, n, m, BFP8_GRAN_1X128);
        const bfp8_quantize_options o = options_for(lin, BFP8_LINEAR_FLAG_DY);
        if (dx || has_fp8_wgrad(lin))
            BFP8_TRY(bfp8_quantize_1x128(lin->ctx, &dym, dx ? &dy_q : NULL, has_fp8_wgrad(lin) ? &dyt_q : NULL, &o));
        if (dx) {
            const bfp8_qmatrix wt_q = view(&lin->wt_q, k, n, BFP8_GRAN_128X128);
            bfp8_matrix dxm = {dx, dx_dtype, m, k, k};
            BFP8_TRY(bfp8_gemm_1d2d(lin->ctx, &dy_q, &wt_q, &dxm));
        }
        if (has_fp8_wgrad(lin)) {
            const bfp8_qmatrix xt_q = view(&lin->xt_q, k, m, BFP8_GRAN_1X128);
            return bfp8_gemm_1d1d(lin->ctx, &dyt_q, &xt_q, c, &dwm);
        }
    } else if (dx) {
        /* dx[M, K] = dy[M, N] . W[N, K]: W as stored is op(B)^T, i.e. B transposed */
        const bfp8_matrix w = {lin->w_bf16, BFP8_BF16, n, k, k};
        bfp8_matrix dxm = {dx, BFP8_BF16, m, k, k};
        BFP8_TRY(bfp8_gemm_bf16(lin->ctx, &dym, 0, &w, 1, NULL, &dxm));
    }
    /* dW[N, K] = dy^T[N, M] . x[M, K]: both stored M-major, so both transposed */
    const bfp8_matrix xm = {(void *)lin->x_saved, BFP8_BF16, m, k, k};
    return bfp8_gemm_bf16(lin->ctx, &dym, 1, &xm, 1, c, &dwm);
}

bfp8_status bfp8_linear_backward(bfp8_linear *lin, const uint16_t *dy, uint16_t *dx, float *dw, int accumulate) {
    return linear_backward(lin, dy, BFP8_BF16, dx, BFP8_BF16, dw, accumulate, "bfp8_linear_backward");
}

bfp8_status bfp8_linear_backward_f32(bfp8_linear *lin, const float *dy, float *dx, float *dw, int accumulate) {
    return linear_backward(lin, dy, BFP8_F32, dx, BFP8_F32, dw, accumulate, "bfp8_linear_backward_f32");
}

bfp8_status bfp8_linear_backward_f32_dy(bfp8_linear *lin, const float *dy, uint16_t *dx, float *dw, int accumulate) {
    return linear_backward(lin, dy, BFP8_F32, dx, BFP8_BF16, dw, accumulate, "bfp8_linear_backward_f32_dy");
}

/* ------------------------------------------------------------------------ */
/* Inputs quantized by the caller (internal.h)                               */

/* The fp8-blockwise recipe and a token count the layer takes. */
static bfp8_status check_prequantized(const bfp8_linear *lin, int64_t tokens, const char *fn) {
    if (!lin) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: lin is NULL", fn);
    BFP8_TRY(check_ready(lin, fn));
    if (!has_fp8_wgrad(lin))
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: an input quantized by the caller needs the fp8-blockwise recipe",
                         fn);
    if (tokens < 1 || tokens > lin->cfg.max_tokens)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: tokens %lld, expected 1..max_tokens (%lld)", fn, (long long)tokens,
                         (long long)lin->cfg.max_tokens);
    return BFP8_OK;
}

bfp8_status bfp8_linear_input_views(bfp8_linear *lin, int64_t tokens, bfp8_qmatrix *x_q, bfp8_qmatrix *xt_q,
                                    bfp8_quantize_options *options) {
    BFP8_TRY(check_prequantized(lin, tokens, "bfp8_linear_input_views"));
    const int64_t k = lin->cfg.in_features;
    const qbuffer x_buffer = scratch_operand(lin, 0, lin->x_q_scales);
    *x_q = view(&x_buffer, tokens, k, BFP8_GRAN_1X128);
    *xt_q = view(&lin->xt_q, k, tokens, BFP8_GRAN_1X128);
    *options = options_for(lin, BFP8_LINEAR_FLAG_X);
    lin->tokens = 0; /* until the forward */
    return BFP8_OK;
}

bfp8_status bfp8_linear_forward_quantized(bfp8_linear *lin, int64_t tokens, void *y, bfp8_dtype y_dtype) {
    static const char fn[] = "bfp8_linear_forward_quantized";
    BFP8_TRY(check_prequantized(lin, tokens, fn));
    BFP8_TRY(check_activation_pointer(lin, y, y_dtype, "bfp8_linear_forward_quantized: y"));
    const int64_t n = lin->cfg.out_features, k = lin->cfg.in_features;
    const qbuffer x_buffer = scratch_operand(lin, 0, lin->x_q_scales);
    const bfp8_qmatrix x_q = view(&x_buffer, tokens, k, BFP8_GRAN_1X128);
    const bfp8_qmatrix w_q = view(&lin->w_q, n, k, BFP8_GRAN_128X128);
    bfp8_matrix ym = {y, y_dtype, tokens, n, n};
    BFP8_TRY(bfp8_gemm_1d2d(lin->ctx, &x_q, &w_q, &ym));
    lin->x_saved = NULL;
    lin->tokens = tokens;
    return BFP8_OK;
}

bfp8_status bfp8_linear_dy_views(bfp8_linear *lin, bfp8_qmatrix *dy_q, bfp8_qmatrix *dyt_q,
                                 bfp8_quantize_options *options) {
    static const char fn[] = "bfp8_linear_dy_views";
    if (!lin) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: lin is NULL", fn);
    if (lin->tokens == 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: no forward to differentiate", fn);
    BFP8_TRY(check_prequantized(lin, lin->tokens, fn));
    const int64_t m = lin->tokens, n = lin->cfg.out_features;
    const qbuffer dy_buffer = scratch_operand(lin, 0, lin->dy_q_scales);
    const qbuffer dyt_buffer = scratch_operand(lin, lin->dyt_q_data, lin->dyt_q_scales);
    *dy_q = view(&dy_buffer, m, n, BFP8_GRAN_1X128);
    *dyt_q = view(&dyt_buffer, n, m, BFP8_GRAN_1X128);
    *options = options_for(lin, BFP8_LINEAR_FLAG_DY);
    return BFP8_OK;
}

bfp8_status bfp8_linear_backward_quantized(bfp8_linear *lin, void *dx, bfp8_dtype dx_dtype, float *dw,
                                           int accumulate) {
    static const char fn[] = "bfp8_linear_backward_quantized";
    if (!lin) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: lin is NULL", fn);
    if (lin->tokens == 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: no forward to differentiate", fn);
    BFP8_TRY(check_prequantized(lin, lin->tokens, fn));
    if (accumulate != 0 && accumulate != 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: accumulate must be 0 or 1", fn);
    if (dx) BFP8_TRY(check_activation_pointer(lin, dx, dx_dtype, "bfp8_linear_backward_quantized: dx"));
    BFP8_TRY(check_activation_pointer(lin, dw, BFP8_F32, "bfp8_linear_backward_quantized: dw"));
    const int64_t m = lin->tokens, n = lin->cfg.out_features, k = lin->cfg.in_features;
    const qbuffer dy_buffer = scratch_operand(lin, 0, lin->dy_q_scales);
    const qbuffer dyt_buffer = scratch_operand(lin, lin->dyt_q_data, lin->dyt_q_scales);
    const bfp8_qmatrix dy_q = view(&dy_buffer, m, n, BFP8_GRAN_1X128);
    const bfp8_qmatrix dyt_q = view(&dyt_buffer, n, m, BFP8_GRAN_1X128);
    if (dx) {
        const bfp8_qmatrix wt_q = view(&lin->wt_q, k, n, BFP8_GRAN_128X128);
        bfp8_matrix dxm = {dx, dx_dtype, m, k, k};
        BFP8_TRY(bfp8_gemm_1d2d(lin->ctx, &dy_q, &wt_q, &dxm));
    }
    const bfp8_qmatrix xt_q = view(&lin->xt_q, k, m, BFP8_GRAN_1X128);
    bfp8_matrix dwm = {dw, BFP8_F32, n, k, k};
    return bfp8_gemm_1d1d(lin->ctx, &dyt_q, &xt_q, accumulate ? &dwm : NULL, &dwm);
}
