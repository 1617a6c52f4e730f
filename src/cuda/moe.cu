/*
 * moe.cu - the CUDA mixture-of-experts ops that move activations, the twins
 * of src/cpu/moe_cpu.c (same signatures; the host's floating-point
 * operations in the host's order, no contraction into fma where the host
 * has none, except expf: SwiGLU matches the host's to rounding, everything
 * else bit for bit on the same inputs). No atomics: every output element has
 * one writer and a fixed order of operations. The router and the dispatch
 * tables: moe_route.cu.
 *
 *   permute / combine_backward's dyp: a CTA per permuted row, a warp per
 *                   128-column group, 4 consecutive elements a lane (amax,
 *                   scale, codes as the quantizer); 8- and 16-byte accesses
 *                   where the layouts allow, else element by element; with
 *                   d_topk_weight, the same CTA's dot product of its dy row
 *                   with its yp row (combine_backward's weight gradient)
 *   the same with the columns quantized too: moe_gather_tiles.cu, the
 *                   quantize tile kernel on tiles of gathered rows (the dots
 *                   then a CTA per token)
 *   combine         a thread per 4 output elements (or per element), fmaf over j
 *   swiglu          element-wise
 */
#include "cuda/cuda_common.cuh"
#include "cuda/hopper.cuh"
#include "cuda/moe_gather_tiles.h"
#include "formats/formats.h"

using bfp8_sm90::cvt_e4m3x2;

namespace {

constexpr int kWarp = 32;

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
/* Gather (permute, combine backward and its weight gradient), combine       */

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
    /* d_topk_weight[s] = dot(src row, yp row r) for s = row_slot[r] (NULL: none) */
    const void *yp;
    bfp8_dtype yp_dtype;
    int64_t yp_rows, yp_ld;
    float *dots;
};

constexpr int kGatherWarps = 4;


