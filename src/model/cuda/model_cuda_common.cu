/*
 * model_cuda_common.cu - stream, cuBLAS handle and kept failure of the
 * model's CUDA operations (model_cuda_common.cuh).
 */
#include "model/cuda/model_cuda_common.cuh"

#include <stdio.h>

#include "internal.h"
#include "model/model_ops.h"

namespace bfp8_model_cuda {

namespace {
cudaStream_t g_stream = 0;
cublasHandle_t g_cublas = nullptr;
bool g_tf32 = false;
bool g_failed = false;
char g_message[512];
} /* namespace */

cudaStream_t stream() { return g_stream; }

cublasHandle_t cublas() {
    if (!g_cublas) {
        if (failed(cublasCreate(&g_cublas), "cublasCreate")) {
            g_cublas = nullptr;
            return nullptr;
        }
    }
    failed(cublasSetMathMode(g_cublas, g_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
           "cublasSetMathMode");
    failed(cublasSetStream(g_cublas, g_stream), "cublasSetStream");
    return g_cublas;
}

bool failed(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return false;
    if (!g_failed) {
        g_failed = true;
        snprintf(g_message, sizeof g_message, "model CUDA op %s: %s", what, cudaGetErrorString(e));
    }
    return true;
}

bool failed(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return false;
    if (!g_failed) {
        g_failed = true;
        snprintf(g_message, sizeof g_message, "model CUDA op %s: cuBLAS status %d", what, (int)s);
    }
    return true;
}

} /* namespace bfp8_model_cuda */

extern "C" void model_cuda_set_stream(void *cuda_stream) {
    bfp8_model_cuda::g_stream = static_cast<cudaStream_t>(cuda_stream);
}

extern "C" void model_cuda_set_tf32(int tf32) { bfp8_model_cuda::g_tf32 = tf32 != 0; }

extern "C" bfp8_status model_cuda_status(void) {
    using namespace bfp8_model_cuda;
    failed(cudaGetLastError(), "(a launch)");
    if (!g_failed) return BFP8_OK;
    g_failed = false;
    return bfp8_fail(BFP8_ERR_CUDA, "%s", g_message);
}
