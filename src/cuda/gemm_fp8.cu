/*
 * gemm_fp8.cu - host side of the FP8 blockwise GEMMs: tensor maps, the
 * per-shape choice of kernel configuration, and the launch.
 *
 *   bfp8_cuda_gemm_1d2d: D[M, N] = A[M, K] . B[N, K]^T, A 1x128, B 128x128
 *   bfp8_cuda_gemm_1d1d: D[N, K] = C + A[N, M] . B[K, M]^T, both 1x128
 *
 * Environment (for benchmarking and debugging):
 *   BFP8_GEMM_CONFIG="bm=128,bn=192,cm=2,cn=1"  force a configuration: tile bm x bn (bm 128
 *                                         unless given), cluster of cm x cn tiles; "pipe=1"
 *                                         with bn=128: two accumulators (1D2D only); "store=direct": bf16
 *                                         output stored from registers, not by TMA;
 *                                         "split=N": the last wave's tiles in N k-slices
 *                                         (1: never split; the default chooses);
 *                                         "gm=G": tiles rasterized in groups of G cluster rows
 *   BFP8_GEMM_TRACE=1                     print the configuration of each call
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/gemm_fp8_kernel.cuh"
#include "cuda/tensor_map.cuh"

namespace {

using bfp8_gemm::Params;

/* ------------------------------------------------------------------------ */
/* Tensor maps                                                               */

/* fp8 operand, K-major rows, loaded as boxes of box_rows x 128 bytes. */
bfp8_status operand_map(CUtensorMap *map, const bfp8_qmatrix *q, uint32_t box_rows, const char *what) {
    return bfp8_cuda_tensor_map_2d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, q->data, (uint64_t)q->cols, (uint64_t)q->rows,
                           (uint64_t)q->ld, bfp8_gemm::BLOCK_K, box_rows, CU_TENSOR_MAP_SWIZZLE_128B, what);
}

/* 1x128 scales: one row of `rows` floats per k-block. */
bfp8_status scale_map(CUtensorMap *map, const bfp8_qmatrix *q, uint32_t box_rows, const char *what) {
    return bfp8_cuda_tensor_map_2d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, q->scales, (uint64_t)q->rows,
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
    int bm, bn;
    int pipelined; /* two accumulators: wgmma of k-block kb+1 runs while kb is promoted */
    int cm, cn;    /* cluster of cm x cn tiles: A shared by cn CTAs, B by cm CTAs */
    int direct_store; /* bf16 output stored from registers, not by TMA through shared memory */
    int split;        /* k-slices per tile of the last wave: 0 chosen per shape, 1 never, N forced */
    int group_m;      /* raster group height in cluster rows; 0: the default */
};

/* ------------------------------------------------------------------------ */
/* Splitting the last wave along K                                           */

/* The cost of one k-slice's exchange (its partial tile stored, or one
 * partial read and added by slice 0), in k-blocks of main-loop time: a
 * 192x128 fp32 partial is 96 KiB against the 40 KiB of operands that one
 * k-block loads. */
constexpr double SPLIT_COST_K_BLOCKS = 2.5;
constexpr int SPLIT_MAX = 16;

struct SplitPlan {
    int64_t whole; /* tiles done whole, first */
    int split;     /* k-slices of each remaining tile (1: none) */
    double tail_waves; /* time of the last wave, in whole-tile times (0: no partial wave) */
};

/* Tiles over `slots` resident CTAs: the full waves run whole; the tiles of a
 * partial last wave are split into the number of k-slices (at most
 * slots / tail of them, so they all run at once) that minimises the modelled
 * time of that wave, where splitting pays. requested: 0 choose, 1 never,
 * N >= 2 that many (within the same limits). */
SplitPlan plan_split(int64_t tiles, int slots, int num_k_blocks, int requested) {
    const int64_t tail = tiles % slots;
    SplitPlan plan = {tiles, 1, tail ? 1.0 : 0.0};
    if (tail == 0 || requested == 1) return plan;
    int most = (int)(slots / tail);
    if (most > SPLIT_MAX) most = SPLIT_MAX;
    if (most > num_k_blocks) most = num_k_blocks;
    double best = num_k_blocks;
    for (int s = 2; s <= most; ++s) {
        const double t = (double)bfp8_ceil_div(num_k_blocks, s) + SPLIT_COST_K_BLOCKS * s;
        if (requested >= 2 ? s == requested || (s == most && requested > most) : t < best) {
            best = t;
            plan.split = s;
        }
    }
    if (plan.split > 1) {
        plan.whole = tiles - tail;
        plan.tail_waves = best / num_k_blocks;
    }
    return plan;
}

/* Device memory for the exchange, made on first use: the flags (zeroed
 * once; slice 0 returns each to zero) and room for a partial BM x BN fp32
 * tile (BM * BN <= 192 * 128) per resident CTA. NULL if it cannot be had:
 * the GEMM then does not split. */
struct SplitWorkspace {
    unsigned *counters;
    float *partials;
};
constexpr int SPLIT_MAX_TILE_FLOATS = 256 * 128;

SplitWorkspace split_workspace(const bfp8_context *ctx) {
    bfp8_cuda_state *st = bfp8_cuda_state_of(ctx);
    const size_t counter_bytes = ((size_t)st->num_sms * 3 * sizeof(unsigned) + 255) / 256 * 256;
    if (!st->gemm_split_workspace) {
        /* Not inside a CUDA graph capture: a cudaMalloc there would break
         * it. The captured GEMM runs unsplit instead. */
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(bfp8_stream_of(ctx), &capture) != cudaSuccess ||
            capture != cudaStreamCaptureStatusNone) {
            cudaGetLastError();
            return SplitWorkspace{nullptr, nullptr};
        }
        const size_t bytes = counter_bytes + (size_t)st->num_sms * SPLIT_MAX_TILE_FLOATS * sizeof(float);
        void *w = nullptr;
        if (cudaMalloc(&w, bytes) != cudaSuccess) {
            cudaGetLastError();
            return SplitWorkspace{nullptr, nullptr};
        }
        if (cudaMemsetAsync(w, 0, counter_bytes, bfp8_stream_of(ctx)) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(w);
            return SplitWorkspace{nullptr, nullptr};
        }
        st->gemm_split_workspace = w;
    }
    uint8_t *w = static_cast<uint8_t *>(st->gemm_split_workspace);
    return SplitWorkspace{reinterpret_cast<unsigned *>(w), reinterpret_cast<float *>(w + counter_bytes)};
}

