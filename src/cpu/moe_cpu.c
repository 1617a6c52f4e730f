/*
 * moe_cpu.c - the CPU reference of the mixture-of-experts ops (blockfp8.h,
 * "Mixture of experts"): router scores and top-k, their backward, the
 * dispatch plan, permutation with fused 1x128 quantization, the weighted
 * combine and its backward, SwiGLU. Every output element is computed in a
 * fixed order that the CUDA kernels (src/cuda/moe.cu, moe_route.cu) repeat; rows are
 * independent, so the OpenMP split changes no bit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "internal.h"

#define WARP 32
#define GATHER_WARPS 4 /* combine_backward's dot products: the CUDA kernels' 4 groups of 32 partial sums */

static float load_element(const bfp8_matrix *m, int64_t r, int64_t c) {
    const int64_t i = r * m->ld + c;
    return m->dtype == BFP8_F32 ? ((const float *)m->data)[i] : bfp8_decode_bf16(((const uint16_t *)m->data)[i]);
}

static void store_element(bfp8_matrix *m, int64_t r, int64_t c, float v) {
    const int64_t i = r * m->ld + c;
    if (m->dtype == BFP8_F32)
        ((float *)m->data)[i] = v;
    else
        ((uint16_t *)m->data)[i] = bfp8_encode_bf16(v);
}

/* ------------------------------------------------------------------------ */
/* Router                                                                    */

bfp8_status bfp8_cpu_moe_route(bfp8_context *ctx, const float *logits, const float *bias, int64_t tokens,
                               int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize, float scale,
                               float *scores, int32_t *topk_expert, float *topk_weight, float *score_sum) {
    (void)ctx;
    const int E = num_experts, k = top_k;
    #pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
        const float *l = logits + t * E;
        float *s = scores + t * E;
        if (score_fn == BFP8_MOE_SCORE_SOFTMAX) {
            float m = l[0];
            for (int e = 1; e < E; ++e) m = fmaxf(m, l[e]);
            float sum = 0.0f;
            for (int e = 0; e < E; ++e) {
                s[e] = expf(l[e] - m);
                sum += s[e];
            }
            for (int e = 0; e < E; ++e) s[e] = s[e] / sum;
        } else {
            for (int e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + expf(-l[e]));
        }
        uint32_t taken[(1024 + 31) / 32] = {0}; /* E <= 1024 */
        float denom = 0.0f;
        for (int j = 0; j < k; ++j) {
            int best = -1;
            float best_v = 0.0f;
            for (int e = 0; e < E; ++e) {
                if (taken[e / 32] >> (e % 32) & 1u) continue;
                float v = bias ? s[e] + bias[e] : s[e];
                if (v != v) v = -INFINITY; /* a NaN is never preferred */
                if (best < 0 || v > best_v) best = e, best_v = v;
            }
            taken[best / 32] |= 1u << (best % 32);
            topk_expert[t * k + j] = best;
            denom += s[best];
        }
        if (!normalize) denom = 1.0f;
        for (int j = 0; j < k; ++j) topk_weight[t * k + j] = scale * (s[topk_expert[t * k + j]] / denom);
    }
    if (score_sum)
        for (int e = 0; e < E; ++e) {
            float sum = 0.0f;
            for (int64_t t = 0; t < tokens; ++t) sum += scores[t * E + e];
            score_sum[e] = sum;
        }
    return BFP8_OK;
}

/* An expert index the router could have written (others are skipped). */
static int valid(int32_t e, int E) { return e >= 0 && e < E; }

