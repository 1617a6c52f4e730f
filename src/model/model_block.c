/*
 * model_block.c - one decoder block, forward and backward (model_block.h),
 * with the operations of the model's backend (model_ops.h) and its linear
 * layers (model_linear.h).
 */
#include "model/model_block.h"

#include "internal.h"
#include "model/model_moe.h"
#include "model/model_profile.h"

/* The step profile: from here on the time belongs to this class (model_profile.h). */
#define PROFILE(oc, class) model_profile_mark((oc), MODEL_PROFILE_##class)

bfp8_status model_block_forward(model *m, int l, int64_t batch, int64_t seq) {
    const model_config *c = &m->config;
    const int64_t D = c->dim, F = c->ffn_hidden, H = c->n_heads, hd = D / H, M = batch * seq;
    model_activations *a = &m->act;
    const model_linear_scratch *s = &m->linear_scratch;
    const model_ops *ops = m->ops;
    model_ops_ctx *oc = &m->oc;
    const int flash = m->options.flash_attention;
    model_block *blk = &m->blocks[l];
    /* A linear layer that takes bf16 (all but exact ones) gets its input written as bf16 straight into it by
     * the op before it (in16), with no fp32 copy and conversion pass in between; else through work_in. */
    uint16_t *in16 = model_linear_input_bf16(&blk->qkv);
    PROFILE(oc, ELEMENTWISE);
    if (in16)
        ops->rmsnorm_forward_bf16(oc, in16, a->attn_rstd[l], a->residual[l], blk->attn_norm, M, D, c->norm_eps);
    else
        ops->rmsnorm_forward(oc, a->work_in, a->attn_rstd[l], a->residual[l], blk->attn_norm, M, D, c->norm_eps);
    /* qkv16: with flash attention, bf16 linears hand qkv over as bf16 (its buffer holds bf16 then) */
    uint16_t *qkv16 = flash && in16 ? (uint16_t *)a->qkv[l] : NULL;
    if (qkv16)
        BFP8_TRY(model_linear_forward_to_bf16(&blk->qkv, NULL, M, qkv16));
    else
        BFP8_TRY(model_linear_forward(&blk->qkv, s, in16 ? NULL : a->work_in, M, a->qkv[l], NULL));
    in16 = flash ? model_linear_input_bf16(&blk->out) : NULL;
    if (flash) { /* RoPE in the attention's bf16 copy of q and k */
        PROFILE(oc, ATTENTION);
        ops->rope_attention_forward(oc, in16 ? NULL : a->work_in, in16, a->probs[l], a->attn_scratch,
                                    qkv16 ? NULL : a->qkv[l], qkv16, batch, seq, H, hd, m->rope_cos, m->rope_sin);
    } else {
        PROFILE(oc, ELEMENTWISE);
        ops->rope_forward(oc, a->qkv[l], batch, seq, H, hd, 3 * D, m->rope_cos, m->rope_sin);
        ops->rope_forward(oc, a->qkv[l] + D, batch, seq, H, hd, 3 * D, m->rope_cos, m->rope_sin);
        PROFILE(oc, ATTENTION);
        ops->attention_forward(oc, a->work_in, a->probs[l], a->attn_scratch, a->qkv[l], batch, seq, H, hd);
    }
    BFP8_TRY(model_linear_forward(&blk->out, s, in16 ? NULL : a->work_in, M, a->residual_mid[l], a->residual[l]));
    if (blk->moe) { /* a mixture of experts in place of the MLP (model_moe.h): fp32 in and out */
        PROFILE(oc, ELEMENTWISE);
        ops->rmsnorm_forward(oc, a->work_in, a->mlp_rstd[l], a->residual_mid[l], blk->mlp_norm, M, D, c->norm_eps);
        return model_moe_forward(m, blk->moe, a->work_in, M, a->residual[l + 1], a->residual_mid[l]);
    }
    in16 = model_linear_input_bf16(&blk->gate_up);
    PROFILE(oc, ELEMENTWISE);
    if (in16)
        ops->rmsnorm_forward_bf16(oc, in16, a->mlp_rstd[l], a->residual_mid[l], blk->mlp_norm, M, D, c->norm_eps);
    else
        ops->rmsnorm_forward(oc, a->work_in, a->mlp_rstd[l], a->residual_mid[l], blk->mlp_norm, M, D,
                             c->norm_eps);
    if (in16) /* gate_up stays bf16 */
        BFP8_TRY(model_linear_forward_to_bf16(&blk->gate_up, NULL, M, (uint16_t *)a->gate_up[l]));
    else
        BFP8_TRY(model_linear_forward(&blk->gate_up, s, a->work_in, M, a->gate_up[l], NULL));
    if (in16 && model_linear_fuses_swiglu(&blk->down)) /* SwiGLU straight into down's fp8 input */
        return model_linear_forward_swiglu(&blk->down, s, (const uint16_t *)a->gate_up[l], M, a->residual[l + 1],
                                           a->residual_mid[l]);
    in16 = model_linear_input_bf16(&blk->down);
    PROFILE(oc, ELEMENTWISE);
    if (in16)
        ops->swiglu_forward_bf16(oc, in16, (const uint16_t *)a->gate_up[l], M, F);
    else
        ops->swiglu_forward(oc, a->work_in, a->gate_up[l], M, F);
    BFP8_TRY(model_linear_forward(&blk->down, s, in16 ? NULL : a->work_in, M, a->residual[l + 1],
                                  a->residual_mid[l]));
    return BFP8_OK;
}

