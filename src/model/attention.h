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

/*
 * Attention with RoPE folded in (the flash path's fused op, model_ops.h):
 * qkv holds q and k NOT rotated and is left as it is; the result is that of
 * rope_forward on q and k (rope.h, row stride 3 * dim), then attention_forward,
 * and for the backward attention_backward, then rope_backward on dq and dk,
 * so dqkv is the gradient of the unrotated qkv. Exactly one of out and
 * out_bf16 is given (the output as fp32, or rounded to bf16 as
 * bfp8_encode_bf16), likewise dqkv / dqkv_bf16, and of the inputs qkv /
 * qkv_bf16 and dout / dout_bf16 (read as fp32 or as bf16). cos_table,
 * sin_table: rope_tables.
 *
 * On the CPU, probs is that of attention_forward and scratch holds
 * rope_attention_scratch_floats (the rotated copy of qkv, and fp32 copies
 * of dO and dqkv behind attention's own scratch). On CUDA the op runs flash
 * style only (model_ops_ctx.flash_attention, head_dim 64 or 128), with probs
 * and scratch as flash_attention_saved_floats / flash_attention_scratch_floats
 * (model_ops.h); its backward reads the rotated bf16 copy the forward kept in
 * probs, not qkv.
 */
int64_t rope_attention_scratch_floats(int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim);

void rope_attention_forward(model_ops_ctx *oc, float *out, uint16_t *out_bf16, float *probs, float *scratch,
                            const float *qkv, const uint16_t *qkv_bf16, int64_t batch, int64_t seq, int64_t n_heads,
                            int64_t head_dim, const float *cos_table, const float *sin_table);
void rope_attention_backward(model_ops_ctx *oc, float *dqkv, uint16_t *dqkv_bf16, float *scratch, const float *dout,
                             const uint16_t *dout_bf16, const float *qkv, const uint16_t *qkv_bf16, const float *probs,
                             int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim, const float *cos_table,
                             const float *sin_table);

#endif /* BFP8_MODEL_ATTENTION_H */
