/*
 * gemm_fp8_small.cu - the FP8 GEMMs whose work is too small for the
 * tensor-core kernels' tiles: 1D2D with a few rows (decode, tiny batches;
 * memory-bound on the weight B) and 1D1D with a few tokens or a small output
 * (wgrad of a small layer or batch). Both run one kernel that splits the
 * contraction over many warps, so that one call issues all (or most) of its
 * loads at once and its time is about one trip to memory, not a serial K
 * loop on a few CTAs:
 *
 *   out[x, y] = sum_kb  sx[x, kb] * sy[y, kb] * P_kb[x, y]
 *
 *   1D2D: x = B's rows (N, 128 x 128 scales), y = A's rows (M <= 16), D[y, x]
 *   1D1D: x = A's rows (D's rows), y = B's rows (D's columns), D[x, y] = C + out
 *
 * A warp computes 16 x-rows by 8 J y-rows over its k-blocks with mma.sync
 * m16n8k32 (e4m3, fp32 accumulate), the x rows as the 16-row side: each lane
 * loads 16 bytes of its rows per 64-byte half k-block straight from global
 * memory (no shared-memory staging); every 128-wide k-block's product is
 * promoted into fp32 with its two scales (RECIPE.md section 4: never more
 * than one k-block inside the tensor core). The k-blocks of a warp's rows are
 * split over the CTA's k-warps and over the CTAs of a thread-block cluster
 * along K (up to 8 x 8 slices). The slices are summed in a fixed order: the
 * CTA's k-warps through shared memory, then the cluster's CTAs through
 * distributed shared memory, each CTA summing its share of the outputs over
 * the cluster's ranks. Deterministic, no workspace, no memset, one launch.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>

#include "cuda/gemm_fp8_host.h"
#include "cuda/hopper.cuh"

namespace bfp8_gemm {

namespace {

constexpr int SMALL_WARPS = 8;
constexpr int SMALL_THREADS = 32 * SMALL_WARPS;
constexpr int SMALL_MAX_CLUSTER = 8; /* the portable cluster size */
constexpr int SMALL_MAX_SPLIT = SMALL_WARPS * SMALL_MAX_CLUSTER;
constexpr int SMALL_1D1D_J = 2; /* 1D1D: 16 x 16 outputs per warp */

struct SmallArgs {
    const uint8_t *x, *y; /* K-major rows */
    int64_t ldx, ldy;
    const float *x_scales, *y_scales; /* x: 1D2D [(row / 128) * ld + kb], 1D1D [kb * ld + row]; y: [kb * ld + row] */
    int64_t x_scale_ld, y_scale_ld;
    const float *c; /* 1D1D: C accumulated (may be d), or NULL */
    int64_t ldc;
    void *d;
    int64_t ldd;
    int d_bf16;
    int x_rows, y_rows, k, num_k_blocks;
    int y_tiles;   /* tiles of 8 J y-rows (gridDim.x = x tiles * y_tiles) */
    int row_warps; /* warps of a CTA along x (16 rows each); k_warps = 8 / row_warps along K */
    int k_warps;
    int cluster; /* CTAs of a cluster along K (gridDim.y) */
};

/* 16 bytes of a row from byte `col` on, the bytes at or past `limit` zero
 * (the row's padding is never read as data; whole chunks past it not at all).
 * STREAM: read once (B of 1D2D), not kept in L1. */
template <bool STREAM> __device__ __forceinline__ uint4 load_row_16(const uint8_t *row, int col, int limit) {
    if (col >= limit) return make_uint4(0u, 0u, 0u, 0u);
    uint4 v;
    if (STREAM)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(row + col));
    else
        v = __ldg(reinterpret_cast<const uint4 *>(row + col));
    const int valid = limit - col;
    if (valid < 16) {
        uint32_t *w = &v.x;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int bytes = valid - 4 * i;
            w[i] &= bytes >= 4 ? 0xffffffffu : bytes <= 0 ? 0u : (1u << (8 * bytes)) - 1u;
        }
    }
    return v;
}

