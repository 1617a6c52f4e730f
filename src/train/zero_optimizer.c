/*
 * zero_optimizer.c - ZeRO-1: AdamW moments sharded over the ranks
 * (zero_optimizer.h).
 */
#include "train/zero_optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model/model_moe.h"
#include "model/model_ops.h"
#include "model/model_profile.h"

bfp8_status zero_create(zero_optimizer *z, model *m, dp_group *dp) {
    memset(z, 0, sizeof *z);
    if (m->adam_m)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "zero_create: the model keeps its own AdamW moments "
                                                 "(create it with no_adamw_state)");
    z->m = m;
    z->dp = dp;
    dp_shard_range(dp, dp->rank, m->num_params, &z->lo, &z->hi);
    const size_t bytes = (z->hi - z->lo) * sizeof(float);
    void *moments = NULL;
    BFP8_TRY(bfp8_malloc(m->ctx, &moments, 2 * bytes + sizeof(float))); /* never 0 bytes */
    z->adam_m = moments;
    z->adam_v = z->adam_m + (z->hi - z->lo);
    const bfp8_status st = bfp8_memset_zero(m->ctx, moments, 2 * bytes);
    if (st != BFP8_OK) zero_destroy(z);
    return st;
}

void zero_destroy(zero_optimizer *z) {
    if (z->m && z->adam_m) bfp8_free(z->m->ctx, z->adam_m);
    z->adam_m = z->adam_v = NULL;
}

bfp8_status zero_reduce_gradients(zero_optimizer *z) {
    model_profile_mark(&z->m->oc, MODEL_PROFILE_COMMUNICATION);
    const bfp8_status st = dp_reduce_scatter_mean(z->dp, z->m->grads, z->m->num_params);
    model_profile_mark(&z->m->oc, MODEL_PROFILE_NONE);
    return st;
}

bfp8_status zero_gradient_norm(zero_optimizer *z, double *norm) {
    model *m = z->m;
    model_profile_mark(&m->oc, MODEL_PROFILE_OPTIMIZER);
    const double shard = m->ops->gradient_global_norm(&m->oc, m->grads + z->lo, z->hi - z->lo);
    model_profile_mark(&m->oc, MODEL_PROFILE_NONE);
    BFP8_TRY(model_ops_status(&m->oc));
    double squares = shard * shard;
    BFP8_TRY(dp_sum_scalars(z->dp, &squares, 1));
    *norm = sqrt(squares);
    return BFP8_OK;
}

bfp8_status zero_adamw_step(zero_optimizer *z, const adamw_hparams *h, float grad_scale, int64_t step) {
    model *m = z->m;
    model_profile_mark(&m->oc, MODEL_PROFILE_OPTIMIZER);
    for (int i = 0; i < m->num_tensors; ++i) { /* the part of each tensor in the shard */
        const model_tensor *t = &m->tensors[i];
        if (t->frozen) continue; /* an MoE selection bias: moved by the balancing step below */
        const size_t a = t->offset > z->lo ? t->offset : z->lo;
        const size_t b = t->offset + t->count < z->hi ? t->offset + t->count : z->hi;
        if (a >= b) continue;
        m->ops->adamw_update(&m->oc, m->params + a, m->grads + a, z->adam_m + (a - z->lo),
                             z->adam_v + (a - z->lo), b - a, h, grad_scale, step, t->weight_decay);
    }
    model_profile_mark(&m->oc, MODEL_PROFILE_NONE);
    BFP8_TRY(model_ops_status(&m->oc));
    model_profile_mark(&m->oc, MODEL_PROFILE_COMMUNICATION);
    bfp8_status st = dp_all_gather(z->dp, m->params, m->num_params);
    model_profile_mark(&m->oc, MODEL_PROFILE_NONE);
    if (st == BFP8_OK) st = model_moe_balance_step(m); /* the loads were summed over the ranks: the same on each */
    if (st == BFP8_OK) st = model_sync_weights(m);
    model_profile_count_step(&m->oc);
    return st;
}

/* this rank's shard of a moment into m->grads[lo, hi), through the host */
static bfp8_status shard_into_grads(zero_optimizer *z, const float *moment) {
    model *m = z->m;
    const size_t bytes = (z->hi - z->lo) * sizeof(float);
    if (bfp8_context_backend(m->ctx) == BFP8_BACKEND_CPU) {
        memcpy(m->grads + z->lo, moment, bytes);
        return BFP8_OK;
    }
    float *host = malloc(bytes + sizeof(float));
    if (!host) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "ZeRO-1: out of memory");
    bfp8_status st = bfp8_copy_to_host(m->ctx, host, moment, bytes);
    if (st == BFP8_OK) st = bfp8_copy_to_backend(m->ctx, m->grads + z->lo, host, bytes);
    free(host);
    return st;
}

bfp8_status zero_gather_moment(zero_optimizer *z, int which, float *host) {
    model *m = z->m;
    BFP8_TRY(shard_into_grads(z, which == 1 ? z->adam_m : z->adam_v));
    BFP8_TRY(dp_all_gather(z->dp, m->grads, m->num_params));
    if (z->dp->rank != 0) return BFP8_OK;
    return bfp8_copy_to_host(m->ctx, host, m->grads, m->num_params * sizeof(float));
}

bfp8_status zero_load_moments(zero_optimizer *z, const float *adam_m, const float *adam_v) {
    const size_t bytes = (z->hi - z->lo) * sizeof(float);
    BFP8_TRY(bfp8_copy_to_backend(z->m->ctx, z->adam_m, adam_m + z->lo, bytes));
    return bfp8_copy_to_backend(z->m->ctx, z->adam_v, adam_v + z->lo, bytes);
}

static bfp8_status gather_for_checkpoint(void *user, int which, float *host) {
    return zero_gather_moment(user, which, host);
}

static bfp8_status load_from_checkpoint(void *user, const float *adam_m, const float *adam_v) {
    return zero_load_moments(user, adam_m, adam_v);
}

checkpoint_moments zero_checkpoint_moments(zero_optimizer *z) {
    const checkpoint_moments moments = {gather_for_checkpoint, load_from_checkpoint, z};
    return moments;
}