/* Four consecutive elements of a row as floats, and back. */
__device__ __forceinline__ void load4(const float *p, float v[4]) {
    const float4 q = *reinterpret_cast<const float4 *>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
__device__ __forceinline__ void load4(const uint16_t *p, float v[4]) {
    const uint2 q = *reinterpret_cast<const uint2 *>(p);
    v[0] = bfp8_decode_bf16(static_cast<uint16_t>(q.x)), v[1] = bfp8_decode_bf16(static_cast<uint16_t>(q.x >> 16));
    v[2] = bfp8_decode_bf16(static_cast<uint16_t>(q.y)), v[3] = bfp8_decode_bf16(static_cast<uint16_t>(q.y >> 16));
}
__device__ __forceinline__ void store4_bf16(uint16_t *p, const float v[4]) {
    const uint32_t lo = bfp8_encode_bf16(v[0]) | static_cast<uint32_t>(bfp8_encode_bf16(v[1])) << 16;
    const uint32_t hi = bfp8_encode_bf16(v[2]) | static_cast<uint32_t>(bfp8_encode_bf16(v[3])) << 16;
    *reinterpret_cast<uint2 *>(p) = make_uint2(lo, hi);
}

/* The 1x128 group's scale and codes of a warp's 128 values, 4 a lane (amax
 * the lane's; as the quantizer: NaN scale and 0x7f codes for a non-finite group). */
__device__ __forceinline__ void quantize_group(const gather_args &a, int64_t r, int64_t c0, int lane, const float v[4],
                                               uint32_t amax, uint8_t codes[4]) {
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
    const uint32_t lo = cvt_e4m3x2(__fmul_rn(v[0], mult), __fmul_rn(v[1], mult));
    const uint32_t hi = cvt_e4m3x2(__fmul_rn(v[2], mult), __fmul_rn(v[3], mult));
    const uint32_t packed = nonfinite ? 0x7f7f7f7fu : lo | hi << 16;
#pragma unroll
    for (int i = 0; i < 4; ++i) codes[i] = static_cast<uint8_t>(packed >> (8 * i));
}

/* The CTA's dot product of its row with yp's row r, the lanes' partial sums
 * p (each over its columns, ascending) added by an xor butterfly per warp,
 * then the warps' sums in warp order; written to dots[slot]. */
__device__ __forceinline__ void finish_dot(const gather_args &a, int64_t r, int32_t slot, float p) {
    __shared__ float warp_sum[kGatherWarps];
    for (int off = kWarp / 2; off >= 1; off /= 2) p = p + __shfl_xor_sync(0xffffffffu, p, off);
    if (threadIdx.x % kWarp == 0) warp_sum[threadIdx.x / kWarp] = p;
    __syncthreads();
    if (threadIdx.x == 0 && slot >= 0 && r < a.yp_rows) {
        float d = warp_sum[0];
        for (int w = 1; w < kGatherWarps; ++w) d = d + warp_sum[w];
        a.dots[slot] = d;
    }
}

/* yp's 4 elements at row r, column c, as floats. */
__device__ __forceinline__ void load4_yp(const gather_args &a, int64_t r, int64_t c, float v[4]) {
    if (a.yp_dtype == BFP8_F32) load4(static_cast<const float *>(a.yp) + r * a.yp_ld + c, v);
    else load4(static_cast<const uint16_t *>(a.yp) + r * a.yp_ld + c, v);
}

/* Permuted row r's slot, its token (-1: a padding row, or a slot past the tokens) and its weight. */
struct row_source {
    int32_t slot;
    int64_t token;
    float weight;
};
__device__ __forceinline__ row_source source_of(const gather_args &a, int64_t r) {
    row_source s;
    s.slot = a.row_slot[r];
    s.token = s.slot < 0 ? -1 : s.slot / a.top_k;
    if (s.token >= a.src_rows) s.token = -1;
    s.weight = s.token >= 0 && a.weights ? a.weights[s.slot] : 1.0f;
    return s;
}

/* One CTA per output row, a warp per 128-column group, 4 elements a lane. */
__global__ void gather_kernel(const gather_args a) {
    const int64_t r = blockIdx.x;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const row_source src_row = source_of(a, r);
    const int32_t slot = src_row.slot;
    const int64_t t = src_row.token;
    const float w = src_row.weight;
    float dot = 0.0f;
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
                if (a.dots && r < a.yp_rows) dot = fmaf(x, load_element(a.yp, a.yp_dtype, r * a.yp_ld + c), dot);
            }
            if (c < a.cols) {
                if (a.out) store_element(a.out, a.out_dtype, r * a.out_ld + c, v[i]);
                const uint32_t abs_bits = bfp8_bits_of(v[i]) & 0x7fffffffu;
                amax = abs_bits > amax ? abs_bits : amax;
            }
        }
        if (!a.codes) continue;
        uint8_t codes[4];
        quantize_group(a, r, c0, lane, v, amax, codes);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t c = c0 + lane * 4 + i;
            if (c < a.cols) a.codes[r * a.codes_ld + c] = codes[i];
        }
    }
    if (a.dots && t >= 0) finish_dot(a, r, slot, dot);
}

/* gather_kernel where every access can be whole: cols a multiple of 4,
 * rows 4-element aligned; bf16 out (kOut), codes (kCodes), dots (kDot). */
