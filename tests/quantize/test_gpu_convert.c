/*
 * test_gpu_convert.c - bfp8_convert and bfp8_dequantize on the GPU against
 * the CPU reference, through the public API:
 *
 *   convert     every (src, dst) pair of f32, bf16, e4m3, e5m2 (same dtype
 *               included), on inputs that cover every class of each format:
 *               normals, subnormals, rounding ties, values past the fp8
 *               range, +-0, +-Inf, NaNs with any sign and payload;
 *   dequantize  1x128 and 128x128 scales into f32 and bf16, on every e4m3
 *               code (NaN codes included) with scales from 2^-140 (subnormal
 *               products) to 2^100 (overflow) and NaN scales;
 *
 * in three layouts (dense; padded: ld above cols, still aligned; odd: data
 * pointers and ld off alignment, the scalar path) and ragged shapes. Outputs
 * sit in poisoned device images with guard bytes: every valid element must
 * equal the CPU's bit for bit, every other byte must still be the poison.
 * One exception: an f32 dequantized value that is NaN (a NaN code or a NaN
 * scale) may differ from the CPU in its NaN bits: the GPU's multiply returns
 * the canonical NaN, x86's returns one of the NaN operands, whichever the
 * compiler put first. Both must be NaN. Every other output, NaNs included
 * (bf16 outputs, every convert), is bit-exact.
 *
 * Also the argument checks of both entry points on the CUDA backend (host
 * pointers, shape and granularity mismatches, NULLs): an error status, and
 * nothing written.
 *
 *   gpu_convert            full run
 *   gpu_convert --small    few small shapes, for compute-sanitizer
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/formats.h"
#include "quantize_cases.h"
#include "test_util.h"

static bfp8_context *cpu, *gpu;
static int64_t runs = 0;
static const bfp8_dtype all_dtypes[4] = {BFP8_F32, BFP8_BF16, BFP8_E4M3, BFP8_E5M2};

/* ------------------------------------------------------------------------ */
/* Inputs                                                                    */

/* One random fp32 bit pattern from a mix of classes. */
static uint32_t random_f32_bits(test_rng *rng) {
    const uint64_t u = test_rng_next(rng);
    const uint32_t sign = (uint32_t)(u >> 63) << 31, lo = (uint32_t)(u >> 8);
    switch ((u >> 32) % 16) {
    case 0: return lo;                                                      /* any pattern */
    case 1: return sign | (lo & 0x7fffffu);                                  /* fp32 subnormal / 0 */
    case 2: return sign | 0x7f800000u | (1u + lo % 0x7fffffu);               /* NaN, any payload */
    case 3: return sign | 0x7f800000u;                                       /* +-Inf */
    case 4: return sign | (uint32_t)(0x43600000u + lo % 0x01000000u);        /* 224 .. 65536: e4m3/e5m2 edge */
    case 5: return sign | ((0x3a800000u + lo % 0x01800000u) & 0xffe00000u); /* e4m3 subnormal ties, 2^-10..2^-8 */
    case 6: {                                                               /* exact halfway points of e4m3/e5m2/bf16 */
        const int e = (int)((u >> 40) % 60) - 30;
        const uint32_t mant = (uint32_t)((u >> 20) & 0xfu);
        const int which = (int)((u >> 50) % 3);
        const int shift = which == 0 ? 19 : which == 1 ? 20 : 15; /* e4m3: 3 bits, e5m2: 2, bf16: 7 */
        return sign | (uint32_t)(127 + e) << 23 | (mant << shift) | (1u << (shift - 1));
    }
    case 7: return sign | (uint32_t)(0x7f000000u + lo % 0x00800000u);       /* huge finite */
    case 8: return sign;                                                     /* +-0 */
    default: {                                                               /* N(0,1) * 2^[-20, 20] */
        const float v = (float)test_rng_normal(rng) * ldexpf(1.0f, (int)((u >> 20) % 41) - 20);
        return bfp8_bits_of(v);
    }
    }
}

