/*
 * moe.cu - the CUDA mixture-of-experts ops, the twins of src/cpu/moe_cpu.c
 * (same signatures; the host's floating-point operations in the host's
 * order, no contraction into fma where the host has none, except expf and the
 * softmax's sum over the experts (a warp reduction): scores, weights and
 * SwiGLU match the host's to rounding, everything else bit for bit on the
 * same inputs). No atomics: every output element has one writer and a fixed
 * order of operations.
 *
 *   route           a warp per token: scores, then k rounds of a warp arg-max
 *                   (value, then lower index); score sums a thread per expert
 *   route_backward  a warp per token (the k-term and the softmax dot by lane 0,
 *                   in the host's order)
 *   dispatch        a CTA per expert counts its slots; one thread makes the
 *                   offsets; a CTA per expert ranks its slots in slot order
 *                   (ballot scans) and writes both tables and its padding
 *   permute / combine_backward's dyp: a CTA per permuted row, a warp per
 *                   128-column group (amax, scale, codes as the quantizer)
 *   combine         a thread per output element, fmaf over j
 *   d_topk_weight   a warp per slot: 32 strided partial sums, xor butterfly
 *   swiglu          element-wise
 */
#include "cuda/cuda_common.cuh"
#include "formats/formats.h"

namespace {

constexpr int kWarp = 32;
constexpr int kRouteWarps = 8;
constexpr int kMaxTopK = 16;
constexpr int kScanThreads = 256;

__device__ __forceinline__ float load_element(const void *p, bfp8_dtype dtype, int64_t i) {
    return dtype == BFP8_F32 ? static_cast<const float *>(p)[i] : bfp8_decode_bf16(static_cast<const uint16_t *>(p)[i]);
}

__device__ __forceinline__ void store_element(void *p, bfp8_dtype dtype, int64_t i, float v) {
    if (dtype == BFP8_F32)
        static_cast<float *>(p)[i] = v;
    else
        static_cast<uint16_t *>(p)[i] = bfp8_encode_bf16(v);
}

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

__global__ void count_kernel(const int32_t *__restrict__ topk_expert, int64_t slots, int64_t *__restrict__ routed) {
    __shared__ int64_t warp_counts[kScanThreads / kWarp];
    const int e = blockIdx.x;
    int64_t count = 0;
    for (int64_t s = threadIdx.x; s < slots; s += blockDim.x) count += topk_expert[s] == e;
    for (int off = kWarp / 2; off >= 1; off /= 2) count += __shfl_xor_sync(0xffffffffu, count, off);
    if (threadIdx.x % kWarp == 0) warp_counts[threadIdx.x / kWarp] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        int64_t total = 0;
        for (int w = 0; w < kScanThreads / kWarp; ++w) total += warp_counts[w];
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

/* Expert blockIdx.x's slots in slot order: rank by a block-wide ballot scan. */
__global__ void place_kernel(const int32_t *__restrict__ topk_expert, int64_t slots, int64_t capacity,
                             const int64_t *__restrict__ offsets, int32_t *__restrict__ slot_row,
                             int32_t *__restrict__ row_slot) {
    __shared__ int warp_base[kScanThreads / kWarp + 1];
    const int e = blockIdx.x, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int64_t first = offsets[e], end = offsets[e + 1];
    int64_t base = 0; /* slots of this expert before the chunk */
    for (int64_t c0 = 0; c0 < slots; c0 += kScanThreads) {
        const int64_t s = c0 + threadIdx.x;
        const bool mine = s < slots && topk_expert[s] == e;
        const unsigned ballot = __ballot_sync(0xffffffffu, mine);
        if (lane == 0) warp_base[warp + 1] = __popc(ballot);
        __syncthreads();
        if (threadIdx.x == 0) {
            warp_base[0] = 0;
            for (int w = 1; w <= kScanThreads / kWarp; ++w) warp_base[w] += warp_base[w - 1];
        }
        __syncthreads();
        if (mine) {
            const int64_t rank = base + warp_base[warp] + __popc(ballot & ((1u << lane) - 1u));
            if (capacity == 0 || rank < capacity) {
                slot_row[s] = static_cast<int32_t>(first + rank);
                row_slot[first + rank] = static_cast<int32_t>(s);
            }
        }
        base += warp_base[kScanThreads / kWarp];
        __syncthreads();
    }
    const int64_t kept = capacity > 0 && base > capacity ? capacity : base;
    for (int64_t r = first + kept + threadIdx.x; r < end; r += blockDim.x) row_slot[r] = -1;
}

/* ------------------------------------------------------------------------ */
/* Gather (permute, combine backward), combine, weight gradient              */

struct gather_args {
    const void *src;
    bfp8_dtype src_dtype;
    int64_t src_rows, src_ld, cols;
    const int32_t *row_slot;
    int top_k;
    const float *weights; /* NULL: 1 */
    void *out;            /* NULL: none */
    bfp8_dtype out_dtype;
    int64_t out_ld;
    uint8_t *codes; /* NULL: none */
    float *scales;
    int64_t codes_ld, scale_ld;
    int pow2;
    uint32_t *nonfinite_flag;
};

constexpr int kGatherWarps = 4;

/* One CTA per output row, a warp per 128-column group, 4 elements a lane. */
__global__ void gather_kernel(const gather_args a) {
    const int64_t r = blockIdx.x;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int32_t slot = a.row_slot[r];
    int64_t t = slot < 0 ? -1 : slot / a.top_k;
    if (t >= a.src_rows) t = -1;
    const float w = t >= 0 && a.weights ? a.weights[slot] : 1.0f;
    for (int64_t c0 = static_cast<int64_t>(warp) * 128; c0 < a.cols; c0 += kGatherWarps * 128) {
        float v[4];
        uint32_t amax = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t c = c0 + lane * 4 + i;
            v[i] = 0.0f;
            if (t >= 0 && c < a.cols) {
                const float x = load_element(a.src, a.src_dtype, t * a.src_ld + c);
                v[i] = a.weights ? w * x : x;
            }
            if (c < a.cols) {
                if (a.out) store_element(a.out, a.out_dtype, r * a.out_ld + c, v[i]);
                const uint32_t abs_bits = bfp8_bits_of(v[i]) & 0x7fffffffu;
                amax = abs_bits > amax ? abs_bits : amax;
            }
        }
        if (!a.codes) continue;
        for (int off = kWarp / 2; off >= 1; off /= 2) {
            const uint32_t other = __shfl_xor_sync(0xffffffffu, amax, off);
            amax = other > amax ? other : amax;
        }
        const bool nonfinite = bfp8_amax_bits_nonfinite(amax);
        const float mult = nonfinite ? 0.0f : bfp8_scale_multiplier(bfp8_float_of(amax), a.pow2);
        if (lane == 0) {
            a.scales[(c0 / 128) * a.scale_ld + r] = nonfinite ? bfp8_float_of(BFP8_NAN_SCALE_BITS) : 1.0f / mult;
            if (nonfinite && a.nonfinite_flag) *a.nonfinite_flag = 1u;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t c = c0 + lane * 4 + i;
            if (c < a.cols) a.codes[r * a.codes_ld + c] = nonfinite ? 0x7f : bfp8_encode_e4m3(v[i] * mult);
        }
    }
}

bfp8_status launch_gather(bfp8_context *ctx, const bfp8_matrix *src, const int32_t *row_slot, int top_k,
                          const float *weights, bfp8_matrix *out, bfp8_qmatrix *out_q,
                          const bfp8_quantize_options *options) {
    gather_args a = {};
    a.src = src->data, a.src_dtype = src->dtype, a.src_rows = src->rows, a.src_ld = src->ld, a.cols = src->cols;
    a.row_slot = row_slot, a.top_k = top_k, a.weights = weights;
    if (out) a.out = out->data, a.out_dtype = out->dtype, a.out_ld = out->ld;
    if (out_q) a.codes = out_q->data, a.scales = out_q->scales, a.codes_ld = out_q->ld, a.scale_ld = out_q->scale_ld;
    a.pow2 = options ? options->pow2_scales : 0;
    a.nonfinite_flag = options ? options->nonfinite_flag : nullptr;
    const int64_t rows = out ? out->rows : out_q->rows;
    gather_kernel<<<static_cast<unsigned>(rows), kGatherWarps * kWarp, 0, bfp8_stream_of(ctx)>>>(a);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

__global__ void combine_kernel(const void *__restrict__ yp, bfp8_dtype yp_dtype, int64_t yp_rows, int64_t yp_ld,
                               const int32_t *__restrict__ slot_row, const float *__restrict__ weights, int top_k,
                               int accumulate, void *__restrict__ y, bfp8_dtype y_dtype, int64_t tokens, int64_t cols,
                               int64_t y_ld) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= tokens * cols) return;
    const int64_t t = i / cols, c = i % cols;
    float acc = accumulate ? load_element(y, y_dtype, t * y_ld + c) : 0.0f;
    for (int j = 0; j < top_k; ++j) {
        const int64_t s = t * top_k + j, row = slot_row[s];
        if (row < 0 || row >= yp_rows) continue;
        acc = fmaf(weights ? weights[s] : 1.0f, load_element(yp, yp_dtype, row * yp_ld + c), acc);
    }
    store_element(y, y_dtype, t * y_ld + c, acc);
}

