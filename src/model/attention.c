/*
 * attention.c - causal multi-head self-attention, fp32, exact softmax with
 * the probabilities stored (the model's sequences are short on the CPU).
 *
 * Each (batch, head) is a handful of small matrix products, done by the
 * vectorized fp32 GEMM on one thread; threads split the (batch, head)
 * pairs. Rows go in blocks of ROWS so the products skip most of the masked
 * upper triangle: a block of queries only meets the keys up to its end.
 */
#include "model/attention.h"
#include "model/parallel.h"

#include <math.h>
#include <string.h>

#include "formats/formats.h"
#include "model/matmul.h"
#include "model/rope.h"

enum { ROWS = 32 };

/* Per (b, h): head_dim x seq for a transposed K or V, then seq x seq for dP. */
static int64_t per_head_scratch(int64_t seq, int64_t head_dim) { return head_dim * seq + seq * seq; }

int64_t attention_scratch_floats(int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim) {
    return batch * n_heads * per_head_scratch(seq, head_dim);
}

/* dst[i, t] = src[t * stride + i]: one head's K or V, transposed. */
static void transpose_head(float *dst, const float *src, int64_t seq, int64_t head_dim, int64_t stride) {
    for (int64_t t = 0; t < seq; ++t)
        for (int64_t i = 0; i < head_dim; ++i) dst[i * seq + t] = src[t * stride + i];
}

void attention_forward(model_ops_ctx *oc, float *out, float *probs, float *scratch, const float *qkv, int64_t batch,
                       int64_t seq, int64_t n_heads, int64_t head_dim) {
    (void)oc;
    const int64_t dim = n_heads * head_dim, stride = 3 * dim;
    const float scale = 1.0f / sqrtf((float)head_dim);
#pragma omp parallel for schedule(dynamic, 1) if (batch * n_heads * seq * seq * head_dim >= PARALLEL_MIN_WORK)
    for (int64_t bh = 0; bh < batch * n_heads; ++bh) {
        const int64_t b = bh / n_heads, h = bh % n_heads;
        const float *q = qkv + b * seq * stride + h * head_dim, *k = q + dim, *v = q + 2 * dim;
        float *p = probs + bh * seq * seq, *k_t = scratch + bh * per_head_scratch(seq, head_dim);
        float *o = out + b * seq * dim + h * head_dim;
        transpose_head(k_t, k, seq, head_dim, stride);
        for (int64_t r0 = 0; r0 < seq; r0 += ROWS) {
            const int64_t r1 = r0 + ROWS < seq ? r0 + ROWS : seq;
            /* scores of queries [r0, r1) against keys [0, r1) */
            matmul_f32_serial(p + r0 * seq, seq, q + r0 * stride, stride, 0, k_t, seq, r1 - r0, r1,
                              head_dim, 0);
            for (int64_t t = r0; t < r1; ++t) {
                float *row = p + t * seq, max_score = -INFINITY, sum = 0.0f;
                for (int64_t s = 0; s <= t; ++s) {
                    row[s] *= scale;
                    max_score = row[s] > max_score ? row[s] : max_score;
                }
                for (int64_t s = 0; s <= t; ++s) {
                    row[s] = expf(row[s] - max_score);
                    sum += row[s];
                }
                const float inv_sum = 1.0f / sum;
                for (int64_t s = 0; s <= t; ++s) row[s] *= inv_sum;
                for (int64_t s = t + 1; s < seq; ++s) row[s] = 0.0f;
            }
            matmul_f32_serial(o + r0 * dim, dim, p + r0 * seq, seq, 0, v, stride, r1 - r0, head_dim,
                              r1, 0);
        }
    }
}

