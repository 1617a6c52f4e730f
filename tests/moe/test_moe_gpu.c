/*
 * test_moe_gpu.c - the mixture-of-experts ops and layer on the CUDA backend
 * against the CPU reference (test_moe_ops / test_moe_layer check that one).
 *
 *   ops, bit for bit on the same inputs: top-k choices, route_backward,
 *     dispatch (random, every token to one expert, experts without tokens,
 *     capacity drops, thousands of slots), permute with the fused
 *     quantization (f32 and bf16, NaN groups, power-of-two scales), combine,
 *     combine_backward; to rounding (expf): scores, weights, SwiGLU.
 *   the layer, every recipe: y, dx and every weight gradient by SQNR against
 *     the CPU layer; a second GPU run gives the same bits.
 *
 *   build/tests/moe/test_moe_gpu       (exit 77 without a GPU)
 */
#include <math.h>
#include <string.h>

#include "test_util.h"

static bfp8_context *cpu, *gpu;

static void *up(const void *host, size_t bytes) {
    void *d = NULL;
    CHECK_OK(bfp8_malloc(gpu, &d, bytes ? bytes : 1));
    if (d && host) CHECK_OK(bfp8_copy_to_backend(gpu, d, host, bytes));
    if (!d) test_fatal("device allocation of %zu bytes failed", bytes);
    return d;
}

static void *down(const void *dev, size_t bytes) {
    void *h = test_malloc(bytes ? bytes : 1);
    CHECK_OK(bfp8_copy_to_host(gpu, h, dev, bytes));
    return h;
}

static int64_t differ_bytes(const char *what, const void *a, const void *b, size_t bytes) {
    return test_compare_bytes(what, a, (int64_t)bytes, b, (int64_t)bytes, 1, (int64_t)bytes);
}

/* f32 values that differ in their bits, any two NaNs equal (arithmetic on a
 * NaN keeps its payload on the host, not on the GPU). */
static int64_t differ_f32(const char *what, const float *a, const float *b, int64_t n) {
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i)
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) {
            if (differ++ < 4) fprintf(stderr, "  %s: [%lld] %.9g != %.9g\n", what, (long long)i, a[i], b[i]);
        }
    return differ;
}

/* ------------------------------------------------------------------------ */
/* Router                                                                    */

static void fill_logits(float *logits, int64_t T, int E, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    const float spacing = 2.8f / (float)E;
    for (int64_t t = 0; t < T; ++t) {
        for (int e = 0; e < E; ++e) logits[t * E + e] = (float)e;
        for (int e = E - 1; e > 0; --e) {
            const int j = (int)test_rng_range(&rng, 0, e);
            const float tmp = logits[t * E + e];
            logits[t * E + e] = logits[t * E + j], logits[t * E + j] = tmp;
        }
        for (int e = 0; e < E; ++e)
            logits[t * E + e] = spacing * (logits[t * E + e] + 0.14f * (float)test_rng_uniform(&rng)) - 1.0f;
    }
}

static double max_rel(const float *a, const float *b, int64_t n, double floor) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i) worst = fmax(worst, fabs((double)a[i] - b[i]) / (floor + fabs((double)a[i])));
    return worst;
}