/* n dense elements of dtype covering its classes. */
static void *random_input(bfp8_dtype dtype, int64_t n, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    const size_t es = bfp8_dtype_size(dtype);
    uint8_t *p = test_malloc((size_t)n * es + 1);
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t u = test_rng_next(&rng);
        switch (dtype) {
        case BFP8_F32: {
            const uint32_t b = random_f32_bits(&rng);
            memcpy(p + i * 4, &b, 4);
            break;
        }
        case BFP8_BF16: {
            /* half any pattern (every class: NaN payloads, subnormals, Inf), half rounded values */
            const uint16_t b = (u & 1) ? (uint16_t)(u >> 16) : bfp8_encode_bf16(bfp8_float_of(random_f32_bits(&rng)));
            memcpy(p + i * 2, &b, 2);
            break;
        }
        default: p[i] = (uint8_t)(u >> 24); /* every fp8 code, NaN and Inf codes included */
        }
    }
    return p;
}

/* ------------------------------------------------------------------------ */
/* Device images                                                             */

/* A poisoned rows x cols output image of dtype in `layout` (ximage's geometry). */
static void out_image_init(ximage *m, bfp8_dtype dtype, int64_t rows, int64_t cols, qlayout layout,
                           uint8_t poison) {
    const size_t es = bfp8_dtype_size(dtype);
    uint8_t *dense = test_malloc((size_t)(rows * cols) * es);
    memset(dense, poison, (size_t)(rows * cols) * es);
    ximage_init(m, dense, dtype, rows, cols, layout);
    memset(m->img, poison, m->size);
    free(dense);
}

/* Compare an output image with the dense CPU result. nan_class: f32 NaNs
 * need only both be NaN. Returns the number of differences. */
static int64_t check_out_image(const ximage *m, const void *want, uint8_t poison, int nan_class,
                               const char *what) {
    const size_t es = bfp8_dtype_size(m->x.dtype);
    const int64_t ld = m->x.ld, rows = m->x.rows, cols = m->x.cols;
    int64_t errors = 0;
    for (size_t i = 0; i < m->size; ++i) {
        const int64_t k = (int64_t)i - (int64_t)m->offset;
        const int64_t e = k >= 0 ? k / (int64_t)es : -1;
        const int64_t r = e >= 0 ? e / ld : -1, c = e >= 0 ? e % ld : -1;
        if (k >= 0 && r < rows && c < cols) {
            if (k % (int64_t)es != 0) continue; /* one check per element */
            const uint8_t *got = m->img + i, *exp = (const uint8_t *)want + (size_t)(r * cols + c) * es;
            if (memcmp(got, exp, es) == 0) continue;
            if (nan_class && es == 4) {
                uint32_t g, x;
                memcpy(&g, got, 4);
                memcpy(&x, exp, 4);
                if ((g & 0x7fffffffu) > 0x7f800000u && (x & 0x7fffffffu) > 0x7f800000u) continue;
            }
            if (errors++ < 6) {
                uint64_t g = 0, x = 0;
                memcpy(&g, got, es);
                memcpy(&x, exp, es);
                fprintf(stderr, "  %s: [%lld, %lld] = 0x%llx, expected 0x%llx\n", what, (long long)r,
                        (long long)c, (unsigned long long)g, (unsigned long long)x);
            }
        } else if (m->img[i] != poison) {
            if (errors++ < 6)
                fprintf(stderr, "  %s: byte %lld outside the matrix was written (0x%02x)\n", what,
                        (long long)k, m->img[i]);
        }
    }
    return errors;
}

/* Run dst_dtype output into a device mirror of a poisoned image, fetch it back. */
typedef struct device_out {
    ximage host;
    uint8_t *img;
    bfp8_matrix m;
} device_out;

static void device_out_init(device_out *d, bfp8_dtype dtype, int64_t rows, int64_t cols, qlayout layout,
                            uint8_t poison) {
    out_image_init(&d->host, dtype, rows, cols, layout, poison);
    d->img = device_image(gpu, d->host.img, d->host.size);
    d->m = d->host.x;
    d->m.data = d->img + d->host.offset;
}

static void device_out_fetch(device_out *d) {
    CHECK_OK(bfp8_copy_to_host(gpu, d->host.img, d->img, d->host.size));
    bfp8_free(gpu, d->img);
    d->img = NULL;
}

/* ------------------------------------------------------------------------ */
/* Convert                                                                   */

