/*
 * ops.c - the public ops: validate once, then dispatch to the CPU reference
 * (src/cpu) or the CUDA kernels (src/cuda), which share a signature.
 */
#include <stdio.h>

#include "internal.h"

static bfp8_status check_context(const bfp8_context *ctx, const char *fn) {
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    return BFP8_OK;
}

static int is_cuda(const bfp8_context *ctx) { return ctx->backend == BFP8_BACKEND_CUDA; }

static bfp8_status check_high_precision(const bfp8_matrix *m, const char *what) {
    if (m->dtype != BFP8_F32 && m->dtype != BFP8_BF16)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: dtype %s (expected f32 or bf16)", what,
                         bfp8_dtype_name(m->dtype));
    return BFP8_OK;
}

static bfp8_status check_shape(const char *what, int64_t rows, int64_t cols, int64_t want_rows,
                               int64_t want_cols) {
    if (rows != want_rows || cols != want_cols)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: shape %lld x %lld, expected %lld x %lld", what,
                         (long long)rows, (long long)cols, (long long)want_rows,
                         (long long)want_cols);
    return BFP8_OK;
}

bfp8_status bfp8_check_quantize_options(const bfp8_context *ctx, const bfp8_quantize_options *o,
                                          const char *fn) {
    if (!o) return BFP8_OK;
    if (o->pow2_scales != 0 && o->pow2_scales != 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: pow2_scales must be 0 or 1", fn);
    if (!o->nonfinite_flag) return BFP8_OK;
    if ((uintptr_t)o->nonfinite_flag % sizeof(uint32_t) != 0)
        return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s: nonfinite_flag not 4-byte aligned", fn);
    char what[64];
    snprintf(what, sizeof what, "%s: nonfinite_flag", fn);
    return bfp8_check_pointer(ctx, o->nonfinite_flag, what);
}

/* ------------------------------------------------------------------------ */

bfp8_status bfp8_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out_rows,
                                bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    static const char fn[] = "bfp8_quantize_1x128";
    BFP8_TRY(check_context(ctx, fn));
    BFP8_TRY(bfp8_check_matrix(ctx, x, "bfp8_quantize_1x128: x"));
    BFP8_TRY(check_high_precision(x, "bfp8_quantize_1x128: x"));
    if (!out_rows && !out_cols)
        return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: out_rows and out_cols are both NULL", fn);
    if (out_rows) {
        BFP8_TRY(bfp8_check_qmatrix(ctx, out_rows, BFP8_GRAN_1X128, "bfp8_quantize_1x128: out_rows"));
        BFP8_TRY(check_shape("bfp8_quantize_1x128: out_rows", out_rows->rows, out_rows->cols,
                             x->rows, x->cols));
    }
    if (out_cols) {
        BFP8_TRY(bfp8_check_qmatrix(ctx, out_cols, BFP8_GRAN_1X128, "bfp8_quantize_1x128: out_cols"));
        BFP8_TRY(check_shape("bfp8_quantize_1x128: out_cols", out_cols->rows, out_cols->cols,
                             x->cols, x->rows));
    }
    BFP8_TRY(bfp8_check_quantize_options(ctx, options, fn));
    return is_cuda(ctx) ? bfp8_cuda_quantize_1x128(ctx, x, out_rows, out_cols, options)
                        : bfp8_cpu_quantize_1x128(ctx, x, out_rows, out_cols, options);
}

bfp8_status bfp8_quantize_128x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out,
                                  bfp8_qmatrix *out_t, const bfp8_quantize_options *options) {
    static const char fn[] = "bfp8_quantize_128x128";
    BFP8_TRY(check_context(ctx, fn));
    BFP8_TRY(bfp8_check_matrix(ctx, x, "bfp8_quantize_128x128: x"));
    BFP8_TRY(check_high_precision(x, "bfp8_quantize_128x128: x"));
    BFP8_TRY(bfp8_check_qmatrix(ctx, out, BFP8_GRAN_128X128, "bfp8_quantize_128x128: out"));
    BFP8_TRY(check_shape("bfp8_quantize_128x128: out", out->rows, out->cols, x->rows, x->cols));
    if (out_t) {
        BFP8_TRY(bfp8_check_qmatrix(ctx, out_t, BFP8_GRAN_128X128, "bfp8_quantize_128x128: out_t"));
        BFP8_TRY(check_shape("bfp8_quantize_128x128: out_t", out_t->rows, out_t->cols, x->cols,
                             x->rows));
    }
    BFP8_TRY(bfp8_check_quantize_options(ctx, options, fn));
    return is_cuda(ctx) ? bfp8_cuda_quantize_128x128(ctx, x, 0, out, out_t, options)
                        : bfp8_cpu_quantize_128x128(ctx, x, 0, out, out_t, options);
}