/* ------------------------------------------------------------------------ */
/* The scale operand of 1D1D 256 x 112 tiles (SharedLayout::SCALE_MMA)       */

/* B's 1x128 scales (num_k_blocks rows of n floats, scale_ld apart) as the
 * B operand of the kernel's scale wgmma: for column c of k-block kb, the
 * eight tf32 words (hi, lo, 0, 0, hi, 0, 0, 0) at (kb * n + c) * 32 bytes,
 * hi the upper 19 bits of the scale and lo the rest (exact in fp32). */
constexpr int SCALE_OPERAND_THREADS = 256;
constexpr int64_t SCALE_OPERAND_ENTRY_BYTES = 32;
__global__ void __launch_bounds__(SCALE_OPERAND_THREADS)
    scale_operand_kernel(const float *scales, int64_t scale_ld, int n, int num_k_blocks, uint4 *operand) {
    const int c = blockIdx.x * SCALE_OPERAND_THREADS + threadIdx.x;
    if (c >= n) return;
    for (int kb = blockIdx.y; kb < num_k_blocks; kb += gridDim.y) {
        const float s = __ldg(scales + (int64_t)kb * scale_ld + c);
        const uint32_t hi = __float_as_uint(s) & 0xffffe000u;
        const uint32_t lo = __float_as_uint(s - __uint_as_float(hi));
        uint4 *entry = operand + 2 * ((int64_t)kb * n + c);
        entry[0] = make_uint4(hi, lo, 0u, 0u);
        entry[1] = make_uint4(hi, 0u, 0u, 0u);
    }
}

/* The context's device buffer for the scale operand, at least `bytes`; NULL
 * where it cannot be had (inside a CUDA graph capture when it must grow, or
 * out of memory): the GEMM then runs another tile. It grows after the
 * kernels reading it (cudaFree synchronizes the device). */
void *scale_operand_space(const bfp8_context *ctx, size_t bytes) {
    bfp8_cuda_state *st = bfp8_cuda_state_of(ctx);
    if (bytes <= st->gemm_scale_operand_bytes) return st->gemm_scale_operand;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(bfp8_stream_of(ctx), &capture) != cudaSuccess ||
        capture != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        return nullptr;
    }
    if (st->gemm_scale_operand) cudaFree(st->gemm_scale_operand);
    st->gemm_scale_operand = nullptr;
    st->gemm_scale_operand_bytes = 0;
    const size_t want = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    if (cudaMalloc(&st->gemm_scale_operand, want) != cudaSuccess) {
        cudaGetLastError();
        st->gemm_scale_operand = nullptr;
        return nullptr;
    }
    st->gemm_scale_operand_bytes = want;
    return st->gemm_scale_operand;
}

size_t scale_operand_bytes(const Params &p) {
    return (size_t)p.num_k_blocks * (size_t)p.n * SCALE_OPERAND_ENTRY_BYTES;
}

/* Write the scale operand of b's scales and its tensor map: num_k_blocks
 * matrices of n rows x 8 words, read in boxes of 8 words x bn rows, 32-byte
 * swizzle (the layout the kernel's wgmma descriptor names). */
bfp8_status make_scale_operand(const bfp8_context *ctx, const bfp8_qmatrix *b, const Params &p, int bn,
                               CUtensorMap *map) {
    void *space = scale_operand_space(ctx, scale_operand_bytes(p));
    if (!space) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_gemm_1d1d: no device memory for the scale operand");
    const dim3 grid((unsigned)bfp8_ceil_div(p.n, SCALE_OPERAND_THREADS),
                    (unsigned)(p.num_k_blocks < 65535 ? p.num_k_blocks : 65535));
    scale_operand_kernel<<<grid, SCALE_OPERAND_THREADS, 0, bfp8_stream_of(ctx)>>>(
        b->scales, b->scale_ld, p.n, p.num_k_blocks, static_cast<uint4 *>(space));
    BFP8_CUDA_CHECK_LAUNCH();
    const uint64_t row_bytes = SCALE_OPERAND_ENTRY_BYTES;
    return bfp8_cuda_tensor_map_3d(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, space, 8, (uint64_t)p.n,
                                   (uint64_t)p.num_k_blocks, row_bytes, row_bytes * (uint64_t)p.n, 8, (uint32_t)bn,
                                   CU_TENSOR_MAP_SWIZZLE_32B, "b scale operand");
}

const char *const TMA_OUT_NAMES[] = {"registers", "tma-bf16", "tma-f32", "tma-f32-add"};

const char *env_or_null(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : nullptr;
}

/* Relative speed of each configuration on large, aligned shapes, 1D2D and
 * 1D1D: the time of its whole waves of tiles against 128x128's, averaged over
 * the TARGETS shapes. Single-CTA tiles: bench_gemm under each forced
 * configuration, each normalised by cuBLASLt's time in the same run (H200,
 * bench/results/2026-11-30_gemm_h200_s3_configs.txt, after the k-loop was
 * unrolled by the stage ring, which helped the larger tiles most). Clusters
 * keep their earlier ratio to the single-CTA tile of the same shape
 * (2026-11-30_gemm_configs.txt: never faster); the two-accumulator pipeline
 * (its own loop, not unrolled) from test_gemm_gpu --time of the same
 * session. BM=192 (three math warpgroups) is fastest, and for 1D1D (two
 * multiplies per promoted element) by far; 1D1D's 256x112 (row groups:
 * B's column scales loaded once for two 64-row wgmma groups) is 1.03-1.06x
 * 192x128 on the TARGETS wgrad shapes, f32 accumulate through the TMA unit
 * (bench/results/2026-12-01_gemm_1d1d_row_groups_h200_s11.txt). */
const Config CANDIDATES[] = {{128, 128, 0, 1, 1}, {128, 128, 0, 2, 1}, {128, 128, 0, 1, 2},
                             {128, 192, 0, 1, 1}, {128, 192, 0, 2, 1}, {128, 192, 0, 1, 2},
                             {192, 128, 0, 1, 1}, {128, 128, 1, 1, 1}, {256, 112, 0, 1, 1}};
