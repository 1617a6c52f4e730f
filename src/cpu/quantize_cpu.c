/*
 * quantize_cpu.c - CPU reference of the quantizers (docs/RECIPE.md section 3),
 * dequantize and convert.
 *
 * x is walked in 128 x 128 tiles, one OpenMP task per tile. A tile is read
 * once into fp32, and every group lying in it is quantized from that copy:
 * the 1 x 128 groups along its rows (out_rows), along its columns (out_cols,
 * written transposed) or the whole tile as one 128 x 128 block. The scale
 * math is formats.h's and the codes come from its branch-free twin
 * (encode_branchless.h), so the loops vectorize and the CUDA kernels still
 * agree with this file bit for bit.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/encode_branchless.h"
#include "formats/formats.h"
#include "internal.h"

#define TILE 128
#define ALWAYS_INLINE inline __attribute__((always_inline))

typedef struct quantize_job {
    const bfp8_matrix *x;
    bfp8_qmatrix *out_rows, *out_cols; /* 1x128 outputs */
    bfp8_qmatrix *out, *out_t;         /* 128x128 outputs */
    int pow2;
} quantize_job;

/* Per-thread scratch: one tile of x as fp32 and its codes before transposing. */
typedef struct tile {
    int64_t r0, c0; /* top-left element in x */
    int nr, nc;     /* valid rows and columns (ragged at the edges) */
    _Alignas(64) float v[TILE * TILE];
    _Alignas(64) uint8_t codes[TILE * TILE];
} tile;

static ALWAYS_INLINE void load_tile(const bfp8_matrix *x, int64_t rb, int64_t cb, tile *t) {
    t->r0 = rb * TILE;
    t->c0 = cb * TILE;
    t->nr = (int)(x->rows - t->r0 < TILE ? x->rows - t->r0 : TILE);
    t->nc = (int)(x->cols - t->c0 < TILE ? x->cols - t->c0 : TILE);
    for (int i = 0; i < t->nr; ++i) {
        float *dst = t->v + i * TILE;
        if (x->dtype == BFP8_F32) {
            memcpy(dst, (const float *)x->data + (t->r0 + i) * x->ld + t->c0, (size_t)t->nc * sizeof(float));
        } else {
            const uint16_t *src = (const uint16_t *)x->data + (t->r0 + i) * x->ld + t->c0;
            for (int j = 0; j < t->nc; ++j) dst[j] = bfp8_decode_bf16(src[j]);
        }
    }
}

/* |x| as fp32 bits; as int32 they order like the magnitudes, NaN above Inf. */
static ALWAYS_INLINE int32_t abs_bits(float x) { return (int32_t)(bfp8_bits_of(x) & 0x7fffffffu); }

static ALWAYS_INLINE float scale_of_group(int32_t amax, int pow2, float *mult) {
    if (bfp8_amax_bits_nonfinite((uint32_t)amax)) {
        *mult = 0.0f;
        return bfp8_float_of(BFP8_NAN_SCALE_BITS);
    }
    *mult = bfp8_scale_multiplier(bfp8_float_of((uint32_t)amax), pow2);
    return 1.0f / *mult;
}

static ALWAYS_INLINE void encode_run(const float *restrict v, float mult, int n, uint8_t *restrict out) {
    for (int j = 0; j < n; ++j) out[j] = bfp8_encode_e4m3_branchless(v[j] * mult);
}

/* out_rows: group (row r, k-block = this tile's column block). */
static ALWAYS_INLINE int quantize_rows_of_tile(const quantize_job *job, const tile *t) {
    bfp8_qmatrix *q = job->out_rows;
    int nonfinite = 0;
    for (int i = 0; i < t->nr; ++i) {
        const float *restrict v = t->v + i * TILE;
        const int nc = t->nc;
        int32_t amax = 0;
        for (int j = 0; j < nc; ++j) amax = abs_bits(v[j]) > amax ? abs_bits(v[j]) : amax;
        float mult;
        const int64_t r = t->r0 + i;
        q->scales[(t->c0 / TILE) * q->scale_ld + r] = scale_of_group(amax, job->pow2, &mult);
        uint8_t *out = q->data + r * q->ld + t->c0;
        if (bfp8_amax_bits_nonfinite((uint32_t)amax)) {
            memset(out, 0x7f, (size_t)t->nc);
            nonfinite = 1;
        } else {
            encode_run(v, mult, t->nc, out);
        }
    }
    return nonfinite;
}

