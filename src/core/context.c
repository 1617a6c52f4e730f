/*
 * context.c - contexts and backend memory. The CPU backend's memory is
 * 64-byte aligned host memory; the CUDA backend's is device memory.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int bfp8_cuda_device_count(void) { return bfp8_cuda_count_devices(); }

bfp8_status bfp8_context_create(bfp8_context **ctx, bfp8_backend backend, int device_ordinal) {
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_context_create: ctx is NULL");
    if (backend != BFP8_BACKEND_CPU && backend != BFP8_BACKEND_CUDA)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_context_create: unknown backend %d", (int)backend);
    bfp8_context *c = calloc(1, sizeof *c);
    if (!c) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_context_create: out of host memory");
    c->backend = backend;
    c->device = device_ordinal;
    c->quantize_pdl = 1;
    c->quantize_warm_l2 = 1;
    c->gemm_pdl = 1;
    if (backend == BFP8_BACKEND_CUDA) {
        bfp8_status st = bfp8_cuda_context_init(c);
        if (st != BFP8_OK) {
            free(c);
            return st;
        }
    }
    *ctx = c;
    return BFP8_OK;
}

void bfp8_context_destroy(bfp8_context *ctx) {
    if (!ctx) return;
    bfp8_free(ctx, ctx->call_scratch);
    if (ctx->backend == BFP8_BACKEND_CUDA) bfp8_cuda_context_release(ctx);
    free(ctx);
}

bfp8_status bfp8_context_reserve_call_scratch(bfp8_context *ctx, size_t bytes) {
    if (bytes <= ctx->call_scratch_bytes) return BFP8_OK;
    bfp8_free(ctx, ctx->call_scratch); /* (CUDA: after the work that used it, cudaFree synchronizes) */
    ctx->call_scratch = NULL;
    ctx->call_scratch_bytes = 0;
    BFP8_TRY(bfp8_malloc(ctx, &ctx->call_scratch, bytes));
    ctx->call_scratch_bytes = bytes;
    return BFP8_OK;
}

bfp8_backend bfp8_context_backend(const bfp8_context *ctx) { return ctx->backend; }

bfp8_status bfp8_context_set_stream(bfp8_context *ctx, void *cuda_stream) {
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_context_set_stream: ctx is NULL");
    if (ctx->backend != BFP8_BACKEND_CUDA)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_context_set_stream: the context is not CUDA");
    ctx->stream = cuda_stream;
    return BFP8_OK;
}

/* The field of ctx that holds `option`; NULL for an unknown option. */
static int *option_field(bfp8_context *ctx, bfp8_context_option option) {
    switch (option) {
    case BFP8_OPTION_QUANTIZE_PDL: return &ctx->quantize_pdl;
    case BFP8_OPTION_QUANTIZE_WARM_L2: return &ctx->quantize_warm_l2;
    case BFP8_OPTION_GEMM_PDL: return &ctx->gemm_pdl;
    }
    return NULL;
}

bfp8_status bfp8_context_set_option(bfp8_context *ctx, bfp8_context_option option, int value) {
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_context_set_option: ctx is NULL");
    int *field = option_field(ctx, option);
    if (!field) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_context_set_option: unknown option %d", (int)option);
    if (value != 0 && value != 1)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_context_set_option: value %d (0 or 1)", value);
    *field = value;
    return BFP8_OK;
}

bfp8_status bfp8_context_get_option(const bfp8_context *ctx, bfp8_context_option option, int *value) {
    if (!ctx || !value) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_context_get_option: ctx or value is NULL");
    const int *field = option_field((bfp8_context *)ctx, option);
    if (!field) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_context_get_option: unknown option %d", (int)option);
    *value = *field;
    return BFP8_OK;
}

bfp8_status bfp8_context_synchronize(bfp8_context *ctx) {
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_context_synchronize: ctx is NULL");
    return ctx->backend == BFP8_BACKEND_CUDA ? bfp8_cuda_synchronize(ctx) : BFP8_OK;
}

bfp8_status bfp8_device_memory_in_use(const bfp8_context *ctx, size_t *bytes) {
    if (!ctx || !bytes) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_device_memory_in_use: ctx or bytes is NULL");
    if (ctx->backend != BFP8_BACKEND_CUDA)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_device_memory_in_use: the context is not CUDA");
    return bfp8_cuda_memory_in_use(ctx, bytes);
}

bfp8_status bfp8_malloc(bfp8_context *ctx, void **ptr, size_t bytes) {
    if (!ctx || !ptr) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_malloc: ctx or ptr is NULL");
    if (bytes == 0) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_malloc: zero bytes");
    if (ctx->backend == BFP8_BACKEND_CUDA) return bfp8_cuda_malloc(ctx, ptr, bytes);
    if (bytes > SIZE_MAX - 63) /* rounding it up to 64 would wrap around */
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_malloc: %zu bytes of host memory", bytes);
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_malloc: %zu bytes of host memory", bytes);
    *ptr = p;
    return BFP8_OK;
}

void bfp8_free(bfp8_context *ctx, void *ptr) {
    if (!ctx || !ptr) return;
    if (ctx->backend == BFP8_BACKEND_CUDA)
        bfp8_cuda_free(ctx, ptr);
    else
        free(ptr);
}

bfp8_status bfp8_memset_zero(bfp8_context *ctx, void *ptr, size_t bytes) {
    if (!ctx || !ptr) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_memset_zero: ctx or ptr is NULL");
    if (ctx->backend == BFP8_BACKEND_CUDA) return bfp8_cuda_memset_zero(ctx, ptr, bytes);
    memset(ptr, 0, bytes);
    return BFP8_OK;
}

bfp8_status bfp8_copy_to_backend(bfp8_context *ctx, void *dst, const void *host_src, size_t bytes) {
    if (!ctx || !dst || !host_src)
        return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_copy_to_backend: a pointer is NULL");
    if (ctx->backend == BFP8_BACKEND_CUDA) return bfp8_cuda_copy(ctx, dst, host_src, bytes, 1);
    memmove(dst, host_src, bytes);
    return BFP8_OK;
}

bfp8_status bfp8_copy_to_host(bfp8_context *ctx, void *host_dst, const void *src, size_t bytes) {
    if (!ctx || !host_dst || !src)
        return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_copy_to_host: a pointer is NULL");
    if (ctx->backend == BFP8_BACKEND_CUDA) return bfp8_cuda_copy(ctx, host_dst, src, bytes, 0);
    memmove(host_dst, src, bytes);
    return BFP8_OK;
}
