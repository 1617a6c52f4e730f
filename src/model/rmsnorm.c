/*
 * rmsnorm.c - RMSNorm, fp32. The weight gradient is summed column by column
 * (each thread owns columns and walks the tokens in order), so it is
 * bitwise reproducible for any thread count.
 */
#include "model/rmsnorm.h"
#include "model/parallel.h"

#include <math.h>

#include "formats/formats.h"

/* 1 / sqrt(mean(x^2) + eps) of one row, summed in order. */
static float row_rstd(const float *x, int64_t dim, float eps) {
    float sum_sq = 0.0f;
    for (int64_t i = 0; i < dim; ++i) sum_sq += x[i] * x[i];
    return 1.0f / sqrtf(sum_sq / (float)dim + eps);
}

void rmsnorm_forward(model_ops_ctx *oc, float *out, float *rstd, const float *x, const float *weight, int64_t tokens,
                     int64_t dim, float eps) {
    (void)oc;
#pragma omp parallel for schedule(static) if (tokens * dim >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < tokens; ++t) {
        const float *xt = x + t * dim;
        const float r = row_rstd(xt, dim, eps);
        rstd[t] = r;
        float *ot = out + t * dim;
        for (int64_t i = 0; i < dim; ++i) ot[i] = xt[i] * r * weight[i];
    }
}

void rmsnorm_forward_bf16(model_ops_ctx *oc, uint16_t *out, float *rstd, const float *x, const float *weight,
                          int64_t tokens, int64_t dim, float eps) {
    (void)oc;
#pragma omp parallel for schedule(static) if (tokens * dim >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < tokens; ++t) {
        const float *xt = x + t * dim;
        const float r = row_rstd(xt, dim, eps);
        rstd[t] = r;
        uint16_t *ot = out + t * dim;
        for (int64_t i = 0; i < dim; ++i) ot[i] = bfp8_encode_bf16(xt[i] * r * weight[i]);
    }
}

/* The backward with dout as fp32 (dout) or bf16 (dout16; dout NULL). */
static void rmsnorm_backward_either(float *dx, float *dweight, const float *dout, const uint16_t *dout16,
                                    const float *x, const float *weight, const float *rstd, int64_t tokens,
                                    int64_t dim) {
#define DOUT(i) (dout ? dout[i] : bfp8_decode_bf16(dout16[i]))
    /* With n = x * rstd:  dx = rstd * (g - n * mean(g * n)),  g = dout * weight. */
#pragma omp parallel for schedule(static) if (tokens * dim >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < tokens; ++t) {
        const float *xt = x + t * dim;
        const int64_t row = t * dim;
        const float r = rstd[t];
        float dot = 0.0f;
        for (int64_t i = 0; i < dim; ++i) dot += DOUT(row + i) * weight[i] * xt[i];
        const float c = dot * r * r / (float)dim;
        float *dxt = dx + t * dim;
        for (int64_t i = 0; i < dim; ++i) dxt[i] += r * (DOUT(row + i) * weight[i] - xt[i] * c);
    }
    enum { COLUMNS = 16 };
    const int64_t blocks = (dim + COLUMNS - 1) / COLUMNS;
#pragma omp parallel for schedule(static) if (tokens * dim >= PARALLEL_MIN_WORK)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t i0 = blk * COLUMNS, i1 = i0 + COLUMNS < dim ? i0 + COLUMNS : dim;
        float acc[COLUMNS] = {0};
        for (int64_t t = 0; t < tokens; ++t)
            for (int64_t i = i0; i < i1; ++i) acc[i - i0] += DOUT(t * dim + i) * x[t * dim + i] * rstd[t];
        for (int64_t i = i0; i < i1; ++i) dweight[i] += acc[i - i0];
    }
#undef DOUT
}

void rmsnorm_backward(model_ops_ctx *oc, float *dx, float *dweight, const float *dout, const float *x,
                      const float *weight, const float *rstd, int64_t tokens, int64_t dim) {
    (void)oc;
    rmsnorm_backward_either(dx, dweight, dout, NULL, x, weight, rstd, tokens, dim);
}

void rmsnorm_backward_bf16(model_ops_ctx *oc, float *dx, float *dweight, const uint16_t *dout, const float *x,
                           const float *weight, const float *rstd, int64_t tokens, int64_t dim) {
    (void)oc;
    rmsnorm_backward_either(dx, dweight, NULL, dout, x, weight, rstd, tokens, dim);
}