static void test_route(int64_t T, int E, int k, bfp8_moe_score_fn fn, int normalize, int biased, int aux) {
    char what[96];
    snprintf(what, sizeof what, "route T=%lld E=%d k=%d fn=%d norm=%d bias=%d aux=%d", (long long)T, E, k, (int)fn,
             normalize, biased, aux);
    const size_t te = (size_t)(T * E), tk = (size_t)(T * k);
    float *logits = test_malloc(te * 4), *bias = test_malloc((size_t)E * 4), *sg = test_malloc((size_t)E * 4);
    float *dw = test_malloc(tk * 4);
    fill_logits(logits, T, E, 31 + (uint64_t)E);
    for (int e = 0; e < E; ++e) bias[e] = e == E / 3 ? 10.0f : 0.0f;
    test_fill_f32(sg, 1, E, E, 0.3f, 0, 2);
    test_fill_f32(dw, T, k, k, 1.0f, 0, 3);
    float *c_s = test_malloc(te * 4), *c_w = test_malloc(tk * 4), *c_sum = test_malloc((size_t)E * 4);
    float *c_dl = test_malloc(te * 4);
    int32_t *c_ex = test_malloc(tk * 4);
    const float *b = biased ? bias : NULL, *g = aux ? sg : NULL;
    CHECK_OK(bfp8_moe_route(cpu, logits, b, T, E, k, fn, normalize, 1.5f, c_s, c_ex, c_w, c_sum));
    CHECK_OK(bfp8_moe_route_backward(cpu, c_s, c_ex, dw, g, T, E, k, fn, normalize, 1.5f, c_dl));
    float *d_logits = up(logits, te * 4), *d_bias = up(bias, (size_t)E * 4), *d_sg = up(sg, (size_t)E * 4);
    float *d_s = up(NULL, te * 4), *d_w = up(NULL, tk * 4), *d_sum = up(NULL, (size_t)E * 4);
    float *d_dl = up(NULL, te * 4), *d_dw = up(dw, tk * 4), *d_cs = up(c_s, te * 4);
    int32_t *d_ex = up(NULL, tk * 4), *d_cex = up(c_ex, tk * 4);
    CHECK_OK(bfp8_moe_route(gpu, d_logits, biased ? d_bias : NULL, T, E, k, fn, normalize, 1.5f, d_s, d_ex, d_w,
                            d_sum));
    /* the backward on the CPU's scores and choices: the same bits */
    CHECK_OK(bfp8_moe_route_backward(gpu, d_cs, d_cex, d_dw, aux ? d_sg : NULL, T, E, k, fn, normalize, 1.5f, d_dl));
    float *s = down(d_s, te * 4), *w = down(d_w, tk * 4), *sum = down(d_sum, (size_t)E * 4), *dl = down(d_dl, te * 4);
    int32_t *ex = down(d_ex, tk * 4);
    CHECK(differ_bytes(what, ex, c_ex, tk * 4) == 0, "%s: top-k choices differ from the CPU's", what);
    const double es = max_rel(c_s, s, (int64_t)te, 1e-6), ew = max_rel(c_w, w, (int64_t)tk, 1e-6);
    const double esum = max_rel(c_sum, sum, E, 1e-3);
    CHECK(es < 1e-5 && ew < 1e-5 && esum < 1e-4, "%s: scores %.3g, weights %.3g, sums %.3g relative", what, es, ew,
          esum);
    CHECK(test_compare_f32_bits(what, c_dl, dl, (int64_t)te) == 0, "%s: d_logits differ from the CPU's", what);
    void *dev[] = {d_logits, d_bias, d_sg, d_s, d_w, d_sum, d_dl, d_dw, d_cs, d_ex, d_cex};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) bfp8_free(gpu, dev[i]);
    free(logits), free(bias), free(sg), free(dw), free(c_s), free(c_w), free(c_sum), free(c_dl), free(c_ex);
    free(s), free(w), free(sum), free(dl), free(ex);
}

/* Routing tables with out-of-range experts: skipped on both backends alike. */
static void test_wild_experts(void) {
    const int32_t wild[6] = {1, 99, -3, 2, 0, 3};
    const float dwt[6] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, sc[12] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f,
                                                                          0.7f, 0.8f, 0.9f, 0.15f, 0.25f, 0.35f};
    float dlc[12], *d_dl = up(NULL, sizeof dlc);
    int32_t src_c[6], rows_c[512], *d_wild = up(wild, sizeof wild), *d_src = up(NULL, sizeof src_c);
    int32_t *d_rows = up(NULL, sizeof rows_c);
    int64_t offc[5], routedc[4], *d_off = up(NULL, sizeof offc), *d_routed = up(NULL, sizeof routedc);
    float *d_sc = up(sc, sizeof sc), *d_dw = up(dwt, sizeof dwt);
    CHECK_OK(bfp8_moe_route_backward(cpu, sc, wild, dwt, NULL, 3, 4, 2, BFP8_MOE_SCORE_SOFTMAX, 1, 1.0f, dlc));
    CHECK_OK(bfp8_moe_route_backward(gpu, d_sc, d_wild, d_dw, NULL, 3, 4, 2, BFP8_MOE_SCORE_SOFTMAX, 1, 1.0f, d_dl));
    CHECK_OK(bfp8_moe_dispatch(cpu, wild, 3, 2, 4, 0, 512, src_c, rows_c, offc, routedc));
    CHECK_OK(bfp8_moe_dispatch(gpu, d_wild, 3, 2, 4, 0, 512, d_src, d_rows, d_off, d_routed));
    float *dlg = down(d_dl, sizeof dlc);
    int32_t *src_g = down(d_src, sizeof src_c);
    int64_t *offg = down(d_off, sizeof offc), *routedg = down(d_routed, sizeof routedc);
    CHECK(test_compare_f32_bits("wild d_logits", dlc, dlg, 12) == 0, "route_backward with wild experts differs");
    CHECK(memcmp(src_c, src_g, sizeof src_c) == 0 && memcmp(offc, offg, sizeof offc) == 0 &&
              memcmp(routedc, routedg, sizeof routedc) == 0,
          "dispatch with wild experts differs");
    void *dev[] = {d_dl, d_wild, d_src, d_rows, d_off, d_routed, d_sc, d_dw};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) bfp8_free(gpu, dev[i]);
    free(dlg), free(src_g), free(offg), free(routedg);
}

/* ------------------------------------------------------------------------ */
/* Dispatch, permute, combine                                                */

typedef struct plan {
    int64_t T, P, max_rows;
    int k, E;
    int32_t *slot_row, *row_slot; /* host (the CPU's) */
    int32_t *d_slot_row, *d_row_slot;
} plan;

