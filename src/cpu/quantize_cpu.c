/*
 * quantize_cpu.c - CPU reference of the quantizers (docs/RECIPE.md section 3),
 * dequantize and convert.
 *
 * x is walked in 128 x 128 tiles, one OpenMP task per tile. A tile is read
 * once into fp32, and every group lying in it is quantized from that copy:
 * the 1 x 128 groups along its rows (out_rows), along its columns (out_cols,
 * written transposed) or the whole tile as one 128 x 128 block. The math of a
 * group is formats.h's, so the CUDA kernels and this file agree bit for bit.
 */
#include <stdlib.h>

#include "formats/formats.h"
#include "internal.h"

#define TILE 128

typedef struct tile {
    int64_t r0, c0; /* top-left element in x */
    int nr, nc;     /* valid rows and columns (ragged at the edges) */
    float v[TILE * TILE];
} tile;

static void load_tile(const bfp8_matrix *x, int64_t rb, int64_t cb, tile *t) {
    t->r0 = rb * TILE;
    t->c0 = cb * TILE;
    t->nr = (int)(x->rows - t->r0 < TILE ? x->rows - t->r0 : TILE);
    t->nc = (int)(x->cols - t->c0 < TILE ? x->cols - t->c0 : TILE);
    for (int i = 0; i < t->nr; ++i) {
        float *dst = t->v + i * TILE;
        if (x->dtype == BFP8_F32) {
            const float *src = (const float *)x->data + (t->r0 + i) * x->ld + t->c0;
            for (int j = 0; j < t->nc; ++j) dst[j] = src[j];
        } else {
            const uint16_t *src = (const uint16_t *)x->data + (t->r0 + i) * x->ld + t->c0;
            for (int j = 0; j < t->nc; ++j) dst[j] = bfp8_decode_bf16(src[j]);
        }
    }
}

/* Max of |v| over n values `stride` apart, as fp32 bits (NaN above Inf). */
static uint32_t amax_bits(const float *v, int64_t stride, int n) {
    uint32_t amax = 0;
    for (int i = 0; i < n; ++i) {
        const uint32_t a = bfp8_bits_of(v[i * stride]) & 0x7fffffffu;
        amax = a > amax ? a : amax;
    }
    return amax;
}

/* Quantize one group of n values (`stride` apart) to codes `out_stride` apart.
 * Returns the group's stored scale; a non-finite group sets *nonfinite. */
static float quantize_group(const float *v, int64_t stride, int n, uint8_t *out, int64_t out_stride,
                            int pow2, int *nonfinite) {
    const uint32_t amax = amax_bits(v, stride, n);
    if (bfp8_amax_bits_nonfinite(amax)) {
        for (int i = 0; i < n; ++i) out[i * out_stride] = 0x7f;
        *nonfinite = 1;
        return bfp8_float_of(BFP8_NAN_SCALE_BITS);
    }
    const float mult = bfp8_scale_multiplier(bfp8_float_of(amax), pow2);
    for (int i = 0; i < n; ++i) out[i * out_stride] = bfp8_encode_e4m3(v[i * stride] * mult);
    return 1.0f / mult;
}

static int pow2_of(const bfp8_quantize_options *options) { return options ? options->pow2_scales : 0; }

static void raise_flag(const bfp8_quantize_options *options, int nonfinite) {
    if (nonfinite && options && options->nonfinite_flag) *options->nonfinite_flag = 1;
}

/* ------------------------------------------------------------------------ */

bfp8_status bfp8_cpu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out_rows,
                                    bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    (void)ctx;
    const int pow2 = pow2_of(options);
    const int64_t row_tiles = bfp8_ceil_div(x->rows, TILE), col_tiles = bfp8_ceil_div(x->cols, TILE);
    const int64_t tiles = row_tiles * col_tiles;
    int nonfinite = 0, out_of_memory = 0;

    #pragma omp parallel reduction(| : nonfinite, out_of_memory) if (x->rows * x->cols > 16384)
    {
        tile *t = malloc(sizeof *t);
        if (!t) out_of_memory = 1;
        #pragma omp for schedule(static)
        for (int64_t ti = 0; ti < tiles; ++ti) {
            if (!t) continue;
            const int64_t rb = ti / col_tiles, cb = ti % col_tiles;
            load_tile(x, rb, cb, t);
            if (out_rows) /* group (row r, k-block cb) */
                for (int i = 0; i < t->nr; ++i) {
                    const int64_t r = t->r0 + i;
                    out_rows->scales[cb * out_rows->scale_ld + r] =
                        quantize_group(t->v + i * TILE, 1, t->nc, out_rows->data + r * out_rows->ld + t->c0,
                                       1, pow2, &nonfinite);
                }
            if (out_cols) /* row c of x^T, group (row c, k-block rb) */
                for (int j = 0; j < t->nc; ++j) {
                    const int64_t c = t->c0 + j;
                    out_cols->scales[rb * out_cols->scale_ld + c] =
                        quantize_group(t->v + j, TILE, t->nr, out_cols->data + c * out_cols->ld + t->r0,
                                       1, pow2, &nonfinite);
                }
        }
        free(t);
    }
    if (out_of_memory) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_cpu_quantize_1x128: out of host memory");
    raise_flag(options, nonfinite);
    return BFP8_OK;
}

