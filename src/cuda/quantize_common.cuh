/*
 * quantize_common.cuh - the one tile kernel behind every CUDA quantizer
 * (docs/RECIPE.md section 3), shared by quantize_1x128.cu and
 * quantize_128x128.cu.
 *
 * A CTA of 256 threads owns a 128 x 128 tile of x (ragged at the edges) and
 * writes, from one read of it, any of:
 *   - the codes of x as stored ("q"): 1 x 128 groups along each tile row, or
 *     the whole tile as one 128 x 128 block;
 *   - the codes of x transposed ("t"): 1 x 128 groups along each tile column
 *     (every tile column becomes 128 contiguous bytes of one row of x^T), or
 *     the same 128 x 128 block transposed;
 *   - the scales of both (the 128 scales of a tile are contiguous in both
 *     1 x 128 layouts).
 *
 * The default (variant 5) launches one CTA per tile: the tile is staged in
 * shared memory (by the TMA unit for aligned bf16, by 16-byte cp.async
 * otherwise) and three CTAs share an SM (two for f32), so while one waits
 * for its tile the others quantize and store. The older variants are
 * persistent: each CTA walks tiles blockIdx.x, + gridDim.x, ... through a
 * ring of shared-memory stages, the next tile in flight while this one is
 * quantized. Per tile:
 *   A  each thread takes an 8 x 8 block (rows rb*8.., columns cc*8..) into
 *      registers and writes its partial row and column maxima of |x| bits
 *   B  128 threads finish the row maxima and 128 the column maxima, turn
 *      them into multipliers (shared memory) and scales (global memory)
 *   C  each thread quantizes its block: row codes go straight to global
 *      memory (8 contiguous bytes per row), column codes through a swizzled
 *      shared-memory transpose, then out as 16-byte row pieces of x^T.
 *
 * Every launch is a programmatic dependent launch (g_pdl): a CTA may start
 * while the previous kernel of the stream is finishing, sets up its barriers
 * and waits (griddep_wait) before it reads or writes global memory.
 *
 * Fast path (kAligned): x, both code matrices and their leading dimensions
 * allow 16-byte accesses. Otherwise every load and store is scalar, with
 * the same algorithm. Ragged tiles use the scalar access for the partial
 * pieces only; elements outside x are read as zero (they cannot raise a
 * max of |x|) and never written.
 */
#pragma once

#include "cuda/cuda_common.cuh"
#include "formats/formats.h"

#ifndef BFP8_QUANT_EMULATION
#include <atomic>

#include "cuda/hopper.cuh"
#include "cuda/tensor_map.cuh"
#endif

namespace bfp8_quant {

constexpr int kTile = 128;
constexpr int kThreads = 256;
constexpr int kScratchBytes = kTile * kTile; /* partial maxima, then the transposed codes */
constexpr int kLeanScratchBytes = kThreads / 32 * kTile * 4; /* variant 3: a column maximum per warp */
constexpr int kMultBytes = 2 * kTile * (int)sizeof(float);

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
};

/* ------------------------------------------------------------------------ */
/* Instructions                                                              */

/* tests/gpu_quantize/quantize_emulated.cpp runs this kernel on CPU threads,
 * to check its indexing without a GPU, and supplies these itself. */
#ifndef BFP8_QUANT_EMULATION
__device__ __forceinline__ void cp_async_16(void *smem, const void *gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))), "l"(gmem)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

/* Variant 4's staging by the TMA unit: hopper.cuh's instructions under the
 * names this kernel uses (the emulation, which has no TMA, gives stubs). */
__device__ __forceinline__ void mbar_setup(uint64_t *bar) {
    bfp8_sm90::mbar_init(bar, 1);
    bfp8_sm90::fence_mbar_init();
}
__device__ __forceinline__ void mbar_expect_bytes(uint64_t *bar, uint32_t bytes) {
    bfp8_sm90::mbar_arrive_expect_tx(bar, bytes);
}
__device__ __forceinline__ void mbar_wait_parity(uint64_t *bar, uint32_t parity) { bfp8_sm90::mbar_wait(bar, parity); }
__device__ __forceinline__ void tma_load_tile(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1) {
    bfp8_sm90::tma_load_2d(dst, map, bar, c0, c1);
}
__device__ __forceinline__ void fence_async_shared() { bfp8_sm90::fence_proxy_async_shared(); }
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap *map) { bfp8_sm90::tma_prefetch_descriptor(map); }
__device__ __forceinline__ void griddep_wait() { bfp8_sm90::griddep_wait(); }
__device__ __forceinline__ void griddep_launch_dependents() { bfp8_sm90::griddep_launch_dependents(); }

/* A 16-byte store whose L2 line is kept in preference to others (x^T's
 * 128-byte pieces wait there for their DRAM neighbours). */
__device__ __forceinline__ void store16_evict_last(uint8_t *dst, uint4 v) {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(dst), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w), "l"(policy)
                 : "memory");
}

/* Two e4m3 codes in the low 16 bits: lo at the lower address. */
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
    uint16_t h;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(hi), "f"(lo));
    return h;
}
#endif
__device__ __forceinline__ uint32_t pack16x2(uint32_t lo, uint32_t hi) { return lo | (hi << 16); }

/* PRMT: byte k of the result is byte (sel >> 4k) & 7 of the 8 bytes {a, b}. */
__device__ __forceinline__ uint32_t perm_bytes(uint32_t a, uint32_t b, uint32_t sel) {
#ifndef BFP8_QUANT_EMULATION
    return __byte_perm(a, b, sel);
#else
    const uint64_t v = (uint64_t)a | (uint64_t)b << 32;
    uint32_t r = 0;
    for (int k = 0; k < 4; ++k) r |= (uint32_t)((v >> (8 * ((sel >> (4 * k)) & 7))) & 0xffu) << (8 * k);
    return r;
#endif
}

