/*
 * gemm_fp8_pipeline.cuh - the ring of shared-memory stages of the FP8 GEMM
 * kernels: its layout, the producer that fills it, and the math warps' side
 * of a stage (run its wgmma, free it).
 *
 * One producer thread issues TMA loads of the A tile (BM x 128 bytes), the B
 * tile (BN x 128) and the k-block's scales into a STAGES-deep ring of
 * buffers, each guarded by a "full" mbarrier (the TMA unit counts the bytes
 * in) and an "empty" one (every math warp arrives when it is done with the
 * stage). The ring runs on across tiles.
 */
#pragma once

#include <cuda.h>

#include "cuda/gemm_fp8_params.cuh"
#include "cuda/gemm_fp8_scheduler.cuh"
#include "cuda/hopper.cuh"

namespace bfp8_gemm {

/* TMA_OUT: output tiles go out through shared memory and TMA (boxes of 64
 * rows x 128 bytes, 128-byte swizzle), one 64 x BN buffer per math
 * warpgroup, so a tile's stores overlap the next tile's main loop. */
template <int BM, int BN, bool B_1X128, int STAGES, int TMA_OUT = TMA_NONE> struct SharedLayout {
    static constexpr uint32_t A_BYTES = BM * BLOCK_K;
    static constexpr uint32_t B_BYTES = BN * BLOCK_K;
    static constexpr uint32_t SA_BYTES = BM * 4;
    /* 1D1D 256 x 112 with TMA outputs: the promotion's scale products
     * sa[row] * sb[col] come from a tf32 wgmma per row group (see
     * gemm_fp8_1d1d.cuh), whose B operand is the k-block's column scales split
     * into tf32 parts: BN rows of 8 tf32 (32 bytes, 32-byte swizzle), loaded by
     * TMA with the stage (in place of the column scales) from what the host's
     * scale_operand_kernel made of B's scales before the GEMM. The epilogue's
     * staging is per warp and half as large (store_tile_tma_per_warp), so
     * that four stages of it fit. */
    static constexpr bool SCALE_MMA = B_1X128 && Warps<BM>::ROW_GROUPS == 2 && BN == 112 && TMA_OUT != TMA_NONE;
    static constexpr uint32_t SCALE_OP_BYTES = BN * 32;
    static constexpr uint32_t SB_BYTES = B_1X128 && !SCALE_MMA ? (BN * 4 + 127) / 128 * 128 : 0; /* a TMA destination */
    /* 1D1D with one row group: each stage's scales have two slots, taken by
     * the parity of the stage ring's round, so the TMA that refills a stage
     * writes its scales where the math warps are not reading (see promote
     * in gemm_fp8_1d1d.cuh) */
    static constexpr int SCALE_SLOTS = B_1X128 && Warps<BM>::ROW_GROUPS == 1 ? 2 : 1;
    static constexpr uint32_t STAGE_BYTES =
        A_BYTES + B_BYTES + SCALE_SLOTS * (SA_BYTES + SB_BYTES) + (SCALE_MMA ? SCALE_OP_BYTES : 0);
    /* what the TMA unit writes into a stage: B's scales are BN floats, SB_BYTES is rounded up */
    static constexpr uint32_t STAGE_TX_BYTES =
        A_BYTES + B_BYTES + SA_BYTES + (SCALE_MMA ? SCALE_OP_BYTES : B_1X128 ? BN * 4 : 0);
    static constexpr uint32_t OFF_A = 0;
    static constexpr uint32_t OFF_B = OFF_A + STAGES * A_BYTES;
    static constexpr uint32_t OFF_SA = OFF_B + STAGES * B_BYTES;
    static constexpr uint32_t OFF_SB = OFF_SA + SCALE_SLOTS * STAGES * SA_BYTES;
    /* per math warpgroup; SCALE_MMA: 8 rows of half the tile's columns per warp */
    static constexpr uint32_t STAGING_BYTES =
        64 * BN * tma_out_bytes(TMA_OUT) / Warps<BM>::ROW_GROUPS / (SCALE_MMA ? 2 : 1);
    /* 1024-byte aligned: the swizzle pattern is a function of the address */
    static constexpr uint32_t OFF_SCALE_OP = (OFF_SB + SCALE_SLOTS * STAGES * SB_BYTES + 1023) / 1024 * 1024;
    static constexpr uint32_t OFF_STAGING =
        (OFF_SCALE_OP + (SCALE_MMA ? STAGES * SCALE_OP_BYTES : 0) + 1023) / 1024 * 1024;
    static constexpr uint32_t OFF_BARRIERS = OFF_STAGING + Warps<BM>::MATH_WG * STAGING_BYTES;
    /* + 1024 so the base can be aligned for the 128-byte swizzle pattern */
    static constexpr uint32_t TOTAL = OFF_BARRIERS + 2 * STAGES * 8 + 1024;
    static_assert(B_BYTES % 1024 == 0 && A_BYTES % 1024 == 0, "swizzled tiles need 1024-byte alignment");
    static_assert(SA_BYTES % 128 == 0 && SB_BYTES % 128 == 0, "TMA destinations need 128-byte alignment");
    static_assert(Warps<BM>::ROW_GROUPS == 1 || (B_1X128 && BN == 112 && TMA_OUT != TMA_BF16),
                  "row groups: 1D1D 256 x 112 tiles");
};

/* The most stages of a configuration that fit in shared memory (at most 8);
 * for the narrow tiles (BM = 64, Warps::CTAS_PER_SM = 2), in half of it: a
 * narrow CTA's k-blocks go at a pace of their own whatever the stages, so an
 * SM runs two. */
template <int BM, int BN, bool B_1X128, int TMA_OUT> constexpr int stages_for() {
    using One = SharedLayout<BM, BN, B_1X128, 1, TMA_OUT>;
    constexpr bool STAGING = TMA_OUT != TMA_NONE;
    constexpr int limit = 227 * 1024 / Warps<BM>::CTAS_PER_SM - One::STAGING_BYTES * Warps<BM>::MATH_WG;
    /* + alignment of the staging buffers and of the scale operands (SCALE_MMA), + the
     * shared memory the system reserves for each CTA */
    constexpr int fixed = 1024 + 64 + (STAGING ? 1024 : 0) + (One::SCALE_MMA ? 1024 : 0) + 1024;
    constexpr int fit = (limit - fixed) / ((int)One::STAGE_BYTES + 16);
    return fit > 8 ? 8 : fit;
}

/* A CTA's stage ring in shared memory: the aligned base, and SharedLayout's
 * pieces of it. */
struct StageRing {
    uint8_t *base, *a, *b;
    float *sa, *sb;
    uint64_t *full, *empty;
};

/* The producer thread, the same for both kernels: for each of this CTA's
 * units, the A tile, the B tile and the 1x128 scales (A's; 1D1D: B's too) of
 * each k-block into the next stage, once every math warp has freed it.
 * (SCALE_MMA: the unit's k-blocks rounded up to whole rounds of the ring,
 * the extra ones loaded from past the end of the tensors: zeros. Not
 * unrolled: with the 24 registers the producer keeps, copies spilled.) */
template <int BM, int BN, bool B_1X128, int STAGES, int TMA_OUT, bool SPLITS, bool GROUPED>
__device__ __forceinline__ void produce_stages(const Params &p, const CUtensorMap *tmap_a, const CUtensorMap *tmap_b,
                                               const CUtensorMap *tmap_scale_a, const CUtensorMap *tmap_scale_b,
                                               const StageRing &ring, int cta, int num_ctas, int num_units,
                                               int num_tile_rows, int num_tile_cols) {
    using namespace bfp8_sm90;
    using L = SharedLayout<BM, BN, B_1X128, STAGES, TMA_OUT>;
    constexpr bool K_GROUPED = GROUPED && B_1X128, M_GROUPED = GROUPED && !B_1X128;
    int stage = 0;
    uint32_t phase = 0;
    for (int u = (SPLITS ? p.num_whole_tiles : 0) + cta; u < num_units; u = SPLITS ? num_units : u + num_ctas) {
        const Unit w = unit_of<SPLITS, K_GROUPED>(p, u);
        int tile_row, tile_col;
        tile_coordinates(w.tile, num_tile_rows, num_tile_cols, p.group_m, &tile_row, &tile_col);
        const int n0 = tile_col * BN;
        int m0 = tile_row * BM, b0 = n0;
        if constexpr (M_GROUPED) { /* the m-tile's rows; B's in the weight of its group */
            const GroupedMTile t = grouped_m_tile(p, tile_row);
            m0 = t.m0;
            b0 = t.group * p.group_n + n0;
        }
        constexpr bool PAD_ROUNDS = L::SCALE_MMA;
        const int kb_end = PAD_ROUNDS ? w.kb0 + (w.kb1 - w.kb0 + STAGES - 1) / STAGES * STAGES : w.kb1;
#pragma unroll 1
        for (int kb_run = w.kb0; kb_run < kb_end; ++kb_run) {
            const int kb = !PAD_ROUNDS || kb_run < w.kb1 ? kb_run : p.num_k_blocks + (kb_run - w.kb1);
            mbar_wait(&ring.empty[stage], phase ^ 1);
            mbar_arrive_expect_tx(&ring.full[stage], L::STAGE_TX_BYTES);
            const int k0 = kb * BLOCK_K;
            uint8_t *a_dst = ring.a + stage * L::A_BYTES, *b_dst = ring.b + stage * L::B_BYTES;
            tma_load_2d(a_dst, tmap_a, &ring.full[stage], k0, m0);
            tma_load_2d(b_dst, tmap_b, &ring.full[stage], k0, b0);
            const int slot = stage + (L::SCALE_SLOTS == 2 && phase ? STAGES : 0); /* of the scales */
            tma_load_2d(ring.sa + slot * BM, tmap_scale_a, &ring.full[stage], m0, kb);
            if constexpr (L::SCALE_MMA) /* B's scales as the scale wgmma's operand (3-D: k-block) */
                tma_load_3d(ring.base + L::OFF_SCALE_OP + stage * L::SCALE_OP_BYTES, tmap_scale_b, &ring.full[stage], 0,
                            n0, kb);
            else if (B_1X128)
                tma_load_2d(ring.sb + slot * (L::SB_BYTES / 4), tmap_scale_b, &ring.full[stage], n0, kb);
            if (++stage == STAGES) {
                stage = 0;
                phase ^= 1;
            }
        }
    }
}

template <int STAGES> __device__ __forceinline__ void next_stage(int &s, uint32_t &ph) {
    if (++s == STAGES) {
        s = 0;
        ph ^= 1;
    }
}

/* D(64 x 32, f32) (+)= A(64 x 32, e4m3, smem) . B(32 x 32, e4m3, smem)^T; d holds 16 f32 per
 * thread (the narrow tiles of small 1D1D outputs). */
__device__ __forceinline__ void wgmma_m64n32k32_e4m3(float (&d)[16], uint64_t desc_a, uint64_t desc_b,
                                                     int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, %16, %17, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/* D(64 x 64, f32) (+)= A(64 x 32, e4m3, smem) . B(64 x 32, e4m3, smem)^T; d holds 32 f32 per
 * thread (the narrow tiles of small 1D1D outputs). */
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                     int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/* The m64nBNk32 wgmma for a tile width. */
template <int BN>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[BN / 2], uint64_t desc_a, uint64_t desc_b, int accumulate) {
    using namespace bfp8_sm90;
    if constexpr (BN == 32) wgmma_m64n32k32_e4m3(d, desc_a, desc_b, accumulate);
    else if constexpr (BN == 64) wgmma_m64n64k32_e4m3(d, desc_a, desc_b, accumulate);
    else if constexpr (BN == 112) wgmma_m64n112k32_e4m3(d, desc_a, desc_b, accumulate);
    else if constexpr (BN == 128) wgmma_m64n128k32_e4m3(d, desc_a, desc_b, accumulate);
    else {
        static_assert(BN == 192, "no wgmma for this tile width");
        wgmma_m64n192k32_e4m3(d, desc_a, desc_b, accumulate);
    }
}

/* The 4 wgmma of one k-block into acc (started, not waited for); desc_a and
 * desc_b: the lower words of the stage's tile descriptors. */
template <int BN>
__device__ __forceinline__ void wgmma_k_block(float (&acc)[BN / 2], uint32_t desc_a, uint32_t desc_b) {
    using namespace bfp8_sm90;
    fence_accumulators(acc);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BLOCK_K / 32; ++ks) {
        const uint64_t da = wgmma_desc_sw128(desc_a + 2 * ks), db = wgmma_desc_sw128(desc_b + 2 * ks);
        wgmma_e4m3<BN>(acc, da, db, ks > 0);
    }
    wgmma_commit();
}

/* Free stage s (empty barriers from `empty_bars`, 8 bytes apart): this
 * warp's wgmma on it finished, and `read` (the bits of the scales it loaded
 * from the stage, OR-ed) proves its shared-memory loads returned. The arrive
 * does not wait for a load still in flight (ptxas issues it before their
 * first use), and the producer's next TMA into the stage could then land
 * first: rows of a tile promoted with the row scale of the k-block STAGES
 * later. The test on `read` makes the arrive wait for every load instruction
 * whose result went into it (tools/sass_release_audit.py checks the compiled
 * kernels). ELECT: the arriving lane chosen by elect.sync rather than by its
 * index (for a kernel at its register cap, where the index held through the
 * k-loop costs a spill). */
template <bool ELECT>
__device__ __forceinline__ void release_stage(const Params &p, uint32_t empty_bars, int s, uint32_t read, int lane) {
    using namespace bfp8_sm90;
    __syncwarp();
    const bool leader = ELECT ? elect_one_lane() : lane == 0;
    if (leader && (read & p.release_mask) == 0) {
        const uint32_t bar = empty_bars + 8 * s;
        mbar_arrive_at(bar);
    }
}

} /* namespace bfp8_gemm */
