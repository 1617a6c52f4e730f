/*
 * model.c - the decoder: parameter layout, initialisation, forward and
 * backward with the operations of the context's backend (model_ops.h: the
 * CPU references or their CUDA twins), the linear layers through
 * model_linear.
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model/attention.h"
#include "model/model_moe.h"
#include "model/model_block.h"
#include "model/model_profile.h"
#include "model/rng.h"
#include "model/rope.h"

enum { LINEARS_PER_BLOCK = 4 };

/* The step profile: from here on the time belongs to this class (model_profile.h). */
#define PROFILE(oc, class) model_profile_mark((oc), MODEL_PROFILE_##class)

/* ------------------------------------------------------------------------ */
/* Arena layout: the same walk sizes the arena (base NULL) and then carves it. */

typedef struct arena_plan {
    char *base;
    size_t used;
} arena_plan;

static void *arena_take(arena_plan *a, size_t bytes) {
    const size_t offset = (a->used + 63) / 64 * 64;
    a->used = offset + bytes;
    return a->base && bytes ? a->base + offset : NULL; /* (nothing to point at: NULL, so a stray use fails) */
}

static float *take_floats(arena_plan *a, int64_t count) {
    return arena_take(a, (size_t)count * sizeof(float));
}

static int64_t max3(int64_t a, int64_t b, int64_t c) {
    const int64_t ab = a > b ? a : b;
    return ab > c ? ab : c;
}

/* Widest row a linear layer reads or writes. */
static int64_t widest_row(const model_config *c) {
    return max3(3 * (int64_t)c->dim, 2 * (int64_t)c->ffn_hidden, (int64_t)c->dim);
}

