/*
 * zero_optimizer.h - ZeRO-1 (`blockfp8 train --zero 1`): the AdamW moments
 * sharded over the data-parallel ranks.
 *
 * Rank r owns the contiguous shard [lo, hi) of the parameter arena
 * (dp_shard_range; it crosses tensor boundaries, and each tensor keeps its
 * own weight-decay flag). A step: the gradients are reduce-scattered (each
 * rank gets the mean of its shard only), the clipping uses the global norm
 * (the shards' squared norms summed over the ranks in rank order), each rank
 * runs AdamW on its shard with moments of its shard's size (the model is
 * created with no_adamw_state: optimizer memory per rank is 1/N of the
 * plain run's), and the updated weights are all-gathered.
 *
 * The gradient mean is the bits of the plain all-reduce, and AdamW works
 * element by element, so a ZeRO-1 run differs from a plain data-parallel one
 * only by the rounding of the norm's sum (a clipping factor that may differ
 * in its last bit). Checkpoints hold all the moments, as a plain run's do:
 * the shards are gathered for rank 0 to write, and a resumed rank reads its
 * own shard of them.
 */
#ifndef BFP8_TRAIN_ZERO_OPTIMIZER_H
#define BFP8_TRAIN_ZERO_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "model/adamw.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"

typedef struct zero_optimizer {
    model *m;               /* created with no_adamw_state */
    dp_group *dp;
    size_t lo, hi;          /* this rank's shard of the arena */
    float *adam_m, *adam_v; /* hi - lo floats each, in the model's backend memory, zeroed */
} zero_optimizer;

bfp8_status zero_create(zero_optimizer *z, model *m, dp_group *dp);
void zero_destroy(zero_optimizer *z);

/* The mean gradient of this rank's shard (the rest of m->grads is left undefined). */
bfp8_status zero_reduce_gradients(zero_optimizer *z);

/* The global L2 norm of the mean gradient: the same value on every rank. */
bfp8_status zero_gradient_norm(zero_optimizer *z, double *norm);

/* AdamW on this rank's shard, the weights all-gathered, the linear layers synced. */
bfp8_status zero_adamw_step(zero_optimizer *z, const adamw_hparams *h, float grad_scale, int64_t step);

/* Every rank calls it: the full moment (which 1: AdamW m, 2: v) put
 * together in m->grads, then on rank 0 copied into host (num_params floats;
 * NULL on the other ranks). m->grads is scratch between steps. */
bfp8_status zero_gather_moment(zero_optimizer *z, int which, float *host);

/* This rank's shard of full moments in host memory (num_params floats each). */
bfp8_status zero_load_moments(zero_optimizer *z, const float *adam_m, const float *adam_v);

/* The moments of a checkpoint through z: zero_gather_moment on save (rank 0),
 * zero_load_moments on load. */
checkpoint_moments zero_checkpoint_moments(zero_optimizer *z);

#endif /* BFP8_TRAIN_ZERO_OPTIMIZER_H */