static void run_convert(bfp8_dtype src_t, bfp8_dtype dst_t, int64_t rows, int64_t cols, uint64_t seed) {
    const size_t ds = bfp8_dtype_size(dst_t);
    void *dense = random_input(src_t, rows * cols, seed);
    void *want = test_malloc((size_t)(rows * cols) * ds);
    const bfp8_matrix hsrc = {dense, src_t, rows, cols, cols};
    bfp8_matrix hdst = {want, dst_t, rows, cols, cols};
    CHECK_OK(bfp8_convert(cpu, &hsrc, &hdst));
    for (int sl = 0; sl < QLAYOUT_COUNT; ++sl) {
        ximage xi;
        ximage_init(&xi, dense, src_t, rows, cols, (qlayout)sl);
        uint8_t *dimg = device_image(gpu, xi.img, xi.size);
        bfp8_matrix dsrc = xi.x;
        dsrc.data = dimg + xi.offset;
        /* the destination in each layout too, the source's first, then the next */
        for (int k = 0; k < 2; ++k) {
            const qlayout dl = (qlayout)((sl + k) % QLAYOUT_COUNT);
            const uint8_t poison = k ? 0x3c : 0xab;
            char what[160];
            snprintf(what, sizeof what, "convert %s -> %s %lldx%lld src %s dst %s",
                     bfp8_dtype_name(src_t), bfp8_dtype_name(dst_t), (long long)rows, (long long)cols,
                     qlayout_name((qlayout)sl), qlayout_name(dl));
            device_out d;
            device_out_init(&d, dst_t, rows, cols, dl, poison);
            const bfp8_status st = bfp8_convert(gpu, &dsrc, &d.m);
            CHECK(st == BFP8_OK, "%s: %s: %s", what, bfp8_status_name(st), bfp8_last_error());
            CHECK_OK(bfp8_context_synchronize(gpu));
            device_out_fetch(&d);
            const int64_t e = check_out_image(&d.host, want, poison, 0, what);
            CHECK(e == 0, "%s: %lld differences", what, (long long)e);
            ximage_free(&d.host);
            ++runs;
        }
        bfp8_free(gpu, dimg);
        ximage_free(&xi);
    }
    free(want);
    free(dense);
}

/* ------------------------------------------------------------------------ */
/* Dequantize                                                                */

static float random_scale(test_rng *rng) {
    const uint64_t u = test_rng_next(rng);
    switch (u % 16) {
    case 0: return bfp8_float_of(BFP8_NAN_SCALE_BITS);          /* a non-finite group */
    case 1: return ldexpf(1.0f, -130 - (int)((u >> 8) % 10));   /* products go subnormal */
    case 2: return ldexpf(1.5f, 90 + (int)((u >> 8) % 40));     /* products overflow (f32, bf16) */
    case 3: return 1.0f;
    default: return (float)(1.0 + test_rng_uniform(rng)) * ldexpf(1.0f, (int)((u >> 8) % 61) - 30);
    }
}

