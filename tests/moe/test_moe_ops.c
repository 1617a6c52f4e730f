/*
 * test_moe_ops.c - the mixture-of-experts ops on the CPU backend:
 *   route            top-k against a brute-force sort; d_logits against
 *                    central differences of the op itself (softmax and
 *                    sigmoid, normalized or not, with a load-balancing term)
 *   dispatch         the tables' invariants on random and adversarial loads
 *                    (every token to one expert, experts without tokens,
 *                    capacity drops, one token)
 *   permute          rows exact, the fused quantization bit for bit that of
 *                    bfp8_quantize_1x128 of the permuted rows (NaN groups too)
 *   combine          against fp64 sums; its backward: dyp exact, the fused
 *                    quantization bit for bit, d_topk_weight against fp64 dots
 *   swiglu           its backward against central differences
 *   bad arguments    refused with the documented statuses
 *
 *   build/tests/moe/test_moe_ops
 */
#include <math.h>
#include <string.h>

#include "test_util.h"

static bfp8_context *ctx;

/* ------------------------------------------------------------------------ */
/* Router                                                                    */

/* Logits with clear gaps between a token's experts (no near-ties for top-k). */
static void fill_logits(float *logits, int64_t T, int E, uint64_t seed) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (int64_t t = 0; t < T; ++t) {
        for (int e = 0; e < E; ++e) logits[t * E + e] = (float)e;
        for (int e = E - 1; e > 0; --e) { /* shuffle the ranks */
            const int j = (int)test_rng_range(&rng, 0, e);
            const float tmp = logits[t * E + e];
            logits[t * E + e] = logits[t * E + j], logits[t * E + j] = tmp;
        }
        const float spacing = 2.8f / (float)E; /* logits within [-1, 1.8]: no saturated sigmoid */
        for (int e = 0; e < E; ++e)
            logits[t * E + e] = spacing * (logits[t * E + e] + 0.14f * (float)test_rng_uniform(&rng)) - 1.0f;
    }
}

/* The part of L = sum dw . w + sum_e score_grad[e] s[t, e] that token t carries. */
static double token_loss(const float *scores, const float *w, const float *dw, const float *score_grad, int64_t t,
                         int E, int k) {
    double l = 0.0;
    for (int j = 0; j < k; ++j) l += (double)dw[t * k + j] * w[t * k + j];
    if (score_grad)
        for (int e = 0; e < E; ++e) l += (double)score_grad[e] * scores[t * E + e];
    return l;
}

