/*
 * quantize_tile_io.cuh - how the quantize tile kernel (quantize_tiles_kernel.cuh)
 * moves a 128 x 128 tile: its place in x, staging it in shared memory by
 * cp.async, the 8 x 8 block of it a thread holds (bf16 or f32, as raw
 * bits), and the stores of the codes, as stored and transposed.
 *
 * Aligned (kAligned): x, both code matrices and their leading dimensions
 * allow 16-byte accesses. Otherwise every load and store is scalar, with
 * the same algorithm. Ragged tiles use the scalar access for the partial
 * pieces only; elements outside x are read as zero (they cannot raise a
 * max of |x|) and never written.
 */
#pragma once

#include "cuda/cuda_common.cuh"
#include "formats/formats.h"

#ifndef BFP8_QUANT_EMULATION
#include "cuda/hopper.cuh"
#endif

namespace bfp8_quant {

/* tests/quantize/quantize_emulated.cpp runs the kernel on CPU threads, to
 * check its indexing without a GPU, and supplies the instructions of
 * hopper.cuh itself. */
#ifndef BFP8_QUANT_EMULATION
using namespace bfp8_sm90;
#endif

constexpr int kTile = 128;
constexpr int kThreads = 256;
/* Kernel arguments. "q" is the code matrix laid out like x (out_rows or the
 * 128x128 out), "t" the one laid out like x^T (out_cols or out_t). */
struct tile_args {
    const void *x;
    int64_t x_ld, rows, cols;
    uint8_t *q;
    int64_t q_ld;
    float *q_scales;
    int64_t q_scale_ld;
    uint8_t *t;
    int64_t t_ld;
    float *t_scales;
    int64_t t_scale_ld;
    uint32_t *nonfinite_flag;
    int pow2;
    int64_t col_tiles, num_tiles;
    int64_t warm_ctas; /* CTAs below this (the first resident ones) ask L2 for kWarmRows rows of their tile */
    int64_t t_group_rows; /* 0, or x is a stack of matrices of this many rows, t the stack of their transposes */
};

/* ------------------------------------------------------------------------ */
/* Input formats: the 8 x 8 block a thread holds, as raw bits                */

/* Position of 16-byte chunk q inside a staged tile row. f32 rows (32 chunks)
 * flip bit 0 in every second group of 8 chunks: a thread reads chunks 2cc
 * and 2cc+1, and without the flip 8 neighbouring threads would hit only 4 of
 * the 8 bank groups. */
template <typename In> __device__ __forceinline__ int staged_chunk(int q) {
    return sizeof(In) == 4 ? q ^ ((q >> 3) & 1) : q;
}

template <typename In> struct block8x8;

template <> struct block8x8<uint16_t> { /* bf16: word p of row i holds columns 2p, 2p+1 */
    uint32_t w[8][4];

    __device__ __forceinline__ void load(const uint8_t *stage, int rb, int cc) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint4 v = *reinterpret_cast<const uint4 *>(stage + (rb * 8 + i) * 256 + cc * 16);
            w[i][0] = v.x; w[i][1] = v.y; w[i][2] = v.z; w[i][3] = v.w;
        }
    }
    __device__ __forceinline__ float at(int i, int j) const {
        const uint32_t v = w[i][j >> 1];
        return __uint_as_float((j & 1) ? (v & 0xffff0000u) : (v << 16));
    }
    /* Max |x| bits (as fp32 bits) of each of the 8 rows and 8 columns. */
    __device__ __forceinline__ void amax(uint32_t (&row)[8], uint32_t (&col)[8]) const {
        uint32_t colp[4];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint32_t m = 0;
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const uint32_t a = w[i][p] & 0x7fff7fffu;
                m = __vmaxu2(m, a);
                colp[p] = i == 0 ? a : __vmaxu2(colp[p], a);
            }
            row[i] = max(m << 16, m & 0xffff0000u);
        }
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            col[2 * p] = colp[p] << 16;
            col[2 * p + 1] = colp[p] & 0xffff0000u;
        }
    }
    __device__ __forceinline__ uint32_t amax_all() const {
        uint32_t m = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int p = 0; p < 4; ++p) m = __vmaxu2(m, w[i][p] & 0x7fff7fffu);
        return max(m << 16, m & 0xffff0000u);
    }
};

