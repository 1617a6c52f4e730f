/*
 * sampler.h - text generation from the model: temperature and top-k
 * sampling, one token at a time, the context cropped to the model's
 * sequence length (the whole window is recomputed per token: no KV cache,
 * which is fine for the short windows of the CPU presets).
 */
#ifndef BFP8_TRAIN_SAMPLER_H
#define BFP8_TRAIN_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "blockfp8.h"
#include "model/model.h"
#include "model/rng.h"
#include "train/tokenizer.h"

typedef struct sample_options {
    int64_t max_new_tokens;
    float temperature; /* 0: greedy */
    int64_t top_k;     /* 0: the whole vocabulary */
} sample_options;

/* Calls emit for each new token. prompt_len >= 1. */
bfp8_status sample_generate(model *m, const int32_t *prompt, size_t prompt_len,
                            const sample_options *o, rng_state *rng,
                            void (*emit)(int32_t token, void *arg), void *arg);

/* An emit for sample_generate: writes the token's bytes (arg: the
 * bpe_tokenizer) to stdout, and flushes. Control bytes other than newline
 * and tab are written as \xNN, so a sample never drives the terminal. */
void sample_print_token(int32_t token, void *arg);

#endif /* BFP8_TRAIN_SAMPLER_H */