template <typename Src, bool kOut, bool kCodes, bool kDot>
__global__ void gather_vec_kernel(const gather_args a) {
    const int64_t r = blockIdx.x;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const row_source src_row = source_of(a, r);
    const int32_t slot = src_row.slot;
    const int64_t t = src_row.token;
    const float w = src_row.weight;
    const bool dot_row = kDot && t >= 0 && r < a.yp_rows;
    const Src *src = static_cast<const Src *>(a.src) + (t >= 0 ? t : 0) * a.src_ld;
    float dot = 0.0f;
    for (int64_t c0 = static_cast<int64_t>(warp) * 128; c0 < a.cols; c0 += kGatherWarps * 128) {
        const int64_t c = c0 + lane * 4;
        const bool inside = c < a.cols;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (t >= 0 && inside) {
            load4(src + c, v);
            if (dot_row) {
                float y[4];
                load4_yp(a, r, c, y);
#pragma unroll
                for (int i = 0; i < 4; ++i) dot = fmaf(v[i], y[i], dot);
            }
            if (a.weights)
#pragma unroll
                for (int i = 0; i < 4; ++i) v[i] = w * v[i];
        }
        if (kOut && inside) store4_bf16(static_cast<uint16_t *>(a.out) + r * a.out_ld + c, v);
        if (!kCodes) continue;
        uint32_t amax = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t abs_bits = bfp8_bits_of(v[i]) & 0x7fffffffu;
            amax = abs_bits > amax ? abs_bits : amax;
        }
        uint8_t codes[4];
        quantize_group(a, r, c0, lane, v, amax, codes);
        if (inside)
            *reinterpret_cast<uint32_t *>(a.codes + r * a.codes_ld + c) =
                codes[0] | codes[1] << 8 | codes[2] << 16 | static_cast<uint32_t>(codes[3]) << 24;
    }
    if (kDot && t >= 0) finish_dot(a, r, slot, dot);
}

/* The dots alone (combine_backward's weight gradient without a permuted
 * output): a CTA per token, warp j the dot of the token's row with yp's row
 * of slot t k + j, in gather_vec_kernel's order (column c into partial
 * (c / 128 mod 4, (c mod 128) / 4), columns ascending; each group's 32 by
 * finish_dot's butterfly, then the groups in order). The k warps read the
 * token's row together: it comes from DRAM once, not k times. */
template <typename Src, typename YP>
__global__ void slot_dots_kernel(const gather_args a, const int32_t *__restrict__ slot_row) {
    const int64_t t = blockIdx.x;
    const int j = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int32_t r = slot_row[t * a.top_k + j];
    if (r < 0 || r >= a.yp_rows) return; /* a dropped slot: its dot stays 0 */
    const Src *x = static_cast<const Src *>(a.src) + t * a.src_ld;
    const YP *y = static_cast<const YP *>(a.yp) + r * a.yp_ld;
    float part[kGatherWarps] = {};
    for (int64_t c0 = 0; c0 < a.cols; c0 += kGatherWarps * 128) {
#pragma unroll
        for (int g = 0; g < kGatherWarps; ++g) {
            const int64_t c = c0 + g * 128 + lane * 4;
            if (c >= a.cols) continue;
            float v[4], w[4];
            load4(x + c, v);
            load4(y + c, w);
#pragma unroll
            for (int e = 0; e < 4; ++e) part[g] = fmaf(v[e], w[e], part[g]);
        }
    }
    float d = 0.0f;
#pragma unroll
    for (int g = 0; g < kGatherWarps; ++g) {
        float p = part[g];
        for (int off = kWarp / 2; off >= 1; off /= 2) p = p + __shfl_xor_sync(0xffffffffu, p, off);
        d = g == 0 ? p : d + p;
    }
    if (lane == 0) a.dots[t * a.top_k + j] = d;
}

template <typename Src>
void launch_slot_dots(const gather_args &a, const int32_t *slot_row, cudaStream_t stream) {
    if (a.src_rows == 0) return;
    const dim3 grid(static_cast<unsigned>(a.src_rows)), block(static_cast<unsigned>(a.top_k * kWarp));
    if (a.yp_dtype == BFP8_F32) slot_dots_kernel<Src, float><<<grid, block, 0, stream>>>(a, slot_row);
    else slot_dots_kernel<Src, uint16_t><<<grid, block, 0, stream>>>(a, slot_row);
}

bool aligned_elements(const void *p, int64_t ld, size_t size, int n) {
    return reinterpret_cast<uintptr_t>(p) % (size * n) == 0 && ld % n == 0;
}

