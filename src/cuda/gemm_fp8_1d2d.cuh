/*
 * gemm_fp8_1d2d.cuh - the 1D2D FP8 GEMM kernel for sm_90a (fprop, dgrad):
 *
 *   D[m, n] = sum_kb  sa[m, kb] * sb[n/128, kb] * P_kb[m, n]
 *
 * A in 1 x 128 groups (scales sa, one per row and k-block, loaded by TMA
 * with the stage), B in 128 x 128 blocks (scales sb, one float per k-block
 * and 128 columns, read with plain loads). Persistent and warp-specialized:
 *   - the last warpgroup is the producer: one thread loads each k-block's A
 *     tile, B tile and row scales into the stage ring (gemm_fp8_pipeline.cuh);
 *   - BM / 64 math warpgroups (2 or 3) do the math on 64 rows each: 4 wgmma
 *     m64nBNk32 per k-block into a scratch accumulator, then
 *     fin += sa * sb * acc; a BN = 192 tile meets two 128-column scale
 *     blocks of B;
 *   - units (whole tiles, or k-slices of the last wave: SPLITS; m-tiles of
 *     one group each: GROUPED) come from gemm_fp8_scheduler.cuh, the
 *     epilogues from gemm_fp8_epilogue.cuh.
 */
#pragma once

#include "cuda/gemm_fp8_epilogue.cuh"
#include "cuda/gemm_fp8_pipeline.cuh"
#include "cuda/gemm_fp8_scheduler.cuh"

