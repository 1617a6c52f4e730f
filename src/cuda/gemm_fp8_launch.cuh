/*
 * gemm_fp8_launch.cuh - launching an FP8 GEMM kernel (host templates, used
 * by gemm_fp8_1d2d.cu and gemm_fp8_1d1d.cu): a configuration's kernel and its
 * shared-memory size, the tensor maps, the persistent grid, and a split last
 * wave as a second, programmatic dependent launch.
 */
#pragma once

#include <stdio.h>

#include "cuda/cuda_common.cuh"
#include "cuda/gemm_fp8_1d1d.cuh"
#include "cuda/gemm_fp8_1d2d.cuh"
#include "cuda/gemm_fp8_host.h"
#include "cuda/tensor_map.cuh"

namespace bfp8_gemm {

template <bool B_1X128, int BM, int BN, int STAGES, int TMA_OUT, bool SPLITS, bool GROUPED>
constexpr auto kernel_function() {
    if constexpr (B_1X128) return gemm_fp8_1d1d_kernel<BM, BN, STAGES, TMA_OUT, SPLITS, GROUPED>;
    else return gemm_fp8_1d2d_kernel<BM, BN, STAGES, TMA_OUT, SPLITS, GROUPED>;
}

/* The kernel of a configuration: 1D1D (B_1X128) or 1D2D, a BM x BN tile,
 * as many stages as fit beside the output staging. */
template <bool B_1X128, int BM, int BN, int TMA_OUT, bool SPLITS = false, bool GROUPED = false> struct Kernel {
    static constexpr int STAGES = stages_for<BM, BN, B_1X128, TMA_OUT>();
    using Layout = SharedLayout<BM, BN, B_1X128, STAGES, TMA_OUT>;
    static_assert(Layout::TOTAL <= 227 * 1024, "shared memory");
    static constexpr auto function = kernel_function<B_1X128, BM, BN, STAGES, TMA_OUT, SPLITS, GROUPED>();

    /* Launched as clusters of one CTA: cudaOccupancyMaxActiveClusters then
     * counts the CTAs resident at once on the whole GPU. */
    static cudaLaunchConfig_t launch_config(const bfp8_context *ctx, cudaLaunchAttribute *attr, unsigned ctas) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(ctas, 1, 1);
        cfg.blockDim = dim3(Warps<BM>::NUM_THREADS, 1, 1);
        cfg.dynamicSmemBytes = Layout::TOTAL;
        cfg.stream = bfp8_stream_of(ctx);
        attr->id = cudaLaunchAttributeClusterDimension;
        attr->val.clusterDim.x = 1;
        attr->val.clusterDim.y = 1;
        attr->val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        return cfg;
    }

    /* CTAs resident at once (a persistent grid must be); 0 if it does not fit.
     * Also sets the kernel's shared-memory size, once. */
    static int resident_ctas(const bfp8_context *ctx) {
        static int cached = 0;
        if (cached == 0) {
            if (cudaFuncSetAttribute(function, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Layout::TOTAL) !=
                cudaSuccess)
                return 0;
            cudaLaunchAttribute attr;
            cudaLaunchConfig_t cfg = launch_config(ctx, &attr, (unsigned)bfp8_cuda_state_of(ctx)->num_sms);
            int n = 0;
            if (cudaOccupancyMaxActiveClusters(&n, function, &cfg) != cudaSuccess) n = 0;
            cached = n;
        }
        return cached;
    }
};

/* ------------------------------------------------------------------------ */
/* Arguments                                                                 */

/* fp8 operand, K-major rows, loaded as boxes of box_rows x 128 bytes. */
inline bfp8_status operand_map(CUtensorMap *map, const bfp8_qmatrix *q, uint32_t box_rows, const char *what) {
    return bfp8_cuda_tensor_map_2d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, q->data, (uint64_t)q->cols, (uint64_t)q->rows,
                                   (uint64_t)q->ld, BLOCK_K, box_rows, CU_TENSOR_MAP_SWIZZLE_128B, what);
}