const double CANDIDATE_SPEED[2][9] = {{1.00, 0.85, 0.85, 1.085, 0.98, 0.98, 1.13, 0.88, 0.0},
                                      {1.00, 0.95, 0.93, 1.12, 0.0, 1.04, 1.18, 0.73, 1.23}};
constexpr int NUM_CANDIDATES = (int)(sizeof CANDIDATES / sizeof CANDIDATES[0]);
static_assert(sizeof CANDIDATE_SPEED[0] / sizeof CANDIDATE_SPEED[0][0] == NUM_CANDIDATES, "one speed per candidate");

template <int BM, int BN, bool B_1X128, int TMA_OUT> constexpr int stages_for() {
    constexpr bool STAGING = TMA_OUT != bfp8_gemm::TMA_NONE;
    constexpr int limit = 227 * 1024 - bfp8_gemm::SharedLayout<BM, BN, B_1X128, 1, TMA_OUT>::STAGING_BYTES *
                                           bfp8_gemm::Warps<BM>::MATH_WG;
    using One = bfp8_gemm::SharedLayout<BM, BN, B_1X128, 1, TMA_OUT>;
    constexpr int per_stage = One::STAGE_BYTES;
    /* + alignment of the staging buffers and of the scale operands (SCALE_MMA) */
    constexpr int fixed = 1024 + 64 + (STAGING ? 1024 : 0) + (One::SCALE_MMA ? 1024 : 0);
    constexpr int fit = (limit - fixed) / (per_stage + 16);
    return fit > 8 ? 8 : fit;
}

template <int BM, int BN, int CM, int CN, bool B_1X128, bool PIPELINED = false, int TMA_OUT = bfp8_gemm::TMA_NONE,
          bool SPLITS = false, bool GROUPED = false>
struct Kernel {
    static constexpr int STAGES = stages_for<BM, BN, B_1X128, TMA_OUT>();
    static constexpr int CLUSTER = CM * CN;
    using Layout = bfp8_gemm::SharedLayout<BM, BN, B_1X128, STAGES, TMA_OUT>;
    static_assert(Layout::TOTAL <= 227 * 1024, "shared memory");
    static constexpr auto function =
        bfp8_gemm::gemm_fp8_blockwise_kernel<BM, BN, CM, CN, B_1X128, STAGES, PIPELINED, TMA_OUT, SPLITS, GROUPED>;

    static cudaLaunchConfig_t launch_config(const bfp8_context *ctx, cudaLaunchAttribute *attr, unsigned ctas) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(ctas, 1, 1);
        cfg.blockDim = dim3(bfp8_gemm::Warps<BM>::NUM_THREADS, 1, 1);
        cfg.dynamicSmemBytes = Layout::TOTAL;
        cfg.stream = bfp8_stream_of(ctx);
        attr->id = cudaLaunchAttributeClusterDimension;
        attr->val.clusterDim.x = CLUSTER;
        attr->val.clusterDim.y = 1;
        attr->val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        return cfg;
    }

    /* A persistent grid must be fully resident, and a cluster needs all its
     * CTAs in one GPC, so fewer than num_sms / CLUSTER clusters may fit. */
    static int max_active_clusters(const bfp8_context *ctx) {
        static int cached = 0;
        if (cached == 0) {
            if (cudaFuncSetAttribute(function, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Layout::TOTAL) !=
                cudaSuccess)
                return 0;
            cudaLaunchAttribute attr;
            cudaLaunchConfig_t cfg =
                launch_config(ctx, &attr, (unsigned)(bfp8_cuda_state_of(ctx)->num_sms / CLUSTER * CLUSTER));
            int n = 0;
            if (cudaOccupancyMaxActiveClusters(&n, function, &cfg) != cudaSuccess) n = 0;
            cached = n;
        }
        return cached;
    }
};

template <bool B_1X128> int max_active_clusters(const Config &c, const bfp8_context *ctx) {
#define BFP8_CASE(BM_, BN_, PIPE_, CM_, CN_)                                                       \
    if (c.bm == BM_ && c.bn == BN_ && c.pipelined == PIPE_ && c.cm == CM_ && c.cn == CN_) \
        return Kernel<BM_, BN_, CM_, CN_, B_1X128, PIPE_>::max_active_clusters(ctx);
    BFP8_CASE(128, 128, 0, 1, 1) BFP8_CASE(128, 128, 0, 2, 1) BFP8_CASE(128, 128, 0, 1, 2)
    BFP8_CASE(128, 192, 0, 1, 1) BFP8_CASE(128, 192, 0, 1, 2)
    if constexpr (!B_1X128) { BFP8_CASE(128, 192, 0, 2, 1) } /* 1D1D: see launch_cluster */
    BFP8_CASE(192, 128, 0, 1, 1)
    if constexpr (!B_1X128) { BFP8_CASE(128, 128, 1, 1, 1) } /* no two-accumulator 1D1D kernel */
    if constexpr (B_1X128) { BFP8_CASE(256, 112, 0, 1, 1) } /* row groups: 1D1D only */
#undef BFP8_CASE
    return 0;
}

/* The configuration with the least estimated time: waves of resident
 * clusters times the cost of one CTA tile (its width over its speed). */