/* out_cols: row c of x^T, group (row c, k-block = this tile's row block).
 * The codes are made row by row (vectorized along the row) into the tile's
 * scratch, then written out transposed. */
static ALWAYS_INLINE int quantize_cols_of_tile(const quantize_job *job, tile *t) {
    bfp8_qmatrix *q = job->out_cols;
    const int nr = t->nr, nc = t->nc;
    const float *restrict v = t->v;
    uint8_t *restrict codes = t->codes;
    int32_t amax[TILE];
    float mult[TILE];
    int nonfinite = 0;
    for (int j = 0; j < nc; ++j) amax[j] = 0;
    for (int i = 0; i < nr; ++i)
        for (int j = 0; j < nc; ++j) {
            const int32_t a = abs_bits(v[i * TILE + j]);
            amax[j] = a > amax[j] ? a : amax[j];
        }
    for (int j = 0; j < nc; ++j)
        q->scales[(t->r0 / TILE) * q->scale_ld + t->c0 + j] = scale_of_group(amax[j], job->pow2, &mult[j]);
    for (int i = 0; i < nr; ++i)
        for (int j = 0; j < nc; ++j)
            codes[i * TILE + j] = bfp8_encode_e4m3_branchless(v[i * TILE + j] * mult[j]);
    for (int j = 0; j < nc; ++j) {
        uint8_t *restrict out = q->data + (t->c0 + j) * q->ld + t->r0;
        if (bfp8_amax_bits_nonfinite((uint32_t)amax[j])) {
            memset(out, 0x7f, (size_t)nr);
            nonfinite = 1;
        } else {
            for (int i = 0; i < nr; ++i) out[i] = codes[i * TILE + j];
        }
    }
    return nonfinite;
}

/* The whole tile is one block: out gets it as is, out_t transposed. */
static ALWAYS_INLINE int quantize_block_of_tile(const quantize_job *job, tile *t) {
    const float *restrict v = t->v;
    int32_t amax = 0;
    for (int i = 0; i < t->nr; ++i)
        for (int j = 0; j < t->nc; ++j) {
            const int32_t a = abs_bits(v[i * TILE + j]);
            amax = a > amax ? a : amax;
        }
    float mult;
    const float scale = scale_of_group(amax, job->pow2, &mult);
    const int nonfinite = bfp8_amax_bits_nonfinite((uint32_t)amax);
    const int64_t rb = t->r0 / TILE, cb = t->c0 / TILE;
    for (int i = 0; i < t->nr; ++i) {
        uint8_t *codes = t->codes + i * TILE;
        if (nonfinite)
            memset(codes, 0x7f, (size_t)t->nc);
        else
            encode_run(t->v + i * TILE, mult, t->nc, codes);
        memcpy(job->out->data + (t->r0 + i) * job->out->ld + t->c0, codes, (size_t)t->nc);
    }
    job->out->scales[rb * job->out->scale_ld + cb] = scale;
    if (job->out_t) {
        for (int j = 0; j < t->nc; ++j) {
            uint8_t *out = job->out_t->data + (t->c0 + j) * job->out_t->ld + t->r0;
            for (int i = 0; i < t->nr; ++i) out[i] = t->codes[i * TILE + j];
        }
        job->out_t->scales[cb * job->out_t->scale_ld + rb] = scale;
    }
    return nonfinite;
}

