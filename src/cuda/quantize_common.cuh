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
 * The grid has one CTA per tile: the tile is staged in shared memory (by
 * the TMA unit for aligned bf16, by 16-byte cp.async otherwise) and three
 * CTAs share an SM (two for f32), so while one waits for its tile the
 * others quantize and store. Per tile:
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
constexpr int kWarmRows = 64; /* rows of its tile a CTA of the first wave asks L2 for before griddep_wait */
constexpr int kScratchBytes = kTile * kTile; /* partial maxima, then the transposed codes */
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
    int64_t warm_ctas; /* CTAs below this (the first resident ones) ask L2 for kWarmRows rows of their tile */
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

/* Staging by the TMA unit: hopper.cuh's instructions under the names this
 * kernel uses (the emulation, which has no TMA, gives stubs). */
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
__device__ __forceinline__ void prefetch_line_l2(const void *p) { bfp8_sm90::prefetch_l2(p); }
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
 * in L2 before they go to DRAM (0.5-1.7 points of bf16 dual, bench/results/
 * 2026-11-30_quantize_h200_s5_evict_last.txt). */
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
        store16_evict_last(dst, v);
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
 * How this kernel came to be (every step bit-exact, timed on the H200 with
 * bench_quantize against the copy of the same run; the earlier forms and
 * their figures are in bench/results, the code of each in git history):
 *   - persistent grids walking tiles through 2- or 3-stage rings
 *     (2026-11-30, "variants 0-4"): bf16 dual 79-84% of the copy. A whole-
 *     tile path compiled for exactly 128 x 128 (no bounds checks, one
 *     address per output stream) cut executed SASS per thread from 1322 to
 *     835 (dual); 128x128 made W^T's codes by transposing W's in registers.
 *     A lane-level row path (shuffles instead of shared memory) and TMA
 *     staging each gave 0-2%.
 *   - one CTA per tile (this kernel, "variant 5", 2026-11-30_quantize_h200_
 *     s5_one_tile.txt): fastest on all 22 kernels and shapes, bf16 dual
 *     86-90%, f32 dual 94-97%. Copies whose CTAs each take one piece and
 *     leave reach 96-97% of cudaMemcpy (itself an SM kernel), persistent
 *     ones ~92%: the hardware's CTA launch keeps the memory system busier
 *     than any walk.
 *   - measured and not kept: tile walks in bands of 2-64 tile rows;
 *     evict-first, streaming or evict-last row-code stores; TMA stores of
 *     the codes; 4 bf16 CTAs per SM (spills) or 2 (3 points slower); L2
 *     prefetch of a later tile (worse); persistent CTAs claiming tiles from
 *     a counter with the next load issued as soon as the stage is read (1-1.5
 *     points slower); tile bands again, x^T lines demoted from evict-last
 *     in groups, evict-first loads of x (session 13); 4 CTAs per SM, each
 *     thread re-reading its block's rows from the stage to fit 64 registers
 *     (session 15: the same speed as 3) (..._not_kept.patch / .txt files of
 *     2026-11-30 and 2026-12-01).
 *   - the L2 warm-up before griddep_wait (session 13): about a point on the
 *     smaller shapes, chained.
 * What is left between bf16 dual and the copy: the x^T layout, whose
 * 128-byte pieces land in 128 rows per tile (probe_bandwidth moves the same
 * bytes without quantizing at the same speed), and what remains of the
 * ~2.6 us per call that a chained cudaMemcpy of the same size pays too.
 */
template <typename In> struct kernel_shape {
    /* the CTAs per SM the registers are capped for */
    static constexpr int kMinBlocks = sizeof(In) == 2 ? 3 : 2;
    static constexpr int kStageBytes = kTile * kTile * (int)sizeof(In);
    /* bf16: the TMA unit stages the tile, completing on one mbarrier after the multipliers */
    static constexpr bool kTmaLoads = sizeof(In) == 2;
    static constexpr int kBarrierOffset = kStageBytes + kScratchBytes + kMultBytes;
    static constexpr int kSmemBytes = kBarrierOffset + (kTmaLoads ? 8 : 0);
};

/*
 * One tile, from its stage in shared memory to every output (phases A-C of
 * the header comment). kFull: the tile has 128 valid rows and columns and
 * kAligned holds (the whole-tile path): the bounds become constants and
 * every ragged branch folds away.
 */