template <bool B_1X128> Config choose_config(int m, int n, int num_k_blocks, const bfp8_context *ctx) {
    Config best = CANDIDATES[0];
    double best_time = INFINITY;
    for (int i = 0; i < NUM_CANDIDATES; ++i) {
        const Config c = CANDIDATES[i];
        const int slots = max_active_clusters<B_1X128>(c, ctx);
        if (slots < 1) continue;
        const int64_t cluster_tiles =
            bfp8_ceil_div(bfp8_ceil_div(m, c.bm), c.cm) * bfp8_ceil_div(bfp8_ceil_div(n, c.bn), c.cn);
        const bool splits = bfp8_gemm::can_split(c.bn, c.cm, c.cn, B_1X128, c.pipelined);
        const SplitPlan plan = plan_split(cluster_tiles, slots, num_k_blocks, splits ? 0 : 1);
        const double waves = (double)(plan.whole / slots) + plan.tail_waves;
        const double time = waves * c.bm * c.bn / CANDIDATE_SPEED[B_1X128 ? 1 : 0][i];
        if (time < best_time * (1.0 - 1e-9)) {
            best_time = time;
            best = c;
        }
    }
    if (const char *forced = env_or_null("BFP8_GEMM_CONFIG")) { /* e.g. "bm=128,bn=192,cm=2,cn=1" */
        const char *bm = strstr(forced, "bm="), *bn = strstr(forced, "bn="), *m_ = strstr(forced, "cm="),
                   *n_ = strstr(forced, "cn="), *pipe = strstr(forced, "pipe="), *split = strstr(forced, "split=");
        if (bm || bn || m_ || n_ || pipe) { /* a tile; else the chosen one */
            Config f = best;
            f.bm = bm ? atoi(bm + 3) : 128;
            f.pipelined = pipe ? atoi(pipe + 5) : 0;
            if (bn) f.bn = atoi(bn + 3);
            if (m_) f.cm = atoi(m_ + 3);
            if (n_) f.cn = atoi(n_ + 3);
            for (int i = 0; i < NUM_CANDIDATES; ++i)
                if (CANDIDATES[i].bm == f.bm && CANDIDATES[i].bn == f.bn && CANDIDATES[i].pipelined == f.pipelined &&
                    CANDIDATES[i].cm == f.cm && CANDIDATES[i].cn == f.cn && max_active_clusters<B_1X128>(f, ctx) > 0)
                    best = f;
        }
        best.direct_store = strstr(forced, "store=direct") != nullptr;
        best.split = split ? atoi(split + 6) : 0;
        const char *gm = strstr(forced, "gm=");
        best.group_m = gm ? atoi(gm + 3) : 0;
    }
    return best;
}

/* The raster group height, in cluster rows. A 1D2D GEMM walks groups of
 * slots / 6 rows (22 tile rows with 132 resident CTAs: each wave of tiles is
 * 6 whole columns of a group), or all rows, column by column, when there are
 * fewer. On the H200 that beat every other height tried (4 to 86 tile rows):
 * against the former 16, 1.05-1.08x with M = 4096 (4096x7168x16384 and three
 * more long-K shapes), 1.0-1.025x on the 16384-row TARGETS shapes and 1.02x
 * on 8192^3 (bench/results/2026-12-01_gemm_h200_s6_raster.txt). The wgrad
 * GEMM keeps 16: all rows and 22 rows measured the same there, within the
 * noise. */
template <bool B_1X128> int default_group_m(int num_cluster_rows, int cm, int slots) {
    if (B_1X128) return 16 / cm;
    return max(1, min(num_cluster_rows, slots / 6));
}

/* The kernel's tensor maps: operands, their scales (1x128 ones), and D
 * where the epilogue stores through the TMA unit: p.m x p.n, or for a
 * grouped 1D1D (groups > 0) `groups` of them, one after the other (3-D). */
struct TensorMaps {
    CUtensorMap a, b, sa, sb, d;
};
template <int BM, int BN, int CM, int CN, bool B_1X128, int TMA_OUT>
bfp8_status make_tensor_maps(TensorMaps *t, const bfp8_qmatrix *a, const bfp8_qmatrix *b, const Params &p,
                             int groups = 0) {
    BFP8_TRY(operand_map(&t->a, a, BM / CN, "a"));
    BFP8_TRY(operand_map(&t->b, b, BN / CM, "b"));
    BFP8_TRY(scale_map(&t->sa, a, BM, "a scales"));
    if (B_1X128)
        BFP8_TRY(scale_map(&t->sb, b, BN, "b scales"));
    else
        t->sb = t->sa; /* unused */
    t->d = t->a;       /* unused unless TMA_OUT */
    if constexpr (TMA_OUT != bfp8_gemm::TMA_NONE) {
        constexpr bool BF16 = TMA_OUT == bfp8_gemm::TMA_BF16;
        const CUtensorMapDataType type = BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
        const uint64_t row_bytes = (uint64_t)p.ldd * bfp8_gemm::tma_out_bytes(TMA_OUT);
        const uint32_t box_cols = BF16 ? 64 : 32; /* 128 bytes */
        /* the kernel addresses a grouped 1D1D's D in 3-D, whatever the number of groups */
        /* row groups: unswizzled boxes of 64 rows x BN / 2 (SCALE_MMA: of 8 rows, one warp's) */
        constexpr uint32_t ROW_GROUP_BOX_ROWS =
            bfp8_gemm::SharedLayout<BM, BN, B_1X128, 1, TMA_OUT>::SCALE_MMA ? 8 : 64;
        if (bfp8_gemm::Warps<BM>::ROW_GROUPS > 1)
            BFP8_TRY(bfp8_cuda_tensor_map_2d(&t->d, type, p.d, (uint64_t)p.n, (uint64_t)p.m, row_bytes, BN / 2,
                                             ROW_GROUP_BOX_ROWS, CU_TENSOR_MAP_SWIZZLE_NONE, "d"));
        else if (B_1X128 && groups > 0)
            BFP8_TRY(bfp8_cuda_tensor_map_3d(&t->d, type, p.d, (uint64_t)p.n, (uint64_t)p.m, (uint64_t)groups,
                                             row_bytes, row_bytes * (uint64_t)p.m, box_cols, 64,
                                             CU_TENSOR_MAP_SWIZZLE_128B, "d"));
        else
            BFP8_TRY(bfp8_cuda_tensor_map_2d(&t->d, type, p.d, (uint64_t)p.n, (uint64_t)p.m, row_bytes, box_cols, 64,
                                             CU_TENSOR_MAP_SWIZZLE_128B, "d"));
    }
    return BFP8_OK;
}

/* One persistent grid of the kernel K: as many clusters as units, up to the
 * resident ones. behind: a programmatic dependent launch of the grid before
 * it in the stream (which set Params::launch_dependents). */
