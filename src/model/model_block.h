/*
 * model_block.h - one decoder block of the model (model.h), forward and
 * backward, for model_forward / model_backward: RMSNorm, the qkv linear,
 * RoPE and attention (folded into one op with flash attention), the out
 * linear and its residual, RMSNorm, gate-and-up, SwiGLU, down and its
 * residual. Unless the linears are exact (fp32), the ops next to a linear
 * layer read and write its bf16 (model_linear.h) instead of fp32 copies.
 */
#ifndef BFP8_MODEL_MODEL_BLOCK_H
#define BFP8_MODEL_MODEL_BLOCK_H

#include "model/model.h"

/* Block l on batch x seq tokens: residual[l] in, residual[l + 1] out. */
bfp8_status model_block_forward(model *m, int l, int64_t batch, int64_t seq);
/* Block l's backward on the last forward's tokens: dres, the gradient of the
 * block's output, becomes that of its input (in place). */
bfp8_status model_block_backward(model *m, int l, float *dres, int accumulate);
/* Before a backward that does not accumulate: zero the gradients it adds to. */
void model_zero_added_gradients(model *m);

#endif /* BFP8_MODEL_MODEL_BLOCK_H */
