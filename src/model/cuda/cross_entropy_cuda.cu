/*
 * cross_entropy_cuda.cu - the cross-entropy loss on the GPU, forward (row
 * losses, averaged on the host in token order) and backward (softmax minus
 * the target, scaled). See model_kernels.cuh.
 */
#include <math.h>

#include "model/cuda/model_kernels.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

/* log sum exp of a row, as the CPU: the max first, then the shifted sum (two
 * reads; the second mostly from L2). Max and sum are the CPU's for finite
 * rows; a NaN anywhere, or a +Inf, makes the sum NaN on both. */
template <int V> __device__ __forceinline__ float row_log_sum_exp(const float *row, int64_t vocab) {
    const int64_t vecs = vocab / V;
    float max_logit = -INFINITY;
    for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
        const floats<V> a = load<V>(row + j * V);
#pragma unroll
        for (int e = 0; e < V; ++e) max_logit = fmaxf(max_logit, a.v[e]);
    }
    max_logit = block_reduce(max_logit, max_op());
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
        const floats<V> a = load<V>(row + j * V);
#pragma unroll
        for (int e = 0; e < V; ++e) sum += expf(a.v[e] - max_logit);
    }
    sum = block_reduce(sum, sum_op());
    return max_logit + logf(sum);
}

template <int V>
__global__ void cross_entropy_forward_kernel(float *__restrict__ row_losses, const float *__restrict__ logits,
                                             const int32_t *__restrict__ targets, int64_t tokens, int64_t vocab) {
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const float *row = logits + t * vocab;
        const float lse = row_log_sum_exp<V>(row, vocab);
        if (threadIdx.x == 0) row_losses[t] = lse - row[targets[t]];
    }
}

/* In place allowed (dlogits == logits): a row is read in full before the
 * block's reductions end, and each element is then read and written by the
 * same thread. */
template <int V>
__global__ void cross_entropy_backward_kernel(float *dlogits, const float *logits,
                                              const int32_t *__restrict__ targets, int64_t tokens,
                                              int64_t vocab, float scale) {
    const int64_t vecs = vocab / V;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const float *row = logits + t * vocab;
        float *drow = dlogits + t * vocab;
        const float lse = row_log_sum_exp<V>(row, vocab);
        const int64_t target = targets[t];
        for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
            floats<V> a = load<V>(row + j * V);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                /* __fmul_rn: rounded before the target's "-= scale", as on the CPU, not fused into it */
                const float p = __fmul_rn(scale, expf(a.v[e] - lse));
                a.v[e] = j * V + e == target ? p - scale : p;
            }
            store<V>(drow + j * V, a);
        }
    }
}

} /* namespace */

/* The row losses come back to the host and are summed there in double in
 * token order: the CPU's summation exactly. */
extern "C" double cross_entropy_forward_cuda(model_ops_ctx *oc, float *row_losses, const float *logits,
                                             const int32_t *targets, int64_t tokens, int64_t vocab) {
    if (tokens <= 0 || vocab <= 0) return NAN; /* the CPU's mean of nothing, 0 / 0 */
    const bool vec = vocab % 4 == 0 && aligned16(logits);
    const unsigned blocks = (unsigned)(tokens < kMaxGridX ? tokens : kMaxGridX);
    const int threads = row_threads(vec ? vocab / 4 : vocab);
    if (vec)
        cross_entropy_forward_kernel<4><<<blocks, threads, 0, stream(oc)>>>(row_losses, logits, targets, tokens, vocab);
    else
        cross_entropy_forward_kernel<1><<<blocks, threads, 0, stream(oc)>>>(row_losses, logits, targets, tokens, vocab);
    if (failed(oc, cudaGetLastError(), "cross_entropy_forward")) return NAN;
    float *host = (float *)host_scratch(oc, &model_cuda_state::host_result, (size_t)tokens * sizeof(float),
                                        "cross_entropy_forward (host buffer)");
    if (!host) return NAN;
    if (failed(oc,
               cudaMemcpyAsync(host, row_losses, (size_t)tokens * sizeof(float), cudaMemcpyDeviceToHost, stream(oc)),
               "cross_entropy_forward (copy)") ||
        failed(oc, cudaStreamSynchronize(stream(oc)), "cross_entropy_forward (synchronize)"))
        return NAN;
    double total = 0.0;
    for (int64_t t = 0; t < tokens; ++t) total += host[t];
    return total / (double)tokens;
}

extern "C" void cross_entropy_backward_cuda(model_ops_ctx *oc, float *dlogits, const float *logits,
                                            const int32_t *targets, int64_t tokens, int64_t vocab, float scale) {
    if (tokens <= 0 || vocab <= 0) return;
    const bool vec = vocab % 4 == 0 && aligned16(logits) && aligned16(dlogits);
    const unsigned blocks = (unsigned)(tokens < kMaxGridX ? tokens : kMaxGridX);
    const int threads = row_threads(vec ? vocab / 4 : vocab);
    if (vec)
        cross_entropy_backward_kernel<4>
            <<<blocks, threads, 0, stream(oc)>>>(dlogits, logits, targets, tokens, vocab, scale);
    else
        cross_entropy_backward_kernel<1>
            <<<blocks, threads, 0, stream(oc)>>>(dlogits, logits, targets, tokens, vocab, scale);
    check_launch(oc, "cross_entropy_backward");
}