template <typename K>
bfp8_status run_kernel(const bfp8_context *ctx, decltype(K::function) function, const TensorMaps &t,
                       const Params &q, int64_t units, int max_clusters, bool behind = false) {
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t cfg =
        K::launch_config(ctx, attr, (unsigned)((units < max_clusters ? units : max_clusters) * K::CLUSTER));
    if (behind) {
        attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[1].val.programmaticStreamSerializationAllowed = 1;
        cfg.numAttrs = 2;
    }
    BFP8_CUDA_TRY(cudaLaunchKernelEx(&cfg, function, t.a, t.b, t.sa, t.sb, t.d, q));
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

template <int BM, int BN, int CM, int CN, bool B_1X128, bool PIPELINED, int TMA_OUT>
bfp8_status launch(const Config &c, const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                   Params p) {
    using K = Kernel<BM, BN, CM, CN, B_1X128, PIPELINED, TMA_OUT>;
    TensorMaps maps;
    BFP8_TRY((make_tensor_maps<BM, BN, CM, CN, B_1X128, TMA_OUT>(&maps, a, b, p)));
    if constexpr (K::Layout::SCALE_MMA) BFP8_TRY(make_scale_operand(ctx, b, p, BN, &maps.sb));

    p.num_m_tiles = (int)bfp8_ceil_div(p.m, BM);
    p.num_n_tiles = (int)bfp8_ceil_div(p.n, BN);
    const int max_clusters = K::max_active_clusters(ctx); /* the same for its split kernel */
    if (max_clusters < 1)
        return bfp8_fail(BFP8_ERR_CUDA, "no cluster of %d CTAs of the GEMM kernel fits on this GPU", K::CLUSTER);
    p.group_m = c.group_m > 0 ? c.group_m
                              : default_group_m<B_1X128>((int)bfp8_ceil_div(p.num_m_tiles, CM), CM, max_clusters);
    const int64_t cluster_tiles = bfp8_ceil_div(p.num_m_tiles, CM) * bfp8_ceil_div(p.num_n_tiles, CN);
    constexpr bool SPLITS = bfp8_gemm::can_split(BN, CM, CN, B_1X128, PIPELINED);
    SplitPlan plan = plan_split(cluster_tiles, max_clusters, p.num_k_blocks, SPLITS ? c.split : 1);
    if (plan.split > 1) {
        const SplitWorkspace ws = split_workspace(ctx);
        if (ws.counters) {
            p.split_counters = ws.counters;
            p.split_partials = ws.partials;
        } else {
            plan = plan_split(cluster_tiles, max_clusters, p.num_k_blocks, 1);
        }
    }
    p.num_whole_tiles = (int)plan.whole;
    p.split = plan.split;
    p.num_units = (int)(plan.whole + (cluster_tiles - plan.whole) * plan.split);

    if (env_or_null("BFP8_GEMM_TRACE"))
        fprintf(stderr,
                "blockfp8 gemm %s: M=%d N=%d K=%d bm=%d bn=%d pipe=%d cluster=%dx%d stages=%d (max clusters %d) "
                "out=%s tiles=%lld split=%d of the last %lld gm=%d\n",
                B_1X128 ? "1d1d" : "1d2d", p.m, p.n, p.k, BM, BN, (int)PIPELINED, CM, CN, K::STAGES, max_clusters,
                TMA_OUT_NAMES[TMA_OUT], (long long)cluster_tiles, p.split, (long long)(cluster_tiles - plan.whole),
                p.group_m);
    /* A split plan runs as two launches: the whole tiles by the kernel
     * without the split code (faster), then the split units of the last
     * wave by its SPLITS instance, which starts at unit num_whole_tiles. */
    if constexpr (SPLITS) {
        if (p.split > 1) {
            using KS = Kernel<BM, BN, CM, CN, B_1X128, PIPELINED, TMA_OUT, true>;
            if (KS::max_active_clusters(ctx) < 1) /* (also sets its shared-memory size) */
                return bfp8_fail(BFP8_ERR_CUDA, "the split GEMM kernel does not fit on this GPU");
            /* the split units start on the SMs the whole tiles' grid leaves
             * (a programmatic dependent launch), not after all of it */
            const bool behind = p.num_whole_tiles > 0;
            if (behind) {
                Params whole = p;
                whole.split = 1;
                whole.num_units = p.num_whole_tiles;
                whole.launch_dependents = 1;
                BFP8_TRY(run_kernel<K>(ctx, K::function, maps, whole, whole.num_units, max_clusters));
            }
            return run_kernel<KS>(ctx, KS::function, maps, p, p.num_units - p.num_whole_tiles, max_clusters, behind);
        }
    }
    return run_kernel<K>(ctx, K::function, maps, p, p.num_units, max_clusters);
}

template <int BM, int BN, bool B_1X128, int TMA_OUT>
bfp8_status launch_cluster(const Config &c, const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                           const Params &p) {
    /* 1D1D 128 x 192 in 2 x 1 clusters spills (64 bytes) since its stages'
     * scales have two slots (session 20): not a candidate (max_active_clusters),
     * and no kernel is compiled for it */
    if constexpr (!(B_1X128 && BN == 192))
        if (c.cm == 2) return launch<BM, BN, 2, 1, B_1X128, false, TMA_OUT>(c, ctx, a, b, p);
    if (c.cn == 2) return launch<BM, BN, 1, 2, B_1X128, false, TMA_OUT>(c, ctx, a, b, p);
    return launch<BM, BN, 1, 1, B_1X128, false, TMA_OUT>(c, ctx, a, b, p);
}

template <bool B_1X128, int TMA_OUT>
bfp8_status launch_config(const Config &c, const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                          const Params &p) {
    /* three math warpgroups leave no registers for the cluster bookkeeping;
     * their staging buffers cost stages */
    if (c.bm == 192) return launch<192, 128, 1, 1, B_1X128, false, TMA_OUT>(c, ctx, a, b, p);
    /* (256 x 112 with TMA outputs needs the scale operand's memory; where that
     * cannot be had, the next fastest tile) */
    if constexpr (B_1X128)
        if (c.bm == 256 &&
            (TMA_OUT == bfp8_gemm::TMA_NONE || scale_operand_space(ctx, scale_operand_bytes(p)) != nullptr))
            return launch<256, 112, 1, 1, B_1X128, false, TMA_OUT>(c, ctx, a, b, p);
    if constexpr (B_1X128)
        if (c.bm == 256) return launch<192, 128, 1, 1, B_1X128, false, TMA_OUT>(c, ctx, a, b, p);
    /* 1D2D only: the 1D1D two-accumulator kernel (B's scales to load too)
     * spills, and was the slowest 1D1D configuration before it did */
    if constexpr (!B_1X128)
        if (c.pipelined) return launch<128, 128, 1, 1, B_1X128, true, TMA_OUT>(c, ctx, a, b, p);
    if (c.bn == 192) return launch_cluster<128, 192, B_1X128, TMA_OUT>(c, ctx, a, b, p);
    return launch_cluster<128, 128, B_1X128, TMA_OUT>(c, ctx, a, b, p);
}

/* How the epilogue writes D: through shared memory and the TMA unit where
 * it can address D (16-byte aligned base and rows): 1D2D's bf16 and f32;
 * 1D1D's f32, stored, or added into D when D is the C accumulated (gradient
 * accumulation). Otherwise from registers. */
template <bool B_1X128> int output_path(const Config &c, const Params &p) {
    const bool tma_ok = !c.direct_store && (uintptr_t)p.d % 16 == 0;
    if constexpr (!B_1X128) {
        if (tma_ok && p.output_kind == bfp8_gemm::OUTPUT_BF16 && p.ldd % 8 == 0) return bfp8_gemm::TMA_BF16;
        if (tma_ok && p.output_kind == bfp8_gemm::OUTPUT_F32 && p.ldd % 4 == 0) return bfp8_gemm::TMA_F32;
    } else {
        if (tma_ok && p.output_kind == bfp8_gemm::OUTPUT_F32 && p.ldd % 4 == 0) return bfp8_gemm::TMA_F32;
        if (tma_ok && p.output_kind == bfp8_gemm::OUTPUT_F32_ACCUMULATE && p.c == p.d && p.ldc == p.ldd &&
            p.ldd % 4 == 0)
            return bfp8_gemm::TMA_F32_ADD;
    }
    return bfp8_gemm::TMA_NONE;
}

template <bool B_1X128>
bfp8_status dispatch(const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b, const Params &p) {
    const Config c = choose_config<B_1X128>(p.m, p.n, p.num_k_blocks, ctx);
    const int path = output_path<B_1X128>(c, p);
    if constexpr (!B_1X128) {
        if (path == bfp8_gemm::TMA_BF16) return launch_config<B_1X128, bfp8_gemm::TMA_BF16>(c, ctx, a, b, p);
        if (path == bfp8_gemm::TMA_F32) return launch_config<B_1X128, bfp8_gemm::TMA_F32>(c, ctx, a, b, p);
    } else {
        if (path == bfp8_gemm::TMA_F32) return launch_config<B_1X128, bfp8_gemm::TMA_F32>(c, ctx, a, b, p);
        if (path == bfp8_gemm::TMA_F32_ADD) return launch_config<B_1X128, bfp8_gemm::TMA_F32_ADD>(c, ctx, a, b, p);
    }
    return launch_config<B_1X128, bfp8_gemm::TMA_NONE>(c, ctx, a, b, p);
}

/* ------------------------------------------------------------------------ */
/* Grouped GEMMs                                                             */

/* m-tiles of a grouped 1D2D GEMM with `bm`-row tiles: each group's rows from its start. */
int64_t grouped_m_tiles(const int64_t *offsets, int num_groups, int bm) {
    int64_t tiles = 0;
    for (int g = 0; g < num_groups; ++g) tiles += bfp8_ceil_div(offsets[g + 1] - offsets[g], bm);
    return tiles;
}

/* The context's device buffer for Params::group_table, at least `count`
 * ints. It grows (after a device synchronization: cudaFree) when a call
 * needs more; what writes it runs on the context's stream, after the kernels
 * that still read the previous table. */
bfp8_status group_table_space(const bfp8_context *ctx, size_t count, int **device) {
    bfp8_cuda_state *st = bfp8_cuda_state_of(ctx);
    const size_t bytes = count * sizeof(int);
    if (bytes > st->gemm_group_table_bytes) {
        if (st->gemm_group_table) {
            BFP8_CUDA_TRY(cudaFree(st->gemm_group_table));
            st->gemm_group_table = nullptr;
            st->gemm_group_table_bytes = 0;
        }
        const size_t want = bytes < 4096 ? 4096 : bytes * 2;
        BFP8_CUDA_TRY(cudaMalloc(&st->gemm_group_table, want));
        st->gemm_group_table_bytes = want;
    }
    *device = static_cast<int *>(st->gemm_group_table);
    return BFP8_OK;
}

/* The table made on the host, copied (one copy on the context's stream). */
bfp8_status upload_group_table(const bfp8_context *ctx, const int *table, size_t count, const int **device) {
    int *space = nullptr;
    BFP8_TRY(group_table_space(ctx, count, &space));
    BFP8_CUDA_TRY(cudaMemcpyAsync(space, table, count * sizeof(int), cudaMemcpyHostToDevice, bfp8_stream_of(ctx)));
    *device = space;
    return BFP8_OK;
}

/* The table made on the GPU from offsets in device memory, clamped as
 * bfp8_clamp_group_offsets does (one CTA; the clamped offsets, in units of
 * 128 tokens, in shared memory). m_table: the grouped 1D2D table of
 * 128-row tiles (count first, then first row, group, group end per tile);
 * else the grouped 1D1D one (each group's first k-block, and the end). */
constexpr int GROUP_TABLE_THREADS = 256;
constexpr int DEVICE_OFFSETS_MAX_GROUPS = 8192; /* 32 KB of shared memory */
__global__ void __launch_bounds__(GROUP_TABLE_THREADS)
    build_group_table(const int64_t *offsets, int num_groups, int64_t tokens, bool m_table, int *table) {
    __shared__ int blocks[DEVICE_OFFSETS_MAX_GROUPS + 1]; /* clamped offset / 128 */
    if (threadIdx.x == 0) {
        const int64_t last = tokens / 128;
        int64_t prev = 0;
        blocks[0] = 0;
        for (int g = 0; g < num_groups; ++g) {
            int64_t v = offsets[g + 1] / 128;
            v = v < prev ? prev : v;
            prev = v > last ? last : v;
            blocks[g + 1] = (int)prev;
        }
    }
    __syncthreads();
    if (!m_table) {
        for (int g = threadIdx.x; g <= num_groups; g += blockDim.x) table[g] = blocks[g];
        return;
    }
    const int tiles = blocks[num_groups];
    if (threadIdx.x == 0) table[0] = tiles;
    for (int t = threadIdx.x; t < tiles; t += blockDim.x) {
        int lo = 0, hi = num_groups - 1; /* the group g with blocks[g] <= t < blocks[g + 1] */
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (blocks[mid] <= t) lo = mid;
            else hi = mid - 1;
        }
        int *e = table + 1 + 3 * t;
        e[0] = 128 * t;
        e[1] = lo;
        e[2] = 128 * blocks[lo + 1];
    }
}

