/*
 * gemm_fp8_kernel.cuh - the FP8 blockwise-scaled GEMM kernel for sm_90a,
 * one template serving both recipes' GEMMs:
 *
 *   1D2D (fprop, dgrad):  D[m, n] = sum_kb  sa[m, kb] * sb[n/128, kb] * P_kb[m, n]
 *   1D1D (wgrad):         D[m, n] = C[m, n] + sum_kb  sa[m, kb] * sb[n, kb] * P_kb[m, n]
 *
 * where P_kb is the fp8 product over one 128-wide k-block, computed by the
 * tensor cores and promoted into fp32 registers before the next block starts
 * (the tensor core accumulates with limited precision; RECIPE.md section 4).
 *
 * Shape of the kernel (persistent, warp-specialized):
 *   - the last warpgroup is the producer: one thread issues TMA loads of the
 *     A tile (BM x 128 bytes), the B tile (BN x 128) and the scales of the
 *     k-block into a STAGES-deep ring of shared-memory buffers, each guarded
 *     by a "full" and an "empty" mbarrier;
 *   - BM / 64 math warpgroups (2 or 3) do the math on 64 rows each: 4 wgmma
 *     m64nBNk32 per k-block into a scratch accumulator, then fin += scale * acc;
 *   - CTAs are grouped in clusters of CM x CN tiles: the CN CTAs of one
 *     m-tile each load 1/CN of the A tile and multicast it to the others, and
 *     the CM CTAs of one n-tile share B the same way, cutting L2 traffic;
 *   - TMA_OUT (bf16 or f32 output, or f32 accumulated in place, D = D + A.B):
 *     each math warpgroup writes its 64 x BN tile into its own swizzled
 *     staging buffer and one thread stores it (or adds it into D) with TMA,
 *     which runs while the next tile's main loop starts; otherwise outputs
 *     go from registers to global memory (accumulate into another C,
 *     unaligned D);
 *   - tiles are handed out round-robin over a grouped ("swizzled") order so
 *     that the tiles in flight at one time share A and B rows in L2 (the
 *     group height is the host's choice: Params::group_m);
 *   - GROUPED (mixture of experts, single-CTA tiles, never split): 1D2D
 *     tiles of one group's rows each, B offset to the group's weight; 1D1D
 *     units of one group's tile over its k-blocks, D offset to its rows
 *     (Params::group_table);
 *   - the last, partial wave of tiles is split along K (single-CTA tiles):
 *     each of its tiles becomes `split` units of consecutive k-blocks, run
 *     at once on otherwise idle SMs, by a second launch (the SPLITS
 *     instance of this kernel, which runs the split units only) after the
 *     whole tiles' launch. Slices 1.. store their fp32 partial
 *     tile to a workspace and count themselves in on a flag; slice 0 waits
 *     for them, adds the partials in slice order (the same sum whatever the
 *     timing) and writes the tile. All units of the last wave are resident
 *     together (the grid is), so the wait always ends.
 */
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "cuda/hopper.cuh"

