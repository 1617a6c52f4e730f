/*
 * model.h - a Llama-style decoder, on the CPU or a CUDA device (the backend of
 * its context: model_ops.h): token embedding, n_layers x
 * [RMSNorm, qkv linear, RoPE, causal attention, out linear, residual,
 *  RMSNorm, gate|up linear, SwiGLU, down linear, residual],
 * final RMSNorm and an untied output head.
 *
 * The four linear layers of each block run through bfp8_linear with the
 * chosen recipe; embedding, norms and attention stay fp32; the output head
 * and the loss are one layer (head_loss.h), fp32 or, CUDA's default, with
 * bf16 products.
 * From block config.moe.dense_layers on, an MoE model's blocks replace the
 * MLP by a mixture of experts (model_moe.h).
 * Parameters, gradients and AdamW moments live in one arena allocated at
 * creation, activations in a second one sized for max_batch x max_seq:
 * forward and backward allocate nothing. Both arenas are the context's
 * backend memory (device memory for CUDA): read and write them through
 * model_copy_state / model_load_state and bfp8_copy_to_host, not directly.
 */
#ifndef BFP8_MODEL_MODEL_H
#define BFP8_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "blockfp8.h"
#include "model/head_loss.h"
#include "model/model_config.h"
#include "model/model_linear.h"
#include "model/model_ops.h"
#include "model/model_profile.h"

/* The output head's products (head_loss.h). */
typedef enum model_head_products {
    MODEL_HEAD_AUTO = 0, /* bf16 on CUDA, fp32 on the CPU and with exact_linears */
    MODEL_HEAD_F32 = 1,  /* fp32 (TF32 with tf32) */
    MODEL_HEAD_BF16 = 2  /* bf16 operands, fp32 sums (on the CPU: the reference of the CUDA form) */
} model_head_products;

typedef struct model_options {
    bfp8_recipe recipe;
    int64_t max_batch; /* sequences per forward */
    int64_t max_seq;   /* tokens per sequence, <= config.max_seq */
    int exact_linears; /* 1: fp32 linear layers, no bfp8_linear (gradient checks) */
    int tf32;          /* CUDA: the fp32 products (attention, head) in TF32 (model_ops_ctx.tf32) */
    int flash_attention; /* CUDA, head_dim 64 or 128: attention without stored probabilities, bf16
                          * products (model_ops_ctx.flash_attention) */
    int profile;         /* time by kind of work, per step (model_profile.h); off: no cost */
    int no_adamw_state;  /* 1: the arena holds no AdamW moments (adam_m, adam_v NULL): the caller keeps them,
                          * e.g. a ZeRO-1 shard; model_adamw_step and the moments of model_copy_state and
                          * model_load_state are then refused */
    model_head_products head_products;
} model_options;

/* One parameter tensor: where it sits in the arena and whether AdamW decays it. */
typedef struct model_tensor {
    char name[40];
    size_t offset, count;
    int64_t rows, cols;
    int weight_decay;
    int frozen; /* no optimizer step: an MoE block's selection bias, which balancing moves */
} model_tensor;

typedef struct model_block {
    float *attn_norm, *mlp_norm;   /* dim */
    float *d_attn_norm, *d_mlp_norm;
    model_linear qkv, out, gate_up, down; /* gate_up, down: the dense MLP */
    struct model_moe_block *moe;          /* the MoE feed-forward instead (model_moe.h), or NULL */
} model_block;

typedef struct model_activations {
    float **residual;      /* n_layers + 1 of tokens x dim: the input of each block, then the last output */
    float **residual_mid;  /* n_layers: after attention */
    float **attn_rstd, **mlp_rstd; /* n_layers of tokens */
    float **qkv;           /* n_layers of tokens x 3 dim (q, k after RoPE; flash attention: before it, one
                            * buffer for all layers, bf16 unless the linears are exact) */
    float **probs;         /* n_layers of batch x heads x seq x seq (flash attention:
                            * flash_attention_saved_floats, model_ops.h) */
    float **gate_up;       /* n_layers of tokens x 2 ffn (bf16 as the linear layer wrote it, unless exact) */
    float *final_rstd;     /* tokens */
    float *final_out;      /* tokens x dim */
    float *work_in;        /* fp32 staging (plan_activations in model.c says how wide; NULL when unused) */
    float *grad_a, *grad_b;/* the same */
    float *grad_residual;  /* tokens x dim */
    float *attn_scratch;   /* attention_scratch_floats() */
    int32_t *tokens, *targets; /* tokens: the last forward's ids, in backend memory */
} model_activations;