bfp8_status bfp8_quantize_128x128_stacked(bfp8_context *ctx, const bfp8_matrix *x, int64_t group_rows,
                                          bfp8_qmatrix *out, bfp8_qmatrix *out_t,
                                          const bfp8_quantize_options *options) {
    static const char fn[] = "bfp8_quantize_128x128_stacked";
    BFP8_TRY(check_context(ctx, fn));
    BFP8_TRY(bfp8_check_matrix(ctx, x, "bfp8_quantize_128x128_stacked: x"));
    BFP8_TRY(check_high_precision(x, "bfp8_quantize_128x128_stacked: x"));
    if (group_rows < 128 || group_rows % 128 || x->rows % group_rows || x->cols % 128)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: x is %lld x %lld with group_rows %lld (group_rows and the columns "
                         "multiples of 128, the rows a multiple of group_rows)", fn, (long long)x->rows,
                         (long long)x->cols, (long long)group_rows);
    BFP8_TRY(bfp8_check_qmatrix(ctx, out, BFP8_GRAN_128X128, "bfp8_quantize_128x128_stacked: out"));
    BFP8_TRY(check_shape("bfp8_quantize_128x128_stacked: out", out->rows, out->cols, x->rows, x->cols));
    if (out_t) {
        BFP8_TRY(bfp8_check_qmatrix(ctx, out_t, BFP8_GRAN_128X128, "bfp8_quantize_128x128_stacked: out_t"));
        BFP8_TRY(check_shape("bfp8_quantize_128x128_stacked: out_t", out_t->rows, out_t->cols,
                             x->rows / group_rows * x->cols, group_rows));
    }
    BFP8_TRY(bfp8_check_quantize_options(ctx, options, fn));
    return is_cuda(ctx) ? bfp8_cuda_quantize_128x128(ctx, x, group_rows, out, out_t, options)
                        : bfp8_cpu_quantize_128x128(ctx, x, group_rows, out, out_t, options);
}

bfp8_status bfp8_dequantize(bfp8_context *ctx, const bfp8_qmatrix *q, bfp8_matrix *out) {
    BFP8_TRY(check_context(ctx, "bfp8_dequantize"));
    if (!q) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_dequantize: q is NULL");
    BFP8_TRY(bfp8_check_qmatrix(ctx, q, q->granularity == BFP8_GRAN_128X128 ? BFP8_GRAN_128X128
                                                                              : BFP8_GRAN_1X128,
                                "bfp8_dequantize: q"));
    BFP8_TRY(bfp8_check_matrix(ctx, out, "bfp8_dequantize: out"));
    BFP8_TRY(check_high_precision(out, "bfp8_dequantize: out"));
    BFP8_TRY(check_shape("bfp8_dequantize: out", out->rows, out->cols, q->rows, q->cols));
    return is_cuda(ctx) ? bfp8_cuda_dequantize(ctx, q, out) : bfp8_cpu_dequantize(ctx, q, out);
}

bfp8_status bfp8_convert(bfp8_context *ctx, const bfp8_matrix *src, bfp8_matrix *dst) {
    BFP8_TRY(check_context(ctx, "bfp8_convert"));
    BFP8_TRY(bfp8_check_matrix(ctx, src, "bfp8_convert: src"));
    BFP8_TRY(bfp8_check_matrix(ctx, dst, "bfp8_convert: dst"));
    BFP8_TRY(check_shape("bfp8_convert: dst", dst->rows, dst->cols, src->rows, src->cols));
    return is_cuda(ctx) ? bfp8_cuda_convert(ctx, src, dst) : bfp8_cpu_convert(ctx, src, dst);
}

/* ------------------------------------------------------------------------ */

static bfp8_status check_output(const bfp8_context *ctx, const bfp8_matrix *d, int64_t rows,
                                int64_t cols, const char *what) {
    BFP8_TRY(bfp8_check_matrix(ctx, d, what));
    BFP8_TRY(check_high_precision(d, what));
    return check_shape(what, d->rows, d->cols, rows, cols);
}

static bfp8_status check_accumulator(const bfp8_context *ctx, const bfp8_matrix *c,
                                     const bfp8_matrix *d, const char *what) {
    if (!c) return BFP8_OK;
    BFP8_TRY(check_output(ctx, c, d->rows, d->cols, what));
    if (c->dtype != BFP8_F32 || d->dtype != BFP8_F32)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: accumulation needs f32 c and d", what);
    return BFP8_OK;
}

/* The operands of an FP8 GEMM: a 1x128, b of granularity b_gran, with the
 * same contraction length (their cols; `contraction` names it). */