/* Params::group_table for a grouped GEMM, from host offsets (checked) or
 * device ones. 1D2D: the tiles of `bm` rows of each group; 1D1D: the
 * groups' k-blocks. */
bfp8_status make_group_table(const bfp8_context *ctx, const int64_t *offsets, int num_groups, int64_t tokens,
                             bool on_device, bool m_table, int bm, const int **device) {
    if (on_device) {
        if (num_groups > DEVICE_OFFSETS_MAX_GROUPS)
            return bfp8_fail(BFP8_ERR_UNSUPPORTED, "grouped GEMM: at most %d groups with offsets in device memory",
                             DEVICE_OFFSETS_MAX_GROUPS);
        int *space = nullptr;
        BFP8_TRY(group_table_space(ctx, m_table ? 1 + 3 * (size_t)(tokens / 128) : (size_t)num_groups + 1, &space));
        build_group_table<<<1, GROUP_TABLE_THREADS, 0, bfp8_stream_of(ctx)>>>(offsets, num_groups, tokens, m_table,
                                                                              space);
        BFP8_CUDA_CHECK_LAUNCH();
        *device = space;
        return BFP8_OK;
    }
    const int64_t tiles = m_table ? grouped_m_tiles(offsets, num_groups, bm) : 0;
    const size_t count = m_table ? 1 + 3 * (size_t)tiles : (size_t)num_groups + 1;
    int *table = static_cast<int *>(malloc(count * sizeof(int)));
    if (!table) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped GEMM: group table");
    if (m_table) {
        table[0] = (int)tiles;
        int *entry = table + 1;
        for (int g = 0; g < num_groups; ++g)
            for (int64_t r = offsets[g]; r < offsets[g + 1]; r += bm, entry += 3) {
                entry[0] = (int)r;
                entry[1] = g;
                entry[2] = (int)offsets[g + 1];
            }
    } else {
        for (int g = 0; g <= num_groups; ++g) table[g] = (int)(offsets[g] / 128);
    }
    const bfp8_status st = upload_group_table(ctx, table, count, device);
    free(table);
    return st;
}

