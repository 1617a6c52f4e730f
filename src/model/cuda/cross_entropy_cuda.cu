/*
 * cross_entropy_cuda.cu - the cross-entropy loss on the GPU: each row's loss
 * and its gradient in one kernel (fp32, in place allowed, or bf16), and the
 * mean of the row losses reduced on the device. See model_kernels.cuh.
 */
#include <math.h>

#include "formats/formats.h"

#include "model/cuda/model_kernels.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

enum class grad_out { none, f32, bf16 };

/* One logit into a thread's running max m and sum s of exp(x - m). -Inf
 * adds nothing (and no exp(-inf + inf) = NaN while m is still -Inf); NaN
 * makes s NaN, as it makes the CPU's sum NaN. */
__device__ __forceinline__ void online_add(float &m, float &s, float x) {
    if (x > m) {
        s = s * expf(m - x) + 1.0f;
        m = x;
    } else if (x != -INFINITY) {
        s += expf(x - m);
    }
}

/* One block per row (grid-stride): a single read of the row for its max and
 * sum (each thread's running pair, rescaled to the row's max), a second one,
 * mostly from L2, for the gradient. The loss matches the CPU's two-pass
 * log-sum-exp within fp32 rounding; a NaN or +Inf in the row gives NaN as
 * there. In place (dlogits == logits): the target's logit and the whole row
 * are read before the block's reductions end, and each gradient element is
 * then read and written by the same thread. */
template <int V, grad_out G>
__global__ void cross_entropy_rows_kernel(float *__restrict__ row_losses, void *dlogits, const float *logits,
                                          const int32_t *__restrict__ targets, int64_t tokens, int64_t vocab,
                                          float scale) {
    const int64_t vecs = vocab / V;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const float *row = logits + t * vocab;
        const int64_t target = targets[t];
        const float target_logit = row[target];
        float m = -INFINITY, s = 0.0f;
        for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
            const floats<V> a = load<V>(row + j * V);
#pragma unroll
            for (int e = 0; e < V; ++e) online_add(m, s, a.v[e]);
        }
        const float row_max = block_reduce(m, max_op());
        const float sum = block_reduce(s * expf(m - row_max), sum_op()); /* 0 from a thread with nothing */
        const float lse = row_max == INFINITY ? NAN : row_max + logf(sum);
        if (threadIdx.x == 0) row_losses[t] = lse - target_logit;
        if constexpr (G != grad_out::none) {
            for (int64_t j = threadIdx.x; j < vecs; j += blockDim.x) {
                floats<V> a = load<V>(row + j * V);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    /* __fmul_rn: rounded before the target's "- scale", as on the CPU, not fused into it */
                    const float p = __fmul_rn(scale, expf(a.v[e] - lse));
                    a.v[e] = j * V + e == target ? p - scale : p;
                }
                const int64_t at = t * vocab + j * V;
                if constexpr (G == grad_out::f32) {
                    store<V>(static_cast<float *>(dlogits) + at, a);
                } else if constexpr (V == 4) {
                    uint2 packed;
                    packed.x = (uint32_t)bfp8_encode_bf16(a.v[0]) | (uint32_t)bfp8_encode_bf16(a.v[1]) << 16;
                    packed.y = (uint32_t)bfp8_encode_bf16(a.v[2]) | (uint32_t)bfp8_encode_bf16(a.v[3]) << 16;
                    *reinterpret_cast<uint2 *>(static_cast<uint16_t *>(dlogits) + at) = packed;
                } else {
                    static_cast<uint16_t *>(dlogits)[at] = bfp8_encode_bf16(a.v[0]);
                }
            }
        }
    }
}

template <int V>
void launch_rows(model_ops_ctx *oc, float *row_losses, void *dlogits, bfp8_dtype dtype, const float *logits,
                 const int32_t *targets, int64_t tokens, int64_t vocab, float scale) {
    const unsigned blocks = (unsigned)(tokens < kMaxGridX ? tokens : kMaxGridX);
    const int threads = row_threads(vocab / V);
    if (!dlogits)
        cross_entropy_rows_kernel<V, grad_out::none>
            <<<blocks, threads, 0, stream(oc)>>>(row_losses, dlogits, logits, targets, tokens, vocab, scale);
    else if (dtype == BFP8_BF16)
        cross_entropy_rows_kernel<V, grad_out::bf16>
            <<<blocks, threads, 0, stream(oc)>>>(row_losses, dlogits, logits, targets, tokens, vocab, scale);
    else
        cross_entropy_rows_kernel<V, grad_out::f32>
            <<<blocks, threads, 0, stream(oc)>>>(row_losses, dlogits, logits, targets, tokens, vocab, scale);
}

/* *mean = the mean of x[0 .. n), in double, one block, a fixed order. */
__global__ void mean_kernel(double *mean, const float *__restrict__ x, int64_t n) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    s = block_reduce(s, sum_op());
    if (threadIdx.x == 0) *mean = s / (double)n;
}

} /* namespace */

extern "C" void cross_entropy_rows_cuda(model_ops_ctx *oc, float *row_losses, void *dlogits, bfp8_dtype dlogits_dtype,
                                        const float *logits, const int32_t *targets, int64_t tokens, int64_t vocab,
                                        float scale) {
    if (tokens <= 0 || vocab <= 0) return;
    if (dlogits && dlogits_dtype != BFP8_F32 && dlogits_dtype != BFP8_BF16) {
        failed(oc, cudaErrorInvalidValue, "cross_entropy_rows (dlogits dtype)");
        return;
    }
    const size_t out_align = dlogits_dtype == BFP8_BF16 ? 8 : 16; /* four elements at a time */
    const bool vec = vocab % 4 == 0 && aligned16(logits) && (!dlogits || (uintptr_t)dlogits % out_align == 0);
    if (vec)
        launch_rows<4>(oc, row_losses, dlogits, dlogits_dtype, logits, targets, tokens, vocab, scale);
    else
        launch_rows<1>(oc, row_losses, dlogits, dlogits_dtype, logits, targets, tokens, vocab, scale);
    check_launch(oc, "cross_entropy_rows");
}

/* The mean is written straight into pinned host memory (mapped into the
 * device's address space), so the copy back is the kernel's own store and
 * the one wait is the stream's. */
extern "C" double loss_mean_cuda(model_ops_ctx *oc, const float *row_losses, int64_t n) {
    if (n <= 0) return NAN; /* the CPU's mean of nothing */
    double *host =
        (double *)host_scratch(oc, &model_cuda_state::host_result, sizeof(double), "loss_mean (host buffer)");
    if (!host) return NAN;
    double *mapped = nullptr;
    if (failed(oc, cudaHostGetDevicePointer((void **)&mapped, host, 0), "loss_mean (mapped pointer)")) return NAN;
    mean_kernel<<<1, kMaxRowThreads, 0, stream(oc)>>>(mapped, row_losses, n);
    if (failed(oc, cudaGetLastError(), "loss_mean") ||
        failed(oc, cudaStreamSynchronize(stream(oc)), "loss_mean (synchronize)"))
        return NAN;
    return *host;
}
