/*
 * attention.h - causal multi-head self-attention, fp32, forward and backward.
 *
 * qkv holds, per token, q | k | v, each n_heads * head_dim wide (row stride
 * 3 * dim, already rotated by RoPE); out is dim wide. The softmax
 * probabilities are kept for backward: probs[b][h][t][s], s <= t (zeros
 * above the diagonal).
 */
#ifndef BFP8_MODEL_ATTENTION_H
#define BFP8_MODEL_ATTENTION_H

#include <stdint.h>

#include "model/model_ops_ctx.h"

/* Floats of scratch that forward and backward need. */
int64_t attention_scratch_floats(int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim);

void attention_forward(model_ops_ctx *oc, float *out, float *probs, float *scratch, const float *qkv, int64_t batch,
                       int64_t seq, int64_t n_heads, int64_t head_dim);

/* dqkv (written, 3 * dim wide) from dout. */
void attention_backward(model_ops_ctx *oc, float *dqkv, float *scratch, const float *dout, const float *qkv,
                        const float *probs, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim);

#endif /* BFP8_MODEL_ATTENTION_H */