/* A grouped GEMM: single-CTA tiles, never split along K. 1D2D: m_tiles
 * tiles of BM rows, each within one group (the table); 1D1D: num_groups
 * groups of p.m x p.n outputs, each its own tiles. */
template <int BM, int BN, bool B_1X128, int TMA_OUT>
bfp8_status launch_grouped(const Config &c, const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                           Params p, int num_groups, int64_t m_tiles = 0) {
    using K = Kernel<BM, BN, 1, 1, B_1X128, false, TMA_OUT, false, true>;
    const int max_clusters = K::max_active_clusters(ctx);
    if (max_clusters < 1) return bfp8_fail(BFP8_ERR_CUDA, "the grouped GEMM kernel does not fit on this GPU");
    TensorMaps maps;
    BFP8_TRY((make_tensor_maps<BM, BN, 1, 1, B_1X128, TMA_OUT>(&maps, a, b, p, B_1X128 ? num_groups : 0)));
    p.num_m_tiles = (int)(B_1X128 ? bfp8_ceil_div(p.m, BM) : m_tiles);
    p.num_n_tiles = (int)bfp8_ceil_div(p.n, BN);
    p.group_m = c.group_m > 0 ? c.group_m : default_group_m<B_1X128>(p.num_m_tiles, 1, max_clusters);
    p.tiles_per_group = p.num_m_tiles * p.num_n_tiles;
    const int64_t units = B_1X128 ? (int64_t)p.tiles_per_group * num_groups : p.tiles_per_group;
    if (units > INT32_MAX) return bfp8_fail(BFP8_ERR_UNSUPPORTED, "grouped GEMM: more than 2^31 tiles");
    p.num_units = p.num_whole_tiles = (int)units;
    p.split = 1;
    if (env_or_null("BFP8_GEMM_TRACE"))
        fprintf(stderr, "blockfp8 gemm %s grouped: %d groups, M=%d N=%d K=%d bm=%d bn=%d stages=%d (max clusters %d) "
                "out=%s units=%lld gm=%d\n", B_1X128 ? "1d1d" : "1d2d", num_groups, p.m, p.n, p.k, BM, BN, K::STAGES,
                max_clusters, TMA_OUT_NAMES[TMA_OUT], (long long)units, p.group_m);
    return run_kernel<K>(ctx, K::function, maps, p, units, max_clusters);
}

/* The options of BFP8_GEMM_CONFIG that a grouped GEMM honours: gm=, store=direct (and, 1D2D, bm= / bn=). */
Config grouped_config() {
    Config c = {128, 128, 0, 1, 1, 0, 1, 0};
    if (const char *forced = env_or_null("BFP8_GEMM_CONFIG")) {
        const char *gm = strstr(forced, "gm=");
        c.group_m = gm ? atoi(gm + 3) : 0;
        c.direct_store = strstr(forced, "store=direct") != nullptr;
    }
    return c;
}

/* The tile of a grouped 1D2D GEMM: 128 x 128, 128 x 192 or 192 x 128,
 * by the waves of tiles each needs times its measured speed (as
 * choose_config). 192-row tiles end past a group whose rows are not a
 * multiple of 192: the rows computed there are not stored, and count.
 * rows_128: 128-row tiles only. BFP8_GEMM_CONFIG's bm= / bn= force one.
 * A grouped 1D1D always runs 192 x 128 tiles, the fastest 1D1D
 * configuration (CANDIDATE_SPEED). */
