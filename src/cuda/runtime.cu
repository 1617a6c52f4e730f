/*
 * runtime.cu - the CUDA backend's context, memory and pointer checks.
 */
#include <cublasLt.h>
#include <stdlib.h>

#include "cuda/cuda_common.cuh"

int bfp8_cuda_count_devices(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

bfp8_status bfp8_cuda_context_init(bfp8_context *ctx) {
    const int n = bfp8_cuda_count_devices();
    if (n == 0) return bfp8_fail(BFP8_ERR_NO_DEVICE, "no CUDA device is present");
    if (ctx->device < 0 || ctx->device >= n)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "CUDA device %d does not exist (%d present)",
                         ctx->device, n);
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    struct bfp8_cuda_state *st = (struct bfp8_cuda_state *)calloc(1, sizeof *st);
    if (!st) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "out of host memory");
    if (cudaGetDeviceProperties(&st->props, ctx->device) != cudaSuccess) {
        free(st);
        return bfp8_fail(BFP8_ERR_CUDA, "cudaGetDeviceProperties(%d) failed", ctx->device);
    }
    st->num_sms = st->props.multiProcessorCount;
    bfp8_gemm_read_tuning(&st->gemm_tuning);
    ctx->cuda_state = st;
    ctx->stream = NULL;
    return BFP8_OK;
}

void bfp8_cuda_context_release(bfp8_context *ctx) {
    struct bfp8_cuda_state *st = bfp8_cuda_state_of(ctx);
    if (!st) return;
    cudaSetDevice(ctx->device);
    if (st->cublaslt) cublasLtDestroy((cublasLtHandle_t)st->cublaslt);
    if (st->cublaslt_workspace) cudaFree(st->cublaslt_workspace);
    if (st->gemm_split_workspace) cudaFree(st->gemm_split_workspace);
    if (st->gemm_group_table) cudaFree(st->gemm_group_table);
    if (st->gemm_scale_operand) cudaFree(st->gemm_scale_operand);
    free(st);
    ctx->cuda_state = NULL;
}

bfp8_status bfp8_cuda_malloc(bfp8_context *ctx, void **ptr, size_t bytes) {
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return bfp8_fail(err == cudaErrorMemoryAllocation ? BFP8_ERR_OUT_OF_MEMORY : BFP8_ERR_CUDA,
                         "cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorString(err));
    }
    *ptr = p;
    return BFP8_OK;
}

void bfp8_cuda_free(bfp8_context *ctx, void *ptr) {
    (void)ctx;
    cudaFree(ptr);
}

bfp8_status bfp8_cuda_memory_in_use(const bfp8_context *ctx, size_t *bytes) {
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    size_t free_bytes = 0, total_bytes = 0;
    BFP8_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
    *bytes = total_bytes - free_bytes;
    return BFP8_OK;
}

bfp8_status bfp8_cuda_memset_zero(bfp8_context *ctx, void *ptr, size_t bytes) {
    BFP8_CUDA_TRY(cudaMemsetAsync(ptr, 0, bytes, bfp8_stream_of(ctx)));
    return BFP8_OK;
}

bfp8_status bfp8_cuda_copy(bfp8_context *ctx, void *dst, const void *src, size_t bytes, int to_device) {
    BFP8_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                  bfp8_stream_of(ctx)));
    BFP8_CUDA_TRY(cudaStreamSynchronize(bfp8_stream_of(ctx)));
    return BFP8_OK;
}

bfp8_status bfp8_cuda_synchronize(bfp8_context *ctx) {
    BFP8_CUDA_TRY(cudaStreamSynchronize(bfp8_stream_of(ctx)));
    return BFP8_OK;
}

bfp8_status bfp8_cuda_check_pointer(const bfp8_context *ctx, const void *ptr, const char *what) {
    cudaPointerAttributes attr;
    cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return bfp8_fail(BFP8_ERR_BAD_POINTER, "%s: not a CUDA pointer (%s)", what, cudaGetErrorString(err));
    }
    if (attr.type == cudaMemoryTypeManaged) return BFP8_OK;
    if (attr.type != cudaMemoryTypeDevice)
        return bfp8_fail(BFP8_ERR_BAD_POINTER, "%s: host memory given to the CUDA backend", what);
    if (attr.device != ctx->device)
        return bfp8_fail(BFP8_ERR_BAD_POINTER, "%s: memory of device %d given to a context of device %d",
                         what, attr.device, ctx->device);
    return BFP8_OK;
}
