/*
 * gemm_fp8_epilogue.cuh - how a math warpgroup of the FP8 GEMM kernels
 * writes its part of a finished tile (fin: 64 x BN fp32 per row group, in
 * the wgmma accumulator layout) to D:
 *
 *   store_tile_registers     from registers (bf16, f32, or f32 added to
 *                            another C; any alignment of D)
 *   store_tile_tma           through a swizzled staging buffer in shared
 *                            memory and the TMA unit (a store, or an add
 *                            into D): the stores then run while the next
 *                            tile's main loop starts
 *   store_tile_tma_per_warp  the same per warp, for the row groups of 1D1D
 *                            256 x 112 tiles (a smaller staging buffer)
 */
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include "cuda/gemm_fp8_params.cuh"
#include "cuda/hopper.cuh"

namespace bfp8_gemm {

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Store the outputs (row, col) and (row, col + 1) of one thread; rows from
 * row_end on (p.m, or the end of a grouped GEMM's group) are not stored. */
__device__ __forceinline__ void store_pair(const Params &p, int row, int row_end, int col, float v0, float v1) {
    if (row >= row_end || col >= p.n) return;
    const bool both = col + 1 < p.n;
    if (p.output_kind == OUTPUT_BF16) {
        __nv_bfloat16 *d = static_cast<__nv_bfloat16 *>(p.d) + (int64_t)row * p.ldd + col;
        if (both && p.paired_stores) {
            *reinterpret_cast<uint32_t *>(d) = pack_bf16x2(v0, v1);
        } else {
            d[0] = __float2bfloat16_rn(v0);
            if (both) d[1] = __float2bfloat16_rn(v1);
        }
        return;
    }
    float *d = static_cast<float *>(p.d) + (int64_t)row * p.ldd + col;
    if (p.output_kind == OUTPUT_F32_ACCUMULATE) {
        const float *c = p.c + (int64_t)row * p.ldc + col;
        if (both && p.paired_stores) {
            const float2 cv = *reinterpret_cast<const float2 *>(c);
            v0 += cv.x;
            v1 += cv.y;
        } else {
            v0 += c[0];
            if (both) v1 += c[1];
        }
    }
    if (both && p.paired_stores) {
        *reinterpret_cast<float2 *>(d) = make_float2(v0, v1);
    } else {
        d[0] = v0;
        if (both) d[1] = v1;
    }
}

/* From registers: the thread's rows row and row + 8 (row group g: + 64 g)
 * from column n0 + col_in_chunk, 8 columns apart; rows from row_end on are
 * not stored. */
template <int RG, int BN>
__device__ __forceinline__ void store_tile_registers(const Params &p, const float (&fin)[RG * BN / 2], int row,
                                                     int row_end, int n0, int col_in_chunk) {
    constexpr int ACC = BN / 2;
#pragma unroll
    for (int g = 0; g < RG; ++g) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = n0 + 8 * j + col_in_chunk;
            const float *f = fin + g * ACC;
            store_pair(p, row + 64 * g, row_end, col, f[4 * j + 0], f[4 * j + 1]);
            store_pair(p, row + 64 * g + 8, row_end, col, f[4 * j + 2], f[4 * j + 3]);
        }
    }
}

/* Through this warpgroup's staging buffer, in the 128-byte swizzled layout of
 * the D tensor map: boxes of 64 rows x 128 bytes (64 bf16 or 32 f32
 * columns), the 16-byte unit u of row r at unit u ^ (r % 8). A warp's 8 rows
 * land in 8 different units: bf16 (4 bytes a thread) without bank
 * conflicts, f32 (8 bytes) in the 2 wavefronts its 256 bytes need. One
 * thread then stores (or adds) the boxes of the warpgroup's 64 rows from
 * m0 + 64 warpgroup; the TMA unit clips them to D. M_GROUPED: rows from
 * m_end on (the group's end) are not stored. K_GROUPED: D's map is 3-D,
 * `group` the third coordinate, and a box wholly past m_end or n_end (D's
 * rows and columns) is not stored: a 3-D reduce-add of such a box faulted on
 * the H200. */
