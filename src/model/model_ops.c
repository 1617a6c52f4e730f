/*
 * model_ops.c - the table of CPU references (model_ops.h), the small
 * helpers only the table needs (copies, bf16 conversions), the choice of
 * table by a context's backend, and the ops context (model_ops_ctx.h).
 */
#include "model/model_ops.h"
#include "model/parallel.h"

#include <stdio.h>
#include <string.h>

#include "formats/formats.h"
#include "internal.h"
#include "model/attention.h"
#include "model/cross_entropy.h"
#include "model/embedding.h"
#include "model/matmul.h"
#include "model/matmul_bf16.h"
#include "model/rmsnorm.h"
#include "model/rope.h"
#include "model/swiglu.h"

static void copy_f32_cpu(model_ops_ctx *oc, float *dst, const float *src, int64_t n) {
    (void)oc;
    if (n > 0) memcpy(dst, src, (size_t)n * sizeof *dst);
}

static void zero_f32_cpu(model_ops_ctx *oc, float *dst, int64_t n) {
    (void)oc;
    if (n > 0) memset(dst, 0, (size_t)n * sizeof *dst);
}

static void add_f32_cpu(model_ops_ctx *oc, float *dst, const float *src, int64_t n) {
    (void)oc;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_WORK)
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

static void f32_to_bf16_cpu(model_ops_ctx *oc, uint16_t *dst, const float *src, int64_t n) {
    (void)oc;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_WORK)
    for (int64_t i = 0; i < n; ++i) dst[i] = bfp8_encode_bf16(src[i]);
}

static void bf16_to_f32_cpu(model_ops_ctx *oc, float *dst, const uint16_t *src, int64_t n, int add) {
    (void)oc;
    if (add) {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_WORK)
        for (int64_t i = 0; i < n; ++i) dst[i] += bfp8_decode_bf16(src[i]);
    } else {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_WORK)
        for (int64_t i = 0; i < n; ++i) dst[i] = bfp8_decode_bf16(src[i]);
    }
}

static void add_bf16_f32_cpu(model_ops_ctx *oc, float *dst, const float *a, const uint16_t *b, int64_t n) {
    (void)oc;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_WORK)
    for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + bfp8_decode_bf16(b[i]);
}

const model_ops model_ops_cpu = {
    .name = "cpu",
    .embedding_forward = embedding_forward,
    .embedding_backward = embedding_backward,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_forward_bf16 = rmsnorm_forward_bf16,
    .rmsnorm_backward = rmsnorm_backward,
    .rmsnorm_backward_bf16 = rmsnorm_backward_bf16,
    .rope_forward = rope_forward,
    .rope_backward = rope_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .rope_attention_forward = rope_attention_forward,
    .rope_attention_backward = rope_attention_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .swiglu_forward_bf16 = swiglu_forward_bf16,
    .swiglu_backward_bf16 = swiglu_backward_bf16,
    .cross_entropy_rows = cross_entropy_rows,
    .loss_mean = loss_mean,
    .matmul_f32 = matmul_f32,
    .matmul_bf16 = matmul_bf16,
    .transpose_f32 = transpose_f32,
    .adamw_update = adamw_update,
    .gradient_global_norm = gradient_global_norm,
    .copy_f32 = copy_f32_cpu,
    .zero_f32 = zero_f32_cpu,
    .add_f32 = add_f32_cpu,
    .f32_to_bf16 = f32_to_bf16_cpu,
    .bf16_to_f32 = bf16_to_f32_cpu,
    .add_bf16_f32 = add_bf16_f32_cpu,
};

#if defined(BFP8_WITH_CUDA)
static const model_ops model_ops_cuda_table = {
    .name = "cuda",
    .embedding_forward = embedding_forward_cuda,
    .embedding_backward = embedding_backward_cuda,
    .rmsnorm_forward = rmsnorm_forward_cuda,
    .rmsnorm_forward_bf16 = rmsnorm_forward_bf16_cuda,
    .rmsnorm_backward = rmsnorm_backward_cuda,
    .rmsnorm_backward_bf16 = rmsnorm_backward_bf16_cuda,
    .rope_forward = rope_forward_cuda,
    .rope_backward = rope_backward_cuda,
    .attention_forward = attention_forward_cuda,
    .attention_backward = attention_backward_cuda,
    .rope_attention_forward = rope_attention_forward_cuda,
    .rope_attention_backward = rope_attention_backward_cuda,
    .swiglu_forward = swiglu_forward_cuda,
    .swiglu_backward = swiglu_backward_cuda,
    .swiglu_forward_bf16 = swiglu_forward_bf16_cuda,
    .swiglu_backward_bf16 = swiglu_backward_bf16_cuda,
    .cross_entropy_rows = cross_entropy_rows_cuda,
    .loss_mean = loss_mean_cuda,
    .matmul_f32 = matmul_f32_cuda,
    .matmul_bf16 = matmul_bf16_cuda,
    .transpose_f32 = transpose_f32_cuda,
    .adamw_update = adamw_update_cuda,
    .gradient_global_norm = gradient_global_norm_cuda,
    .copy_f32 = copy_f32_cuda,
    .zero_f32 = zero_f32_cuda,
    .add_f32 = add_f32_cuda,
    .f32_to_bf16 = f32_to_bf16_cuda,
    .bf16_to_f32 = bf16_to_f32_cuda,
    .add_bf16_f32 = add_bf16_f32_cuda,
};
#endif

const model_ops *model_ops_for(const bfp8_context *ctx) {
    if (bfp8_context_backend(ctx) == BFP8_BACKEND_CPU) return &model_ops_cpu;
#if defined(BFP8_WITH_CUDA)
    return &model_ops_cuda_table;
#else
    return NULL;
#endif
}

void model_ops_ctx_init(model_ops_ctx *oc, const bfp8_context *ctx, int tf32, int flash_attention) {
    memset(oc, 0, sizeof *oc);
    oc->device = bfp8_context_backend(ctx) != BFP8_BACKEND_CPU;
    oc->stream = oc->device ? ctx->stream : NULL;
    oc->tf32 = tf32 != 0;
    oc->flash_attention = flash_attention != 0;
}

void model_ops_ctx_release(model_ops_ctx *oc) {
    if (!oc) return;
#if defined(BFP8_WITH_CUDA)
    if (oc->cuda) model_cuda_release(oc);
#endif
    oc->cuda = NULL;
}

void model_ops_fail(model_ops_ctx *oc, const char *message) {
    if (oc->failed) return;
    oc->failed = 1;
    snprintf(oc->message, sizeof oc->message, "%s", message);
}

bfp8_status model_ops_status(model_ops_ctx *oc) {
#if defined(BFP8_WITH_CUDA)
    if (oc->device) model_cuda_poll(oc);
#endif
    if (!oc->failed) return BFP8_OK;
    oc->failed = 0;
    return bfp8_fail(BFP8_ERR_CUDA, "%s", oc->message);
}