static void test_route(int E, int k, bfp8_moe_score_fn fn, int normalize, int with_bias, int with_score_grad) {
    const int64_t T = 29;
    char what[128];
    snprintf(what, sizeof what, "route E=%d k=%d %s norm=%d bias=%d aux=%d", E, k,
             fn == BFP8_MOE_SCORE_SOFTMAX ? "softmax" : "sigmoid", normalize, with_bias, with_score_grad);
    const float scale = 2.5f;
    float *logits = test_malloc((size_t)(T * E) * 4), *scores = test_malloc((size_t)(T * E) * 4);
    float *bias = test_malloc((size_t)E * 4), *sg = test_malloc((size_t)E * 4), *sum = test_malloc((size_t)E * 4);
    float *w = test_malloc((size_t)(T * k) * 4), *dw = test_malloc((size_t)(T * k) * 4);
    float *dl = test_malloc((size_t)(T * E) * 4), *s2 = test_malloc((size_t)(T * E) * 4);
    float *w2 = test_malloc((size_t)(T * k) * 4);
    int32_t *ex = test_malloc((size_t)(T * k) * 4), *ex2 = test_malloc((size_t)(T * k) * 4);
    fill_logits(logits, T, E, 17 + E + k);
    for (int e = 0; e < E; ++e) bias[e] = e == E / 2 ? 10.0f : 0.0f; /* expert E/2 always first when biased */
    test_fill_f32(sg, 1, E, E, 0.3f, 0, 6);
    test_fill_f32(dw, T, k, k, 1.0f, 0, 7);
    const float *b = with_bias ? bias : NULL, *g = with_score_grad ? sg : NULL;
    CHECK_OK(bfp8_moe_route(ctx, logits, b, T, E, k, fn, normalize, scale, scores, ex, w, sum));
    CHECK_OK(bfp8_moe_route_backward(ctx, scores, ex, dw, g, T, E, k, fn, normalize, scale, dl));
    int64_t bad_topk = 0, bad_sum = 0, bad_grad = 0;
    for (int64_t t = 0; t < T; ++t) { /* top-k: a brute-force selection on score + bias */
        int taken[1024] = {0};
        for (int j = 0; j < k; ++j) {
            int best = -1;
            for (int e = 0; e < E; ++e)
                if (!taken[e] && (best < 0 || scores[t * E + e] + (b ? b[e] : 0.0f) >
                                                  scores[t * E + best] + (b ? b[best] : 0.0f)))
                    best = e;
            taken[best] = 1;
            bad_topk += ex[t * k + j] != best;
        }
    }
    for (int e = 0; e < E; ++e) {
        double s = 0.0;
        for (int64_t t = 0; t < T; ++t) s += scores[t * E + e];
        bad_sum += fabs(s - sum[e]) > 1e-5 * (1.0 + fabs(s));
    }
    const float h = 1e-3f;
    double worst = 0.0;
    for (int64_t t = 0; t < T; t += 3)
        for (int e = 0; e < E; ++e) {
            const float keep = logits[t * E + e];
            double l[2];
            for (int side = 0; side < 2; ++side) {
                logits[t * E + e] = keep + (side ? -h : h);
                CHECK_OK(bfp8_moe_route(ctx, logits, b, T, E, k, fn, normalize, scale, s2, ex2, w2, NULL));
                bad_topk += memcmp(ex, ex2, (size_t)(T * k) * 4) != 0;
                l[side] = token_loss(s2, w2, dw, g, t, E, k);
            }
            logits[t * E + e] = keep;
            const double fd = (l[0] - l[1]) / (2.0 * h), an = dl[t * E + e];
            const double err = fabs(fd - an) / (1e-2 + fabs(fd));
            worst = err > worst ? err : worst;
            bad_grad += err > 2e-2;
        }
    CHECK(bad_topk == 0, "%s: %lld top-k choices differ from the brute force / flip", what, (long long)bad_topk);
    CHECK(bad_sum == 0, "%s: %lld score sums off", what, (long long)bad_sum);
    CHECK(bad_grad == 0, "%s: %lld d_logits off the central differences (worst relative %.3g)", what,
          (long long)bad_grad, worst);
    free(logits), free(scores), free(bias), free(sg), free(sum), free(w), free(dw), free(dl), free(s2), free(w2);
    free(ex), free(ex2);
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */

/* Dispatch the routing ex (T x k) with capacity; check every invariant. */
static void check_dispatch(const char *what, const int32_t *ex, int64_t T, int k, int E, int64_t capacity) {
    const int64_t max_rows = bfp8_moe_max_rows(T, k, E), slots = T * k;
    int32_t *slot_row = test_malloc((size_t)slots * 4), *row_slot = test_malloc((size_t)max_rows * 4);
    int64_t *offsets = test_malloc((size_t)(E + 1) * 8), *routed = test_malloc((size_t)E * 8);
    CHECK_OK(bfp8_moe_dispatch(ctx, ex, T, k, E, capacity, max_rows, slot_row, row_slot, offsets, routed));
    int64_t bad = 0, dropped = 0;
    bad += offsets[0] != 0;
    for (int e = 0; e < E; ++e) {
        int64_t count = 0;
        for (int64_t s = 0; s < slots; ++s) count += ex[s] == e;
        const int64_t kept = capacity > 0 && count > capacity ? capacity : count;
        bad += routed[e] != count;
        bad += offsets[e + 1] - offsets[e] != (kept + 127) / 128 * 128;
        /* the expert's rows: its first `kept` slots in slot order, then padding */
        int64_t r = offsets[e], seen = 0;
        for (int64_t s = 0; s < slots; ++s) {
            if (ex[s] != e) continue;
            if (seen++ < kept) {
                bad += slot_row[s] != r || row_slot[r] != s;
                ++r;
            } else {
                bad += slot_row[s] != -1;
                ++dropped;
            }
        }
        for (; r < offsets[e + 1]; ++r) bad += row_slot[r] != -1;
    }
    bad += offsets[E] > max_rows;
    CHECK(bad == 0, "%s: %lld table entries wrong", what, (long long)bad);
    if (capacity == 0) CHECK(dropped == 0, "%s: %lld slots dropped without a capacity", what, (long long)dropped);
    free(slot_row), free(row_slot), free(offsets), free(routed);
}

static void test_dispatch(void) {
    enum { T = 1000, E = 16 };
    int32_t *ex = test_malloc((size_t)T * 4 * 4);
    test_rng rng;
    test_rng_seed(&rng, 99);
    for (int64_t t = 0; t < T; ++t) { /* random, k = 4 distinct experts */
        int used[E] = {0};
        for (int j = 0; j < 4; ++j) {
            int e;
            do e = (int)test_rng_range(&rng, 0, E - 1); while (used[e]);
            used[e] = 1, ex[t * 4 + j] = e;
        }
    }
    check_dispatch("random k=4", ex, T, 4, E, 0);
    check_dispatch("random k=4 capacity 200", ex, T, 4, E, 200);
    check_dispatch("random k=4 capacity 1", ex, T, 4, E, 1);
    for (int64_t t = 0; t < T; ++t) ex[t] = 7; /* every token to one expert */
    check_dispatch("all to expert 7", ex, T, 1, E, 0);
    check_dispatch("all to expert 7, capacity 130", ex, T, 1, E, 130);
    for (int64_t t = 0; t < T; ++t) ex[2 * t] = 0, ex[2 * t + 1] = (t % 3 == 0) ? 15 : 5; /* 13 experts empty */
    check_dispatch("experts 0, 5, 15 only", ex, T, 2, E, 0);
    ex[0] = 3;
    check_dispatch("one token", ex, 1, 1, E, 0);
    check_dispatch("one token, one expert", ex, 1, 1, 4, 0);
    free(ex);
}

/* ------------------------------------------------------------------------ */
/* Permute, combine                                                          */

static int64_t compare_q(const char *what, const bfp8_qmatrix *a, const bfp8_qmatrix *b) {
    int64_t differ = test_compare_bytes(what, a->data, a->ld, b->data, b->ld, a->rows, a->cols);
    for (int64_t kb = 0; kb < (a->cols + 127) / 128; ++kb)
        differ += test_compare_f32_bits(what, a->scales + kb * a->scale_ld, b->scales + kb * b->scale_ld, a->rows);
    return differ;
}

static void alloc_q_gran(bfp8_qmatrix *q, int64_t rows, int64_t cols, bfp8_granularity gran) {
    size_t db, sb;
    CHECK_OK(bfp8_qmatrix_layout(q, rows, cols, gran, &db, &sb));
    q->data = test_malloc(db), q->scales = test_malloc(sb);
}

static void alloc_q(bfp8_qmatrix *q, int64_t rows, int64_t cols) { alloc_q_gran(q, rows, cols, BFP8_GRAN_1X128); }

/* permute, combine and combine_backward of one routing; x has H columns. */
static void test_permute_combine(int64_t T, int64_t H, int k, int E, int64_t capacity, unsigned fill, int pow2) {
    char what[128];
    snprintf(what, sizeof what, "T=%lld H=%lld k=%d E=%d cap=%lld fill=%u pow2=%d", (long long)T, (long long)H, k, E,
             (long long)capacity, fill, pow2);
    const int64_t max_rows = bfp8_moe_max_rows(T, k, E), slots = T * k;
    int32_t *ex = test_malloc((size_t)slots * 4), *slot_row = test_malloc((size_t)slots * 4);
    int32_t *row_slot = test_malloc((size_t)max_rows * 4);
    int64_t *offsets = test_malloc((size_t)(E + 1) * 8), *routed = test_malloc((size_t)E * 8);
    for (int64_t s = 0; s < slots; ++s) ex[s] = (int32_t)((s * 7 + s / k) % E);
    for (int64_t t = 0; t < T; ++t) /* distinct experts per token */
        for (int j = 0; j < k; ++j) ex[t * k + j] = (int32_t)((t * 3 + j) % E);
    CHECK_OK(bfp8_moe_dispatch(ctx, ex, T, k, E, capacity, max_rows, slot_row, row_slot, offsets, routed));
    const int64_t P = offsets[E];
    float *x = test_malloc((size_t)(T * H) * 4), *w = test_malloc((size_t)slots * 4);
    test_fill_f32(x, T, H, H, 1.0f, fill, 11);
    test_fill_f32(w, T, k, k, 1.0f, 0, 12);
    float *xp = test_malloc((size_t)(P * H) * 4), *xp2 = test_malloc((size_t)(P * H) * 4);
    uint16_t *xpb = test_malloc((size_t)(P * H) * 2);
    bfp8_qmatrix q_fused, q_ref, qt_fused, qt_ref; /* rows; columns (H x P, where H is a multiple of 128) */
    alloc_q(&q_fused, P, H), alloc_q(&q_ref, P, H), alloc_q(&qt_fused, H, P), alloc_q(&qt_ref, H, P);
    const int cols_q = H % 128 == 0;
    uint32_t flag = 0, flag_ref = 0;
    const bfp8_quantize_options o = {pow2, &flag}, o_ref = {pow2, &flag_ref};
    const bfp8_matrix xm = {x, BFP8_F32, T, H, H};
    bfp8_matrix xpm = {xp, BFP8_F32, P, H, H}, xpbm = {xpb, BFP8_BF16, P, H, H};
    CHECK_OK(bfp8_moe_permute(ctx, &xm, row_slot, k, &xpm, &q_fused, cols_q ? &qt_fused : NULL, &o));
    CHECK_OK(bfp8_moe_permute(ctx, &xm, row_slot, k, &xpbm, NULL, NULL, NULL));
    CHECK_OK(bfp8_quantize_1x128(ctx, &xpm, &q_ref, cols_q ? &qt_ref : NULL, &o_ref));
    if (cols_q)
        CHECK(compare_q(what, &qt_fused, &qt_ref) == 0, "%s: fused column quantization differs", what);
    else
        CHECK_STATUS(bfp8_moe_permute(ctx, &xm, row_slot, k, NULL, NULL, &qt_fused, NULL), BFP8_ERR_SHAPE);
    int64_t bad = 0;
    for (int64_t r = 0; r < P; ++r)
        for (int64_t c = 0; c < H; ++c) {
            const float want = row_slot[r] < 0 ? 0.0f : x[(row_slot[r] / k) * H + c];
            bad += memcmp(&xp[r * H + c], &want, 4) != 0 || xpb[r * H + c] != bfp8_f32_to_bf16(want);
        }
    CHECK(bad == 0, "%s: %lld permuted values wrong", what, (long long)bad);
    CHECK(compare_q(what, &q_fused, &q_ref) == 0, "%s: fused quantization differs from bfp8_quantize_1x128", what);
    CHECK(flag == flag_ref, "%s: nonfinite flag %u, the quantizer's %u", what, flag, flag_ref);

    /* combine: y = y0 + sum_j w yp[row], against fp64 */
    test_fill_f32(xp, P, H, H, 1.0f, 0, 13); /* as yp */
    float *y = test_malloc((size_t)(T * H) * 4), *y0 = test_malloc((size_t)(T * H) * 4);
    test_fill_f32(y0, T, H, H, 1.0f, 0, 14);
    memcpy(y, y0, (size_t)(T * H) * 4);
    bfp8_matrix ym = {y, BFP8_F32, T, H, H};
    CHECK_OK(bfp8_moe_combine(ctx, &xpm, slot_row, w, k, 1, &ym));
    double worst = 0.0;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < H; ++c) {
            double want = y0[t * H + c];
            for (int j = 0; j < k; ++j)
                if (slot_row[t * k + j] >= 0) want += (double)w[t * k + j] * xp[slot_row[t * k + j] * H + c];
            const double err = fabs(want - y[t * H + c]) / (1.0 + fabs(want));
            worst = err > worst ? err : worst;
        }
    CHECK(worst < 1e-6, "%s: combine off fp64 by %.3g", what, worst);

    /* combine backward: dyp = w dy exactly, its quantization, d_topk_weight against fp64 dots */
    float *dw = test_malloc((size_t)slots * 4);
    bfp8_qmatrix dq_fused, dq_ref;
    alloc_q(&dq_fused, P, H), alloc_q(&dq_ref, P, H);
    const bfp8_matrix dym = {y0, BFP8_F32, T, H, H};
    bfp8_matrix dypm = {xp2, BFP8_F32, P, H, H};
    CHECK_OK(bfp8_moe_combine_backward(ctx, &dym, &xpm, row_slot, slot_row, w, k, &dypm, &dq_fused,
                                       cols_q ? &qt_fused : NULL, &o, dw));
    CHECK_OK(bfp8_quantize_1x128(ctx, &dypm, &dq_ref, cols_q ? &qt_ref : NULL, &o_ref));
    if (cols_q) CHECK(compare_q(what, &qt_fused, &qt_ref) == 0, "%s: fused dyp column quantization differs", what);
    bad = 0;
    for (int64_t r = 0; r < P; ++r)
        for (int64_t c = 0; c < H; ++c) {
            const int32_t s = row_slot[r];
            const float want = s < 0 ? 0.0f : w[s] * y0[(s / k) * H + c];
            bad += memcmp(&xp2[r * H + c], &want, 4) != 0;
        }
    CHECK(bad == 0, "%s: %lld dyp values wrong", what, (long long)bad);
    CHECK(compare_q(what, &dq_fused, &dq_ref) == 0, "%s: fused dyp quantization differs", what);
    worst = 0.0;
    for (int64_t s = 0; s < slots; ++s) {
        double want = 0.0, norm = 0.0;
        if (slot_row[s] >= 0)
            for (int64_t c = 0; c < H; ++c) {
                const double p = (double)y0[(s / k) * H + c] * xp[slot_row[s] * H + c];
                want += p, norm += fabs(p);
            }
        const double err = fabs(want - dw[s]) / (1.0 + norm);
        worst = err > worst ? err : worst;
    }
    CHECK(worst < 1e-6, "%s: d_topk_weight off fp64 by %.3g", what, worst);
    free(ex), free(slot_row), free(row_slot), free(offsets), free(routed), free(x), free(w), free(xp), free(xp2);
    free(xpb), free(y), free(y0), free(dw);
    bfp8_qmatrix *qs[] = {&q_fused, &q_ref, &dq_fused, &dq_ref, &qt_fused, &qt_ref};
    for (int i = 0; i < 6; ++i) free(qs[i]->data), free(qs[i]->scales);
}

