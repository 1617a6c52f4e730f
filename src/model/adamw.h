/*
 * adamw.h - the optimizer: AdamW with decoupled weight decay, and the global
 * gradient norm used for clipping. fp32 state; element-wise updates.
 */
#ifndef BFP8_MODEL_ADAMW_H
#define BFP8_MODEL_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "model/model_ops_ctx.h"

typedef struct adamw_hparams {
    float lr;
    float beta1, beta2, eps;
    float weight_decay;
} adamw_hparams;

/* One step over n parameters. step counts from 1 (bias correction);
 * grad_scale multiplies the gradient first (the clipping factor);
 * decay 0 skips the weight decay (norm weights). */
void adamw_update(model_ops_ctx *oc, float *param, const float *grad, float *m, float *v, size_t n,
                  const adamw_hparams *h, float grad_scale, int64_t step, int decay);

/* sqrt(sum of squares), summed in double over fixed chunks so the result is
 * the same for any thread count. */
double gradient_global_norm(model_ops_ctx *oc, const float *grad, size_t n);

#endif /* BFP8_MODEL_ADAMW_H */
