/*
 * model_config.h - the shape of a Llama-style decoder and the named presets
 * (tiny ... 1b) that the trainer's --model option picks from.
 */
#ifndef BFP8_MODEL_CONFIG_H
#define BFP8_MODEL_CONFIG_H

#include <stdint.h>

#include "blockfp8.h"

typedef struct model_config {
    int32_t vocab_size;
    int32_t dim;        /* residual stream width */
    int32_t n_layers;
    int32_t n_heads;    /* head_dim = dim / n_heads */
    int32_t ffn_hidden; /* SwiGLU hidden width */
    int32_t max_seq;    /* longest sequence (RoPE table) */
    float norm_eps;
    float rope_theta;
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

/* Number of trainable parameters (untied embedding and head). */
int64_t model_config_num_params(const model_config *config);

#endif /* BFP8_MODEL_CONFIG_H */
