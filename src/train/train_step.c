/*
 * train_step.c - the optimizer step across the ranks (train_step.h).
 */
#include "train/train_step.h"

#include <signal.h>

#include "internal.h"
#include "model/model_profile.h"

static bfp8_status reduce_started(void *group, float *grads, size_t count) {
    return dp_allreduce_mean_start(group, grads, count);
}

void train_step_last_backward(const train_step_ranks *t, model *m, int last) {
    if (t->overlap) model_set_grads_ready(m, last ? reduce_started : NULL, last ? t->dp : NULL);
}

bfp8_status train_step_exchange(const train_step_ranks *t, model *m, double *loss_sum, int *stop_signal) {
    if (!t->dp) return BFP8_OK;
    double sums[3] = {*loss_sum, *stop_signal == SIGINT, *stop_signal != 0 && *stop_signal != SIGINT};
    if (t->zero) {
        BFP8_TRY(zero_reduce_gradients(t->zero));
    } else {
        /* (with overlap, what is left of the reductions once the backward is done) */
        model_profile_mark(&m->oc, MODEL_PROFILE_COMMUNICATION);
        const bfp8_status st =
            t->overlap ? dp_allreduce_wait(t->dp) : dp_allreduce_mean(t->dp, m->grads, m->num_params);
        model_profile_mark(&m->oc, MODEL_PROFILE_NONE);
        BFP8_TRY(st);
    }
    BFP8_TRY(dp_sum_scalars(t->dp, sums, 3));
    *loss_sum = sums[0] / (double)t->dp->world;
    /* (one signal for every rank, whichever of them it reached before this step's exchange) */
    if (sums[1] > 0.0 || sums[2] > 0.0) *stop_signal = sums[1] > 0.0 ? SIGINT : SIGTERM;
    return BFP8_OK;
}

bfp8_status train_step_gradient_norm(const train_step_ranks *t, model *m, double *norm) {
    return t->zero ? zero_gradient_norm(t->zero, norm) : model_gradient_norm(m, norm);
}

bfp8_status train_step_adamw(const train_step_ranks *t, model *m, const adamw_hparams *h, float grad_scale,
                             int64_t step) {
    return t->zero ? zero_adamw_step(t->zero, h, grad_scale, step) : model_adamw_step(m, h, grad_scale, step);
}
