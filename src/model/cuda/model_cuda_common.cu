/*
 * model_cuda_common.cu - the CUDA state of a model_ops_ctx: cuBLAS handle,
 * scratch buffers and kept failure of the model's CUDA operations
 * (model_cuda_common.cuh).
 */
#include "model/cuda/model_cuda_common.cuh"

#include <new>
#include <stdio.h>

#include "internal.h"
#include "model/model_ops.h"
#include "model/model_profile.h"

namespace bfp8_model_cuda {

model_cuda_state *state(model_ops_ctx *oc) {
    if (!oc->cuda) {
        oc->cuda = new (std::nothrow) model_cuda_state{};
        if (!oc->cuda) model_ops_fail(oc, "model CUDA ops: out of host memory");
    }
    return oc->cuda;
}

cublasHandle_t cublas(model_ops_ctx *oc) {
    model_cuda_state *st = state(oc);
    if (!st) return nullptr;
    if (!st->cublas) {
        if (failed(oc, cublasCreate(&st->cublas), "cublasCreate")) {
            st->cublas = nullptr;
            return nullptr;
        }
    }
    failed(oc, cublasSetMathMode(st->cublas, oc->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
           "cublasSetMathMode");
    failed(oc, cublasSetStream(st->cublas, stream(oc)), "cublasSetStream");
    return st->cublas;
}

bool failed(model_ops_ctx *oc, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return false;
    if (!oc->failed) {
        char message[sizeof oc->message];
        snprintf(message, sizeof message, "model CUDA op %s: %s", what, cudaGetErrorString(e));
        model_ops_fail(oc, message);
    }
    return true;
}

bool failed(model_ops_ctx *oc, cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return false;
    if (!oc->failed) {
        char message[sizeof oc->message];
        snprintf(message, sizeof message, "model CUDA op %s: cuBLAS status %d", what, (int)s);
        model_ops_fail(oc, message);
    }
    return true;
}

/* The buffer `which`, grown to at least `bytes` (device memory, or pinned host memory when host). */
static void *grown_scratch(model_ops_ctx *oc, scratch_buffer model_cuda_state::*which, size_t bytes, const char *what,
                           bool host) {
    model_cuda_state *st = state(oc);
    if (!st) return nullptr;
    scratch_buffer &s = st->*which;
    if (bytes <= s.bytes) return s.ptr;
    const size_t size = grown_size(s.bytes, bytes);
    if (s.ptr) failed(oc, host ? cudaFreeHost(s.ptr) : cudaFree(s.ptr), what);
    s.ptr = nullptr;
    s.bytes = 0;
    if (failed(oc, host ? cudaMallocHost(&s.ptr, size) : cudaMalloc(&s.ptr, size), what)) {
        s.ptr = nullptr;
        return nullptr;
    }
    s.bytes = size;
    return s.ptr;
}

void *device_scratch(model_ops_ctx *oc, scratch_buffer model_cuda_state::*which, size_t bytes, const char *what) {
    return grown_scratch(oc, which, bytes, what, false);
}

void *host_scratch(model_ops_ctx *oc, scratch_buffer model_cuda_state::*which, size_t bytes, const char *what) {
    return grown_scratch(oc, which, bytes, what, true);
}

} /* namespace bfp8_model_cuda */

extern "C" void model_cuda_poll(model_ops_ctx *oc) { bfp8_model_cuda::failed(oc, cudaGetLastError(), "(a launch)"); }

extern "C" void model_cuda_release(model_ops_ctx *oc) {
    using namespace bfp8_model_cuda;
    model_cuda_state *st = oc->cuda;
    if (!st) return;
    failed(oc, cudaStreamSynchronize(stream(oc)), "release: synchronize");
    if (st->cublas) failed(oc, cublasDestroy(st->cublas), "release: cublasDestroy");
    scratch_buffer *device[] = {&st->norm_partials, &st->embedding_sort, &st->rmsnorm_partials};
    for (scratch_buffer *b : device)
        if (b->ptr) failed(oc, cudaFree(b->ptr), "release: cudaFree");
    if (st->host_result.ptr) failed(oc, cudaFreeHost(st->host_result.ptr), "release: cudaFreeHost");
    delete st;
    oc->cuda = nullptr;
}

/* The step profile's marks (model_profile.h). */
extern "C" int model_cuda_event_record(model_ops_ctx *oc, void **event) {
    using namespace bfp8_model_cuda;
    if (!*event) {
        cudaEvent_t e = nullptr;
        if (failed(oc, cudaEventCreate(&e), "profile: cudaEventCreate")) return 0;
        *event = e;
    }
    return !failed(oc, cudaEventRecord(static_cast<cudaEvent_t>(*event), stream(oc)), "profile: cudaEventRecord");
}

extern "C" int model_cuda_event_elapsed(model_ops_ctx *oc, void *start, void *end, float *ms) {
    using namespace bfp8_model_cuda;
    cudaEvent_t a = static_cast<cudaEvent_t>(start), b = static_cast<cudaEvent_t>(end);
    return !failed(oc, cudaEventSynchronize(b), "profile: cudaEventSynchronize") &&
           !failed(oc, cudaEventElapsedTime(ms, a, b), "profile: cudaEventElapsedTime");
}

extern "C" void model_cuda_event_destroy(void *event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