/* Lane-exchange helpers (variant 3). The emulation supplies its own. */
#ifndef BFP8_QUANT_EMULATION
__device__ __forceinline__ uint32_t shfl_xor(uint32_t v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ uint32_t shfl_from(uint32_t v, int lane) { return __shfl_sync(0xffffffffu, v, lane); }
#endif

/* Transpose a 4 x 4 byte block: word i holds row i (byte k = column k) on
 * input, column i on output (byte k = row k). 8 PRMT. */
__device__ __forceinline__ void transpose4x4_bytes(uint32_t (&w)[4]) {
    const uint32_t t0 = perm_bytes(w[0], w[1], 0x5140u), t1 = perm_bytes(w[0], w[1], 0x7362u);
    const uint32_t t2 = perm_bytes(w[2], w[3], 0x5140u), t3 = perm_bytes(w[2], w[3], 0x7362u);
    w[0] = perm_bytes(t0, t2, 0x5410u);
    w[1] = perm_bytes(t0, t2, 0x7632u);
    w[2] = perm_bytes(t1, t3, 0x5410u);
    w[3] = perm_bytes(t1, t3, 0x7632u);
}

/* formats.h's bfp8_scale_multiplier with the division spelled __fdiv_rn, so
 * no compiler flag can make it approximate; tests/gpu_quantize checks the
 * two on every finite amax. A non-finite amax gives a NaN multiplier, which
 * turns every code of the group into 0x7f, and a NaN scale. Returns 1 then. */
__device__ __forceinline__ int group_multiplier(uint32_t amax_bits, int pow2, float &mult,
                                                float &scale) {
    if (bfp8_amax_bits_nonfinite(amax_bits)) {
        mult = scale = __uint_as_float(BFP8_NAN_SCALE_BITS);
        return 1;
    }
    const float amax = __uint_as_float(amax_bits);
    float m = amax == 0.0f ? 1.0f : __fdiv_rn(BFP8_E4M3_MAX, amax);
    if (__float_as_uint(m) == 0x7f800000u) m = __uint_as_float(BFP8_FLT_MAX_BITS);
    if (pow2) m = __uint_as_float(__float_as_uint(m) & 0xff800000u);
    mult = m;
    scale = __fdiv_rn(1.0f, m);
    return 0;
}

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

/* Variant 3: the 8 maxima m[] (fp32 bits of |x|, as amax() gives them) of
 * this lane, maxed with those of the lanes whose index differs in the bits
 * kFirst..kLast (xor butterfly). bf16 maxima have 16 significant bits, so
 * two travel in one word. */
template <typename In, int kFirst, int kLast>
__device__ __forceinline__ void max_across_lanes(uint32_t (&m)[8]) {
    if (sizeof(In) == 2) {
        uint32_t pk[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) pk[q] = (m[2 * q] >> 16) | (m[2 * q + 1] & 0xffff0000u);
#pragma unroll
        for (int o = kFirst; o <= kLast; o <<= 1)
#pragma unroll
            for (int q = 0; q < 4; ++q) pk[q] = __vmaxu2(pk[q], shfl_xor(pk[q], o));
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            m[2 * q] = pk[q] << 16;
            m[2 * q + 1] = pk[q] & 0xffff0000u;
        }
    } else {
#pragma unroll
        for (int o = kFirst; o <= kLast; o <<= 1)
#pragma unroll
            for (int i = 0; i < 8; ++i) m[i] = max(m[i], shfl_xor(m[i], o));
    }
}

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

/* Variant 2: a CTA's walk over tiles tile, tile + step, ... kept as (tile
 * row, tile column) and advanced by the precomputed quotient and remainder
 * of step / col_tiles, instead of a 64-bit division per tile and thread. */
struct tile_cursor {
    int64_t tile, tr, tc;
};

__device__ __forceinline__ tile_cursor cursor_at(const tile_args &a, int64_t tile) {
    tile_cursor c;
    c.tile = tile;
    c.tr = tile / a.col_tiles;
    c.tc = tile - c.tr * a.col_tiles;
    return c;
}

__device__ __forceinline__ void cursor_advance(const tile_args &a, tile_cursor &c, int64_t step,
                                               int64_t step_tr, int64_t step_tc) {
    c.tile += step;
    c.tr += step_tr;
    c.tc += step_tc; /* both < col_tiles: one wrap at most */
    if (c.tc >= a.col_tiles) {
        c.tc -= a.col_tiles;
        ++c.tr;
    }
}