static void run_dequantize(bfp8_granularity g, int64_t rows, int64_t cols, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (int ql = 0; ql < QLAYOUT_COUNT; ++ql) {
        qimage q;
        qimage_init(&q, rows, cols, g, (qlayout)ql, 0x77);
        /* every valid code and scale random; the bytes around them stay 0x77, which no kernel may need */
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) q.q.data[r * q.q.ld + c] = (uint8_t)(test_rng_next(&rng) >> 24);
        const int64_t kb = (cols + 127) / 128, rb = (rows + 127) / 128;
        if (g == BFP8_GRAN_1X128) {
            for (int64_t b = 0; b < kb; ++b)
                for (int64_t r = 0; r < rows; ++r) q.q.scales[b * q.q.scale_ld + r] = random_scale(&rng);
        } else {
            for (int64_t i = 0; i < rb; ++i)
                for (int64_t b = 0; b < kb; ++b) q.q.scales[i * q.q.scale_ld + b] = random_scale(&rng);
        }
        uint8_t *ddata = device_image(gpu, q.data_img, q.data_size);
        uint8_t *dscale = device_image(gpu, q.scale_img, q.scale_size);
        bfp8_qmatrix dq = q.q;
        dq.data = ddata + q.data_offset;
        dq.scales = (float *)(dscale + q.scale_offset);
        for (int o = 0; o < 2; ++o) {
            const bfp8_dtype out_t = o ? BFP8_BF16 : BFP8_F32;
            const size_t os = bfp8_dtype_size(out_t);
            void *want = test_malloc((size_t)(rows * cols) * os);
            bfp8_matrix hout = {want, out_t, rows, cols, cols};
            CHECK_OK(bfp8_dequantize(cpu, &q.q, &hout));
            for (int k = 0; k < 2; ++k) {
                const qlayout ol = (qlayout)((ql + k) % QLAYOUT_COUNT);
                const uint8_t poison = k ? 0x3c : 0xab;
                char what[160];
                snprintf(what, sizeof what, "dequantize %s -> %s %lldx%lld q %s out %s",
                         g == BFP8_GRAN_1X128 ? "1x128" : "128x128", bfp8_dtype_name(out_t),
                         (long long)rows, (long long)cols, qlayout_name((qlayout)ql), qlayout_name(ol));
                device_out d;
                device_out_init(&d, out_t, rows, cols, ol, poison);
                const bfp8_status st = bfp8_dequantize(gpu, &dq, &d.m);
                CHECK(st == BFP8_OK, "%s: %s: %s", what, bfp8_status_name(st), bfp8_last_error());
                CHECK_OK(bfp8_context_synchronize(gpu));
                device_out_fetch(&d);
                const int64_t e = check_out_image(&d.host, want, poison, out_t == BFP8_F32, what);
                CHECK(e == 0, "%s: %lld differences", what, (long long)e);
                ximage_free(&d.host);
                ++runs;
            }
            free(want);
        }
        /* the inputs are never written */
        uint8_t *back = test_malloc(q.data_size > q.scale_size ? q.data_size : q.scale_size);
        CHECK_OK(bfp8_copy_to_host(gpu, back, ddata, q.data_size));
        CHECK(memcmp(back, q.data_img, q.data_size) == 0, "dequantize wrote its codes");
        CHECK_OK(bfp8_copy_to_host(gpu, back, dscale, q.scale_size));
        CHECK(memcmp(back, q.scale_img, q.scale_size) == 0, "dequantize wrote its scales");
        free(back);
        bfp8_free(gpu, ddata);
        bfp8_free(gpu, dscale);
        qimage_free(&q);
    }
}

/* ------------------------------------------------------------------------ */
/* Argument checks on the CUDA backend                                        */

