/*
 * quantize_cases.c - see quantize_cases.h.
 */
#include "quantize_cases.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/formats.h"
#include "test_util.h"

enum { kGuard = 256 }; /* guard bytes before and after every image */

const char *qlayout_name(qlayout layout) {
    switch (layout) {
    case QLAYOUT_DENSE: return "dense";
    case QLAYOUT_PADDED: return "padded";
    case QLAYOUT_ODD: return "odd";
    default: return "?";
    }
}

void *device_image(bfp8_context *ctx, const void *host, size_t bytes) {
    void *d = NULL;
    if (bfp8_malloc(ctx, &d, bytes) != BFP8_OK) test_fatal("bfp8_malloc: %s", bfp8_last_error());
    if (bfp8_copy_to_backend(ctx, d, host, bytes) != BFP8_OK)
        test_fatal("bfp8_copy_to_backend: %s", bfp8_last_error());
    return d;
}

static int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

void ximage_init(ximage *m, const void *dense, bfp8_dtype dtype, int64_t rows, int64_t cols,
                 qlayout layout) {
    const size_t es = bfp8_dtype_size(dtype);
    int64_t ld = cols;
    size_t offset = kGuard;
    if (layout == QLAYOUT_PADDED) ld = round_up(cols, 8) + 64;
    if (layout == QLAYOUT_ODD) {
        ld = cols + 1;
        offset += es; /* off 16-byte alignment whatever ld is */
    }
    m->offset = offset;
    m->size = offset + (size_t)((rows - 1) * ld + cols) * es + kGuard;
    m->img = test_malloc(m->size);
    memset(m->img, 0x5a, m->size);
    for (int64_t r = 0; r < rows; ++r)
        memcpy(m->img + offset + (size_t)(r * ld) * es, (const uint8_t *)dense + (size_t)(r * cols) * es,
               (size_t)cols * es);
    m->x.data = m->img + offset;
    m->x.dtype = dtype;
    m->x.rows = rows;
    m->x.cols = cols;
    m->x.ld = ld;
}

void ximage_free(ximage *m) {
    free(m->img);
    m->img = NULL;
}

void qimage_init(qimage *m, int64_t rows, int64_t cols, bfp8_granularity gran, qlayout layout,
                 uint8_t poison) {
    bfp8_qmatrix *q = &m->q;
    if (bfp8_qmatrix_layout(q, rows, cols, gran, NULL, NULL) != BFP8_OK)
        test_fatal("bfp8_qmatrix_layout: %s", bfp8_last_error());
    size_t data_offset = kGuard, scale_offset = kGuard;
    if (layout == QLAYOUT_PADDED) {
        q->ld += 48;
        q->scale_ld += gran == BFP8_GRAN_1X128 ? 12 : 3;
    }
    if (layout == QLAYOUT_ODD) {
        q->ld = cols + 1;
        q->scale_ld += gran == BFP8_GRAN_1X128 ? 4 : 1;
        data_offset += 1;
        scale_offset += 4;
    }
    m->poison = poison;
    m->data_offset = data_offset;
    m->data_size = data_offset + (size_t)(rows * q->ld) + kGuard;
    m->data_img = test_malloc(m->data_size);
    memset(m->data_img, poison, m->data_size);
    const int64_t kblocks = (cols + 127) / 128;
    const int64_t span = gran == BFP8_GRAN_1X128 ? kblocks * q->scale_ld
                                                 : (rows + 127) / 128 * q->scale_ld;
    m->scale_offset = scale_offset;
    m->scale_size = scale_offset + (size_t)span * sizeof(float) + kGuard;
    m->scale_img = test_malloc(m->scale_size);
    memset(m->scale_img, poison, m->scale_size);
    q->data = m->data_img + data_offset;
    q->scales = (float *)(m->scale_img + scale_offset);
}

void qimage_free(qimage *m) {
    free(m->data_img);
    free(m->scale_img);
    m->data_img = m->scale_img = NULL;
}

static float ref_scale(const bfp8_qmatrix *q, int64_t i0, int64_t i1) {
    /* i0, i1: (row, k-block) for 1x128, (row block, k-block) for 128x128 */
    return q->granularity == BFP8_GRAN_1X128 ? q->scales[i1 * q->scale_ld + i0]
                                             : q->scales[i0 * q->scale_ld + i1];
}