static bfp8_status check_fp8_operands(const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                      bfp8_granularity b_gran, const char *fn, const char *contraction) {
    char what[64];
    BFP8_TRY(check_context(ctx, fn));
    snprintf(what, sizeof what, "%s: a", fn);
    BFP8_TRY(bfp8_check_qmatrix(ctx, a, BFP8_GRAN_1X128, what));
    snprintf(what, sizeof what, "%s: b", fn);
    BFP8_TRY(bfp8_check_qmatrix(ctx, b, b_gran, what));
    if (a->cols != b->cols)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: a is %lld x %lld but b is %lld x %lld (%s differs)", fn,
                         (long long)a->rows, (long long)a->cols, (long long)b->rows, (long long)b->cols,
                         contraction);
    return BFP8_OK;
}

bfp8_status bfp8_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                           bfp8_matrix *d) {
    BFP8_TRY(check_fp8_operands(ctx, a, b, BFP8_GRAN_128X128, "bfp8_gemm_1d2d", "K"));
    BFP8_TRY(check_output(ctx, d, a->rows, b->rows, "bfp8_gemm_1d2d: d"));
    return is_cuda(ctx) ? bfp8_cuda_gemm_1d2d(ctx, a, b, d) : bfp8_cpu_gemm_1d2d(ctx, a, b, d);
}

bfp8_status bfp8_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                           const bfp8_matrix *c, bfp8_matrix *d) {
    BFP8_TRY(check_fp8_operands(ctx, a, b, BFP8_GRAN_1X128, "bfp8_gemm_1d1d", "the token count M"));
    BFP8_TRY(check_output(ctx, d, a->rows, b->rows, "bfp8_gemm_1d1d: d"));
    BFP8_TRY(check_accumulator(ctx, c, d, "bfp8_gemm_1d1d: c"));
    return is_cuda(ctx) ? bfp8_cuda_gemm_1d1d(ctx, a, b, c, d) : bfp8_cpu_gemm_1d1d(ctx, a, b, c, d);
}

/* Grouped GEMMs: G + 1 host offsets from 0, never decreasing, multiples of
 * BFP8_GROUP_ALIGN, the last within the `tokens` of the token matrix. */
static bfp8_status check_group_offsets(const int64_t *offsets, int num_groups, int64_t tokens, const char *fn) {
    if (num_groups < 1) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: num_groups %d (must be >= 1)", fn, num_groups);
    if (!offsets) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: group_offsets is NULL", fn);
    if (offsets[0] != 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: group_offsets[0] is %lld (must be 0)", fn,
                         (long long)offsets[0]);
    for (int g = 1; g <= num_groups; ++g) {
        if (offsets[g] < offsets[g - 1])
            return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: group_offsets[%d] = %lld < group_offsets[%d] = %lld", fn, g,
                             (long long)offsets[g], g - 1, (long long)offsets[g - 1]);
        if (offsets[g] % BFP8_GROUP_ALIGN != 0)
            return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                             "%s: group_offsets[%d] = %lld is not a multiple of %d (pad every group's tokens to it)",
                             fn, g, (long long)offsets[g], BFP8_GROUP_ALIGN);
    }
    if (offsets[num_groups] > tokens)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: group_offsets[%d] = %lld is past the %lld tokens", fn, num_groups,
                         (long long)offsets[num_groups], (long long)tokens);
    return BFP8_OK;
}

/* The offsets of a grouped GEMM: in host memory, checked value by value
 * (check_group_offsets); in backend memory, only where they are (the
 * kernels clamp them, see blockfp8.h). */
static bfp8_status check_offsets(const bfp8_context *ctx, const int64_t *offsets, int num_groups, int64_t tokens,
                                 int on_backend, const char *fn) {
    if (!on_backend) return check_group_offsets(offsets, num_groups, tokens, fn);
    if (num_groups < 1) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: num_groups %d (must be >= 1)", fn, num_groups);
    if ((uintptr_t)offsets % sizeof(int64_t) != 0)
        return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s: group_offsets not 8-byte aligned", fn);
    char what[96];
    snprintf(what, sizeof what, "%s: group_offsets", fn);
    return bfp8_check_pointer(ctx, offsets, what);
}

static bfp8_status gemm_1d2d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                     const int64_t *group_offsets, int num_groups, bfp8_matrix *d, int on_backend,
                                     const char *fn) {
    BFP8_TRY(check_fp8_operands(ctx, a, b, BFP8_GRAN_128X128, fn, "K"));
    BFP8_TRY(check_offsets(ctx, group_offsets, num_groups, a->rows, on_backend, fn));
    if (b->rows % num_groups != 0 || (b->rows / num_groups) % 128 != 0)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: b has %lld rows, not %d groups of N rows with N a multiple of 128", fn,
                         (long long)b->rows, num_groups);
    char what[96];
    snprintf(what, sizeof what, "%s: d", fn);
    BFP8_TRY(check_output(ctx, d, a->rows, b->rows / num_groups, what));
    return is_cuda(ctx) ? bfp8_cuda_gemm_1d2d_grouped(ctx, a, b, group_offsets, num_groups, on_backend, d)
                        : bfp8_cpu_gemm_1d2d_grouped(ctx, a, b, group_offsets, num_groups, on_backend, d);
}

