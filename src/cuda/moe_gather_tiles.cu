/*
 * moe_gather_tiles.cu - the MoE permutation into both 1x128 layouts
 * (bfp8_moe_permute and bfp8_moe_combine_backward with the columns' codes):
 * the quantize tile kernel (quantize_tiles_kernel.cuh) on 128 x 128 tiles
 * whose rows are gathered. A CTA per tile of the permuted matrix: 128 of its
 * threads find the tile's source rows (row_slot / top_k, -1 for padding)
 * and routing weights, then every thread stages its 16-byte chunks of those
 * rows by cp.async (padding rows as zeros), and quantize_tile writes the
 * codes by rows and by columns from the block each thread holds, the
 * routing weights applied to it first (kScaled). The codes and scales are
 * bit for bit bfp8_quantize_1x128's of the permuted (weighted) rows.
 */
#include <atomic>

#include "cuda/moe_gather_tiles.h"
#include "cuda/quantize_launch.cuh"

namespace {

/* Where a gathered tile's rows come from: permuted row r is source row
 * row_slot[r] / top_k (zeros for a padding row or a slot past the source's
 * rows), times weights[row_slot[r]] when the kernel scales. */
struct gather_rows {
    const int32_t *row_slot;
    int top_k;
    int64_t src_rows;
    const float *weights;
    void *out; /* NULL, or the scaled rows as well (bf16 or f32) */
    bfp8_dtype out_dtype;
    int64_t out_ld;
};

template <typename In> struct gathered_shape {
    static constexpr int kRowsOffset = (bfp8_quant::kernel_shape<In>::kSmemBytes + 15) / 16 * 16;
    static constexpr int kSmemBytes = kRowsOffset + bfp8_quant::kTile * (8 + 4);
};

/* The scaled rows of a staged tile to g.out, 16 staged bytes a thread per step. */
template <typename In>
__device__ __forceinline__ void copy_staged_rows(const gather_rows &g, const bfp8_quant::tile_pos &p,
                                                 const uint8_t *stage, const float *row_scale) {
    using namespace bfp8_quant;
    constexpr int kElems = 16 / (int)sizeof(In), kChunksPerRow = kTile / kElems;
    for (int id = (int)threadIdx.x; id < kTile * kChunksPerRow; id += kThreads) {
        const int lr = id / kChunksPerRow, q = id % kChunksPerRow;
        const uint4 w = *reinterpret_cast<const uint4 *>(stage + lr * kTile * (int)sizeof(In) +
                                                         staged_chunk<In>(q) * 16);
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
        float v[kElems];
#pragma unroll
        for (int e = 0; e < kElems; ++e)
            v[e] = sizeof(In) == 4 ? __uint_as_float(words[e])
                                   : bfp8_decode_bf16(static_cast<uint16_t>(words[e / 2] >> (16 * (e % 2))));
        const int64_t at = (p.r0 + lr) * g.out_ld + p.c0 + q * kElems;
        for (int e0 = 0; e0 < kElems; e0 += 4) {
            float o[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) o[e] = row_scale ? __fmul_rn(row_scale[lr], v[e0 + e]) : v[e0 + e];
            if (g.out_dtype == BFP8_BF16) {
                const uint32_t lo = bfp8_encode_bf16(o[0]) | static_cast<uint32_t>(bfp8_encode_bf16(o[1])) << 16;
                const uint32_t hi = bfp8_encode_bf16(o[2]) | static_cast<uint32_t>(bfp8_encode_bf16(o[3])) << 16;
                *reinterpret_cast<uint2 *>(static_cast<uint16_t *>(g.out) + at + e0) = make_uint2(lo, hi);
            } else
                *reinterpret_cast<float4 *>(static_cast<float *>(g.out) + at + e0) =
                    make_float4(o[0], o[1], o[2], o[3]);
        }
    }
}

/* A CTA per 128 x 128 tile of the permuted matrix: its 128 source rows
 * found (threads 0..127), staged by 16-byte cp.async (padding rows as
 * zeros), then quantized by rows (kQ) and by columns as the tile kernel does
 * for a dense x; kScaled: times the routing weights first. */
template <typename In, bool kQ, bool kScaled>
__global__ void __launch_bounds__(bfp8_quant::kThreads, kScaled ? 2 : bfp8_quant::kernel_shape<In>::kMinBlocks)
    gather_tiles_kernel(const __grid_constant__ bfp8_quant::tile_args a, const __grid_constant__ gather_rows g) {
    using namespace bfp8_quant;
    constexpr int kElems = 16 / (int)sizeof(In), kChunksPerRow = kTile / kElems, kRowStep = kThreads / kChunksPerRow;
    constexpr int kRowBytes = kTile * (int)sizeof(In);
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t *const scratch = smem + kernel_shape<In>::kStageBytes;
    int64_t *const row_at = reinterpret_cast<int64_t *>(smem + gathered_shape<In>::kRowsOffset);
    float *const row_scale = reinterpret_cast<float *>(row_at + kTile);
    griddep_wait(); /* (a programmatic dependent launch: the previous kernel wrote row_slot or x) */
    griddep_launch_dependents();
    const tile_pos p = tile_at(a, blockIdx.x); /* the grid: a CTA per tile */
    if (threadIdx.x < kTile) {
        const int32_t slot = g.row_slot[p.r0 + threadIdx.x];
        const int64_t t = slot < 0 ? -1 : slot / g.top_k;
        const bool valid = t >= 0 && t < g.src_rows;
        row_at[threadIdx.x] = valid ? t * a.x_ld : -1;
        row_scale[threadIdx.x] = valid && kScaled ? g.weights[slot] : 1.0f;
    }
    __syncthreads();
    {
        const int lr0 = (int)threadIdx.x / kChunksPerRow, q = (int)threadIdx.x % kChunksPerRow;
        const In *x = static_cast<const In *>(a.x) + p.c0 + q * kElems;
#pragma unroll
        for (int s = 0; s < kTile / kRowStep; ++s) {
            const int lr = lr0 + s * kRowStep;
            const int64_t at = row_at[lr];
            uint8_t *dst = smem + lr * kRowBytes + staged_chunk<In>(q) * 16;
            if (at >= 0) cp_async_16(dst, x + at);
            else *reinterpret_cast<uint4 *>(dst) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    if (g.out) copy_staged_rows<In>(g, p, smem, kScaled ? row_scale : nullptr);
    quantize_tile<In, false, kQ, true, true, true, kScaled>(a, p, smem, scratch, row_scale);
}

template <typename In, bool kQ, bool kScaled>
bfp8_status launch_gather_tiles(bfp8_context *ctx, const bfp8_quant::tile_args &a, const gather_rows &g) {
    auto kernel = gather_tiles_kernel<In, kQ, kScaled>;
    constexpr int smem = gathered_shape<In>::kSmemBytes;
    static std::atomic<bool> attribute_set[64];
    const int device = ctx->device >= 0 && ctx->device < 64 ? ctx->device : 0;
    if (!attribute_set[device].load(std::memory_order_acquire)) {
        BFP8_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        attribute_set[device].store(true, std::memory_order_release);
    }
    if (a.num_tiles == 0) return BFP8_OK;
    cudaLaunchAttribute pdl;
    const cudaLaunchConfig_t config = bfp8_quant::tile_launch_config(ctx, a.num_tiles, smem, &pdl);
    BFP8_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, a, g));
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

} /* namespace */

bfp8_status bfp8_cuda_moe_gather_tiles(bfp8_context *ctx, const bfp8_matrix *src, int64_t rows,
                                       const int32_t *row_slot, int top_k, const float *weights,
                                       const bfp8_matrix *out, const bfp8_qmatrix *out_q, const bfp8_qmatrix *out_qt,
                                       const bfp8_quantize_options *options) {
    gather_rows g = {row_slot, top_k, src->rows, weights, nullptr, BFP8_BF16, 0};
    if (out) g.out = out->data, g.out_dtype = out->dtype, g.out_ld = out->ld;
    bfp8_matrix permuted = *src;
    permuted.rows = rows;
    bool aligned;
    const bfp8_quant::tile_args a = bfp8_quant::make_tile_args(&permuted, out_q, out_qt, options, &aligned);
    if (out) aligned = aligned && (uintptr_t)out->data % 16 == 0 && (out->ld * bfp8_dtype_size(out->dtype)) % 16 == 0;
    if (!aligned) return bfp8_fail(BFP8_ERR_ALIGNMENT, "moe permutation in both layouts: rows not 16-byte aligned");
    if (a.num_tiles > INT32_MAX) return bfp8_fail(BFP8_ERR_SHAPE, "moe permutation in both layouts: too many tiles");
    const bool f32 = src->dtype == BFP8_F32;
    if (out_q && weights) return f32 ? launch_gather_tiles<float, true, true>(ctx, a, g)
                                     : launch_gather_tiles<uint16_t, true, true>(ctx, a, g);
    if (out_q) return f32 ? launch_gather_tiles<float, true, false>(ctx, a, g)
                          : launch_gather_tiles<uint16_t, true, false>(ctx, a, g);
    if (weights) return f32 ? launch_gather_tiles<float, false, true>(ctx, a, g)
                            : launch_gather_tiles<uint16_t, false, true>(ctx, a, g);
    return f32 ? launch_gather_tiles<float, false, false>(ctx, a, g)
               : launch_gather_tiles<uint16_t, false, false>(ctx, a, g);
}