namespace bfp8_gemm {

/* SPLITS: the kernel that runs split units (Params::split > 1). Every
 * configuration also has one without (split == 1 only): with the split code
 * compiled in, whole tiles ran 4-5% slower on the H200 although the k-loop's
 * instructions were the same. */
template <int BM, int BN, int STAGES, int TMA_OUT, bool SPLITS, bool GROUPED>
__global__ void __launch_bounds__(Warps<BM>::NUM_THREADS, 1)
    gemm_fp8_1d2d_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                         const __grid_constant__ CUtensorMap tmap_scale_a,
                         const __grid_constant__ CUtensorMap tmap_scale_b, const __grid_constant__ CUtensorMap tmap_d,
                         const Params p) {
    using namespace bfp8_sm90;
    using L = SharedLayout<BM, BN, false, STAGES, TMA_OUT>;
    using W = Warps<BM>;
    constexpr int PRODUCER_THREAD = 128 * W::MATH_WG;
    constexpr int ACC = BN / 2; /* accumulator floats per thread: 64 rows x BN over 128 threads */
    static_assert(W::ROW_GROUPS == 1 && BN % 64 == 0 && BN <= 256, "1D2D: BM 128 or 192, BN a multiple of 64");
    static_assert(TMA_OUT == TMA_NONE || TMA_OUT == TMA_BF16 || TMA_OUT == TMA_F32, "1D2D: bf16 or f32 out");
    static_assert(!SPLITS || !GROUPED, "grouped GEMMs: whole tiles");

    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    uint8_t *smem_a = smem + L::OFF_A;
    uint8_t *smem_b = smem + L::OFF_B;
    float *smem_sa = reinterpret_cast<float *>(smem + L::OFF_SA);
    float *smem_sb = reinterpret_cast<float *>(smem + L::OFF_SB); /* (none: B's scales are 1D1D's) */
    uint64_t *full = reinterpret_cast<uint64_t *>(smem + L::OFF_BARRIERS);
    uint64_t *empty = full + STAGES;

    /* through a shuffle, so the compiler knows it is the same in the whole
     * warp and keeps what derives from it (descriptors) in uniform registers */
    const int warpgroup = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);

    if (threadIdx.x == PRODUCER_THREAD) {
        tma_prefetch_descriptor(&tmap_a);
        tma_prefetch_descriptor(&tmap_b);
        tma_prefetch_descriptor(&tmap_scale_a);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], W::MATH_WARPS); /* every math warp */
        }
        fence_mbar_init();
    }
    __syncthreads();
    grid_order_start<SPLITS>(p);

    const int num_ctas = gridDim.x;
    const int cta = blockIdx.x;
    /* (grouped: the m-tiles in the table; p.num_units is a bound) */
    const int num_tile_rows = GROUPED ? __ldg(p.group_table) : p.num_m_tiles;
    const int num_tile_cols = p.num_n_tiles;
    const int num_units = GROUPED ? min(p.num_units, num_tile_rows * num_tile_cols) : p.num_units;

    if (warpgroup == W::MATH_WG) {
        /* ---------------- producer ---------------- */
        regs_decrease<W::PRODUCER_REGS>();
        if (threadIdx.x == PRODUCER_THREAD) {
            const StageRing ring{smem, smem_a, smem_b, smem_sa, smem_sb, full, empty};
            produce_stages<BM, BN, false, STAGES, TMA_OUT, SPLITS, GROUPED>(p, &tmap_a, &tmap_b, &tmap_scale_a,
                                                                         &tmap_scale_b, ring, cta, num_ctas, num_units,
                                                                         num_tile_rows, num_tile_cols);
        }
    } else {
        /* ---------------- math ---------------- */
        regs_increase<W::MATH_REGS>();
        const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
        const int row_in_tile = warpgroup * 64 + warp * 16 + lane / 4; /* and row_in_tile + 8 */
        const int col_in_chunk = 2 * (lane % 4);
        float fin[ACC], acc[ACC];
        int stage = 0;
        uint32_t phase = 0;
        /* Shared-memory addresses and descriptors of stage 0, made once: stage s
         * is a constant offset away, so the k-loop converts no generic pointer
         * (in SASS that conversion re-read the CTA's shared window every
         * k-block, and under BM=192's register cap the compiler remade
         * thread-index terms too). */
        const uint32_t full_kept = smem_u32(full), empty_kept = smem_u32(empty);
        const uint32_t desc_a_kept = wgmma_desc_lo(smem_a + warpgroup * 64 * BLOCK_K);
        const uint32_t desc_b_kept = wgmma_desc_lo(smem_b);
        const uint32_t sa_kept = smem_u32(smem_sa + row_in_tile);

        for (int u = (SPLITS ? p.num_whole_tiles : 0) + cta; u < num_units; u = SPLITS ? num_units : u + num_ctas) {
            const Unit w = unit_of<SPLITS, false>(p, u);
            int tile_row, tile_col;
            tile_coordinates(w.tile, num_tile_rows, num_tile_cols, p.group_m, &tile_row, &tile_col);
            const int n0 = tile_col * BN;
            int m0 = tile_row * BM;
            /* grouped: the group's rows end at m_end (else p.m) */
            int m_end = p.m, nb_group = 0;
            if constexpr (GROUPED) {
                const GroupedMTile t = grouped_m_tile(p, tile_row);
                m0 = t.m0;
                m_end = t.row_end;
                nb_group = t.group * (p.group_n / 128);
            }
            /* The tile's columns meet at most two 128-column scale blocks (a
             * tile past the last column reads the last block and stores
             * nothing); grouped, blocks of the m-tile's group's weight */
            const int nb0 = nb_group + min(n0 / 128, p.num_b_blocks - 1);
            const int nb1 = nb_group + min(n0 / 128 + 1, p.num_b_blocks - 1);
            const int split = 128 - (n0 % 128); /* first column of block nb1 */
            /* B's scales of the unit's first k-block */
            const float *b_scales0 = p.b_block_scales + nb0 * p.b_block_scale_ld + w.kb0;
            const float *b_scales1 = p.b_block_scales + nb1 * p.b_block_scale_ld + w.kb0;

#pragma unroll
            for (int i = 0; i < ACC; ++i) fin[i] = 0.0f;

            /* Load B's scales of the k-block (bs0, bs1) now, so they land while
             * the tensor core works; wait for the stage's data; read A's row
             * scales (long before the release) and start the 4 wgmma into acc. */
            auto issue = [&](int s, uint32_t ph, const float *bs0, const float *bs1, float &sb0, float &sb1,
                             float &sa0, float &sa1) {
                sb0 = __ldg(bs0);
                sb1 = BN > 128 ? __ldg(bs1) : sb0;
                mbar_wait_at(full_kept + 8 * s, ph);
                sa0 = ld_shared_f32(sa_kept + s * (BM * 4));
                sa1 = ld_shared_f32(sa_kept + s * (BM * 4) + 8 * 4);
                const uint32_t desc_a = desc_a_kept + (uint32_t)s * (L::A_BYTES >> 4);
                const uint32_t desc_b = desc_b_kept + (uint32_t)s * (L::B_BYTES >> 4);
                wgmma_k_block<BN>(acc, desc_a, desc_b);
            };
            /* fin += scales * acc for the k-block held in stage s, after freeing
             * the stage (nothing more to read from it; the release waits for the
             * row scales' loads). SPLIT: columns from SPLIT on use B's second
             * scale block; it is a literal at each inlined call, so every FFMA
             * reads one of four registers with no select. */
            auto promote = [&](int s, float sb0, float sb1, float sa0, float sa1, const int SPLIT) {
                fence_accumulators(acc);
                release_stage<false>(p, empty_kept, s, __float_as_uint(sa0) | __float_as_uint(sa1), lane);
                const float s00 = sa0 * sb0, s10 = sa1 * sb0, s01 = sa0 * sb1, s11 = sa1 * sb1;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
                    const bool second = 8 * j >= SPLIT;
                    const float s0 = second ? s01 : s00, s1 = second ? s11 : s10;
                    fin[4 * j + 0] += s0 * acc[4 * j + 0];
                    fin[4 * j + 1] += s0 * acc[4 * j + 1];
                    fin[4 * j + 2] += s1 * acc[4 * j + 2];
                    fin[4 * j + 3] += s1 * acc[4 * j + 3];
                }
            };
            /* One k-block in stage s with the current phase, B's scales at bs0 (and bs1). */
            auto step = [&](const int s, const float *bs0, const float *bs1, const int split_tag) {
                float sb0 = 0.0f, sb1 = 0.0f, sa0 = 0.0f, sa1 = 0.0f;
                issue(s, phase, bs0, bs1, sb0, sb1, sa0, sa1);
                wgmma_wait<0>();
                promote(s, sb0, sb1, sa0, sa1, split_tag);
            };
            /* The ring of stages runs on across tiles: k-blocks up to the next
             * stage 0 one at a time, then whole rounds of STAGES with the
             * stage a literal in every copy of the body (barrier, descriptor
             * and scale addresses become immediates: fewer instructions to
             * issue per k-block), then the rest one at a time. */
            auto mainloop = [&](const int split_tag) {
                const int nk = w.kb1 - w.kb0;
                /* B's scales of k-block kb, advanced with it (loads at
                 * immediate offsets, not an address made per k-block) */
                const float *bs0 = b_scales0, *bs1 = b_scales1;
                int kb = 0;
                for (; kb < nk && stage != 0; ++kb, ++bs0, ++bs1) {
                    step(stage, bs0, bs1, split_tag);
                    next_stage<STAGES>(stage, phase);
                }
                for (; kb + STAGES <= nk; kb += STAGES, bs0 += STAGES, bs1 += STAGES) {
#pragma unroll
                    for (int u = 0; u < STAGES; ++u) step(u, bs0 + u, bs1 + u, split_tag);
                    phase ^= 1;
                }
                for (; kb < nk; ++kb, ++bs0, ++bs1) {
                    step(stage, bs0, bs1, split_tag);
                    next_stage<STAGES>(stage, phase);
                }
            };
            /* A BN=128 tile lies inside one 128-column block of B; a BN=192 tile
             * starts at column 0 or 64 of a block and so splits at 128 or 64. */
            if constexpr (BN <= 128) {
                mainloop(BN);
            } else {
                if (split == 128) mainloop(128);
                else mainloop(64);
            }
            /* (the unit's place among the split ones, remade from u: one register less in the loop) */
            if (SPLITS && u >= p.num_whole_tiles &&
                !combine_k_slices<W::MATH_WG>(p, u - p.num_whole_tiles, warpgroup, fin))
                continue;

            if constexpr (TMA_OUT != TMA_NONE)
                store_tile_tma<BN, TMA_OUT, GROUPED, false>(&tmap_d,
                                                            smem + L::OFF_STAGING + warpgroup * L::STAGING_BYTES, fin,
                                                            warpgroup, warp, lane, col_in_chunk, m0, n0, m_end, p.n, 0);
            else
                store_tile_registers<1, BN>(p, fin, m0 + row_in_tile, m_end, n0, col_in_chunk);
        }
        /* shared memory must stay valid until the last bulk store has read it */
        if constexpr (TMA_OUT != TMA_NONE) {
            if (threadIdx.x % 128 == 0) bulk_wait_all();
        }
    }

    split_grid_end<SPLITS>();
}

} /* namespace bfp8_gemm */
