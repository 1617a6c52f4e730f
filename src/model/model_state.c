/*
 * model_state.c - the model's parameters and optimizer state: the initial
 * weights, copies between the arena and the host (checkpoints), the AdamW
 * step over every parameter tensor and the gradient norm.
 */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model/model_moe.h"
#include "model/model_profile.h"
#include "model/rng.h"

/* The step profile: from here on the time belongs to this class (model_profile.h). */
#define PROFILE(oc, class) model_profile_mark((oc), MODEL_PROFILE_##class)

/* w[k] = scale * the k-th normal of rng's stream (two draws each), the same
 * numbers as one sequential loop, made by all threads: a 1b model's weights
 * are a billion normals. */
static void fill_normal(float *w, size_t count, float scale, rng_state rng) {
    const int64_t chunk = 1 << 16, chunks = ((int64_t)count + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
        rng_state r = rng;
        rng_skip(&r, 2 * (uint64_t)(c * chunk));
        const int64_t end = (c + 1) * chunk < (int64_t)count ? (c + 1) * chunk : (int64_t)count;
        for (int64_t k = c * chunk; k < end; ++k) w[k] = scale * rng_normal(&r);
    }
}

bfp8_status model_init_weights(model *m, uint64_t seed) {
    rng_state rng = rng_seeded(seed);
    const float std = 0.02f, residual_std = std / sqrtf(2.0f * (float)m->config.n_layers);
    float *params = malloc(m->num_params * sizeof *params); /* made on the host */
    if (!params) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "model_init_weights: out of memory");
    for (int i = 0; i < m->num_tensors; ++i) {
        const model_tensor *t = &m->tensors[i];
        float *w = params + t->offset;
        const size_t len = strlen(t->name);
        if (!t->weight_decay) { /* a norm, or an MoE selection bias (0) */
            for (size_t k = 0; k < t->count; ++k) w[k] = t->frozen ? 0.0f : 1.0f;
            continue;
        }
        const int residual = (len >= 8 && strcmp(t->name + len - 8, "attn.out") == 0) ||
                             (len >= 8 && strcmp(t->name + len - 8, "mlp.down") == 0) ||
                             (len >= 3 && strcmp(t->name + len - 3, "_w2") == 0); /* an expert's down */
        fill_normal(w, t->count, residual ? residual_std : std, rng);
        rng_skip(&rng, 2 * (uint64_t)t->count);
    }
    bfp8_status st = bfp8_copy_to_backend(m->ctx, m->params, params, m->num_params * sizeof *params);
    free(params);
    BFP8_TRY(st);
    if (m->adam_m) BFP8_TRY(bfp8_memset_zero(m->ctx, m->adam_m, 2 * m->num_params * sizeof(float)));
    return model_sync_weights(m);
}

bfp8_status model_copy_state(const model *m, float *params, float *adam_m, float *adam_v) {
    if ((adam_m || adam_v) && !m->adam_m) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model_copy_state: no moments");
    const size_t bytes = m->num_params * sizeof(float);
    if (params) BFP8_TRY(bfp8_copy_to_host(m->ctx, params, m->params, bytes));
    if (adam_m) BFP8_TRY(bfp8_copy_to_host(m->ctx, adam_m, m->adam_m, bytes));
    if (adam_v) BFP8_TRY(bfp8_copy_to_host(m->ctx, adam_v, m->adam_v, bytes));
    return BFP8_OK;
}

bfp8_status model_load_state(model *m, const float *params, const float *adam_m, const float *adam_v) {
    if ((adam_m || adam_v) && !m->adam_m) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model_load_state: no moments");
    const size_t bytes = m->num_params * sizeof(float);
    if (params) BFP8_TRY(bfp8_copy_to_backend(m->ctx, m->params, params, bytes));
    if (adam_m) BFP8_TRY(bfp8_copy_to_backend(m->ctx, m->adam_m, adam_m, bytes));
    if (adam_v) BFP8_TRY(bfp8_copy_to_backend(m->ctx, m->adam_v, adam_v, bytes));
    return model_sync_weights(m);
}

bfp8_status model_set_param(model *m, size_t index, float value) {
    if (index >= m->num_params)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model_set_param: index %zu of %zu", index, m->num_params);
    return bfp8_copy_to_backend(m->ctx, m->params + index, &value, sizeof value);
}

bfp8_status model_adamw_step(model *m, const adamw_hparams *h, float grad_scale, int64_t step) {
    if (!m->adam_m) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model_adamw_step: the model keeps no AdamW moments");
    PROFILE(&m->oc, OPTIMIZER);
    for (int i = 0; i < m->num_tensors; ++i) {
        const model_tensor *t = &m->tensors[i];
        if (t->frozen) continue;
        m->ops->adamw_update(&m->oc, m->params + t->offset, m->grads + t->offset, m->adam_m + t->offset,
                             m->adam_v + t->offset, t->count, h, grad_scale, step, t->weight_decay);
    }
    BFP8_TRY(model_ops_status(&m->oc));
    BFP8_TRY(model_moe_balance_step(m));
    const bfp8_status st = model_sync_weights(m); /* the linear layers mark their own time */
    PROFILE(&m->oc, NONE); /* (after a failure too) */
    model_profile_count_step(&m->oc);
    return st;
}

bfp8_status model_gradient_norm(model *m, double *norm) {
    PROFILE(&m->oc, OPTIMIZER);
    *norm = m->ops->gradient_global_norm(&m->oc, m->grads, m->num_params);
    PROFILE(&m->oc, NONE);
    return model_ops_status(&m->oc);
}