constexpr int kDotWarps = 8;

__global__ void weight_grad_kernel(const void *__restrict__ dy, bfp8_dtype dy_dtype, int64_t dy_ld,
                                   const void *__restrict__ yp, bfp8_dtype yp_dtype, int64_t yp_rows, int64_t yp_ld,
                                   const int32_t *__restrict__ slot_row, int top_k, int64_t slots, int64_t cols,
                                   float *__restrict__ d_topk_weight) {
    const int64_t s = static_cast<int64_t>(blockIdx.x) * kDotWarps + threadIdx.x / kWarp;
    const int lane = threadIdx.x % kWarp;
    if (s >= slots) return;
    const int64_t t = s / top_k, row = slot_row[s];
    if (row < 0 || row >= yp_rows) {
        if (lane == 0) d_topk_weight[s] = 0.0f;
        return;
    }
    float p = 0.0f;
    for (int64_t c = lane; c < cols; c += kWarp)
        p = fmaf(load_element(dy, dy_dtype, t * dy_ld + c), load_element(yp, yp_dtype, row * yp_ld + c), p);
    for (int off = kWarp / 2; off >= 1; off /= 2) p = p + __shfl_xor_sync(0xffffffffu, p, off);
    if (lane == 0) d_topk_weight[s] = p;
}

