/*
 * rmsnorm.h - RMSNorm over the last dimension, fp32, forward and backward:
 *   out = x * rstd * weight,   rstd = 1 / sqrt(mean(x^2) + eps)
 */
#ifndef BFP8_MODEL_RMSNORM_H
#define BFP8_MODEL_RMSNORM_H

#include <stdint.h>

#include "model/model_ops_ctx.h"

/* x, out: tokens x dim; rstd: tokens (kept for backward). */
void rmsnorm_forward(model_ops_ctx *oc, float *out, float *rstd, const float *x, const float *weight, int64_t tokens,
                     int64_t dim, float eps);

/* The same with out rounded to bf16 (formats.h's bfp8_encode_bf16): the
 * input of a bf16 linear layer, written by the norm itself. */
void rmsnorm_forward_bf16(model_ops_ctx *oc, uint16_t *out, float *rstd, const float *x, const float *weight,
                          int64_t tokens, int64_t dim, float eps);

/* dx += d(out)/dx . dout;  dweight += sum over tokens of dout * x * rstd. */
void rmsnorm_backward(model_ops_ctx *oc, float *dx, float *dweight, const float *dout, const float *x,
                      const float *weight, const float *rstd, int64_t tokens, int64_t dim);

/* The same with dout as bf16 (a bf16 linear layer's dx as it is). */
void rmsnorm_backward_bf16(model_ops_ctx *oc, float *dx, float *dweight, const uint16_t *dout, const float *x,
                           const float *weight, const float *rstd, int64_t tokens, int64_t dim);

#endif /* BFP8_MODEL_RMSNORM_H */