__device__ __forceinline__ tile_pos tile_of(const tile_args &a, const tile_cursor &c) {
    tile_pos p;
    p.tr = c.tr;
    p.tc = c.tc;
    p.r0 = p.tr * kTile;
    p.c0 = p.tc * kTile;
    p.nr = (int)min((int64_t)kTile, a.rows - p.r0);
    p.nc = (int)min((int64_t)kTile, a.cols - p.c0);
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

/* Start loading tile `tile` into a stage (nothing when it is past the end).
 * Whole 16-byte chunks go through cp.async; partial ones, and every chunk
 * of the general path, are loaded here and stored with zero fill. */
template <typename In, bool kAligned, bool kFullPath = false>
__device__ __forceinline__ void stage_tile_pos(const tile_args &a, const tile_pos &p, uint8_t *stage) {
    constexpr int kElems = 16 / (int)sizeof(In);
    constexpr int kChunksPerRow = kTile / kElems;
    constexpr int kRowBytes = kTile * (int)sizeof(In);
    const In *base = static_cast<const In *>(a.x) + p.r0 * a.x_ld + p.c0;
    if (kAligned && kFullPath && p.nr == kTile && p.nc == kTile) {
        /* variant 2, a whole tile: every chunk is one cp.async, no bounds
         * checks; a thread's chunks sit kThreads / kChunksPerRow rows apart */
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

template <typename In, bool kAligned, bool kFullPath = false>
__device__ __forceinline__ void stage_tile(const tile_args &a, int64_t tile, uint8_t *stage) {
    if (tile >= a.num_tiles) return;
    stage_tile_pos<In, kAligned, kFullPath>(a, tile_at(a, tile), stage);
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

/* store_transposed for a whole tile (variant 2): every piece is 16 bytes
 * inside x^T; the thread's 4 pieces are 32 rows of x^T apart. kEvictLast
 * (variant 5): the pieces stay in L2 in preference to other lines. */
template <bool kEvictLast>
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
        if (kEvictLast)
            store16_evict_last(dst, v);
        else
            *reinterpret_cast<uint4 *>(dst) = v;
        dst += dst_step;
    }
}

/* ------------------------------------------------------------------------ */
/* Partial maxima in shared memory (phase A -> B)                            */

/* row_part[cc][r]: the max over columns cc*8..cc*8+7 of tile row r. A thread
 * writes rows rb*8..rb*8+7 as 16-byte units 2rb, 2rb+1, kept at unit
 * u ^ (cc & 7) so that 8 neighbouring threads (cc = 0..7) use 8 bank groups. */
__device__ __forceinline__ int row_part_index(int cc, int r) {
    return cc * kTile + ((((r >> 2) ^ (cc & 7))) << 2) + (r & 3);
}
/* col_part[rb][c]: the max over rows rb*8..rb*8+7 of tile column c, with the
 * 16-byte unit flip of staged_chunk<float> for the same reason. */
__device__ __forceinline__ int col_part_index(int rb, int c) {
    const int u = c >> 2;
    return rb * kTile + ((u ^ ((u >> 3) & 1)) << 2) + (c & 3);
}

/* Phase B of one 1x128 group of the tile: the max of its 16 partial maxima
 * (part_at(k), k = 0..15), turned into the group's multiplier (into mult)
 * and scale (into *scale when the group lies inside x). Returns 1 when the
 * max is not finite. */
template <typename PartAt>
__device__ __forceinline__ int finish_group(PartAt part_at, int pow2, float &mult, float *scale, bool inside) {
    uint32_t m = 0;
#pragma unroll
    for (int k = 0; k < 16; ++k) m = max(m, part_at(k));
    float s;
    const int bad = group_multiplier(m, pow2, mult, s);
    if (inside) *scale = s;
    return bad;
}

/* ------------------------------------------------------------------------ */
/* The kernel                                                                */

/*
 * Kernel variants (all bit-exact; bench_quantize times them side by side,
 * bfp8_cuda_quantize_set_variant picks one):
 *   0  the first version: 2 stages for bf16; the 128x128 multiplier made by
 *      thread 0 between two barriers; W^T codes quantized a second time.
 *   1  3 stages for bf16 (still 2 CTAs per SM: 2 x (113 + 1) KB =
 *      228 KB), so two tiles (64 KB) are in flight per CTA instead of one;
 *      128x128: every thread reduces the 8 warp maxima itself (no serial
 *      section, one barrier fewer per tile) and the W^T codes are the W
 *      codes transposed in registers (PRMT) instead of 64 more FMUL and 32
 *      more cvt per thread.
 *   2  variant 1's 128x128 changes with variant 0's 2 bf16 stages (faster
 *      than 3 for every bf16 1x128 mode on the H200), plus a whole-tile
 *      path: an aligned tile with 128 valid rows and columns (every tile but
 *      the ragged last row and column of tiles) is staged, quantized and
 *      stored by a copy of the tile code compiled for exactly 128 x 128,
 *      without a bounds check or a byte-wise fallback per store, with one
 *      64-bit address per output stream advanced by a stride (in SASS: most
 *      ISETP, BRA/BSSY/BSYNC and 64-bit address IMADs go away); and the
 *      tile walk keeps (tile row, tile column) instead of dividing by
 *      col_tiles twice per tile. Executed SASS per whole bf16 tile and
 *      thread (one tile = 8 x 16 input bytes a thread), v1 -> v2: dual
 *      1322 -> 835, rows 802 -> 510, cols 786 -> 556, W+W^T 856 -> 507.
 *   3  variant 2 with a lane-level row path and less shared memory. A warp
 *      holds 16 whole tile rows, so the 1x128 row maxima are reduced across
 *      lanes with shuffles and each row's multiplier made by one lane (no
 *      shared memory, no barrier: rows-only tiles need none); the column
 *      maxima of the two row blocks of a warp are combined the same way,
 *      leaving 8 x 128 words of partials instead of 16 x 128 x 2; the
 *      transposed codes go into the tile's own stage, free once every thread
 *      holds its block. Measured (bench/results/2026-11-30_quantize_h200_
 *      run4_lean.txt): within 1% of variant 2 on every 1x128 kernel, so the
 *      barriers and the partial-maxima traffic it removes do not limit them;
 *      on bf16 W+W^T 8% faster in that run, equal in the next. Its smaller scratch also fits 3 bf16 stages
 *      at 2 CTAs per SM (two tiles in flight per CTA, against ncu's
 *      long-scoreboard stalls on bf16 dual): that was 2-5% slower on every
 *      bf16 kernel, as variant 1's third stage was, and is not kept.
 *   4  variant 2 with bf16 tiles loaded by the TMA unit (one
 *      cp.async.bulk.tensor per 32 KB tile into the stage, completion on an
 *      mbarrier, ragged edges zero-filled by the TMA) instead of 2048
 *      16-byte cp.async; aligned bf16 only (others run variant 2). Not run
 *      by quantize_emulated (the emulation has no TMA). Measured
 *      (bench/results/2026-11-30_quantize_h200_run11_tma.txt): bf16 dual 2%,
 *      cols 1% faster than variant 2, the rest equal: how the tile is
 *      fetched is not what holds bf16 dual at ~80% of copy either.
 *   5  one CTA per tile (grid = number of tiles) with a single stage: 49 KB
 *      of shared memory and at most 85 registers for bf16, three CTAs per
 *      SM (f32: 81 KB, two), TMA-staged aligned bf16, cp.async otherwise.
 *      Measured (bench/results/2026-11-30_quantize_h200_s5_one_tile.txt,
 *      same run as variants 0-4): fastest on all 22 kernels and shapes;
 *      bf16 dual 79-84% -> 86-90% of copy, bf16 W+W^T 78% -> 85%, f32 dual
 *      94-97%. Whole tiles store their x^T pieces under an L2 evict-last
 *      policy: a further 0.5-1.7 points (bf16 dual 86-91%,
 *      ..._s5_evict_last.txt), and bench_linear unchanged, so the lines
 *      kept in L2 do not cost the GEMMs that follow. Why one tile per CTA:
 *      probe_bandwidth's copies (same run) move bytes at 92% of
 *      cudaMemcpy when their grid is persistent and 96-97% when every CTA
 *      takes one piece and leaves (cudaMemcpy itself is an SM kernel: it
 *      waits for free SMs); the tile probe of the dual quantizer's data
 *      flow went from 77-84% to 87-89% the same way.
 * Tried and not kept (bench/results/2026-11-30_quantize_walk_and_tma_store_
 * not_kept.patch): walking tiles in bands of 2-64 tile rows, column by
 * column (longer runs of x^T per wave), and evict-first code stores: equal
 * or up to 4% slower; codes stored by the TMA unit from the tile's own
 * stage: equal (and a TMA store clips a matrix's inner dimension at 16
 * bytes, not at its last byte). bench/quantize/probe_bandwidth moves the
 * same bytes in the same tiles with no quantization at all and is as fast
 * as bf16 dual (bench/results/2026-11-30_quantize_h200_probes.txt): the
 * kernel is at the ceiling of its access pattern, and two sequential
 * output streams would be only 4-8% faster.
 */
constexpr int kVariants = 6;
constexpr int kDefaultVariant = 2;
/* The default for every launch: variant 5, the fastest on every kernel of
 * bench_quantize --variant 0-5 on the H200 (see above). */
constexpr int kAutoVariant = kVariants;

template <typename In, int kV = kDefaultVariant> struct kernel_shape {
    /* variant 5: one tile per CTA, no ring */
    static constexpr bool kOneTile = kV == 5;
    static constexpr int kStages = kOneTile ? 1 : sizeof(In) == 2 ? (kV == 1 ? 3 : 2) : 3;
    static constexpr int kMinBlocks = kOneTile ? (sizeof(In) == 2 ? 3 : 2) : sizeof(In) == 2 ? 2 : 1;
    static constexpr int kStageBytes = kTile * kTile * (int)sizeof(In);
    static constexpr int kScratch = kV == 3 ? kLeanScratchBytes : kScratchBytes;
    /* variants 4 and 5, bf16: one mbarrier per stage after the multipliers */
    static constexpr bool kTmaLoads = (kV == 4 || kV == 5) && sizeof(In) == 2;
    static constexpr int kBarrierOffset = kStages * kStageBytes + kScratch + kMultBytes;
    static constexpr int kSmemBytes = kBarrierOffset + (kTmaLoads ? kStages * 8 : 0);
};

/* The 8 e4m3 codes of row i of a thread's block, multiplied by m: columns
 * 0..3 in lo, 4..7 in hi. */
template <typename In>
__device__ __forceinline__ void row_codes(const block8x8<In> &x, int i, float m, uint32_t &lo, uint32_t &hi) {
    lo = pack16x2(e4m3x2(__fmul_rn(x.at(i, 0), m), __fmul_rn(x.at(i, 1), m)),
                  e4m3x2(__fmul_rn(x.at(i, 2), m), __fmul_rn(x.at(i, 3), m)));
    hi = pack16x2(e4m3x2(__fmul_rn(x.at(i, 4), m), __fmul_rn(x.at(i, 5), m)),
                  e4m3x2(__fmul_rn(x.at(i, 6), m), __fmul_rn(x.at(i, 7), m)));
}

/*
 * Variant 3, 1x128 groups: one tile with the lane-level row path. The warp
 * of a thread (rb = tid / 16, cc = tid % 16) holds tile rows 16w..16w+15 in
 * full, the two halves of the warp 8 rows each. Rows: the half warp's 16
 * lanes combine their row maxima by shuffles, lane cc < 8 turns row cc's
 * into the multiplier and scale, and every lane fetches the 8 multipliers
 * of its rows; the row codes go out at once. Columns: the two halves
 * combine their column maxima, the first half writes them (one 128-word row
 * of partials per warp), and after a barrier 128 threads make the column
 * multipliers; the transposed codes go through the tile's own stage.
 */
template <typename In, bool kQ, bool kT, bool kAligned, bool kFull>
__device__ __forceinline__ void quantize_tile_lean(const tile_args &a, tile_pos p, uint8_t *staged,
                                                   uint8_t *scratch) {
    uint32_t *const col_part = reinterpret_cast<uint32_t *>(scratch);
    float *const col_mult = reinterpret_cast<float *>(scratch + kLeanScratchBytes) + kTile;
    uint8_t *const transposed = staged;
    const int tid = (int)threadIdx.x, rb = tid >> 4, cc = tid & 15, warp = tid >> 5;
    if (kFull) {
        p.nr = kTile;
        p.nc = kTile;
    }
    int nonfinite = 0;

    block8x8<In> x;
    x.load(staged, rb, cc);
    uint32_t rmax[8], cmax[8];
    x.amax(rmax, cmax);

    if (kT) {
        max_across_lanes<In, 16, 16>(cmax);
        if ((tid & 16) == 0) {
            uint32_t *d0 = col_part + col_part_index(warp, cc * 8);
            uint32_t *d1 = col_part + col_part_index(warp, cc * 8 + 4);
            *reinterpret_cast<uint4 *>(d0) = make_uint4(cmax[0], cmax[1], cmax[2], cmax[3]);
            *reinterpret_cast<uint4 *>(d1) = make_uint4(cmax[4], cmax[5], cmax[6], cmax[7]);
        }
    }

    if (kQ) {
        max_across_lanes<In, 1, 8>(rmax);
        const int i_own = cc & 7; /* lanes cc and cc + 8 both make row i_own's multiplier */
        uint32_t own = rmax[0];
#pragma unroll
        for (int i = 1; i < 8; ++i) own = i_own == i ? rmax[i] : own;
        float mult, scale;
        const int bad = group_multiplier(own, a.pow2, mult, scale);
        const int r = rb * 8 + i_own;
        if (cc < 8) {
            nonfinite = bad;
            if (r < p.nr) a.q_scales[p.tc * a.q_scale_ld + p.r0 + r] = scale;
        }
        const int half = tid & 16;
        uint8_t *qrow = kFull ? a.q + (p.r0 + rb * 8) * a.q_ld + p.c0 + cc * 8 : nullptr;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float m = __uint_as_float(shfl_from(__float_as_uint(mult), half | i));
            uint32_t lo, hi;
            row_codes(x, i, m, lo, hi);
            if (kFull) {
                *reinterpret_cast<uint2 *>(qrow) = make_uint2(lo, hi);
                qrow += a.q_ld;
            } else {
                store_row_codes<kAligned>(a, p, rb * 8 + i, cc, lo, hi);
            }
        }
    }

    if (kT) {
        __syncthreads(); /* every warp's column partials are in; every thread holds its block */
        if (tid < kTile) {
            const int c = tid;
            uint32_t m = 0;
#pragma unroll
            for (int w = 0; w < kThreads / 32; ++w) m = max(m, col_part[col_part_index(w, c)]);
            float mult, scale;
            nonfinite |= group_multiplier(m, a.pow2, mult, scale);
            col_mult[c] = mult;
            if (c < p.nc) a.t_scales[p.tr * a.t_scale_ld + p.c0 + c] = scale;
        }
        __syncthreads();
        float cm[8];
        const float4 c0 = *reinterpret_cast<const float4 *>(col_mult + cc * 8);
        const float4 c1 = *reinterpret_cast<const float4 *>(col_mult + cc * 8 + 4);
        cm[0] = c0.x; cm[1] = c0.y; cm[2] = c0.z; cm[3] = c0.w;
        cm[4] = c1.x; cm[5] = c1.y; cm[6] = c1.z; cm[7] = c1.w;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const uint32_t lo = pack16x2(e4m3x2(__fmul_rn(x.at(0, j), cm[j]), __fmul_rn(x.at(1, j), cm[j])),
                                         e4m3x2(__fmul_rn(x.at(2, j), cm[j]), __fmul_rn(x.at(3, j), cm[j])));
            const uint32_t hi = pack16x2(e4m3x2(__fmul_rn(x.at(4, j), cm[j]), __fmul_rn(x.at(5, j), cm[j])),
                                         e4m3x2(__fmul_rn(x.at(6, j), cm[j]), __fmul_rn(x.at(7, j), cm[j])));
            const int c = cc * 8 + j;
            *reinterpret_cast<uint2 *>(transposed + c * kTile + transposed_unit(c, rb) * 8) = make_uint2(lo, hi);
        }
        __syncthreads();
        if (kFull)
            store_transposed_full<false>(a, p, transposed);
        else
            store_transposed<kAligned>(a, p, transposed);
    }
    /* Groups that lie wholly outside x are all zero, never non-finite. */
    if (nonfinite && a.nonfinite_flag) *a.nonfinite_flag = 1u;
}

