/*
 * layout.c - the canonical quantized layouts and the argument checks that
 * every op shares (docs/RECIPE.md section 6: a status and a message, nothing
 * written).
 */
#include "internal.h"

/* b > 0; no intermediate overflows, whatever a is */
int64_t bfp8_ceil_div(int64_t a, int64_t b) { return a / b + (a % b > 0); }
int64_t bfp8_round_up(int64_t a, int64_t multiple) { return bfp8_ceil_div(a, multiple) * multiple; }

/* The canonical layout's ld, scale_ld and byte counts, or 0 when one of them
 * does not fit in an int64_t (sizes of ~2^62 and more). */
static int canonical_sizes(int64_t rows, int64_t cols, bfp8_granularity granularity, int64_t *ld,
                           int64_t *scale_ld, int64_t *data_bytes, int64_t *scale_bytes) {
    const int64_t kblocks = bfp8_ceil_div(cols, 128), rblocks = bfp8_ceil_div(rows, 128);
    int64_t span;
    if (cols > INT64_MAX - 15 || rows > INT64_MAX - 3) return 0;
    *ld = bfp8_round_up(cols, 16);
    *scale_ld = granularity == BFP8_GRAN_1X128 ? bfp8_round_up(rows, 4) : kblocks;
    if (__builtin_mul_overflow(rows, *ld, data_bytes)) return 0;
    if (granularity == BFP8_GRAN_1X128) {
        if (__builtin_mul_overflow(kblocks - 1, *scale_ld, &span) || __builtin_add_overflow(span, rows, &span))
            return 0;
    } else if (__builtin_mul_overflow(rblocks, kblocks, &span)) {
        return 0;
    }
    return !__builtin_mul_overflow(span, (int64_t)sizeof(float), scale_bytes);
}

bfp8_status bfp8_qmatrix_layout(bfp8_qmatrix *q, int64_t rows, int64_t cols,
                                bfp8_granularity granularity, size_t *data_bytes,
                                size_t *scale_bytes) {
    if (!q) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_qmatrix_layout: q is NULL");
    if (rows < 1 || cols < 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_qmatrix_layout: shape %lld x %lld",
                         (long long)rows, (long long)cols);
    if (granularity != BFP8_GRAN_1X128 && granularity != BFP8_GRAN_128X128)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_qmatrix_layout: unknown granularity %d",
                         (int)granularity);
    int64_t ld, scale_ld, data, scales;
    if (!canonical_sizes(rows, cols, granularity, &ld, &scale_ld, &data, &scales))
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_qmatrix_layout: shape %lld x %lld: its bytes overflow",
                         (long long)rows, (long long)cols);
    q->data = NULL;
    q->scales = NULL;
    q->dtype = BFP8_E4M3;
    q->granularity = granularity;
    q->rows = rows;
    q->cols = cols;
    q->ld = ld;
    q->scale_ld = scale_ld;
    if (data_bytes) *data_bytes = (size_t)data;
    if (scale_bytes) *scale_bytes = (size_t)scales;
    return BFP8_OK;
}

void bfp8_clamp_group_offsets(const int64_t *in, int num_groups, int64_t tokens, int64_t *out) {
    const int64_t last = tokens / 128 * 128; /* every out[g] lies in [0, last] */
    out[0] = 0;
    for (int g = 0; g < num_groups; ++g) {
        int64_t v = in[g + 1] / 128 * 128;
        v = v < out[g] ? out[g] : v;
        out[g + 1] = v > last ? last : v;
    }
}

int64_t bfp8_qmatrix_scale_span(const bfp8_qmatrix *q) {
    const int64_t kblocks = bfp8_ceil_div(q->cols, 128);
    if (q->granularity == BFP8_GRAN_1X128) return (kblocks - 1) * q->scale_ld + q->rows;
    return (bfp8_ceil_div(q->rows, 128) - 1) * q->scale_ld + kblocks;
}

bfp8_status bfp8_check_pointer(const bfp8_context *ctx, const void *ptr, const char *what) {
    if (!ptr) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s is NULL", what);
    if (ctx->backend == BFP8_BACKEND_CUDA) return bfp8_cuda_check_pointer(ctx, ptr, what);
    return BFP8_OK;
}

bfp8_status bfp8_check_matrix(const bfp8_context *ctx, const bfp8_matrix *m, const char *what) {
    if (!m) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: the matrix view is NULL", what);
    if (bfp8_dtype_size(m->dtype) == 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: unknown dtype %d", what, (int)m->dtype);
    if (m->rows < 1 || m->cols < 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: shape %lld x %lld (every size must be >= 1)",
                         what, (long long)m->rows, (long long)m->cols);
    if (m->ld < m->cols)
        return bfp8_fail(BFP8_ERR_LAYOUT, "%s: ld %lld < cols %lld", what, (long long)m->ld,
                         (long long)m->cols);
    if ((uintptr_t)m->data % bfp8_dtype_size(m->dtype) != 0)
        return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s: data pointer not aligned to its element size", what);
    return bfp8_check_pointer(ctx, m->data, what);
}

bfp8_status bfp8_check_qmatrix(const bfp8_context *ctx, const bfp8_qmatrix *q, bfp8_granularity gran,
                               const char *what) {
    if (!q) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: the quantized view is NULL", what);
    if (q->dtype != BFP8_E4M3)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: dtype %s (only e4m3 is quantized to)", what,
                         bfp8_dtype_name(q->dtype));
    if (q->granularity != gran)
        return bfp8_fail(BFP8_ERR_LAYOUT, "%s: granularity %s, expected %s", what,
                         q->granularity == BFP8_GRAN_1X128 ? "1x128"
                         : q->granularity == BFP8_GRAN_128X128 ? "128x128" : "unknown",
                         gran == BFP8_GRAN_1X128 ? "1x128" : "128x128");
    if (q->rows < 1 || q->cols < 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: shape %lld x %lld (every size must be >= 1)",
                         what, (long long)q->rows, (long long)q->cols);
    if (q->ld < q->cols)
        return bfp8_fail(BFP8_ERR_LAYOUT, "%s: ld %lld < cols %lld", what, (long long)q->ld,
                         (long long)q->cols);
    if (gran == BFP8_GRAN_1X128 && (q->scale_ld < q->rows || q->scale_ld % 4 != 0))
        return bfp8_fail(BFP8_ERR_LAYOUT,
                         "%s: 1x128 scale_ld %lld must be >= rows %lld and a multiple of 4", what,
                         (long long)q->scale_ld, (long long)q->rows);
    if (gran == BFP8_GRAN_128X128 && q->scale_ld < bfp8_ceil_div(q->cols, 128))
        return bfp8_fail(BFP8_ERR_LAYOUT, "%s: 128x128 scale_ld %lld < ceil(cols/128) = %lld", what,
                         (long long)q->scale_ld, (long long)bfp8_ceil_div(q->cols, 128));
    if ((uintptr_t)q->scales % sizeof(float) != 0)
        return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s: scales pointer not 4-byte aligned", what);
    BFP8_TRY(bfp8_check_pointer(ctx, q->data, what));
    return bfp8_check_pointer(ctx, q->scales, what);
}
