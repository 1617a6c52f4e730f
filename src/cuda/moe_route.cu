/*
 * moe_route.cu - the CUDA router and dispatch of the mixture-of-experts ops,
 * the twins of src/cpu/moe_cpu.c's (same signatures; the host's
 * floating-point operations in the host's order, no contraction into fma
 * where the host has none, except expf and the softmax's sum over the
 * experts (a warp reduction): scores and weights match the host's to
 * rounding, the dispatch tables bit for bit). No atomics.
 *
 *   route           a warp per token: scores, then k rounds of a warp arg-max
 *                   (value, then lower index); score sums a thread per expert
 *   route_backward  a warp per token (the k-term and the softmax dot by lane 0,
 *                   in the host's order)
 *   dispatch        a CTA per expert counts its slots (each thread a run of
 *                   consecutive slots); one thread makes the offsets; a CTA
 *                   per expert ranks its slots in slot order (the threads'
 *                   counts scanned across the CTA) and writes both tables and
 *                   its padding
 */
#include "cuda/cuda_common.cuh"

namespace {

constexpr int kWarp = 32;
constexpr int kRouteWarps = 8;
constexpr int kMaxTopK = 16;
constexpr int kDispatchThreads = 1024;
constexpr int kSlotsPerThread = 16; /* a CTA covers 16384 slots a pass */

unsigned blocks_for(int64_t n, int per_block) {
    const int64_t b = (n + per_block - 1) / per_block;
    return static_cast<unsigned>(b < 1 ? 1 : b);
}

/* ------------------------------------------------------------------------ */
/* Router                                                                    */

__global__ void route_kernel(const float *__restrict__ logits, const float *__restrict__ bias, int64_t tokens,
                             int E, int k, int sigmoid, int normalize, float scale, float *__restrict__ scores,
                             int32_t *__restrict__ topk_expert, float *__restrict__ topk_weight) {
    __shared__ int chosen[kRouteWarps][kMaxTopK];
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
    if (t >= tokens) return;
    const float *l = logits + t * E;
    float *s = scores + t * E;
    if (!sigmoid) {
        float m = -INFINITY;
        for (int e = lane; e < E; e += kWarp) m = fmaxf(m, l[e]);
        for (int off = kWarp / 2; off >= 1; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        float sum = 0.0f;
        for (int e = lane; e < E; e += kWarp) sum += expf(l[e] - m);
        for (int off = kWarp / 2; off >= 1; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        for (int e = lane; e < E; e += kWarp) s[e] = expf(l[e] - m) / sum;
    } else {
        for (int e = lane; e < E; e += kWarp) s[e] = 1.0f / (1.0f + expf(-l[e]));
    }
    __syncwarp();
    float denom = 0.0f;
    for (int j = 0; j < k; ++j) {
        int best = -1;
        float best_v = 0.0f;
        for (int e = lane; e < E; e += kWarp) {
            bool taken = false;
            for (int i = 0; i < j; ++i) taken |= chosen[warp][i] == e;
            if (taken) continue;
            float v = bias ? s[e] + bias[e] : s[e];
            if (v != v) v = -INFINITY; /* a NaN is never preferred */
            if (best < 0 || v > best_v) best = e, best_v = v;
        }
        for (int off = kWarp / 2; off >= 1; off /= 2) {
            const int other = __shfl_xor_sync(0xffffffffu, best, off);
            const float other_v = __shfl_xor_sync(0xffffffffu, best_v, off);
            /* the host's choice: the larger value, the lower index on a tie */
            const bool take = other >= 0 && (best < 0 || other_v > best_v || (other_v == best_v && other < best));
            if (take) best = other, best_v = other_v;
        }
        if (lane == 0) {
            chosen[warp][j] = best;
            topk_expert[t * k + j] = best;
        }
        __syncwarp();
        denom += s[best];
    }
    if (!normalize) denom = 1.0f;
    if (lane < k) topk_weight[t * k + lane] = scale * (s[chosen[warp][lane]] / denom);
}

__global__ void score_sum_kernel(const float *__restrict__ scores, int64_t tokens, int E, float *__restrict__ sums) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    float sum = 0.0f;
    for (int64_t t = 0; t < tokens; ++t) sum += scores[t * E + e];
    sums[e] = sum;
}

/* An expert index the router could have written (others are skipped). */
__device__ __forceinline__ bool valid(int32_t e, int E) { return e >= 0 && e < E; }

__global__ void route_backward_kernel(const float *__restrict__ scores, const int32_t *__restrict__ topk_expert,
                                      const float *__restrict__ d_topk_weight, const float *__restrict__ score_grad,
                                      int64_t tokens, int E, int k, int sigmoid, int normalize, float scale,
                                      float *__restrict__ d_logits) {
    __shared__ float dot_of[kRouteWarps];
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
    if (t >= tokens) return;
    const float *s = scores + t * E;
    float *g = d_logits + t * E;
    for (int e = lane; e < E; e += kWarp) g[e] = score_grad ? score_grad[e] : 0.0f;
    __syncwarp();
    if (lane == 0) {
        const int32_t *ex = topk_expert + t * k;
        const float *dw = d_topk_weight + t * k;
        if (normalize) {
            float sum = 0.0f, dot = 0.0f;
            for (int j = 0; j < k; ++j) sum += valid(ex[j], E) ? s[ex[j]] : 0.0f;
            for (int j = 0; j < k; ++j) dot = valid(ex[j], E) ? fmaf(dw[j], s[ex[j]], dot) : dot;
            const float mean = dot / sum;
            for (int j = 0; j < k; ++j) /* no fma: as the host */
                if (valid(ex[j], E)) g[ex[j]] += __fmul_rn(scale, (dw[j] - mean) / sum);
        } else {
            for (int j = 0; j < k; ++j)
                if (valid(ex[j], E)) g[ex[j]] += __fmul_rn(scale, dw[j]);
        }
        float dot = 0.0f;
        if (!sigmoid)
            for (int e = 0; e < E; ++e) dot = fmaf(g[e], s[e], dot);
        dot_of[warp] = dot;
    }
    __syncwarp();
    const float dot = dot_of[warp];
    for (int e = lane; e < E; e += kWarp) g[e] = sigmoid ? g[e] * (s[e] * (1.0f - s[e])) : s[e] * (g[e] - dot);
}


/* ------------------------------------------------------------------------ */
/* Dispatch                                                                  */

/* The CTA's exclusive prefix sum of v (thread order) and, in *total, the sum over the CTA. */
__device__ __forceinline__ int cta_exclusive_scan(int v, int *total) {
    __shared__ int warp_sums[kDispatchThreads / kWarp + 1];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    int inclusive = v;
    for (int off = 1; off < kWarp; off *= 2) {
        const int other = __shfl_up_sync(0xffffffffu, inclusive, off);
        if (lane >= off) inclusive += other;
    }
    if (lane == kWarp - 1) warp_sums[warp + 1] = inclusive;
    __syncthreads();
    if (warp == 0) {
        constexpr int kWarps = kDispatchThreads / kWarp;
        int s = lane < kWarps ? warp_sums[lane + 1] : 0;
        for (int off = 1; off < kWarp; off *= 2) {
            const int other = __shfl_up_sync(0xffffffffu, s, off);
            if (lane >= off) s += other;
        }
        if (lane < kWarps) warp_sums[lane + 1] = s;
        if (lane == 0) warp_sums[0] = 0;
    }
    __syncthreads();
    const int result = warp_sums[warp] + inclusive - v;
    *total = warp_sums[kDispatchThreads / kWarp];
    __syncthreads(); /* warp_sums is reused by the next call */
    return result;
}

/* Thread's run of the pass starting at p0: slots [first, end). */
__device__ __forceinline__ void thread_run(int64_t p0, int64_t slots, int64_t *first, int64_t *end) {
    *first = p0 + static_cast<int64_t>(threadIdx.x) * kSlotsPerThread;
    *end = *first + kSlotsPerThread < slots ? *first + kSlotsPerThread : slots;
}

__global__ void __launch_bounds__(kDispatchThreads)
    count_kernel(const int32_t *__restrict__ topk_expert, int64_t slots, int64_t *__restrict__ routed) {
    const int e = blockIdx.x;
    int64_t count = 0;
    for (int64_t p0 = 0; p0 < slots; p0 += static_cast<int64_t>(kDispatchThreads) * kSlotsPerThread) {
        int64_t s0, s1;
        thread_run(p0, slots, &s0, &s1);
        for (int64_t s = s0; s < s1; ++s) count += __ldg(topk_expert + s) == e;
    }
    for (int off = kWarp / 2; off >= 1; off /= 2) count += __shfl_xor_sync(0xffffffffu, count, off);
    __shared__ int64_t warp_counts[kDispatchThreads / kWarp];
    if (threadIdx.x % kWarp == 0) warp_counts[threadIdx.x / kWarp] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        int64_t total = 0;
        for (int w = 0; w < kDispatchThreads / kWarp; ++w) total += warp_counts[w];
        routed[e] = total;
    }
}

__global__ void offsets_kernel(const int64_t *__restrict__ routed, int E, int64_t capacity,
                               int64_t *__restrict__ offsets) {
    int64_t at = 0;
    offsets[0] = 0;
    for (int e = 0; e < E; ++e) {
        const int64_t kept = capacity > 0 && routed[e] > capacity ? capacity : routed[e];
        at += (kept + BFP8_GROUP_ALIGN - 1) / BFP8_GROUP_ALIGN * BFP8_GROUP_ALIGN;
        offsets[e + 1] = at;
    }
}

/* Expert blockIdx.x's slots in slot order: each thread counts its run, the
 * counts are scanned across the CTA, then each thread ranks its run. */
__global__ void __launch_bounds__(kDispatchThreads)
    place_kernel(const int32_t *__restrict__ topk_expert, int64_t slots, int64_t capacity,
                 const int64_t *__restrict__ offsets, int32_t *__restrict__ slot_row, int32_t *__restrict__ row_slot) {
    const int e = blockIdx.x;
    const int64_t first = offsets[e], end = offsets[e + 1];
    int64_t base = 0; /* slots of this expert before the pass */
    for (int64_t p0 = 0; p0 < slots; p0 += static_cast<int64_t>(kDispatchThreads) * kSlotsPerThread) {
        int64_t s0, s1;
        thread_run(p0, slots, &s0, &s1);
        uint32_t mine = 0; /* bit i: slot s0 + i is this expert's */
        for (int64_t s = s0; s < s1; ++s) mine |= static_cast<uint32_t>(__ldg(topk_expert + s) == e) << (s - s0);
        int pass_total;
        int64_t rank = base + cta_exclusive_scan(__popc(mine), &pass_total);
        for (; mine; mine &= mine - 1, ++rank) {
            const int64_t s = s0 + __ffs(mine) - 1;
            if (capacity == 0 || rank < capacity) {
                slot_row[s] = static_cast<int32_t>(first + rank);
                row_slot[first + rank] = static_cast<int32_t>(s);
            }
        }
        base += pass_total;
    }
    const int64_t kept = capacity > 0 && base > capacity ? capacity : base;
    for (int64_t r = first + kept + threadIdx.x; r < end; r += blockDim.x) row_slot[r] = -1;
}

} // namespace

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */

