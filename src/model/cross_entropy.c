/*
 * cross_entropy.c - softmax cross-entropy, fp32 with a max-shifted exponent.
 */
#include "model/cross_entropy.h"
#include "model/parallel.h"

#include <math.h>

#include "formats/formats.h"

static float row_log_sum_exp(const float *row, int64_t vocab) {
    float max_logit = row[0];
    for (int64_t v = 1; v < vocab; ++v)
        if (row[v] > max_logit) max_logit = row[v];
    float sum = 0.0f;
    for (int64_t v = 0; v < vocab; ++v) sum += expf(row[v] - max_logit);
    return max_logit + logf(sum);
}

void cross_entropy_rows(model_ops_ctx *oc, float *row_losses, void *dlogits, bfp8_dtype dlogits_dtype,
                        const float *logits, const int32_t *targets, int64_t tokens, int64_t vocab, float scale) {
    (void)oc;
#pragma omp parallel for schedule(static) if (tokens * vocab >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < tokens; ++t) {
        const float *row = logits + t * vocab;
        const int64_t target = targets[t];
        const float lse = row_log_sum_exp(row, vocab);
        row_losses[t] = lse - row[target]; /* before an in-place gradient overwrites the row */
        if (!dlogits) continue;
        if (dlogits_dtype == BFP8_BF16) {
            uint16_t *drow = (uint16_t *)dlogits + t * vocab;
            for (int64_t v = 0; v < vocab; ++v) {
                const float p = scale * expf(row[v] - lse);
                drow[v] = bfp8_encode_bf16(v == target ? p - scale : p);
            }
        } else {
            float *drow = (float *)dlogits + t * vocab;
            for (int64_t v = 0; v < vocab; ++v) drow[v] = scale * expf(row[v] - lse);
            drow[target] -= scale;
        }
    }
}

double loss_mean(model_ops_ctx *oc, const float *row_losses, int64_t n) {
    (void)oc;
    if (n <= 0) return NAN;
    double total = 0.0;
    for (int64_t t = 0; t < n; ++t) total += row_losses[t];
    return total / (double)n;
}