int64_t qimage_check(const qimage *m, const bfp8_qmatrix *ref, const char *what) {
    const bfp8_qmatrix *q = &m->q;
    int64_t errors = 0;
#define REPORT(...)                                                                          \
    do {                                                                                     \
        if (errors++ < 6) {                                                                  \
            fprintf(stderr, "  %s: ", what);                                                 \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
        }                                                                                    \
    } while (0)

    for (size_t i = 0; i < m->data_size; ++i) {
        const int64_t k = (int64_t)i - (int64_t)m->data_offset;
        const int64_t r = k >= 0 ? k / q->ld : -1, c = k >= 0 ? k % q->ld : -1;
        if (k >= 0 && r < q->rows && c < q->cols) {
            const uint8_t want = ref->data[r * ref->ld + c];
            if (m->data_img[i] != want)
                REPORT("code [%lld, %lld] = 0x%02x, expected 0x%02x", (long long)r, (long long)c,
                       m->data_img[i], want);
        } else if (m->data_img[i] != m->poison) {
            REPORT("data byte %lld outside the matrix was written (0x%02x)", (long long)k,
                   m->data_img[i]);
        }
    }
    const int64_t kblocks = (q->cols + 127) / 128, rblocks = (q->rows + 127) / 128;
    for (size_t i = 0; i < m->scale_size; ++i) {
        const int64_t k = ((int64_t)i - (int64_t)m->scale_offset) >= 0
                              ? ((int64_t)i - (int64_t)m->scale_offset) / 4 : -1;
        int valid = 0;
        int64_t i0 = 0, i1 = 0;
        if (k >= 0) {
            const int64_t outer = k / q->scale_ld, inner = k % q->scale_ld;
            if (q->granularity == BFP8_GRAN_1X128) {
                valid = outer < kblocks && inner < q->rows;
                i0 = inner;
                i1 = outer;
            } else {
                valid = outer < rblocks && inner < kblocks;
                i0 = outer;
                i1 = inner;
            }
        }
        if (valid) {
            if (((int64_t)i - (int64_t)m->scale_offset) % 4 != 0) continue; /* one check per float */
            uint32_t got, want;
            memcpy(&got, m->scale_img + i, 4);
            const float w = ref_scale(ref, i0, i1);
            memcpy(&want, &w, 4);
            if (got != want)
                REPORT("scale [%lld, %lld] = 0x%08x, expected 0x%08x", (long long)i0, (long long)i1,
                       got, want);
        } else if (m->scale_img[i] != m->poison) {
            REPORT("scale byte %lld outside the layout was written (0x%02x)", (long long)i,
                   m->scale_img[i]);
        }
    }
#undef REPORT
    return errors;
}

int64_t qimage_check_untouched(const qimage *m, const char *what) {
    int64_t written = 0;
    for (size_t i = 0; i < m->data_size; ++i) written += m->data_img[i] != m->poison;
    for (size_t i = 0; i < m->scale_size; ++i) written += m->scale_img[i] != m->poison;
    if (written) fprintf(stderr, "  %s: %lld bytes written\n", what, (long long)written);
    return written;
}

/* ------------------------------------------------------------------------ */

void *quantize_test_data(bfp8_dtype dtype, int64_t rows, int64_t cols, unsigned what, uint64_t seed) {
    float *x = test_malloc((size_t)(rows * cols) * sizeof(float));
    test_fill_f32(x, rows, cols, cols, 1.0f, what, seed);
    test_rng rng;
    test_rng_seed(&rng, seed ^ 0xfeedull);
    /* A few 1 x 128 / 128 x 128 sized patches, each clipped to the matrix. */
    const int64_t npatch = 1 + rows * cols / 200000;
    for (int64_t p = 0; p < npatch * 4; ++p) {
        const int kind = (int)(p % 4);
        const int64_t r0 = test_rng_range(&rng, 0, rows - 1), c0 = test_rng_range(&rng, 0, cols - 1);
        const int64_t h = kind == 3 ? 1 : test_rng_range(&rng, 1, 40), w = test_rng_range(&rng, 1, 200);
        for (int64_t r = r0; r < r0 + h && r < rows; ++r)
            for (int64_t c = c0; c < c0 + w && c < cols; ++c) {
                float v;
                const uint64_t u = test_rng_next(&rng);
                const uint32_t sign = (uint32_t)(u >> 63) << 31;
                switch (kind) {
                case 0: /* fp32 subnormals (bf16: its own subnormals): multiplier overflows to FLT_MAX */
                    v = bfp8_float_of(sign | (uint32_t)(1 + (u >> 8) % 0x7fffffu));
                    if (dtype == BFP8_BF16) v = bfp8_float_of(sign | (uint32_t)(1 + (u >> 8) % 0x7fu) << 16);
                    break;
                case 1: /* huge, up to FLT_MAX */
                    v = bfp8_float_of(sign | (uint32_t)(0x7e000000u + (u >> 8) % 0x17f0000u)); /* bf16 too */
                    break;
                case 2: /* negative zeros */
                    v = -0.0f;
                    break;
                default: /* exactly 448 * 2^k and halfway cases of e4m3 */
                    v = ldexpf((u & 1) ? 448.0f : 1.0625f, (int)((u >> 8) % 40) - 20);
                    if (sign) v = -v;
                    break;
                }
                x[r * cols + c] = v;
            }
    }
    if (dtype == BFP8_F32) return x;
    uint16_t *b = test_malloc((size_t)(rows * cols) * sizeof(uint16_t));
    for (int64_t i = 0; i < rows * cols; ++i) b[i] = bfp8_f32_to_bf16(x[i]);
    free(x);
    return b;
}