template <> struct block8x8<float> { /* f32: word j of row i is column j */
    uint32_t w[8][8];

    __device__ __forceinline__ void load(const uint8_t *stage, int rb, int cc) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint8_t *row = stage + (rb * 8 + i) * 512;
            const uint4 a = *reinterpret_cast<const uint4 *>(row + staged_chunk<float>(2 * cc) * 16);
            const uint4 b = *reinterpret_cast<const uint4 *>(row + staged_chunk<float>(2 * cc + 1) * 16);
            w[i][0] = a.x; w[i][1] = a.y; w[i][2] = a.z; w[i][3] = a.w;
            w[i][4] = b.x; w[i][5] = b.y; w[i][6] = b.z; w[i][7] = b.w;
        }
    }
    /* The block of a staged tile of In, row i times row_scale[rb * 8 + i] (fp32, one rounding). */
    template <typename In>
    __device__ __forceinline__ void load_scaled(const uint8_t *stage, int rb, int cc, const float *row_scale) {
        if constexpr (sizeof(In) == 4) {
            load(stage, rb, cc);
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) w[i][j] = __float_as_uint(__fmul_rn(row_scale[rb * 8 + i], at(i, j)));
        } else {
            block8x8<uint16_t> b;
            b.load(stage, rb, cc);
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) w[i][j] = __float_as_uint(__fmul_rn(row_scale[rb * 8 + i], b.at(i, j)));
        }
    }
    __device__ __forceinline__ float at(int i, int j) const { return __uint_as_float(w[i][j]); }
    __device__ __forceinline__ void amax(uint32_t (&row)[8], uint32_t (&col)[8]) const {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint32_t m = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint32_t a = w[i][j] & 0x7fffffffu;
                m = max(m, a);
                col[j] = i == 0 ? a : max(col[j], a);
            }
            row[i] = m;
        }
    }
    __device__ __forceinline__ uint32_t amax_all() const {
        uint32_t m = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) m = max(m, w[i][j] & 0x7fffffffu);
        return m;
    }
};

/* ------------------------------------------------------------------------ */
/* Tile geometry and staging                                                 */

struct tile_pos {
    int64_t tr, tc;   /* tile row and column */
    int64_t r0, c0;   /* first element */
    int nr, nc;       /* valid rows and columns, 1..128 */
};

__device__ __forceinline__ tile_pos tile_at(const tile_args &a, int64_t tile) {
    tile_pos p;
    p.tr = tile / a.col_tiles;
    p.tc = tile - p.tr * a.col_tiles;
    p.r0 = p.tr * kTile;
    p.c0 = p.tc * kTile;
    p.nr = (int)min((int64_t)kTile, a.rows - p.r0);
    p.nc = (int)min((int64_t)kTile, a.cols - p.c0);
    return p;
}

/* Where tile p goes in t: p itself (x^T), or in a stack (t_group_rows) at
 * its place in its own matrix's transpose, rows [g cols, (g + 1) cols) of t. */
__device__ __forceinline__ tile_pos transposed_pos(const tile_args &a, tile_pos p) {
    if (a.t_group_rows > 0) {
        const int64_t g = p.r0 / a.t_group_rows;
        p.r0 -= g * a.t_group_rows;
        p.tr -= g * (a.t_group_rows / kTile);
        p.c0 += g * a.cols;
        p.tc += g * a.col_tiles;
    }
    return p;
}

