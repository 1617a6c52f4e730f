/*
 * model_moe.h - the mixture-of-experts feed-forward of a decoder block
 * (model_config.moe): a bfp8_moe layer (router, routed SwiGLU experts on the
 * grouped GEMMs of the recipe, optional shared expert) in place of the dense
 * SwiGLU MLP, its weights in the model's parameter arena.
 *
 * Balancing (bias_update_rate > 0) is DeepSeek-V3's auxiliary-loss-free one:
 * a per-expert bias added to the scores for selection only, moved once per
 * optimizer step by the rate towards the mean load
 *   bias[e] += rate * sign(mean load - load[e])
 * where load[e] is the tokens routed to expert e by the training forwards of
 * the step (those that a backward followed; validation and sampling do not
 * count). The bias lives in the parameter arena as a tensor that AdamW skips
 * (model_tensor.frozen), so checkpoints, resume and the data-parallel
 * broadcast carry it like any weight. With data parallelism the ranks add
 * their loads (model_moe_block.counts) before the step, so every rank moves
 * the same bias.
 *
 * The layer reports its quantizers' non-finite flags in the slot of the
 * dense MLP's gate|up layer, under the name "moe.experts".
 */
#ifndef BFP8_MODEL_MOE_H
#define BFP8_MODEL_MOE_H

#include <stdint.h>

#include "blockfp8.h"
#include "model/model.h"

typedef struct model_moe_block {
    bfp8_moe *layer;
    bfp8_context *ctx;
    int num_experts;
    float bias_update_rate;
    bfp8_moe_weights weights, grads; /* in the parameter arena */
    float *bias;                     /* num_experts in the arena (a frozen tensor); NULL without balancing */
    float *bias_host;                /* the bias on the host: what a balancing step moves */
    int64_t *routed;                 /* host scratch: num_experts */
    /* since the last balancing step: tokens routed to each expert (num_experts), then the dropped
     * (token, expert) pairs; doubles so that data-parallel ranks can add them (dp_sum_scalars) */
    double *counts;
    double *window; /* tokens routed to each expert by the steps since the last model_moe_window_load */
    /* what the last balancing step saw: the busiest expert's load over the mean, the dropped pairs */
    double load_max_over_mean, dropped;
} model_moe_block;

/* One parameter tensor of an MoE feed-forward, in arena order. */
typedef struct model_moe_tensor {
    char name[40];
    int64_t rows, cols;
    int weight_decay, frozen;
} model_moe_tensor;

enum { MODEL_MOE_MAX_TENSORS = 6 };

/* The tensors of block `layer`'s MoE feed-forward (router, bias if
 * balancing, the experts' gate|up and down, the shared expert's); returns
 * how many (at most MODEL_MOE_MAX_TENSORS). */
int model_moe_tensors(const model_config *config, int layer, model_moe_tensor *out);

/* Block `layer`'s feed-forward from the tensors at *tensor on (advanced past
 * them): m->blocks[layer].moe. */
bfp8_status model_moe_init(model *m, int layer, int *tensor);
void model_moe_release(model_block *blk); /* no MoE block is fine */

/* After a change of the parameters: the layer takes the weights and the bias. */
bfp8_status model_moe_sync(model *m, model_moe_block *b);

/* out = residual + moe(x), tokens x dim; x may change after the call. */
bfp8_status model_moe_forward(model *m, model_moe_block *b, const float *x, int64_t tokens, float *out,
                              const float *residual);
/* Backward of the last forward at dy: dx written, the weights' gradients
 * added (accumulate) or stored; the forward's load counted. */
bfp8_status model_moe_backward(model *m, model_moe_block *b, const float *dy, float *dx, int accumulate);

/* Once per optimizer step, after the gradients: the load statistics, the
 * bias moved (balancing), the counts restarted. */
bfp8_status model_moe_balance_step(model *m);

/* The last balancing step's worst load max/mean over the MoE blocks and
 * their dropped pairs; 0 when the model has no MoE block. */
int model_moe_load_summary(const model *m, double *worst_max_over_mean, double *dropped);

/* The load of the steps since the last call, their tokens summed: per MoE
 * block the busiest expert's over the mean, into per_block (the MoE blocks
 * in order; NULL: not wanted), the worst into *worst; then the window
 * restarts. One step's load (above) also holds how its few sequences'
 * topics spread over the experts; the window's shows what the balancing
 * bias evens out. Returns the number of MoE blocks (0: none). */
int model_moe_window_load(model *m, double *worst, double *per_block);

#endif /* BFP8_MODEL_MOE_H */