/* ------------------------------------------------------------------------ */
/* SwiGLU                                                                    */

__global__ void swiglu_kernel(const float *__restrict__ gu, int64_t gu_ld, void *__restrict__ h, bfp8_dtype h_dtype,
                              int64_t h_ld, int64_t rows, int64_t f) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * f) return;
    const int64_t r = i / f, c = i % f;
    const float g = gu[r * gu_ld + c], u = gu[r * gu_ld + f + c];
    store_element(h, h_dtype, r * h_ld + c, g / (1.0f + expf(-g)) * u);
}

__global__ void swiglu_backward_kernel(const float *__restrict__ gu, int64_t gu_ld, const float *__restrict__ dh,
                                       int64_t dh_ld, void *__restrict__ dgu, bfp8_dtype dgu_dtype, int64_t dgu_ld,
                                       int64_t rows, int64_t f) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * f) return;
    const int64_t r = i / f, c = i % f;
    const float g = gu[r * gu_ld + c], u = gu[r * gu_ld + f + c], d = dh[r * dh_ld + c];
    const float sig = 1.0f / (1.0f + expf(-g)), silu = g * sig;
    store_element(dgu, dgu_dtype, r * dgu_ld + c, d * u * (sig * (1.0f + __fmul_rn(g, 1.0f - sig))));
    store_element(dgu, dgu_dtype, r * dgu_ld + f + c, d * silu);
}

