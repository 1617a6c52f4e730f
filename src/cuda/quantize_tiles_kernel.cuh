/*
 * quantize_tiles_kernel.cuh - the one tile kernel behind every CUDA
 * quantizer (docs/RECIPE.md section 3): quantize_1x128.cu and
 * quantize_128x128.cu launch it (quantize_launch.cuh).
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
 * One CTA per tile, not a persistent grid walking tiles: the hardware's CTA
 * launch keeps the memory system busier than any walk (copies whose CTAs
 * each take one piece and leave reach 96-97% of cudaMemcpy on the H200,
 * persistent ones ~92%). What is left between bf16 dual and the copy is the
 * x^T layout, whose 128-byte pieces land in 128 rows per tile
 * (bench/quantize/probe_bandwidth moves the same bytes without quantizing
 * at the same speed).
 *
 * By default a launch is a programmatic dependent launch (the context option
 * BFP8_OPTION_QUANTIZE_PDL): a CTA may start while the previous kernel of the
 * stream is finishing, sets up its barriers and waits (griddep_wait) before
 * it reads or writes global memory.
 *
 * Fast path (kAligned): every access 16 bytes wide (quantize_tile_io.cuh).
 */
#pragma once

#include "cuda/quantize_tile_io.cuh"

namespace bfp8_quant {

constexpr int kWarmRows = 64; /* rows of its tile a CTA of the first wave asks L2 for before griddep_wait */
constexpr int kScratchBytes = kTile * kTile; /* partial maxima, then the transposed codes */
constexpr int kMultBytes = 2 * kTile * (int)sizeof(float);

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
 * no compiler flag can make it approximate; tests/quantize checks the
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

template <typename In> struct kernel_shape {
    /* the CTAs per SM the registers are capped for */
    static constexpr int kMinBlocks = sizeof(In) == 2 ? 3 : 2;
    static constexpr int kStageBytes = kTile * kTile * (int)sizeof(In);
    /* bf16: the TMA unit stages the tile, completing on one mbarrier after the multipliers */
    static constexpr bool kTmaLoads = sizeof(In) == 2;
    static constexpr int kBarrierOffset = kStageBytes + kScratchBytes + kMultBytes;
    static constexpr int kSmemBytes = kBarrierOffset + (kTmaLoads ? 8 : 0);
};

/* The block a thread holds: the staged format, or fp32 when its rows are scaled first. */
template <typename In, bool kScaled> struct held_block {
    using type = block8x8<In>;
};
template <typename In> struct held_block<In, true> {
    using type = block8x8<float>;
};

/*
 * One tile from the blocks its threads hold (thread t: rows (t / 16) * 8..,
 * columns (t % 16) * 8..) to every output (phases A-C of the header
 * comment). kFull: the tile has 128 valid rows and columns and kAligned
 * holds (the whole-tile path): the bounds become constants and every ragged
 * branch folds away.
 */
template <typename Block, bool kBlock, bool kQ, bool kT, bool kAligned, bool kFull>
__device__ __forceinline__ void quantize_block(const tile_args &a, tile_pos p, const Block &x, uint8_t *scratch) {
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
    tile_pos pt = p; /* where the transposed codes and scales go: a stack of weights' only (128x128) */
    if constexpr (kBlock && kT) pt = transposed_pos(a, p);

    /* A: the block into registers, partial maxima out */
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
            if (kT) a.t_scales[pt.tc * a.t_scale_ld + pt.tr] = scale;
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
                                     a.t_scales + pt.tr * a.t_scale_ld + pt.c0 + c, c < p.nc);
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
                const uint32_t lo = pack16x2(cvt_e4m3x2(__fmul_rn(x.at(i, 0), m), __fmul_rn(x.at(i, 1), m)),
                                             cvt_e4m3x2(__fmul_rn(x.at(i, 2), m), __fmul_rn(x.at(i, 3), m)));
                const uint32_t hi = pack16x2(cvt_e4m3x2(__fmul_rn(x.at(i, 4), m), __fmul_rn(x.at(i, 5), m)),
                                             cvt_e4m3x2(__fmul_rn(x.at(i, 6), m), __fmul_rn(x.at(i, 7), m)));
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
                const uint32_t h = cvt_e4m3x2(__fmul_rn(x.at(2 * k, j), cm[j]),
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
            store_transposed_full(a, pt, transposed);
        else
            store_transposed<kAligned>(a, pt, transposed);
    }
}

/* quantize_block of a tile staged in shared memory; kScaled: tile row i
 * times row_scale[i] first (the MoE permutation's routing weights). */
template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned, bool kFull, bool kScaled = false>
__device__ __forceinline__ void quantize_tile(const tile_args &a, const tile_pos &p, const uint8_t *staged,
                                              uint8_t *scratch, const float *row_scale = nullptr) {
    const int rb = (int)threadIdx.x >> 4, cc = (int)threadIdx.x & 15;
    typename held_block<In, kScaled>::type x;
    if constexpr (kScaled)
        x.template load_scaled<In>(staged, rb, cc, row_scale);
    else
        x.load(staged, rb, cc);
    quantize_block<decltype(x), kBlock, kQ, kT, kAligned, kFull>(a, p, x, scratch);
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
            tma_prefetch_descriptor(&tmap_x); /* a kernel parameter: fetch it while the previous grid drains */
            mbar_init(staged_bar, 1);
            fence_mbar_init();
        }
        __syncthreads();
    }
    /* The first resident CTAs ask for the first kWarmRows rows of their
     * tile in L2 while the previous grid drains (launched behind it),
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
            if ((i % kLines) * 128 < row_bytes) prefetch_l2(x0 + (i / kLines) * x_ld_bytes + (i % kLines) * 128);
    }
    /* launched behind another kernel: its outputs may be our x, and
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
                fence_proxy_async_shared(); /* earlier generic-proxy use of the buffer comes first */
                mbar_arrive_expect_tx(staged_bar, shape::kStageBytes);
                tma_load_2d(smem, &tmap_x, staged_bar, (int)p.c0, (int)p.r0);
            }
            mbar_wait(staged_bar, parity);
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


} /* namespace bfp8_quant */
