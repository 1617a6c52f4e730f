/*
 * test_bad_input.c - docs/RECIPE.md section 6 through the public API on the
 * CPU backend: every bad argument (NULL pointers, unknown enums, sizes < 1,
 * wrong dtypes, shapes that do not agree, bad ld / scale_ld / granularity,
 * misaligned pointers) returns its status code, leaves a message naming the
 * function, and writes nothing.
 *
 * "Nothing written": every buffer the calls see (inputs and outputs, the
 * non-finite flag, the out-parameters) lives in one arena filled with a
 * canary byte; after each failing call the whole arena must still hold it.
 * A positive control at the end runs the same calls with valid arguments and
 * requires that they succeed and do write, so the canary check can fail.
 * Shapes the CPU backend must accept (K not a multiple of 16, M = 1, padded
 * ld) are checked to succeed.
 *
 *   build/tests/api/test_bad_input
 */
#include <string.h>

#include "internal.h" /* bfp8_fail */
#include "test_util.h"

/* ------------------------------------------------------------------------ */
/* The canary arena                                                          */

enum { CANARY = 0xA5, MAX_BUFFERS = 64 };

static bfp8_context *ctx;
static struct {
    unsigned char *p;
    size_t bytes;
} arena[MAX_BUFFERS];
static int arena_count;

static void *arena_alloc(size_t bytes) {
    void *p = NULL;
    if (arena_count == MAX_BUFFERS || bfp8_malloc(ctx, &p, bytes) != BFP8_OK)
        test_fatal("arena_alloc(%zu): %s", bytes, bfp8_last_error());
    memset(p, CANARY, bytes);
    arena[arena_count].p = p;
    arena[arena_count].bytes = bytes;
    ++arena_count;
    return p;
}

/* Bytes of the arena that no longer hold the canary (and restore them). */
static size_t arena_touched(void) {
    size_t touched = 0;
    for (int i = 0; i < arena_count; ++i) {
        for (size_t j = 0; j < arena[i].bytes; ++j) touched += arena[i].p[j] != CANARY;
        memset(arena[i].p, CANARY, arena[i].bytes);
    }
    return touched;
}