static void plan_activations(model *m, arena_plan *a) {
    const model_config *c = &m->config;
    const int64_t L = c->n_layers, D = c->dim, F = c->ffn_hidden;
    const int64_t B = m->options.max_batch, T = m->options.max_seq, M = B * T;
    const int64_t W = widest_row(c);
    model_activations *act = &m->act;
    for (int64_t l = 0; l <= L; ++l) {
        float *r = take_floats(a, M * D);
        if (a->base) act->residual[l] = r;
    }
    /* Flash attention keeps its bf16 q | k | v in probs (flash_attention_saved_floats), so the backward never
     * reads qkv: the layers share one. Unless exact, gate_up is kept as the linear layer's bf16 output. */
    const int flash = m->options.flash_attention, exact = m->options.exact_linears;
    const int bf16_io = !exact;
    const int64_t gate_up_floats = bf16_io ? M * F : M * 2 * F;
    const int64_t probs = flash ? flash_attention_saved_floats(B, T, c->n_heads, D / c->n_heads)
                                : B * c->n_heads * T * T;
    float *shared_qkv = flash ? take_floats(a, M * 3 * D) : NULL;
    for (int64_t l = 0; l < L; ++l) {
        float *mid = take_floats(a, M * D), *ar = take_floats(a, M), *mr = take_floats(a, M);
        float *qkv = flash ? shared_qkv : take_floats(a, M * 3 * D), *pr = take_floats(a, probs);
        float *gu = take_floats(a, model_config_moe_layer(c, (int)l) ? 0 : gate_up_floats);
        if (a->base) {
            act->residual_mid[l] = mid;
            act->attn_rstd[l] = ar;
            act->mlp_rstd[l] = mr;
            act->qkv[l] = qkv;
            act->probs[l] = pr;
            act->gate_up[l] = gu;
        }
    }
    act->final_rstd = take_floats(a, M);
    act->final_out = take_floats(a, M * D);
    void *head_buffers = arena_take(a, head_loss_buffer_bytes(&m->head_layer));
    if (a->base) head_loss_carve(&m->head_layer, head_buffers);
    /* fp32 staging, as wide as what uses it: exact linears (any width); a mixture-of-experts block's input
     * and gradient (dim); attention without flash (its output and gradient, dim, and that of qkv, 3 dim);
     * the head's input gradient (dim). With bf16 hand-offs and flash attention only the last is left. */
    const int64_t fp32_in = exact ? W : (c->moe.num_experts > 0 || !flash) ? D : 0;
    act->work_in = take_floats(a, M * fp32_in);
    act->grad_a = take_floats(a, M * (exact ? W : D));
    act->grad_b = take_floats(a, M * (exact ? W : !flash ? 3 * D : 0));
    act->grad_residual = take_floats(a, M * D);
    act->attn_scratch = take_floats(a, m->options.flash_attention
                                           ? flash_attention_scratch_floats(B, T, c->n_heads, D / c->n_heads)
                                           : attention_scratch_floats(B, T, c->n_heads, D / c->n_heads));
    act->tokens = arena_take(a, (size_t)M * sizeof(int32_t));
    act->targets = arena_take(a, (size_t)M * sizeof(int32_t));
    /* bf16 boundaries: all but exact linears */
    const size_t bf16_scratch = bf16_io ? (size_t)(M * W) * sizeof(uint16_t) : 0;
    m->linear_scratch.in_bf16 = arena_take(a, bf16_scratch);
    m->linear_scratch.out_bf16 = arena_take(a, bf16_scratch);
    m->linear_scratch.weight_t = take_floats(a, exact ? (D * W > F * D ? D * W : F * D) : 0);
    m->rope_cos = take_floats(a, c->max_seq * (D / c->n_heads) / 2);
    m->rope_sin = take_floats(a, c->max_seq * (D / c->n_heads) / 2);
    /* the linear layers' inputs: their own, or (fp8-blockwise) the scratch that their forward reads x from and
     * their backward writes dx to, one after the other */
    for (int64_t l = 0; l < L; ++l) {
        model_block *blk = &m->blocks[l];
        model_linear *lins[LINEARS_PER_BLOCK] = {&blk->qkv, &blk->out, &blk->gate_up, &blk->down};
        const int64_t in_features[LINEARS_PER_BLOCK] = {D, D, D, F};
        for (int i = 0; i < (model_config_moe_layer(c, (int)l) ? 2 : LINEARS_PER_BLOCK); ++i) {
            void *saved = arena_take(a, model_linear_saved_bytes(in_features[i], M, m->options.recipe, exact));
            if (a->base) lins[i]->saved_input = saved ? saved : m->linear_scratch.in_bf16;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Parameters */

static void add_tensor(model *m, size_t *offset, const char *name, int64_t rows, int64_t cols,
                       int weight_decay) {
    if (m->tensors) {
        model_tensor *t = &m->tensors[m->num_tensors];
        snprintf(t->name, sizeof t->name, "%s", name);
        t->offset = *offset;
        t->count = (size_t)(rows * cols);
        t->rows = rows;
        t->cols = cols;
        t->weight_decay = weight_decay;
    }
    m->num_tensors++;
    *offset += (size_t)(rows * cols);
}

/* The parameter layout, in arena order. Norm weights are not decayed. */
static void layout_params(model *m) {
    const model_config *c = &m->config;
    const int64_t D = c->dim, F = c->ffn_hidden, V = c->vocab_size;
    size_t offset = 0;
    char name[40];
    m->num_tensors = 0;
    add_tensor(m, &offset, "tok_emb", V, D, 1);
    for (int l = 0; l < c->n_layers; ++l) {
        snprintf(name, sizeof name, "layers.%d.attn_norm", l);
        add_tensor(m, &offset, name, 1, D, 0);
        snprintf(name, sizeof name, "layers.%d.attn.qkv", l);
        add_tensor(m, &offset, name, 3 * D, D, 1);
        snprintf(name, sizeof name, "layers.%d.attn.out", l);
        add_tensor(m, &offset, name, D, D, 1);
        snprintf(name, sizeof name, "layers.%d.mlp_norm", l);
        add_tensor(m, &offset, name, 1, D, 0);
        if (model_config_moe_layer(c, l)) {
            model_moe_tensor moe[MODEL_MOE_MAX_TENSORS];
            for (int i = 0, n = model_moe_tensors(c, l, moe); i < n; ++i) {
                memcpy(name, moe[i].name, sizeof name);
                add_tensor(m, &offset, name, moe[i].rows, moe[i].cols, moe[i].weight_decay);
                if (m->tensors) m->tensors[m->num_tensors - 1].frozen = moe[i].frozen;
            }
            continue;
        }
        snprintf(name, sizeof name, "layers.%d.mlp.gate_up", l);
        add_tensor(m, &offset, name, 2 * F, D, 1);
        snprintf(name, sizeof name, "layers.%d.mlp.down", l);
        add_tensor(m, &offset, name, D, F, 1);
    }
    add_tensor(m, &offset, "final_norm", 1, D, 0);
    add_tensor(m, &offset, "head", V, D, 1);
    m->num_params = offset;
}

size_t model_param_arena_bytes(const model *m) {
    const size_t flags = (size_t)m->config.n_layers * LINEARS_PER_BLOCK * BFP8_LINEAR_NUM_FLAGS;
    const size_t arrays = m->options.no_adamw_state ? 2 : 4; /* params, grads[, adam_m, adam_v] */
    return arrays * m->num_params * sizeof(float) + flags * sizeof(uint32_t);
}

size_t model_activation_arena_bytes(const model *m) {
    arena_plan plan = {NULL, 0};
    model copy = *m; /* plan_activations only writes through a non-NULL base */
    plan_activations(&copy, &plan);
    return plan.used;
}

bfp8_status model_create(model **out, bfp8_context *ctx, const model_config *config,
                         const model_options *options) {
    if (!out || !ctx || !config || !options)
        return bfp8_fail(BFP8_ERR_NULL_POINTER, "model_create: a pointer is NULL");
    *out = NULL;
    BFP8_TRY(model_config_validate(config));
    if (options->max_batch < 1 || options->max_seq < 1 || options->max_seq > config->max_seq)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "model_create: batch %lld and seq %lld must be >= 1, seq <= %d",
                         (long long)options->max_batch, (long long)options->max_seq,
                         config->max_seq);
    if (bfp8_recipe_name(options->recipe) == NULL)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model_create: unknown recipe %d",
                         (int)options->recipe);
    model *m = calloc(1, sizeof *m);
    if (!m) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "model_create: out of memory");
    m->config = *config;
    m->options = *options;
    m->ctx = ctx;
    m->ops = model_ops_for(ctx);
    if (!m->ops) {
        free(m);
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "model_create: this build has no model operations for "
                                               "the context's backend");
    }
    if (options->flash_attention) {
        const int64_t head_dim = config->dim / config->n_heads;
        int supported = 0;
#if defined(BFP8_WITH_CUDA)
        supported = m->ops != &model_ops_cpu && model_cuda_flash_attention_supported(head_dim);
#endif
        if (!supported) {
            const int on_cpu = m->ops == &model_ops_cpu;
            free(m);
            return bfp8_fail(BFP8_ERR_UNSUPPORTED, "model_create: flash attention runs on a CUDA device with "
                                                   "head_dim 64 or 128 (this model: head_dim %lld%s)",
                             (long long)head_dim, on_cpu ? ", on the CPU" : "");
        }
    }
    if ((unsigned)options->head_products > MODEL_HEAD_BF16) {
        free(m);
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model_create: unknown head products %d", (int)options->head_products);
    }
    /* the head: bf16 products on CUDA unless fp32 is asked for, or exact linear layers (gradient checks) */
    const int head_bf16 = options->head_products == MODEL_HEAD_BF16 ||
                          (options->head_products == MODEL_HEAD_AUTO && m->ops != &model_ops_cpu &&
                           !options->exact_linears);
    head_loss_init(&m->head_layer, config->dim, config->vocab_size, options->max_batch * options->max_seq, head_bf16,
                   0);
    model_ops_ctx_init(&m->oc, ctx, options->tf32, options->flash_attention);
    if (options->profile && model_profile_create(&m->oc) != BFP8_OK) {
        free(m);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "model_create: out of memory");
    }
    const int L = config->n_layers;
    layout_params(m); /* counts the tensors */
    m->tensors = calloc((size_t)m->num_tensors, sizeof *m->tensors);
    m->blocks = calloc((size_t)L, sizeof *m->blocks);
    model_activations *act = &m->act;
    act->residual = calloc((size_t)L + 1, sizeof(float *));
    float ***per_layer[] = {&act->residual_mid, &act->attn_rstd, &act->mlp_rstd,
                            &act->qkv,          &act->probs,     &act->gate_up};
    int ok = m->tensors && m->blocks && act->residual;
    for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; ++i) {
        *per_layer[i] = calloc((size_t)L, sizeof(float *));
        ok = ok && *per_layer[i];
    }
    if (!ok) {
        model_destroy(m);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "model_create: out of memory");
    }
    layout_params(m); /* fills the tensor table */

    bfp8_status st = bfp8_malloc(ctx, &m->param_arena, model_param_arena_bytes(m));
    if (st != BFP8_OK) {
        model_destroy(m);
        return st;
    }
    const size_t P = m->num_params;
    m->params = m->param_arena;
    m->grads = m->params + P;
    m->adam_m = options->no_adamw_state ? NULL : m->grads + P;
    m->adam_v = options->no_adamw_state ? NULL : m->adam_m + P;
    m->nonfinite_flags = (uint32_t *)(m->grads + (options->no_adamw_state ? 1 : 3) * P);
    st = bfp8_memset_zero(ctx, m->param_arena, model_param_arena_bytes(m));
    if (st != BFP8_OK) {
        model_destroy(m);
        return st;
    }

    const size_t act_bytes = model_activation_arena_bytes(m);
    st = bfp8_malloc(ctx, &m->act_arena, act_bytes);
    if (st != BFP8_OK) {
        char cause[512]; /* bfp8_fail overwrites what bfp8_last_error() points to */
        snprintf(cause, sizeof cause, "%s", bfp8_last_error());
        model_destroy(m);
        return bfp8_fail(st, "model_create: %.1f MiB of activations for batch %lld x seq %lld: %s",
                         (double)act_bytes / (1 << 20), (long long)options->max_batch,
                         (long long)options->max_seq, cause);
    }
    arena_plan plan = {m->act_arena, 0};
    plan_activations(m, &plan);
    /* the RoPE tables, made on the host */
    const size_t half = (size_t)config->max_seq * (size_t)(config->dim / config->n_heads / 2);
    float *tables = malloc(2 * half * sizeof *tables);
    if (!tables) {
        model_destroy(m);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "model_create: out of memory");
    }
    rope_tables(tables, tables + half, config->max_seq, config->dim / config->n_heads, config->rope_theta);
    st = bfp8_copy_to_backend(ctx, m->rope_cos, tables, half * sizeof *tables);
    if (st == BFP8_OK) st = bfp8_copy_to_backend(ctx, m->rope_sin, tables + half, half * sizeof *tables);
    free(tables);
    if (st != BFP8_OK) {
        model_destroy(m);
        return st;
    }

    /* Point the named parameters and the linear layers into the arena. */
    int t = 0;
    m->tok_emb = m->params + m->tensors[t].offset;
    m->d_tok_emb = m->grads + m->tensors[t++].offset;
    const int64_t D = config->dim, F = config->ffn_hidden;
    const int64_t M = options->max_batch * options->max_seq;
    static const char *const linear_names[LINEARS_PER_BLOCK] = {"attn.qkv", "attn.out",
                                                                "mlp.gate_up", "mlp.down"};
    for (int l = 0; l < L; ++l) {
        model_block *blk = &m->blocks[l];
        model_linear *lins[LINEARS_PER_BLOCK] = {&blk->qkv, &blk->out, &blk->gate_up, &blk->down};
        const int64_t in_f[LINEARS_PER_BLOCK] = {D, D, D, F};
        const int64_t out_f[LINEARS_PER_BLOCK] = {3 * D, D, 2 * F, D};
        float **norms[2] = {&blk->attn_norm, &blk->mlp_norm};
        float **dnorms[2] = {&blk->d_attn_norm, &blk->d_mlp_norm};
        /* tensor order per layer: attn_norm, qkv, out, mlp_norm, gate_up, down (or the MoE's) */
        const int order[6] = {-1, 0, 1, -2, 2, 3}, moe = model_config_moe_layer(config, l);
        for (int k = 0; k < 6; ++k, ++t) {
            if (moe && k == 4) {
                st = model_moe_init(m, l, &t);
                if (st != BFP8_OK) {
                    model_destroy(m);
                    return st;
                }
                break;
            }
            float *w = m->params + m->tensors[t].offset, *g = m->grads + m->tensors[t].offset;
            if (order[k] < 0) {
                *norms[-order[k] - 1] = w;
                *dnorms[-order[k] - 1] = g;
                continue;
            }
            const int i = order[k];
            void *saved = lins[i]->saved_input;
            uint32_t *flags = m->nonfinite_flags + ((size_t)l * LINEARS_PER_BLOCK + (size_t)i) *
                                                       BFP8_LINEAR_NUM_FLAGS;
            st = model_linear_init(lins[i], ctx, &m->oc, linear_names[i], l, in_f[i], out_f[i], M, options->recipe,
                                   options->exact_linears, w, g, flags, saved);
            if (st != BFP8_OK) {
                model_destroy(m);
                return st;
            }
        }
    }
    m->final_norm = m->params + m->tensors[t].offset;
    m->d_final_norm = m->grads + m->tensors[t++].offset;
    m->head = m->params + m->tensors[t].offset;
    m->d_head = m->grads + m->tensors[t++].offset;
    *out = m;
    return BFP8_OK;
}