/*
 * One tile, from its stage in shared memory to every output (phases A-C of
 * the header comment). kFull: the tile has 128 valid rows and columns and
 * kAligned holds (variant 2's whole-tile path): the bounds become constants
 * and every ragged branch folds away.
 */
template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned, int kV, bool kFull>
__device__ __forceinline__ void quantize_tile(const tile_args &a, tile_pos p, uint8_t *staged,
                                              uint8_t *scratch) {
    if constexpr (kV == 3 && !kBlock) {
        quantize_tile_lean<In, kQ, kT, kAligned, kFull>(a, p, staged, scratch);
        return;
    }
    /* variant >= 1, 128x128: the 8 warp maxima, outside the scratch that the
     * transposed codes overwrite while slower warps may still read them */
    constexpr bool kFastBlock = kBlock && kV >= 1;
    uint32_t *const row_part = reinterpret_cast<uint32_t *>(scratch);
    uint32_t *const col_part = row_part + 16 * kTile;
    /* variant 3: the transposed codes go into the tile's own stage (every
     * thread holds its block after the first barrier) */
    uint8_t *const transposed = kV == 3 ? staged : scratch;
    float *const row_mult = reinterpret_cast<float *>(scratch + kernel_shape<In, kV>::kScratch);
    float *const col_mult = row_mult + kTile;
    const int tid = (int)threadIdx.x, rb = tid >> 4, cc = tid & 15;
    if (kFull) {
        p.nr = kTile;
        p.nc = kTile;
    }

    /* A: the block into registers, partial maxima out */
    block8x8<In> x;
    x.load(staged, rb, cc);
    if (kBlock) {
        const uint32_t m = __reduce_max_sync(0xffffffffu, x.amax_all());
        if ((tid & 31) == 0) (kFastBlock ? reinterpret_cast<uint32_t *>(row_mult) : row_part)[tid >> 5] = m;
    } else {
        uint32_t rmax[8], cmax[8];
        x.amax(rmax, cmax);
        if (kQ) {
            uint32_t *d0 = row_part + row_part_index(cc, rb * 8);
            uint32_t *d1 = row_part + row_part_index(cc, rb * 8 + 4);
            *reinterpret_cast<uint4 *>(d0) = make_uint4(rmax[0], rmax[1], rmax[2], rmax[3]);
            *reinterpret_cast<uint4 *>(d1) = make_uint4(rmax[4], rmax[5], rmax[6], rmax[7]);
        }
        if (kT) {
            uint32_t *d0 = col_part + col_part_index(rb, cc * 8);
            uint32_t *d1 = col_part + col_part_index(rb, cc * 8 + 4);
            *reinterpret_cast<uint4 *>(d0) = make_uint4(cmax[0], cmax[1], cmax[2], cmax[3]);
            *reinterpret_cast<uint4 *>(d1) = make_uint4(cmax[4], cmax[5], cmax[6], cmax[7]);
        }
    }
    __syncthreads();

    /* B: multipliers and scales */
    int nonfinite = 0;
    float block_mult = 0.0f;
    if (kFastBlock) { /* every thread, from the same 8 words: the same multiplier */
        const uint4 m0 = *reinterpret_cast<const uint4 *>(row_mult);
        const uint4 m1 = *reinterpret_cast<const uint4 *>(row_mult + 4);
        const uint32_t m = max(max(max(m0.x, m0.y), max(m0.z, m0.w)), max(max(m1.x, m1.y), max(m1.z, m1.w)));
        float scale;
        nonfinite = group_multiplier(m, a.pow2, block_mult, scale);
        if (tid == 0) {
            a.q_scales[p.tr * a.q_scale_ld + p.tc] = scale;
            if (kT) a.t_scales[p.tc * a.t_scale_ld + p.tr] = scale;
        } else {
            nonfinite = 0;
        }
    } else if (kBlock) {
        if (tid == 0) {
            uint32_t m = 0;
#pragma unroll
            for (int w = 0; w < kThreads / 32; ++w) m = max(m, row_part[w]);
            float mult, scale;
            nonfinite = group_multiplier(m, a.pow2, mult, scale);
            row_mult[0] = mult;
            a.q_scales[p.tr * a.q_scale_ld + p.tc] = scale;
            if (kT) a.t_scales[p.tc * a.t_scale_ld + p.tr] = scale;
        }
    } else {
        if (kQ && tid < kTile) {
            const int r = tid;
            nonfinite = finish_group([&](int k) { return row_part[row_part_index(k, r)]; }, a.pow2, row_mult[r],
                                     a.q_scales + p.tc * a.q_scale_ld + p.r0 + r, r < p.nr);
        }
        const int ct = kQ ? tid - kTile : tid;
        if (kT && ct >= 0 && ct < kTile) {
            const int c = ct;
            nonfinite = finish_group([&](int k) { return col_part[col_part_index(k, c)]; }, a.pow2, col_mult[c],
                                     a.t_scales + p.tr * a.t_scale_ld + p.c0 + c, c < p.nc);
        }
    }
    /* Groups that lie wholly outside x are all zero, never non-finite. */
    if (nonfinite && a.nonfinite_flag) *a.nonfinite_flag = 1u;
    if (!kFastBlock) __syncthreads();

    /* C: codes */
    float rm[8], cm[8];
    if (kFastBlock) {
#pragma unroll
        for (int i = 0; i < 8; ++i) rm[i] = cm[i] = block_mult;
    } else if (kBlock) {
        const float m = row_mult[0];
#pragma unroll
        for (int i = 0; i < 8; ++i) rm[i] = cm[i] = m;
    } else {
        if (kQ) {
            const float4 r0 = *reinterpret_cast<const float4 *>(row_mult + rb * 8);
            const float4 r1 = *reinterpret_cast<const float4 *>(row_mult + rb * 8 + 4);
            rm[0] = r0.x; rm[1] = r0.y; rm[2] = r0.z; rm[3] = r0.w;
            rm[4] = r1.x; rm[5] = r1.y; rm[6] = r1.z; rm[7] = r1.w;
        }
        if (kT) {
            const float4 c0 = *reinterpret_cast<const float4 *>(col_mult + cc * 8);
            const float4 c1 = *reinterpret_cast<const float4 *>(col_mult + cc * 8 + 4);
            cm[0] = c0.x; cm[1] = c0.y; cm[2] = c0.z; cm[3] = c0.w;
            cm[4] = c1.x; cm[5] = c1.y; cm[6] = c1.z; cm[7] = c1.w;
        }
    }
    uint32_t tcode[8][2]; /* column j of the block: rows 0..3, rows 4..7 */
    /* whole tile: row i of the thread's block goes to qrow + i * q_ld, no checks */
    uint8_t *qrow = kFull && kQ ? a.q + (p.r0 + rb * 8) * a.q_ld + p.c0 + cc * 8 : nullptr;
    uint32_t rcode[8][2]; /* row i of the block: columns 0..3, columns 4..7 */
#pragma unroll
    for (int k = 0; k < 4; ++k) { /* rows 2k, 2k+1 */
        if (kQ) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = 2 * k + h;
                const float m = rm[i];
                const uint32_t lo = pack16x2(e4m3x2(__fmul_rn(x.at(i, 0), m), __fmul_rn(x.at(i, 1), m)),
                                             e4m3x2(__fmul_rn(x.at(i, 2), m), __fmul_rn(x.at(i, 3), m)));
                const uint32_t hi = pack16x2(e4m3x2(__fmul_rn(x.at(i, 4), m), __fmul_rn(x.at(i, 5), m)),
                                             e4m3x2(__fmul_rn(x.at(i, 6), m), __fmul_rn(x.at(i, 7), m)));
                if (kFull) {
                    *reinterpret_cast<uint2 *>(qrow) = make_uint2(lo, hi);
                    qrow += a.q_ld;
                } else {
                    store_row_codes<kAligned>(a, p, rb * 8 + i, cc, lo, hi);
                }
                rcode[i][0] = lo;
                rcode[i][1] = hi;
            }
        }
        if (kT && !kFastBlock) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint32_t h = e4m3x2(__fmul_rn(x.at(2 * k, j), cm[j]),
                                          __fmul_rn(x.at(2 * k + 1, j), cm[j]));
                if (k % 2 == 0)
                    tcode[j][k / 2] = h;
                else
                    tcode[j][k / 2] |= h << 16;
            }
        }
    }
    if (kT && kFastBlock) { /* one multiplier: the column codes are the row codes */
#pragma unroll
        for (int h = 0; h < 2; ++h)     /* rows 4h..4h+3 */
#pragma unroll
            for (int g = 0; g < 2; ++g) { /* columns 4g..4g+3 */
                uint32_t w[4] = {rcode[4 * h][g], rcode[4 * h + 1][g], rcode[4 * h + 2][g], rcode[4 * h + 3][g]};
                transpose4x4_bytes(w);
#pragma unroll
                for (int j = 0; j < 4; ++j) tcode[4 * g + j][h] = w[j];
            }
    }
    if (kT) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int c = cc * 8 + j;
            *reinterpret_cast<uint2 *>(transposed + c * kTile + transposed_unit(c, rb) * 8) =
                make_uint2(tcode[j][0], tcode[j][1]);
        }
        __syncthreads();
        if (kFull)
            store_transposed_full<kV == 5>(a, p, transposed);
        else
            store_transposed<kAligned>(a, p, transposed);
    }
}

