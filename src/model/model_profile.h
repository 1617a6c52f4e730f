/*
 * model_profile.h - where a training step's time goes, by kind of work.
 *
 * With the profile on (model_options.profile, or model_profile_start), the
 * model marks the start of each class of work in its forward, backward and
 * optimizer step: from one mark to the next, the time belongs to the class
 * of the first; MODEL_PROFILE_NONE marks time that belongs to no class (the
 * trainer's own work between the model's calls). On CUDA a mark is a
 * cudaEvent recorded on the model's stream, so the times are the device's
 * and nothing waits on the host until the marks are read (when
 * MODEL_PROFILE_MARKS are pending, the older half, long done; all of them
 * by model_profile_totals); on the CPU a mark reads the wall clock. Off (oc->profile NULL), a mark is one pointer test.
 *
 * The classes: "linear": bfp8_linear (its FP8 or bf16 GEMMs and quantizers,
 * the weights' re-quantization after a step); "attention"; "norms and
 * elementwise": RMSNorm, RoPE, SwiGLU, the embedding, residual adds, fp32 /
 * bf16 conversions, zeroing the gradients; "head + loss": the output head's
 * fp32 products and transpose, the cross-entropy; "optimizer": AdamW and the
 * gradient norm; "communication": what the trainer marks around its
 * gradient all-reduce (0 without data parallelism); "mixture of experts":
 * the MoE feed-forward blocks (bfp8_moe forward and backward: router,
 * permutation, grouped GEMMs, SwiGLU, combine; its weights' re-quantization
 * after a step; 0 for dense models).
 */
#ifndef BFP8_MODEL_MODEL_PROFILE_H
#define BFP8_MODEL_MODEL_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#include "blockfp8.h"
#include "model/model_ops_ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum model_profile_class {
    MODEL_PROFILE_LINEAR,
    MODEL_PROFILE_ATTENTION,
    MODEL_PROFILE_ELEMENTWISE,
    MODEL_PROFILE_HEAD_LOSS,
    MODEL_PROFILE_OPTIMIZER,
    MODEL_PROFILE_COMMUNICATION,
    MODEL_PROFILE_MOE,
    MODEL_PROFILE_NUM_CLASSES,
    MODEL_PROFILE_NONE = MODEL_PROFILE_NUM_CLASSES
} model_profile_class;

enum { MODEL_PROFILE_MARKS = 1024 }; /* marks kept before they are read */

const char *model_profile_class_name(model_profile_class c);

/* The profile of an ops context: made by model_profile_create, freed by
 * model_profile_destroy (which leaves oc->profile NULL). */
bfp8_status model_profile_create(model_ops_ctx *oc);
void model_profile_destroy(model_ops_ctx *oc);

void model_profile_mark_on(model_ops_ctx *oc, model_profile_class c);
/* From now on the time belongs to class c (MODEL_PROFILE_NONE: to none). */
static inline void model_profile_mark(model_ops_ctx *oc, model_profile_class c) {
    if (oc->profile) model_profile_mark_on(oc, c);
}
/* 1: marks are ignored until resumed with 0 (the trainer's validation
 * forwards, which are no training step's work). Ends a running segment. */
void model_profile_pause(model_ops_ctx *oc, int paused);
/* One more step for the per-step figures (model_adamw_step calls it). */
void model_profile_count_step(model_ops_ctx *oc);

/* Milliseconds per class since the start, and the steps counted; waits for
 * the marks made so far (the device's stream on CUDA). */
bfp8_status model_profile_totals(model_ops_ctx *oc, double ms[MODEL_PROFILE_NUM_CLASSES], int64_t *steps);
/* Zero the totals and the step count (a segment running is counted from now on). */
void model_profile_reset(model_ops_ctx *oc);
/* The table: class, ms per step, share of the classes' sum; and the total. */
bfp8_status model_profile_print(model_ops_ctx *oc, FILE *out);

/* --- on CUDA (src/model/cuda/model_cuda_common.cu) ------------------------- */
/* Record *event (made on first use) on oc's stream; 0 after a failure (kept in oc). */
int model_cuda_event_record(model_ops_ctx *oc, void **event);
/* Milliseconds from start to end, once end has happened (waits for it); 0 after a failure (kept in oc). */
int model_cuda_event_elapsed(model_ops_ctx *oc, void *start, void *end, float *ms);
void model_cuda_event_destroy(void *event);

#ifdef __cplusplus
}
#endif

#endif /* BFP8_MODEL_MODEL_PROFILE_H */