constexpr int kThreads = 256;

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
    count_kernel<<<num_experts, kScanThreads, 0, stream>>>(topk_expert, slots, routed);
    BFP8_CUDA_CHECK_LAUNCH();
    offsets_kernel<<<1, 1, 0, stream>>>(routed, num_experts, capacity, offsets);
    BFP8_CUDA_CHECK_LAUNCH();
    place_kernel<<<num_experts, kScanThreads, 0, stream>>>(topk_expert, slots, capacity, offsets, slot_row, row_slot);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

bfp8_status bfp8_cuda_moe_permute(bfp8_context *ctx, const bfp8_matrix *x, const int32_t *row_slot, int top_k,
                                  bfp8_matrix *xp, bfp8_qmatrix *xp_q, const bfp8_quantize_options *options) {
    return launch_gather(ctx, x, row_slot, top_k, nullptr, xp, xp_q, options);
}

bfp8_status bfp8_cuda_moe_combine(bfp8_context *ctx, const bfp8_matrix *yp, const int32_t *slot_row,
                                  const float *topk_weight, int top_k, int accumulate, bfp8_matrix *y) {
    combine_kernel<<<blocks_for(y->rows * y->cols, kThreads), kThreads, 0, bfp8_stream_of(ctx)>>>(
        yp->data, yp->dtype, yp->rows, yp->ld, slot_row, topk_weight, top_k, accumulate, y->data, y->dtype, y->rows,
        y->cols, y->ld);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

bfp8_status bfp8_cuda_moe_combine_backward(bfp8_context *ctx, const bfp8_matrix *dy, const bfp8_matrix *yp,
                                           const int32_t *row_slot, const int32_t *slot_row, const float *topk_weight,
                                           int top_k, bfp8_matrix *dyp, bfp8_qmatrix *dyp_q,
                                           const bfp8_quantize_options *options, float *d_topk_weight) {
    if (dyp || dyp_q) BFP8_TRY(launch_gather(ctx, dy, row_slot, top_k, topk_weight, dyp, dyp_q, options));
    if (!d_topk_weight) return BFP8_OK;
    const int64_t slots = dy->rows * top_k;
    weight_grad_kernel<<<blocks_for(slots, kDotWarps), kDotWarps * kWarp, 0, bfp8_stream_of(ctx)>>>(
        dy->data, dy->dtype, dy->ld, yp->data, yp->dtype, yp->rows, yp->ld, slot_row, top_k, slots, dy->cols,
        d_topk_weight);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

bfp8_status bfp8_cuda_moe_swiglu(bfp8_context *ctx, const bfp8_matrix *gu, bfp8_matrix *h) {
    swiglu_kernel<<<blocks_for(h->rows * h->cols, kThreads), kThreads, 0, bfp8_stream_of(ctx)>>>(
        static_cast<const float *>(gu->data), gu->ld, h->data, h->dtype, h->ld, h->rows, h->cols);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

bfp8_status bfp8_cuda_moe_swiglu_backward(bfp8_context *ctx, const bfp8_matrix *gu, const bfp8_matrix *dh,
                                          bfp8_matrix *dgu) {
    swiglu_backward_kernel<<<blocks_for(dh->rows * dh->cols, kThreads), kThreads, 0, bfp8_stream_of(ctx)>>>(
        static_cast<const float *>(gu->data), gu->ld, static_cast<const float *>(dh->data), dh->ld, dgu->data,
        dgu->dtype, dgu->ld, dh->rows, dh->cols);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}
