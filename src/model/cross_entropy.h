/*
 * cross_entropy.h - softmax cross-entropy over the vocabulary from fp32
 * logits: each row's loss and, in the same pass, its gradient (fp32, in
 * place allowed, or bf16), and the mean of the row losses.
 */
#ifndef BFP8_MODEL_CROSS_ENTROPY_H
#define BFP8_MODEL_CROSS_ENTROPY_H

#include <stdint.h>

#include "blockfp8.h"
#include "model/model_ops_ctx.h"

/* For each of the tokens rows of logits (tokens x vocab, dense):
 *   row_losses[t] = log sum exp(logits[t]) - logits[t][targets[t]],
 * and when dlogits is not NULL
 *   dlogits[t] = scale * (softmax(logits[t]) - onehot(targets[t]))
 * as dlogits_dtype: BFP8_F32 (dlogits may be logits itself) or BFP8_BF16
 * (the fp32 value rounded to nearest even). The log-sum-exp is fp32 with the
 * row's max shifted out; a NaN or +Inf in a row makes its loss NaN. For the
 * mean loss, scale = 1 / tokens. */
void cross_entropy_rows(model_ops_ctx *oc, float *row_losses, void *dlogits, bfp8_dtype dlogits_dtype,
                        const float *logits, const int32_t *targets, int64_t tokens, int64_t vocab, float scale);

/* The mean of the n row losses, summed in double (the CPU in token order,
 * CUDA in a fixed order of its own); NaN for n = 0. CUDA waits for it: the
 * one number a training step reads back. */
double loss_mean(model_ops_ctx *oc, const float *row_losses, int64_t n);

#endif /* BFP8_MODEL_CROSS_ENTROPY_H */