template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned, bool kFull>
__device__ __forceinline__ void quantize_tile(const tile_args &a, tile_pos p, uint8_t *staged,
                                              uint8_t *scratch) {
    uint32_t *const row_part = reinterpret_cast<uint32_t *>(scratch);
    uint32_t *const col_part = row_part + 16 * kTile;
    uint8_t *const transposed = scratch; /* overwrites the partial maxima, read by then */
    /* 128x128: the 8 warp maxima go here, outside the scratch that the
     * transposed codes overwrite while slower warps may still read them */
    float *const row_mult = reinterpret_cast<float *>(scratch + kScratchBytes);
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
        if ((tid & 31) == 0) reinterpret_cast<uint32_t *>(row_mult)[tid >> 5] = m;
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
    if (kBlock) { /* every thread, from the same 8 words: the same multiplier */
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
    if (!kBlock) __syncthreads();

    /* C: codes */
    float rm[8], cm[8];
    if (kBlock) {
#pragma unroll
        for (int i = 0; i < 8; ++i) rm[i] = cm[i] = block_mult;
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
        if (kT && !kBlock) {
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
    if (kT && kBlock) { /* one multiplier: the column codes are the row codes */
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
            store_transposed_full(a, p, transposed);
        else
            store_transposed<kAligned>(a, p, transposed);
    }
}

/*
 * kBlock: one 128x128 group per tile (else 1x128 groups).
 * kQ / kT: write the codes and scales of x / of x^T.
 * kAligned: every access can be 16 bytes wide (whole tiles then take the
 * path compiled for exactly 128 x 128); bf16 tiles are then staged by the
 * TMA unit (ragged ones zero-filled), everything else by cp.async.
 */
template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned>
__global__ void __launch_bounds__(kThreads, kernel_shape<In>::kMinBlocks)
    quantize_tiles_kernel(const __grid_constant__ tile_args a, const __grid_constant__ CUtensorMap tmap_x) {
    using shape = kernel_shape<In>;
    constexpr bool kTma = shape::kTmaLoads && kAligned;
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t *const scratch = smem + shape::kStageBytes;
    uint64_t *const staged_bar = reinterpret_cast<uint64_t *>(smem + shape::kBarrierOffset); /* kTma only */
    const bool tma_thread = kTma && threadIdx.x == 0;

    if constexpr (kTma) {
        if (tma_thread) {
            tma_prefetch_map(&tmap_x); /* a kernel parameter: fetch it while the previous grid drains */
            mbar_setup(staged_bar);
        }
        __syncthreads();
    }
    /* The first resident CTAs ask for the first kWarmRows rows of their
     * tile in L2 while the previous grid drains (launched behind it, g_pdl),
     * when DRAM has time to spare (396 CTAs x 64 rows of bf16: 6.5 MB on an
     * H200; 32 and 128 rows measured worse). Only a hint, so safe
     * before griddep_wait: L2 is where the previous grid's writes of x land,
     * and the loads below read x there. */
    if (blockIdx.x < a.warm_ctas) {
        const tile_pos p = tile_at(a, blockIdx.x);
        constexpr int kLines = kTile * (int)sizeof(In) / 128; /* 128-byte lines of a whole tile row */
        const int64_t row_bytes = (int64_t)p.nc * (int64_t)sizeof(In), x_ld_bytes = a.x_ld * (int64_t)sizeof(In);
        const uint8_t *x0 = static_cast<const uint8_t *>(a.x) + p.r0 * x_ld_bytes + p.c0 * (int64_t)sizeof(In);
        for (int i = (int)threadIdx.x; i < min(p.nr, kWarmRows) * kLines; i += kThreads)
            if ((i % kLines) * 128 < row_bytes) prefetch_line_l2(x0 + (i / kLines) * x_ld_bytes + (i % kLines) * 128);
    }
    /* launched behind another kernel (g_pdl): its outputs may be our x, and
     * it may still read what we are about to overwrite */
    griddep_wait();
    griddep_launch_dependents();

    /* a CTA per tile (the launch makes one); a smaller grid would still be walked right */
    uint32_t parity = 0; /* kTma */
    for (int64_t tile = blockIdx.x; tile < a.num_tiles; tile += gridDim.x) {
        const tile_pos p = tile_at(a, tile);
        __syncthreads(); /* the previous tile is done with the stage */
        if constexpr (kTma) {
            if (tma_thread) {
                fence_async_shared(); /* earlier generic-proxy use of the buffer comes first */
                mbar_expect_bytes(staged_bar, shape::kStageBytes);
                tma_load_tile(smem, &tmap_x, staged_bar, (int)p.c0, (int)p.r0);
            }
            mbar_wait_parity(staged_bar, parity);
            parity ^= 1u;
        } else {
            stage_tile<In, kAligned>(a, p, smem);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads(); /* every thread's chunks (and the zero-filled ones) are in */
        }
        if (kAligned && p.nr == kTile && p.nc == kTile)
            quantize_tile<In, kBlock, kQ, kT, kAligned, kAligned>(a, p, smem, scratch);
        else
            quantize_tile<In, kBlock, kQ, kT, kAligned, false>(a, p, smem, scratch);
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

/* Whether launches carry the programmatic stream serialization attribute
 * (programmatic dependent launch: the kernel waits for the previous grid
 * itself, griddep_wait, so its CTAs are launched while that grid drains).
 * On by default; only bfp8_cuda_quantize_set_pdl (quantize_1x128.cu)
 * changes it. H200, chains of calls (bench/results/2026-12-01_quantize_h200_
 * s9_pdl.txt): 2-3 us less a call on the issue's shapes. */
inline std::atomic<int> g_pdl{1};
/* Whether the first resident CTAs ask for kWarmRows rows of their tile in
 * L2 before griddep_wait. On by default; only bfp8_cuda_quantize_set_warm_l2
 * (quantize_1x128.cu) changes it. H200, in one process (bench/results/
 * 2026-12-01_quantize_h200_s13_warm_l2.txt): chained calls, bf16 dual
 * 16384x4096 89.5-89.7 -> 90.5-90.8% of the copy, W+W^T 89.1-89.3 ->
 * 90.3-90.5%; calls with an event between them (no previous grid to
 * overlap) 0.3-0.9 points slower. 32 rows gained less, 128 rows less again
 * and cost more without overlap. */
inline std::atomic<int> g_warm_l2{1};

/* Launch quantize_tiles_kernel on ctx's stream, a CTA per tile. The shared
 * memory attribute is set (and the kernel's fit checked) once per device. */
template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned>
bfp8_status launch_quantize_tiles(bfp8_context *ctx, const tile_args &args, const char *fn) {
    auto kernel = quantize_tiles_kernel<In, kBlock, kQ, kT, kAligned>;
    const int smem = kernel_shape<In>::kSmemBytes;
    constexpr int kCachedDevices = 64;
    static std::atomic<int> resident[kCachedDevices]; /* CTAs per SM, once the attribute is set (0: not yet) */
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    const bool cacheable = ctx->device >= 0 && ctx->device < kCachedDevices;
    int per_sm = cacheable ? resident[ctx->device].load(std::memory_order_acquire) : 0;
    if (per_sm == 0) {
        BFP8_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        BFP8_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
        if (per_sm < 1)
            return bfp8_fail(BFP8_ERR_CUDA, "%s: the quantize kernel does not fit on the device", fn);
        if (cacheable) resident[ctx->device].store(per_sm, std::memory_order_release);
    }
    tile_args warmed = args; /* the CTAs of the first wave warm L2 */
    warmed.warm_ctas =
        g_warm_l2.load(std::memory_order_relaxed) ? (int64_t)per_sm * bfp8_cuda_state_of(ctx)->num_sms : 0;
    CUtensorMap tmap_x = {}; /* TMA staging: x in boxes of one tile */
    if constexpr (kernel_shape<In>::kTmaLoads && kAligned)
        BFP8_TRY(bfp8_cuda_tensor_map_2d(&tmap_x, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.x, (uint64_t)args.cols,
                                         (uint64_t)args.rows, (uint64_t)args.x_ld * sizeof(In), kTile, kTile,
                                         CU_TENSOR_MAP_SWIZZLE_NONE, "x"));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((unsigned)(args.num_tiles < INT32_MAX ? args.num_tiles : INT32_MAX)); /* walks the rest */
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
    BFP8_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, warmed, tmap_x));
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}
#endif

} /* namespace bfp8_quant */
