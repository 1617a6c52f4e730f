/*
 * gemm_fp8.cu - host side of the FP8 blockwise GEMMs: tensor maps, the
 * per-shape choice of kernel configuration, and the launch.
 *
 *   bfp8_cuda_gemm_1d2d: D[M, N] = A[M, K] . B[N, K]^T, A 1x128, B 128x128
 *   bfp8_cuda_gemm_1d1d: D[N, K] = C + A[N, M] . B[K, M]^T, both 1x128
 *
 * Environment (for benchmarking and debugging):
 *   BFP8_GEMM_CONFIG="bn=192,cluster=2"  force a configuration
 *   BFP8_GEMM_TRACE=1                     print the configuration of each call
 */
#include <cudaTypedefs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/gemm_fp8_kernel.cuh"

namespace {

using bfp8_gemm::Params;

/* ------------------------------------------------------------------------ */
/* Tensor maps                                                               */

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (!fn) {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
    return fn;
}

/* A 2-D row-major tensor: `outer` rows of `inner` elements, rows `stride_bytes` apart. */
bfp8_status make_tensor_map(CUtensorMap *map, CUtensorMapDataType type, const void *base, uint64_t inner,
                            uint64_t outer, uint64_t stride_bytes, uint32_t box_inner, uint32_t box_outer,
                            CUtensorMapSwizzle swizzle, const char *what) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode) return bfp8_fail(BFP8_ERR_CUDA, "cuTensorMapEncodeTiled is not available from the driver");
    const cuuint64_t dims[2] = {inner, outer};
    const cuuint64_t strides[1] = {stride_bytes};
    const cuuint32_t box[2] = {box_inner, box_outer};
    const cuuint32_t elem_strides[2] = {1, 1};
    CUresult r = encode(map, type, 2, const_cast<void *>(base), dims, strides, box, elem_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return bfp8_fail(BFP8_ERR_CUDA, "cuTensorMapEncodeTiled(%s: %llu x %llu, stride %llu) failed: %d", what,
                         (unsigned long long)outer, (unsigned long long)inner,
                         (unsigned long long)stride_bytes, (int)r);
    return BFP8_OK;
}

/* fp8 operand, K-major rows, loaded as boxes of box_rows x 128 bytes. */
bfp8_status operand_map(CUtensorMap *map, const bfp8_qmatrix *q, uint32_t box_rows, const char *what) {
    return make_tensor_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, q->data, (uint64_t)q->cols, (uint64_t)q->rows,
                           (uint64_t)q->ld, bfp8_gemm::BLOCK_K, box_rows, CU_TENSOR_MAP_SWIZZLE_128B, what);
}

/* 1x128 scales: one row of `rows` floats per k-block. */
bfp8_status scale_map(CUtensorMap *map, const bfp8_qmatrix *q, uint32_t box_rows, const char *what) {
    return make_tensor_map(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, q->scales, (uint64_t)q->rows,
                           (uint64_t)bfp8_ceil_div(q->cols, 128), (uint64_t)q->scale_ld * 4, box_rows, 1,
                           CU_TENSOR_MAP_SWIZZLE_NONE, what);
}

bfp8_status check_tma_operand(const bfp8_qmatrix *q, const char *what) {
    if ((uintptr_t)q->data % 16 || q->ld % 16 || (uintptr_t)q->scales % 16)
        return bfp8_fail(BFP8_ERR_ALIGNMENT,
                         "%s: the CUDA GEMM needs 16-byte aligned data and scales and ld %% 16 == 0 "
                         "(the canonical layout of bfp8_qmatrix_layout has them); got ld %lld",
                         what, (long long)q->ld);
    return BFP8_OK;
}

/* ------------------------------------------------------------------------ */
/* Configurations                                                            */

struct Config {
    int bn;
    int cluster;
};

const char *env_or_null(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : nullptr;
}