/* Dispatch ex on both backends, compare, keep the tables on both sides. */
static plan dispatch_both(const char *what, const int32_t *ex, int64_t T, int k, int E, int64_t capacity) {
    plan p = {T, 0, bfp8_moe_max_rows(T, k, E), k, E, NULL, NULL, NULL, NULL};
    const size_t slots = (size_t)(T * k), rows = (size_t)p.max_rows;
    p.slot_row = test_malloc(slots * 4), p.row_slot = test_malloc(rows * 4);
    int64_t *off = test_malloc((size_t)(E + 1) * 8), *routed = test_malloc((size_t)E * 8);
    CHECK_OK(bfp8_moe_dispatch(cpu, ex, T, k, E, capacity, p.max_rows, p.slot_row, p.row_slot, off, routed));
    int32_t *d_ex = up(ex, slots * 4);
    p.d_slot_row = up(NULL, slots * 4), p.d_row_slot = up(NULL, rows * 4);
    int64_t *d_off = up(NULL, (size_t)(E + 1) * 8), *d_routed = up(NULL, (size_t)E * 8);
    CHECK_OK(bfp8_moe_dispatch(gpu, d_ex, T, k, E, capacity, p.max_rows, p.d_slot_row, p.d_row_slot, d_off,
                               d_routed));
    int64_t *g_off = down(d_off, (size_t)(E + 1) * 8), *g_routed = down(d_routed, (size_t)E * 8);
    int32_t *g_slot_row = down(p.d_slot_row, slots * 4), *g_row_slot = down(p.d_row_slot, rows * 4);
    p.P = off[E];
    int64_t differ = differ_bytes(what, off, g_off, (size_t)(E + 1) * 8);
    differ += differ_bytes(what, routed, g_routed, (size_t)E * 8);
    differ += differ_bytes(what, p.slot_row, g_slot_row, slots * 4);
    differ += differ_bytes(what, p.row_slot, g_row_slot, (size_t)p.P * 4);
    CHECK(differ == 0, "%s: the GPU's dispatch tables differ from the CPU's", what);
    bfp8_free(gpu, d_ex), bfp8_free(gpu, d_off), bfp8_free(gpu, d_routed);
    free(off), free(routed), free(g_off), free(g_routed), free(g_slot_row), free(g_row_slot);
    return p;
}

static void plan_free(plan *p) {
    bfp8_free(gpu, p->d_slot_row), bfp8_free(gpu, p->d_row_slot);
    free(p->slot_row), free(p->row_slot);
}

/* Codes and scales of two rows x cols 1x128 layouts (host), padding not compared. */
static int64_t differ_q(const char *what, const bfp8_qmatrix *q, const uint8_t *data, const float *scales) {
    int64_t differ = test_compare_bytes(what, q->data, q->ld, data, q->ld, q->rows, q->cols);
    for (int64_t kb = 0; kb < (q->cols + 127) / 128; ++kb)
        differ += test_compare_f32_bits(what, q->scales + kb * q->scale_ld, scales + kb * q->scale_ld, q->rows);
    return differ;
}

/* Codes and scales of a host 1x128 layout against its device copy, bit for bit (whole buffers). */
static int64_t differ_qt(const char *what, const bfp8_qmatrix *host, const bfp8_qmatrix *dev, size_t data_bytes,
                         size_t scale_bytes) {
    void *d = down(dev->data, data_bytes), *s = down(dev->scales, scale_bytes);
    const int64_t differ = differ_q(what, host, d, s);
    free(d), free(s);
    return differ;
}

/* A rows x cols 1x128 layout in host memory (host) and in device memory (dev); its data and scale bytes. */
static void alloc_q_pair(int64_t rows, int64_t cols, bfp8_qmatrix *host, bfp8_qmatrix *dev, size_t *data_bytes,
                         size_t *scale_bytes) {
    CHECK_OK(bfp8_qmatrix_layout(host, rows, cols, BFP8_GRAN_1X128, data_bytes, scale_bytes));
    *dev = *host;
    host->data = test_malloc(*data_bytes), host->scales = test_malloc(*scale_bytes);
    dev->data = up(NULL, *data_bytes), dev->scales = up(NULL, *scale_bytes);
}