/* 1x128 scales: one row of `rows` floats per k-block. */
inline bfp8_status scale_map(CUtensorMap *map, const bfp8_qmatrix *q, uint32_t box_rows, const char *what) {
    return bfp8_cuda_tensor_map_2d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, q->scales, (uint64_t)q->rows,
                                   (uint64_t)bfp8_ceil_div(q->cols, 128), (uint64_t)q->scale_ld * 4, box_rows, 1,
                                   CU_TENSOR_MAP_SWIZZLE_NONE, what);
}

inline bfp8_status check_tma_operand(const bfp8_qmatrix *q, const char *what) {
    if ((uintptr_t)q->data % 16 || q->ld % 16 || (uintptr_t)q->scales % 16)
        return bfp8_fail(BFP8_ERR_ALIGNMENT,
                         "%s: the CUDA GEMM needs 16-byte aligned data and scales and ld %% 16 == 0 "
                         "(the canonical layout of bfp8_qmatrix_layout has them); got ld %lld",
                         what, (long long)q->ld);
    return BFP8_OK;
}

/* What every entry point checks and fills: operands the TMA unit can read,
 * sizes below 2^31 (the kernel's coordinates are 32-bit), and Params for D
 * (m x n, of d, accumulating c if given) over a's columns. */
inline bfp8_status prepare(const char *fn, const bfp8_qmatrix *a, const bfp8_qmatrix *b, const bfp8_matrix *c,
                           const bfp8_matrix *d, int64_t m, int64_t n, Params *p) {
    char what[64];
    snprintf(what, sizeof what, "%s: a", fn);
    BFP8_TRY(check_tma_operand(a, what));
    snprintf(what, sizeof what, "%s: b", fn);
    BFP8_TRY(check_tma_operand(b, what));
    if (a->rows > INT32_MAX || b->rows > INT32_MAX || a->cols > INT32_MAX || d->rows > INT32_MAX)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: CUDA GEMM sizes must be below 2^31", fn);
    *p = Params{};
    p->d = d->data;
    p->ldd = d->ld;
    p->output_kind = d->dtype == BFP8_BF16 ? OUTPUT_BF16 : c ? OUTPUT_F32_ACCUMULATE : OUTPUT_F32;
    const size_t pair = d->dtype == BFP8_BF16 ? 4 : 8;
    bool paired = (uintptr_t)d->data % pair == 0 && d->ld % 2 == 0;
    if (c) {
        p->c = static_cast<const float *>(c->data);
        p->ldc = c->ld;
        paired = paired && (uintptr_t)c->data % 8 == 0 && c->ld % 2 == 0;
    }
    p->paired_stores = paired;
    p->m = (int)m;
    p->n = (int)n;
    p->k = (int)a->cols;
    p->num_k_blocks = (int)bfp8_ceil_div(p->k, 128);
    p->num_b_blocks = (int)bfp8_ceil_div(p->n, 128);
    if (b->granularity == BFP8_GRAN_128X128) {
        p->b_block_scales = b->scales;
        p->b_block_scale_ld = b->scale_ld;
    }
    return BFP8_OK;
}

/* The kernel's tensor maps: operands, their scales (1x128 ones), and D
 * where the epilogue stores through the TMA unit: p.m x p.n, or for a
 * grouped 1D1D (groups > 0) `groups` of them, one after the other (3-D). */
