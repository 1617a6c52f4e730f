/*
 * swiglu_ops.c - SwiGLU fused with the 1x128 quantizer (internal.h):
 * validate, then dispatch to the CPU reference (src/cpu/swiglu_quantize_cpu.c)
 * or the CUDA kernel (src/cuda/quantize_swiglu.cu).
 */
#include "internal.h"

/* A bf16 matrix of rows x cols (cols 0: any even count, for gate_up). */
static bfp8_status check_bf16(const bfp8_context *ctx, const bfp8_matrix *m, int64_t rows, int64_t cols,
                              const char *what) {
    if (!m) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s is NULL", what);
    BFP8_TRY(bfp8_check_matrix(ctx, m, what));
    if (m->dtype != BFP8_BF16)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: dtype %s (expected bf16)", what, bfp8_dtype_name(m->dtype));
    if ((rows >= 0 && m->rows != rows) || (cols > 0 && m->cols != cols) || m->cols % 2 != 0)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: shape %lld x %lld does not fit", what, (long long)m->rows,
                         (long long)m->cols);
    return BFP8_OK;
}

static bfp8_status check_out(const bfp8_context *ctx, const bfp8_qmatrix *q, int64_t rows, int64_t cols,
                             const char *what) {
    if (!q) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s is NULL", what);
    BFP8_TRY(bfp8_check_qmatrix(ctx, q, BFP8_GRAN_1X128, what));
    if (q->rows != rows || q->cols != cols)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: shape %lld x %lld, expected %lld x %lld", what, (long long)q->rows,
                         (long long)q->cols, (long long)rows, (long long)cols);
    return BFP8_OK;
}

bfp8_status bfp8_swiglu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                       bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    static const char fn[] = "bfp8_swiglu_quantize_1x128";
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    BFP8_TRY(check_bf16(ctx, gate_up, -1, 0, "bfp8_swiglu_quantize_1x128: gate_up"));
    const int64_t tokens = gate_up->rows, hidden = gate_up->cols / 2;
    BFP8_TRY(check_out(ctx, out_rows, tokens, hidden, "bfp8_swiglu_quantize_1x128: out_rows"));
    BFP8_TRY(check_out(ctx, out_cols, hidden, tokens, "bfp8_swiglu_quantize_1x128: out_cols"));
    BFP8_TRY(bfp8_check_quantize_options(ctx, options, fn));
    if (ctx->backend == BFP8_BACKEND_CUDA)
        return bfp8_cuda_swiglu_quantize_1x128(ctx, gate_up, out_rows, out_cols, options);
    return bfp8_cpu_swiglu_quantize_1x128(ctx, gate_up, out_rows, out_cols, options);
}

bfp8_status bfp8_swiglu_backward_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *dout,
                                                const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                                bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    static const char fn[] = "bfp8_swiglu_backward_quantize_1x128";
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    if (!dout) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: dout is NULL", fn);
    const int64_t tokens = dout->rows, hidden = dout->cols;
    if (hidden % 128 != 0)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: hidden %lld is not a multiple of 128", fn, (long long)hidden);
    BFP8_TRY(check_bf16(ctx, dout, tokens, hidden, "bfp8_swiglu_backward_quantize_1x128: dout"));
    BFP8_TRY(check_bf16(ctx, gate_up, tokens, 2 * hidden, "bfp8_swiglu_backward_quantize_1x128: gate_up"));
    BFP8_TRY(check_out(ctx, out_rows, tokens, 2 * hidden, "bfp8_swiglu_backward_quantize_1x128: out_rows"));
    BFP8_TRY(check_out(ctx, out_cols, 2 * hidden, tokens, "bfp8_swiglu_backward_quantize_1x128: out_cols"));
    BFP8_TRY(bfp8_check_quantize_options(ctx, options, fn));
    if (ctx->backend == BFP8_BACKEND_CUDA)
        return bfp8_cuda_swiglu_backward_quantize_1x128(ctx, dout, gate_up, out_rows, out_cols, options);
    return bfp8_cpu_swiglu_backward_quantize_1x128(ctx, dout, gate_up, out_rows, out_cols, options);
}