typedef struct model {
    model_config config;
    model_options options;
    bfp8_context *ctx;
    const model_ops *ops; /* the context's backend */
    model_ops_ctx oc;     /* what the ops run with: stream, handles, options, kept failure, profile */

    size_t num_params;
    float *params, *grads, *adam_m, *adam_v; /* each num_params, one arena */
    void *param_arena;
    model_tensor *tensors;
    int num_tensors;

    float *tok_emb, *final_norm, *head;
    float *d_tok_emb, *d_final_norm, *d_head;
    model_block *blocks;

    uint32_t *nonfinite_flags; /* 4 linears x n_layers x BFP8_LINEAR_NUM_FLAGS */
    float *rope_cos, *rope_sin;
    void *act_arena;
    model_activations act;
    model_linear_scratch linear_scratch;
    head_loss head_layer; /* the head's bf16 copy, logits, dlogits, row losses: in the activation arena */
    int64_t last_batch, last_seq; /* shape of the last forward */
    /* when set, model_backward reports each part of the gradients as it becomes final (model_set_grads_ready) */
    bfp8_status (*grads_ready)(void *user, float *grads, size_t count);
    void *grads_ready_user;
} model;

/* From the next model_backward on (fn NULL: no more): fn(user, grads, count) as each part of m->grads is final,
 * in contiguous runs enqueued on the context's stream before the call: the final norm and the head first, then
 * each block's tensors from the last block to the first, then the embedding. For a data-parallel reduction
 * that overlaps the rest of the backward (set it for the last micro-batch of a step only). */
void model_set_grads_ready(model *m, bfp8_status (*fn)(void *user, float *grads, size_t count), void *user);

bfp8_status model_create(model **out, bfp8_context *ctx, const model_config *config,
                         const model_options *options);
void model_destroy(model *m); /* NULL is fine */

/* Bytes of the two arenas (for the start-up banner). */
size_t model_param_arena_bytes(const model *m);
size_t model_activation_arena_bytes(const model *m);

/* Random initialisation from seed (normal 0.02, residual projections scaled
 * by 1/sqrt(2 n_layers), norms 1), then the linear layers take the weights. */
bfp8_status model_init_weights(model *m, uint64_t seed);

/* After any change of the fp32 parameters: every linear layer re-quantizes
 * (or re-rounds) its weight, and the head makes its bf16 copy. */
bfp8_status model_sync_weights(model *m);

/* tokens, targets: batch x seq token ids. With targets, *loss is the mean
 * cross-entropy; targets may be NULL (generation: logits only). */
bfp8_status model_forward(model *m, const int32_t *tokens, const int32_t *targets, int64_t batch,
                          int64_t seq, double *loss);

/* Backward of the last forward (which had targets). grads = (accumulate ?
 * grads : 0) + loss_scale * d(mean loss)/d(params). */
bfp8_status model_backward(model *m, const int32_t *tokens, const int32_t *targets,
                           float loss_scale, int accumulate);

/* Row `row` of the last forward's logits (vocab_size floats) into host
 * memory, before the backward. The fp32 head keeps every row; the bf16 head
 * the last chunk's (head_loss.h): after a forward without targets its last
 * head_layer.chunk_tokens rows, the last row always (what sampling reads);
 * BFP8_ERR_INVALID_VALUE for another one. */
bfp8_status model_logits_row(const model *m, int64_t row, float *host_dst);

/* The fp32 parameters and AdamW moments, each num_params floats, between the
 * model's arena and host memory (any of the three pointers may be NULL: not
 * copied). model_load_state then re-syncs the linear layers' weights. */
bfp8_status model_copy_state(const model *m, float *params, float *adam_m, float *adam_v);
bfp8_status model_load_state(model *m, const float *params, const float *adam_m, const float *adam_v);
/* Set one parameter (index into the arena): test hooks. */
bfp8_status model_set_param(model *m, size_t index, float value);

/* One AdamW step over every parameter tensor but the frozen ones (decay per
 * tensor), gradients scaled by grad_scale first; the MoE blocks' balancing
 * step (model_moe_balance_step); then the layers take the new weights. */
bfp8_status model_adamw_step(model *m, const adamw_hparams *h, float grad_scale, int64_t step);
/* The global L2 norm of the gradients. */
bfp8_status model_gradient_norm(model *m, double *norm);

/* The non-finite flags of every linear layer: BFP8_ERR_NONFINITE with a
 * message naming the first layer and tensor that held a NaN or Inf. */
bfp8_status model_check_nonfinite(model *m);
void model_clear_nonfinite(model *m);

#endif /* BFP8_MODEL_MODEL_H */
