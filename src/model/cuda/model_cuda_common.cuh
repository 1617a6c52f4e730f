/*
 * model_cuda_common.cuh - what the model's CUDA operations share: the stream
 * they run on, a cuBLAS handle bound to it, and the first failure kept for
 * model_cuda_status() (model_ops.h).
 */
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace bfp8_model_cuda {

/* The stream of model_cuda_set_stream (0 until set). */
cudaStream_t stream();
/* The cuBLAS handle on stream(), in pure fp32 math or (model_cuda_set_tf32)
 * TF32 tensor-op math; NULL if it cannot be made (the failure is kept). */
cublasHandle_t cublas();
/* Keep the first failure: `what` names the operation. Returns whether e / s was a failure. */
bool failed(cudaError_t e, const char *what);
bool failed(cublasStatus_t s, const char *what);
/* After a kernel launch: keep a launch failure. */
inline void check_launch(const char *what) { failed(cudaGetLastError(), what); }

/* Blocks of `threads` covering n items, capped so the grid stays in range
 * (kernels loop with a grid stride). */
inline unsigned grid_for(int64_t n, int threads) {
    const int64_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks > 65535 * 16 ? 65535 * 16 : blocks);
}

} /* namespace bfp8_model_cuda */