/* d += a . b over 32 k (e4m3 in, fp32 accumulate): a 16 x 32, b 32 x 8 */
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* One warp: x rows x0 + g and x0 + g + 8 (g = lane / 4) against J groups of 8
 * y rows (y0 + 8 j + g), a k-block as two halves of 64 bytes; lane t = lane %
 * 4 loads bytes 16 t .. 16 t + 15 of each half. The four bytes at 16 t + 4 q
 * play the mma's k = 4 t (q = 0) and 16 + 4 t (q = 1) of one mma and the same
 * of a second one (q = 2, 3): x and y permuted alike, the sum is the same.
 * Thread's outputs: acc[j][e] for x row g + 8 (e / 2), y row 8 j + 2 t + e % 2.
 * BATCH k-blocks' loads (and their scales) are in flight before their mma:
 * two with J = 1, one with J = 2 (two of them spill under the register cap
 * that keeps two CTAs on an SM). */
template <bool WGRAD, int J>
__global__ void __launch_bounds__(SMALL_THREADS, 2) gemm_fp8_small_kernel(const SmallArgs p) {
    using namespace bfp8_sm90;
    constexpr int TILE_Y = 8 * J, WARP_OUT = 16 * TILE_Y, BATCH = J == 1 ? 2 : 1;
    __shared__ float part[SMALL_WARPS * WARP_OUT]; /* per warp: its 16 x TILE_Y partial, [x][y] */
    __shared__ float total[SMALL_WARPS * WARP_OUT]; /* the CTA's sum (a cluster's CTAs read it) */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int rw = warp % p.row_warps, kw = warp / p.row_warps;
    const int x_cta = (int)(blockIdx.x / p.y_tiles) * 16 * p.row_warps;
    const int y0 = (int)(blockIdx.x % p.y_tiles) * TILE_Y;
    const int x0 = x_cta + 16 * rw;
    const int splits = p.k_warps * p.cluster, slice = (int)blockIdx.y * p.k_warps + kw;
    const int kb_begin = (int)((int64_t)slice * p.num_k_blocks / splits);
    const int kb_end = (int)((int64_t)(slice + 1) * p.num_k_blocks / splits);
    griddep_wait(); /* (a programmatic dependent launch: see launch_small) */
    griddep_launch_dependents();

    float acc[J][4];
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;

    if (x0 < p.x_rows) {
        const uint8_t *x_row[2];
        int x_limit[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const bool ok = x0 + g + 8 * r < p.x_rows;
            x_row[r] = p.x + (int64_t)(ok ? x0 + g + 8 * r : 0) * p.ldx;
            x_limit[r] = ok ? p.k : 0;
        }
        const uint8_t *y_row[J];
        int y_limit[J];
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const bool ok = y0 + 8 * j + g < p.y_rows;
            y_row[j] = p.y + (int64_t)(ok ? y0 + 8 * j + g : 0) * p.ldy;
            y_limit[j] = ok ? p.k : 0;
        }
        for (int kb0 = kb_begin; kb0 < kb_end; kb0 += BATCH) {
            uint4 xv[BATCH][2][2], yv[BATCH][2][J]; /* [k-block][half][row] */
            float sx[BATCH][2], sy[BATCH][J][2];    /* [k-block][x row r (1D2D: one)], [k-block][j][y row 2 t + i] */
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int kb = kb0 + u;
                const int end = kb < kb_end ? 0x7fffffff : 0; /* (past the slice: nothing) */
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int col = kb * 128 + 64 * h + 16 * t;
#pragma unroll
                    for (int r = 0; r < 2; ++r) xv[u][h][r] = load_row_16<!WGRAD>(x_row[r], col, min(x_limit[r], end));
#pragma unroll
                    for (int j = 0; j < J; ++j) yv[u][h][j] = load_row_16<false>(y_row[j], col, min(y_limit[j], end));
                }
                /* (rows past the end: scale zero, whatever their slot holds) */
                const bool in = kb < kb_end;
                const float *x_scales = p.x_scales + (WGRAD ? (int64_t)kb * p.x_scale_ld : kb);
                const float *y_scales = p.y_scales + (int64_t)kb * p.y_scale_ld;
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int row = x0 + g + 8 * r;
                    if (WGRAD) sx[u][r] = in && row < p.x_rows ? __ldg(x_scales + row) : 0.0f;
                    else sx[u][r] = in ? __ldg(x_scales + (int64_t)(x0 / 128) * p.x_scale_ld) : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < J; ++j)
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        const int row = y0 + 8 * j + 2 * t + i;
                        sy[u][j][i] = in && row < p.y_rows ? __ldg(y_scales + row) : 0.0f;
                    }
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                if (kb0 + u >= kb_end) break;
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    float blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const uint4 w0 = xv[u][h][0], w1 = xv[u][h][1], v = yv[u][h][j];
                        mma_e4m3(blk, w0.x, w1.x, w0.y, w1.y, v.x, v.y);
                        mma_e4m3(blk, w0.z, w1.z, w0.w, w1.w, v.z, v.w);
                    }
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[j][e] += (sx[u][e / 2] * sy[u][j][e % 2]) * blk[e];
                }
            }
        }
    }

    /* The slices' sum: this warp's partial, the CTA's k-warps in order, then the cluster's CTAs in rank order. */
    float *mine = part + warp * WARP_OUT;
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) mine[(g + 8 * (e / 2)) * TILE_Y + 8 * j + 2 * t + e % 2] = acc[j][e];
    __syncthreads();
    const int x_span = 16 * p.row_warps, outputs = x_span * TILE_Y; /* the CTA's, index i = x * TILE_Y + y */
    auto cta_sum = [&](int i) {
        const int r = i / WARP_OUT, within = i % WARP_OUT;
        float s = 0.0f;
        for (int q = 0; q < p.k_warps; ++q) s += part[(q * p.row_warps + r) * WARP_OUT + within];
        return s;
    };
    int first = 0, last = outputs;
    if (p.cluster > 1) {
        for (int i = threadIdx.x; i < outputs; i += SMALL_THREADS) total[i] = cta_sum(i);
        cluster_sync_all();
        first = (int)blockIdx.y * outputs / p.cluster;
        last = ((int)blockIdx.y + 1) * outputs / p.cluster;
    }
    /* output order o: D's contiguous index fastest (1D1D: y, 1D2D: x) */
    for (int o = first + threadIdx.x; o < last; o += SMALL_THREADS) {
        const int xl = WGRAD ? o / TILE_Y : o % x_span, yl = WGRAD ? o % TILE_Y : o / x_span;
        const int i = xl * TILE_Y + yl, x = x_cta + xl, y = y0 + yl;
        float v = 0.0f;
        if (p.cluster > 1)
            for (int q = 0; q < p.cluster; ++q) v += ld_cluster_f32(total + i, (uint32_t)q);
        else
            v = cta_sum(i);
        if (x >= p.x_rows || y >= p.y_rows) continue;
        const int64_t at = WGRAD ? (int64_t)x * p.ldd + y : (int64_t)y * p.ldd + x;
        if (WGRAD && p.c) v += p.c[(int64_t)x * p.ldc + y];
        if (p.d_bf16) static_cast<__nv_bfloat16 *>(p.d)[at] = __float2bfloat16_rn(v);
        else static_cast<float *>(p.d)[at] = v;
    }
    /* (a CTA's shared memory must outlive the other CTAs' reads of it) */
    if (p.cluster > 1) cluster_sync_all();
}