/*
 * kBlock: one 128x128 group per tile (else 1x128 groups).
 * kQ / kT: write the codes and scales of x / of x^T.
 */
template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned, int kV>
__global__ void __launch_bounds__(kThreads, kernel_shape<In, kV>::kMinBlocks)
    quantize_tiles_kernel(const __grid_constant__ tile_args a, const __grid_constant__ CUtensorMap tmap_x) {
    using shape = kernel_shape<In, kV>;
    constexpr int kStages = shape::kStages;
    constexpr bool kFullPath = kAligned && kV >= 2;
    /* variant 4: the TMA unit stages whole tiles (ragged ones zero-filled) */
    constexpr bool kTma = shape::kTmaLoads && kAligned;
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t *const scratch = smem + kStages * shape::kStageBytes;
    uint64_t *const staged_bar = reinterpret_cast<uint64_t *>(smem + shape::kBarrierOffset); /* kTma only */
    const int64_t step = gridDim.x;
    const bool tma_thread = kTma && threadIdx.x == 0;

    /* Start loading the tile at p into stage s. */
    auto stage_at = [&](const tile_pos &p, int s) {
        if constexpr (kTma) {
            if (tma_thread) {
                fence_async_shared(); /* earlier generic-proxy use of the buffer comes first */
                mbar_expect_bytes(&staged_bar[s], shape::kStageBytes);
                tma_load_tile(smem + s * shape::kStageBytes, &tmap_x, &staged_bar[s], (int)p.c0, (int)p.r0);
            }
        } else {
            stage_tile_pos<In, kAligned, kFullPath>(a, p, smem + s * shape::kStageBytes);
        }
    };
    if constexpr (kTma) {
        if (tma_thread) {
            tma_prefetch_map(&tmap_x); /* a kernel parameter: fetch it while the previous grid drains */
            for (int s = 0; s < kStages; ++s) mbar_setup(&staged_bar[s]);
        }
        __syncthreads();
    }
    /* launched behind another kernel (g_pdl): its outputs may be our x, and
     * it may still read what we are about to overwrite */
    griddep_wait();
    griddep_launch_dependents();

    if constexpr (kStages == 1) {
        /* variant 5: a CTA per tile (the launch makes one), so there is
         * nothing to prefetch; a smaller grid would still be walked right */
        uint32_t parity = 0; /* kTma */
        for (int64_t tile = blockIdx.x; tile < a.num_tiles; tile += step) {
            const tile_pos p = tile_at(a, tile);
            __syncthreads(); /* the previous tile is done with the stage */
            stage_at(p, 0);
            if constexpr (kTma) {
                mbar_wait_parity(&staged_bar[0], parity);
                parity ^= 1u;
            } else {
                cp_async_commit();
                cp_async_wait<0>();
                __syncthreads(); /* every thread's chunks (and the zero-filled ones) are in */
            }
            if (kFullPath && p.nr == kTile && p.nc == kTile)
                quantize_tile<In, kBlock, kQ, kT, kAligned, kV, kFullPath>(a, p, smem, scratch);
            else
                quantize_tile<In, kBlock, kQ, kT, kAligned, kV, false>(a, p, smem, scratch);
        }
    } else {
#pragma unroll
        for (int s = 0; s < kStages - 1; ++s) {
            const int64_t t = (int64_t)blockIdx.x + s * step;
            if (kTma || kV >= 2) {
                if (t < a.num_tiles) stage_at(tile_at(a, t), s);
            } else {
                stage_tile<In, kAligned, kFullPath>(a, t, smem + s * shape::kStageBytes);
            }
            if (!kTma) cp_async_commit();
        }

        int stage = 0;
        uint32_t phases = 0; /* kTma: bit s, the parity of stage s's next completion */
        /* variant 2: this tile and the one to prefetch, without a division each */
        const int64_t step_tr = kV >= 2 ? step / a.col_tiles : 0, step_tc = step - step_tr * a.col_tiles;
        tile_cursor cur = {}, pre = {};
        if (kV >= 2) {
            cur = cursor_at(a, blockIdx.x);
            pre = cursor_at(a, (int64_t)blockIdx.x + (kStages - 1) * step);
        }
        for (int64_t tile = blockIdx.x; tile < a.num_tiles; tile += step) {
            if constexpr (kTma) {
                mbar_wait_parity(&staged_bar[stage], (phases >> stage) & 1u);
                phases ^= 1u << stage;
            } else {
                cp_async_wait<kStages - 2>();
            }
            __syncthreads(); /* this tile is staged; the previous tile is done with every buffer */
            {
                const int refill = stage == 0 ? kStages - 1 : stage - 1;
                if (kV >= 2) {
                    if (pre.tile < a.num_tiles) stage_at(tile_of(a, pre), refill);
                    cursor_advance(a, pre, step, step_tr, step_tc);
                } else {
                    stage_tile<In, kAligned>(a, tile + (kStages - 1) * step, smem + refill * shape::kStageBytes);
                }
                if (!kTma) cp_async_commit();
            }
            tile_pos p;
            if (kV >= 2) {
                p = tile_of(a, cur);
                cursor_advance(a, cur, step, step_tr, step_tc);
            } else {
                p = tile_at(a, tile);
            }
            uint8_t *const staged = smem + stage * shape::kStageBytes;
            stage = stage == kStages - 1 ? 0 : stage + 1;
            if (kFullPath && p.nr == kTile && p.nc == kTile)
                quantize_tile<In, kBlock, kQ, kT, kAligned, kV, kFullPath>(a, p, staged, scratch);
            else
                quantize_tile<In, kBlock, kQ, kT, kAligned, kV, false>(a, p, staged, scratch);
        }
        if (!kTma) cp_async_wait<0>(); /* nothing may be in flight into shared memory at exit */
        /* kTma: every tile loaded was waited for (each prefetch is of a tile this CTA processes) */
    }
}

