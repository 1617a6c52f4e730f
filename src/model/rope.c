/*
 * rope.c - rotary position embedding, fp32.
 */
#include "model/rope.h"
#include "model/parallel.h"

#include <math.h>

void rope_tables(float *cos_table, float *sin_table, int64_t max_seq, int64_t head_dim, float theta) {
    const int64_t half = head_dim / 2;
    for (int64_t pos = 0; pos < max_seq; ++pos)
        for (int64_t i = 0; i < half; ++i) {
            const double angle = (double)pos * pow((double)theta, -2.0 * (double)i / (double)head_dim);
            cos_table[pos * half + i] = (float)cos(angle);
            sin_table[pos * half + i] = (float)sin(angle);
        }
}

/* direction +1 rotates by +angle (forward), -1 by -angle (the transpose: backward). */
static void rope_rotate(float *x, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                        int64_t row_stride, const float *cos_table, const float *sin_table,
                        float direction) {
    const int64_t half = head_dim / 2;
#pragma omp parallel for schedule(static) if (batch * seq * n_heads * head_dim >= PARALLEL_MIN_WORK)
    for (int64_t row = 0; row < batch * seq; ++row) {
        const int64_t pos = row % seq;
        const float *c = cos_table + pos * half, *s = sin_table + pos * half;
        for (int64_t h = 0; h < n_heads; ++h) {
            float *v = x + row * row_stride + h * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                const float a = v[i], b = v[i + half], sn = direction * s[i];
                v[i] = a * c[i] - b * sn;
                v[i + half] = a * sn + b * c[i];
            }
        }
    }
}

void rope_forward(model_ops_ctx *oc, float *x, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                  int64_t row_stride, const float *cos_table, const float *sin_table) {
    (void)oc;
    rope_rotate(x, batch, seq, n_heads, head_dim, row_stride, cos_table, sin_table, 1.0f);
}

void rope_backward(model_ops_ctx *oc, float *dx, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                   int64_t row_stride, const float *cos_table, const float *sin_table) {
    (void)oc;
    rope_rotate(dx, batch, seq, n_heads, head_dim, row_stride, cos_table, sin_table, -1.0f);
}