void grouped_1d2d_tile(const int64_t *offsets, int num_groups, int64_t n, bool rows_128, const bfp8_context *ctx,
                       Config *c) {
    struct Option {
        int bm, bn, slots;
        double speed;
    } options[3] = {
        {128, 128, Kernel<128, 128, 1, 1, false, false, bfp8_gemm::TMA_BF16, false, true>::max_active_clusters(ctx),
         CANDIDATE_SPEED[0][0]},
        {128, 192, Kernel<128, 192, 1, 1, false, false, bfp8_gemm::TMA_BF16, false, true>::max_active_clusters(ctx),
         CANDIDATE_SPEED[0][3]},
        {192, 128, Kernel<192, 128, 1, 1, false, false, bfp8_gemm::TMA_BF16, false, true>::max_active_clusters(ctx),
         CANDIDATE_SPEED[0][6]},
    };
    double best = INFINITY;
    for (const Option &o : options) {
        if (o.slots < 1 || (rows_128 && o.bm != 128)) continue;
        const int64_t tiles = grouped_m_tiles(offsets, num_groups, o.bm) * bfp8_ceil_div(n, o.bn);
        const double time = (double)bfp8_ceil_div(tiles, o.slots) * o.bm * o.bn / o.speed;
        if (time < best) {
            best = time;
            c->bm = o.bm;
            c->bn = o.bn;
        }
    }
    if (const char *forced = env_or_null("BFP8_GEMM_CONFIG")) {
        if (strstr(forced, "bm=192") && !rows_128) c->bm = 192, c->bn = 128;
        else if (strstr(forced, "bn=192")) c->bm = 128, c->bn = 192;
        else if (strstr(forced, "bn=128")) c->bm = 128, c->bn = 128;
    }
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

/* What every entry point checks and fills: operands the TMA unit can
 * read, sizes below 2^31 (the kernel's coordinates are 32-bit), and Params
 * for D (m x n, of d, accumulating c if given) over a's columns. */
bfp8_status prepare(const char *fn, const bfp8_qmatrix *a, const bfp8_qmatrix *b, const bfp8_matrix *c,
                    const bfp8_matrix *d, int64_t m, int64_t n, Params *p) {
    char what[64];
    snprintf(what, sizeof what, "%s: a", fn);
    BFP8_TRY(check_tma_operand(a, what));
    snprintf(what, sizeof what, "%s: b", fn);
    BFP8_TRY(check_tma_operand(b, what));
    if (a->rows > INT32_MAX || b->rows > INT32_MAX || a->cols > INT32_MAX || d->rows > INT32_MAX)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: CUDA GEMM sizes must be below 2^31", fn);
    *p = output_params(d, c);
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

} /* namespace */

bfp8_status bfp8_cuda_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                bfp8_matrix *d) {
    Params p = {};
    BFP8_TRY(prepare("bfp8_gemm_1d2d", a, b, nullptr, d, a->rows, b->rows, &p));
    return dispatch<false>(ctx, a, b, p);
}

/* Grouped along M: the group of each 128-row tile of A (and D) in a table. */
bfp8_status bfp8_cuda_gemm_1d2d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                        const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                        bfp8_matrix *d) {
    /* D's rows: the groups' (host offsets), or all that the clamped device
     * offsets may cover (the table holds how many tiles run) */
    const int64_t rows = offsets_on_backend ? a->rows / 128 * 128 : group_offsets[num_groups];
    Params p = {};
    BFP8_TRY(prepare("bfp8_gemm_1d2d_grouped", a, b, nullptr, d, rows, d->cols, &p));
    if (rows == 0) return BFP8_OK; /* no tokens: nothing to write */
    p.group_n = p.n;
    Config c = grouped_config();
    if (offsets_on_backend) { /* 128-row tiles: the groups' sizes are not known here */
        const int64_t one_group[2] = {0, rows};
        grouped_1d2d_tile(one_group, 1, p.n, true, ctx, &c);
    } else {
        grouped_1d2d_tile(group_offsets, num_groups, p.n, false, ctx, &c);
    }
    const int64_t m_tiles = offsets_on_backend ? rows / 128 : grouped_m_tiles(group_offsets, num_groups, c.bm);
    BFP8_TRY(make_group_table(ctx, group_offsets, num_groups, a->rows, offsets_on_backend, true, c.bm,
                              &p.group_table));
    const bool tma = output_path<false>(c, p) == bfp8_gemm::TMA_BF16;
    if (c.bm == 192)
        return tma ? launch_grouped<192, 128, false, bfp8_gemm::TMA_BF16>(c, ctx, a, b, p, num_groups, m_tiles)
                   : launch_grouped<192, 128, false, bfp8_gemm::TMA_NONE>(c, ctx, a, b, p, num_groups, m_tiles);
    if (c.bn == 192)
        return tma ? launch_grouped<128, 192, false, bfp8_gemm::TMA_BF16>(c, ctx, a, b, p, num_groups, m_tiles)
                   : launch_grouped<128, 192, false, bfp8_gemm::TMA_NONE>(c, ctx, a, b, p, num_groups, m_tiles);
    return tma ? launch_grouped<128, 128, false, bfp8_gemm::TMA_BF16>(c, ctx, a, b, p, num_groups, m_tiles)
               : launch_grouped<128, 128, false, bfp8_gemm::TMA_NONE>(c, ctx, a, b, p, num_groups, m_tiles);
}

/* Grouped along the tokens: each group's k-blocks in a table. */
bfp8_status bfp8_cuda_gemm_1d1d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                        const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                        const bfp8_matrix *c, bfp8_matrix *d) {
    Params p = {};
    BFP8_TRY(prepare("bfp8_gemm_1d1d_grouped", a, b, c, d, a->rows, b->rows, &p));
    p.group_n = p.m;
    BFP8_TRY(make_group_table(ctx, group_offsets, num_groups, a->cols, offsets_on_backend, false, 0,
                              &p.group_table));
    const Config cfg = grouped_config();
    switch (output_path<true>(cfg, p)) {
    case bfp8_gemm::TMA_F32: return launch_grouped<192, 128, true, bfp8_gemm::TMA_F32>(cfg, ctx, a, b, p, num_groups);
    case bfp8_gemm::TMA_F32_ADD:
        return launch_grouped<192, 128, true, bfp8_gemm::TMA_F32_ADD>(cfg, ctx, a, b, p, num_groups);
    default: return launch_grouped<192, 128, true, bfp8_gemm::TMA_NONE>(cfg, ctx, a, b, p, num_groups);
    }
}

bfp8_status bfp8_cuda_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                const bfp8_matrix *c, bfp8_matrix *d) {
    Params p = {};
    BFP8_TRY(prepare("bfp8_gemm_1d1d", a, b, c, d, a->rows, b->rows, &p));
    return dispatch<true>(ctx, a, b, p);
}