/* n (0..16/sizeof(In)) leading elements of a chunk, the rest zero, stored as one 16-byte word. */
template <typename In>
__device__ __forceinline__ void stage_chunk_scalar(uint8_t *dst, const In *src, int n) {
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    if (sizeof(In) == 4) {
        const uint32_t *s = reinterpret_cast<const uint32_t *>(src);
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (e < n) w[e] = s[e];
    } else {
        const uint16_t *s = reinterpret_cast<const uint16_t *>(src);
#pragma unroll
        for (int e = 0; e < 8; ++e)
            if (e < n) w[e >> 1] |= (uint32_t)s[e] << (16 * (e & 1));
    }
    *reinterpret_cast<uint4 *>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

/* Start loading the tile at p into the stage. Whole 16-byte chunks go
 * through cp.async; partial ones, and every chunk of the general path, are
 * loaded here and stored with zero fill. */
template <typename In, bool kAligned>
__device__ __forceinline__ void stage_tile(const tile_args &a, const tile_pos &p, uint8_t *stage) {
    constexpr int kElems = 16 / (int)sizeof(In);
    constexpr int kChunksPerRow = kTile / kElems;
    constexpr int kRowBytes = kTile * (int)sizeof(In);
    const In *base = static_cast<const In *>(a.x) + p.r0 * a.x_ld + p.c0;
    if (kAligned && p.nr == kTile && p.nc == kTile) {
        /* a whole tile: every chunk is one cp.async, no bounds checks; a
         * thread's chunks sit kThreads / kChunksPerRow rows apart */
        constexpr int kRowStep = kThreads / kChunksPerRow;
        const int lr = (int)threadIdx.x / kChunksPerRow, q = (int)threadIdx.x % kChunksPerRow;
        const In *src = base + (int64_t)lr * a.x_ld + q * kElems;
        uint8_t *dst = stage + lr * kRowBytes + staged_chunk<In>(q) * 16;
        const int64_t src_step = (int64_t)kRowStep * a.x_ld;
#pragma unroll
        for (int s = 0; s < kTile / kRowStep; ++s) cp_async_16(dst + s * kRowStep * kRowBytes, src + s * src_step);
        return;
    }
#pragma unroll 4
    for (int s = 0; s < kTile * kChunksPerRow / kThreads; ++s) {
        const int id = (int)threadIdx.x + s * kThreads;
        const int lr = id / kChunksPerRow, q = id % kChunksPerRow;
        uint8_t *dst = stage + lr * kRowBytes + staged_chunk<In>(q) * 16;
        const int n = lr < p.nr ? min(kElems, max(0, p.nc - q * kElems)) : 0;
        const In *src = base + (n > 0 ? (int64_t)lr * a.x_ld + q * kElems : 0);
        if (kAligned && n == kElems)
            cp_async_16(dst, src);
        else
            stage_chunk_scalar<In>(dst, src, n);
    }
}

/* ------------------------------------------------------------------------ */
/* Stores                                                                    */

/* The n (<= 8 or 16) leading bytes of a little-endian word group. */
template <int kWords>
__device__ __forceinline__ void store_bytes(uint8_t *dst, const uint32_t (&w)[kWords], int n) {
#pragma unroll
    for (int e = 0; e < 4 * kWords; ++e)
        if (e < n) dst[e] = (uint8_t)(w[e >> 2] >> (8 * (e & 3)));
}

/* Row i of the thread's block: 8 codes of x as stored. */
template <bool kAligned>
__device__ __forceinline__ void store_row_codes(const tile_args &a, const tile_pos &p, int lr,
                                                int cc, uint32_t lo, uint32_t hi) {
    if (lr >= p.nr) return;
    uint8_t *dst = a.q + (p.r0 + lr) * a.q_ld + p.c0 + cc * 8;
    const int n = p.nc - cc * 8;
    if (kAligned && n >= 8) {
        *reinterpret_cast<uint2 *>(dst) = make_uint2(lo, hi);
    } else if (n > 0) {
        const uint32_t w[2] = {lo, hi};
        store_bytes(dst, w, n);
    }
}

/* The transposed codes sit in shared memory as 128 rows (one per tile
 * column) of 128 bytes. The 8-byte unit u of row c (tile rows 8u..8u+7) is
 * kept at unit u ^ (c / 8): the 16 threads of a half warp, which write unit
 * rb of rows cc*8 + j for cc = 0..15, then cover all 32 banks once. */
__device__ __forceinline__ int transposed_unit(int c, int u) { return u ^ ((c >> 3) & 15); }

/* Send the transposed codes from shared memory to x^T: 16 bytes a thread,
 * 8 threads per 128-byte row piece. */
template <bool kAligned>
__device__ __forceinline__ void store_transposed(const tile_args &a, const tile_pos &p,
                                                 const uint8_t *transposed) {
#pragma unroll
    for (int s = 0; s < kTile * kTile / 16 / kThreads; ++s) {
        const int id = (int)threadIdx.x + s * kThreads;
        const int c = id >> 3, k = id & 7;
        /* logical units 2k, 2k+1 are the physical pair 2k ^ f, 2k+1 ^ f */
        const int f = (c >> 3) & 15;
        uint4 v = *reinterpret_cast<const uint4 *>(transposed + c * kTile + ((2 * k) ^ (f & ~1)) * 8);
        if (f & 1) v = make_uint4(v.z, v.w, v.x, v.y);
        if (c >= p.nc) continue;
        uint8_t *dst = a.t + (p.c0 + c) * a.t_ld + p.r0 + k * 16;
        const int n = p.nr - k * 16;
        if (kAligned && n >= 16) {
            *reinterpret_cast<uint4 *>(dst) = v;
        } else if (n > 0) {
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
            store_bytes(dst, w, n);
        }
    }
}

/* store_transposed for a whole tile: every piece is 16 bytes inside x^T;
 * the thread's 4 pieces are 32 rows of x^T apart. They are stored under an
 * L2 evict-last policy: the 128-byte pieces of neighbouring tiles then meet
 * in L2 before they go to DRAM (0.5-1.7 points of bf16 dual on the H200). */
__device__ __forceinline__ void store_transposed_full(const tile_args &a, const tile_pos &p,
                                                      const uint8_t *transposed) {
    const int c0 = (int)threadIdx.x >> 3, k = (int)threadIdx.x & 7;
    constexpr int kRowsPerPass = kThreads / 8;
    uint8_t *dst = a.t + (p.c0 + c0) * a.t_ld + p.r0 + k * 16;
    const int64_t dst_step = kRowsPerPass * a.t_ld;
#pragma unroll
    for (int s = 0; s < kTile * kTile / 16 / kThreads; ++s) {
        const int c = c0 + s * kRowsPerPass;
        const int f = (c >> 3) & 15;
        uint4 v = *reinterpret_cast<const uint4 *>(transposed + c * kTile + ((2 * k) ^ (f & ~1)) * 8);
        if (f & 1) v = make_uint4(v.z, v.w, v.x, v.y);
        st_global_16_evict_last(dst, v);
        dst += dst_step;
    }
}


} /* namespace bfp8_quant */
