/*
 * cross_entropy.h - softmax cross-entropy over the vocabulary, fp32 logits,
 * forward (the mean loss) and backward (dlogits, in place allowed).
 */
#ifndef BFP8_MODEL_CROSS_ENTROPY_H
#define BFP8_MODEL_CROSS_ENTROPY_H

#include <stdint.h>

#include "model/model_ops_ctx.h"

/* Mean over tokens of -log softmax(logits[t])[targets[t]]; row_losses: tokens
 * floats of scratch (each token's loss). Summed in double, in token order. */
double cross_entropy_forward(model_ops_ctx *oc, float *row_losses, const float *logits, const int32_t *targets,
                             int64_t tokens, int64_t vocab);

/* dlogits[t] = scale * (softmax(logits[t]) - onehot(targets[t])); dlogits may
 * be logits itself. For the mean loss, scale = 1 / tokens. */
void cross_entropy_backward(model_ops_ctx *oc, float *dlogits, const float *logits, const int32_t *targets,
                            int64_t tokens, int64_t vocab, float scale);

#endif /* BFP8_MODEL_CROSS_ENTROPY_H */