template <typename Src, bool kDot>
void launch_gather_vec(const gather_args &a, int64_t rows, cudaStream_t stream) {
    const unsigned grid = static_cast<unsigned>(rows);
    constexpr int threads = kGatherWarps * kWarp;
    if (a.out && a.codes) gather_vec_kernel<Src, true, true, kDot><<<grid, threads, 0, stream>>>(a);
    else if (a.out) gather_vec_kernel<Src, true, false, kDot><<<grid, threads, 0, stream>>>(a);
    else gather_vec_kernel<Src, false, true, kDot><<<grid, threads, 0, stream>>>(a); /* (the dots alone: slot_dots) */
}

/* The permuted rows of src (out and / or out_q, and quantized by columns
 * out_qt), and with yp the dot products of combine_backward's weight
 * gradient (dots, zeroed first: dropped slots have no row). With out_qt the
 * rows come from gather_tiles_kernel, the dots from a gather of their own. */
bfp8_status launch_gather(bfp8_context *ctx, const bfp8_matrix *src, const int32_t *row_slot,
                          const int32_t *slot_row, int top_k, const float *weights, bfp8_matrix *out,
                          bfp8_qmatrix *out_q, bfp8_qmatrix *out_qt, const bfp8_quantize_options *options,
                          const bfp8_matrix *yp, float *dots) {
    gather_args a = {};
    a.src = src->data, a.src_dtype = src->dtype, a.src_rows = src->rows, a.src_ld = src->ld, a.cols = src->cols;
    a.row_slot = row_slot, a.top_k = top_k, a.weights = weights;
    if (out) a.out = out->data, a.out_dtype = out->dtype, a.out_ld = out->ld;
    if (out_q) a.codes = out_q->data, a.scales = out_q->scales, a.codes_ld = out_q->ld, a.scale_ld = out_q->scale_ld;
    a.pow2 = options ? options->pow2_scales : 0;
    a.nonfinite_flag = options ? options->nonfinite_flag : nullptr;
    const int64_t rows = out ? out->rows : out_q ? out_q->rows : out_qt ? out_qt->cols : yp->rows;
    cudaStream_t stream = bfp8_stream_of(ctx);
    if (dots) BFP8_CUDA_TRY(cudaMemsetAsync(dots, 0, static_cast<size_t>(src->rows * top_k) * sizeof(float), stream));
    if (rows == 0) return BFP8_OK;
    if (out_qt) { /* (validated: rows and cols multiples of 128, every row 16-byte aligned) */
        BFP8_TRY(bfp8_cuda_moe_gather_tiles(ctx, src, rows, row_slot, top_k, weights, out, out_q, out_qt, options));
        if (!dots) return BFP8_OK;
        a.out = nullptr, a.codes = nullptr; /* the dots alone */
        out = nullptr, out_q = nullptr;
    }
    if (dots) a.yp = yp->data, a.yp_dtype = yp->dtype, a.yp_rows = yp->rows, a.yp_ld = yp->ld, a.dots = dots;
    const bool whole = a.cols % 4 == 0 && aligned_elements(a.src, a.src_ld, bfp8_dtype_size(a.src_dtype), 4) &&
                       (!out || (a.out_dtype == BFP8_BF16 && aligned_elements(a.out, a.out_ld, 2, 4))) &&
                       (!out_q || aligned_elements(a.codes, a.codes_ld, 1, 4)) &&
                       (!dots || aligned_elements(a.yp, a.yp_ld, bfp8_dtype_size(a.yp_dtype), 4));
    if (whole && !out && !out_q) { /* the dots alone (slot_row validated beside them), by token */
        if (a.src_dtype == BFP8_F32) launch_slot_dots<float>(a, slot_row, stream);
        else launch_slot_dots<uint16_t>(a, slot_row, stream);
    } else if (!whole) gather_kernel<<<static_cast<unsigned>(rows), kGatherWarps * kWarp, 0, stream>>>(a);
    else if (a.src_dtype == BFP8_F32 && dots) launch_gather_vec<float, true>(a, rows, stream);
    else if (a.src_dtype == BFP8_F32) launch_gather_vec<float, false>(a, rows, stream);
    else if (dots) launch_gather_vec<uint16_t, true>(a, rows, stream);
    else launch_gather_vec<uint16_t, false>(a, rows, stream);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

/* y = sum_j w_j yp[row of slot j] (+ y), a thread per element. */
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

/* combine_kernel for an f32 y, a thread per 4 elements (cols a multiple of 4, rows aligned). */
template <typename YP>
__global__ void combine_vec_kernel(const YP *__restrict__ yp, int64_t yp_rows, int64_t yp_ld,
                                   const int32_t *__restrict__ slot_row, const float *__restrict__ weights, int top_k,
                                   int accumulate, float *__restrict__ y, int64_t tokens, int64_t cols, int64_t y_ld) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, quads = cols / 4;
    if (i >= tokens * quads) return;
    const int64_t t = i / quads, c = (i % quads) * 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (accumulate) load4(y + t * y_ld + c, acc);
    for (int j = 0; j < top_k; ++j) {
        const int64_t s = t * top_k + j, row = __ldg(slot_row + s);
        if (row < 0 || row >= yp_rows) continue;
        const float w = weights ? __ldg(weights + s) : 1.0f;
        float v[4];
        load4(yp + row * yp_ld + c, v);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[e] = fmaf(w, v[e], acc[e]);
    }
    *reinterpret_cast<float4 *>(y + t * y_ld + c) = make_float4(acc[0], acc[1], acc[2], acc[3]);
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

bfp8_status bfp8_cuda_moe_permute(bfp8_context *ctx, const bfp8_matrix *x, const int32_t *row_slot, int top_k,
                                  bfp8_matrix *xp, bfp8_qmatrix *xp_q, bfp8_qmatrix *xp_qt,
                                  const bfp8_quantize_options *options) {
    return launch_gather(ctx, x, row_slot, nullptr, top_k, nullptr, xp, xp_q, xp_qt, options, nullptr, nullptr);
}

bfp8_status bfp8_cuda_moe_combine(bfp8_context *ctx, const bfp8_matrix *yp, const int32_t *slot_row,
                                  const float *topk_weight, int top_k, int accumulate, bfp8_matrix *y) {
    cudaStream_t stream = bfp8_stream_of(ctx);
    const bool whole = y->dtype == BFP8_F32 && y->cols % 4 == 0 && aligned_elements(y->data, y->ld, 4, 4) &&
                       aligned_elements(yp->data, yp->ld, bfp8_dtype_size(yp->dtype), 4);
    if (!whole) {
        combine_kernel<<<blocks_for(y->rows * y->cols, kThreads), kThreads, 0, stream>>>(
            yp->data, yp->dtype, yp->rows, yp->ld, slot_row, topk_weight, top_k, accumulate, y->data, y->dtype,
            y->rows, y->cols, y->ld);
    } else if (yp->dtype == BFP8_F32) {
        combine_vec_kernel<float><<<blocks_for(y->rows * y->cols / 4, kThreads), kThreads, 0, stream>>>(
            static_cast<const float *>(yp->data), yp->rows, yp->ld, slot_row, topk_weight, top_k, accumulate,
            static_cast<float *>(y->data), y->rows, y->cols, y->ld);
    } else {
        combine_vec_kernel<uint16_t><<<blocks_for(y->rows * y->cols / 4, kThreads), kThreads, 0, stream>>>(
            static_cast<const uint16_t *>(yp->data), yp->rows, yp->ld, slot_row, topk_weight, top_k, accumulate,
            static_cast<float *>(y->data), y->rows, y->cols, y->ld);
    }
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

bfp8_status bfp8_cuda_moe_combine_backward(bfp8_context *ctx, const bfp8_matrix *dy, const bfp8_matrix *yp,
                                           const int32_t *row_slot, const int32_t *slot_row, const float *topk_weight,
                                           int top_k, bfp8_matrix *dyp, bfp8_qmatrix *dyp_q, bfp8_qmatrix *dyp_qt,
                                           const bfp8_quantize_options *options, float *d_topk_weight) {
    return launch_gather(ctx, dy, row_slot, slot_row, top_k, topk_weight, dyp, dyp_q, dyp_qt, options, yp,
                         d_topk_weight);
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