bfp8_status bfp8_cpu_moe_route_backward(bfp8_context *ctx, const float *scores, const int32_t *topk_expert,
                                        const float *d_topk_weight, const float *score_grad, int64_t tokens,
                                        int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize,
                                        float scale, float *d_logits) {
    (void)ctx;
    const int E = num_experts, k = top_k;
    #pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
        const float *s = scores + t * E;
        float *g = d_logits + t * E; /* dL/dscore first, then dL/dlogit in place */
        for (int e = 0; e < E; ++e) g[e] = score_grad ? score_grad[e] : 0.0f;
        const int32_t *ex = topk_expert + t * k;
        const float *dw = d_topk_weight + t * k;
        if (normalize) {
            float sum = 0.0f, dot = 0.0f;
            for (int j = 0; j < k; ++j) sum += valid(ex[j], E) ? s[ex[j]] : 0.0f;
            for (int j = 0; j < k; ++j) dot = valid(ex[j], E) ? fmaf(dw[j], s[ex[j]], dot) : dot;
            const float mean = dot / sum;
            for (int j = 0; j < k; ++j)
                if (valid(ex[j], E)) g[ex[j]] += scale * ((dw[j] - mean) / sum);
        } else {
            for (int j = 0; j < k; ++j)
                if (valid(ex[j], E)) g[ex[j]] += scale * dw[j];
        }
        if (score_fn == BFP8_MOE_SCORE_SOFTMAX) {
            float dot = 0.0f;
            for (int e = 0; e < E; ++e) dot = fmaf(g[e], s[e], dot);
            for (int e = 0; e < E; ++e) g[e] = s[e] * (g[e] - dot);
        } else {
            for (int e = 0; e < E; ++e) g[e] = g[e] * (s[e] * (1.0f - s[e]));
        }
    }
    return BFP8_OK;
}

/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */

bfp8_status bfp8_cpu_moe_dispatch(bfp8_context *ctx, const int32_t *topk_expert, int64_t tokens, int top_k,
                                  int num_experts, int64_t capacity, int64_t max_rows, int32_t *slot_row,
                                  int32_t *row_slot, int64_t *offsets, int64_t *routed) {
    (void)ctx;
    (void)max_rows;
    const int E = num_experts;
    const int64_t slots = tokens * top_k;
    for (int e = 0; e < E; ++e) routed[e] = 0;
    for (int64_t s = 0; s < slots; ++s) {
        const int32_t e = topk_expert[s];
        if (e >= 0 && e < E) ++routed[e];
    }
    offsets[0] = 0;
    for (int e = 0; e < E; ++e) {
        const int64_t kept = capacity > 0 && routed[e] > capacity ? capacity : routed[e];
        offsets[e + 1] = offsets[e] + bfp8_round_up(kept, BFP8_GROUP_ALIGN);
    }
    /* rank of each slot among its expert's, in slot (token) order */
    int64_t rank[1024] = {0}; /* E <= 1024 */
    for (int64_t s = 0; s < slots; ++s) {
        const int32_t e = topk_expert[s];
        slot_row[s] = -1;
        if (e < 0 || e >= E) continue;
        const int64_t r = rank[e]++;
        if (capacity > 0 && r >= capacity) continue;
        slot_row[s] = (int32_t)(offsets[e] + r);
        row_slot[offsets[e] + r] = (int32_t)s;
    }
    for (int e = 0; e < E; ++e) {
        const int64_t kept = capacity > 0 && rank[e] > capacity ? capacity : rank[e];
        for (int64_t r = offsets[e] + kept; r < offsets[e + 1]; ++r) row_slot[r] = -1;
    }
    return BFP8_OK;
}

/* ------------------------------------------------------------------------ */
/* Permutation and combine                                                   */

/* Row r of q (1x128 groups) from the f32 values v[0, cols), as the
 * quantizer makes it; returns 1 when a group held a NaN or Inf. */
