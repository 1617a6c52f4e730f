/*
 * train_step.h - the optimizer step of `blockfp8 train` across its ranks:
 * the gradient exchange, the global gradient norm and AdamW, for one
 * process, plain data parallelism (every rank updates every weight) or
 * ZeRO-1 (each rank its shard: zero_optimizer.h).
 */
#ifndef BFP8_TRAIN_TRAIN_STEP_H
#define BFP8_TRAIN_TRAIN_STEP_H

#include "model/model.h"
#include "train/data_parallel.h"
#include "train/zero_optimizer.h"

typedef struct train_step_ranks {
    dp_group *dp;         /* NULL: one process */
    zero_optimizer *zero; /* NULL: the model's own AdamW */
    int overlap;          /* plain data parallelism on CUDA ranks: each block's gradients are averaged as soon
                           * as its backward has made them, overlapped with the rest of the backward */
} train_step_ranks;

/* Before the backward of a step's last micro-batch (last 1) and after it (last 0): with overlap, hands the
 * backward's finished gradients to the reductions (model_set_grads_ready); else nothing. */
void train_step_last_backward(const train_step_ranks *t, model *m, int last);

/* The mean gradient over the ranks (ZeRO-1: of this rank's shard; with overlap: the wait for the reductions
 * the backward started), *loss_sum
 * summed over them and *stop_signal set, the same on every rank, when any
 * rank has one: SIGINT when one of them has a SIGINT, else SIGTERM (a
 * signal sent to every rank may reach some before the exchange and some
 * after). Nothing to do for one process. */
bfp8_status train_step_exchange(const train_step_ranks *t, model *m, double *loss_sum, int *stop_signal);

/* The global L2 norm of the mean gradient, the same on every rank. */
bfp8_status train_step_gradient_norm(const train_step_ranks *t, model *m, double *norm);

/* AdamW with the gradients scaled by grad_scale; every rank ends with the same weights. */
bfp8_status train_step_adamw(const train_step_ranks *t, model *m, const adamw_hparams *h, float grad_scale,
                             int64_t step);

#endif /* BFP8_TRAIN_TRAIN_STEP_H */