/* permute, combine, combine_backward of plan p on both backends, compared bit for bit. */
static void test_data_ops(const char *name, const plan *p, int64_t H, bfp8_dtype in_dtype, bfp8_dtype out_dtype,
                          bfp8_dtype yp_dtype, unsigned fill, int pow2) {
    char what[128];
    snprintf(what, sizeof what, "%s H=%lld in=%s out=%s yp=%s pow2=%d", name, (long long)H, bfp8_dtype_name(in_dtype),
             bfp8_dtype_name(out_dtype), bfp8_dtype_name(yp_dtype), pow2);
    const int64_t T = p->T, P = p->P;
    const int k = p->k;
    const size_t isz = bfp8_dtype_size(in_dtype), osz = bfp8_dtype_size(out_dtype), ysz = bfp8_dtype_size(yp_dtype);
    void *x = test_malloc((size_t)(T * H) * isz), *yp = test_malloc((size_t)(P * H) * ysz);
    float *w = test_malloc((size_t)(T * k) * 4);
    if (in_dtype == BFP8_F32)
        test_fill_f32(x, T, H, H, 1.0f, fill, 41);
    else
        test_fill_bf16(x, T, H, H, 1.0f, fill, 41);
    if (yp_dtype == BFP8_F32)
        test_fill_f32(yp, P, H, H, 1.0f, 0, 42);
    else
        test_fill_bf16(yp, P, H, H, 1.0f, 0, 42);
    test_fill_f32(w, T, k, k, 1.0f, 0, 43);
    bfp8_qmatrix qc, qg;
    size_t db, sb;
    alloc_q_pair(P, H, &qc, &qg, &db, &sb);
    /* the columns' quantization (H x P) where H is a multiple of 128 */
    const int cols_q = H % 128 == 0;
    bfp8_qmatrix tc, tg;
    size_t tdb, tsb;
    alloc_q_pair(H, P, &tc, &tg, &tdb, &tsb);
    uint32_t flag_c = 0, *d_flag = up(&flag_c, 4);
    const bfp8_quantize_options oc = {pow2, &flag_c}, og = {pow2, d_flag};
    void *xpc = test_malloc((size_t)(P * H) * osz), *d_x = up(x, (size_t)(T * H) * isz);
    void *d_xp = up(NULL, (size_t)(P * H) * osz);
    const bfp8_matrix xc = {x, in_dtype, T, H, H}, xg = {d_x, in_dtype, T, H, H};
    bfp8_matrix xpcm = {xpc, out_dtype, P, H, H}, xpgm = {d_xp, out_dtype, P, H, H};
    CHECK_OK(bfp8_moe_permute(cpu, &xc, p->row_slot, k, &xpcm, &qc, cols_q ? &tc : NULL, &oc));
    CHECK_OK(bfp8_moe_permute(gpu, &xg, p->d_row_slot, k, &xpgm, &qg, cols_q ? &tg : NULL, &og));
    void *xpg = down(d_xp, (size_t)(P * H) * osz), *qgd = down(qg.data, db), *qgs = down(qg.scales, sb);
    uint32_t *flag_g = down(d_flag, 4);
    int64_t differ = differ_bytes(what, xpc, xpg, (size_t)(P * H) * osz);
    differ += differ_q(what, &qc, qgd, qgs) + (cols_q ? differ_qt(what, &tc, &tg, tdb, tsb) : 0);
    CHECK(differ == 0 && flag_c == *flag_g, "%s: permute differs (flags %u, %u)", what, flag_c, *flag_g);
    if (cols_q) { /* the columns alone: the same codes */
        CHECK_OK(bfp8_memset_zero(gpu, tg.data, tdb));
        CHECK_OK(bfp8_memset_zero(gpu, tg.scales, tsb));
        CHECK_OK(bfp8_moe_permute(gpu, &xg, p->d_row_slot, k, NULL, NULL, &tg, &og));
        CHECK(differ_qt(what, &tc, &tg, tdb, tsb) == 0, "%s: permute's columns alone differ", what);
    }

    /* combine into y (out dtype), accumulating; then the backward from dy = x's rows (in dtype) */
    void *y0 = test_malloc((size_t)(T * H) * osz), *d_yp = up(yp, (size_t)(P * H) * ysz);
    float *d_w = up(w, (size_t)(T * k) * 4);
    if (out_dtype == BFP8_F32)
        test_fill_f32(y0, T, H, H, 1.0f, 0, 44);
    else
        test_fill_bf16(y0, T, H, H, 1.0f, 0, 44);
    void *d_y = up(y0, (size_t)(T * H) * osz);
    const bfp8_matrix ypc = {yp, yp_dtype, P, H, H}, ypg = {d_yp, yp_dtype, P, H, H};
    bfp8_matrix yc = {y0, out_dtype, T, H, H}, yg = {d_y, out_dtype, T, H, H};
    CHECK_OK(bfp8_moe_combine(cpu, &ypc, p->slot_row, w, k, 1, &yc));
    CHECK_OK(bfp8_moe_combine(gpu, &ypg, p->d_slot_row, d_w, k, 1, &yg));
    void *y = down(d_y, (size_t)(T * H) * osz);
    CHECK(differ_bytes(what, y0, y, (size_t)(T * H) * osz) == 0, "%s: combine differs", what);
    float *dwc = test_malloc((size_t)(T * k) * 4), *d_dw = up(NULL, (size_t)(T * k) * 4);
    CHECK_OK(bfp8_moe_combine_backward(cpu, &xc, &ypc, p->row_slot, p->slot_row, w, k, &xpcm, &qc,
                                       cols_q ? &tc : NULL, &oc, dwc));
    CHECK_OK(bfp8_moe_combine_backward(gpu, &xg, &ypg, p->d_row_slot, p->d_slot_row, d_w, k, &xpgm, &qg,
                                       cols_q ? &tg : NULL, &og, d_dw));
    free(xpg), free(qgd), free(qgs);
    xpg = down(d_xp, (size_t)(P * H) * osz), qgd = down(qg.data, db), qgs = down(qg.scales, sb);
    float *dwg = down(d_dw, (size_t)(T * k) * 4);
    differ = out_dtype == BFP8_F32 ? differ_f32(what, xpc, xpg, P * H)
                                   : differ_bytes(what, xpc, xpg, (size_t)(P * H) * 2);
    differ += differ_q(what, &qc, qgd, qgs) + (cols_q ? differ_qt(what, &tc, &tg, tdb, tsb) : 0);
    differ += differ_f32(what, dwc, dwg, T * k);
    CHECK(differ == 0, "%s: combine_backward differs", what);
    if (cols_q) { /* the columns alone (weights applied): the same codes */
        CHECK_OK(bfp8_memset_zero(gpu, tg.data, tdb));
        CHECK_OK(bfp8_memset_zero(gpu, tg.scales, tsb));
        CHECK_OK(bfp8_moe_combine_backward(gpu, &xg, &ypg, p->d_row_slot, p->d_slot_row, d_w, k, NULL, NULL, &tg,
                                           &og, NULL));
        CHECK(differ_qt(what, &tc, &tg, tdb, tsb) == 0, "%s: combine_backward's columns alone differ", what);
    }
    /* the weight gradient alone (no permuted output) */
    float *d_dw2 = up(NULL, (size_t)(T * k) * 4);
    CHECK_OK(bfp8_moe_combine_backward(gpu, &xg, &ypg, p->d_row_slot, p->d_slot_row, d_w, k, NULL, NULL, NULL, NULL,
                                       d_dw2));
    float *dwg2 = down(d_dw2, (size_t)(T * k) * 4);
    CHECK(differ_f32(what, dwc, dwg2, T * k) == 0, "%s: combine_backward's weight gradient alone differs", what);
    bfp8_free(gpu, d_dw2), free(dwg2);
    bfp8_free(gpu, tg.data), bfp8_free(gpu, tg.scales), free(tc.data), free(tc.scales);
    void *dev[] = {qg.data, qg.scales, d_flag, d_x, d_xp, d_yp, d_w, d_y, d_dw};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) bfp8_free(gpu, dev[i]);
    free(x), free(yp), free(w), free(qc.data), free(qc.scales), free(xpc), free(xpg), free(qgd), free(qgs);
    free(flag_g), free(y0), free(y), free(dwc), free(dwg);
}

