/*
 * model_cuda_common.cuh - what the model's CUDA operations share: the stream
 * they run on, a cuBLAS handle bound to it, scratch buffers, and the first
 * failure kept for model_ops_status() (model_ops.h). All of it lives in the
 * model_ops_ctx each op receives (model_ops_ctx.h): nothing is
 * process-global.
 */
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "model/model_ops_ctx.h"

/* Device and pinned host buffers that grow on demand and live as long as
 * their model_ops_ctx. Growing frees the old buffer with cudaFree /
 * cudaFreeHost, which wait for the device, so work still reading it has
 * finished. The ops of one context share its one stream, so a buffer is
 * reused only after the work before it is done. */
struct scratch_buffer {
    void *ptr;
    size_t bytes;
};

/* The CUDA part of a model_ops_ctx (oc->cuda), made on first use. */
struct model_cuda_state {
    cublasHandle_t cublas;
    scratch_buffer host_result;      /* pinned: a number copied back (the row losses, the norm) */
    scratch_buffer norm_partials;    /* gradient_global_norm: blocks + 1 doubles */
    scratch_buffer embedding_sort;   /* embedding_backward: positions, sorted ids and positions, CUB's storage */
    scratch_buffer rmsnorm_partials; /* rmsnorm_backward: chunks x dim floats */
};

namespace bfp8_model_cuda {

/* The stream of oc (the bfp8 context's). */
inline cudaStream_t stream(model_ops_ctx *oc) { return static_cast<cudaStream_t>(oc->stream); }
/* oc's CUDA state, made on first use; NULL if it cannot be made (the failure is kept). */
model_cuda_state *state(model_ops_ctx *oc);
/* The cuBLAS handle on stream(oc), in pure fp32 math or (oc->tf32) TF32
 * tensor-op math; NULL if it cannot be made (the failure is kept). */
cublasHandle_t cublas(model_ops_ctx *oc);
/* Keep the first failure in oc: `what` names the operation. Returns whether e / s was a failure. */
bool failed(model_ops_ctx *oc, cudaError_t e, const char *what);
bool failed(model_ops_ctx *oc, cublasStatus_t s, const char *what);
/* After a kernel launch: keep a launch failure. */
inline void check_launch(model_ops_ctx *oc, const char *what) { failed(oc, cudaGetLastError(), what); }

/* Blocks of `threads` covering n items, capped so the grid stays in range
 * (kernels loop with a grid stride). */
inline unsigned grid_for(int64_t n, int threads) {
    const int64_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks > 65535 * 16 ? 65535 * 16 : blocks);
}

/* Double on growth, so a slowly growing size reallocates rarely. */
inline size_t grown_size(size_t old_bytes, size_t bytes) { return bytes > 2 * old_bytes ? bytes : 2 * old_bytes; }

/* oc's buffer `which` holding at least `bytes` (device memory); NULL after a failure (kept). */
void *device_scratch(model_ops_ctx *oc, scratch_buffer model_cuda_state::*which, size_t bytes, const char *what);
/* The same in pinned host memory. */
void *host_scratch(model_ops_ctx *oc, scratch_buffer model_cuda_state::*which, size_t bytes, const char *what);

} /* namespace bfp8_model_cuda */
