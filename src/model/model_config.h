/*
 * model_config.h - the shape of a Llama-style decoder and the named presets
 * (tiny ... 1b) that the trainer's --model option picks from.
 */
#ifndef BFP8_MODEL_CONFIG_H
#define BFP8_MODEL_CONFIG_H

#include <stdint.h>

#include "blockfp8.h"

/* The mixture-of-experts feed-forward (DeepSeek-V3 style, bfp8_moe): from
 * block dense_layers on, each block's SwiGLU MLP is replaced by a router,
 * num_experts routed SwiGLU experts of which each token takes top_k, and an
 * optional shared expert every token takes. num_experts 0: a dense model (all
 * the other fields 0 too). */
typedef struct model_moe_config {
    int32_t num_experts;     /* routed experts per MoE block, 0: none */
    int32_t dense_layers;    /* the first blocks keep the dense MLP (ffn_hidden) */
    int32_t top_k;           /* experts per token */
    int32_t expert_hidden;   /* a routed expert's SwiGLU width, a multiple of 128 */
    int32_t shared_hidden;   /* the shared expert's width, a multiple of 128; 0: none */
    int32_t score_fn;        /* bfp8_moe_score_fn */
    int32_t normalize_weights; /* 0 or 1: the top-k weights divided by their scores' sum */
    float route_scale;       /* multiplies the top-k weights */
    float capacity_factor;   /* 0: no token is dropped; else bfp8_moe_config's */
    float bias_update_rate;  /* auxiliary-loss-free balancing: each optimizer step moves a per-expert
                              * selection bias by this towards the mean load; 0: no balancing, no bias */
} model_moe_config;

typedef struct model_config {
    int32_t vocab_size;
    int32_t dim;        /* residual stream width */
    int32_t n_layers;
    int32_t n_heads;    /* head_dim = dim / n_heads */
    int32_t ffn_hidden; /* SwiGLU hidden width */
    int32_t max_seq;    /* longest sequence (RoPE table) */
    float norm_eps;
    float rope_theta;
    model_moe_config moe;
} model_config;

typedef struct model_preset {
    const char *name;
    const char *summary;
    model_config config;
} model_preset;

/* NULL when no preset has that name. */
const model_preset *model_preset_find(const char *name);
/* The presets, smallest first; *count receives how many. */
const model_preset *model_presets(int *count);

/* BFP8_ERR_INVALID_VALUE with a message when a field is out of range. */
bfp8_status model_config_validate(const model_config *config);

/* Number of parameters (untied embedding and head; the MoE blocks' selection
 * biases included, which balancing sets and no optimizer trains). */
int64_t model_config_num_params(const model_config *config);
/* Parameters one token runs through: the routed experts it takes, not the others. */
int64_t model_config_active_params(const model_config *config);

/* 1 when block `layer` has the MoE feed-forward. */
int model_config_moe_layer(const model_config *config, int layer);

#endif /* BFP8_MODEL_CONFIG_H */