static void test_dispatch_and_data(void) {
    enum { T = 3000, E = 64, K = 6 };
    int32_t *ex = test_malloc((size_t)T * K * 4);
    test_rng rng;
    test_rng_seed(&rng, 77);
    for (int64_t t = 0; t < T; ++t) {
        int used[E] = {0};
        for (int j = 0; j < K; ++j) {
            int e;
            do e = (int)test_rng_range(&rng, 0, E / 2 + (t % 2) * (E / 2 - 1)); while (used[e]);
            used[e] = 1, ex[t * K + j] = e;
        }
    }
    plan p = dispatch_both("random k=6", ex, T, K, E, 0);
    test_data_ops("random k=6", &p, 384, BFP8_F32, BFP8_F32, BFP8_BF16, TEST_FILL_HARD, 0);
    test_data_ops("random k=6", &p, 200, BFP8_BF16, BFP8_BF16, BFP8_F32, TEST_FILL_NONFINITE, 1);
    test_data_ops("random k=6", &p, 256, BFP8_F32, BFP8_BF16, BFP8_BF16, TEST_FILL_WIDE_RANGE, 0);
    test_data_ops("random k=6", &p, 258, BFP8_F32, BFP8_F32, BFP8_BF16, 0, 0);
    plan_free(&p);
    p = dispatch_both("random k=6 capacity 150", ex, T, K, E, 150);
    test_data_ops("capacity 150", &p, 128, BFP8_F32, BFP8_F32, BFP8_F32, 0, 0);
    plan_free(&p);
    for (int64_t t = 0; t < T; ++t) ex[t] = E - 1; /* every token to the last expert, the others empty */
    p = dispatch_both("all to one expert", ex, T, 1, E, 0);
    test_data_ops("all to one expert", &p, 256, BFP8_BF16, BFP8_F32, BFP8_BF16, TEST_FILL_HARD, 0);
    plan_free(&p);
    p = dispatch_both("all to one expert, capacity 129", ex, T, 1, E, 129);
    plan_free(&p);
    p = dispatch_both("one token", ex, 1, 1, E, 0);
    test_data_ops("one token", &p, 129, BFP8_F32, BFP8_F32, BFP8_F32, 0, 0);
    plan_free(&p);
    free(ex);
    /* many passes of the dispatch kernels' CTAs (16384 slots each), skewed, a capacity */
    enum { T2 = 20011, E2 = 256, K2 = 8 };
    ex = test_malloc((size_t)T2 * K2 * 4);
    for (int64_t i = 0; i < (int64_t)T2 * K2; ++i) {
        const int64_t e = (int64_t)test_rng_range(&rng, 0, E2 - 1);
        ex[i] = (int32_t)(i % 3 == 0 ? e % 7 : e);
    }
    p = dispatch_both("T=20011 E=256 k=8", ex, T2, K2, E2, 0);
    plan_free(&p);
    p = dispatch_both("T=20011 E=256 k=8 capacity 700", ex, T2, K2, E2, 700);
    plan_free(&p);
    free(ex);

    /* SwiGLU: to rounding (expf) */
    const int64_t R = 300, F = 256;
    float *gu = test_malloc((size_t)(R * 2 * F) * 4), *dh = test_malloc((size_t)(R * F) * 4);
    float *hc = test_malloc((size_t)(R * F) * 4), *dguc = test_malloc((size_t)(R * 2 * F) * 4);
    test_fill_f32(gu, R, 2 * F, 2 * F, 3.0f, 0, 51);
    test_fill_f32(dh, R, F, F, 1.0f, 0, 52);
    float *d_gu = up(gu, (size_t)(R * 2 * F) * 4), *d_dh = up(dh, (size_t)(R * F) * 4);
    float *d_h = up(NULL, (size_t)(R * F) * 4), *d_dgu = up(NULL, (size_t)(R * 2 * F) * 4);
    const bfp8_matrix guc = {gu, BFP8_F32, R, 2 * F, 2 * F}, gug = {d_gu, BFP8_F32, R, 2 * F, 2 * F};
    const bfp8_matrix dhc = {dh, BFP8_F32, R, F, F}, dhg = {d_dh, BFP8_F32, R, F, F};
    bfp8_matrix hcm = {hc, BFP8_F32, R, F, F}, hgm = {d_h, BFP8_F32, R, F, F};
    bfp8_matrix dgucm = {dguc, BFP8_F32, R, 2 * F, 2 * F}, dgugm = {d_dgu, BFP8_F32, R, 2 * F, 2 * F};
    CHECK_OK(bfp8_moe_swiglu(cpu, &guc, &hcm));
    CHECK_OK(bfp8_moe_swiglu(gpu, &gug, &hgm));
    CHECK_OK(bfp8_moe_swiglu_backward(cpu, &guc, &dhc, &dgucm));
    CHECK_OK(bfp8_moe_swiglu_backward(gpu, &gug, &dhg, &dgugm));
    float *hg = down(d_h, (size_t)(R * F) * 4), *dgug = down(d_dgu, (size_t)(R * 2 * F) * 4);
    /* dgu's gate half, d u sig (1 + g (1 - sig)), cancels near g = -1.28: there an ulp of expf's difference
     * between the backends is large against the result, so each element's error is measured against the
     * size of its terms, d u sig (1 + |g| (1 - sig)), not against the result itself */
    double ed = 0.0;
    for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < F; ++c) {
            const double g = gu[r * 2 * F + c], u = gu[r * 2 * F + F + c], d = dh[r * F + c];
            const double sig = 1.0 / (1.0 + exp(-g));
            const double gate_terms = fabs(d * u) * sig * (1.0 + fabs(g) * (1.0 - sig));
            const double up_terms = fabs(d * g * sig);
            const int64_t i = r * 2 * F + c, j = i + F;
            ed = fmax(ed, fabs((double)dguc[i] - dgug[i]) / (1e-6 + gate_terms));
            ed = fmax(ed, fabs((double)dguc[j] - dgug[j]) / (1e-6 + up_terms));
        }
    const double eh = max_rel(hc, hg, R * F, 1e-6);
    CHECK(eh < 1e-5 && ed < 1e-5, "swiglu: h %.3g, dgu %.3g relative to the CPU (dgu: to the size of its terms)", eh,
          ed);
    bfp8_free(gpu, d_gu), bfp8_free(gpu, d_dh), bfp8_free(gpu, d_h), bfp8_free(gpu, d_dgu);
    free(gu), free(dh), free(hc), free(dguc), free(hg), free(dgug);
}