void attention_backward(model_ops_ctx *oc, float *dqkv, float *scratch, const float *dout, const float *qkv,
                        const float *probs, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim) {
    (void)oc;
    const int64_t dim = n_heads * head_dim, stride = 3 * dim;
    const float scale = 1.0f / sqrtf((float)head_dim);
#pragma omp parallel for schedule(dynamic, 1) if (batch * n_heads * seq * seq * head_dim >= PARALLEL_MIN_WORK)
    for (int64_t bh = 0; bh < batch * n_heads; ++bh) {
        const int64_t b = bh / n_heads, h = bh % n_heads;
        const float *q = qkv + b * seq * stride + h * head_dim, *k = q + dim, *v = q + 2 * dim;
        const float *p = probs + bh * seq * seq, *d_o = dout + b * seq * dim + h * head_dim;
        float *dq = dqkv + b * seq * stride + h * head_dim, *dk = dq + dim, *dv = dq + 2 * dim;
        float *v_t = scratch + bh * per_head_scratch(seq, head_dim), *ds = v_t + head_dim * seq;
        transpose_head(v_t, v, seq, head_dim, stride);
        for (int64_t r0 = 0; r0 < seq; r0 += ROWS) {
            const int64_t r1 = r0 + ROWS < seq ? r0 + ROWS : seq;
            /* dP = dO V^T, then dS = P * (dP - rowsum(P * dP)) * scale */
            matmul_f32_serial(ds + r0 * seq, seq, d_o + r0 * dim, dim, 0, v_t, seq, r1 - r0, r1,
                              head_dim, 0);
            for (int64_t t = r0; t < r1; ++t) {
                const float *prow = p + t * seq;
                float *row = ds + t * seq, weighted = 0.0f;
                for (int64_t s = 0; s <= t; ++s) weighted += prow[s] * row[s];
                for (int64_t s = 0; s <= t; ++s) row[s] = prow[s] * (row[s] - weighted) * scale;
                for (int64_t s = t + 1; s < seq; ++s) row[s] = 0.0f;
            }
            /* dQ = dS K over the keys [0, r1) */
            matmul_f32_serial(dq + r0 * stride, stride, ds + r0 * seq, seq, 0, k, stride, r1 - r0,
                              head_dim, r1, 0);
        }
        for (int64_t s0 = 0; s0 < seq; s0 += ROWS) {
            const int64_t s1 = s0 + ROWS < seq ? s0 + ROWS : seq;
            /* keys [s0, s1) meet the queries [s0, seq): dK = dS^T Q, dV = P^T dO */
            matmul_f32_serial(dk + s0 * stride, stride, ds + s0 * seq + s0, seq, 1, q + s0 * stride,
                              stride, s1 - s0, head_dim, seq - s0, 0);
            matmul_f32_serial(dv + s0 * stride, stride, p + s0 * seq + s0, seq, 1, d_o + s0 * dim, dim,
                              s1 - s0, head_dim, seq - s0, 0);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* With RoPE folded in                                                       */

int64_t rope_attention_scratch_floats(int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim) {
    return attention_scratch_floats(batch, seq, n_heads, head_dim) + 7 * batch * seq * n_heads * head_dim;
}

/* The parts of the scratch behind attention's own: the rotated qkv (3n),
 * then dO or the output in fp32 (n), then dqkv in fp32 (3n). */
static float *rotated_qkv(float *scratch, const float *qkv, const uint16_t *qkv_bf16, int64_t batch, int64_t seq,
                          int64_t n_heads, int64_t head_dim, const float *cos_table, const float *sin_table) {
    const int64_t dim = n_heads * head_dim, count = batch * seq * 3 * dim;
    float *rotated = scratch + attention_scratch_floats(batch, seq, n_heads, head_dim);
    if (qkv)
        memcpy(rotated, qkv, (size_t)count * sizeof *rotated);
    else
        for (int64_t i = 0; i < count; ++i) rotated[i] = bfp8_decode_bf16(qkv_bf16[i]);
    rope_forward(NULL, rotated, batch, seq, n_heads, head_dim, 3 * dim, cos_table, sin_table);
    rope_forward(NULL, rotated + dim, batch, seq, n_heads, head_dim, 3 * dim, cos_table, sin_table);
    return rotated;
}

void rope_attention_forward(model_ops_ctx *oc, float *out, uint16_t *out_bf16, float *probs, float *scratch,
                            const float *qkv, const uint16_t *qkv_bf16, int64_t batch, int64_t seq, int64_t n_heads,
                            int64_t head_dim, const float *cos_table, const float *sin_table) {
    const int64_t n = batch * seq * n_heads * head_dim;
    float *rotated = rotated_qkv(scratch, qkv, qkv_bf16, batch, seq, n_heads, head_dim, cos_table, sin_table);
    float *o = out ? out : rotated + 3 * n;
    attention_forward(oc, o, probs, scratch, rotated, batch, seq, n_heads, head_dim);
    if (!out)
        for (int64_t i = 0; i < n; ++i) out_bf16[i] = bfp8_encode_bf16(o[i]);
}

void rope_attention_backward(model_ops_ctx *oc, float *dqkv, uint16_t *dqkv_bf16, float *scratch, const float *dout,
                             const uint16_t *dout_bf16, const float *qkv, const uint16_t *qkv_bf16, const float *probs,
                             int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim, const float *cos_table,
                             const float *sin_table) {
    const int64_t dim = n_heads * head_dim, n = batch * seq * dim;
    float *rotated = rotated_qkv(scratch, qkv, qkv_bf16, batch, seq, n_heads, head_dim, cos_table, sin_table);
    float *d_o = rotated + 3 * n, *dq = dqkv ? dqkv : d_o + n;
    if (!dout) {
        for (int64_t i = 0; i < n; ++i) d_o[i] = bfp8_decode_bf16(dout_bf16[i]);
        dout = d_o;
    }
    attention_backward(oc, dq, scratch, dout, rotated, probs, batch, seq, n_heads, head_dim);
    rope_backward(NULL, dq, batch, seq, n_heads, head_dim, 3 * dim, cos_table, sin_table);
    rope_backward(NULL, dq + dim, batch, seq, n_heads, head_dim, 3 * dim, cos_table, sin_table);
    if (!dqkv)
        for (int64_t i = 0; i < 3 * n; ++i) dqkv_bf16[i] = bfp8_encode_bf16(dq[i]);
}