bfp8_status bfp8_cuda_moe_route(bfp8_context *ctx, const float *logits, const float *bias, int64_t tokens,
                                int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize, float scale,
                                float *scores, int32_t *topk_expert, float *topk_weight, float *score_sum) {
    cudaStream_t stream = bfp8_stream_of(ctx);
    route_kernel<<<blocks_for(tokens, kRouteWarps), kRouteWarps * kWarp, 0, stream>>>(
        logits, bias, tokens, num_experts, top_k, score_fn == BFP8_MOE_SCORE_SIGMOID, normalize, scale, scores,
        topk_expert, topk_weight);
    BFP8_CUDA_CHECK_LAUNCH();
    if (score_sum) {
        score_sum_kernel<<<blocks_for(num_experts, 128), 128, 0, stream>>>(scores, tokens, num_experts, score_sum);
        BFP8_CUDA_CHECK_LAUNCH();
    }
    return BFP8_OK;
}

bfp8_status bfp8_cuda_moe_route_backward(bfp8_context *ctx, const float *scores, const int32_t *topk_expert,
                                         const float *d_topk_weight, const float *score_grad, int64_t tokens,
                                         int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize,
                                         float scale, float *d_logits) {
    route_backward_kernel<<<blocks_for(tokens, kRouteWarps), kRouteWarps * kWarp, 0, bfp8_stream_of(ctx)>>>(
        scores, topk_expert, d_topk_weight, score_grad, tokens, num_experts, top_k,
        score_fn == BFP8_MOE_SCORE_SIGMOID, normalize, scale, d_logits);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}


bfp8_status bfp8_cuda_moe_dispatch(bfp8_context *ctx, const int32_t *topk_expert, int64_t tokens, int top_k,
                                   int num_experts, int64_t capacity, int64_t max_rows, int32_t *slot_row,
                                   int32_t *row_slot, int64_t *offsets, int64_t *routed) {
    (void)max_rows;
    cudaStream_t stream = bfp8_stream_of(ctx);
    const int64_t slots = tokens * top_k;
    BFP8_CUDA_TRY(cudaMemsetAsync(slot_row, 0xff, static_cast<size_t>(slots) * sizeof(int32_t), stream));
    count_kernel<<<num_experts, kDispatchThreads, 0, stream>>>(topk_expert, slots, routed);
    BFP8_CUDA_CHECK_LAUNCH();
    offsets_kernel<<<1, 1, 0, stream>>>(routed, num_experts, capacity, offsets);
    BFP8_CUDA_CHECK_LAUNCH();
    place_kernel<<<num_experts, kDispatchThreads, 0, stream>>>(topk_expert, slots, capacity, offsets, slot_row,
                                                              row_slot);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}