/* ------------------------------------------------------------------------ */
/* SwiGLU                                                                    */

/* Codes and scales of two 128x128-quantized matrices. */
static int64_t compare_blocks(const char *what, const bfp8_qmatrix *a, const bfp8_qmatrix *b) {
    int64_t differ = test_compare_bytes(what, a->data, a->ld, b->data, b->ld, a->rows, a->cols);
    for (int64_t rb = 0; rb < (a->rows + 127) / 128; ++rb)
        differ += test_compare_f32_bits(what, a->scales + rb * a->scale_ld, b->scales + rb * b->scale_ld,
                                        (a->cols + 127) / 128);
    return differ;
}

/* bfp8_quantize_128x128_stacked against bfp8_quantize_128x128 of each matrix, bit for bit. */
static void test_stacked_weights(int64_t groups, int64_t group_rows, int64_t cols, unsigned fill, int pow2) {
    char what[96];
    snprintf(what, sizeof what, "stacked %lld x (%lld x %lld) pow2=%d", (long long)groups, (long long)group_rows,
             (long long)cols, pow2);
    const int64_t R = groups * group_rows;
    float *x = test_malloc((size_t)(R * cols) * 4);
    test_fill_f32(x, R, cols, cols, 0.05f, fill, 61);
    const bfp8_matrix xm = {x, BFP8_F32, R, cols, cols};
    bfp8_qmatrix q, qt, q1, qt1;
    alloc_q_gran(&q, R, cols, BFP8_GRAN_128X128);
    alloc_q_gran(&qt, groups * cols, group_rows, BFP8_GRAN_128X128);
    alloc_q_gran(&q1, group_rows, cols, BFP8_GRAN_128X128);
    alloc_q_gran(&qt1, cols, group_rows, BFP8_GRAN_128X128);
    const bfp8_quantize_options o = {pow2, NULL};
    CHECK_OK(bfp8_quantize_128x128_stacked(ctx, &xm, group_rows, &q, &qt, &o));
    int64_t differ = 0;
    for (int64_t g = 0; g < groups; ++g) {
        const bfp8_matrix xg = {x + g * group_rows * cols, BFP8_F32, group_rows, cols, cols};
        CHECK_OK(bfp8_quantize_128x128(ctx, &xg, &q1, &qt1, &o));
        bfp8_qmatrix sg = q1, stg = qt1;
        sg.data = q.data + g * group_rows * q.ld, sg.scales = q.scales + g * (group_rows / 128) * q.scale_ld;
        stg.data = qt.data + g * cols * qt.ld, stg.scales = qt.scales + g * (cols / 128) * qt.scale_ld;
        differ += compare_blocks(what, &q1, &sg) + compare_blocks(what, &qt1, &stg);
    }
    CHECK(differ == 0, "%s: differs from each matrix quantized alone", what);
    free(x), free(q.data), free(q.scales), free(qt.data), free(qt.scales);
    free(q1.data), free(q1.scales), free(qt1.data), free(qt1.scales);
}