/* A call that must fail with `expected`, name `fn` in its message, and write nothing. */
#define EXPECT_FAIL(call, expected, fn)                                                        \
    do {                                                                                       \
        const bfp8_status st_ = (call);                                                        \
        CHECK(st_ == (expected), "%s -> %s, expected %s (%s)", #call, bfp8_status_name(st_),  \
              bfp8_status_name(expected), bfp8_last_error());                                 \
        CHECK(strstr(bfp8_last_error(), fn) != NULL, "%s: message \"%s\" does not name %s",   \
              #call, bfp8_last_error(), fn);                                                   \
        const size_t touched_ = arena_touched();                                               \
        CHECK(touched_ == 0, "%s: failed but wrote %zu bytes", #call, touched_);               \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Valid operands, all in the arena                                          */

/* M tokens, K in-features (not a multiple of 16, two k-blocks), N out-features. */
enum { M = 5, K = 200, N = 130 };

typedef struct {
    bfp8_matrix x, x_bf16, w, d, d_bf16, dx_f32, c_nk, d_nk;
    bfp8_qmatrix x_rows, x_cols, w_q, w_qt, dyt, xt; /* dyt: N x M, xt: K x M */
    bfp8_matrix a_bf16, b_bf16;                      /* M x K and N x K */
    uint32_t *flag;
} operands;

static bfp8_matrix new_matrix(bfp8_dtype dtype, int64_t rows, int64_t cols) {
    bfp8_matrix m = {NULL, dtype, rows, cols, cols};
    m.data = arena_alloc((size_t)(rows * cols) * bfp8_dtype_size(dtype));
    return m;
}

static bfp8_qmatrix new_qmatrix(int64_t rows, int64_t cols, bfp8_granularity gran) {
    bfp8_qmatrix q;
    size_t data_bytes = 0, scale_bytes = 0;
    if (bfp8_qmatrix_layout(&q, rows, cols, gran, &data_bytes, &scale_bytes) != BFP8_OK)
        test_fatal("bfp8_qmatrix_layout: %s", bfp8_last_error());
    q.data = arena_alloc(data_bytes);
    q.scales = arena_alloc(scale_bytes);
    return q;
}

static operands make_operands(void) {
    operands o;
    o.x = new_matrix(BFP8_F32, M, K);
    o.x_bf16 = new_matrix(BFP8_BF16, M, K);
    o.w = new_matrix(BFP8_F32, N, K);
    o.d = new_matrix(BFP8_F32, M, N);
    o.d_bf16 = new_matrix(BFP8_BF16, M, N);
    o.dx_f32 = new_matrix(BFP8_F32, M, K);
    o.c_nk = new_matrix(BFP8_F32, N, K);
    o.d_nk = new_matrix(BFP8_F32, N, K);
    o.x_rows = new_qmatrix(M, K, BFP8_GRAN_1X128);
    o.x_cols = new_qmatrix(K, M, BFP8_GRAN_1X128);
    o.w_q = new_qmatrix(N, K, BFP8_GRAN_128X128);
    o.w_qt = new_qmatrix(K, N, BFP8_GRAN_128X128);
    o.dyt = new_qmatrix(N, M, BFP8_GRAN_1X128);
    o.xt = new_qmatrix(K, M, BFP8_GRAN_1X128);
    o.a_bf16 = new_matrix(BFP8_BF16, M, K);
    o.b_bf16 = new_matrix(BFP8_BF16, N, K);
    o.flag = arena_alloc(sizeof(uint32_t));
    return o;
}

/* ------------------------------------------------------------------------ */
/* Shared mutations of a matrix view and a quantized view                     */

/* Every way a bfp8_matrix view can be bad on its own, passed to `run`. */
typedef bfp8_status (*matrix_call)(const operands *o, bfp8_matrix *m);

static void bad_matrix_views(const operands *o, const bfp8_matrix *good, matrix_call run, const char *fn,
                             const char *what, int may_be_null) {
    bfp8_matrix m;
    fprintf(stderr, "  %s: %s\n", fn, what);
    if (!may_be_null) EXPECT_FAIL(run(o, NULL), BFP8_ERR_NULL_POINTER, fn);
    m = *good, m.data = NULL;
    EXPECT_FAIL(run(o, &m), BFP8_ERR_NULL_POINTER, fn);
    m = *good, m.dtype = (bfp8_dtype)42;
    EXPECT_FAIL(run(o, &m), BFP8_ERR_INVALID_VALUE, fn);
    m = *good, m.rows = 0;
    EXPECT_FAIL(run(o, &m), BFP8_ERR_INVALID_VALUE, fn);
    m = *good, m.cols = 0;
    EXPECT_FAIL(run(o, &m), BFP8_ERR_INVALID_VALUE, fn);
    m = *good, m.rows = -3;
    EXPECT_FAIL(run(o, &m), BFP8_ERR_INVALID_VALUE, fn);
    m = *good, m.ld = m.cols - 1;
    EXPECT_FAIL(run(o, &m), BFP8_ERR_LAYOUT, fn);
    m = *good, m.ld = -1;
    EXPECT_FAIL(run(o, &m), BFP8_ERR_LAYOUT, fn);
    m = *good, m.data = (char *)m.data + 1; /* 1 byte off: misaligned for f32 and bf16 */
    EXPECT_FAIL(run(o, &m), BFP8_ERR_ALIGNMENT, fn);
    m = *good, m.rows += 1; /* one row more than the other operands agree on */
    EXPECT_FAIL(run(o, &m), BFP8_ERR_SHAPE, fn);
    m = *good, m.cols += 1;
    m.ld = m.cols;
    EXPECT_FAIL(run(o, &m), BFP8_ERR_SHAPE, fn);
}

typedef bfp8_status (*qmatrix_call)(const operands *o, bfp8_qmatrix *q);

/* any_granularity: the op takes both granularities (dequantize). */
static void bad_qmatrix_views(const operands *o, const bfp8_qmatrix *good, qmatrix_call run, const char *fn,
                              const char *what, int any_granularity) {
    bfp8_qmatrix q;
    fprintf(stderr, "  %s: %s\n", fn, what);
    q = *good, q.data = NULL;
    EXPECT_FAIL(run(o, &q), BFP8_ERR_NULL_POINTER, fn);
    q = *good, q.scales = NULL;
    EXPECT_FAIL(run(o, &q), BFP8_ERR_NULL_POINTER, fn);
    q = *good, q.dtype = BFP8_E5M2; /* only e4m3 is quantized to */
    EXPECT_FAIL(run(o, &q), BFP8_ERR_UNSUPPORTED, fn);
    q = *good, q.dtype = BFP8_F32;
    EXPECT_FAIL(run(o, &q), BFP8_ERR_UNSUPPORTED, fn);
    if (!any_granularity) {
        q = *good, q.granularity = good->granularity == BFP8_GRAN_1X128 ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128;
        EXPECT_FAIL(run(o, &q), BFP8_ERR_LAYOUT, fn);
    }
    q = *good, q.granularity = (bfp8_granularity)7;
    EXPECT_FAIL(run(o, &q), BFP8_ERR_LAYOUT, fn);
    q = *good, q.rows = 0;
    EXPECT_FAIL(run(o, &q), BFP8_ERR_INVALID_VALUE, fn);
    q = *good, q.cols = -1;
    EXPECT_FAIL(run(o, &q), BFP8_ERR_INVALID_VALUE, fn);
    q = *good, q.ld = q.cols - 1;
    EXPECT_FAIL(run(o, &q), BFP8_ERR_LAYOUT, fn);
    if (good->granularity == BFP8_GRAN_1X128) {
        q = *good, q.scale_ld = q.rows - 1; /* rows would overlap */
        EXPECT_FAIL(run(o, &q), BFP8_ERR_LAYOUT, fn);
        q = *good, q.scale_ld = (q.rows + 3) / 4 * 4 + 2; /* >= rows, not 16-byte */
        EXPECT_FAIL(run(o, &q), BFP8_ERR_LAYOUT, fn);
    } else {
        q = *good, q.scale_ld = (q.cols + 127) / 128 - 1;
        EXPECT_FAIL(run(o, &q), BFP8_ERR_LAYOUT, fn);
    }
    q = *good, q.scales = (float *)((char *)q.scales + 2);
    EXPECT_FAIL(run(o, &q), BFP8_ERR_ALIGNMENT, fn);
    q = *good, q.rows += 1;
    if (q.granularity == BFP8_GRAN_1X128 && q.scale_ld < q.rows) q.scale_ld += 4;
    EXPECT_FAIL(run(o, &q), BFP8_ERR_SHAPE, fn);
}

/* ------------------------------------------------------------------------ */
/* Quantize, dequantize, convert                                             */

static const bfp8_quantize_options no_options = {0, NULL};

static bfp8_status q1_x(const operands *o, bfp8_matrix *x) {
    bfp8_qmatrix r = o->x_rows, c = o->x_cols;
    return bfp8_quantize_1x128(ctx, x, &r, &c, &no_options);
}
static bfp8_status q1_rows(const operands *o, bfp8_qmatrix *q) {
    bfp8_qmatrix c = o->x_cols;
    return bfp8_quantize_1x128(ctx, &o->x, q, &c, &no_options);
}
static bfp8_status q1_cols(const operands *o, bfp8_qmatrix *q) {
    bfp8_qmatrix r = o->x_rows;
    return bfp8_quantize_1x128(ctx, &o->x_bf16, &r, q, &no_options);
}
static bfp8_status q128_x(const operands *o, bfp8_matrix *x) {
    bfp8_qmatrix w = o->w_q, wt = o->w_qt;
    return bfp8_quantize_128x128(ctx, x, &w, &wt, &no_options);
}
static bfp8_status q128_out(const operands *o, bfp8_qmatrix *q) {
    bfp8_qmatrix wt = o->w_qt;
    return bfp8_quantize_128x128(ctx, &o->w, q, &wt, &no_options);
}
static bfp8_status q128_out_t(const operands *o, bfp8_qmatrix *q) {
    bfp8_qmatrix w = o->w_q;
    return bfp8_quantize_128x128(ctx, &o->w, &w, q, &no_options);
}
static bfp8_status deq_q(const operands *o, bfp8_qmatrix *q) {
    bfp8_matrix out = o->x;
    return bfp8_dequantize(ctx, q, &out);
}
static bfp8_status deq_out(const operands *o, bfp8_matrix *out) {
    return bfp8_dequantize(ctx, &o->x_rows, out);
}
static bfp8_status conv_src(const operands *o, bfp8_matrix *src) {
    bfp8_matrix dst = o->x_bf16;
    return bfp8_convert(ctx, src, &dst);
}
static bfp8_status conv_dst(const operands *o, bfp8_matrix *dst) { return bfp8_convert(ctx, &o->x, dst); }

static void test_quantize(const operands *o) {
    static const char q1[] = "bfp8_quantize_1x128", q128[] = "bfp8_quantize_128x128";
    bfp8_matrix x = o->x, xw = o->w;
    bfp8_qmatrix r = o->x_rows, c = o->x_cols, w = o->w_q, wt = o->w_qt;

    bad_matrix_views(o, &o->x, q1_x, q1, "x", 0);
    bad_qmatrix_views(o, &o->x_rows, q1_rows, q1, "out_rows", 0);
    bad_qmatrix_views(o, &o->x_cols, q1_cols, q1, "out_cols", 0);
    EXPECT_FAIL(bfp8_quantize_1x128(NULL, &x, &r, &c, NULL), BFP8_ERR_NULL_POINTER, q1);
    EXPECT_FAIL(bfp8_quantize_1x128(ctx, &x, NULL, NULL, NULL), BFP8_ERR_NULL_POINTER, q1);
    x.dtype = BFP8_E4M3; /* a known dtype, but not one that is quantized from */
    EXPECT_FAIL(bfp8_quantize_1x128(ctx, &x, &r, &c, NULL), BFP8_ERR_UNSUPPORTED, q1);
    x = o->x;
    /* out_cols must be the transpose: x's own shape is wrong for it. */
    bfp8_qmatrix not_transposed = new_qmatrix(M, K, BFP8_GRAN_1X128);
    arena_touched();
    EXPECT_FAIL(bfp8_quantize_1x128(ctx, &x, NULL, &not_transposed, NULL), BFP8_ERR_SHAPE, q1);
    /* 128x128 views given to the 1x128 quantizer (and the reverse). */
    EXPECT_FAIL(bfp8_quantize_1x128(ctx, &xw, &w, NULL, NULL), BFP8_ERR_LAYOUT, q1);
    EXPECT_FAIL(bfp8_quantize_128x128(ctx, &x, &r, NULL, NULL), BFP8_ERR_LAYOUT, q128);
    bfp8_quantize_options bad_pow2 = {2, o->flag};
    EXPECT_FAIL(bfp8_quantize_1x128(ctx, &x, &r, &c, &bad_pow2), BFP8_ERR_INVALID_VALUE, q1);
    EXPECT_FAIL(bfp8_quantize_128x128(ctx, &xw, &w, &wt, &bad_pow2), BFP8_ERR_INVALID_VALUE, q128);

    bad_matrix_views(o, &o->w, q128_x, q128, "x", 0);
    bad_qmatrix_views(o, &o->w_q, q128_out, q128, "out", 0);
    bad_qmatrix_views(o, &o->w_qt, q128_out_t, q128, "out_t", 0);
    EXPECT_FAIL(bfp8_quantize_128x128(NULL, &xw, &w, &wt, NULL), BFP8_ERR_NULL_POINTER, q128);
    EXPECT_FAIL(bfp8_quantize_128x128(ctx, &xw, NULL, &wt, NULL), BFP8_ERR_NULL_POINTER, q128);
    /* out_t with out's shape (not transposed). */
    EXPECT_FAIL(bfp8_quantize_128x128(ctx, &xw, &w, &w, NULL), BFP8_ERR_SHAPE, q128);

    static const char deq[] = "bfp8_dequantize", conv[] = "bfp8_convert";
    bad_qmatrix_views(o, &o->x_rows, deq_q, deq, "q", 1);
    bad_matrix_views(o, &o->x, deq_out, deq, "out", 0);
    EXPECT_FAIL(bfp8_dequantize(ctx, NULL, &x), BFP8_ERR_NULL_POINTER, deq);
    EXPECT_FAIL(bfp8_dequantize(NULL, &r, &x), BFP8_ERR_NULL_POINTER, deq);
    x.dtype = BFP8_E4M3;
    EXPECT_FAIL(bfp8_dequantize(ctx, &r, &x), BFP8_ERR_UNSUPPORTED, deq);
    x = o->x;

    bad_matrix_views(o, &o->x, conv_src, conv, "src", 0);
    bad_matrix_views(o, &o->x_bf16, conv_dst, conv, "dst", 0);
    EXPECT_FAIL(bfp8_convert(NULL, &o->x, &x), BFP8_ERR_NULL_POINTER, conv);
}

/* ------------------------------------------------------------------------ */
/* GEMMs                                                                     */

static bfp8_status g12_a(const operands *o, bfp8_qmatrix *a) {
    bfp8_matrix d = o->d;
    return bfp8_gemm_1d2d(ctx, a, &o->w_q, &d);
}
static bfp8_status g12_b(const operands *o, bfp8_qmatrix *b) {
    bfp8_matrix d = o->d;
    return bfp8_gemm_1d2d(ctx, &o->x_rows, b, &d);
}
static bfp8_status g12_d(const operands *o, bfp8_matrix *d) { return bfp8_gemm_1d2d(ctx, &o->x_rows, &o->w_q, d); }
static bfp8_status g11_a(const operands *o, bfp8_qmatrix *a) {
    bfp8_matrix d = o->d_nk;
    return bfp8_gemm_1d1d(ctx, a, &o->xt, &o->c_nk, &d);
}
static bfp8_status g11_b(const operands *o, bfp8_qmatrix *b) {
    bfp8_matrix d = o->d_nk;
    return bfp8_gemm_1d1d(ctx, &o->dyt, b, &o->c_nk, &d);
}
static bfp8_status g11_c(const operands *o, bfp8_matrix *c) {
    bfp8_matrix d = o->d_nk;
    return bfp8_gemm_1d1d(ctx, &o->dyt, &o->xt, c, &d);
}
static bfp8_status g11_d(const operands *o, bfp8_matrix *d) { return bfp8_gemm_1d1d(ctx, &o->dyt, &o->xt, NULL, d); }
static bfp8_status gbf_a(const operands *o, bfp8_matrix *a) {
    bfp8_matrix d = o->d;
    return bfp8_gemm_bf16(ctx, a, 0, &o->b_bf16, 0, NULL, &d);
}
static bfp8_status gbf_b(const operands *o, bfp8_matrix *b) {
    bfp8_matrix d = o->d;
    return bfp8_gemm_bf16(ctx, &o->a_bf16, 0, b, 0, &o->d, &d);
}
static bfp8_status gbf_c(const operands *o, bfp8_matrix *c) {
    bfp8_matrix d = o->d;
    return bfp8_gemm_bf16(ctx, &o->a_bf16, 0, &o->b_bf16, 0, c, &d);
}
static bfp8_status gbf_d(const operands *o, bfp8_matrix *d) {
    return bfp8_gemm_bf16(ctx, &o->a_bf16, 0, &o->b_bf16, 0, NULL, d);
}

static void test_gemms(const operands *o) {
    static const char g12[] = "bfp8_gemm_1d2d", g11[] = "bfp8_gemm_1d1d", gbf[] = "bfp8_gemm_bf16";
    bfp8_matrix d = o->d, d_bf16 = o->d_bf16, d_nk = o->d_nk;
    fprintf(stderr, "  1d2d / 1d1d / bf16: mutated views\n");
    bad_qmatrix_views(o, &o->x_rows, g12_a, g12, "a", 0);
    bad_qmatrix_views(o, &o->w_q, g12_b, g12, "b", 0);
    bad_matrix_views(o, &o->d, g12_d, g12, "d", 0);
    bad_qmatrix_views(o, &o->dyt, g11_a, g11, "a", 0);
    bad_qmatrix_views(o, &o->xt, g11_b, g11, "b", 0);
    bad_matrix_views(o, &o->d_nk, g11_d, g11, "d", 0);
    bad_matrix_views(o, &o->a_bf16, gbf_a, gbf, "a", 0);
    bad_matrix_views(o, &o->b_bf16, gbf_b, gbf, "b", 0);
    bad_matrix_views(o, &o->d, gbf_d, gbf, "d", 0);

    /* Context, operand roles swapped, dtypes. */
    EXPECT_FAIL(bfp8_gemm_1d2d(NULL, &o->x_rows, &o->w_q, &d), BFP8_ERR_NULL_POINTER, g12);
    EXPECT_FAIL(bfp8_gemm_1d2d(ctx, &o->w_q, &o->x_rows, &d), BFP8_ERR_LAYOUT, g12);
    EXPECT_FAIL(bfp8_gemm_1d2d(ctx, &o->x_rows, &o->w_qt, &d), BFP8_ERR_SHAPE, g12); /* K differs */
    d.dtype = BFP8_E4M3;
    EXPECT_FAIL(bfp8_gemm_1d2d(ctx, &o->x_rows, &o->w_q, &d), BFP8_ERR_UNSUPPORTED, g12);
    d = o->d;

    EXPECT_FAIL(bfp8_gemm_1d1d(NULL, &o->dyt, &o->xt, NULL, &d_nk), BFP8_ERR_NULL_POINTER, g11);
    EXPECT_FAIL(bfp8_gemm_1d1d(ctx, &o->dyt, &o->w_qt, NULL, &d_nk), BFP8_ERR_LAYOUT, g11);
    EXPECT_FAIL(bfp8_gemm_1d1d(ctx, &o->dyt, &o->x_cols, NULL, &d), BFP8_ERR_SHAPE, g11);
    EXPECT_FAIL(bfp8_gemm_1d1d(ctx, &o->dyt, &o->x_rows, NULL, &d_nk), BFP8_ERR_SHAPE, g11); /* M vs K */
    {
        bfp8_matrix c = o->c_nk;
        c.dtype = BFP8_BF16; /* the accumulator must be f32 */
        EXPECT_FAIL(bfp8_gemm_1d1d(ctx, &o->dyt, &o->xt, &c, &d_nk), BFP8_ERR_UNSUPPORTED, g11);
        c = o->c_nk;
        c.rows -= 1;
        EXPECT_FAIL(bfp8_gemm_1d1d(ctx, &o->dyt, &o->xt, &c, &d_nk), BFP8_ERR_SHAPE, g11);
        c = o->c_nk;
        c.data = NULL;
        EXPECT_FAIL(bfp8_gemm_1d1d(ctx, &o->dyt, &o->xt, &c, &d_nk), BFP8_ERR_NULL_POINTER, g11);
        c = o->c_nk;
        c.ld = c.cols - 1;
        EXPECT_FAIL(bfp8_gemm_1d1d(ctx, &o->dyt, &o->xt, &c, &d_nk), BFP8_ERR_LAYOUT, g11);
        c = o->c_nk;
        c.data = (char *)c.data + 2;
        EXPECT_FAIL(bfp8_gemm_1d1d(ctx, &o->dyt, &o->xt, &c, &d_nk), BFP8_ERR_ALIGNMENT, g11);
        bfp8_matrix d_nk_bf16 = d_nk;
        d_nk_bf16.dtype = BFP8_BF16; /* bf16 output only without c */
        EXPECT_FAIL(bfp8_gemm_1d1d(ctx, &o->dyt, &o->xt, &o->c_nk, &d_nk_bf16), BFP8_ERR_UNSUPPORTED, g11);
    }

    EXPECT_FAIL(bfp8_gemm_bf16(NULL, &o->a_bf16, 0, &o->b_bf16, 0, NULL, &d), BFP8_ERR_NULL_POINTER, gbf);
    EXPECT_FAIL(bfp8_gemm_bf16(ctx, &o->x, 0, &o->b_bf16, 0, NULL, &d), BFP8_ERR_UNSUPPORTED, gbf);
    EXPECT_FAIL(bfp8_gemm_bf16(ctx, &o->a_bf16, 2, &o->b_bf16, 0, NULL, &d), BFP8_ERR_INVALID_VALUE, gbf);
    EXPECT_FAIL(bfp8_gemm_bf16(ctx, &o->a_bf16, 0, &o->b_bf16, -1, NULL, &d), BFP8_ERR_INVALID_VALUE, gbf);
    EXPECT_FAIL(bfp8_gemm_bf16(ctx, &o->a_bf16, 1, &o->b_bf16, 0, NULL, &d), BFP8_ERR_SHAPE, gbf);
    EXPECT_FAIL(bfp8_gemm_bf16(ctx, &o->a_bf16, 0, &o->b_bf16, 1, NULL, &d), BFP8_ERR_SHAPE, gbf);
    EXPECT_FAIL(bfp8_gemm_bf16(ctx, &o->a_bf16, 0, &o->b_bf16, 0, &o->d, &d_bf16), BFP8_ERR_UNSUPPORTED, gbf);
    bad_matrix_views(o, &o->d, gbf_c, gbf, "c", 1);
    bad_matrix_views(o, &o->c_nk, g11_c, g11, "c", 1);
}

/* ------------------------------------------------------------------------ */
/* The linear layer                                                          */

static void test_linear(void) {
    static const char create[] = "bfp8_linear_create", set[] = "bfp8_linear_set_weight",
                      fwd[] = "bfp8_linear_forward", bwd[] = "bfp8_linear_backward",
                      fwd32[] = "bfp8_linear_forward_f32", bwd32[] = "bfp8_linear_backward_f32";
    enum { LK = 136, LN = 24, LM = 8 };
    bfp8_linear **out = arena_alloc(sizeof *out);
    uint32_t *flags = arena_alloc(BFP8_LINEAR_NUM_FLAGS * sizeof(uint32_t) + 4);
    float *weight = arena_alloc(LN * LK * sizeof(float));
    uint16_t *x = arena_alloc(LM * LK * 2 + 2), *y = arena_alloc(LM * LN * 2 + 2);
    uint16_t *dy = arena_alloc(LM * LN * 2), *dx = arena_alloc(LM * LK * 2 + 2);
    /* The canary is a valid input: 0xa5a5a5a5 and 0xa5a5 are small finite numbers. */
    float *dw = arena_alloc(LN * LK * sizeof(float) + 4);
    float *xf = arena_alloc(LM * LK * 4 + 4), *yf = arena_alloc(LM * LN * 4 + 4);
    float *dyf = arena_alloc(LM * LN * 4), *dxf = arena_alloc(LM * LK * 4 + 4);

    for (int recipe = 0; recipe < 3; ++recipe) {
        fprintf(stderr, "  linear, recipe %s\n", bfp8_recipe_name((bfp8_recipe)recipe));
        const bfp8_linear_config good = {LK, LN, LM, (bfp8_recipe)recipe, 0, NULL};
        bfp8_linear_config cfg = good;
        EXPECT_FAIL(bfp8_linear_create(NULL, ctx, &cfg), BFP8_ERR_NULL_POINTER, create);
        EXPECT_FAIL(bfp8_linear_create(out, NULL, &cfg), BFP8_ERR_NULL_POINTER, create);
        EXPECT_FAIL(bfp8_linear_create(out, ctx, NULL), BFP8_ERR_NULL_POINTER, create);
        cfg = good, cfg.in_features = 0;
        EXPECT_FAIL(bfp8_linear_create(out, ctx, &cfg), BFP8_ERR_INVALID_VALUE, create);
        cfg = good, cfg.out_features = -1;
        EXPECT_FAIL(bfp8_linear_create(out, ctx, &cfg), BFP8_ERR_INVALID_VALUE, create);
        cfg = good, cfg.max_tokens = 0;
        EXPECT_FAIL(bfp8_linear_create(out, ctx, &cfg), BFP8_ERR_INVALID_VALUE, create);
        cfg = good, cfg.recipe = (bfp8_recipe)9;
        EXPECT_FAIL(bfp8_linear_create(out, ctx, &cfg), BFP8_ERR_INVALID_VALUE, create);
        cfg = good, cfg.pow2_scales = 2;
        EXPECT_FAIL(bfp8_linear_create(out, ctx, &cfg), BFP8_ERR_INVALID_VALUE, create);
        cfg = good, cfg.nonfinite_flags = (uint32_t *)((char *)flags + 2);
        EXPECT_FAIL(bfp8_linear_create(out, ctx, &cfg), BFP8_ERR_ALIGNMENT, create);

        bfp8_linear *lin = NULL;
        cfg = good, cfg.nonfinite_flags = flags;
        CHECK_OK(bfp8_linear_create(&lin, ctx, &cfg));
        if (!lin) continue;
        EXPECT_FAIL(bfp8_linear_forward(lin, x, LM, y), BFP8_ERR_INVALID_VALUE, fwd); /* no weight yet */
        EXPECT_FAIL(bfp8_linear_set_weight(NULL, weight), BFP8_ERR_NULL_POINTER, set);
        EXPECT_FAIL(bfp8_linear_set_weight(lin, NULL), BFP8_ERR_NULL_POINTER, set);
        EXPECT_FAIL(bfp8_linear_set_weight(lin, (const float *)((const char *)weight + 1)),
                    BFP8_ERR_ALIGNMENT, set);
        CHECK_OK(bfp8_linear_set_weight(lin, weight));
        arena_touched();
        /* A failed set_weight keeps the last good weight usable. */
        EXPECT_FAIL(bfp8_linear_set_weight(lin, NULL), BFP8_ERR_NULL_POINTER, set);

        EXPECT_FAIL(bfp8_linear_backward(lin, dy, dx, dw, 0), BFP8_ERR_INVALID_VALUE, bwd); /* no forward */
        EXPECT_FAIL(bfp8_linear_forward(NULL, x, LM, y), BFP8_ERR_NULL_POINTER, fwd);
        EXPECT_FAIL(bfp8_linear_forward(lin, NULL, LM, y), BFP8_ERR_NULL_POINTER, fwd);
        EXPECT_FAIL(bfp8_linear_forward(lin, x, LM, NULL), BFP8_ERR_NULL_POINTER, fwd);
        EXPECT_FAIL(bfp8_linear_forward(lin, x, 0, y), BFP8_ERR_SHAPE, fwd);
        EXPECT_FAIL(bfp8_linear_forward(lin, x, LM + 1, y), BFP8_ERR_SHAPE, fwd);
        EXPECT_FAIL(bfp8_linear_forward(lin, (const uint16_t *)((const char *)x + 1), LM, y),
                    BFP8_ERR_ALIGNMENT, fwd);
        EXPECT_FAIL(bfp8_linear_forward(lin, x, LM, (uint16_t *)((char *)y + 1)), BFP8_ERR_ALIGNMENT, fwd);

        CHECK_OK(bfp8_linear_forward(lin, x, LM, y));
        CHECK(arena_touched() > 0, "a valid forward wrote nothing");
        EXPECT_FAIL(bfp8_linear_backward(NULL, dy, dx, dw, 0), BFP8_ERR_NULL_POINTER, bwd);
        EXPECT_FAIL(bfp8_linear_backward(lin, NULL, dx, dw, 0), BFP8_ERR_NULL_POINTER, bwd);
        EXPECT_FAIL(bfp8_linear_backward(lin, dy, dx, NULL, 0), BFP8_ERR_NULL_POINTER, bwd);
        EXPECT_FAIL(bfp8_linear_backward(lin, dy, dx, dw, 2), BFP8_ERR_INVALID_VALUE, bwd);
        EXPECT_FAIL(bfp8_linear_backward(lin, dy, (uint16_t *)((char *)dx + 1), dw, 0), BFP8_ERR_ALIGNMENT, bwd);
        EXPECT_FAIL(bfp8_linear_backward(lin, dy, dx, (float *)((char *)dw + 2), 0), BFP8_ERR_ALIGNMENT, bwd);
        CHECK_OK(bfp8_linear_backward(lin, dy, dx, dw, 0));
        CHECK(arena_touched() > 0, "a valid backward wrote nothing");

        /* the f32 forms: fp8-blockwise only */
        if (recipe == BFP8_RECIPE_FP8_BLOCKWISE) {
            EXPECT_FAIL(bfp8_linear_forward_f32(NULL, xf, LM, yf), BFP8_ERR_NULL_POINTER, fwd32);
            EXPECT_FAIL(bfp8_linear_forward_f32(lin, NULL, LM, yf), BFP8_ERR_NULL_POINTER, fwd32);
            EXPECT_FAIL(bfp8_linear_forward_f32(lin, xf, LM + 1, yf), BFP8_ERR_SHAPE, fwd32);
            EXPECT_FAIL(bfp8_linear_forward_f32(lin, (const float *)((const char *)xf + 2), LM, yf),
                        BFP8_ERR_ALIGNMENT, fwd32);
            EXPECT_FAIL(bfp8_linear_forward_f32(lin, xf, LM, (float *)((char *)yf + 2)), BFP8_ERR_ALIGNMENT, fwd32);
            CHECK_OK(bfp8_linear_forward_f32(lin, xf, LM, yf));
            CHECK(arena_touched() > 0, "a valid f32 forward wrote nothing");
            EXPECT_FAIL(bfp8_linear_backward_f32(lin, NULL, dxf, dw, 0), BFP8_ERR_NULL_POINTER, bwd32);
            EXPECT_FAIL(bfp8_linear_backward_f32(lin, dyf, (float *)((char *)dxf + 2), dw, 0), BFP8_ERR_ALIGNMENT,
                        bwd32);
            EXPECT_FAIL(bfp8_linear_backward_f32(lin, dyf, dxf, dw, 3), BFP8_ERR_INVALID_VALUE, bwd32);
            CHECK_OK(bfp8_linear_backward_f32(lin, dyf, dxf, dw, 0));
            CHECK(arena_touched() > 0, "a valid f32 backward wrote nothing");
        } else {
            EXPECT_FAIL(bfp8_linear_forward_f32(lin, xf, LM, yf), BFP8_ERR_UNSUPPORTED, fwd32);
            EXPECT_FAIL(bfp8_linear_backward_f32(lin, dyf, dxf, dw, 0), BFP8_ERR_UNSUPPORTED, bwd32);
        }
        bfp8_linear_destroy(lin);
    }
}

/* ------------------------------------------------------------------------ */
/* Context, memory, layouts, converters, names                               */

static void test_misc(void) {
    bfp8_context **ctx_out = arena_alloc(sizeof *ctx_out);
    void **ptr_out = arena_alloc(sizeof *ptr_out);
    bfp8_qmatrix *q = arena_alloc(sizeof *q);
    size_t *bytes = arena_alloc(2 * sizeof *bytes);
    bfp8_recipe *recipe = arena_alloc(sizeof *recipe);
    unsigned char *buf = arena_alloc(64);
    fprintf(stderr, "  context, memory, layout, convert_host, names\n");

    EXPECT_FAIL(bfp8_context_create(NULL, BFP8_BACKEND_CPU, 0), BFP8_ERR_NULL_POINTER, "bfp8_context_create");
    EXPECT_FAIL(bfp8_context_create(ctx_out, (bfp8_backend)5, 0), BFP8_ERR_INVALID_VALUE, "bfp8_context_create");
    if (bfp8_cuda_device_count() == 0)
        EXPECT_FAIL(bfp8_context_create(ctx_out, BFP8_BACKEND_CUDA, 0), BFP8_ERR_NO_DEVICE, "");
    EXPECT_FAIL(bfp8_context_set_stream(ctx, buf), BFP8_ERR_UNSUPPORTED, "bfp8_context_set_stream");
    EXPECT_FAIL(bfp8_context_set_stream(NULL, NULL), BFP8_ERR_NULL_POINTER, "bfp8_context_set_stream");
    EXPECT_FAIL(bfp8_context_synchronize(NULL), BFP8_ERR_NULL_POINTER, "bfp8_context_synchronize");
    size_t in_use = 0;
    EXPECT_FAIL(bfp8_device_memory_in_use(ctx, &in_use), BFP8_ERR_UNSUPPORTED, "bfp8_device_memory_in_use");
    EXPECT_FAIL(bfp8_device_memory_in_use(ctx, NULL), BFP8_ERR_NULL_POINTER, "bfp8_device_memory_in_use");
    int *option = arena_alloc(sizeof *option);
    EXPECT_FAIL(bfp8_context_set_option(NULL, BFP8_OPTION_QUANTIZE_PDL, 0), BFP8_ERR_NULL_POINTER,
                "bfp8_context_set_option");
    EXPECT_FAIL(bfp8_context_set_option(ctx, (bfp8_context_option)7, 0), BFP8_ERR_INVALID_VALUE,
                "bfp8_context_set_option");
    EXPECT_FAIL(bfp8_context_set_option(ctx, BFP8_OPTION_QUANTIZE_WARM_L2, 2), BFP8_ERR_INVALID_VALUE,
                "bfp8_context_set_option");
    EXPECT_FAIL(bfp8_context_get_option(ctx, (bfp8_context_option)7, option), BFP8_ERR_INVALID_VALUE,
                "bfp8_context_get_option");
    EXPECT_FAIL(bfp8_context_get_option(ctx, BFP8_OPTION_QUANTIZE_PDL, NULL), BFP8_ERR_NULL_POINTER,
                "bfp8_context_get_option");
    int pdl = -1, warm = -1, gemm_pdl = -1;
    CHECK(bfp8_context_get_option(ctx, BFP8_OPTION_QUANTIZE_PDL, &pdl) == BFP8_OK && pdl == 1 &&
              bfp8_context_get_option(ctx, BFP8_OPTION_QUANTIZE_WARM_L2, &warm) == BFP8_OK && warm == 1 &&
              bfp8_context_get_option(ctx, BFP8_OPTION_GEMM_PDL, &gemm_pdl) == BFP8_OK && gemm_pdl == 1,
          "context options: defaults %d %d %d, expected 1 1 1", pdl, warm, gemm_pdl);
    EXPECT_FAIL(bfp8_context_set_option(ctx, BFP8_OPTION_GEMM_PDL, -1), BFP8_ERR_INVALID_VALUE,
                "bfp8_context_set_option");
    CHECK(bfp8_context_set_option(ctx, BFP8_OPTION_QUANTIZE_WARM_L2, 0) == BFP8_OK &&
              bfp8_context_get_option(ctx, BFP8_OPTION_QUANTIZE_WARM_L2, &warm) == BFP8_OK && warm == 0 &&
              bfp8_context_get_option(ctx, BFP8_OPTION_QUANTIZE_PDL, &pdl) == BFP8_OK && pdl == 1,
          "context options: after setting the L2 warm-up to 0, %d %d", pdl, warm);
    CHECK(bfp8_context_set_option(ctx, BFP8_OPTION_QUANTIZE_WARM_L2, 1) == BFP8_OK, "context options: reset");
    EXPECT_FAIL(bfp8_malloc(NULL, ptr_out, 64), BFP8_ERR_NULL_POINTER, "bfp8_malloc");
    EXPECT_FAIL(bfp8_malloc(ctx, NULL, 64), BFP8_ERR_NULL_POINTER, "bfp8_malloc");
    EXPECT_FAIL(bfp8_malloc(ctx, ptr_out, 0), BFP8_ERR_INVALID_VALUE, "bfp8_malloc");
    /* sizes whose rounding up to 64 bytes would wrap around to a small block */
    EXPECT_FAIL(bfp8_malloc(ctx, ptr_out, SIZE_MAX), BFP8_ERR_OUT_OF_MEMORY, "bfp8_malloc");
    EXPECT_FAIL(bfp8_malloc(ctx, ptr_out, SIZE_MAX - 40), BFP8_ERR_OUT_OF_MEMORY, "bfp8_malloc");
    EXPECT_FAIL(bfp8_memset_zero(ctx, NULL, 64), BFP8_ERR_NULL_POINTER, "bfp8_memset_zero");
    EXPECT_FAIL(bfp8_copy_to_backend(ctx, NULL, buf, 8), BFP8_ERR_NULL_POINTER, "bfp8_copy_to_backend");
    EXPECT_FAIL(bfp8_copy_to_host(ctx, buf, NULL, 8), BFP8_ERR_NULL_POINTER, "bfp8_copy_to_host");

    EXPECT_FAIL(bfp8_qmatrix_layout(NULL, 4, 4, BFP8_GRAN_1X128, bytes, bytes + 1), BFP8_ERR_NULL_POINTER,
                "bfp8_qmatrix_layout");
    EXPECT_FAIL(bfp8_qmatrix_layout(q, 0, 4, BFP8_GRAN_1X128, bytes, bytes + 1), BFP8_ERR_INVALID_VALUE,
                "bfp8_qmatrix_layout");
    EXPECT_FAIL(bfp8_qmatrix_layout(q, 4, -4, BFP8_GRAN_128X128, bytes, bytes + 1), BFP8_ERR_INVALID_VALUE,
                "bfp8_qmatrix_layout");
    EXPECT_FAIL(bfp8_qmatrix_layout(q, 4, 4, (bfp8_granularity)0, bytes, bytes + 1), BFP8_ERR_INVALID_VALUE,
                "bfp8_qmatrix_layout");
    /* layouts whose ld or byte counts do not fit in an int64_t */
    EXPECT_FAIL(bfp8_qmatrix_layout(q, 1, INT64_MAX, BFP8_GRAN_1X128, bytes, bytes + 1), BFP8_ERR_INVALID_VALUE,
                "bfp8_qmatrix_layout");
    EXPECT_FAIL(bfp8_qmatrix_layout(q, INT64_MAX, 125, BFP8_GRAN_128X128, bytes, bytes + 1), BFP8_ERR_INVALID_VALUE,
                "bfp8_qmatrix_layout");
    EXPECT_FAIL(bfp8_qmatrix_layout(q, (int64_t)1 << 40, (int64_t)1 << 30, BFP8_GRAN_1X128, bytes, bytes + 1),
                BFP8_ERR_INVALID_VALUE, "bfp8_qmatrix_layout");

    EXPECT_FAIL(bfp8_convert_host(BFP8_E4M3, buf, (bfp8_dtype)9, buf + 32, 4), BFP8_ERR_INVALID_VALUE,
                "bfp8_convert_host");
    EXPECT_FAIL(bfp8_convert_host((bfp8_dtype)-1, buf, BFP8_F32, buf + 32, 4), BFP8_ERR_INVALID_VALUE,
                "bfp8_convert_host");
    EXPECT_FAIL(bfp8_convert_host(BFP8_E4M3, NULL, BFP8_F32, buf + 32, 4), BFP8_ERR_NULL_POINTER,
                "bfp8_convert_host");
    EXPECT_FAIL(bfp8_convert_host(BFP8_E4M3, buf, BFP8_F32, NULL, 4), BFP8_ERR_NULL_POINTER,
                "bfp8_convert_host");

    EXPECT_FAIL(bfp8_recipe_from_name("fp9-blockwise", recipe), BFP8_ERR_INVALID_VALUE, "bfp8_recipe_from_name");
    EXPECT_FAIL(bfp8_recipe_from_name(NULL, recipe), BFP8_ERR_NULL_POINTER, "bfp8_recipe_from_name");
    EXPECT_FAIL(bfp8_recipe_from_name("bf16", NULL), BFP8_ERR_NULL_POINTER, "bfp8_recipe_from_name");
    CHECK(bfp8_recipe_name((bfp8_recipe)3) == NULL, "unknown recipe has a name");
    CHECK(bfp8_dtype_size((bfp8_dtype)4) == 0, "unknown dtype has a size");
    CHECK(bfp8_status_name((bfp8_status)99) != NULL, "bfp8_status_name returned NULL");
}

/* The non-finite flag must be a 4-byte aligned pointer. */
static void test_flag_alignment(const operands *o) {
    bfp8_matrix x = o->x, w = o->w;
    bfp8_qmatrix r = o->x_rows, wq = o->w_q;
    const bfp8_quantize_options bad = {0, (uint32_t *)((char *)o->flag + 1)};
    fprintf(stderr, "  quantize: misaligned nonfinite_flag\n");
    EXPECT_FAIL(bfp8_quantize_1x128(ctx, &x, &r, NULL, &bad), BFP8_ERR_ALIGNMENT, "bfp8_quantize_1x128");
    EXPECT_FAIL(bfp8_quantize_128x128(ctx, &w, &wq, NULL, &bad), BFP8_ERR_ALIGNMENT, "bfp8_quantize_128x128");
}

/* ------------------------------------------------------------------------ */
/* Positive control: the same calls with valid arguments succeed and write;  */
/* shapes the CPU backend must accept do; padding is never written.          */

/* Bytes of m's padding (columns cols..ld-1 of each row) that are not canary. */
static int64_t padding_touched(const unsigned char *data, int64_t rows, int64_t cols, int64_t ld, size_t elem) {
    int64_t touched = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (size_t b = (size_t)cols * elem; b < (size_t)ld * elem; ++b)
            touched += data[(size_t)r * ld * elem + b] != CANARY;
    return touched;
}

/* Bytes of [p, p + bytes) that no longer hold the canary. */
static size_t region_touched(const void *p, size_t bytes) {
    size_t touched = 0;
    for (size_t i = 0; i < bytes; ++i) touched += ((const unsigned char *)p)[i] != CANARY;
    return touched;
}

/* Inputs are the canary (small finite values); each output must be written. */
static void test_valid_calls(const operands *o) {
    fprintf(stderr, "  positive control\n");
    bfp8_matrix x = o->x, w = o->w, d = o->d, d_nk = o->d_nk, xb = o->x_bf16, c_nk = o->c_nk;
    bfp8_qmatrix r = o->x_rows, c = o->x_cols, wq = o->w_q, wqt = o->w_qt;
    CHECK_OK(bfp8_quantize_1x128(ctx, &x, &r, &c, NULL));
    CHECK(padding_touched(r.data, M, K, r.ld, 1) == 0, "quantize_1x128 wrote into the ld padding");
    CHECK(region_touched(r.data, M * r.ld) > 0 && region_touched(c.scales, sizeof(float)) > 0,
          "a valid quantize_1x128 wrote nothing");
    arena_touched();
    CHECK_OK(bfp8_quantize_128x128(ctx, &w, &wq, &wqt, NULL));
    CHECK(region_touched(wqt.data, K * wqt.ld) > 0 && region_touched(wq.scales, sizeof(float)) > 0,
          "a valid quantize_128x128 wrote nothing");
    arena_touched();
    CHECK_OK(bfp8_dequantize(ctx, &r, &x));
    CHECK(region_touched(x.data, M * K * sizeof(float)) > 0, "a valid dequantize wrote nothing");
    arena_touched();
    CHECK_OK(bfp8_convert(ctx, &x, &xb));
    CHECK(region_touched(xb.data, M * K * 2) > 0, "a valid convert wrote nothing");
    arena_touched();

    /* d with a padded ld: the GEMM writes the N columns only. */
    bfp8_matrix dp = {arena_alloc((size_t)(M * (N + 3)) * sizeof(float)), BFP8_F32, M, N, N + 3};
    CHECK_OK(bfp8_gemm_1d2d(ctx, &r, &wq, &dp));
    CHECK(padding_touched(dp.data, M, N, dp.ld, sizeof(float)) == 0, "gemm_1d2d wrote into d's ld padding");
    CHECK(region_touched(dp.data, M * dp.ld * sizeof(float)) > 0, "a valid gemm_1d2d wrote nothing");
    arena_touched();
    CHECK_OK(bfp8_gemm_1d2d(ctx, &r, &wq, &d));
    CHECK(region_touched(d.data, M * N * sizeof(float)) > 0, "a valid gemm_1d2d wrote nothing");
    arena_touched();
    /* With the canary as c, c + A.B rounds back to c: accumulate into zeros. */
    memset(c_nk.data, 0, N * K * sizeof(float));
    CHECK_OK(bfp8_gemm_1d1d(ctx, &o->dyt, &o->xt, &c_nk, &d_nk));
    CHECK(region_touched(d_nk.data, N * K * sizeof(float)) > 0, "a valid gemm_1d1d wrote nothing");
    CHECK_OK(bfp8_gemm_1d1d(ctx, &o->dyt, &o->xt, &c_nk, &c_nk)); /* c aliasing d is allowed */
    CHECK(region_touched(c_nk.data, N * K * sizeof(float)) == N * K * sizeof(float),
          "gemm_1d1d with c = d left zeros");
    arena_touched();
    memset(d.data, 0, M * N * sizeof(float));
    CHECK_OK(bfp8_gemm_bf16(ctx, &o->a_bf16, 0, &o->b_bf16, 0, &d, &d));
    CHECK(region_touched(d.data, M * N * sizeof(float)) == M * N * sizeof(float), "gemm_bf16 with c = d left zeros");
    arena_touched();

    /* Shapes off every fast path: M = 1, K = 17 (not a multiple of 16), N = 3. */
    bfp8_qmatrix a1 = new_qmatrix(1, 17, BFP8_GRAN_1X128), b1 = new_qmatrix(3, 17, BFP8_GRAN_128X128);
    bfp8_matrix d1 = new_matrix(BFP8_BF16, 1, 3);
    CHECK_OK(bfp8_gemm_1d2d(ctx, &a1, &b1, &d1));
    CHECK(region_touched(d1.data, 3 * 2) > 0, "gemm_1d2d with M = 1, K = 17, N = 3 wrote nothing");
    arena_touched();
}

/* A caller that adds context to a cause passes bfp8_last_error() back into
 * bfp8_fail, which writes that same buffer: the message must survive. */
static void test_message_chaining(void) {
    bfp8_fail(BFP8_ERR_IO, "inner cause %d", 7);
    const bfp8_status st = bfp8_fail(BFP8_ERR_IO, "outer: %s", bfp8_last_error());
    CHECK(st == BFP8_ERR_IO, "bfp8_fail returned %d", (int)st);
    CHECK(strcmp(bfp8_last_error(), "outer: inner cause 7") == 0, "chained message reads \"%s\"",
          bfp8_last_error());
}

int main(void) {
    if (bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0) != BFP8_OK) test_fatal("context: %s", bfp8_last_error());
    test_message_chaining();
    const operands o = make_operands();
    test_quantize(&o);
    test_flag_alignment(&o);
    test_gemms(&o);
    test_linear();
    test_misc();
    test_valid_calls(&o);
    for (int i = 0; i < arena_count; ++i) bfp8_free(ctx, arena[i].p);
    bfp8_context_destroy(ctx);
    return test_exit_code("test_bad_input");
}