void model_destroy(model *m) {
    if (!m) return;
    if (m->blocks)
        for (int l = 0; l < m->config.n_layers; ++l) {
            model_linear_release(&m->blocks[l].qkv);
            model_linear_release(&m->blocks[l].out);
            model_linear_release(&m->blocks[l].gate_up);
            model_linear_release(&m->blocks[l].down);
            model_moe_release(&m->blocks[l]);
        }
    model_profile_destroy(&m->oc);
    model_ops_ctx_release(&m->oc);
    bfp8_free(m->ctx, m->param_arena);
    bfp8_free(m->ctx, m->act_arena);
    model_activations *act = &m->act;
    free(act->residual);
    free(act->residual_mid);
    free(act->attn_rstd);
    free(act->mlp_rstd);
    free(act->qkv);
    free(act->probs);
    free(act->gate_up);
    free(m->blocks);
    free(m->tensors);
    free(m);
}

bfp8_status model_sync_weights(model *m) {
    for (int l = 0; l < m->config.n_layers; ++l) {
        model_block *blk = &m->blocks[l];
        BFP8_TRY(model_linear_set_weight(&blk->qkv));
        BFP8_TRY(model_linear_set_weight(&blk->out));
        if (blk->moe) {
            BFP8_TRY(model_moe_sync(m, blk->moe));
            continue;
        }
        BFP8_TRY(model_linear_set_weight(&blk->gate_up));
        BFP8_TRY(model_linear_set_weight(&blk->down));
    }
    PROFILE(&m->oc, HEAD_LOSS);
    head_loss_sync_weight(&m->head_layer, m->ops, &m->oc, m->head);
    PROFILE(&m->oc, NONE);
    return model_ops_status(&m->oc);
}