static double swiglu_f64(double g, double u) { return g / (1.0 + exp(-g)) * u; }

static void test_swiglu(void) {
    const int64_t R = 7, F = 200;
    float *gu = test_malloc((size_t)(R * 2 * F) * 4), *h = test_malloc((size_t)(R * F) * 4);
    float *dh = test_malloc((size_t)(R * F) * 4), *dgu = test_malloc((size_t)(R * 2 * F) * 4);
    test_fill_f32(gu, R, 2 * F, 2 * F, 3.0f, 0, 21);
    test_fill_f32(dh, R, F, F, 1.0f, 0, 22);
    const bfp8_matrix gum = {gu, BFP8_F32, R, 2 * F, 2 * F}, dhm = {dh, BFP8_F32, R, F, F};
    bfp8_matrix hm = {h, BFP8_F32, R, F, F}, dgum = {dgu, BFP8_F32, R, 2 * F, 2 * F};
    CHECK_OK(bfp8_moe_swiglu(ctx, &gum, &hm));
    CHECK_OK(bfp8_moe_swiglu_backward(ctx, &gum, &dhm, &dgum));
    double worst_h = 0.0, worst_d = 0.0;
    const double eps = 1e-5;
    for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < F; ++c) {
            const double g = gu[r * 2 * F + c], u = gu[r * 2 * F + F + c], d = dh[r * F + c];
            const double want = swiglu_f64(g, u);
            worst_h = fmax(worst_h, fabs(want - h[r * F + c]) / (1e-3 + fabs(want)));
            const double dg = d * (swiglu_f64(g + eps, u) - swiglu_f64(g - eps, u)) / (2 * eps);
            const double du = d * (swiglu_f64(g, u + eps) - swiglu_f64(g, u - eps)) / (2 * eps);
            worst_d = fmax(worst_d, fabs(dg - dgu[r * 2 * F + c]) / (1e-3 + fabs(dg)));
            worst_d = fmax(worst_d, fabs(du - dgu[r * 2 * F + F + c]) / (1e-3 + fabs(du)));
        }
    CHECK(worst_h < 1e-5, "swiglu off fp64 by %.3g", worst_h);
    CHECK(worst_d < 1e-4, "swiglu backward off the central differences by %.3g", worst_d);
    free(gu), free(h), free(dh), free(dgu);
}