bfp8_status bfp8_cpu_quantize_128x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out,
                                      bfp8_qmatrix *out_t, const bfp8_quantize_options *options) {
    (void)ctx;
    const int pow2 = pow2_of(options);
    const int64_t row_tiles = bfp8_ceil_div(x->rows, TILE), col_tiles = bfp8_ceil_div(x->cols, TILE);
    const int64_t tiles = row_tiles * col_tiles;
    int nonfinite = 0, out_of_memory = 0;

    #pragma omp parallel reduction(| : nonfinite, out_of_memory) if (x->rows * x->cols > 16384)
    {
        tile *t = malloc(sizeof *t);
        if (!t) out_of_memory = 1;
        #pragma omp for schedule(static)
        for (int64_t ti = 0; ti < tiles; ++ti) {
            if (!t) continue;
            const int64_t rb = ti / col_tiles, cb = ti % col_tiles;
            load_tile(x, rb, cb, t);
            uint32_t amax = 0;
            for (int i = 0; i < t->nr; ++i) {
                const uint32_t a = amax_bits(t->v + i * TILE, 1, t->nc);
                amax = a > amax ? a : amax;
            }
            float scale;
            if (bfp8_amax_bits_nonfinite(amax)) {
                nonfinite = 1;
                scale = bfp8_float_of(BFP8_NAN_SCALE_BITS);
                for (int i = 0; i < t->nr; ++i)
                    for (int j = 0; j < t->nc; ++j) {
                        out->data[(t->r0 + i) * out->ld + t->c0 + j] = 0x7f;
                        if (out_t) out_t->data[(t->c0 + j) * out_t->ld + t->r0 + i] = 0x7f;
                    }
            } else {
                const float mult = bfp8_scale_multiplier(bfp8_float_of(amax), pow2);
                scale = 1.0f / mult;
                for (int i = 0; i < t->nr; ++i) {
                    uint8_t *row = out->data + (t->r0 + i) * out->ld + t->c0;
                    for (int j = 0; j < t->nc; ++j) row[j] = bfp8_encode_e4m3(t->v[i * TILE + j] * mult);
                    if (out_t)
                        for (int j = 0; j < t->nc; ++j) out_t->data[(t->c0 + j) * out_t->ld + t->r0 + i] = row[j];
                }
            }
            out->scales[rb * out->scale_ld + cb] = scale;
            if (out_t) out_t->scales[cb * out_t->scale_ld + rb] = scale;
        }
        free(t);
    }
    if (out_of_memory)
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_cpu_quantize_128x128: out of host memory");
    raise_flag(options, nonfinite);
    return BFP8_OK;
}

/* ------------------------------------------------------------------------ */

static float load_any(bfp8_dtype t, const void *p, int64_t i) {
    switch (t) {
    case BFP8_F32: return ((const float *)p)[i];
    case BFP8_BF16: return bfp8_decode_bf16(((const uint16_t *)p)[i]);
    case BFP8_E4M3: return bfp8_decode_e4m3(((const uint8_t *)p)[i]);
    case BFP8_E5M2: return bfp8_decode_e5m2(((const uint8_t *)p)[i]);
    }
    return 0.0f;
}

static void store_any(bfp8_dtype t, void *p, int64_t i, float v) {
    switch (t) {
    case BFP8_F32: ((float *)p)[i] = v; break;
    case BFP8_BF16: ((uint16_t *)p)[i] = bfp8_encode_bf16(v); break;
    case BFP8_E4M3: ((uint8_t *)p)[i] = bfp8_encode_e4m3(v); break;
    case BFP8_E5M2: ((uint8_t *)p)[i] = bfp8_encode_e5m2(v); break;
    }
}

bfp8_status bfp8_cpu_dequantize(bfp8_context *ctx, const bfp8_qmatrix *q, bfp8_matrix *out) {
    (void)ctx;
    float lut[256];
    for (int i = 0; i < 256; ++i) lut[i] = bfp8_decode_e4m3((uint8_t)i);
    const int per_row = q->granularity == BFP8_GRAN_1X128;

    #pragma omp parallel for schedule(static) if (q->rows * q->cols > 16384)
    for (int64_t r = 0; r < q->rows; ++r) {
        const uint8_t *codes = q->data + r * q->ld;
        for (int64_t c = 0; c < q->cols; ++c) {
            const float scale = per_row ? q->scales[(c / TILE) * q->scale_ld + r]
                                        : q->scales[(r / TILE) * q->scale_ld + c / TILE];
            store_any(out->dtype, out->data, r * out->ld + c, lut[codes[c]] * scale);
        }
    }
    return BFP8_OK;
}

bfp8_status bfp8_cpu_convert(bfp8_context *ctx, const bfp8_matrix *src, bfp8_matrix *dst) {
    (void)ctx;
    /* Every bf16 and fp8 value is exact in fp32, so going through fp32 is exact. */
    #pragma omp parallel for schedule(static) if (src->rows * src->cols > 16384)
    for (int64_t r = 0; r < src->rows; ++r)
        for (int64_t c = 0; c < src->cols; ++c)
            store_any(dst->dtype, dst->data, r * dst->ld + c, load_any(src->dtype, src->data, r * src->ld + c));
    return BFP8_OK;
}
