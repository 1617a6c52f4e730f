/*
 * attention.c - causal multi-head self-attention, fp32, exact softmax with
 * the probabilities stored (the model's sequences are short on the CPU).
 */
#include "model/attention.h"
#include "model/parallel.h"

#include <math.h>
#include <string.h>

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

void attention_forward(float *out, float *probs, const float *qkv, int64_t batch, int64_t seq,
                       int64_t n_heads, int64_t head_dim) {
    const int64_t dim = n_heads * head_dim, stride = 3 * dim;
    const float scale = 1.0f / sqrtf((float)head_dim);
    /* Rows are independent: one (b, h, t) per iteration. */
#pragma omp parallel for schedule(dynamic, 16) if (batch * n_heads * seq * seq * head_dim >= PARALLEL_MIN_WORK)
    for (int64_t idx = 0; idx < batch * n_heads * seq; ++idx) {
        const int64_t t = idx % seq, h = (idx / seq) % n_heads, b = idx / (seq * n_heads);
        const float *base = qkv + b * seq * stride;
        const float *q = base + t * stride + h * head_dim;
        float *p = probs + ((b * n_heads + h) * seq + t) * seq;
        float max_score = -INFINITY;
        for (int64_t s = 0; s <= t; ++s) {
            p[s] = dot(q, base + s * stride + dim + h * head_dim, head_dim) * scale;
            if (p[s] > max_score) max_score = p[s];
        }
        float sum = 0.0f;
        for (int64_t s = 0; s <= t; ++s) {
            p[s] = expf(p[s] - max_score);
            sum += p[s];
        }
        const float inv_sum = 1.0f / sum;
        for (int64_t s = 0; s <= t; ++s) p[s] *= inv_sum;
        for (int64_t s = t + 1; s < seq; ++s) p[s] = 0.0f;
        float *o = out + (b * seq + t) * dim + h * head_dim;
        memset(o, 0, (size_t)head_dim * sizeof *o);
        for (int64_t s = 0; s <= t; ++s) {
            const float *v = base + s * stride + 2 * dim + h * head_dim;
            for (int64_t i = 0; i < head_dim; ++i) o[i] += p[s] * v[i];
        }
    }
}

void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                        const float *probs, int64_t batch, int64_t seq, int64_t n_heads,
                        int64_t head_dim) {
    const int64_t dim = n_heads * head_dim, stride = 3 * dim;
    const float scale = 1.0f / sqrtf((float)head_dim);
    /* dk and dv sum over query positions, so one (b, h) belongs to one thread. */
#pragma omp parallel for schedule(dynamic, 1) if (batch * n_heads * seq * seq * head_dim >= PARALLEL_MIN_WORK)
    for (int64_t bh = 0; bh < batch * n_heads; ++bh) {
        const int64_t b = bh / n_heads, h = bh % n_heads;
        const float *base = qkv + b * seq * stride;
        float *dbase = dqkv + b * seq * stride;
        float *dp = scratch + bh * seq;
        for (int64_t t = 0; t < seq; ++t)
            for (int64_t part = 0; part < 3; ++part)
                memset(dbase + t * stride + part * dim + h * head_dim, 0,
                       (size_t)head_dim * sizeof(float));
        for (int64_t t = 0; t < seq; ++t) {
            const float *p = probs + (bh * seq + t) * seq;
            const float *q = base + t * stride + h * head_dim;
            const float *dot_t = dout + (b * seq + t) * dim + h * head_dim;
            float *dq = dbase + t * stride + h * head_dim;
            float weighted = 0.0f;
            for (int64_t s = 0; s <= t; ++s) {
                dp[s] = dot(dot_t, base + s * stride + 2 * dim + h * head_dim, head_dim);
                weighted += p[s] * dp[s];
            }
            for (int64_t s = 0; s <= t; ++s) {
                const float dscore = p[s] * (dp[s] - weighted) * scale;
                const float *k = base + s * stride + dim + h * head_dim;
                float *dk = dbase + s * stride + dim + h * head_dim;
                float *dv = dbase + s * stride + 2 * dim + h * head_dim;
                for (int64_t i = 0; i < head_dim; ++i) {
                    dq[i] += dscore * k[i];
                    dk[i] += dscore * q[i];
                    dv[i] += p[s] * dot_t[i];
                }
            }
        }
    }
}
