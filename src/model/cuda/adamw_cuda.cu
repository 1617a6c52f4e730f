/*
 * adamw_cuda.cu - the AdamW update and the gradient's global norm (fixed-
 * order sums in double) on the GPU. See model_kernels.cuh.
 */
#include <math.h>

#include "model/cuda/model_kernels.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

struct adamw_args {
    float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay;
    float correction1, correction2, grad_scale;
};

/* The CPU's formula, operation by operation; the _rn intrinsics keep nvcc
 * from fusing multiplies and adds, so each result is rounded where the CPU
 * rounds it (bit-exact with a CPU build that does not fuse either). */
__device__ __forceinline__ void adamw_element(float &param, float grad, float &m, float &v, const adamw_args &a) {
    const float g = __fmul_rn(grad, a.grad_scale);
    m = __fadd_rn(__fmul_rn(a.beta1, m), __fmul_rn(a.one_minus_beta1, g));
    v = __fadd_rn(__fmul_rn(a.beta2, v), __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g));
    const float m_hat = __fdiv_rn(m, a.correction1), v_hat = __fdiv_rn(v, a.correction2);
    const float step =
        __fadd_rn(__fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), a.eps)), __fmul_rn(a.weight_decay, param));
    param = __fsub_rn(param, __fmul_rn(a.lr, step));
}

__global__ void adamw_kernel(float *__restrict__ param, const float *__restrict__ grad, float *__restrict__ m,
                             float *__restrict__ v, int64_t n, vec4_split split, adamw_args args) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const int64_t at = split.head + 4 * i;
        floats<4> p = load<4>(param + at), mm = load<4>(m + at), vv = load<4>(v + at);
        const floats<4> g = load<4>(grad + at);
#pragma unroll
        for (int e = 0; e < 4; ++e) adamw_element(p.v[e], g.v[e], mm.v[e], vv.v[e], args);
        store<4>(param + at, p);
        store<4>(m + at, mm);
        store<4>(v + at, vv);
    }
    for (int64_t i = first; i < split.head; i += stride) adamw_element(param[i], grad[i], m[i], v[i], args);
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride)
        adamw_element(param[i], grad[i], m[i], v[i], args);
}

constexpr int kNormBlocks = 1024; /* partials; the final sum is one block of kMaxRowThreads */

/* partial[block] = this block's sum of squares in double (a float's square
 * is exact in double, as on the CPU). */
__global__ void sum_squares_kernel(double *__restrict__ partial, const float *__restrict__ grad, int64_t n,
                                   vec4_split split) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    double s = 0.0;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const floats<4> g = load<4>(grad + split.head + 4 * i);
#pragma unroll
        for (int e = 0; e < 4; ++e) s += (double)g.v[e] * g.v[e];
    }
    for (int64_t i = first; i < split.head; i += stride) s += (double)grad[i] * grad[i];
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride) s += (double)grad[i] * grad[i];
    s = block_reduce(s, sum_op());
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* *total = the sum of partial[0 .. count), one block, fixed order. */
__global__ void sum_partials_kernel(double *__restrict__ total, const double *__restrict__ partial, int count) {
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
    s = block_reduce(s, sum_op());
    if (threadIdx.x == 0) *total = s;
}

} /* namespace */

extern "C" void adamw_update_cuda(model_ops_ctx *oc, float *param, const float *grad, float *m, float *v, size_t n,
                                  const adamw_hparams *h, float grad_scale, int64_t step, int decay) {
    if (n == 0) return;
    /* h is host memory; the bias corrections are the CPU's own powf */
    adamw_args args;
    args.lr = h->lr;
    args.beta1 = h->beta1;
    args.beta2 = h->beta2;
    args.one_minus_beta1 = 1.0f - h->beta1;
    args.one_minus_beta2 = 1.0f - h->beta2;
    args.eps = h->eps;
    args.weight_decay = decay ? h->weight_decay : 0.0f;
    args.correction1 = 1.0f - powf(h->beta1, (float)step);
    args.correction2 = 1.0f - powf(h->beta2, (float)step);
    args.grad_scale = grad_scale;
    const void *ptrs[] = {param, grad, m, v};
    const int sizes[] = {4, 4, 4, 4};
    const vec4_split split = split_for_vec4((int64_t)n, ptrs, sizes, 4);
    adamw_kernel<<<grid_for(split.vecs > 0 ? split.vecs : (int64_t)n, kThreads), kThreads, 0, stream(oc)>>>(
        param, grad, m, v, (int64_t)n, split, args);
    check_launch(oc, "adamw_update");
}

/* Fixed-size per-block partials (their number depends on n only) summed in
 * a fixed order: the same bits on every run. */
extern "C" double gradient_global_norm_cuda(model_ops_ctx *oc, const float *grad, size_t n) {
    if (n == 0) return 0.0;
    const void *ptrs[] = {grad};
    const int sizes[] = {4};
    const vec4_split split = split_for_vec4((int64_t)n, ptrs, sizes, 1);
    unsigned blocks = grid_for(split.vecs > 0 ? split.vecs : (int64_t)n, kThreads);
    if (blocks > kNormBlocks) blocks = kNormBlocks;
    double *partial = (double *)device_scratch(oc, &model_cuda_state::norm_partials, (blocks + 1) * sizeof(double),
                                               "gradient_global_norm (scratch)");
    double *host = (double *)host_scratch(oc, &model_cuda_state::host_result, sizeof(double),
                                          "gradient_global_norm (host buffer)");
    if (!partial || !host) return NAN;
    sum_squares_kernel<<<blocks, kThreads, 0, stream(oc)>>>(partial, grad, (int64_t)n, split);
    if (failed(oc, cudaGetLastError(), "gradient_global_norm (partials)")) return NAN;
    sum_partials_kernel<<<1, kMaxRowThreads, 0, stream(oc)>>>(partial + blocks, partial, (int)blocks);
    if (failed(oc, cudaGetLastError(), "gradient_global_norm (sum)")) return NAN;
    if (failed(oc, cudaMemcpyAsync(host, partial + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream(oc)),
               "gradient_global_norm (copy)") ||
        failed(oc, cudaStreamSynchronize(stream(oc)), "gradient_global_norm (synchronize)"))
        return NAN;
    return sqrt(*host);
}