static bfp8_status gemm_1d1d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                     const int64_t *group_offsets, int num_groups, const bfp8_matrix *c,
                                     bfp8_matrix *d, int on_backend, const char *fn) {
    BFP8_TRY(check_fp8_operands(ctx, a, b, BFP8_GRAN_1X128, fn, "the token count M"));
    BFP8_TRY(check_offsets(ctx, group_offsets, num_groups, a->cols, on_backend, fn));
    if (a->rows > INT64_MAX / num_groups)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: %d groups of %lld rows overflow", fn, num_groups, (long long)a->rows);
    char what[96];
    snprintf(what, sizeof what, "%s: d", fn);
    BFP8_TRY(check_output(ctx, d, a->rows * num_groups, b->rows, what));
    snprintf(what, sizeof what, "%s: c", fn);
    BFP8_TRY(check_accumulator(ctx, c, d, what));
    return is_cuda(ctx) ? bfp8_cuda_gemm_1d1d_grouped(ctx, a, b, group_offsets, num_groups, on_backend, c, d)
                        : bfp8_cpu_gemm_1d1d_grouped(ctx, a, b, group_offsets, num_groups, on_backend, c, d);
}

bfp8_status bfp8_gemm_1d2d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                   const int64_t *group_offsets, int num_groups, bfp8_matrix *d) {
    return gemm_1d2d_grouped(ctx, a, b, group_offsets, num_groups, d, 0, "bfp8_gemm_1d2d_grouped");
}

bfp8_status bfp8_gemm_1d1d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                   const int64_t *group_offsets, int num_groups, const bfp8_matrix *c,
                                   bfp8_matrix *d) {
    return gemm_1d1d_grouped(ctx, a, b, group_offsets, num_groups, c, d, 0, "bfp8_gemm_1d1d_grouped");
}

bfp8_status bfp8_gemm_1d2d_grouped_device_offsets(bfp8_context *ctx, const bfp8_qmatrix *a,
                                                  const bfp8_qmatrix *b, const int64_t *group_offsets,
                                                  int num_groups, bfp8_matrix *d) {
    return gemm_1d2d_grouped(ctx, a, b, group_offsets, num_groups, d, 1, "bfp8_gemm_1d2d_grouped_device_offsets");
}

bfp8_status bfp8_gemm_1d1d_grouped_device_offsets(bfp8_context *ctx, const bfp8_qmatrix *a,
                                                  const bfp8_qmatrix *b, const int64_t *group_offsets,
                                                  int num_groups, const bfp8_matrix *c, bfp8_matrix *d) {
    return gemm_1d1d_grouped(ctx, a, b, group_offsets, num_groups, c, d, 1,
                             "bfp8_gemm_1d1d_grouped_device_offsets");
}

bfp8_status bfp8_gemm_bf16(bfp8_context *ctx, const bfp8_matrix *a, int a_transposed,
                           const bfp8_matrix *b, int b_transposed, const bfp8_matrix *c,
                           bfp8_matrix *d) {
    static const char fn[] = "bfp8_gemm_bf16";
    BFP8_TRY(check_context(ctx, fn));
    BFP8_TRY(bfp8_check_matrix(ctx, a, "bfp8_gemm_bf16: a"));
    BFP8_TRY(bfp8_check_matrix(ctx, b, "bfp8_gemm_bf16: b"));
    if (a->dtype != BFP8_BF16 || b->dtype != BFP8_BF16)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: a and b must be bf16", fn);
    if ((a_transposed != 0 && a_transposed != 1) || (b_transposed != 0 && b_transposed != 1))
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: a_transposed / b_transposed must be 0 or 1", fn);
    const int64_t m = a_transposed ? a->cols : a->rows, ka = a_transposed ? a->rows : a->cols;
    const int64_t n = b_transposed ? b->cols : b->rows, kb = b_transposed ? b->rows : b->cols;
    if (ka != kb)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: op(a) is %lld x %lld but op(b) is %lld x %lld", fn,
                         (long long)m, (long long)ka, (long long)n, (long long)kb);
    BFP8_TRY(check_output(ctx, d, m, n, "bfp8_gemm_bf16: d"));
    BFP8_TRY(check_accumulator(ctx, c, d, "bfp8_gemm_bf16: c"));
    return is_cuda(ctx) ? bfp8_cuda_gemm_bf16(ctx, a, a_transposed, b, b_transposed, c, d)
                        : bfp8_cpu_gemm_bf16(ctx, a, a_transposed, b, b_transposed, c, d);
}
