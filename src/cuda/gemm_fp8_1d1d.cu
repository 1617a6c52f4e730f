/*
 * gemm_fp8_1d1d.cu - the CUDA 1D1D FP8 GEMMs (wgrad), plain and grouped
 * along the tokens:
 *
 *   bfp8_cuda_gemm_1d1d:          D[N, K] = C + A[N, M] . B[K, M]^T, both 1x128
 *   bfp8_cuda_gemm_1d1d_grouped:  one such D per group of the tokens (M)
 *
 * The kernel is gemm_fp8_1d1d.cuh; the configuration comes from
 * gemm_fp8_heuristic.cu.
 */
#include "cuda/gemm_fp8_launch.cuh"

using namespace bfp8_gemm;

namespace {

/* CTAs of candidate tile I resident at once (the kernel that stores from registers) */
template <int I> int candidate_slots(const bfp8_context *ctx) {
    return Kernel<true, CANDIDATES_1D1D[I].bm, CANDIDATES_1D1D[I].bn, TMA_NONE>::resident_ctas(ctx);
}
static_assert(NUM_CANDIDATES_1D1D == 4, "one slot count per candidate");
template <int I> int narrow_slots(const bfp8_context *ctx) {
    return Kernel<true, NARROW_1D1D[I].bm, NARROW_1D1D[I].bn, TMA_F32_ADD>::resident_ctas(ctx);
}
static_assert(NUM_NARROW_1D1D == 2, "one slot count per narrow tile");

template <int TMA_OUT>
bfp8_status launch_tile(const Config &c, const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                        const Params &p) {
    if constexpr (TMA_OUT != TMA_NONE) {
        if (c.bm == 64 && c.bn == 32) return launch<true, 64, 32, TMA_OUT>(c, ctx, a, b, p);
        if (c.bm == 64) return launch<true, 64, 64, TMA_OUT>(c, ctx, a, b, p);
    }
    if (c.bm == 192) return launch<true, 192, 128, TMA_OUT>(c, ctx, a, b, p);
    /* (256 x 112 with TMA outputs needs the scale operand's memory; where that
     * cannot be had, the next fastest tile) */
    if (c.bm == 256 && (TMA_OUT == TMA_NONE || scale_operand_available(ctx, p.n, p.num_k_blocks)))
        return launch<true, 256, 112, TMA_OUT>(c, ctx, a, b, p);
    if (c.bm == 256) return launch<true, 192, 128, TMA_OUT>(c, ctx, a, b, p);
    if (c.bn == 192) return launch<true, 128, 192, TMA_OUT>(c, ctx, a, b, p);
    return launch<true, 128, 128, TMA_OUT>(c, ctx, a, b, p);
}

} /* namespace */

bfp8_status bfp8_cuda_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                const bfp8_matrix *c, bfp8_matrix *d) {
    Params p;
    BFP8_TRY(prepare("bfp8_gemm_1d1d", a, b, c, d, a->rows, b->rows, &p));
    if (small_1d1d_applies(ctx, p.m, p.n, p.k)) return launch_small_1d1d(ctx, a, b, p);
    const int slots[] = {candidate_slots<0>(ctx), candidate_slots<1>(ctx), candidate_slots<2>(ctx),
                         candidate_slots<3>(ctx)};
    Config cfg = choose_config(tuning_of(ctx), true, p.m, p.n, p.num_k_blocks, slots);
    const int path = output_path(true, cfg, p);
    if (path != TMA_NONE) { /* small outputs: maybe narrow tiles (f32 outputs through the TMA unit only) */
        const int narrow[] = {narrow_slots<0>(ctx), narrow_slots<1>(ctx)};
        choose_small_output_1d1d(tuning_of(ctx), p.m, p.n, p.num_k_blocks, slots[0], narrow, &cfg);
    }
    switch (path) {
    case TMA_F32: return launch_tile<TMA_F32>(cfg, ctx, a, b, p);
    case TMA_F32_ADD: return launch_tile<TMA_F32_ADD>(cfg, ctx, a, b, p);
    default: return launch_tile<TMA_NONE>(cfg, ctx, a, b, p);
    }
}

/* Each group's k-blocks in a table; always 192 x 128 tiles, the fastest 1D1D
 * tile that groups (row groups do not). */
bfp8_status bfp8_cuda_gemm_1d1d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                        const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                        const bfp8_matrix *c, bfp8_matrix *d) {
    Params p;
    BFP8_TRY(prepare("bfp8_gemm_1d1d_grouped", a, b, c, d, a->rows, b->rows, &p));
    p.group_n = p.m;
    BFP8_TRY(make_group_table(ctx, group_offsets, num_groups, a->cols, offsets_on_backend, false, 0,
                              &p.group_table));
    const Config cfg = grouped_config(tuning_of(ctx));
    switch (output_path(true, cfg, p)) {
    case TMA_F32: return launch_grouped<true, 192, 128, TMA_F32>(cfg, ctx, a, b, p, num_groups);
    case TMA_F32_ADD: return launch_grouped<true, 192, 128, TMA_F32_ADD>(cfg, ctx, a, b, p, num_groups);
    default: return launch_grouped<true, 192, 128, TMA_NONE>(cfg, ctx, a, b, p, num_groups);
    }
}
