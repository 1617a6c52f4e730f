/*
 * head_loss.c - the output head and the loss (head_loss.h): the chunk loop
 * of the bf16 form and the fp32 form, on the ops of either backend.
 */
#include "model/head_loss.h"

#include "internal.h"

enum { BUFFER_ALIGN = 64 };
#define CHUNK_LOGITS 67108864 /* 2^26 fp32 logits (256 MiB): the default chunk's size */

void head_loss_init(head_loss *h, int64_t dim, int64_t vocab, int64_t max_tokens, int bf16, int64_t chunk_tokens) {
    *h = (head_loss){.dim = dim, .vocab = vocab, .max_tokens = max_tokens, .bf16 = bf16 != 0};
    int64_t chunk = chunk_tokens > 0 ? chunk_tokens : CHUNK_LOGITS / vocab;
    if (!h->bf16 || chunk > max_tokens) chunk = max_tokens;
    h->chunk_tokens = chunk < 1 ? 1 : chunk;
}

/* The layer's buffers in order; with base NULL only the size is walked. */
static size_t layout(head_loss *h, char *base) {
    const int64_t D = h->dim, V = h->vocab, M = h->max_tokens;
    const size_t sizes[6] = {
        h->bf16 ? (size_t)(V * D) * sizeof(uint16_t) : 0,
        h->bf16 ? 0 : (size_t)(D * V) * sizeof(float),
        h->bf16 ? (size_t)(M * D) * sizeof(uint16_t) : 0,
        (size_t)(h->chunk_tokens * V) * sizeof(float),
        h->bf16 ? (size_t)(M * V) * sizeof(uint16_t) : 0,
        (size_t)M * sizeof(float),
    };
    void *ptrs[6];
    size_t used = 0;
    for (int i = 0; i < 6; ++i) {
        ptrs[i] = base && sizes[i] ? base + used : NULL;
        used += (sizes[i] + BUFFER_ALIGN - 1) / BUFFER_ALIGN * BUFFER_ALIGN;
    }
    if (base) {
        h->weight_bf16 = ptrs[0];
        h->weight_t = ptrs[1];
        h->x_bf16 = ptrs[2];
        h->logits = ptrs[3];
        h->dlogits_bf16 = ptrs[4];
        h->row_losses = ptrs[5];
    }
    return used;
}

size_t head_loss_buffer_bytes(const head_loss *h) {
    head_loss copy = *h; /* layout writes only through a non-NULL base */
    return layout(&copy, NULL);
}

void head_loss_carve(head_loss *h, void *buffer) {
    layout(h, buffer);
    h->tokens = h->logits_first_row = 0;
    h->has_dlogits = 0;
}

void head_loss_sync_weight(head_loss *h, const model_ops *ops, model_ops_ctx *oc, const float *weight) {
    if (h->bf16) ops->f32_to_bf16(oc, h->weight_bf16, weight, h->vocab * h->dim);
}

void head_loss_forward(head_loss *h, const model_ops *ops, model_ops_ctx *oc, const float *weight, const float *x,
                       const int32_t *targets, int64_t tokens, double *loss) {
    const int64_t D = h->dim, V = h->vocab;
    h->tokens = tokens;
    h->has_dlogits = 0;
    if (!h->bf16) {
        ops->transpose_f32(oc, h->weight_t, weight, V, D);
        ops->matmul_f32(oc, h->logits, V, x, D, 0, h->weight_t, V, tokens, V, D, 0);
        h->logits_first_row = 0;
        if (targets) ops->cross_entropy_rows(oc, h->row_losses, NULL, BFP8_F32, h->logits, targets, tokens, V, 0.0f);
    } else if (!targets) { /* generation: the last chunk's rows only */
        const int64_t first = tokens > h->chunk_tokens ? tokens - h->chunk_tokens : 0;
        ops->f32_to_bf16(oc, h->x_bf16 + first * D, x + first * D, (tokens - first) * D);
        ops->matmul_bf16(oc, h->logits, V, h->x_bf16 + first * D, D, 0, h->weight_bf16, D, 1, tokens - first, V, D,
                         1.0f, 0);
        h->logits_first_row = first;
    } else {
        ops->f32_to_bf16(oc, h->x_bf16, x, tokens * D);
        for (int64_t first = 0; first < tokens; first += h->chunk_tokens) {
            const int64_t rows = tokens - first < h->chunk_tokens ? tokens - first : h->chunk_tokens;
            ops->matmul_bf16(oc, h->logits, V, h->x_bf16 + first * D, D, 0, h->weight_bf16, D, 1, rows, V, D, 1.0f,
                             0);
            ops->cross_entropy_rows(oc, h->row_losses + first, h->dlogits_bf16 + first * V, BFP8_BF16, h->logits,
                                    targets + first, rows, V, 1.0f / (float)tokens);
            h->logits_first_row = first;
        }
        h->has_dlogits = 1;
    }
    if (targets && loss) *loss = ops->loss_mean(oc, h->row_losses, tokens);
}

bfp8_status head_loss_backward(head_loss *h, const model_ops *ops, model_ops_ctx *oc, float *dx, float *dweight,
                               const float *weight, const float *x, const int32_t *targets, float loss_scale) {
    const int64_t D = h->dim, V = h->vocab, M = h->tokens;
    if (M <= 0) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "head_loss_backward: no forward before it");
    if (!h->bf16) {
        float *dlogits = h->logits; /* in place: the logits are gone after it */
        ops->cross_entropy_rows(oc, h->row_losses, dlogits, BFP8_F32, h->logits, targets, M, V, loss_scale / (float)M);
        ops->matmul_f32(oc, dweight, D, dlogits, V, 1, x, D, V, D, M, 1);
        ops->matmul_f32(oc, dx, D, dlogits, V, 0, weight, D, M, D, V, 0);
        h->logits_first_row = M;
        return BFP8_OK;
    }
    if (!h->has_dlogits) head_loss_forward(h, ops, oc, weight, x, targets, M, NULL);
    ops->matmul_bf16(oc, dweight, D, h->dlogits_bf16, V, 1, h->x_bf16, D, 0, V, D, M, loss_scale, 1);
    ops->matmul_bf16(oc, dx, D, h->dlogits_bf16, V, 0, h->weight_bf16, D, 0, M, D, V, loss_scale, 0);
    return BFP8_OK;
}

bfp8_status head_loss_logits_row(const head_loss *h, bfp8_context *ctx, int64_t row, float *host_dst) {
    if (row < h->logits_first_row || row >= h->tokens)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "logits row %lld: the last forward's logits are held for rows [%lld, %lld) only",
                         (long long)row, (long long)h->logits_first_row, (long long)h->tokens);
    const int64_t V = h->vocab;
    return bfp8_copy_to_host(ctx, host_dst, h->logits + (row - h->logits_first_row) * V,
                             (size_t)V * sizeof *host_dst);
}