/* ------------------------------------------------------------------------ */
/* Arguments (host)                                                          */

/* 16-byte accesses are possible on a matrix of element size `size`. */
static inline bool aligned16(const void *p, int64_t ld, size_t size) {
    return (uintptr_t)p % 16 == 0 && (ld * (int64_t)size) % 16 == 0;
}

/* Kernel arguments for x and its two optional code matrices (validated by
 * src/ops); *aligned tells whether every access can be 16 bytes wide. */
static inline tile_args make_tile_args(const bfp8_matrix *x, const bfp8_qmatrix *q,
                                       const bfp8_qmatrix *t, const bfp8_quantize_options *options,
                                       bool *aligned) {
    tile_args a = {};
    a.x = x->data;
    a.x_ld = x->ld;
    a.rows = x->rows;
    a.cols = x->cols;
    *aligned = aligned16(x->data, x->ld, bfp8_dtype_size(x->dtype));
    if (q) {
        a.q = q->data;
        a.q_ld = q->ld;
        a.q_scales = q->scales;
        a.q_scale_ld = q->scale_ld;
        *aligned = *aligned && aligned16(q->data, q->ld, 1);
    }
    if (t) {
        a.t = t->data;
        a.t_ld = t->ld;
        a.t_scales = t->scales;
        a.t_scale_ld = t->scale_ld;
        *aligned = *aligned && aligned16(t->data, t->ld, 1);
    }
    a.nonfinite_flag = options ? options->nonfinite_flag : NULL;
    a.pow2 = options ? options->pow2_scales : 0;
    a.col_tiles = (x->cols + kTile - 1) / kTile;
    a.num_tiles = (x->rows + kTile - 1) / kTile * a.col_tiles;
    return a;
}

