/*
 * gemm_fp8_1d1d.cuh - the 1D1D FP8 GEMM kernel for sm_90a (wgrad):
 *
 *   D[m, n] = C[m, n] + sum_kb  sa[m, kb] * sb[n, kb] * P_kb[m, n]
 *
 * Both operands in 1 x 128 groups: a scale per row of A and per row of B
 * (column of D) and k-block, both loaded by TMA with the stage. Persistent
 * and warp-specialized like the 1D2D kernel (gemm_fp8_1d2d.cuh); what
 * differs is the promotion, two multiplies per element:
 *   - BM 64, 128 or 192 (one row group): each stage's scales in two slots by
 *     the ring's round parity, so a stage is freed as soon as its wgmma are
 *     done, before its scales are read;
 *   - BM 256 x BN 112 (row groups): two math warpgroups of 128 rows, each as
 *     two 64-row groups whose wgmma run one after the other into the same
 *     scratch accumulator, B's column scales loaded once for both; with TMA
 *     outputs (SCALE_MMA) the products sa[row] * sb[col] come from a tf32
 *     wgmma over a pre-made operand instead, one FFMA an element.
 * GROUPED: units of one group's tile over its k-blocks (grouped along the
 * tokens), D offset to the group's rows.
 */
#pragma once

#include "cuda/gemm_fp8_epilogue.cuh"
#include "cuda/gemm_fp8_pipeline.cuh"
#include "cuda/gemm_fp8_scheduler.cuh"