/* Tiles per SM in the last wave, as a fraction of a full wave (1 = no tail). */
double wave_efficiency(int64_t tiles, int slots) {
    const int64_t waves = (tiles + slots - 1) / slots;
    return (double)tiles / (double)(waves * slots);
}

Config choose_config(int m, int n, int num_sms) {
    Config best = {128, 1};
    double best_score = -1.0;
    const int bns[2] = {128, 192};
    for (int bi = 0; bi < 2; ++bi)
        for (int cluster = 1; cluster <= 2; ++cluster) {
            const int bn = bns[bi];
            const int64_t m_tiles = bfp8_ceil_div(m, 128), n_tiles = bfp8_ceil_div(n, bn);
            const int64_t cluster_tiles = bfp8_ceil_div(m_tiles, cluster) * n_tiles;
            /* useful work over work done, counting padding and the last wave */
            const double padding = (double)m * n / (double)(cluster_tiles * cluster * 128 * bn);
            const double score = padding * wave_efficiency(cluster_tiles, num_sms / cluster) *
                                 (bn == 192 ? 1.04 : 1.0) * (cluster == 2 ? 1.03 : 1.0);
            if (score > best_score + 1e-9) {
                best_score = score;
                best = {bn, cluster};
            }
        }
    if (const char *forced = env_or_null("BFP8_GEMM_CONFIG")) {
        int bn = best.bn, cl = best.cluster;
        const char *b = strstr(forced, "bn="), *c = strstr(forced, "cluster=");
        if (b) bn = atoi(b + 3);
        if (c) cl = atoi(c + 8);
        if ((bn == 128 || bn == 192) && (cl == 1 || cl == 2)) best = {bn, cl};
    }
    return best;
}

template <int BN, int CLUSTER, bool B_1X128> constexpr int stages_for() {
    constexpr int limit = 227 * 1024;
    constexpr int per_stage = bfp8_gemm::SharedLayout<BN, B_1X128, 1>::STAGE_BYTES;
    constexpr int fixed = 1024 + 64;
    return (limit - fixed) / (per_stage + 16) > 8 ? 8 : (limit - fixed) / (per_stage + 16);
}

template <int BN, int CLUSTER, bool B_1X128>
bfp8_status launch(const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b, Params p) {
    constexpr int STAGES = stages_for<BN, CLUSTER, B_1X128>();
    using L = bfp8_gemm::SharedLayout<BN, B_1X128, STAGES>;
    auto kernel = bfp8_gemm::gemm_fp8_blockwise_kernel<BN, CLUSTER, B_1X128, STAGES>;

    CUtensorMap tmap_a, tmap_b, tmap_sa, tmap_sb;
    BFP8_TRY(operand_map(&tmap_a, a, bfp8_gemm::BLOCK_M, "a"));
    BFP8_TRY(operand_map(&tmap_b, b, BN / CLUSTER, "b"));
    BFP8_TRY(scale_map(&tmap_sa, a, bfp8_gemm::BLOCK_M, "a scales"));
    if (B_1X128)
        BFP8_TRY(scale_map(&tmap_sb, b, BN, "b scales"));
    else
        tmap_sb = tmap_sa; /* unused */

    static bool attributes_set = false; /* per instantiation */
    if (!attributes_set) {
        BFP8_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::TOTAL));
        attributes_set = true;
    }

    p.num_m_tiles = (int)bfp8_ceil_div(p.m, bfp8_gemm::BLOCK_M);
    p.num_n_tiles = (int)bfp8_ceil_div(p.n, BN);
    p.group_m = 16 / CLUSTER;
    const int num_sms = bfp8_cuda_state_of(ctx)->num_sms;
    const int64_t cluster_tiles = bfp8_ceil_div(p.num_m_tiles, CLUSTER) * (int64_t)p.num_n_tiles;
    const int64_t clusters = cluster_tiles < num_sms / CLUSTER ? cluster_tiles : num_sms / CLUSTER;

    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3((unsigned)(clusters * CLUSTER), 1, 1);
    cfg.blockDim = dim3(bfp8_gemm::NUM_THREADS, 1, 1);
    cfg.dynamicSmemBytes = L::TOTAL;
    cfg.stream = bfp8_stream_of(ctx);
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (env_or_null("BFP8_GEMM_TRACE"))
        fprintf(stderr, "blockfp8 gemm %s: M=%d N=%d K=%d bn=%d cluster=%d stages=%d grid=%u smem=%u\n",
                B_1X128 ? "1d1d" : "1d2d", p.m, p.n, p.k, BN, CLUSTER, STAGES, cfg.gridDim.x, L::TOTAL);
    BFP8_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, tmap_a, tmap_b, tmap_sa, tmap_sb, p));
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