#ifndef BFP8_QUANT_EMULATION
/* ------------------------------------------------------------------------ */
/* Host side                                                                 */

/* The kernel variant every launch uses (see kernel_shape); only
 * bfp8_cuda_quantize_set_variant (quantize_1x128.cu) changes it. */
inline std::atomic<int> g_variant{kAutoVariant};
/* Whether launches carry the programmatic stream serialization attribute
 * (programmatic dependent launch: the kernel waits for the previous grid
 * itself, griddep_wait, so its CTAs are launched while that grid drains).
 * On by default; only bfp8_cuda_quantize_set_pdl (quantize_1x128.cu)
 * changes it. H200, chains of calls (bench/results/2026-12-01_quantize_h200_
 * s9_pdl.txt): 2-3 us less a call on the issue's shapes. */
inline std::atomic<int> g_pdl{1};

/* Launch quantize_tiles_kernel on ctx's stream: variant 5 with a CTA per
 * tile, the others over a persistent grid (as many CTAs as fit on the
 * device at once, at most one per tile). The shared memory attribute and
 * the occupancy are asked once per device and kernel. */
template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned, int kV>
bfp8_status launch_quantize_variant(bfp8_context *ctx, const tile_args &args, const char *fn) {
    auto kernel = quantize_tiles_kernel<In, kBlock, kQ, kT, kAligned, kV>;
    const int smem = kernel_shape<In, kV>::kSmemBytes;
    constexpr int kCachedDevices = 64;
    static std::atomic<int> cached_per_sm[kCachedDevices]; /* 0: not asked yet */
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    const bool cacheable = ctx->device >= 0 && ctx->device < kCachedDevices;
    int per_sm = cacheable ? cached_per_sm[ctx->device].load(std::memory_order_acquire) : 0;
    if (per_sm == 0) {
        BFP8_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        BFP8_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
        if (per_sm < 1)
            return bfp8_fail(BFP8_ERR_CUDA, "%s: the quantize kernel does not fit on the device", fn);
        if (cacheable) cached_per_sm[ctx->device].store(per_sm, std::memory_order_release);
    }
    const int64_t resident = (int64_t)per_sm * bfp8_cuda_state_of(ctx)->num_sms;
    const int64_t cap = kernel_shape<In, kV>::kOneTile ? INT32_MAX : resident;
    const int grid = (int)(args.num_tiles < cap ? args.num_tiles : cap);
    CUtensorMap tmap_x = {}; /* variants 4 and 5: x in boxes of one tile, read by the TMA unit */
    if constexpr (kernel_shape<In, kV>::kTmaLoads && kAligned)
        BFP8_TRY(bfp8_cuda_tensor_map_2d(&tmap_x, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.x, (uint64_t)args.cols,
                                         (uint64_t)args.rows, (uint64_t)args.x_ld * sizeof(In), kTile, kTile,
                                         CU_TENSOR_MAP_SWIZZLE_NONE, "x"));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((unsigned)grid);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = (size_t)smem;
    config.stream = bfp8_stream_of(ctx);
    cudaLaunchAttribute pdl[1];
    pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl[0].val.programmaticStreamSerializationAllowed = 1;
    if (g_pdl.load(std::memory_order_relaxed)) {
        config.attrs = pdl;
        config.numAttrs = 1;
    }
    BFP8_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, args, tmap_x));
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned>
bfp8_status launch_quantize_tiles(bfp8_context *ctx, const tile_args &args, const char *fn) {
    static_assert(kVariants == 6, "one branch per variant");
    int v = g_variant.load(std::memory_order_relaxed);
    if (v == kAutoVariant) v = 5;
    if (v == 5) return launch_quantize_variant<In, kBlock, kQ, kT, kAligned, 5>(ctx, args, fn);
    if (v == 0) return launch_quantize_variant<In, kBlock, kQ, kT, kAligned, 0>(ctx, args, fn);
    if (v == 2) return launch_quantize_variant<In, kBlock, kQ, kT, kAligned, 2>(ctx, args, fn);
    if (v == 3) return launch_quantize_variant<In, kBlock, kQ, kT, kAligned, 3>(ctx, args, fn);
    if (v == 4) return launch_quantize_variant<In, kBlock, kQ, kT, kAligned, 4>(ctx, args, fn);
    return launch_quantize_variant<In, kBlock, kQ, kT, kAligned, 1>(ctx, args, fn);
}
#endif

} /* namespace bfp8_quant */