namespace bfp8_gemm {

constexpr int BLOCK_K = 128; /* one scale block per pipeline stage */

/* A CTA tile of BM rows: BM / 64 math warpgroups of 64 rows each, plus the
 * producer warpgroup. Three math warpgroups give the tensor core two other
 * warpgroups' wgmma to run while one promotes, at the price of registers
 * (BN = 128 only).
 * BM = 256 (1D1D only): two math warpgroups of 128 rows, each as two "row
 * groups" of 64 whose wgmma run one after the other into the same scratch
 * accumulator. A thread then holds 4 rows x BN / 4 columns of the tile, and
 * the column scales it loads for the first row group serve the second too:
 * half the shared-memory scale loads per promoted element. */
template <int BM> struct Warps {
    static_assert(BM == 128 || BM == 192 || BM == 256, "BM is 128, 192 or 256");
    static constexpr int ROW_GROUPS = BM == 256 ? 2 : 1;
    static constexpr int MATH_WG = BM / 64 / ROW_GROUPS;
    static constexpr int MATH_WARPS = 4 * MATH_WG;
    static constexpr int NUM_THREADS = 128 * (MATH_WG + 1);
    static constexpr int LAUNCH_REGS = 65536 / NUM_THREADS / 8 * 8; /* 168 or 128 */
    static constexpr int PRODUCER_REGS = ROW_GROUPS == 2 ? 24 : MATH_WG == 2 ? 56 : 32;
    static constexpr int MATH_REGS = ROW_GROUPS == 2 ? 240 : MATH_WG == 2 ? 224 : 160;
    /* setmaxnreg.inc blocks until the registers are free in the CTA's own pool: what
     * the producer gives back must cover what the math warpgroups take, or it hangs. */
    static_assert((LAUNCH_REGS - PRODUCER_REGS) * 128 >= (MATH_REGS - LAUNCH_REGS) * 128 * MATH_WG,
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
    int group_m;                  /* raster group height, in cluster rows */
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
    /* The whole tiles' launch, followed by the split units' (SPLITS) launched
     * as its programmatic dependent: 1 lets that grid's CTAs start on the SMs
     * this grid's CTAs leave, instead of after the whole grid and a launch gap. */
    int launch_dependents;
    float *split_partials;     /* per slice >= 1: BM x BN floats, per warpgroup, thread-interleaved */
    unsigned *split_counters;  /* per split tile and warpgroup: slices done; back to 0 when read */
    /* Grouped GEMMs (GROUPED kernels, one CTA per cluster).
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
     * release_stage). */
    uint32_t release_mask;
};

/* Whether a configuration has a kernel that splits its last wave (SPLITS):
 * single-CTA tiles whose registers allow it (1D1D with BN=192 spills with
 * the unit bookkeeping live in the k-loop), not the two-accumulator one
 * (seldom chosen; one kernel fewer to compile). */
__host__ __device__ constexpr bool can_split(int bn, int cm, int cn, bool b_1x128, bool pipelined) {
    return cm * cn == 1 && !pipelined && !(b_1x128 && bn > 128);
}

/* Work unit u: its tile and its k-blocks [kb0, kb1); grouped 1D1D: its group. */
struct Unit {
    int tile, kb0, kb1, group;
};
__device__ __forceinline__ Unit unit_at(const Params &p, int u) {
    if (u < p.num_whole_tiles) return Unit{u, 0, p.num_k_blocks, 0};
    const int tail = u - p.num_whole_tiles, slice = tail % p.split;
    return Unit{p.num_whole_tiles + tail / p.split, slice * p.num_k_blocks / p.split,
                (slice + 1) * p.num_k_blocks / p.split, 0};
}
/* Grouped 1D2D: m-tile t's first row, group, and the row its group ends at. */
struct GroupedMTile {
    int m0, group, row_end;
};
__device__ __forceinline__ GroupedMTile grouped_m_tile(const Params &p, int t) {
    const int *e = p.group_table + 1 + 3 * t;
    return GroupedMTile{__ldg(e), __ldg(e + 1), __ldg(e + 2)};
}

/* Unit u of a kernel: a k-slice (SPLITS), a group's tile (grouped 1D1D) or a whole tile. */
template <bool SPLITS, bool K_GROUPED> __device__ __forceinline__ Unit unit_of(const Params &p, int u) {
    if constexpr (SPLITS) return unit_at(p, u);
    if constexpr (K_GROUPED) {
        const int g = u / p.tiles_per_group;
        return Unit{u - g * p.tiles_per_group, __ldg(p.group_table + g), __ldg(p.group_table + g + 1), g};
    }
    return Unit{u, 0, p.num_k_blocks, 0};
}

/* A k-slice's end of the last wave (see the top of the file), for one math
 * warpgroup's 64 x BN part of the tile; tail is the unit's index among the
 * split units. Returns whether this thread holds the finished tile (slice 0)
 * and so writes it out. */
template <int MATH_WG, int ACC>
__device__ __forceinline__ bool combine_k_slices(const Params &p, int tail, int warpgroup, float (&fin)[ACC]) {
    using namespace bfp8_sm90;
    const int thread = (int)threadIdx.x % 128, slice = tail % p.split;
    unsigned *counter = p.split_counters + (tail / p.split) * MATH_WG + warpgroup;
    /* thread-interleaved float4s: a warp's accesses cover 512 contiguous bytes */
    auto partial = [&](int unit) {
        return reinterpret_cast<float4 *>(p.split_partials) + (int64_t)(unit * MATH_WG + warpgroup) * (ACC / 4) * 128 +
               thread;
    };
    if (slice != 0) {
        float4 *mine = partial(tail);
#pragma unroll
        for (int i = 0; i < ACC / 4; ++i)
            __stcg(mine + 128 * i, make_float4(fin[4 * i], fin[4 * i + 1], fin[4 * i + 2], fin[4 * i + 3]));
        __threadfence();
        named_barrier_sync(1 + warpgroup, 128);
        if (thread == 0) red_release_gpu_add(counter, 1u);
        return false;
    }
    if (thread == 0) {
        while (ld_acquire_gpu(counter) != (unsigned)(p.split - 1)) __nanosleep(32);
        *counter = 0u; /* every other slice has counted in: ready for the next launch */
    }
    named_barrier_sync(1 + warpgroup, 128);
    for (int s = 1; s < p.split; ++s) {
        const float4 *other = partial(tail + s);
#pragma unroll
        for (int i = 0; i < ACC / 4; ++i) {
            const float4 v = __ldcg(other + 128 * i);
            fin[4 * i] += v.x;
            fin[4 * i + 1] += v.y;
            fin[4 * i + 2] += v.z;
            fin[4 * i + 3] += v.w;
        }
    }
    return true;
}

/* The m64nBNk32 wgmma for a tile width. */
template <int BN>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[BN / 2], uint64_t desc_a, uint64_t desc_b, int accumulate) {
    using namespace bfp8_sm90;
    if constexpr (BN == 96) wgmma_m64n96k32_e4m3(d, desc_a, desc_b, accumulate);
    else if constexpr (BN == 112) wgmma_m64n112k32_e4m3(d, desc_a, desc_b, accumulate);
    else if constexpr (BN == 128) wgmma_m64n128k32_e4m3(d, desc_a, desc_b, accumulate);
    else {
        static_assert(BN == 192, "no wgmma for this tile width");
        wgmma_m64n192k32_e4m3(d, desc_a, desc_b, accumulate);
    }
}

/* TMA_OUT: output tiles go out through shared memory and TMA (boxes of 64
 * rows x 128 bytes, 128-byte swizzle), one 64 x BN buffer per math
 * warpgroup, so a tile's stores overlap the next tile's main loop. */
template <int BM, int BN, bool B_1X128, int STAGES, int TMA_OUT = TMA_NONE> struct SharedLayout {
    static constexpr uint32_t A_BYTES = BM * BLOCK_K;
    static constexpr uint32_t B_BYTES = BN * BLOCK_K;
    static constexpr uint32_t SA_BYTES = BM * 4;
    /* 1D1D 256 x 112 with TMA outputs: the promotion's scale products
     * sa[row] * sb[col] come from a tf32 wgmma per row group (see
     * step_row_groups), whose B operand is the k-block's column scales split
     * into tf32 parts: BN rows of 8 tf32 (32 bytes, 32-byte swizzle), loaded by
     * TMA with the stage (in place of the column scales) from what the host's
     * scale_operand_kernel made of B's scales before the GEMM. The epilogue's
     * staging is per warp and half as large (see the math warps' epilogue), so
     * that four stages of it fit. */
    static constexpr bool SCALE_MMA = B_1X128 && Warps<BM>::ROW_GROUPS == 2 && BN == 112 && TMA_OUT != TMA_NONE;
    static constexpr uint32_t SCALE_OP_BYTES = BN * 32;
    static constexpr uint32_t SB_BYTES = B_1X128 && !SCALE_MMA ? (BN * 4 + 127) / 128 * 128 : 0; /* a TMA destination */
    /* 1D1D with one row group: each stage's scales have two slots, taken by
     * the parity of the stage ring's round, so the TMA that refills a stage
     * writes its scales where the math warps are not reading (see promote) */
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
    /* per math warpgroup; row groups: half as wide (a stage more fits); SCALE_MMA: 8 rows
     * of such a half per warp (the scale operand's stages fit) */
    static constexpr uint32_t STAGING_BYTES =
        64 * BN * tma_out_bytes(TMA_OUT) / Warps<BM>::ROW_GROUPS / (SCALE_MMA ? 2 : 1);
    /* 1024-byte aligned: the swizzle pattern is a function of the address */
    static constexpr uint32_t OFF_SCALE_OP = (OFF_SB + SCALE_SLOTS * STAGES * SB_BYTES + 1023) / 1024 * 1024;
    static constexpr uint32_t OFF_STAGING = (OFF_SCALE_OP + (SCALE_MMA ? STAGES * SCALE_OP_BYTES : 0) + 1023) / 1024 * 1024;
    static constexpr uint32_t OFF_BARRIERS = OFF_STAGING + Warps<BM>::MATH_WG * STAGING_BYTES;
    /* + 1024 so the base can be aligned for the 128-byte swizzle pattern */
    static constexpr uint32_t TOTAL = OFF_BARRIERS + 2 * STAGES * 8 + 1024;
    static_assert(B_BYTES % 1024 == 0 && A_BYTES % 1024 == 0, "swizzled tiles need 1024-byte alignment");
    static_assert(SA_BYTES % 128 == 0 && SB_BYTES % 128 == 0, "TMA destinations need 128-byte alignment");
};

/* Cluster tile t -> (cluster row, cluster column), in groups of group_m
 * cluster rows walked column by column, so concurrently running tiles share
 * A and B rows in L2. */
__device__ __forceinline__ void tile_coordinates(int t, int num_cluster_rows, int num_cluster_cols,
                                                 int group_m, int *cluster_row, int *cluster_col) {
    const int per_group = group_m * num_cluster_cols;
    const int group = t / per_group, first = group * group_m;
    const int rows = min(num_cluster_rows - first, group_m);
    const int r = t - group * per_group;
    *cluster_row = first + r % rows;
    *cluster_col = r / rows;
}

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

/* SPLITS: the kernel that runs split units (Params::split > 1). Every
 * configuration also has one without (split == 1 only): with the split code
 * compiled in, whole tiles ran 4-5% slower on the H200 although the k-loop's
 * instructions were the same (bench/results/2026-11-30_gemm_h200_s4_bisect.txt). */
template <int BM, int BN, int CM, int CN, bool B_1X128, int STAGES, bool PIPELINED, int TMA_OUT, bool SPLITS,
          bool GROUPED>
__global__ void __launch_bounds__(Warps<BM>::NUM_THREADS, 1)
    gemm_fp8_blockwise_kernel(const __grid_constant__ CUtensorMap tmap_a,
                              const __grid_constant__ CUtensorMap tmap_b,
                              const __grid_constant__ CUtensorMap tmap_scale_a,
                              const __grid_constant__ CUtensorMap tmap_scale_b,
                              const __grid_constant__ CUtensorMap tmap_d, const Params p) {
    using namespace bfp8_sm90;
    using L = SharedLayout<BM, BN, B_1X128, STAGES, TMA_OUT>;
    using W = Warps<BM>;
    constexpr int PRODUCER_THREAD = 128 * W::MATH_WG;
    constexpr int ACC = BN / 2; /* accumulator floats per thread: 64 rows x BN over 128 threads */
    constexpr int RG = W::ROW_GROUPS, FIN = RG * ACC; /* FIN: the thread's floats of the tile */
    static_assert((RG == 2 ? BN % 16 == 0 : BN % 64 == 0) && BN <= 256, "BN: a multiple of 64 (of 16 for BM=256)");
    static_assert(RG == 1 || (B_1X128 && TMA_OUT != TMA_BF16 && CM * CN == 1 && !PIPELINED && !GROUPED),
                  "row groups: single-CTA 1D1D tiles");
    static_assert((CM == 1 || CM == 2) && (CN == 1 || CN == 2), "clusters of up to 2 x 2 CTAs");
    constexpr int CLUSTER = CM * CN;
    static_assert(!SPLITS || can_split(BN, CM, CN, B_1X128, PIPELINED), "no split kernel for this configuration");
    static_assert(L::SCALE_SLOTS == 1 || STAGES >= 2, "two scale slots: a slot is written again after kb + STAGES");
    constexpr bool K_GROUPED = GROUPED && B_1X128, M_GROUPED = GROUPED && !B_1X128;
    static_assert(!GROUPED || (CM * CN == 1 && !SPLITS && !PIPELINED), "grouped GEMMs: single CTAs, whole tiles");

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
    const uint32_t cta_rank = CLUSTER > 1 ? cluster_cta_rank() : 0;
    const int cm = (int)cta_rank % CM, cn = (int)cta_rank / CM; /* my place in the cluster tile */
    /* CTAs that share my A tile (same cm) and my B tile (same cn) */
    uint16_t a_peers = 0, b_peers = 0;
    for (int i = 0; i < CN; ++i) a_peers |= (uint16_t)(1u << (cm + CM * i));
    for (int i = 0; i < CM; ++i) b_peers |= (uint16_t)(1u << (i + CM * cn));

    if (threadIdx.x == PRODUCER_THREAD) {
        tma_prefetch_descriptor(&tmap_a);
        tma_prefetch_descriptor(&tmap_b);
        tma_prefetch_descriptor(&tmap_scale_a);
        if (B_1X128) tma_prefetch_descriptor(&tmap_scale_b);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], W::MATH_WARPS * CLUSTER); /* every math warp of the cluster */
        }
        fence_mbar_init();
    }
    if (CLUSTER > 1) cluster_sync(); else __syncthreads();
    if (!SPLITS && p.launch_dependents) griddep_launch_dependents();

    const int num_clusters = gridDim.x / CLUSTER;
    const int cluster_id = blockIdx.x / CLUSTER;
    /* (grouped 1D2D: the m-tiles in the table; p.num_units is a bound) */
    const int num_cluster_rows = M_GROUPED ? __ldg(p.group_table) : (p.num_m_tiles + CM - 1) / CM;
    const int num_cluster_cols = (p.num_n_tiles + CN - 1) / CN;
    const int num_units = M_GROUPED ? min(p.num_units, num_cluster_rows * num_cluster_cols) : p.num_units;

    if (warpgroup == W::MATH_WG) {
        /* ---------------- producer ---------------- */
        regs_decrease<W::PRODUCER_REGS>();
        if (threadIdx.x == PRODUCER_THREAD) {
            int stage = 0;
            uint32_t phase = 0;
            for (int u = (SPLITS ? p.num_whole_tiles : 0) + cluster_id; u < num_units; u = SPLITS ? num_units : u + num_clusters) {
                const Unit w = unit_of<SPLITS, K_GROUPED>(p, u);
                int cluster_row, cluster_col;
                tile_coordinates(w.tile, num_cluster_rows, num_cluster_cols, p.group_m, &cluster_row, &cluster_col);
                const int n0 = (cluster_col * CN + cn) * BN;
                int m0 = (cluster_row * CM + cm) * BM, b0 = n0;
                if constexpr (M_GROUPED) { /* the m-tile's rows; B's in the weight of its group */
                    const GroupedMTile t = grouped_m_tile(p, cluster_row);
                    m0 = t.m0;
                    b0 = t.group * p.group_n + n0;
                }
                /* SCALE_MMA: the unit's k-blocks rounded up to whole rounds of the stage
                 * ring, the extra ones loaded from past the end of the tensors: zeros.
                 * (Not unrolled: with the 24 registers the producer keeps, copies spilled.) */
                constexpr bool PAD_ROUNDS = L::SCALE_MMA;
                const int kb_end = PAD_ROUNDS ? w.kb0 + (w.kb1 - w.kb0 + STAGES - 1) / STAGES * STAGES : w.kb1;
#pragma unroll 1
                for (int kb_run = w.kb0; kb_run < kb_end; ++kb_run) {
                    const int kb = !PAD_ROUNDS || kb_run < w.kb1 ? kb_run : p.num_k_blocks + (kb_run - w.kb1);
                    mbar_wait(&empty[stage], phase ^ 1);
                    mbar_arrive_expect_tx(&full[stage], L::STAGE_TX_BYTES);
                    const int k0 = kb * BLOCK_K;
                    uint8_t *a_dst = smem_a + stage * L::A_BYTES, *b_dst = smem_b + stage * L::B_BYTES;
                    if constexpr (CN == 1) {
                        tma_load_2d(a_dst, &tmap_a, &full[stage], k0, m0);
                    } else { /* my slice of the A tile, to every CTA of this m-tile */
                        tma_load_2d_multicast(a_dst + cn * (L::A_BYTES / CN), &tmap_a, &full[stage], k0,
                                              m0 + cn * (BM / CN), a_peers);
                    }
                    if constexpr (CM == 1) {
                        tma_load_2d(b_dst, &tmap_b, &full[stage], k0, b0);
                    } else { /* my slice of the B tile, to every CTA of this n-tile */
                        tma_load_2d_multicast(b_dst + cm * (L::B_BYTES / CM), &tmap_b, &full[stage], k0,
                                              b0 + cm * (BN / CM), b_peers);
                    }
                    const int slot = stage + (L::SCALE_SLOTS == 2 && phase ? STAGES : 0); /* of the scales */
                    tma_load_2d(smem_sa + slot * BM, &tmap_scale_a, &full[stage], m0, kb);
                    if constexpr (L::SCALE_MMA) /* B's scales as the scale wgmma's operand (3-D: k-block) */
                        tma_load_3d(smem + L::OFF_SCALE_OP + stage * L::SCALE_OP_BYTES, &tmap_scale_b, &full[stage],
                                    0, n0, kb);
                    else if (B_1X128)
                        tma_load_2d(smem_sb + slot * (L::SB_BYTES / 4), &tmap_scale_b, &full[stage], n0, kb);
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        /* ---------------- math ---------------- */
        regs_increase<W::MATH_REGS>();
        const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
        /* and row_in_tile + 8; row group g: + 64 g */
        const int row_in_tile = warpgroup * 64 * RG + warp * 16 + lane / 4;
        const int col_in_chunk = 2 * (lane % 4);
        float fin[FIN], acc[ACC]; /* fin: row group g at fin[g * ACC] */
        float acc2[ACC]; /* PIPELINED only (1D2D; else unused, no registers): the next k-block's wgmma */
        int stage = 0;
        uint32_t phase = 0;
        /* Shared-memory addresses and descriptors of stage 0, made once: stage s
         * is a constant offset away, so the k-loop converts no generic pointer
         * (in SASS that conversion re-read the CTA's shared window every
         * k-block, and under BM=192's register cap the compiler remade
         * thread-index terms too). */
        const uint32_t full_kept = smem_u32(full), empty_kept = smem_u32(empty);
        const uint32_t desc_a_kept = wgmma_desc_lo(smem_a + warpgroup * 64 * RG * BLOCK_K);
        const uint32_t desc_b_kept = wgmma_desc_lo(smem_b);
        const uint32_t sa_kept = smem_u32(smem_sa + row_in_tile);
        const uint32_t sb_kept = B_1X128 ? smem_u32(smem_sb + col_in_chunk) : 0u;
        /* SCALE_MMA: a scale split into tf32 parts, hi (its upper 19 bits) + lo (the rest, exact) */
        [[maybe_unused]] auto tf32_hi = [](float x) { return __float_as_uint(x) & 0xffffe000u; };
        [[maybe_unused]] auto tf32_lo = [](float x) {
            return __float_as_uint(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u));
        };

        for (int u = (SPLITS ? p.num_whole_tiles : 0) + cluster_id; u < num_units; u = SPLITS ? num_units : u + num_clusters) {
            const Unit w = unit_of<SPLITS, K_GROUPED>(p, u);
            int cluster_row, cluster_col;
            tile_coordinates(w.tile, num_cluster_rows, num_cluster_cols, p.group_m, &cluster_row, &cluster_col);
            int n0 = (cluster_col * CN + cn) * BN;
            int m0 = (cluster_row * CM + cm) * BM;
            /* grouped 1D1D: the group's D rows start at d_row0; grouped 1D2D: the
             * group's rows end at m_end (both: p.m otherwise) */
            const int d_row0 = K_GROUPED ? w.group * p.group_n : 0;
            int m_end = p.m, nb_group = 0;
            if constexpr (M_GROUPED) {
                const GroupedMTile t = grouped_m_tile(p, cluster_row);
                m0 = t.m0;
                m_end = t.row_end;
                nb_group = t.group * (p.group_n / 128);
            }
            /* 1D2D: the tile's columns meet at most two 128-column scale blocks
             * (a tile past the last column reads the last block and stores nothing);
             * grouped, blocks of the m-tile's group's weight */
            const int nb0 = nb_group + min(n0 / 128, p.num_b_blocks - 1);
            const int nb1 = nb_group + min(n0 / 128 + 1, p.num_b_blocks - 1);
            const int split = 128 - (n0 % 128); /* first column of block nb1 */
            /* B's scales of the unit's first k-block */
            const float *b_scales0 = p.b_block_scales + nb0 * p.b_block_scale_ld + w.kb0;
            const float *b_scales1 = p.b_block_scales + nb1 * p.b_block_scale_ld + w.kb0;

#pragma unroll
            for (int i = 0; i < FIN; ++i) fin[i] = 0.0f;

            /* Wait for the stage's data (row group g = 0; the later ones follow
             * it) and start its 4 wgmma for row group g into acc. 1D2D: also load
             * B's scales of k-block kb now, so they land while the tensor core works. */
            auto issue = [&](int s, uint32_t ph, float(&acc)[ACC], const float *bs0, const float *bs1, float &sb0,
                             float &sb1, float &sa0, float &sa1, const int g) {
                if constexpr (!B_1X128) {
                    sb0 = __ldg(bs0);
                    sb1 = BN > 128 ? __ldg(bs1) : sb0;
                }
                if (g == 0) mbar_wait_at(full_kept + 8 * s, ph);
                if constexpr (!B_1X128) { /* A's row scales: read while the wgmma run, long before the release */
                    sa0 = ld_shared_f32(sa_kept + s * (BM * 4));
                    sa1 = ld_shared_f32(sa_kept + s * (BM * 4) + 8 * 4);
                }
                const uint32_t desc_a =
                    desc_a_kept + (uint32_t)s * (L::A_BYTES >> 4) + (uint32_t)g * (64 * BLOCK_K >> 4);
                const uint32_t desc_b = desc_b_kept + (uint32_t)s * (L::B_BYTES >> 4);
                fence_accumulators(acc);
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < BLOCK_K / 32; ++ks) {
                    const uint64_t da = wgmma_desc_sw128(desc_a + 2 * ks), db = wgmma_desc_sw128(desc_b + 2 * ks);
                    wgmma_e4m3<BN>(acc, da, db, ks > 0);
                }
                wgmma_commit();
            };

            /* This warp is done with stage s: its wgmma finished, and `read` (the
             * bits of the scales it loaded from the stage, OR-ed) proves its
             * shared-memory loads returned. The arrive does not wait for a load
             * still in flight (ptxas issues it before their first use), and
             * the producer's next TMA into the stage could then land first:
             * seen in session 19 as 8-64 rows of a tile promoted with the row
             * scale of the k-block STAGES later, about one call in eight
             * (bench/results/2026-12-02_gemm_1d2d_h200_s19_stage_release_race.txt).
             * The test on `read` makes the arrive wait for every load instruction
             * whose result went into it. */
            auto release_stage = [&](int s, uint32_t read) {
                __syncwarp();
                /* (SCALE_MMA: the lane that arrives chosen by elect.sync, not by its
                 * index: at the register cap, the index held through the k-loop
                 * cost a spill) */
                const bool leader = L::SCALE_MMA ? elect_one_lane() : lane == 0;
                if (leader && (read & p.release_mask) == 0) {
                    const uint32_t bar = empty_kept + 8 * s;
                    if constexpr (CLUSTER == 1) {
                        mbar_arrive_at(bar);
                    } else {
#pragma unroll
                        for (int c = 0; c < CLUSTER; ++c) mbar_arrive_cluster_at(bar, (uint32_t)c);
                    }
                }
            };
            /* fin += scales * acc for the k-block kb held in stage s, and free the stage.
             * 1D2D: sa0, sa1 as issue() read them; `also`: bits of loads from
             * another stage still to be proven, or 0. SPLIT: 1D2D columns from
             * SPLIT on use B's second scale block; it is a literal at each
             * inlined call, so every FFMA reads one of four registers with no
             * select.
             * 1D1D (one row group): the stage is freed as soon as the wgmma are
             * done, before its scales are read: they are in slot s of this
             * round's parity (SharedLayout::SCALE_SLOTS), which the producer
             * writes again only for k-block kb + 2 STAGES, after every math
             * warp has freed the stage for kb + STAGES. By then this warp's
             * loads of kb's scales have returned: the FFMAs below use them
             * and read acc, which kb + 1's wgmma (issued before that release)
             * overwrites. (Waiting for the loads instead made 192 x 128 tiles
             * with 3 stages 4-7% slower in session 20.) */
            auto promote = [&](int s, float(&acc)[ACC], float sb0, float sb1, float sa0, float sa1, uint32_t also,
                               const int SPLIT) {
                fence_accumulators(acc);
                if constexpr (B_1X128) {
                    static_assert(L::SCALE_SLOTS == 2 || RG > 1, "1D1D promote: scales in two slots per stage");
                    if constexpr (CLUSTER == 1) release_stage(s, 0u);
                    const uint32_t slot = (uint32_t)s + (phase ? STAGES : 0);
                    sa0 = ld_shared_f32(sa_kept + slot * (BM * 4));
                    sa1 = ld_shared_f32(sa_kept + slot * (BM * 4) + 8 * 4);
#pragma unroll
                    for (int j = 0; j < BN / 8; ++j) {
                        const float2 v = ld_shared_f32x2(sb_kept + slot * L::SB_BYTES + 32u * j);
                        fin[4 * j + 0] += (sa0 * v.x) * acc[4 * j + 0];
                        fin[4 * j + 1] += (sa0 * v.y) * acc[4 * j + 1];
                        fin[4 * j + 2] += (sa1 * v.x) * acc[4 * j + 2];
                        fin[4 * j + 3] += (sa1 * v.y) * acc[4 * j + 3];
                    }
                    if constexpr (CLUSTER > 1) release_stage(s, 0u); /* (first, 128 x 192 in clusters spills) */
                } else {
                    release_stage(s, __float_as_uint(sa0) | __float_as_uint(sa1) | also); /* nothing more to read */
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
                }
            };

            auto next_stage = [&](int &s, uint32_t &ph) {
                if (++s == STAGES) {
                    s = 0;
                    ph ^= 1;
                }
            };

            /* Row groups (1D1D, BM=256): the k-block of stage s for each row
             * group in turn, B's column scales loaded once (while the first
             * group's wgmma run) and kept in registers for all of them. */
            auto step_row_groups = [&](const int s) {
                float unused0 = 0.0f, unused1 = 0.0f, unused2 = 0.0f, unused3 = 0.0f;
                if constexpr (L::SCALE_MMA) {
                    /* SCALE_MMA: per row group, its 4 wgmma into acc, then the products
                     * sa[row] * sb[col] of all its elements into prod by one tf32 wgmma:
                     * A (registers) has the row scale's hi part in columns 0-3 and its lo
                     * part in 4-7, B (the slot's operand) the column scale as
                     * (hi, lo, 0, 0, hi, 0, 0, 0); the sum hi.hi + hi.lo + lo.hi is
                     * sa * sb to ~2^-21 (hi: the upper 19 bits, exact in tf32; lo = x - hi).
                     * The promotion is then one FFMA an element, no column scale loaded. */
                    float prod[ACC];
                    const uint32_t scale_desc = desc_b_kept + ((L::OFF_SCALE_OP - L::OFF_B) >> 4) +
                                                (uint32_t)s * (L::SCALE_OP_BYTES >> 4);
#pragma unroll
                    for (int g = 0; g < RG; ++g) {
                        issue(s, phase, acc, nullptr, nullptr, unused0, unused1, unused2, unused3, g);
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
                    release_stage(s, 0u);
                    return;
                }
                issue(s, phase, acc, nullptr, nullptr, unused0, unused1, unused2, unused3, 0);
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
                        issue(s, phase, acc, nullptr, nullptr, unused0, unused1, unused2, unused3, g);
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
                 * too cost 1.5% in session 19; tools/sass_release_audit.py checks
                 * that the compiled kernel has no load in flight at the release.) */
                release_stage(s, 0u);
            };
            /* One k-block in stage s with the current phase; 1D2D: B's scales
             * of the k-block at bs0 (and bs1 for BN=192's second block). */
            auto step = [&](const int s, const float *bs0, const float *bs1, const int split_tag) {
                if constexpr (RG > 1) {
                    step_row_groups(s);
                } else {
                    float sb0 = 0.0f, sb1 = 0.0f, sa0 = 0.0f, sa1 = 0.0f;
                    issue(s, phase, acc, bs0, bs1, sb0, sb1, sa0, sa1, 0);
                    wgmma_wait<0>();
                    promote(s, acc, sb0, sb1, sa0, sa1, 0u, split_tag);
                }
            };
            /* The ring of stages runs on across tiles: k-blocks up to the next
             * stage 0 one at a time, then whole rounds of STAGES with the
             * stage a literal in every copy of the body (barrier, descriptor
             * and scale addresses become immediates: fewer instructions to
             * issue per k-block), then the rest one at a time. 1D1D with 5
             * or more stages keeps the plain loop: under BM=192's register
             * cap its five copies spill. */
            auto mainloop = [&](const int split_tag) {
                constexpr bool UNROLL_STAGES = !B_1X128 || STAGES <= 4;
                const int nk = w.kb1 - w.kb0;
                /* B's scales of k-block kb, advanced with it (loads at
                 * immediate offsets, not an address made per k-block) */
                const float *bs0 = b_scales0, *bs1 = b_scales1;
                int kb = 0;
                if constexpr (L::SCALE_MMA) {
                    /* SCALE_MMA: whole rounds of the stage ring only. The producer rounds
                     * every unit's k-blocks up to them (zeros loaded from past the end), so
                     * each unit starts at stage 0 and the loop is the straight unrolled one
                     * (a loop with partial rounds spills under the register cap). */
                    for (int left = (nk + STAGES - 1) / STAGES; left > 0; --left) {
#pragma unroll
                        for (int u = 0; u < STAGES; ++u) step(u, nullptr, nullptr, split_tag);
                        phase ^= 1;
                    }
                } else {
                    for (; kb < nk && (!UNROLL_STAGES || stage != 0); ++kb, ++bs0, ++bs1) {
                        step(stage, bs0, bs1, split_tag);
                        next_stage(stage, phase);
                    }
                    for (; UNROLL_STAGES && kb + STAGES <= nk; kb += STAGES, bs0 += STAGES, bs1 += STAGES) {
#pragma unroll
                        for (int u = 0; u < STAGES; ++u) step(u, bs0 + u, bs1 + u, split_tag);
                        phase ^= 1;
                    }
                    for (; kb < nk; ++kb, ++bs0, ++bs1) {
                        step(stage, bs0, bs1, split_tag);
                        next_stage(stage, phase);
                    }
                }
            };
            /* PIPELINED: k-block kb+1's wgmma is in flight (into the other
             * accumulator) while kb is promoted, so each warpgroup keeps the
             * tensor core busy by itself. Costs ACC more registers (BN=128 only). */
            auto mainloop_pipelined = [&]() {
                const int nk = w.kb1 - w.kb0;
                int s0 = stage, s1 = 0;
                float sb00 = 0.0f, sb01 = 0.0f, sb10 = 0.0f, sb11 = 0.0f;
                float sa00 = 0.0f, sa01 = 0.0f, sa10 = 0.0f, sa11 = 0.0f;
                /* (a stage's release also proves the other stage's row-scale loads) */
                auto bits2 = [](float x, float y) { return __float_as_uint(x) | __float_as_uint(y); };
                /* one group (acc) in flight at the top of every iteration */
                issue(stage, phase, acc, b_scales0, b_scales1, sb00, sb01, sa00, sa01, 0);
                next_stage(stage, phase);
                int kb = 0;
                for (; kb + 2 < nk; kb += 2) {
                    s1 = stage;
                    issue(stage, phase, acc2, b_scales0 + kb + 1, b_scales1 + kb + 1, sb10, sb11, sa10, sa11, 0);
                    next_stage(stage, phase);
                    wgmma_wait<1>();
                    promote(s0, acc, sb00, sb01, sa00, sa01, bits2(sa10, sa11), BN);
                    s0 = stage;
                    issue(stage, phase, acc, b_scales0 + kb + 2, b_scales1 + kb + 2, sb00, sb01, sa00, sa01, 0);
                    next_stage(stage, phase);
                    wgmma_wait<1>();
                    promote(s1, acc2, sb10, sb11, sa10, sa11, bits2(sa00, sa01), BN);
                }
                if (kb + 1 < nk) { /* two k-blocks left */
                    s1 = stage;
                    issue(stage, phase, acc2, b_scales0 + kb + 1, b_scales1 + kb + 1, sb10, sb11, sa10, sa11, 0);
                    next_stage(stage, phase);
                    wgmma_wait<1>();
                    promote(s0, acc, sb00, sb01, sa00, sa01, bits2(sa10, sa11), BN);
                    wgmma_wait<0>();
                    promote(s1, acc2, sb10, sb11, sa10, sa11, bits2(sa00, sa01), BN);
                } else {
                    wgmma_wait<0>();
                    promote(s0, acc, sb00, sb01, sa00, sa01, bits2(sa10, sa11), BN);
                }
            };
            /* A BN=128 tile lies inside one 128-column block of B; a BN=192 tile
             * starts at column 0 or 64 of a block and so splits at 128 or 64. */
            if constexpr (PIPELINED) {
                static_assert(BN == 128 && !B_1X128, "two accumulators: 1D2D with BN=128 only");
                mainloop_pipelined();
            } else if constexpr (B_1X128 || BN <= 128) {
                mainloop(BN);
            } else {
                if (split == 128) mainloop(128);
                else mainloop(64);
            }
            if constexpr (L::SCALE_MMA) {
                /* the tile's place remade from u, not kept through the k-loop: at the
                 * register cap, u was spilled otherwise */
                tile_coordinates(w.tile, num_cluster_rows, num_cluster_cols, p.group_m, &cluster_row, &cluster_col);
                n0 = cluster_col * BN;
                m0 = cluster_row * BM;
            }
            /* (the unit's place among the split ones, remade from u: one register less in the loop) */
            if (SPLITS && u >= p.num_whole_tiles &&
                !combine_k_slices<W::MATH_WG>(p, u - p.num_whole_tiles, warpgroup, fin))
                continue;

            if constexpr (L::SCALE_MMA) {
                /* SCALE_MMA (row groups): each warp stores its own rows, through its
                 * own staging buffer of 8 rows x BN / 2 f32 (D's tensor map has boxes
                 * of that shape): for each row group, half (in columns) and 8-row
                 * half of the warp's 16 rows in turn, one TMA each, stored or added
                 * into D. Synchronized within the warp only. (The thread's place is
                 * read again: kept through the k-loop, it took a register the loop needs.) */
                constexpr int HALF = BN / 2, HALF_J = BN / 16; /* columns, and 8-column chunks, of a half */
                const int t = (int)thread_index_read() % 128, wq = t / 32, row = (t % 32) / 4, cic = 2 * (t % 4);
                const bool leader = t % 32 == 0;
                float *staging =
                    reinterpret_cast<float *>(smem + L::OFF_STAGING + warpgroup * L::STAGING_BYTES) + wq * 8 * HALF;
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
                                    tma_reduce_add_2d(&tmap_d, staging, col0, row0);
                                else
                                    tma_store_2d(&tmap_d, staging, col0, row0);
                                bulk_commit_group();
                            }
                        }
                    }
                }
            } else if constexpr (TMA_OUT != TMA_NONE && RG > 1) {
                /* Row groups: each half (in columns) of each of the warpgroup's row
                 * groups in turn through its staging buffer, 64 rows x BN / 2 f32
                 * unswizzled (D's tensor map has boxes of that shape), stored or
                 * added into D by one TMA each. */
                constexpr int HALF = BN / 2, HALF_J = BN / 16; /* columns, and 8-column chunks, of a half */
                float *staging = reinterpret_cast<float *>(smem + L::OFF_STAGING + warpgroup * L::STAGING_BYTES);
                const bool leader = threadIdx.x % 128 == 0;
                const int r0 = warp * 16 + lane / 4; /* and r0 + 8, rows within the row group */
#pragma unroll
                for (int g = 0; g < RG; ++g) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        if (leader) bulk_wait_read_all(); /* the buffer's previous stores have read it */
                        named_barrier_sync(1 + warpgroup, 128);
                        const float *f = fin + g * ACC + 4 * HALF_J * h;
#pragma unroll
                        for (int j = 0; j < HALF_J; ++j) {
                            float *at = staging + r0 * HALF + 8 * j + col_in_chunk;
                            *reinterpret_cast<float2 *>(at) = make_float2(f[4 * j], f[4 * j + 1]);
                            *reinterpret_cast<float2 *>(at + 8 * HALF) = make_float2(f[4 * j + 2], f[4 * j + 3]);
                        }
                        fence_proxy_async_shared();
                        named_barrier_sync(1 + warpgroup, 128);
                        const int row0 = m0 + warpgroup * 64 * RG + 64 * g, col0 = n0 + HALF * h;
                        if (leader && row0 < p.m && col0 < p.n) { /* (no box wholly outside D) */
                            if constexpr (TMA_OUT == TMA_F32_ADD)
                                tma_reduce_add_2d(&tmap_d, staging, col0, row0);
                            else
                                tma_store_2d(&tmap_d, staging, col0, row0);
                            bulk_commit_group();
                        }
                    }
                }
            } else if constexpr (TMA_OUT != TMA_NONE) {
                /* Into this warpgroup's staging buffer, in the 128-byte
                 * swizzled layout of the D tensor map: boxes of 64 rows x 128
                 * bytes (64 bf16 or 32 f32 columns), the 16-byte unit u of row
                 * r at unit u ^ (r % 8). A warp's 8 rows land in 8 different
                 * units: bf16 (4 bytes a thread) without bank conflicts, f32
                 * (8 bytes) in the 2 wavefronts its 256 bytes need. */
                constexpr int ELEM = tma_out_bytes(TMA_OUT), BOX_COLS = 128 / ELEM, BOX_BYTES = 64 * 128;
                uint8_t *staging = smem + L::OFF_STAGING + warpgroup * L::STAGING_BYTES;
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
                            /* (a box wholly past the group's rows or D's columns: none;
                             * a 3-D reduce-add of such a box faulted on the H200) */
                            if (m0 + warpgroup * 64 >= p.m || n0 + BOX_COLS * c >= p.n) continue;
                            if constexpr (TMA_OUT == TMA_F32_ADD)
                                tma_reduce_add_3d(&tmap_d, staging + c * BOX_BYTES, n0 + BOX_COLS * c,
                                                  m0 + warpgroup * 64, w.group);
                            else
                                tma_store_3d(&tmap_d, staging + c * BOX_BYTES, n0 + BOX_COLS * c,
                                             m0 + warpgroup * 64, w.group);
                        } else if constexpr (TMA_OUT == TMA_F32_ADD)
                            tma_reduce_add_2d(&tmap_d, staging + c * BOX_BYTES, n0 + BOX_COLS * c, m0 + warpgroup * 64);
                        else
                            tma_store_2d(&tmap_d, staging + c * BOX_BYTES, n0 + BOX_COLS * c, m0 + warpgroup * 64);
                    }
                    bulk_commit_group();
                }
            } else {
                const int row = d_row0 + m0 + row_in_tile, row_end = d_row0 + m_end;
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
        }
        /* shared memory must stay valid until the last bulk store has read it */
        if constexpr (TMA_OUT != TMA_NONE) {
            if (threadIdx.x % 128 == 0) bulk_wait_all();
        }
    }

    /* a peer may still multicast into, or arrive on, this CTA's shared memory */
    if (CLUSTER > 1) cluster_sync();
    /* SPLITS, launched behind the whole tiles' grid (launch_dependents): its
     * units touch none of that grid's outputs, so nothing waits for it but
     * the end, so that this grid completes after it and a kernel stream-ordered
     * behind us sees every tile (a no-op when launched normally) */
    if constexpr (SPLITS) griddep_wait();
}

} /* namespace bfp8_gemm */
