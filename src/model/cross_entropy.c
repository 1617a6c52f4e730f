/*
 * cross_entropy.c - softmax cross-entropy, fp32 with a max-shifted exponent.
 */
#include "model/cross_entropy.h"
#include "model/parallel.h"

#include <math.h>

static float row_log_sum_exp(const float *row, int64_t vocab) {
    float max_logit = row[0];
    for (int64_t v = 1; v < vocab; ++v)
        if (row[v] > max_logit) max_logit = row[v];
    float sum = 0.0f;
    for (int64_t v = 0; v < vocab; ++v) sum += expf(row[v] - max_logit);
    return max_logit + logf(sum);
}

double cross_entropy_forward(model_ops_ctx *oc, float *row_losses, const float *logits, const int32_t *targets,
                             int64_t tokens, int64_t vocab) {
    (void)oc;
#pragma omp parallel for schedule(static) if (tokens * vocab >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < tokens; ++t) {
        const float *row = logits + t * vocab;
        row_losses[t] = row_log_sum_exp(row, vocab) - row[targets[t]];
    }
    double total = 0.0;
    for (int64_t t = 0; t < tokens; ++t) total += row_losses[t];
    return total / (double)tokens;
}

void cross_entropy_backward(model_ops_ctx *oc, float *dlogits, const float *logits, const int32_t *targets,
                            int64_t tokens, int64_t vocab, float scale) {
    (void)oc;
#pragma omp parallel for schedule(static) if (tokens * vocab >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < tokens; ++t) {
        const float *row = logits + t * vocab;
        float *drow = dlogits + t * vocab;
        const float lse = row_log_sum_exp(row, vocab);
        for (int64_t v = 0; v < vocab; ++v) drow[v] = scale * expf(row[v] - lse);
        drow[targets[t]] -= scale;
    }
}
