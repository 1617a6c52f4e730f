/*
 * checkpoint.h - training checkpoints: everything needed to resume a run
 * bit for bit (model shape, fp32 weights, AdamW moments, step, the data
 * sampler's state), written atomically.
 *
 * File (little-endian): a 180-byte header
 *   "BFP8CKPT", u32 version, u32 header bytes, model config (6 x u32,
 *   2 x f32), u32 recipe, u32 tokenizer fingerprint, u64 step, u64 seed,
 *   u64 sampler state, u64 windows drawn, u64 parameter count, u64 total
 *   steps, u32 batch, u32 seq, u32 grad accum, char model name[16],
 *   u32 data-parallel ranks, the MoE config (7 x u32: experts, dense layers,
 *   top-k, expert width, shared width, score function, normalize; 3 x f32:
 *   route scale, capacity factor, bias update rate; all 0 for a dense model),
 *   u32 CRC-32 of the header (version 3; version 2 had no MoE config and a
 *   140-byte header, version 1 no ranks either and 136 bytes: both still load,
 *   as dense models, version 1 as one rank)
 * then params, AdamW m, AdamW v (3 x count fp32) and a u32 CRC-32 of them.
 * The params include the MoE blocks' selection biases (model_moe.h).
 */
#ifndef BFP8_TRAIN_CHECKPOINT_H
#define BFP8_TRAIN_CHECKPOINT_H

#include <stdint.h>

#include "blockfp8.h"
#include "model/model.h"

typedef struct checkpoint_info {
    model_config config;
    bfp8_recipe recipe;
    uint32_t tokenizer_fingerprint;
    uint64_t step; /* optimizer steps completed */
    uint64_t seed;
    uint64_t sampler_state, windows_drawn;
    uint64_t num_params;
    uint64_t total_steps;
    uint32_t batch, seq, grad_accum; /* batch: sequences per rank and micro-batch */
    char model_name[16];
    uint32_t ranks; /* data-parallel ranks (the global batch is batch x ranks) */
} checkpoint_info;

/* Write m's parameters and optimizer state under path (atomically). */
bfp8_status checkpoint_save(const char *path, const checkpoint_info *info, const model *m);

/* Where the AdamW moments come from and go to when the model keeps none of
 * its own (ZeRO-1: each rank holds a shard; zero_optimizer.h). */
typedef struct checkpoint_moments {
    /* save: host (num_params floats) := moment `which` (1: AdamW m, 2: v) */
    bfp8_status (*gather)(void *user, int which, float *host);
    /* load: take the verified moments (host memory, num_params floats each) */
    bfp8_status (*scatter)(void *user, const float *adam_m, const float *adam_v);
    void *user;
} checkpoint_moments;

/* checkpoint_save and checkpoint_load with the moments of `moments`
 * (NULL: the model's own); the file is the same. */
bfp8_status checkpoint_save_with(const char *path, const checkpoint_info *info, const model *m,
                                 const checkpoint_moments *moments);

/* Read and verify the header only. */
bfp8_status checkpoint_read_info(const char *path, checkpoint_info *info);

/* Read the whole checkpoint into m, whose shape must match; verifies both
 * checksums before touching m's arena. */
bfp8_status checkpoint_load(const char *path, checkpoint_info *info, model *m);
bfp8_status checkpoint_load_with(const char *path, checkpoint_info *info, model *m,
                                 const checkpoint_moments *moments);

#endif /* BFP8_TRAIN_CHECKPOINT_H */