/* ------------------------------------------------------------------------ */
/* Forward and backward */

bfp8_status model_forward(model *m, const int32_t *tokens, const int32_t *targets, int64_t batch,
                          int64_t seq, double *loss) {
    const model_config *c = &m->config;
    const int64_t D = c->dim, V = c->vocab_size, M = batch * seq;
    if (batch < 1 || seq < 1 || batch > m->options.max_batch || seq > m->options.max_seq)
        return bfp8_fail(BFP8_ERR_SHAPE, "model_forward: batch %lld x seq %lld exceeds %lld x %lld",
                         (long long)batch, (long long)seq, (long long)m->options.max_batch,
                         (long long)m->options.max_seq);
    for (int64_t i = 0; i < M; ++i)
        if (tokens[i] < 0 || tokens[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V)))
            return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                             "model_forward: token id out of range [0, %lld) at position %lld",
                             (long long)V, (long long)i);
    model_activations *a = &m->act;
    const model_ops *ops = m->ops;
    model_ops_ctx *oc = &m->oc;
    m->last_batch = batch;
    m->last_seq = seq;
    BFP8_TRY(bfp8_copy_to_backend(m->ctx, a->tokens, tokens, (size_t)M * sizeof *tokens));
    if (targets) BFP8_TRY(bfp8_copy_to_backend(m->ctx, a->targets, targets, (size_t)M * sizeof *targets));

    PROFILE(oc, ELEMENTWISE);
    ops->embedding_forward(oc, a->residual[0], a->tokens, m->tok_emb, M, D);
    for (int l = 0; l < c->n_layers; ++l) BFP8_TRY(model_block_forward(m, l, batch, seq));
    PROFILE(oc, ELEMENTWISE);
    ops->rmsnorm_forward(oc, a->final_out, a->final_rstd, a->residual[c->n_layers], m->final_norm, M, D, c->norm_eps);
    PROFILE(oc, HEAD_LOSS);
    head_loss_forward(&m->head_layer, ops, oc, m->head, a->final_out, targets ? a->targets : NULL, M, loss);
    PROFILE(oc, NONE);
    return model_ops_status(&m->oc);
}

