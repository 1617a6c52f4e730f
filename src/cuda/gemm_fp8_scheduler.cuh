/*
 * gemm_fp8_scheduler.cuh - which work a CTA of the persistent FP8 GEMM
 * kernels does next: units in tile order, handed out round-robin; the
 * raster order of tiles; the k-slices of a split last wave and how they are
 * summed; the tables of the grouped GEMMs.
 *
 *   - Tiles go in a grouped ("swizzled") order, so that the tiles in flight
 *     at one time share A and B rows in L2 (the group height is the host's
 *     choice: Params::group_m).
 *   - The last, partial wave of tiles is split along K: each of its tiles
 *     becomes `split` units of consecutive k-blocks, run at once on otherwise
 *     idle SMs by a second launch (the SPLITS instance of a kernel, which
 *     runs the split units only) after the whole tiles' launch. Slices 1..
 *     store their fp32 partial tile to a workspace and count themselves in
 *     on a flag; slice 0 waits for them, adds the partials in slice order
 *     (the same sum whatever the timing) and writes the tile. All units of
 *     the last wave are resident together (the grid is), so the wait ends.
 *   - Grouped GEMMs (mixture of experts, whole tiles only): 1D2D m-tiles of
 *     one group's rows each, B offset to the group's weight; 1D1D units of
 *     one group's tile over its k-blocks, D offset to its rows
 *     (Params::group_table).
 */
#pragma once

#include "cuda/gemm_fp8_params.cuh"
#include "cuda/hopper.cuh"

namespace bfp8_gemm {

/* Tile t -> (tile row, tile column), in groups of group_m tile rows walked
 * column by column, so concurrently running tiles share A and B rows in L2. */
__device__ __forceinline__ void tile_coordinates(int t, int num_tile_rows, int num_tile_cols, int group_m,
                                                 int *tile_row, int *tile_col) {
    const int per_group = group_m * num_tile_cols;
    const int group = t / per_group, first = group * group_m;
    const int rows = min(num_tile_rows - first, group_m);
    const int r = t - group * per_group;
    *tile_row = first + r % rows;
    *tile_col = r / rows;
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

/* Unit u of a kernel: a k-slice (SPLITS), a group's tile (grouped 1D1D) or a whole tile. */
template <bool SPLITS, bool K_GROUPED> __device__ __forceinline__ Unit unit_of(const Params &p, int u) {
    if constexpr (SPLITS) return unit_at(p, u);
    if constexpr (K_GROUPED) {
        const int g = u / p.tiles_per_group;
        return Unit{u - g * p.tiles_per_group, __ldg(p.group_table + g), __ldg(p.group_table + g + 1), g};
    }
    return Unit{u, 0, p.num_k_blocks, 0};
}

/* Grouped 1D2D: m-tile t's first row, group, and the row its group ends at. */
struct GroupedMTile {
    int m0, group, row_end;
};
__device__ __forceinline__ GroupedMTile grouped_m_tile(const Params &p, int t) {
    const int *e = p.group_table + 1 + 3 * t;
    return GroupedMTile{__ldg(e), __ldg(e + 1), __ldg(e + 2)};
}

/* A k-slice's end of the split last wave, for one math warpgroup's 64 x BN
 * part of the tile; tail is the unit's index among the split units. Returns
 * whether this thread holds the finished tile (slice 0) and so writes it out. */
/* The order of a GEMM grid among the stream's grids, after its set-up
 * (barriers, tensor-map prefetches) and before its first load: it waits for
 * the grid before it, whose outputs may be its operands (a programmatic
 * dependent launch, BFP8_OPTION_GEMM_PDL), and lets the next grid launch. A
 * split grid behind its whole tiles waits for them only at its end
 * (split_grid_end). Letting the next grid launch cannot starve the split
 * units' exchange: it launches once every CTA of this grid has passed here,
 * so all of them are resident by then; and it waits for this grid's end
 * before it reads or writes anything (the split workspace too). */
template <bool SPLITS> __device__ __forceinline__ void grid_order_start(const Params &p) {
    using namespace bfp8_sm90;
    if (!SPLITS || !p.behind_whole_tiles()) griddep_wait();
    griddep_launch_dependents();
}
/* The split grid completes after the grid of its whole tiles, so that a
 * kernel stream-ordered behind it sees every tile. */
template <bool SPLITS> __device__ __forceinline__ void split_grid_end() {
    if constexpr (SPLITS) bfp8_sm90::griddep_wait();
}

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
    /* the partials of BATCH slices loaded at once (narrow tiles: one trip to
     * L2 for several), then added in slice order */
    constexpr int BATCH = ACC <= 16 ? 4 : ACC <= 32 ? 2 : 1;
    for (int s = 1; s < p.split; s += BATCH) {
        float4 v[BATCH][ACC / 4];
#pragma unroll
        for (int b = 0; b < BATCH; ++b) {
            if (s + b >= p.split) break;
            const float4 *other = partial(tail + s + b);
#pragma unroll
            for (int i = 0; i < ACC / 4; ++i) v[b][i] = __ldcg(other + 128 * i);
        }
#pragma unroll
        for (int b = 0; b < BATCH; ++b) {
            if (s + b >= p.split) break;
#pragma unroll
            for (int i = 0; i < ACC / 4; ++i) {
                fin[4 * i] += v[b][i].x;
                fin[4 * i + 1] += v[b][i].y;
                fin[4 * i + 2] += v[b][i].z;
                fin[4 * i + 3] += v[b][i].w;
            }
        }
    }
    return true;
}

} /* namespace bfp8_gemm */