namespace bfp8_gemm {

/* SPLITS: the kernel that runs split units (Params::split > 1); see
 * gemm_fp8_1d2d_kernel. */
template <int BM, int BN, int STAGES, int TMA_OUT, bool SPLITS, bool GROUPED>
__global__ void __launch_bounds__(Warps<BM>::NUM_THREADS, Warps<BM>::CTAS_PER_SM)
    gemm_fp8_1d1d_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                         const __grid_constant__ CUtensorMap tmap_scale_a,
                         const __grid_constant__ CUtensorMap tmap_scale_b, const __grid_constant__ CUtensorMap tmap_d,
                         const Params p) {
    using namespace bfp8_sm90;
    using L = SharedLayout<BM, BN, true, STAGES, TMA_OUT>;
    using W = Warps<BM>;
    constexpr int PRODUCER_THREAD = 128 * W::MATH_WG;
    constexpr int ACC = BN / 2; /* accumulator floats per thread: 64 rows x BN over 128 threads */
    constexpr int RG = W::ROW_GROUPS, FIN = RG * ACC; /* FIN: the thread's floats of the tile */
    static_assert((RG == 2 ? BN % 16 == 0 : BN % (BM == 64 ? 32 : 64) == 0) && BN <= 256,
                  "BN: a multiple of 64 (of 32 for BM=64, of 16 for BM=256)");
    static_assert(TMA_OUT != TMA_BF16, "1D1D: f32 out through the TMA unit");
    static_assert(RG == 1 || !GROUPED, "row groups: not grouped");
    static_assert(!SPLITS || can_split(BN, true), "no split kernel for this configuration");
    static_assert(L::SCALE_SLOTS == 1 || STAGES >= 2, "two scale slots: a slot is written again after kb + STAGES");
    static_assert(!SPLITS || !GROUPED, "grouped GEMMs: whole tiles");

    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    uint8_t *smem_a = smem + L::OFF_A;
    uint8_t *smem_b = smem + L::OFF_B;
    float *smem_sa = reinterpret_cast<float *>(smem + L::OFF_SA);
    float *smem_sb = reinterpret_cast<float *>(smem + L::OFF_SB);
    uint64_t *full = reinterpret_cast<uint64_t *>(smem + L::OFF_BARRIERS);
    uint64_t *empty = full + STAGES;

    /* through a shuffle, so the compiler knows it is the same in the whole
     * warp and keeps what derives from it (descriptors) in uniform registers */
    const int warpgroup = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);

    if (threadIdx.x == PRODUCER_THREAD) {
        tma_prefetch_descriptor(&tmap_a);
        tma_prefetch_descriptor(&tmap_b);
        tma_prefetch_descriptor(&tmap_scale_a);
        tma_prefetch_descriptor(&tmap_scale_b);
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
    const int num_tile_rows = p.num_m_tiles;
    const int num_tile_cols = p.num_n_tiles;
    const int num_units = p.num_units;

    if (warpgroup == W::MATH_WG) {
        /* ---------------- producer ---------------- */
        if constexpr (W::REALLOCATE) regs_decrease<W::PRODUCER_REGS>();
        if (threadIdx.x == PRODUCER_THREAD) {
            const StageRing ring{smem, smem_a, smem_b, smem_sa, smem_sb, full, empty};
            produce_stages<BM, BN, true, STAGES, TMA_OUT, SPLITS, GROUPED>(p, &tmap_a, &tmap_b, &tmap_scale_a,
                                                                         &tmap_scale_b, ring, cta, num_ctas, num_units,
                                                                         num_tile_rows, num_tile_cols);
        }
    } else {
        /* ---------------- math ---------------- */
        if constexpr (W::REALLOCATE) regs_increase<W::MATH_REGS>();
        const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
        /* and row_in_tile + 8; row group g: + 64 g */
        const int row_in_tile = warpgroup * 64 * RG + warp * 16 + lane / 4;
        const int col_in_chunk = 2 * (lane % 4);
        float fin[FIN], acc[ACC]; /* fin: row group g at fin[g * ACC] */
        int stage = 0;
        uint32_t phase = 0;
        /* shared-memory addresses and descriptors of stage 0, made once (as in the 1D2D kernel) */
        const uint32_t full_kept = smem_u32(full), empty_kept = smem_u32(empty);
        const uint32_t desc_a_kept = wgmma_desc_lo(smem_a + warpgroup * 64 * RG * BLOCK_K);
        const uint32_t desc_b_kept = wgmma_desc_lo(smem_b);
        const uint32_t sa_kept = smem_u32(smem_sa + row_in_tile);
        const uint32_t sb_kept = smem_u32(smem_sb + col_in_chunk);
        /* SCALE_MMA: a scale split into tf32 parts, hi (its upper 19 bits) + lo (the rest, exact) */
        [[maybe_unused]] auto tf32_hi = [](float x) { return __float_as_uint(x) & 0xffffe000u; };
        [[maybe_unused]] auto tf32_lo = [](float x) {
            return __float_as_uint(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u));
        };

        for (int u = (SPLITS ? p.num_whole_tiles : 0) + cta; u < num_units; u = SPLITS ? num_units : u + num_ctas) {
            const Unit w = unit_of<SPLITS, GROUPED>(p, u);
            int tile_row, tile_col;
            tile_coordinates(w.tile, num_tile_rows, num_tile_cols, p.group_m, &tile_row, &tile_col);
            int n0 = tile_col * BN;
            int m0 = tile_row * BM;
            /* D's rows: from d_row0 (grouped: the group's) to d_row0 + m_end */
            const int d_row0 = GROUPED ? w.group * p.group_n : 0;
            const int m_end = p.m;

#pragma unroll
            for (int i = 0; i < FIN; ++i) fin[i] = 0.0f;

            /* Wait for the stage's data (row group g = 0; the later ones follow
             * it) and start its 4 wgmma for row group g into `into`. */
            auto issue_into = [&](float(&into)[ACC], int s, uint32_t ph, const int g) {
                if (g == 0) mbar_wait_at(full_kept + 8 * s, ph);
                const uint32_t desc_a =
                    desc_a_kept + (uint32_t)s * (L::A_BYTES >> 4) + (uint32_t)g * (64 * BLOCK_K >> 4);
                const uint32_t desc_b = desc_b_kept + (uint32_t)s * (L::B_BYTES >> 4);
                wgmma_k_block<BN>(into, desc_a, desc_b);
            };
            auto issue = [&](int s, uint32_t ph, const int g) { issue_into(acc, s, ph, g); };
            /* One row group: fin += sa * sb * acc for the k-block held in stage
             * s, and free the stage. The stage is freed as soon as the wgmma are
             * done, before its scales are read: they are in slot s of this
             * round's parity (SharedLayout::SCALE_SLOTS), which the producer
             * writes again only for k-block kb + 2 STAGES, after every math
             * warp has freed the stage for kb + STAGES. By then this warp's
             * loads of kb's scales have returned: the FFMAs below use them and
             * read acc, which kb + 1's wgmma (issued before that release)
             * overwrites (with two accumulators, kb + 2's). (Waiting for the
             * loads instead made 192 x 128 tiles with 3 stages 4-7% slower.) */
            auto promote_from = [&](float(&from)[ACC], int s, uint32_t ph) {
                fence_accumulators(from);
                release_stage<false>(p, empty_kept, s, 0u, lane);
                const uint32_t slot = (uint32_t)s + (ph ? STAGES : 0);
                const float sa0 = ld_shared_f32(sa_kept + slot * (BM * 4));
                const float sa1 = ld_shared_f32(sa_kept + slot * (BM * 4) + 8 * 4);
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
                    const float2 v = ld_shared_f32x2(sb_kept + slot * L::SB_BYTES + 32u * j);
                    fin[4 * j + 0] += (sa0 * v.x) * from[4 * j + 0];
                    fin[4 * j + 1] += (sa0 * v.y) * from[4 * j + 1];
                    fin[4 * j + 2] += (sa1 * v.x) * from[4 * j + 2];
                    fin[4 * j + 3] += (sa1 * v.y) * from[4 * j + 3];
                }
            };
            auto promote = [&](int s) { promote_from(acc, s, phase); };
            /* Row groups: the k-block of stage s for each row group in turn. */
            auto step_row_groups = [&](const int s) {
                if constexpr (L::SCALE_MMA) {
                    /* Per row group, its 4 wgmma into acc, then the products
                     * sa[row] * sb[col] of all its elements into prod by one tf32 wgmma:
                     * A (registers) has the row scale's hi part in columns 0-3 and its lo
                     * part in 4-7, B (the stage's operand) the column scale as
                     * (hi, lo, 0, 0, hi, 0, 0, 0); the sum hi.hi + hi.lo + lo.hi is
                     * sa * sb to ~2^-21 (hi: the upper 19 bits, exact in tf32; lo = x - hi).
                     * The promotion is then one FFMA an element, no column scale loaded. */
                    float prod[ACC];
                    const uint32_t scale_desc = desc_b_kept + ((L::OFF_SCALE_OP - L::OFF_B) >> 4) +
                                                (uint32_t)s * (L::SCALE_OP_BYTES >> 4);
#pragma unroll
                    for (int g = 0; g < RG; ++g) {
                        issue(s, phase, g);
                        const float sa0 = ld_shared_f32(sa_kept + s * (BM * 4) + (64 * g) * 4);
                        const float sa1 = ld_shared_f32(sa_kept + s * (BM * 4) + (64 * g + 8) * 4);
                        fence_accumulators(prod);
                        wgmma_fence();
                        wgmma_m64n112k8_tf32(prod, tf32_hi(sa0), tf32_hi(sa1), tf32_lo(sa0), tf32_lo(sa1),
                                             wgmma_desc_sw32(scale_desc));
                        wgmma_commit();
                        wgmma_wait<0>();
                        fence_accumulators(acc);
                        fence_accumulators(prod);
                        float *f = fin + g * ACC;
#pragma unroll
                        for (int i = 0; i < ACC; ++i) f[i] += prod[i] * acc[i];
                    }
                    /* every load from the stage went into a wgmma waited for above */
                    release_stage<true>(p, empty_kept, s, 0u, lane);
                    return;
                }
                /* B's column scales loaded once (while the first group's wgmma
                 * run) and kept in registers for both groups */
                issue(s, phase, 0);
                float2 col_scale[BN / 8];
                float row_scale[2 * RG];
#pragma unroll
                for (int j = 0; j < BN / 8; ++j)
                    col_scale[j] = ld_shared_f32x2(sb_kept + (uint32_t)s * L::SB_BYTES + 32u * j);
#pragma unroll
                for (int i = 0; i < 2 * RG; ++i) /* rows 64 g + (0 or 8) */
                    row_scale[i] = ld_shared_f32(sa_kept + s * (BM * 4) + ((i / 2) * 64 + (i % 2) * 8) * 4);
                wgmma_wait<0>();
#pragma unroll
                for (int g = 0; g < RG; ++g) {
                    if (g > 0) {
                        issue(s, phase, g);
                        wgmma_wait<0>();
                    }
                    fence_accumulators(acc);
                    const float sa0 = row_scale[2 * g], sa1 = row_scale[2 * g + 1];
                    float *f = fin + g * ACC;
#pragma unroll
                    for (int j = 0; j < BN / 8; ++j) {
                        f[4 * j + 0] += (sa0 * col_scale[j].x) * acc[4 * j + 0];
                        f[4 * j + 1] += (sa0 * col_scale[j].y) * acc[4 * j + 1];
                        f[4 * j + 2] += (sa1 * col_scale[j].x) * acc[4 * j + 2];
                        f[4 * j + 3] += (sa1 * col_scale[j].y) * acc[4 * j + 3];
                    }
                }
                /* Nothing to prove: every scale was loaded before the first group's
                 * wgmma wait, and the column scales and group 0's row scales were used
                 * by group 0's FFMAs, which read acc and so ran before the next
                 * group's wgmma overwrote it. (Proving the last group's row scales
                 * too cost 1.5%; tools/sass_release_audit.py checks that the compiled
                 * kernel has no load in flight at the release.) */
                release_stage<false>(p, empty_kept, s, 0u, lane);
            };
            /* One k-block in stage s with the current phase. */
            auto step = [&](const int s) {
                if constexpr (RG > 1) {
                    step_row_groups(s);
                } else {
                    issue(s, phase, 0);
                    wgmma_wait<0>();
                    promote(s);
                }
            };
            /* The ring of stages runs on across tiles, as in the 1D2D kernel:
             * up to the next stage 0 one k-block at a time, then whole rounds
             * with the stage a literal in each copy of the body, then the rest.
             * 5 or more stages keep the plain loop: under BM=192's register cap
             * its five copies spill. SCALE_MMA: whole rounds only (the producer
             * rounds every unit's k-blocks up to them, loading zeros past the
             * end), so each unit starts at stage 0 and the loop is the straight
             * unrolled one (a loop with partial rounds spills under the
             * register cap). */
            auto mainloop = [&]() {
                if constexpr (W::MATH_WG == 1) {
                    /* One math warpgroup (BM = 64): nothing else would run on
                     * the tensor core while it promotes, so k-blocks go to two
                     * accumulators in turn, the wgmma of kb + 1 running while
                     * kb is promoted. */
                    const int nk = w.kb1 - w.kb0;
                    if (nk == 0) return;
                    float acc2[ACC];
                    /* k-block kb, in `cur` from stage s: start kb + 1 into `next`,
                     * promote kb, step to kb + 1's stage; true if kb was the last */
                    auto promote_next_running = [&](float(&cur)[ACC], float(&next)[ACC], int kb) {
                        int s = stage;
                        uint32_t ph = phase;
                        next_stage<STAGES>(stage, phase);
                        if (kb + 1 < nk) {
                            issue_into(next, stage, phase, 0);
                            wgmma_wait<1>();
                        } else {
                            wgmma_wait<0>();
                        }
                        promote_from(cur, s, ph);
                        return kb + 1 == nk;
                    };
                    issue_into(acc, stage, phase, 0);
                    for (int kb = 0;; kb += 2)
                        if (promote_next_running(acc, acc2, kb) || promote_next_running(acc2, acc, kb + 1)) return;
                } else if constexpr (L::SCALE_MMA) {
                    const int nk = w.kb1 - w.kb0;
                    for (int left = (nk + STAGES - 1) / STAGES; left > 0; --left) {
#pragma unroll
                        for (int u = 0; u < STAGES; ++u) step(u);
                        phase ^= 1;
                    }
                } else {
                    constexpr bool UNROLL_STAGES = STAGES <= 4;
                    const int nk = w.kb1 - w.kb0;
                    int kb = 0;
                    for (; kb < nk && (!UNROLL_STAGES || stage != 0); ++kb) {
                        step(stage);
                        next_stage<STAGES>(stage, phase);
                    }
                    for (; UNROLL_STAGES && kb + STAGES <= nk; kb += STAGES) {
#pragma unroll
                        for (int u = 0; u < STAGES; ++u) step(u);
                        phase ^= 1;
                    }
                    for (; kb < nk; ++kb) {
                        step(stage);
                        next_stage<STAGES>(stage, phase);
                    }
                }
            };
            mainloop();
            if constexpr (L::SCALE_MMA) {
                /* the tile's place remade from u, not kept through the k-loop: at the
                 * register cap, u was spilled otherwise */
                tile_coordinates(w.tile, num_tile_rows, num_tile_cols, p.group_m, &tile_row, &tile_col);
                n0 = tile_col * BN;
                m0 = tile_row * BM;
            }
            /* (the unit's place among the split ones, remade from u: one register less in the loop) */
            if (SPLITS && u >= p.num_whole_tiles &&
                !combine_k_slices<W::MATH_WG>(p, u - p.num_whole_tiles, warpgroup, fin))
                continue;

            if constexpr (L::SCALE_MMA)
                store_tile_tma_per_warp<RG, BN, TMA_OUT>(p, &tmap_d,
                                                         smem + L::OFF_STAGING + warpgroup * L::STAGING_BYTES, fin,
                                                         warpgroup, m0, n0);
            else if constexpr (TMA_OUT != TMA_NONE)
                store_tile_tma<BN, TMA_OUT, false, GROUPED>(&tmap_d,
                                                            smem + L::OFF_STAGING + warpgroup * L::STAGING_BYTES, fin,
                                                            warpgroup, warp, lane, col_in_chunk, m0, n0, m_end, p.n,
                                                            w.group);
            else
                store_tile_registers<RG, BN>(p, fin, d_row0 + m0 + row_in_tile, d_row0 + m_end, n0, col_in_chunk);
        }
        /* shared memory must stay valid until the last bulk store has read it */
        if constexpr (TMA_OUT != TMA_NONE) {
            if (threadIdx.x % 128 == 0) bulk_wait_all();
        }
    }

    split_grid_end<SPLITS>();
}

} /* namespace bfp8_gemm */