static int quantize_row(const float *v, int64_t cols, int pow2, bfp8_qmatrix *q, int64_t r) {
    int nonfinite = 0;
    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
        const int64_t n = cols - c0 < 128 ? cols - c0 : 128;
        uint32_t amax = 0;
        for (int64_t c = 0; c < n; ++c) {
            const uint32_t a = bfp8_bits_of(v[c0 + c]) & 0x7fffffffu;
            amax = a > amax ? a : amax;
        }
        uint8_t *out = q->data + r * q->ld + c0;
        float *scale = q->scales + (c0 / 128) * q->scale_ld + r;
        if (bfp8_amax_bits_nonfinite(amax)) {
            memset(out, 0x7f, (size_t)n);
            *scale = bfp8_float_of(BFP8_NAN_SCALE_BITS);
            nonfinite = 1;
            continue;
        }
        const float mult = bfp8_scale_multiplier(bfp8_float_of(amax), pow2);
        *scale = 1.0f / mult;
        for (int64_t c = 0; c < n; ++c) out[c] = bfp8_encode_e4m3(v[c0 + c] * mult);
    }
    return nonfinite;
}

/* The token of slot s, or -1 for padding (s < 0) and slots past the tokens. */
static int64_t token_of(int32_t s, int top_k, int64_t tokens) {
    if (s < 0) return -1;
    const int64_t t = s / top_k;
    return t < tokens ? t : -1;
}

/* Rows [0, rows) of out (and / or out_q): row r is weight(r) * src[token(r)]
 * or zeros, where row_slot names the slot; out_t: those rows' fp32 values
 * quantized by columns (the quantizer's out_cols). */
static bfp8_status gather_rows(bfp8_context *ctx, const bfp8_matrix *src, const int32_t *row_slot, int top_k,
                               const float *weights, int64_t rows, bfp8_matrix *out, bfp8_qmatrix *out_q,
                               bfp8_qmatrix *out_t, const bfp8_quantize_options *options) {
    const int64_t cols = src->cols;
    const int pow2 = options ? options->pow2_scales : 0;
    int nonfinite = 0, out_of_memory = 0;
    float *values = out_t ? malloc((size_t)(rows * cols) * sizeof(float)) : NULL;
    if (out_t && !values) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "moe_cpu: out of host memory");
    #pragma omp parallel reduction(| : nonfinite, out_of_memory)
    {
        float *v = malloc((size_t)cols * sizeof(float));
        if (!v) out_of_memory = 1;
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            if (!v) continue;
            const int32_t s = row_slot[r];
            const int64_t t = token_of(s, top_k, src->rows);
            const float w = t >= 0 && weights ? weights[s] : 1.0f;
            for (int64_t c = 0; c < cols; ++c) v[c] = t < 0 ? 0.0f : weights ? w * load_element(src, t, c)
                                                                              : load_element(src, t, c);
            if (out)
                for (int64_t c = 0; c < cols; ++c) store_element(out, r, c, v[c]);
            if (out_q) nonfinite |= quantize_row(v, cols, pow2, out_q, r);
            if (values) memcpy(values + r * cols, v, (size_t)cols * sizeof(float));
        }
        free(v);
    }
    bfp8_status st = BFP8_OK;
    if (out_of_memory) st = bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "moe_cpu: out of host memory");
    if (nonfinite && options && options->nonfinite_flag) *options->nonfinite_flag = 1;
    if (st == BFP8_OK && values) {
        const bfp8_matrix vm = {values, BFP8_F32, rows, cols, cols};
        st = bfp8_cpu_quantize_1x128(ctx, &vm, NULL, out_t, options);
    }
    free(values);
    return st;
}

bfp8_status bfp8_cpu_moe_permute(bfp8_context *ctx, const bfp8_matrix *x, const int32_t *row_slot, int top_k,
                                 bfp8_matrix *xp, bfp8_qmatrix *xp_q, bfp8_qmatrix *xp_qt,
                                 const bfp8_quantize_options *options) {
    const int64_t rows = xp ? xp->rows : xp_q ? xp_q->rows : xp_qt->cols;
    return gather_rows(ctx, x, row_slot, top_k, NULL, rows, xp, xp_q, xp_qt, options);
}