template <bool B_1X128>
bfp8_status dispatch(const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b, const Params &p) {
    const Config cfg = choose_config(p.m, p.n, bfp8_cuda_state_of(ctx)->num_sms);
    if (cfg.bn == 192)
        return cfg.cluster == 2 ? launch<192, 2, B_1X128>(ctx, a, b, p) : launch<192, 1, B_1X128>(ctx, a, b, p);
    return cfg.cluster == 2 ? launch<128, 2, B_1X128>(ctx, a, b, p) : launch<128, 1, B_1X128>(ctx, a, b, p);
}

Params output_params(const bfp8_matrix *d, const bfp8_matrix *c) {
    Params p = {};
    p.d = d->data;
    p.ldd = d->ld;
    p.output_kind = d->dtype == BFP8_BF16 ? bfp8_gemm::OUTPUT_BF16
                    : c                   ? bfp8_gemm::OUTPUT_F32_ACCUMULATE
                                          : bfp8_gemm::OUTPUT_F32;
    const size_t pair = d->dtype == BFP8_BF16 ? 4 : 8;
    bool paired = (uintptr_t)d->data % pair == 0 && d->ld % 2 == 0;
    if (c) {
        p.c = static_cast<const float *>(c->data);
        p.ldc = c->ld;
        paired = paired && (uintptr_t)c->data % 8 == 0 && c->ld % 2 == 0;
    }
    p.paired_stores = paired;
    return p;
}

bfp8_status check_sizes(int64_t m, int64_t n, int64_t k) {
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "CUDA GEMM sizes must be below 2^31");
    return BFP8_OK;
}

} /* namespace */

bfp8_status bfp8_cuda_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                bfp8_matrix *d) {
    BFP8_TRY(check_tma_operand(a, "bfp8_gemm_1d2d: a"));
    BFP8_TRY(check_tma_operand(b, "bfp8_gemm_1d2d: b"));
    BFP8_TRY(check_sizes(a->rows, b->rows, a->cols));
    Params p = output_params(d, nullptr);
    p.m = (int)a->rows;
    p.n = (int)b->rows;
    p.k = (int)a->cols;
    p.num_k_blocks = (int)bfp8_ceil_div(p.k, 128);
    p.b_block_scales = b->scales;
    p.b_block_scale_ld = b->scale_ld;
    p.num_b_blocks = (int)bfp8_ceil_div(p.n, 128);
    return dispatch<false>(ctx, a, b, p);
}

bfp8_status bfp8_cuda_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                const bfp8_matrix *c, bfp8_matrix *d) {
    BFP8_TRY(check_tma_operand(a, "bfp8_gemm_1d1d: a"));
    BFP8_TRY(check_tma_operand(b, "bfp8_gemm_1d1d: b"));
    BFP8_TRY(check_sizes(a->rows, b->rows, a->cols));
    Params p = output_params(d, c);
    p.m = (int)a->rows;
    p.n = (int)b->rows;
    p.k = (int)a->cols;
    p.num_k_blocks = (int)bfp8_ceil_div(p.k, 128);
    p.num_b_blocks = (int)bfp8_ceil_div(p.n, 128);
    return dispatch<true>(ctx, a, b, p);
}