/* dres += the gradient through an RMSNorm of x, from its output's gradient: the last linear layer's dx, bf16 in
 * the linear scratch when bf16 (all but exact linears), else fp32 in grad_a; its weight's gradient into
 * dweight. */
static void norm_backward(model *m, float *dres, float *dweight, const float *x, const float *weight,
                          const float *rstd, int bf16) {
    const int64_t M = m->last_batch * m->last_seq, D = m->config.dim;
    if (bf16)
        m->ops->rmsnorm_backward_bf16(&m->oc, dres, dweight, m->linear_scratch.in_bf16, x, weight, rstd, M, D);
    else
        m->ops->rmsnorm_backward(&m->oc, dres, dweight, m->act.grad_a, x, weight, rstd, M, D);
}

/* The dense MLP's backward: dres (the block output's gradient) -> dres += its input's gradient through the
 * MLP norm. */
static bfp8_status mlp_backward(model *m, int l, float *dres, int accumulate, int bf16) {
    const model_config *c = &m->config;
    const int64_t F = c->ffn_hidden, M = m->last_batch * m->last_seq;
    model_activations *a = &m->act;
    const model_linear_scratch *s = &m->linear_scratch;
    const model_ops *ops = m->ops;
    model_ops_ctx *oc = &m->oc;
    model_block *blk = &m->blocks[l];
    BFP8_TRY(model_linear_backward(&blk->down, s, dres, M, bf16 ? NULL : a->grad_a, accumulate));
    if (bf16 && model_linear_fuses_swiglu(&blk->down)) { /* SwiGLU's gradient straight into gate_up's fp8 dy */
        BFP8_TRY(model_linear_backward_swiglu(&blk->gate_up, s, s->in_bf16, (const uint16_t *)a->gate_up[l], M,
                                              accumulate));
    } else {
        PROFILE(oc, ELEMENTWISE);
        if (bf16)
            ops->swiglu_backward_bf16(oc, s->out_bf16, s->in_bf16, (const uint16_t *)a->gate_up[l], M, F);
        else
            ops->swiglu_backward(oc, a->grad_b, a->grad_a, a->gate_up[l], M, F);
        BFP8_TRY(model_linear_backward(&blk->gate_up, s, bf16 ? NULL : a->grad_b, M, bf16 ? NULL : a->grad_a,
                                       accumulate));
    }
    PROFILE(oc, ELEMENTWISE);
    norm_backward(m, dres, blk->d_mlp_norm, a->residual_mid[l], blk->mlp_norm, a->mlp_rstd[l], bf16);
    return BFP8_OK;
}