static ALWAYS_INLINE int quantize_tile_body(const quantize_job *job, int64_t rb, int64_t cb, tile *t) {
    load_tile(job->x, rb, cb, t);
    int nonfinite = 0;
    if (job->out) return quantize_block_of_tile(job, t);
    if (job->out_rows) nonfinite |= quantize_rows_of_tile(job, t);
    if (job->out_cols) nonfinite |= quantize_cols_of_tile(job, t);
    return nonfinite;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define BFP8_HAVE_AVX2_PATH 1
__attribute__((target("avx2"))) static int quantize_tile_avx2(const quantize_job *job, int64_t rb,
                                                              int64_t cb, tile *t) {
    return quantize_tile_body(job, rb, cb, t);
}
#endif

static int quantize_tile_baseline(const quantize_job *job, int64_t rb, int64_t cb, tile *t) {
    return quantize_tile_body(job, rb, cb, t);
}

static bfp8_status run_quantize(const quantize_job *job, const bfp8_quantize_options *options,
                                const char *fn) {
    const bfp8_matrix *x = job->x;
    const int64_t col_tiles = bfp8_ceil_div(x->cols, TILE);
    const int64_t tiles = bfp8_ceil_div(x->rows, TILE) * col_tiles;
    int use_avx2 = 0;
#ifdef BFP8_HAVE_AVX2_PATH
    use_avx2 = __builtin_cpu_supports("avx2");
#endif
    int nonfinite = 0, out_of_memory = 0;

    #pragma omp parallel reduction(| : nonfinite, out_of_memory) if (tiles > 1)
    {
        tile *t = malloc(sizeof *t);
        if (!t) out_of_memory = 1;
        #pragma omp for schedule(static)
        for (int64_t ti = 0; ti < tiles; ++ti) {
            if (!t) continue;
#ifdef BFP8_HAVE_AVX2_PATH
            if (use_avx2) {
                nonfinite |= quantize_tile_avx2(job, ti / col_tiles, ti % col_tiles, t);
                continue;
            }
#endif
            nonfinite |= quantize_tile_baseline(job, ti / col_tiles, ti % col_tiles, t);
        }
        free(t);
    }
    (void)use_avx2;
    if (out_of_memory) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    if (nonfinite && options && options->nonfinite_flag) *options->nonfinite_flag = 1;
    return BFP8_OK;
}

bfp8_status bfp8_cpu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out_rows,
                                    bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    (void)ctx;
    const quantize_job job = {x, out_rows, out_cols, NULL, NULL, options ? options->pow2_scales : 0};
    return run_quantize(&job, options, "bfp8_cpu_quantize_1x128");
}

bfp8_status bfp8_cpu_quantize_128x128(bfp8_context *ctx, const bfp8_matrix *x, int64_t group_rows, bfp8_qmatrix *out,
                                      bfp8_qmatrix *out_t, const bfp8_quantize_options *options) {
    (void)ctx;
    if (group_rows == 0) {
        const quantize_job job = {x, NULL, NULL, out, out_t, options ? options->pow2_scales : 0};
        return run_quantize(&job, options, "bfp8_cpu_quantize_128x128");
    }
    /* a stack: each matrix on its own, its transpose at rows [g C, (g + 1) C) of out_t */
    const int64_t C = x->cols, groups = x->rows / group_rows;
    for (int64_t g = 0; g < groups; ++g) {
        bfp8_matrix xg = *x;
        xg.data = (char *)x->data + (size_t)(g * group_rows * x->ld) * bfp8_dtype_size(x->dtype);
        xg.rows = group_rows;
        bfp8_qmatrix og = *out;
        og.data = out->data + g * group_rows * out->ld;
        og.scales = out->scales + g * (group_rows / 128) * out->scale_ld;
        og.rows = group_rows;
        bfp8_qmatrix tg;
        if (out_t) {
            tg = *out_t;
            tg.data = out_t->data + g * C * out_t->ld;
            tg.scales = out_t->scales + g * (C / 128) * out_t->scale_ld;
            tg.rows = C;
        }
        const quantize_job job = {&xg, NULL, NULL, &og, out_t ? &tg : NULL, options ? options->pow2_scales : 0};
        BFP8_TRY(run_quantize(&job, options, "bfp8_cpu_quantize_128x128"));
    }
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

    #pragma omp parallel for schedule(static) if (q->rows * q->cols > 65536)
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
    #pragma omp parallel for schedule(static) if (src->rows * src->cols > 65536)
    for (int64_t r = 0; r < src->rows; ++r)
        for (int64_t c = 0; c < src->cols; ++c)
            store_any(dst->dtype, dst->data, r * dst->ld + c, load_any(src->dtype, src->data, r * src->ld + c));
    return BFP8_OK;
}
