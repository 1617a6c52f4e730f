/*
 * swiglu.h - the SwiGLU gate of the MLP, fp32, forward and backward:
 *   out = silu(gate) * up,  silu(g) = g / (1 + exp(-g))
 * gate_up holds, per token, gate | up (2 * hidden wide): the output of the
 * fused gate-and-up linear layer.
 */
#ifndef BFP8_MODEL_SWIGLU_H
#define BFP8_MODEL_SWIGLU_H

#include <stdint.h>

#include "model/model_ops_ctx.h"

void swiglu_forward(model_ops_ctx *oc, float *out, const float *gate_up, int64_t tokens, int64_t hidden);
/* dgate_up (written) from dout. */
void swiglu_backward(model_ops_ctx *oc, float *dgate_up, const float *dout, const float *gate_up, int64_t tokens,
                     int64_t hidden);

/* The bf16 forms (all but exact linears): gate_up and dout as bf16 (the gate-and-up linear
 * layer's bf16 output, the down layer's bf16 dx, as they are), out / dgate_up
 * rounded to bf16 (formats.h's
 * bfp8_encode_bf16): the input, or the output gradient, of a bf16 linear
 * layer. The same values as the fp32 forms on gate_up widened. */
void swiglu_forward_bf16(model_ops_ctx *oc, uint16_t *out, const uint16_t *gate_up, int64_t tokens, int64_t hidden);
void swiglu_backward_bf16(model_ops_ctx *oc, uint16_t *dgate_up, const uint16_t *dout, const uint16_t *gate_up,
                          int64_t tokens, int64_t hidden);

#endif /* BFP8_MODEL_SWIGLU_H */
