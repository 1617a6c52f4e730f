/*
 * head_loss.h - the decoder's output head and loss as one layer: logits =
 * x head^T over the vocabulary (x: the final RMSNorm's output, tokens x
 * dim; head: vocab x dim), the mean cross-entropy of the targets, and in the
 * backward dx = dlogits head and d_head += dlogits^T x. The same code runs on
 * both backends through the ops table (model_ops.h), in one of two
 * precisions:
 *
 *   fp32 (the CPU reference; CUDA's exact path): fp32 products (TF32 with
 *     model_ops_ctx.tf32), the head transposed by each forward, the logits
 *     of all tokens kept in fp32 (tokens x vocab) until the backward turns
 *     them into dlogits in place.
 *
 *   bf16 (CUDA training's default): the three products on bf16 operands
 *     with fp32 sums and fp32 results (cuBLAS on the tensor cores, as in
 *     PyTorch's bf16 training): a bf16 copy of the head made when the
 *     weights change (head_loss_sync_weight), x rounded to bf16 by each
 *     forward. With targets the forward runs chunk by chunk (chunk_tokens
 *     rows): the logits product into an fp32 chunk buffer, then one kernel
 *     for the chunk's row losses and dlogits (softmax - onehot, scaled by
 *     1 / tokens, rounded to bf16), kept for all tokens; the backward is two
 *     products over all tokens with alpha = loss_scale. No tokens x vocab
 *     fp32 buffer: at the 1b shape (16384 tokens, vocab 32768, dim 2048)
 *     1 GiB of bf16 dlogits and a 256 MiB chunk instead of 2 GiB of fp32
 *     logits and a 256 MiB transposed head.
 *
 * Why the gradient is made in the forward: the logits exist only there, so
 * keeping dlogits (bf16) costs memory but no product, where recomputing the
 * logits in the backward would keep only chunk buffers but add a fourth
 * head product (2 x tokens x vocab x dim flops: 2.2 TFLOP, some 3 ms at the
 * 1b shape) and a second pass over the logits. Running the two backward
 * products in the forward too would save nothing more, and could not know
 * the backward's loss_scale and accumulate. A forward that no backward
 * follows (validation) pays only the write of the bf16 dlogits.
 *
 * The loss: the row losses stay on the device and their mean is reduced
 * there (loss_mean), the one number read back. Without targets (generation)
 * the bf16 forward makes the logits of its last chunk_tokens rows only
 * (what sampling reads: the last row); the fp32 one makes them all.
 */
#ifndef BFP8_MODEL_HEAD_LOSS_H
#define BFP8_MODEL_HEAD_LOSS_H

#include <stddef.h>
#include <stdint.h>

#include "blockfp8.h"
#include "model/model_ops.h"

typedef struct head_loss {
    int64_t dim, vocab, max_tokens;
    int64_t chunk_tokens; /* rows of one logits product (the fp32 form: max_tokens) */
    int bf16;             /* 1: the bf16 form above */
    /* backend memory, from head_loss_carve */
    uint16_t *weight_bf16;  /* bf16: vocab x dim, bf16(head) from head_loss_sync_weight */
    float *weight_t;        /* fp32: dim x vocab, head^T */
    uint16_t *x_bf16;       /* bf16: max_tokens x dim, bf16(x) of the last forward */
    float *logits;          /* chunk_tokens x vocab (fp32: all tokens; dlogits after a backward) */
    uint16_t *dlogits_bf16; /* bf16: max_tokens x vocab, the last forward's dlogits, scaled by 1 / tokens */
    float *row_losses;      /* max_tokens: each token's loss */
    /* the last forward */
    int64_t tokens;           /* 0: none */
    int64_t logits_first_row; /* logits holds rows [logits_first_row, tokens) of it */
    int has_dlogits;          /* bf16: dlogits_bf16 is the last forward's (it had targets) */
} head_loss;

/* The shape and form; chunk_tokens 0: as many rows as fit 2^26 fp32 logits
 * (256 MiB), at most max_tokens. Allocates nothing. */
void head_loss_init(head_loss *h, int64_t dim, int64_t vocab, int64_t max_tokens, int bf16, int64_t chunk_tokens);
/* Bytes of backend memory the layer's buffers take, and pointing them into
 * `buffer` (that many bytes, 64-byte aligned). */
size_t head_loss_buffer_bytes(const head_loss *h);
void head_loss_carve(head_loss *h, void *buffer);

/* After a change of the head's weight (vocab x dim fp32): the bf16 copy
 * (the fp32 form reads the weight itself). */
void head_loss_sync_weight(head_loss *h, const model_ops *ops, model_ops_ctx *oc, const float *weight);

/* x: tokens x dim (tokens <= max_tokens). With targets (tokens ids, backend
 * memory), *loss (when loss is not NULL) is the mean cross-entropy; targets
 * may be NULL (logits only). Failures are kept in oc (model_ops_status). */
void head_loss_forward(head_loss *h, const model_ops *ops, model_ops_ctx *oc, const float *weight, const float *x,
                       const int32_t *targets, int64_t tokens, double *loss);

/* The backward of the last forward, for the same x and targets:
 * dx = loss_scale * d(mean loss)/dx (tokens x dim, overwritten) and
 * dweight += loss_scale * d(mean loss)/d(head). A forward without targets
 * before it is completed first. */
bfp8_status head_loss_backward(head_loss *h, const model_ops *ops, model_ops_ctx *oc, float *dx, float *dweight,
                               const float *weight, const float *x, const int32_t *targets, float loss_scale);

/* Row `row` of the last forward's logits (vocab floats) into host memory:
 * BFP8_ERR_INVALID_VALUE for a row the layer does not hold. */
bfp8_status head_loss_logits_row(const head_loss *h, bfp8_context *ctx, int64_t row, float *host_dst);

#endif /* BFP8_MODEL_HEAD_LOSS_H */
