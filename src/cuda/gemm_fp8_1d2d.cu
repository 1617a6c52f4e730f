/*
 * gemm_fp8_1d2d.cu - the CUDA 1D2D FP8 GEMMs (fprop, dgrad), plain and
 * grouped along M:
 *
 *   bfp8_cuda_gemm_1d2d:          D[M, N] = A[M, K] . B[N, K]^T, A 1x128, B 128x128
 *   bfp8_cuda_gemm_1d2d_grouped:  the same per group of A's rows, B the group's weight
 *
 * The kernel is gemm_fp8_1d2d.cuh; the configuration comes from
 * gemm_fp8_heuristic.cu.
 */
#include "cuda/gemm_fp8_launch.cuh"

using namespace bfp8_gemm;

namespace {

/* CTAs of candidate tile I resident at once (the kernel that stores from registers) */
template <int I> int candidate_slots(const bfp8_context *ctx) {
    return Kernel<false, CANDIDATES_1D2D[I].bm, CANDIDATES_1D2D[I].bn, TMA_NONE>::resident_ctas(ctx);
}
/* the same for the grouped kernel with bf16 TMA outputs */
template <int I> int grouped_slots(const bfp8_context *ctx) {
    return Kernel<false, CANDIDATES_1D2D[I].bm, CANDIDATES_1D2D[I].bn, TMA_BF16, false, true>::resident_ctas(ctx);
}
static_assert(NUM_CANDIDATES_1D2D == 3, "one slot count per candidate");

/* (three math warpgroups, BM = 192, leave no registers for BN = 192) */
template <int TMA_OUT>
bfp8_status launch_tile(const Config &c, const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                        const Params &p) {
    if (c.bm == 192) return launch<false, 192, 128, TMA_OUT>(c, ctx, a, b, p);
    if (c.bn == 192) return launch<false, 128, 192, TMA_OUT>(c, ctx, a, b, p);
    return launch<false, 128, 128, TMA_OUT>(c, ctx, a, b, p);
}

template <int TMA_OUT>
bfp8_status launch_grouped_tile(const Config &c, const bfp8_context *ctx, const bfp8_qmatrix *a,
                                const bfp8_qmatrix *b, const Params &p, int num_groups, int64_t m_tiles) {
    if (c.bm == 192) return launch_grouped<false, 192, 128, TMA_OUT>(c, ctx, a, b, p, num_groups, m_tiles);
    if (c.bn == 192) return launch_grouped<false, 128, 192, TMA_OUT>(c, ctx, a, b, p, num_groups, m_tiles);
    return launch_grouped<false, 128, 128, TMA_OUT>(c, ctx, a, b, p, num_groups, m_tiles);
}

} /* namespace */

bfp8_status bfp8_cuda_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b, bfp8_matrix *d) {
    Params p;
    BFP8_TRY(prepare("bfp8_gemm_1d2d", a, b, nullptr, d, a->rows, b->rows, &p));
    if (small_1d2d_applies(ctx, p.m, p.k)) return launch_small_1d2d(ctx, a, b, p);
    const int slots[] = {candidate_slots<0>(ctx), candidate_slots<1>(ctx), candidate_slots<2>(ctx)};
    const Config c = choose_config(tuning_of(ctx), false, p.m, p.n, p.num_k_blocks, slots);
    switch (output_path(false, c, p)) {
    case TMA_BF16: return launch_tile<TMA_BF16>(c, ctx, a, b, p);
    case TMA_F32: return launch_tile<TMA_F32>(c, ctx, a, b, p);
    default: return launch_tile<TMA_NONE>(c, ctx, a, b, p);
    }
}

/* The group of each tile of A's (and D's) rows in a table. */
bfp8_status bfp8_cuda_gemm_1d2d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                        const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                        bfp8_matrix *d) {
    /* D's rows: the groups' (host offsets), or all that the clamped device
     * offsets may cover (the table holds how many tiles run) */
    const int64_t rows = offsets_on_backend ? a->rows / 128 * 128 : group_offsets[num_groups];
    Params p;
    BFP8_TRY(prepare("bfp8_gemm_1d2d_grouped", a, b, nullptr, d, rows, d->cols, &p));
    if (rows == 0) return BFP8_OK; /* no tokens: nothing to write */
    p.group_n = p.n;
    Config c = grouped_config(tuning_of(ctx));
    const int slots[] = {grouped_slots<0>(ctx), grouped_slots<1>(ctx), grouped_slots<2>(ctx)};
    if (offsets_on_backend) { /* 128-row tiles: the groups' sizes are not known here */
        const int64_t one_group[2] = {0, rows};
        grouped_1d2d_tile(tuning_of(ctx), one_group, 1, p.n, true, slots, &c);
    } else {
        grouped_1d2d_tile(tuning_of(ctx), group_offsets, num_groups, p.n, false, slots, &c);
    }
    const int64_t m_tiles = offsets_on_backend ? rows / 128 : grouped_m_tiles(group_offsets, num_groups, c.bm);
    BFP8_TRY(make_group_table(ctx, group_offsets, num_groups, a->rows, offsets_on_backend, true, c.bm,
                              &p.group_table));
    /* (f32 outputs from registers: no grouped kernel stores f32 by TMA) */
    if (output_path(false, c, p) == TMA_BF16)
        return launch_grouped_tile<TMA_BF16>(c, ctx, a, b, p, num_groups, m_tiles);
    return launch_grouped_tile<TMA_NONE>(c, ctx, a, b, p, num_groups, m_tiles);
}
