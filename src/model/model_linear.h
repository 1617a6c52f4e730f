/*
 * model_linear.h - one linear layer of the model over bfp8_linear (which
 * runs the recipe: bf16, fp8-blockwise or fp8-blockwise-bf16wgrad): bf16
 * activations handed over in place by the ops next to it, or fp32 ones
 * converted on the way; fp32 master weight and gradient in the model's
 * parameter arena. The layer's bf16 input buffer is its own where its
 * backward reads the input again (bf16 and bf16-wgrad keep x for their bf16
 * wgrad), and the model's shared one in fp8-blockwise, whose backward reads
 * only the x^T quantized by the forward.
 *
 * The exact mode skips bfp8_linear and computes in fp32 (no rounding at
 * all): the gradient checks use it to test the model's wiring.
 */
#ifndef BFP8_MODEL_LINEAR_H
#define BFP8_MODEL_LINEAR_H

#include <stdint.h>

#include "blockfp8.h"
#include "model/model_ops.h"

typedef struct model_linear {
    char name[32];  /* e.g. "attn.qkv" */
    int layer;
    int64_t in_features, out_features, max_tokens;
    int exact;
    bfp8_recipe recipe;
    float *weight, *grad;      /* out x in, in the parameter arena */
    uint32_t *nonfinite_flags; /* BFP8_LINEAR_NUM_FLAGS, backend memory */
    void *saved_input;         /* the forward's input: bf16 (fp8-blockwise: shared by the layers), f32 when exact */
    bfp8_linear *lin;          /* NULL when exact */
    bfp8_context *ctx;         /* the model's */
    const model_ops *ops;      /* the context's backend: conversions, exact-mode products */
    model_ops_ctx *oc;         /* what they run with (the model's) */
} model_linear;

/* Shared scratch, sized for the widest layer and max_tokens. The bf16
 * recipes: out_bf16 holds a forward's output and a backward's dy, in_bf16 a
 * backward's dx, each as bf16. */
typedef struct model_linear_scratch {
    uint16_t *in_bf16, *out_bf16; /* max_tokens x widest */
    float *weight_t;              /* widest weight, transposed (exact mode) */
} model_linear_scratch;

/* 1 when the layer's backward reads its input again (so each layer keeps its own), 0 when not
 * (fp8-blockwise: the layers share one input buffer). */
int model_linear_keeps_input(bfp8_recipe recipe, int exact);

/* Bytes of saved_input that one layer needs of its own (0 for fp8-blockwise). */
size_t model_linear_saved_bytes(int64_t in_features, int64_t max_tokens, bfp8_recipe recipe, int exact);

bfp8_status model_linear_init(model_linear *l, bfp8_context *ctx, model_ops_ctx *oc, const char *name, int layer,
                              int64_t in_features, int64_t out_features, int64_t max_tokens, bfp8_recipe recipe,
                              int exact, float *weight, float *grad, uint32_t *nonfinite_flags, void *saved_input);
void model_linear_release(model_linear *l);

/* Re-read the fp32 master weight (quantize it, or round it to bf16). */
bfp8_status model_linear_set_weight(model_linear *l);

/* The layer's bf16 input (tokens x in), where an op that writes bf16
 * itself puts the layer's input before a forward with x NULL. NULL when the
 * layer computes exactly (fp32). */
uint16_t *model_linear_input_bf16(const model_linear *l);

/* y (tokens x out) = x W^T, or residual + x W^T when residual is not NULL
 * (residual: tokens x out, not y). x NULL: the input is already in
 * model_linear_input_bf16(l). */
bfp8_status model_linear_forward(model_linear *l, const model_linear_scratch *s, const float *x,
                                 int64_t tokens, float *y, const float *residual);

/* The same with y (tokens x out) written as bf16, no residual (for an op
 * that reads bf16 itself); not exact. */
bfp8_status model_linear_forward_to_bf16(model_linear *l, const float *x, int64_t tokens, uint16_t *y);

/* dx (tokens x in, written) = dy W;  grad = (accumulate ? grad : 0) + dy^T x.
 * Not exact: dy NULL: dy is already in s->out_bf16 as bf16; dx NULL: dx is
 * left in s->in_bf16 as bf16, for an op that reads bf16. */
bfp8_status model_linear_backward(model_linear *l, const model_linear_scratch *s, const float *dy,
                                  int64_t tokens, float *dx, int accumulate);

/* SwiGLU fused with the quantizer of the layer after it (fp8-blockwise, hidden a multiple of 128): 1 when
 * the model's MLP runs its SwiGLU through the two calls below instead of the SwiGLU ops and bf16 hand-offs. */
int model_linear_fuses_swiglu(const model_linear *down);
/* The down layer's forward from gate_up (tokens x 2 hidden, bf16): y = SwiGLU(gate_up) W^T (+ residual), the
 * SwiGLU quantized as it is made (bfp8_swiglu_quantize_1x128). */
bfp8_status model_linear_forward_swiglu(model_linear *down, const model_linear_scratch *s, const uint16_t *gate_up,
                                        int64_t tokens, float *y, const float *residual);
/* The gate-and-up layer's backward from dout (the down layer's dx, bf16) and gate_up: its dy, SwiGLU's
 * gradient, quantized as it is made (bfp8_swiglu_backward_quantize_1x128); dx left in s->in_bf16 (bf16). */
bfp8_status model_linear_backward_swiglu(model_linear *gate_up_layer, const model_linear_scratch *s,
                                         const uint16_t *dout, const uint16_t *gate_up, int64_t tokens,
                                         int accumulate);

#endif /* BFP8_MODEL_LINEAR_H */