void model_set_grads_ready(model *m, bfp8_status (*fn)(void *user, float *grads, size_t count), void *user) {
    m->grads_ready = fn;
    m->grads_ready_user = user;
}

/* grads_ready for the gradients of params [lo, hi), if set. */
static bfp8_status grads_ready(model *m, const float *lo, const float *hi) {
    if (!m->grads_ready || hi <= lo) return BFP8_OK;
    return m->grads_ready(m->grads_ready_user, m->grads + (lo - m->params), (size_t)(hi - lo));
}

bfp8_status model_backward(model *m, const int32_t *tokens, const int32_t *targets,
                           float loss_scale, int accumulate) {
    const model_config *c = &m->config;
    const int64_t D = c->dim, M = m->last_batch * m->last_seq;
    if (M == 0) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model_backward: no forward before it");
    model_activations *a = &m->act;
    const model_ops *ops = m->ops;
    model_ops_ctx *oc = &m->oc;
    /* (the forward keeps its ids in backend memory; these are the same ids) */
    BFP8_TRY(bfp8_copy_to_backend(m->ctx, a->tokens, tokens, (size_t)M * sizeof *tokens));
    BFP8_TRY(bfp8_copy_to_backend(m->ctx, a->targets, targets, (size_t)M * sizeof *targets));
    PROFILE(oc, ELEMENTWISE);
    if (!accumulate) model_zero_added_gradients(m);

    PROFILE(oc, HEAD_LOSS);
    BFP8_TRY(head_loss_backward(&m->head_layer, ops, oc, a->grad_a, m->d_head, m->head, a->final_out, a->targets,
                                loss_scale));
    float *dres = a->grad_residual;
    PROFILE(oc, ELEMENTWISE);
    ops->zero_f32(oc, dres, M * D);
    ops->rmsnorm_backward(oc, dres, m->d_final_norm, a->grad_a, a->residual[c->n_layers], m->final_norm, a->final_rstd,
                          M, D);
    const int L = c->n_layers;
    BFP8_TRY(grads_ready(m, m->final_norm, m->params + m->num_params)); /* the final norm and the head */
    for (int l = L - 1; l >= 0; --l) {
        BFP8_TRY(model_block_backward(m, l, dres, accumulate));
        BFP8_TRY(grads_ready(m, m->blocks[l].attn_norm, l + 1 < L ? m->blocks[l + 1].attn_norm : m->final_norm));
    }
    PROFILE(oc, ELEMENTWISE);
    ops->embedding_backward(oc, m->d_tok_emb, dres, a->tokens, M, D);
    PROFILE(oc, NONE);
    BFP8_TRY(grads_ready(m, m->params, L > 0 ? m->blocks[0].attn_norm : m->final_norm));
    m->last_batch = m->last_seq = 0; /* the logits are gone */
    return model_ops_status(&m->oc);
}

bfp8_status model_logits_row(const model *m, int64_t row, float *host_dst) {
    if (row < 0 || row >= m->last_batch * m->last_seq)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "model_logits_row: row %lld of %lld", (long long)row,
                         (long long)(m->last_batch * m->last_seq));
    return head_loss_logits_row(&m->head_layer, m->ctx, row, host_dst);
}
