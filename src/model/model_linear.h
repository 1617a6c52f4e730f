/*
 * model_linear.h - one linear layer of the model: fp32 activations on the
 * model side, bf16 at the boundary of bfp8_linear (which runs the recipe:
 * bf16, fp8-blockwise or fp8-blockwise-bf16wgrad), fp32 master weight and
 * gradient in the model's parameter arena.
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
    float *weight, *grad;      /* out x in, in the parameter arena */
    uint32_t *nonfinite_flags; /* BFP8_LINEAR_NUM_FLAGS, backend memory */
    void *saved_input;         /* the last forward's input: bf16, or f32 when exact */
    bfp8_linear *lin;          /* NULL when exact */
    const model_ops *ops;      /* the context's backend: conversions, exact-mode products */
} model_linear;

/* Shared scratch, sized for the widest layer and max_tokens. */
typedef struct model_linear_scratch {
    uint16_t *in_bf16, *out_bf16; /* max_tokens x widest */
    float *weight_t;              /* widest weight, transposed (exact mode) */
} model_linear_scratch;

/* Bytes of saved_input that one layer needs. */
size_t model_linear_saved_bytes(int64_t in_features, int64_t max_tokens, int exact);

bfp8_status model_linear_init(model_linear *l, bfp8_context *ctx, const char *name, int layer,
                              int64_t in_features, int64_t out_features, int64_t max_tokens,
                              bfp8_recipe recipe, int exact, float *weight, float *grad,
                              uint32_t *nonfinite_flags, void *saved_input);
void model_linear_release(model_linear *l);

/* Re-read the fp32 master weight (quantize it, or round it to bf16). */
bfp8_status model_linear_set_weight(model_linear *l);

/* y (tokens x out) = x W^T, or y += x W^T when add_to_output. */
bfp8_status model_linear_forward(model_linear *l, const model_linear_scratch *s, const float *x,
                                 int64_t tokens, float *y, int add_to_output);

/* dx (tokens x in, written) = dy W;  grad = (accumulate ? grad : 0) + dy^T x. */
bfp8_status model_linear_backward(model_linear *l, const model_linear_scratch *s, const float *dy,
                                  int64_t tokens, float *dx, int accumulate);

#endif /* BFP8_MODEL_LINEAR_H */
