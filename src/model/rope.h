/*
 * rope.h - rotary position embedding, fp32, forward and backward. Each head's
 * vector is rotated in pairs (x[i], x[i + head_dim/2]) by the angle
 * pos * theta^(-2i / head_dim). Backward rotates the gradient back.
 */
#ifndef BFP8_MODEL_ROPE_H
#define BFP8_MODEL_ROPE_H

#include <stdint.h>

#include "model/model_ops_ctx.h"

/* cos, sin: max_seq x head_dim/2. */
void rope_tables(float *cos_table, float *sin_table, int64_t max_seq, int64_t head_dim, float theta);

/* x: batch*seq rows of n_heads * head_dim values (row stride row_stride), in place. */
void rope_forward(model_ops_ctx *oc, float *x, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                  int64_t row_stride, const float *cos_table, const float *sin_table);
void rope_backward(model_ops_ctx *oc, float *dx, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                   int64_t row_stride, const float *cos_table, const float *sin_table);

#endif /* BFP8_MODEL_ROPE_H */