/* CTAs of an instance resident on one SM (once per instance). */
template <bool WGRAD, int J> int small_ctas_per_sm() {
    static int cached = 0;
    if (cached == 0) {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gemm_fp8_small_kernel<WGRAD, J>, SMALL_THREADS, 0) !=
                cudaSuccess ||
            n < 1) {
            cudaGetLastError();
            n = 1;
        }
        cached = n;
    }
    return cached;
}

/* The split of the k-blocks: the most slices (a power of two: k-warps of a
 * CTA first, then CTAs of a cluster) for which the grid is still one wave of
 * resident CTAs and no slice is empty. More slices: more loads in flight at
 * once and fewer rounds of them per warp, for the price of a sum in shared
 * memory. Returns the CTAs of the grid. */
int64_t plan_small_split(SmallArgs &s, int64_t resident_ctas) {
    const int64_t x16 = bfp8_ceil_div(s.x_rows, 16);
    auto ctas = [&](int split) {
        const int k_warps = split < SMALL_WARPS ? split : SMALL_WARPS;
        return bfp8_ceil_div(x16, SMALL_WARPS / k_warps) * s.y_tiles * (split / k_warps);
    };
    int split = 1;
    while (split * 2 <= SMALL_MAX_SPLIT && split * 2 <= s.num_k_blocks && ctas(split * 2) <= resident_ctas) split *= 2;
    s.k_warps = split < SMALL_WARPS ? split : SMALL_WARPS;
    s.row_warps = SMALL_WARPS / s.k_warps;
    s.cluster = split / s.k_warps;
    return ctas(split);
}