struct TensorMaps {
    CUtensorMap a, b, sa, sb, d;
};
template <bool B_1X128, int BM, int BN, int TMA_OUT>
bfp8_status make_tensor_maps(TensorMaps *t, const bfp8_qmatrix *a, const bfp8_qmatrix *b, const Params &p,
                             int groups = 0) {
    BFP8_TRY(operand_map(&t->a, a, BM, "a"));
    BFP8_TRY(operand_map(&t->b, b, BN, "b"));
    BFP8_TRY(scale_map(&t->sa, a, BM, "a scales"));
    if (B_1X128)
        BFP8_TRY(scale_map(&t->sb, b, BN, "b scales"));
    else
        t->sb = t->sa; /* unused */
    t->d = t->a;       /* unused unless TMA_OUT */
    if constexpr (TMA_OUT != TMA_NONE) {
        constexpr bool BF16 = TMA_OUT == TMA_BF16;
        const CUtensorMapDataType type = BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
        const uint64_t row_bytes = (uint64_t)p.ldd * tma_out_bytes(TMA_OUT);
        const uint32_t box_cols = BF16 ? 64 : 32; /* 128 bytes */
        if (Warps<BM>::ROW_GROUPS > 1) /* row groups: unswizzled boxes of one warp's 8 rows x BN / 2 */
            BFP8_TRY(bfp8_cuda_tensor_map_2d(&t->d, type, p.d, (uint64_t)p.n, (uint64_t)p.m, row_bytes, BN / 2, 8,
                                             CU_TENSOR_MAP_SWIZZLE_NONE, "d"));
        else if (B_1X128 && groups > 0) /* (3-D whatever the number of groups: the kernel addresses it so) */
            BFP8_TRY(bfp8_cuda_tensor_map_3d(&t->d, type, p.d, (uint64_t)p.n, (uint64_t)p.m, (uint64_t)groups,
                                             row_bytes, row_bytes * (uint64_t)p.m, box_cols, 64,
                                             CU_TENSOR_MAP_SWIZZLE_128B, "d"));
        else
            BFP8_TRY(bfp8_cuda_tensor_map_2d(&t->d, type, p.d, (uint64_t)p.n, (uint64_t)p.m, row_bytes, box_cols, 64,
                                             CU_TENSOR_MAP_SWIZZLE_128B, "d"));
    }
    return BFP8_OK;
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                    */

/* One persistent grid of the kernel K: as many CTAs as units, up to the
 * resident ones; a programmatic dependent launch of the grid before it in the
 * stream (the kernel waits for it, griddep_wait) where the context's
 * BFP8_OPTION_GEMM_PDL is on, and always for a split plan's second grid. */
template <typename K>
bfp8_status run_kernel(const bfp8_context *ctx, const TensorMaps &t, const Params &q, int64_t units, int max_ctas) {
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t cfg = K::launch_config(ctx, attr, (unsigned)(units < max_ctas ? units : max_ctas));
    if (ctx->gemm_pdl || q.behind_whole_tiles()) add_programmatic_dependent_launch(&cfg);
    BFP8_CUDA_TRY(cudaLaunchKernelEx(&cfg, K::function, t.a, t.b, t.sa, t.sb, t.d, q));
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

/* A GEMM (not grouped) with tile BM x BN: whole tiles, the last partial wave
 * split along K where the plan says so. A split plan runs as two launches:
 * the whole tiles by the kernel without the split code (faster), then the
 * split units of the last wave by its SPLITS instance, which starts at unit
 * num_whole_tiles on the SMs the whole tiles' grid leaves (a programmatic
 * dependent launch), not after all of it. */
template <bool B_1X128, int BM, int BN, int TMA_OUT>
bfp8_status launch(const Config &c, const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b, Params p) {
    using K = Kernel<B_1X128, BM, BN, TMA_OUT>;
    TensorMaps maps;
    BFP8_TRY((make_tensor_maps<B_1X128, BM, BN, TMA_OUT>(&maps, a, b, p)));
    if constexpr (K::Layout::SCALE_MMA) BFP8_TRY(make_scale_operand(ctx, b, p.n, p.num_k_blocks, BN, &maps.sb));

    p.num_m_tiles = (int)bfp8_ceil_div(p.m, BM);
    p.num_n_tiles = (int)bfp8_ceil_div(p.n, BN);
    const int max_ctas = K::resident_ctas(ctx); /* the same for its split kernel */
    if (max_ctas < 1) return bfp8_fail(BFP8_ERR_CUDA, "the GEMM kernel does not fit on this GPU");
    p.group_m = c.group_m > 0 ? c.group_m : default_group_m(B_1X128, p.num_m_tiles, max_ctas);
    const int64_t tiles = (int64_t)p.num_m_tiles * p.num_n_tiles;
    constexpr bool SPLITS = can_split(BN, B_1X128);
    SplitPlan plan = plan_split(tiles, max_ctas, p.num_k_blocks, SPLITS ? c.split : 1);
    if (plan.split > 1) {
        const SplitWorkspace ws = split_workspace(ctx);
        if (ws.counters) {
            p.split_counters = ws.counters;
            p.split_partials = ws.partials;
        } else {
            plan = plan_split(tiles, max_ctas, p.num_k_blocks, 1);
        }
    }
    p.num_whole_tiles = (int)plan.whole;
    p.split = plan.split;
    p.num_units = (int)(plan.whole + (tiles - plan.whole) * plan.split);

    if (trace_enabled(ctx))
        fprintf(stderr,
                "blockfp8 gemm %s: M=%d N=%d K=%d bm=%d bn=%d stages=%d (resident %d) out=%s tiles=%lld split=%d "
                "of the last %lld gm=%d\n",
                B_1X128 ? "1d1d" : "1d2d", p.m, p.n, p.k, BM, BN, K::STAGES, max_ctas, TMA_OUT_NAMES[TMA_OUT],
                (long long)tiles, p.split, (long long)(tiles - plan.whole), p.group_m);
    if constexpr (SPLITS) {
        if (p.split > 1) {
            using KS = Kernel<B_1X128, BM, BN, TMA_OUT, true>;
            if (KS::resident_ctas(ctx) < 1) /* (also sets its shared-memory size) */
                return bfp8_fail(BFP8_ERR_CUDA, "the split GEMM kernel does not fit on this GPU");
            if (p.num_whole_tiles > 0) {
                Params whole = p;
                whole.split = 1;
                whole.num_units = p.num_whole_tiles;
                BFP8_TRY(run_kernel<K>(ctx, maps, whole, whole.num_units, max_ctas));
            }
            return run_kernel<KS>(ctx, maps, p, p.num_units - p.num_whole_tiles, max_ctas);
        }
    }
    return run_kernel<K>(ctx, maps, p, p.num_units, max_ctas);
}

/* A grouped GEMM: whole tiles, never split along K. 1D2D: m_tiles tiles of
 * BM rows, each within one group (the table); 1D1D: num_groups groups of
 * p.m x p.n outputs, each its own tiles. */
template <bool B_1X128, int BM, int BN, int TMA_OUT>
bfp8_status launch_grouped(const Config &c, const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                           Params p, int num_groups, int64_t m_tiles = 0) {
    using K = Kernel<B_1X128, BM, BN, TMA_OUT, false, true>;
    const int max_ctas = K::resident_ctas(ctx);
    if (max_ctas < 1) return bfp8_fail(BFP8_ERR_CUDA, "the grouped GEMM kernel does not fit on this GPU");
    TensorMaps maps;
    BFP8_TRY((make_tensor_maps<B_1X128, BM, BN, TMA_OUT>(&maps, a, b, p, B_1X128 ? num_groups : 0)));
    p.num_m_tiles = (int)(B_1X128 ? bfp8_ceil_div(p.m, BM) : m_tiles);
    p.num_n_tiles = (int)bfp8_ceil_div(p.n, BN);
    p.group_m = c.group_m > 0 ? c.group_m : default_group_m(B_1X128, p.num_m_tiles, max_ctas);
    p.tiles_per_group = p.num_m_tiles * p.num_n_tiles;
    const int64_t units = B_1X128 ? (int64_t)p.tiles_per_group * num_groups : p.tiles_per_group;
    if (units > INT32_MAX) return bfp8_fail(BFP8_ERR_UNSUPPORTED, "grouped GEMM: more than 2^31 tiles");
    p.num_units = p.num_whole_tiles = (int)units;
    p.split = 1;
    if (trace_enabled(ctx))
        fprintf(stderr, "blockfp8 gemm %s grouped: %d groups, M=%d N=%d K=%d bm=%d bn=%d stages=%d (resident %d) "
                "out=%s units=%lld gm=%d\n", B_1X128 ? "1d1d" : "1d2d", num_groups, p.m, p.n, p.k, BM, BN, K::STAGES,
                max_ctas, TMA_OUT_NAMES[TMA_OUT], (long long)units, p.group_m);
    return run_kernel<K>(ctx, maps, p, units, max_ctas);
}

} /* namespace bfp8_gemm */