bfp8_status bfp8_cpu_moe_combine(bfp8_context *ctx, const bfp8_matrix *yp, const int32_t *slot_row,
                                 const float *topk_weight, int top_k, int accumulate, bfp8_matrix *y) {
    (void)ctx;
    #pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < y->rows; ++t)
        for (int64_t c = 0; c < y->cols; ++c) {
            float acc = accumulate ? load_element(y, t, c) : 0.0f;
            for (int j = 0; j < top_k; ++j) {
                const int64_t s = t * top_k + j, row = slot_row[s];
                if (row < 0 || row >= yp->rows) continue;
                acc = fmaf(topk_weight ? topk_weight[s] : 1.0f, load_element(yp, row, c), acc);
            }
            store_element(y, t, c, acc);
        }
    return BFP8_OK;
}

bfp8_status bfp8_cpu_moe_combine_backward(bfp8_context *ctx, const bfp8_matrix *dy, const bfp8_matrix *yp,
                                          const int32_t *row_slot, const int32_t *slot_row, const float *topk_weight,
                                          int top_k, bfp8_matrix *dyp, bfp8_qmatrix *dyp_q, bfp8_qmatrix *dyp_qt,
                                          const bfp8_quantize_options *options, float *d_topk_weight) {
    if (dyp || dyp_q || dyp_qt) {
        const int64_t rows = dyp ? dyp->rows : dyp_q ? dyp_q->rows : dyp_qt->cols;
        BFP8_TRY(gather_rows(ctx, dy, row_slot, top_k, topk_weight, rows, dyp, dyp_q, dyp_qt, options));
    }
    if (!d_topk_weight) return BFP8_OK;
    const int64_t slots = dy->rows * top_k;
    #pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < slots; ++s) {
        const int64_t t = s / top_k, row = slot_row[s];
        if (row < 0 || row >= yp->rows) {
            d_topk_weight[s] = 0.0f;
            continue;
        }
        /* the CUDA gather's order: column c into the partial sum of lane (c mod 128) / 4 of warp
         * (c / 128) mod GATHER_WARPS, columns ascending; an xor butterfly per warp; the warps in order */
        float p[GATHER_WARPS][WARP] = {{0}};
        for (int64_t c = 0; c < dy->cols; ++c) {
            float *acc = &p[(c / 128) % GATHER_WARPS][(c % 128) / 4];
            *acc = fmaf(load_element(dy, t, c), load_element(yp, row, c), *acc);
        }
        float d = 0.0f;
        for (int w = 0; w < GATHER_WARPS; ++w) {
            for (int off = WARP / 2; off >= 1; off /= 2) {
                float q[WARP];
                for (int l = 0; l < WARP; ++l) q[l] = p[w][l] + p[w][l ^ off];
                memcpy(p[w], q, sizeof q);
            }
            d = w == 0 ? p[0][0] : d + p[w][0];
        }
        d_topk_weight[s] = d;
    }
    return BFP8_OK;
}

/* ------------------------------------------------------------------------ */
/* SwiGLU                                                                    */

bfp8_status bfp8_cpu_moe_swiglu(bfp8_context *ctx, const bfp8_matrix *gu, bfp8_matrix *h) {
    (void)ctx;
    const int64_t f = h->cols;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < h->rows; ++r)
        for (int64_t c = 0; c < f; ++c) {
            const float g = load_element(gu, r, c), u = load_element(gu, r, f + c);
            store_element(h, r, c, g / (1.0f + expf(-g)) * u);
        }
    return BFP8_OK;
}

bfp8_status bfp8_cpu_moe_swiglu_backward(bfp8_context *ctx, const bfp8_matrix *gu, const bfp8_matrix *dh,
                                         bfp8_matrix *dgu) {
    (void)ctx;
    const int64_t f = dh->cols;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < dh->rows; ++r)
        for (int64_t c = 0; c < f; ++c) {
            const float g = load_element(gu, r, c), u = load_element(gu, r, f + c), d = load_element(dh, r, c);
            const float sig = 1.0f / (1.0f + expf(-g)), silu = g * sig;
            store_element(dgu, r, c, d * u * (sig * (1.0f + g * (1.0f - sig))));
            store_element(dgu, r, f + c, d * silu);
        }
    return BFP8_OK;
}