/* ------------------------------------------------------------------------ */
/* The experts' weights in one call (bfp8_quantize_128x128_stacked)          */

static void test_stacked_weights(int64_t groups, int64_t group_rows, int64_t cols, bfp8_dtype dtype, unsigned fill,
                                 int pow2) {
    char what[112];
    snprintf(what, sizeof what, "stacked weights %lld x (%lld x %lld) %s pow2=%d", (long long)groups,
             (long long)group_rows, (long long)cols, bfp8_dtype_name(dtype), pow2);
    const int64_t R = groups * group_rows;
    const size_t xb = (size_t)(R * cols) * bfp8_dtype_size(dtype);
    void *x = test_malloc(xb);
    if (dtype == BFP8_F32)
        test_fill_f32(x, R, cols, cols, 0.05f, fill, 71);
    else
        test_fill_bf16(x, R, cols, cols, 0.05f, fill, 71);
    bfp8_qmatrix q[2], t[2]; /* CPU, GPU */
    size_t qd, qs, td, ts;
    CHECK_OK(bfp8_qmatrix_layout(&q[0], R, cols, BFP8_GRAN_128X128, &qd, &qs));
    CHECK_OK(bfp8_qmatrix_layout(&t[0], groups * cols, group_rows, BFP8_GRAN_128X128, &td, &ts));
    q[1] = q[0], t[1] = t[0];
    q[0].data = test_malloc(qd), q[0].scales = test_malloc(qs);
    t[0].data = test_malloc(td), t[0].scales = test_malloc(ts);
    q[1].data = up(NULL, qd), q[1].scales = up(NULL, qs), t[1].data = up(NULL, td), t[1].scales = up(NULL, ts);
    void *d_x = up(x, xb);
    const bfp8_matrix xc = {x, dtype, R, cols, cols}, xg = {d_x, dtype, R, cols, cols};
    const bfp8_quantize_options o = {pow2, NULL};
    CHECK_OK(bfp8_quantize_128x128_stacked(cpu, &xc, group_rows, &q[0], &t[0], &o));
    CHECK_OK(bfp8_quantize_128x128_stacked(gpu, &xg, group_rows, &q[1], &t[1], &o));
    void *g[4] = {down(q[1].data, qd), down(q[1].scales, qs), down(t[1].data, td), down(t[1].scales, ts)};
    const int64_t differ = differ_bytes(what, q[0].data, g[0], qd) + differ_bytes(what, q[0].scales, g[1], qs) +
                           differ_bytes(what, t[0].data, g[2], td) + differ_bytes(what, t[0].scales, g[3], ts);
    CHECK(differ == 0, "%s: the GPU's codes or scales differ from the CPU's", what);
    for (int i = 0; i < 4; ++i) free(g[i]);
    bfp8_free(gpu, d_x), bfp8_free(gpu, q[1].data), bfp8_free(gpu, q[1].scales);
    bfp8_free(gpu, t[1].data), bfp8_free(gpu, t[1].scales);
    free(x), free(q[0].data), free(q[0].scales), free(t[0].data), free(t[0].scales);
}

