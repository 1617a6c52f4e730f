/*
 * gemm_fp8_params.cuh - what the host and the FP8 GEMM kernels agree on: the
 * kernel arguments (Params), the CTA's warp layout per tile height, and how
 * the epilogue writes D.
 *
 *   1D2D (fprop, dgrad):  D[m, n] = sum_kb  sa[m, kb] * sb[n/128, kb] * P_kb[m, n]
 *   1D1D (wgrad):         D[m, n] = C[m, n] + sum_kb  sa[m, kb] * sb[n, kb] * P_kb[m, n]
 *
 * P_kb is the fp8 product over one 128-wide k-block, computed by the tensor
 * cores and promoted into fp32 registers before the next block starts (the
 * tensor core accumulates with limited precision; RECIPE.md section 4).
 */
#pragma once

#include <stdint.h>

namespace bfp8_gemm {

constexpr int BLOCK_K = 128; /* one scale block per pipeline stage */

/* A CTA tile of BM rows: BM / 64 math warpgroups of 64 rows each, plus the
 * producer warpgroup. Three math warpgroups give the tensor core two other
 * warpgroups' wgmma to run while one promotes, at the price of registers
 * (BN = 128 only).
 * BM = 256 (1D1D only): two math warpgroups of 128 rows, each as two "row
 * groups" of 64 whose wgmma run one after the other into the same scratch
 * accumulator. A thread then holds 4 rows x BN / 4 columns of the tile.
 * BM = 64 (1D1D only, narrow tiles for small outputs): one math warpgroup,
 * which keeps the registers it is launched with (no reallocation), two CTAs
 * an SM. */
template <int BM> struct Warps {
    static_assert(BM == 64 || BM == 128 || BM == 192 || BM == 256, "BM is 64, 128, 192 or 256");
    static constexpr int ROW_GROUPS = BM == 256 ? 2 : 1;
    static constexpr int MATH_WG = BM / 64 / ROW_GROUPS;
    static constexpr int MATH_WARPS = 4 * MATH_WG;
    static constexpr int NUM_THREADS = 128 * (MATH_WG + 1);
    static constexpr bool REALLOCATE = MATH_WG > 1;
    static constexpr int CTAS_PER_SM = MATH_WG == 1 ? 2 : 1; /* (the launch bounds' minimum) */
    static constexpr int LAUNCH_REGS = REALLOCATE ? 65536 / NUM_THREADS / 8 * 8 : 0; /* 168 or 128 */
    static constexpr int PRODUCER_REGS = ROW_GROUPS == 2 ? 24 : MATH_WG == 2 ? 56 : 32;
    static constexpr int MATH_REGS = ROW_GROUPS == 2 ? 240 : MATH_WG == 2 ? 224 : 160;
    /* setmaxnreg.inc blocks until the registers are free in the CTA's own pool: what
     * the producer gives back must cover what the math warpgroups take, or it hangs. */
    static_assert(!REALLOCATE ||
                      (LAUNCH_REGS - PRODUCER_REGS) * 128 >= (MATH_REGS - LAUNCH_REGS) * 128 * MATH_WG,
                  "register reallocation must balance");
};

enum OutputKind { OUTPUT_BF16 = 0, OUTPUT_F32 = 1, OUTPUT_F32_ACCUMULATE = 2 };

/* How the epilogue writes D: from registers, or through shared memory and the
 * TMA unit (a store, or an add into D where D is also the C accumulated). */
enum TmaOut { TMA_NONE = 0, TMA_BF16 = 1, TMA_F32 = 2, TMA_F32_ADD = 3 };
__host__ __device__ constexpr int tma_out_bytes(int t) { return t == TMA_NONE ? 0 : t == TMA_BF16 ? 2 : 4; }

struct Params {
    int m, n, k;
    int num_k_blocks;
    int num_m_tiles, num_n_tiles; /* tiles of BM x BN */
    int group_m;                  /* raster group height, in tile rows */
    /* 1D2D: B's 128x128 scales, read with plain loads (one float per k-block). */
    const float *b_block_scales;
    int64_t b_block_scale_ld;
    int num_b_blocks; /* ceil(n / 128) */
    /* output */
    void *d;
    int64_t ldd;
    const float *c; /* OUTPUT_F32_ACCUMULATE only; may equal d */
    int64_t ldc;
    int output_kind;
    int paired_stores; /* two adjacent outputs can be stored as one aligned word */
    /* Work units, in tile order: num_whole_tiles whole tiles, then each
     * remaining tile as `split` k-slices (split == 1: every tile whole). */
    int num_whole_tiles;
    int split;
    int num_units;
    /* Every GEMM grid is a programmatic dependent of the grid before it
     * (unless BFP8_OPTION_GEMM_PDL is off) and lets the next one start early.
     * A split plan's second grid (SPLITS: split > 1) with whole tiles before
     * it always runs behind their grid, on the SMs that grid leaves, and
     * waits for it only at its end: its units read nothing that grid writes. */
    __host__ __device__ bool behind_whole_tiles() const { return split > 1 && num_whole_tiles > 0; }
    float *split_partials;     /* per slice >= 1: BM x BN floats, per warpgroup, thread-interleaved */
    unsigned *split_counters;  /* per split tile and warpgroup: slices done; back to 0 when read */
    /* Grouped GEMMs (GROUPED kernels, whole tiles).
     * 1D2D, grouped along M: group_table[0] m-tiles (num_m_tiles is only a
     * bound: the table may be written by a kernel); m-tile t is BM rows of
     * one group g from row group_table[1 + 3t], g = group_table[2 + 3t],
     * the group's rows ending at group_table[3 + 3t] (rows from there on are
     * not stored); group g's B (and B's block scales) start at row g * group_n.
     * 1D1D, grouped along the tokens: unit u is tile u % tiles_per_group of
     * group g = u / tiles_per_group, over k-blocks [group_table[g],
     * group_table[g + 1]); its D rows start at g * group_n (TMA_OUT: D's
     * tensor map is 3-D, columns x group_n rows x groups, so a tile's rows
     * past its group's are clipped). */
    const int *group_table;
    int group_n;
    int tiles_per_group;
    /* Always 0. A math warp frees a stage only when (bits of the scales it
     * read from the stage) & release_mask == 0: a test the compiler cannot
     * fold, so the arrive waits for those shared-memory loads (see
     * release_stage in gemm_fp8_pipeline.cuh). */
    uint32_t release_mask;
};

/* Whether a configuration has a kernel that splits its last wave (SPLITS):
 * all but 1D1D with BN = 192, which spills with the unit bookkeeping live in
 * the k-loop. */
__host__ __device__ constexpr bool can_split(int bn, bool b_1x128) { return !(b_1x128 && bn > 128); }

} /* namespace bfp8_gemm */