template <int BN, int TMA_OUT, bool M_GROUPED, bool K_GROUPED>
__device__ __forceinline__ void store_tile_tma(const CUtensorMap *tmap_d, uint8_t *staging, const float (&fin)[BN / 2],
                                               int warpgroup, int warp, int lane, int col_in_chunk, int m0, int n0,
                                               int m_end, int n_end, int group) {
    using namespace bfp8_sm90;
    constexpr int ELEM = tma_out_bytes(TMA_OUT), BOX_COLS = 128 / ELEM, BOX_BYTES = 64 * 128;
    const bool leader = threadIdx.x % 128 == 0;
    if (leader) bulk_wait_read_all(); /* the previous tile's stores have read it */
    named_barrier_sync(1 + warpgroup, 128);
    const int r0 = warp * 16 + lane / 4; /* and r0 + 8, rows within the warpgroup's 64 */
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = 8 * j + col_in_chunk; /* within the tile */
        uint8_t *box = staging + (col / BOX_COLS) * BOX_BYTES;
        const int byte = (col % BOX_COLS) * ELEM, unit = byte / 16, within = byte % 16;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = r0 + 8 * h;
            uint8_t *at = box + r * 128 + ((unit ^ (r % 8)) * 16) + within;
            if constexpr (ELEM == 2)
                *reinterpret_cast<uint32_t *>(at) = pack_bf16x2(fin[4 * j + 2 * h], fin[4 * j + 2 * h + 1]);
            else
                *reinterpret_cast<float2 *>(at) = make_float2(fin[4 * j + 2 * h], fin[4 * j + 2 * h + 1]);
        }
    }
    fence_proxy_async_shared();
    named_barrier_sync(1 + warpgroup, 128);
    /* (grouped 1D2D: group ends are multiples of 128 and tiles start
     * 64-aligned, so a warpgroup's 64 rows are all in the group or none) */
    if (leader && (!M_GROUPED || m0 + warpgroup * 64 < m_end)) {
#pragma unroll
        for (int c = 0; c < BN / BOX_COLS; ++c) {
            if constexpr (K_GROUPED) {
                if (m0 + warpgroup * 64 >= m_end || n0 + BOX_COLS * c >= n_end) continue;
                if constexpr (TMA_OUT == TMA_F32_ADD)
                    tma_reduce_add_3d(tmap_d, staging + c * BOX_BYTES, n0 + BOX_COLS * c, m0 + warpgroup * 64, group);
                else
                    tma_store_3d(tmap_d, staging + c * BOX_BYTES, n0 + BOX_COLS * c, m0 + warpgroup * 64, group);
            } else if constexpr (TMA_OUT == TMA_F32_ADD)
                tma_reduce_add_2d(tmap_d, staging + c * BOX_BYTES, n0 + BOX_COLS * c, m0 + warpgroup * 64);
            else
                tma_store_2d(tmap_d, staging + c * BOX_BYTES, n0 + BOX_COLS * c, m0 + warpgroup * 64);
        }
        bulk_commit_group();
    }
}

/* Row groups (f32): each warp stores its own rows, through its own 8 rows x
 * BN / 2 part of the warpgroup's staging buffer (D's tensor map has boxes of
 * that shape): for each row group, each half (in columns) and each 8-row
 * half of the warp's 16 rows in turn, one TMA each, stored or added into D.
 * Synchronized within the warp only. (The thread's place is read again: kept
 * through the k-loop, it took a register the loop needs.) */
template <int RG, int BN, int TMA_OUT>
__device__ __forceinline__ void store_tile_tma_per_warp(const Params &p, const CUtensorMap *tmap_d,
                                                        uint8_t *warpgroup_staging, const float (&fin)[RG * BN / 2],
                                                        int warpgroup, int m0, int n0) {
    using namespace bfp8_sm90;
    constexpr int ACC = BN / 2;
    constexpr int HALF = BN / 2, HALF_J = BN / 16; /* columns, and 8-column chunks, of a half */
    const int t = (int)thread_index_read() % 128, wq = t / 32, row = (t % 32) / 4, cic = 2 * (t % 4);
    const bool leader = t % 32 == 0;
    float *staging = reinterpret_cast<float *>(warpgroup_staging) + wq * 8 * HALF;
#pragma unroll
    for (int g = 0; g < RG; ++g) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int r = 0; r < 2; ++r) { /* rows row + 8 r of the warp's 16 */
                if (leader) bulk_wait_read_all(); /* the buffer's previous store has read it */
                __syncwarp();
                const float *f = fin + g * ACC + 4 * HALF_J * h + 2 * r;
#pragma unroll
                for (int j = 0; j < HALF_J; ++j)
                    *reinterpret_cast<float2 *>(staging + row * HALF + 8 * j + cic) =
                        make_float2(f[4 * j], f[4 * j + 1]);
                fence_proxy_async_shared();
                __syncwarp();
                const int row0 = m0 + warpgroup * 64 * RG + 64 * g + 16 * wq + 8 * r, col0 = n0 + HALF * h;
                if (leader && row0 < p.m && col0 < p.n) { /* (no box wholly outside D) */
                    if constexpr (TMA_OUT == TMA_F32_ADD)
                        tma_reduce_add_2d(tmap_d, staging, col0, row0);
                    else
                        tma_store_2d(tmap_d, staging, col0, row0);
                    bulk_commit_group();
                }
            }
        }
    }
}

} /* namespace bfp8_gemm */