/* ------------------------------------------------------------------------ */
/* The layer                                                                 */

enum { ARRAYS = 7 }; /* x (dx), router, w13, w2, shared_w13, shared_w2, dy (y) */

static void layer_sizes(const bfp8_moe_config *c, int64_t T, int64_t n[ARRAYS]) {
    const int64_t H = c->hidden, F = c->expert_hidden, Fs = c->shared_hidden, E = c->num_experts;
    n[0] = T * H, n[1] = E * H, n[2] = E * 2 * F * H, n[3] = E * H * F, n[4] = 2 * Fs * H, n[5] = H * Fs;
    n[6] = T * H;
}

/* Forward and backward on ctx; in[] holds x, the weights, dy (backend
 * memory), out[] gets dx, the gradients, y (backend memory); the aux loss
 * and the load per expert (host). */
static void layer_step(bfp8_context *ctx, const bfp8_moe_config *c, int64_t T, float *const in[ARRAYS],
                       float *const out[ARRAYS], float *aux, int64_t *load) {
    bfp8_moe *m = NULL;
    CHECK_OK(bfp8_moe_create(&m, ctx, c));
    if (!m) return;
    const int s = c->shared_hidden > 0;
    const bfp8_moe_weights w = {in[1], in[2], in[3], s ? in[4] : NULL, s ? in[5] : NULL};
    const bfp8_moe_weights g = {out[1], out[2], out[3], s ? out[4] : NULL, s ? out[5] : NULL};
    CHECK_OK(bfp8_moe_set_weights(m, &w));
    CHECK_OK(bfp8_moe_forward(m, in[0], T, out[6]));
    CHECK_OK(bfp8_moe_backward(m, in[6], out[0], &g, 0));
    CHECK_OK(bfp8_context_synchronize(ctx));
    CHECK_OK(bfp8_moe_aux_loss(m, aux));
    CHECK_OK(bfp8_moe_update_bias(m, load, NULL));
    bfp8_moe_destroy(m);
}