/* ------------------------------------------------------------------------ */

static void test_bad_arguments(void) {
    float logits[8] = {0}, scores[8], w[2];
    int32_t ex[2], slot_row[4], row_slot[512];
    int64_t offsets[5], routed[4];
    CHECK_STATUS(bfp8_moe_route(ctx, logits, NULL, 2, 4, 5, BFP8_MOE_SCORE_SOFTMAX, 0, 1.0f, scores, ex, w, NULL),
                 BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bfp8_moe_route(ctx, NULL, NULL, 2, 4, 1, BFP8_MOE_SCORE_SOFTMAX, 0, 1.0f, scores, ex, w, NULL),
                 BFP8_ERR_NULL_POINTER);
    CHECK_STATUS(bfp8_moe_route(ctx, logits, NULL, 2, 4, 1, (bfp8_moe_score_fn)7, 0, 1.0f, scores, ex, w, NULL),
                 BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bfp8_moe_route(ctx, logits, NULL, 2, 4, 1, BFP8_MOE_SCORE_SIGMOID, 0, 0.0f, scores, ex, w, NULL),
                 BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(bfp8_moe_dispatch(ctx, ex, 2, 1, 4, 0, 127, slot_row, row_slot, offsets, routed), BFP8_ERR_SHAPE);
    CHECK_STATUS(bfp8_moe_dispatch(ctx, ex, 2, 1, 4, -1, 256, slot_row, row_slot, offsets, routed),
                 BFP8_ERR_INVALID_VALUE);
    CHECK(bfp8_moe_max_rows(2, 1, 4) == 256, "max_rows(2, 1, 4) = %lld", (long long)bfp8_moe_max_rows(2, 1, 4));
    CHECK(bfp8_moe_max_rows(1000, 2, 8) == 2944, "max_rows(1000, 2, 8) = %lld",
          (long long)bfp8_moe_max_rows(1000, 2, 8));
    /* routing tables the ops cannot check: an out-of-range expert is skipped */
    const int32_t wild[4] = {1, 99, -3, 2};
    const float dwt[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    float sc[8] = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f}, dl[8];
    CHECK_OK(bfp8_moe_route_backward(ctx, sc, wild, dwt, NULL, 2, 4, 2, BFP8_MOE_SCORE_SIGMOID, 0, 1.0f, dl));
    CHECK(dl[0] == 0.0f && dl[1] != 0.0f && dl[2] == 0.0f && dl[3] == 0.0f && dl[6] != 0.0f,
          "route_backward with out-of-range experts: %g %g %g %g %g", dl[0], dl[1], dl[2], dl[3], dl[6]);
    CHECK_OK(bfp8_moe_dispatch(ctx, wild, 2, 2, 4, 0, 512, slot_row, row_slot, offsets, routed));
    CHECK(slot_row[1] == -1 && slot_row[2] == -1 && offsets[4] == 256 && routed[1] == 1 && routed[2] == 1,
          "dispatch with out-of-range experts: slot_row %d %d, rows %lld", slot_row[1], slot_row[2],
          (long long)offsets[4]);
    float x[256], out[256];
    const bfp8_matrix xm = {x, BFP8_F32, 2, 128, 128};
    bfp8_matrix bad_cols = {out, BFP8_F32, 2, 64, 64};
    CHECK_STATUS(bfp8_moe_permute(ctx, &xm, row_slot, 1, &bad_cols, NULL, NULL, NULL), BFP8_ERR_SHAPE);
    CHECK_STATUS(bfp8_moe_permute(ctx, &xm, row_slot, 1, NULL, NULL, NULL, NULL), BFP8_ERR_NULL_POINTER);
    /* with the columns' codes every row starts at a 16-byte boundary: bf16 rows 264 bytes apart are refused */
    static _Alignas(16) uint16_t xb[2 * 136];
    static int32_t slots128[128];
    for (int r = 0; r < 128; ++r) slots128[r] = r < 2 ? r : -1;
    bfp8_qmatrix qt128;
    alloc_q(&qt128, 128, 128);
    const bfp8_matrix x_ld132 = {xb, BFP8_BF16, 2, 128, 132}, x_ld136 = {xb, BFP8_BF16, 2, 128, 136};
    CHECK_STATUS(bfp8_moe_permute(ctx, &x_ld132, slots128, 1, NULL, NULL, &qt128, NULL), BFP8_ERR_ALIGNMENT);
    CHECK_STATUS(bfp8_moe_permute(ctx, &x_ld136, slots128, 1, NULL, NULL, &qt128, NULL), BFP8_OK);
    free(qt128.data), free(qt128.scales);
    bfp8_matrix h = {out, BFP8_F32, 2, 64, 64};
    CHECK_STATUS(bfp8_moe_swiglu(ctx, &xm, &h), BFP8_OK);
    bfp8_matrix h_wrong = {out, BFP8_F32, 2, 32, 32};
    CHECK_STATUS(bfp8_moe_swiglu(ctx, &xm, &h_wrong), BFP8_ERR_SHAPE);
    /* stacked weights: group_rows a multiple of 128 dividing the rows, the transposes' shape */
    static float wx[256 * 128];
    const bfp8_matrix wm = {wx, BFP8_F32, 256, 128, 128};
    bfp8_qmatrix wq, wqt, wqt_bad;
    alloc_q_gran(&wq, 256, 128, BFP8_GRAN_128X128);
    alloc_q_gran(&wqt, 256, 128, BFP8_GRAN_128X128);
    alloc_q_gran(&wqt_bad, 128, 256, BFP8_GRAN_128X128); /* one matrix's transpose, not the stack's */
    CHECK_STATUS(bfp8_quantize_128x128_stacked(ctx, &wm, 100, &wq, &wqt, NULL), BFP8_ERR_SHAPE);
    CHECK_STATUS(bfp8_quantize_128x128_stacked(ctx, &wm, 384, &wq, &wqt, NULL), BFP8_ERR_SHAPE);
    CHECK_STATUS(bfp8_quantize_128x128_stacked(ctx, &wm, 128, &wq, &wqt_bad, NULL), BFP8_ERR_SHAPE);
    CHECK_STATUS(bfp8_quantize_128x128_stacked(ctx, &wm, 128, &wq, &wqt, NULL), BFP8_OK);
    CHECK_STATUS(bfp8_quantize_128x128_stacked(ctx, &wm, 128, NULL, &wqt, NULL), BFP8_ERR_NULL_POINTER);
    free(wq.data), free(wq.scales), free(wqt.data), free(wqt.scales), free(wqt_bad.data), free(wqt_bad.scales);
}

int main(void) {
    CHECK_OK(bfp8_context_create(&ctx, BFP8_BACKEND_CPU, 0));
    for (int fn = 0; fn < 2; ++fn)
        for (int norm = 0; norm < 2; ++norm) {
            test_route(8, 2, (bfp8_moe_score_fn)fn, norm, 0, 0);
            test_route(8, 3, (bfp8_moe_score_fn)fn, norm, 1, 1);
        }
    test_route(64, 6, BFP8_MOE_SCORE_SIGMOID, 1, 1, 0);
    test_route(5, 5, BFP8_MOE_SCORE_SOFTMAX, 1, 0, 1);
    test_route(1, 1, BFP8_MOE_SCORE_SOFTMAX, 0, 0, 0);
    test_dispatch();
    test_permute_combine(200, 256, 2, 8, 0, TEST_FILL_HARD, 0);
    test_permute_combine(130, 300, 3, 5, 40, TEST_FILL_HARD | TEST_FILL_WIDE_RANGE, 1);
    test_permute_combine(64, 128, 1, 4, 0, TEST_FILL_NONFINITE, 0);
    test_permute_combine(1, 129, 1, 1, 0, 0, 0);
    test_swiglu();
    test_stacked_weights(3, 256, 384, TEST_FILL_HARD, 0);
    test_stacked_weights(4, 128, 128, TEST_FILL_NONFINITE | TEST_FILL_WIDE_RANGE, 1);
    test_bad_arguments();
    bfp8_context_destroy(ctx);
    return test_exit_code("test_moe_ops");
}