template <bool WGRAD, int J>
bfp8_status launch_small(const bfp8_context *ctx, SmallArgs &s, const char *what) {
    const int64_t resident = (int64_t)bfp8_cuda_state_of(ctx)->num_sms * small_ctas_per_sm<WGRAD, J>();
    s.y_tiles = (int)bfp8_ceil_div(s.y_rows, 8 * J);
    const int64_t ctas = plan_small_split(s, resident);
    const int64_t x_tiles = ctas / s.cluster;
    if (x_tiles > 0x7fffffff) return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: too many tiles", what);
    if (trace_enabled(ctx))
        fprintf(stderr, "blockfp8 %s small: x=%d y=%d k=%d tiles=%lld (%d x-warps, %d k-warps, cluster %d)\n", what,
                s.x_rows, s.y_rows, s.k, (long long)x_tiles, s.row_warps, s.k_warps, s.cluster);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)x_tiles, (unsigned)s.cluster, 1);
    cfg.blockDim = dim3(SMALL_THREADS, 1, 1);
    cfg.stream = bfp8_stream_of(ctx);
    /* a cluster along K; a programmatic dependent launch (BFP8_OPTION_GEMM_PDL) */
    cudaLaunchAttribute attr[2];
    cfg.attrs = attr;
    if (s.cluster > 1) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attr[cfg.numAttrs++].val.clusterDim = {1u, (unsigned)s.cluster, 1u};
    }
    if (ctx->gemm_pdl) add_programmatic_dependent_launch(&cfg);
    BFP8_CUDA_TRY(cudaLaunchKernelEx(&cfg, gemm_fp8_small_kernel<WGRAD, J>, s));
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

} /* namespace */

/* The two operands' codes and scales: x first. */
static void set_operands(SmallArgs &s, const bfp8_qmatrix *x, const bfp8_qmatrix *y) {
    s.x = x->data;
    s.y = y->data;
    s.ldx = x->ld;
    s.ldy = y->ld;
    s.x_scales = x->scales;
    s.y_scales = y->scales;
    s.x_scale_ld = x->scale_ld;
    s.y_scale_ld = y->scale_ld;
}

/* The arguments of a call: operands x (its rows the outputs' columns) and y, D and its kind from p. */
static SmallArgs small_args(const bfp8_qmatrix *x, const bfp8_qmatrix *y, int64_t x_rows, int64_t y_rows,
                            const Params &p) {
    SmallArgs s = {};
    set_operands(s, x, y);
    s.d = p.d;
    s.ldd = p.ldd;
    s.d_bf16 = p.output_kind == OUTPUT_BF16;
    s.x_rows = (int)x_rows;
    s.y_rows = (int)y_rows;
    s.k = p.k;
    s.num_k_blocks = p.num_k_blocks;
    return s;
}

bfp8_status launch_small_1d2d(const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                              const Params &p) {
    SmallArgs s = small_args(b, a, p.n, p.m, p);
    if (p.m <= 8) return launch_small<false, 1>(ctx, s, "gemm 1d2d");
    return launch_small<false, 2>(ctx, s, "gemm 1d2d");
}

bfp8_status launch_small_1d1d(const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                              const Params &p) {
    SmallArgs s = small_args(a, b, p.m, p.n, p);
    s.c = p.output_kind == OUTPUT_F32_ACCUMULATE ? p.c : nullptr;
    s.ldc = p.ldc;
    return launch_small<true, SMALL_1D1D_J>(ctx, s, "gemm 1d1d");
}

} /* namespace bfp8_gemm */