static void test_layer(const char *name, bfp8_moe_config c, int64_t T, bfp8_recipe recipe, double min_db) {
    static const char *names[ARRAYS] = {"dx", "d_router", "d_w13", "d_w2", "d_shared_w13", "d_shared_w2", "y"};
    c.recipe = recipe;
    char what[128];
    snprintf(what, sizeof what, "layer %s, %s", name, bfp8_recipe_name(recipe));
    int64_t n[ARRAYS];
    layer_sizes(&c, T, n);
    float *hin[ARRAYS], *hout[ARRAYS], *din[ARRAYS], *dout[ARRAYS], *dout2[ARRAYS];
    const double sd[ARRAYS] = {1.0, 1.0 / sqrt((double)c.hidden), 1.0 / sqrt((double)c.hidden),
                               1.0 / sqrt((double)c.expert_hidden), 1.0 / sqrt((double)c.hidden),
                               c.shared_hidden ? 1.0 / sqrt((double)c.shared_hidden) : 0.0, 1.0};
    for (int i = 0; i < ARRAYS; ++i) {
        const size_t bytes = (size_t)(n[i] > 0 ? n[i] : 1) * 4;
        hin[i] = test_malloc(bytes), hout[i] = test_malloc(bytes);
        test_fill_f32(hin[i], 1, n[i] > 0 ? n[i] : 1, n[i] > 0 ? n[i] : 1, (float)sd[i], 0, 300 + (uint64_t)i);
        din[i] = up(hin[i], bytes), dout[i] = up(NULL, bytes), dout2[i] = up(NULL, bytes);
    }
    float aux_c = 0.0f, aux_g = 0.0f, aux_g2 = 0.0f;
    int64_t load_c[64] = {0}, load_g[64] = {0}, load_g2[64] = {0}; /* E <= 64 here */
    layer_step(cpu, &c, T, hin, hout, &aux_c, load_c);
    layer_step(gpu, &c, T, din, dout, &aux_g, load_g);
    layer_step(gpu, &c, T, din, dout2, &aux_g2, load_g2);
    CHECK(memcmp(load_c, load_g, sizeof load_c) == 0 && memcmp(load_g, load_g2, sizeof load_g) == 0,
          "%s: the load per expert differs between the CPU and the GPU runs", what);
    CHECK(fabs(aux_c - aux_g) <= 1e-5 * fabs(aux_c) && aux_g == aux_g2, "%s: aux loss %.9g (CPU) %.9g %.9g (GPU)",
          what, aux_c, aux_g, aux_g2);
    for (int i = 0; i < ARRAYS; ++i) {
        if (n[i] == 0) continue;
        float *g = down(dout[i], (size_t)n[i] * 4), *g2 = down(dout2[i], (size_t)n[i] * 4);
        double *ref = test_malloc((size_t)n[i] * 8);
        for (int64_t j = 0; j < n[i]; ++j) ref[j] = hout[i][j];
        const double db = test_sqnr_db(ref, n[i], g, n[i], 1, n[i]);
        CHECK(db >= min_db, "%s: %s %.1f dB against the CPU layer (want >= %.0f)", what, names[i], db, min_db);
        CHECK(test_compare_f32_bits(names[i], g, g2, n[i]) == 0, "%s: %s differs between two GPU runs", what,
              names[i]);
        printf("%-50s %-13s %6.1f dB\n", what, names[i], db);
        free(g), free(g2), free(ref);
    }
    for (int i = 0; i < ARRAYS; ++i) {
        bfp8_free(gpu, din[i]), bfp8_free(gpu, dout[i]), bfp8_free(gpu, dout2[i]);
        free(hin[i]), free(hout[i]);
    }
}

int main(void) {
    TEST_REQUIRE_GPU();
    CHECK_OK(bfp8_context_create(&cpu, BFP8_BACKEND_CPU, 0));
    CHECK_OK(bfp8_context_create(&gpu, BFP8_BACKEND_CUDA, 0));
    if (!cpu || !gpu) return test_exit_code("test_moe_gpu");
    for (int fn = 0; fn < 2; ++fn)
        for (int norm = 0; norm < 2; ++norm) test_route(1000, 16, 4, (bfp8_moe_score_fn)fn, norm, norm, 1 - norm);
    test_route(777, 256, 8, BFP8_MOE_SCORE_SIGMOID, 1, 1, 1);
    test_route(100, 1024, 16, BFP8_MOE_SCORE_SOFTMAX, 1, 0, 1);
    test_route(5, 3, 3, BFP8_MOE_SCORE_SOFTMAX, 0, 0, 0);
    test_wild_experts();
    test_dispatch_and_data();
    test_stacked_weights(32, 1536, 2048, BFP8_F32, TEST_FILL_HARD, 0); /* moe-1b's gate|up */
    test_stacked_weights(5, 384, 256, BFP8_BF16, TEST_FILL_NONFINITE | TEST_FILL_WIDE_RANGE, 1);

    const bfp8_moe_config base = {512, 256, 256, 16, 4, 1024, BFP8_MOE_SCORE_SOFTMAX, 0, 1.0f, 0.0f,
                                  BFP8_MOE_BALANCE_NONE, 0.0f, 0.0f, BFP8_RECIPE_BF16, 0, NULL};
    bfp8_moe_config sig = base, cap = base;
    sig.shared_hidden = 0, sig.score_fn = BFP8_MOE_SCORE_SIGMOID, sig.normalize_weights = 1, sig.route_scale = 2.5f;
    sig.balance = BFP8_MOE_BALANCE_BIAS, sig.bias_update_rate = 1e-3f;
    cap.capacity_factor = 0.75f, cap.balance = BFP8_MOE_BALANCE_AUX_LOSS, cap.aux_loss_coef = 0.01f;
    const bfp8_recipe recipes[3] = {BFP8_RECIPE_BF16, BFP8_RECIPE_FP8_BLOCKWISE, BFP8_RECIPE_FP8_BLOCKWISE_BF16WGRAD};
    for (int r = 0; r < 3; ++r) {
        test_layer("softmax k=4 +shared", base, 1000, recipes[r], 35.0);
        test_layer("sigmoid normalized", sig, 333, recipes[r], 35.0);
        test_layer("capacity 0.75, aux loss", cap, 1024, recipes[r], 35.0);
    }
    bfp8_context_destroy(gpu);
    bfp8_context_destroy(cpu);
    return test_exit_code("test_moe_gpu");
}