bfp8_status model_block_backward(model *m, int l, float *dres, int accumulate) {
    const model_config *c = &m->config;
    const int64_t D = c->dim, H = c->n_heads, hd = D / H;
    const int64_t batch = m->last_batch, seq = m->last_seq, M = batch * seq;
    model_activations *a = &m->act;
    const model_linear_scratch *s = &m->linear_scratch;
    const model_ops *ops = m->ops;
    model_ops_ctx *oc = &m->oc;
    const int flash = m->options.flash_attention;
    model_block *blk = &m->blocks[l];
    /* bf16: the linear layers take bf16 (all but exact ones), so their dx stays bf16 in the linear scratch
     * (s->in_bf16) for SwiGLU, the norms and flash attention to read, and SwiGLU and flash attention write
     * the next layer's dy there as bf16 (s->out_bf16; model_linear.h) */
    const int bf16 = model_linear_input_bf16(&blk->qkv) != NULL, flash16 = flash && bf16;
    /* dres: the gradient of the block's output */
    if (blk->moe) { /* fp32 in and out */
        BFP8_TRY(model_moe_backward(m, blk->moe, dres, a->grad_a, accumulate));
        PROFILE(oc, ELEMENTWISE);
        norm_backward(m, dres, blk->d_mlp_norm, a->residual_mid[l], blk->mlp_norm, a->mlp_rstd[l], 0);
    } else {
        BFP8_TRY(mlp_backward(m, l, dres, accumulate, bf16));
    }
    /* dres: the gradient of residual_mid */
    BFP8_TRY(model_linear_backward(&blk->out, s, dres, M, flash16 ? NULL : a->grad_a, accumulate));
    PROFILE(oc, ATTENTION);
    if (flash) {
        ops->rope_attention_backward(oc, flash16 ? NULL : a->grad_b, flash16 ? s->out_bf16 : NULL, a->attn_scratch,
                                     flash16 ? NULL : a->grad_a, flash16 ? s->in_bf16 : NULL,
                                     flash16 ? NULL : a->qkv[l], flash16 ? (const uint16_t *)a->qkv[l] : NULL,
                                     a->probs[l], batch, seq, H, hd, m->rope_cos, m->rope_sin);
    } else {
        ops->attention_backward(oc, a->grad_b, a->attn_scratch, a->grad_a, a->qkv[l], a->probs[l], batch, seq, H,
                                hd);
        PROFILE(oc, ELEMENTWISE);
        ops->rope_backward(oc, a->grad_b, batch, seq, H, hd, 3 * D, m->rope_cos, m->rope_sin);
        ops->rope_backward(oc, a->grad_b + D, batch, seq, H, hd, 3 * D, m->rope_cos, m->rope_sin);
    }
    BFP8_TRY(model_linear_backward(&blk->qkv, s, flash16 ? NULL : a->grad_b, M, bf16 ? NULL : a->grad_a,
                                   accumulate));
    PROFILE(oc, ELEMENTWISE);
    norm_backward(m, dres, blk->d_attn_norm, a->residual[l], blk->attn_norm, a->attn_rstd[l], bf16);
    return BFP8_OK;
}

/* Whether tensor t is a linear layer's weight, whose gradient the layer's
 * backward stores when not accumulating (model_linear_backward). */
static int stored_by_linear(const model *m, const model_tensor *t) {
    const float *g = m->grads + t->offset;
    for (int l = 0; l < m->config.n_layers; ++l) {
        const model_block *blk = &m->blocks[l];
        if (g == blk->qkv.grad || g == blk->out.grad || g == blk->gate_up.grad || g == blk->down.grad) return 1;
    }
    return 0;
}

/* A backward that does not accumulate: zero the gradients it adds to (the
 * embedding, the norms, the head), in runs of adjacent tensors; the linear
 * layers' it stores (at 1B parameters that leaves 0.5 of 3.8 GB to write). */
void model_zero_added_gradients(model *m) {
    size_t start = 0, end = 0;
    for (int i = 0; i <= m->num_tensors; ++i) {
        const model_tensor *t = i < m->num_tensors ? &m->tensors[i] : NULL;
        if (t && stored_by_linear(m, t)) continue;
        if (t && t->offset == end) {
            end += t->count;
            continue;
        }
        if (end > start) m->ops->zero_f32(&m->oc, m->grads + start, (int64_t)(end - start));
        if (t) start = t->offset, end = t->offset + t->count;
    }
}
