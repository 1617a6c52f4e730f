/*
 * adamw.c - AdamW and the gradient norm.
 */
#include "model/adamw.h"
#include "model/parallel.h"

#include <math.h>

void adamw_update(model_ops_ctx *oc, float *param, const float *grad, float *m, float *v, size_t n,
                  const adamw_hparams *h, float grad_scale, int64_t step, int decay) {
    (void)oc;
    const float correction1 = 1.0f - powf(h->beta1, (float)step);
    const float correction2 = 1.0f - powf(h->beta2, (float)step);
    const float wd = decay ? h->weight_decay : 0.0f;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_WORK)
    for (size_t i = 0; i < n; ++i) {
        const float g = grad[i] * grad_scale;
        m[i] = h->beta1 * m[i] + (1.0f - h->beta1) * g;
        v[i] = h->beta2 * v[i] + (1.0f - h->beta2) * g * g;
        const float m_hat = m[i] / correction1, v_hat = v[i] / correction2;
        param[i] -= h->lr * (m_hat / (sqrtf(v_hat) + h->eps) + wd * param[i]);
    }
}

double gradient_global_norm(model_ops_ctx *oc, const float *grad, size_t n) {
    (void)oc;
    enum { CHUNKS = 64 };
    double partial[CHUNKS];
    const size_t chunk = (n + CHUNKS - 1) / CHUNKS;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_WORK)
    for (int c = 0; c < CHUNKS; ++c) {
        const size_t lo = (size_t)c * chunk, hi = lo + chunk < n ? lo + chunk : n;
        double s = 0.0;
        for (size_t i = lo; i < hi; ++i) s += (double)grad[i] * grad[i];
        partial[c] = s;
    }
    double total = 0.0;
    for (int c = 0; c < CHUNKS; ++c) total += partial[c];
    return sqrt(total);
}
