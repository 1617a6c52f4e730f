/*
 * cuda_common.cuh - what every CUDA source of the library shares: error
 * checks that turn CUDA failures into statuses, the per-context state, and
 * small index helpers.
 */
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "internal.h"

#define BFP8_CUDA_TRY(call)                                                                  \
    do {                                                                                     \
        cudaError_t bfp8_cuda_err_ = (call);                                                 \
        if (bfp8_cuda_err_ != cudaSuccess)                                                   \
            return bfp8_fail(bfp8_cuda_err_ == cudaErrorMemoryAllocation                    \
                                 ? BFP8_ERR_OUT_OF_MEMORY : BFP8_ERR_CUDA,                   \
                             "%s:%d: %s: %s", __FILE__, __LINE__, #call,                    \
                             cudaGetErrorString(bfp8_cuda_err_));                            \
    } while (0)

/* After a launch: a bad configuration shows up here, not at the next call. */
#define BFP8_CUDA_CHECK_LAUNCH() BFP8_CUDA_TRY(cudaGetLastError())

/* Makes the launch of cfg a programmatic dependent launch of the grid before
 * it in the stream: its CTAs may start while that grid drains, and the kernel
 * must wait for it (griddep_wait) before it reads what that grid writes.
 * cfg.attrs must have room for one more attribute. */
static inline void add_programmatic_dependent_launch(cudaLaunchConfig_t *cfg) {
    cudaLaunchAttribute *attr = &cfg->attrs[cfg->numAttrs++];
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
}

/* The FP8 GEMMs' tuning environment (BFP8_GEMM_CONFIG, BFP8_GEMM_TRACE; see
 * gemm_fp8_heuristic.cu), read once when the context is created, so that a
 * GEMM call reads no environment variable. -1: not given. */
struct bfp8_gemm_tuning {
    int given;        /* BFP8_GEMM_CONFIG is set (not empty) */
    int bm, bn;       /* bm=, bn= */
    int direct_store; /* store=direct */
    int split;        /* split= (0 when not given: the heuristic's choice) */
    int group_m;      /* gm= (0 when not given) */
    int small;        /* small=0 / small=1, -1 when not given */
    int trace;        /* BFP8_GEMM_TRACE set */
};
void bfp8_gemm_read_tuning(struct bfp8_gemm_tuning *t);

/* What a CUDA context keeps (ctx->cuda_state). */
struct bfp8_cuda_state {
    struct bfp8_gemm_tuning gemm_tuning;
    cudaDeviceProp props;
    int num_sms;
    void *cublaslt;            /* cublasLtHandle_t, created on first use */
    void *cublaslt_workspace;  /* device memory for cuBLASLt */
    size_t cublaslt_workspace_bytes;
    void *gemm_split_workspace; /* FP8 GEMM: partial tiles and flags of k-split tiles, made on first use */
    void *gemm_group_table;     /* grouped FP8 GEMMs: the kernel's group table (Params::group_table) */
    size_t gemm_group_table_bytes;
    void *gemm_scale_operand;   /* 1D1D 256 x 112: B's column scales as the scale wgmma's operand */
    size_t gemm_scale_operand_bytes;
};

static inline cudaStream_t bfp8_stream_of(const bfp8_context *ctx) {
    return (cudaStream_t)ctx->stream;
}

static inline struct bfp8_cuda_state *bfp8_cuda_state_of(const bfp8_context *ctx) {
    return (struct bfp8_cuda_state *)ctx->cuda_state;
}

__host__ __device__ static inline int64_t bfp8_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