static void check_arguments(void) {
    const int64_t rows = 130, cols = 200;
    float *host = test_malloc((size_t)(rows * cols) * 4);
    memset(host, 0, (size_t)(rows * cols) * 4);
    uint8_t *d_in = device_image(gpu, host, (size_t)(rows * cols) * 4);
    device_out d;
    device_out_init(&d, BFP8_BF16, rows, cols, QLAYOUT_DENSE, 0xab);
    const bfp8_matrix src = {d_in, BFP8_F32, rows, cols, cols};
    bfp8_matrix s;

    CHECK_STATUS(bfp8_convert(gpu, NULL, &d.m), BFP8_ERR_NULL_POINTER);
    CHECK_STATUS(bfp8_convert(gpu, &src, NULL), BFP8_ERR_NULL_POINTER);
    CHECK_STATUS(bfp8_convert(NULL, &src, &d.m), BFP8_ERR_NULL_POINTER);
    s = src; s.data = host; /* host memory on the CUDA backend */
    CHECK_STATUS(bfp8_convert(gpu, &s, &d.m), BFP8_ERR_BAD_POINTER);
    s = src; s.rows = rows - 1;
    CHECK_STATUS(bfp8_convert(gpu, &s, &d.m), BFP8_ERR_SHAPE);
    s = src; s.ld = cols - 1;
    CHECK_STATUS(bfp8_convert(gpu, &s, &d.m), BFP8_ERR_LAYOUT);
    s = src; s.cols = 0;
    CHECK_STATUS(bfp8_convert(gpu, &s, &d.m), BFP8_ERR_INVALID_VALUE);
    s = src; s.dtype = (bfp8_dtype)9;
    CHECK_STATUS(bfp8_convert(gpu, &s, &d.m), BFP8_ERR_INVALID_VALUE);
    s = src; s.data = d_in + 2; /* f32 not on a 4-byte boundary */
    CHECK_STATUS(bfp8_convert(gpu, &s, &d.m), BFP8_ERR_ALIGNMENT);

    qimage q;
    qimage_init(&q, rows, cols, BFP8_GRAN_1X128, QLAYOUT_DENSE, 0x11);
    uint8_t *ddata = device_image(gpu, q.data_img, q.data_size);
    uint8_t *dscale = device_image(gpu, q.scale_img, q.scale_size);
    bfp8_qmatrix dq = q.q, t;
    dq.data = ddata + q.data_offset;
    dq.scales = (float *)(dscale + q.scale_offset);
    CHECK_STATUS(bfp8_dequantize(gpu, NULL, &d.m), BFP8_ERR_NULL_POINTER);
    CHECK_STATUS(bfp8_dequantize(gpu, &dq, NULL), BFP8_ERR_NULL_POINTER);
    t = dq; t.scales = q.q.scales; /* host scales */
    CHECK_STATUS(bfp8_dequantize(gpu, &t, &d.m), BFP8_ERR_BAD_POINTER);
    t = dq; t.scale_ld = rows - 1;
    CHECK_STATUS(bfp8_dequantize(gpu, &t, &d.m), BFP8_ERR_LAYOUT);
    t = dq; t.ld = cols - 1;
    CHECK_STATUS(bfp8_dequantize(gpu, &t, &d.m), BFP8_ERR_LAYOUT);
    t = dq; t.dtype = BFP8_E5M2;
    CHECK_STATUS(bfp8_dequantize(gpu, &t, &d.m), BFP8_ERR_UNSUPPORTED);
    t = dq; t.granularity = (bfp8_granularity)7;
    CHECK(bfp8_dequantize(gpu, &t, &d.m) != BFP8_OK, "dequantize accepted granularity 7");
    s = d.m; s.dtype = BFP8_E4M3;
    CHECK_STATUS(bfp8_dequantize(gpu, &dq, &s), BFP8_ERR_UNSUPPORTED);
    s = d.m; s.cols = cols - 1;
    CHECK_STATUS(bfp8_dequantize(gpu, &dq, &s), BFP8_ERR_SHAPE);

    CHECK_OK(bfp8_context_synchronize(gpu));
    device_out_fetch(&d);
    int64_t written = 0;
    for (size_t i = 0; i < d.host.size; ++i) written += d.host.img[i] != 0xab;
    CHECK(written == 0, "failed calls wrote %lld bytes", (long long)written);
    ximage_free(&d.host);
    bfp8_free(gpu, ddata);
    bfp8_free(gpu, dscale);
    bfp8_free(gpu, d_in);
    qimage_free(&q);
    free(host);
}

int main(int argc, char **argv) {
    TEST_REQUIRE_GPU();
    int small = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--small") == 0)
            small = 1;
        else
            test_fatal("unknown argument %s (usage: gpu_convert [--small])", argv[i]);
    }
    if (bfp8_context_create(&cpu, BFP8_BACKEND_CPU, 0) != BFP8_OK ||
        bfp8_context_create(&gpu, BFP8_BACKEND_CUDA, 0) != BFP8_OK)
        test_fatal("context: %s", bfp8_last_error());

    check_arguments();
    static const int64_t small_shapes[][2] = {{1, 1}, {3, 13}, {127, 129}, {129, 127}, {257, 4}};
    static const int64_t full_shapes[][2] = {{1, 1},    {1, 1000},  {1000, 1}, {127, 129}, {129, 127},
                                             {128, 128}, {1000, 129}, {129, 1000}, {7, 4101},
                                             {1000, 1000}, {4160, 1032}};
    const int64_t(*shapes)[2] = small ? small_shapes : full_shapes;
    const size_t n_shapes = small ? sizeof small_shapes / sizeof small_shapes[0]
                                  : sizeof full_shapes / sizeof full_shapes[0];
    uint64_t seed = 1;
    for (size_t s = 0; s < n_shapes; ++s) {
        for (int a = 0; a < 4; ++a)
            for (int b = 0; b < 4; ++b, ++seed)
                run_convert(all_dtypes[a], all_dtypes[b], shapes[s][0], shapes[s][1], seed);
        run_dequantize(BFP8_GRAN_1X128, shapes[s][0], shapes[s][1], ++seed);
        run_dequantize(BFP8_GRAN_128X128, shapes[s][0], shapes[s][1], ++seed);
    }
    printf("%lld GPU convert / dequantize runs compared with the CPU reference\n", (long long)runs);
    bfp8_context_destroy(gpu);
    bfp8_context_destroy(cpu);
    return test_exit_code(small ? "gpu_convert --small" : "gpu_convert");
}
