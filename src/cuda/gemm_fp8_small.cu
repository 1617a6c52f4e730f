/*
 * gemm_fp8_small.cu - the FP8 GEMMs of few rows or few tokens, where the
 * tensor-core kernels' tiles would leave most of the GPU idle and their
 * fixed cost (pipeline set-up, a scale operand) outweighs the work:
 *
 *   1D2D, M <= 16 rows of A (decode, tiny batches): memory-bound on B (the
 *        weight, N x K). Warps stream B once with 16-byte loads, B's rows
 *        as the 16-row side of mma.sync m16n8k32 (e4m3) and A's rows as its
 *        8-column side; each k-block's product is promoted into fp32 with
 *        its two scales. The grid spreads 64-row chunks of B over the SMs and
 *        splits K where there are few chunks; the last CTA of a chunk to
 *        finish adds the slices' partials in slice order (deterministic).
 *   1D1D, at most 32 tokens (wgrad of a tiny batch): D[N, K] = C + the sum
 *        of a few outer products, bound by writing D. fp32 FMAs on the CUDA
 *        cores from the fp8 codes staged as floats in shared memory, 4 x 4
 *        outputs per thread, promoted per 128-token block.
 *
 * The numerics are the recipe's (RECIPE.md section 4): every 128-wide
 * k-block's product is promoted into fp32 with its scales; the fp8 products
 * themselves are exact in fp32.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/gemm_fp8_host.h"

namespace bfp8_gemm {

namespace {

/* ------------------------------------------------------------------------ */
/* 1D2D with few rows                                                        */

constexpr int SMALL_1D2D_WARPS = 4;                             /* 16 rows of B each */
constexpr int SMALL_1D2D_THREADS = 32 * SMALL_1D2D_WARPS;
constexpr int SMALL_1D2D_CHUNK_ROWS = 16 * SMALL_1D2D_WARPS;    /* rows of B per CTA (half a scale block) */
constexpr int SMALL_1D2D_MAX_SLICES = 16;
/* The split's model, in k-blocks of one CTA's time: a CTA's fixed cost (its
 * first loads' latency), and what each slice adds (its partial, and its
 * share of the last CTA's sum). */
constexpr double SMALL_1D2D_CTA_COST = 2.0;
constexpr double SMALL_1D2D_SLICE_COST = 0.25;

struct Small1d2dArgs {
    const uint8_t *a, *b;
    int64_t lda, ldb;
    const float *a_scales, *b_scales; /* a: [kb * a_scale_ld + m]; b: [nb * b_scale_ld + kb] */
    int64_t a_scale_ld, b_scale_ld;
    void *d;
    int64_t ldd;
    int d_bf16;
    int m, n, k, num_k_blocks;
    int chunks;            /* 64-row chunks of B */
    int slices;            /* k-slices per chunk (gridDim.y) */
    int k_blocks_per_slice;
    float *partials;       /* slices > 1: per chunk and slice, m x 64 floats */
    unsigned *counters;    /* slices > 1: per chunk, slices done; back to 0 when summed */
};

/* 16 bytes of a row from byte `col` on, the bytes at or past `limit` zero
 * (the row's padding is never read as data; whole chunks past it not at all). */
__device__ __forceinline__ uint4 load_row_16(const uint8_t *row, int col, int limit, bool stream) {
    if (col >= limit) return make_uint4(0u, 0u, 0u, 0u);
    uint4 v;
    if (stream)
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

/* One warp: 16 rows of B (g and g + 8, g = lane / 4) against MG groups of 8
 * rows of A (row 8 j + g), a k-block as two halves of 64 bytes; lane t = lane
 * % 4 loads bytes 16 t .. 16 t + 15 of each half. The four bytes at 16 t + 4 q
 * play the mma's k = 4 t (q = 0) and 16 + 4 t (q = 1) of one mma and the same
 * of a second one (q = 2, 3): A and B permuted alike, the sum is the same.
 * Thread's outputs: acc[j][e] for B row g + 8 (e / 2), A row 8 j + 2 t + e % 2. */
template <int MG>
__global__ void __launch_bounds__(SMALL_1D2D_THREADS) gemm_fp8_1d2d_small_kernel(const Small1d2dArgs p) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int chunk = blockIdx.x, slice = blockIdx.y;
    const int warp_row = chunk * SMALL_1D2D_CHUNK_ROWS + warp * 16;
    const int kb_begin = slice * p.k_blocks_per_slice;
    const int kb_end = min(p.num_k_blocks, kb_begin + p.k_blocks_per_slice);

    float acc[MG][4];
#pragma unroll
    for (int j = 0; j < MG; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;

    if (warp_row < p.n) {
        const int rows_b[2] = {warp_row + g, warp_row + g + 8};
        const uint8_t *b_row[2];
        int b_limit[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const bool ok = rows_b[r] < p.n;
            b_row[r] = p.b + (int64_t)(ok ? rows_b[r] : 0) * p.ldb;
            b_limit[r] = ok ? p.k : 0;
        }
        const uint8_t *a_row[MG];
        int a_limit[MG];
#pragma unroll
        for (int j = 0; j < MG; ++j) {
            const bool ok = 8 * j + g < p.m;
            a_row[j] = p.a + (int64_t)(ok ? 8 * j + g : 0) * p.lda;
            a_limit[j] = ok ? p.k : 0;
        }
        const float *b_scales = p.b_scales + (int64_t)(warp_row / 128) * p.b_scale_ld;
        /* two k-blocks' loads in flight before their mma */
        for (int kb0 = kb_begin; kb0 < kb_end; kb0 += 2) {
            uint4 wb[2][2][2], xa[2][2][MG]; /* [k-block][half][row] */
#pragma unroll
            for (int u = 0; u < 2; ++u)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int col = (kb0 + u) * 128 + 64 * h + 16 * t;
                    const int end = kb0 + u < kb_end ? 0x7fffffff : 0; /* (past the slice: nothing) */
#pragma unroll
                    for (int r = 0; r < 2; ++r) wb[u][h][r] = load_row_16(b_row[r], col, min(b_limit[r], end), true);
#pragma unroll
                    for (int j = 0; j < MG; ++j) xa[u][h][j] = load_row_16(a_row[j], col, min(a_limit[j], end), false);
                }
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int kb = kb0 + u;
                if (kb >= kb_end) break;
                float blk[MG][4];
#pragma unroll
                for (int j = 0; j < MG; ++j) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) blk[j][e] = 0.0f;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const uint4 w0 = wb[u][h][0], w1 = wb[u][h][1], x = xa[u][h][j];
                        mma_e4m3(blk[j], w0.x, w1.x, w0.y, w1.y, x.x, x.y);
                        mma_e4m3(blk[j], w0.z, w1.z, w0.w, w1.w, x.z, x.w);
                    }
                }
                const float sb = __ldg(b_scales + kb);
                const float *sa = p.a_scales + (int64_t)kb * p.a_scale_ld;
#pragma unroll
                for (int j = 0; j < MG; ++j) {
                    const int m0 = 8 * j + 2 * t;
                    /* (rows past M: zero, whatever their scale slot holds) */
                    const float s0 = m0 < p.m ? __ldg(sa + m0) * sb : 0.0f;
                    const float s1 = m0 + 1 < p.m ? __ldg(sa + m0 + 1) * sb : 0.0f;
                    acc[j][0] += s0 * blk[j][0];
                    acc[j][1] += s1 * blk[j][1];
                    acc[j][2] += s0 * blk[j][2];
                    acc[j][3] += s1 * blk[j][3];
                }
            }
        }
    }

    /* Split: this slice's partial out, then the chunk's last CTA sums all in slice order. */
    if (p.slices > 1) {
        __shared__ unsigned last;
        float *mine = p.partials + ((int64_t)chunk * p.slices + slice) * p.m * SMALL_1D2D_CHUNK_ROWS;
#pragma unroll
        for (int j = 0; j < MG; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int m = 8 * j + 2 * t + e % 2, r = warp * 16 + g + 8 * (e / 2);
                if (m < p.m) __stcg(mine + m * SMALL_1D2D_CHUNK_ROWS + r, acc[j][e]);
            }
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(p.counters + chunk, 1u) == (unsigned)p.slices - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        const float *all = p.partials + (int64_t)chunk * p.slices * p.m * SMALL_1D2D_CHUNK_ROWS;
#pragma unroll
        for (int j = 0; j < MG; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int m = 8 * j + 2 * t + e % 2, r = warp * 16 + g + 8 * (e / 2);
                if (m >= p.m) continue;
                float sum = 0.0f;
#pragma unroll 8
                for (int s = 0; s < SMALL_1D2D_MAX_SLICES; ++s)
                    if (s < p.slices) sum += __ldcg(all + ((int64_t)s * p.m + m) * SMALL_1D2D_CHUNK_ROWS + r);
                acc[j][e] = sum;
            }
        if (threadIdx.x == 0) p.counters[chunk] = 0u;
    }
#pragma unroll
    for (int j = 0; j < MG; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int m = 8 * j + 2 * t + e % 2, n = warp_row + g + 8 * (e / 2);
            if (m >= p.m || n >= p.n) continue;
            if (p.d_bf16)
                static_cast<__nv_bfloat16 *>(p.d)[(int64_t)m * p.ldd + n] = __float2bfloat16_rn(acc[j][e]);
            else
                static_cast<float *>(p.d)[(int64_t)m * p.ldd + n] = acc[j][e];
        }
}

/* ------------------------------------------------------------------------ */
/* 1D1D with few tokens                                                      */

constexpr int SMALL_1D1D_THREADS = 256;
constexpr int SMALL_1D1D_TILE = 64;  /* 64 x 64 outputs per CTA, 4 x 4 per thread */
constexpr int SMALL_1D1D_STEP = 32;  /* tokens staged at a time */

struct Small1d1dArgs {
    const uint8_t *a, *b; /* a: rows x tokens, b: cols x tokens */
    int64_t lda, ldb;
    const float *a_scales, *b_scales; /* [kb * scale_ld + row] */
    int64_t a_scale_ld, b_scale_ld;
    const float *c; /* NULL: D = A . B^T */
    int64_t ldc;
    void *d;
    int64_t ldd;
    int d_bf16;
    int vector_io; /* D (and C) 16-byte aligned (8 for bf16), ld % 4 == 0: 4 outputs as one access */
    int rows, cols, tokens;
    int64_t col_tiles;
};

/* 4 fp8 codes of a row from token `tok` on (4-aligned), those at or past `end` zero, as floats in smem. */
__device__ __forceinline__ void stage_codes(float (*dst)[SMALL_1D1D_TILE], int r, const uint8_t *row, int tok,
                                            int step_tok, int end) {
    uint32_t w = 0u;
    if (row && tok < end) {
        w = *reinterpret_cast<const uint32_t *>(row + tok);
        const int valid = end - tok;
        if (valid < 4) w &= (1u << (8 * valid)) - 1u;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)(w >> (8 * i) & 0xffu), __NV_E4M3);
        dst[step_tok + i][r] = __half2float(__half(h));
    }
}

__global__ void __launch_bounds__(SMALL_1D1D_THREADS) gemm_fp8_1d1d_small_kernel(const Small1d1dArgs p) {
    __shared__ __align__(16) float a_tile[SMALL_1D1D_STEP][SMALL_1D1D_TILE];
    __shared__ __align__(16) float b_tile[SMALL_1D1D_STEP][SMALL_1D1D_TILE];
    const int64_t tile = blockIdx.x;
    const int row0 = (int)(tile / p.col_tiles) * SMALL_1D1D_TILE, col0 = (int)(tile % p.col_tiles) * SMALL_1D1D_TILE;
    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;

    float total[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) total[i][j] = 0.0f;

    /* staging: thread -> (row or column r of the tile, 4 tokens q) */
    const int stage_r = threadIdx.x % SMALL_1D1D_TILE, stage_q = threadIdx.x / SMALL_1D1D_TILE; /* q: 0..3, +4 */
    const uint8_t *a_row = row0 + stage_r < p.rows ? p.a + (int64_t)(row0 + stage_r) * p.lda : nullptr;
    const uint8_t *b_row = col0 + stage_r < p.cols ? p.b + (int64_t)(col0 + stage_r) * p.ldb : nullptr;
    const int num_k_blocks = (p.tokens + 127) / 128;
    for (int kb = 0; kb < num_k_blocks; ++kb) {
        const int block_end = min(p.tokens, kb * 128 + 128);
        float blk[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) blk[i][j] = 0.0f;
        for (int t0 = kb * 128; t0 < block_end; t0 += SMALL_1D1D_STEP) {
            __syncthreads(); /* (the previous step's reads) */
#pragma unroll
            for (int q = stage_q; q < SMALL_1D1D_STEP / 4; q += SMALL_1D1D_THREADS / SMALL_1D1D_TILE) {
                stage_codes(a_tile, stage_r, a_row, t0 + 4 * q, 4 * q, block_end);
                stage_codes(b_tile, stage_r, b_row, t0 + 4 * q, 4 * q, block_end);
            }
            __syncthreads();
            const int steps = min(SMALL_1D1D_STEP, block_end - t0);
#pragma unroll 4
            for (int s = 0; s < steps; ++s) {
                const float4 av = *reinterpret_cast<const float4 *>(&a_tile[s][4 * tr]);
                const float4 bv = *reinterpret_cast<const float4 *>(&b_tile[s][4 * tc]);
                const float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) blk[i][j] = fmaf(ar[i], br[j], blk[i][j]);
            }
        }
        float sa[4], sb[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = row0 + 4 * tr + i, c = col0 + 4 * tc + i;
            sa[i] = r < p.rows ? __ldg(p.a_scales + (int64_t)kb * p.a_scale_ld + r) : 0.0f;
            sb[i] = c < p.cols ? __ldg(p.b_scales + (int64_t)kb * p.b_scale_ld + c) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) total[i][j] += sa[i] * sb[j] * blk[i][j];
    }

    const int c0 = col0 + 4 * tc;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = row0 + 4 * tr + i;
        if (r >= p.rows) break;
        float v[4] = {total[i][0], total[i][1], total[i][2], total[i][3]};
        if (p.vector_io && c0 + 3 < p.cols) {
            if (p.c) {
                const float4 cv = __ldcs(reinterpret_cast<const float4 *>(p.c + (int64_t)r * p.ldc + c0));
                v[0] += cv.x, v[1] += cv.y, v[2] += cv.z, v[3] += cv.w;
            }
            if (p.d_bf16) {
                __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
                uint2 packed;
                memcpy(&packed.x, &lo, 4);
                memcpy(&packed.y, &hi, 4);
                __stcs(reinterpret_cast<uint2 *>(static_cast<__nv_bfloat16 *>(p.d) + (int64_t)r * p.ldd + c0), packed);
            } else {
                __stcs(reinterpret_cast<float4 *>(static_cast<float *>(p.d) + (int64_t)r * p.ldd + c0),
                       make_float4(v[0], v[1], v[2], v[3]));
            }
            continue;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (c0 + j >= p.cols) break;
            float x = v[j];
            if (p.c) x += p.c[(int64_t)r * p.ldc + c0 + j];
            if (p.d_bf16) static_cast<__nv_bfloat16 *>(p.d)[(int64_t)r * p.ldd + c0 + j] = __float2bfloat16_rn(x);
            else static_cast<float *>(p.d)[(int64_t)r * p.ldd + c0 + j] = x;
        }
    }
}

/* "small=0" in BFP8_GEMM_CONFIG: never these kernels; "small=1": wherever they can run. */
int forced_small() {
    const char *forced = getenv("BFP8_GEMM_CONFIG");
    const char *s = forced ? strstr(forced, "small=") : nullptr;
    return s ? (s[6] == '1' ? 1 : 0) : -1;
}

} /* namespace */

/* 1D2D: a few rows of A and a long K, where the tensor-core kernel's one row
 * of tiles (at least 128 rows, 1/8 of them used) streams B on few SMs. Where
 * the grid benchmark measured it ahead of that kernel on an H200 (CUDA
 * graphs): M <= 8 with K >= 4096 (up to 1.7x cuBLASLt), and M = 1 with
 * K >= 1024; with a short K its split and fixed cost lose (M = 16, K = 256:
 * 7.4 us against 3.2 for cuBLASLt). small=1 forces it for M <= 16. */
bool small_1d2d_applies(int m, int64_t k) {
    if (m > SMALL_1D2D_MAX_M) return false;
    const int forced = forced_small();
    if (forced != -1) return forced == 1;
    return (m <= 8 && k >= 4096) || (m == 1 && k >= 1024);
}

/* 1D1D: up to 16 tokens, where writing D bounds the time (each output's 16
 * FMAs against its 8 bytes of C and D); at 32 tokens its FMAs lose to the
 * tensor cores on large outputs (N = 1024, K = 7168: 30.7 us against 14.9
 * for cuBLASLt). small=1 forces it for any count. */
bool small_1d1d_applies(int tokens) {
    const int forced = forced_small();
    return forced == 1 || (forced != 0 && tokens <= SMALL_1D1D_MAX_TOKENS);
}

/* CTAs of the small 1D2D kernel resident on one SM (once per instance). */
template <int MG> int small_1d2d_ctas_per_sm() {
    static int cached = 0;
    if (cached == 0) {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gemm_fp8_1d2d_small_kernel<MG>, SMALL_1D2D_THREADS,
                                                          0) != cudaSuccess || n < 1) {
            cudaGetLastError();
            n = 1;
        }
        cached = n;
    }
    return cached;
}

/* The k-slices per chunk (at most SMALL_1D2D_MAX_SLICES, none empty) that
 * minimise waves of resident CTAs x the time of one CTA's k-blocks, plus the
 * cost of the slices. */
int small_1d2d_slices(int chunks, int num_k_blocks, int64_t resident) {
    int best = 1;
    double best_time = INFINITY;
    for (int s = 1; s <= SMALL_1D2D_MAX_SLICES && s <= num_k_blocks; ++s) {
        const int per = (int)bfp8_ceil_div(num_k_blocks, s);
        if (bfp8_ceil_div(num_k_blocks, per) != s) continue; /* (the same as fewer slices) */
        const double waves = (double)bfp8_ceil_div((int64_t)chunks * s, resident);
        const double time = waves * (per + SMALL_1D2D_CTA_COST) + (s > 1 ? SMALL_1D2D_SLICE_COST * s : 0.0);
        if (time < best_time * (1.0 - 1e-9)) {
            best_time = time;
            best = s;
        }
    }
    return best;
}

/* The two operands' codes and scales into either kernel's arguments. */
template <class Args> void set_operands(Args &s, const bfp8_qmatrix *a, const bfp8_qmatrix *b) {
    s.a = a->data;
    s.b = b->data;
    s.lda = a->ld;
    s.ldb = b->ld;
    s.a_scales = a->scales;
    s.b_scales = b->scales;
    s.a_scale_ld = a->scale_ld;
    s.b_scale_ld = b->scale_ld;
}

/* The slices of small_1d2d_slices; 1 where the split exchange cannot be had
 * (inside a graph capture before any split) or is too small. */
bfp8_status launch_small_1d2d(const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                              const Params &p) {
    Small1d2dArgs s;
    set_operands(s, a, b);
    s.d = p.d;
    s.ldd = p.ldd;
    s.d_bf16 = p.output_kind == OUTPUT_BF16;
    s.m = p.m;
    s.n = p.n;
    s.k = p.k;
    s.num_k_blocks = p.num_k_blocks;
    s.chunks = (int)bfp8_ceil_div(p.n, SMALL_1D2D_CHUNK_ROWS);
    s.partials = nullptr;
    s.counters = nullptr;
    const int64_t resident = (int64_t)bfp8_cuda_state_of(ctx)->num_sms *
                             (p.m <= 8 ? small_1d2d_ctas_per_sm<1>() : small_1d2d_ctas_per_sm<2>());
    int slices = small_1d2d_slices(s.chunks, p.num_k_blocks, resident);
    if (slices > 1) {
        const SplitWorkspace ws = split_workspace(ctx);
        if (!ws.counters || s.chunks > split_workspace_counters(ctx) ||
            (int64_t)s.chunks * slices * p.m * SMALL_1D2D_CHUNK_ROWS > split_workspace_floats(ctx))
            slices = 1;
        s.partials = ws.partials;
        s.counters = ws.counters;
    }
    if (slices < 1) slices = 1;
    s.k_blocks_per_slice = (int)bfp8_ceil_div(p.num_k_blocks, slices);
    s.slices = (int)bfp8_ceil_div(p.num_k_blocks, s.k_blocks_per_slice);
    if (s.chunks > 0x7fffffff / 2) return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_gemm_1d2d: N too large");
    if (trace_enabled())
        fprintf(stderr, "blockfp8 gemm 1d2d small: M=%d N=%d K=%d chunks=%d slices=%d of %d k-blocks\n", p.m, p.n,
                p.k, s.chunks, s.slices, s.k_blocks_per_slice);
    const dim3 grid((unsigned)s.chunks, (unsigned)s.slices);
    if (p.m <= 8)
        gemm_fp8_1d2d_small_kernel<1><<<grid, SMALL_1D2D_THREADS, 0, bfp8_stream_of(ctx)>>>(s);
    else
        gemm_fp8_1d2d_small_kernel<2><<<grid, SMALL_1D2D_THREADS, 0, bfp8_stream_of(ctx)>>>(s);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

bfp8_status launch_small_1d1d(const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                              const Params &p) {
    Small1d1dArgs s;
    set_operands(s, a, b);
    s.c = p.output_kind == OUTPUT_F32_ACCUMULATE ? p.c : nullptr;
    s.ldc = p.ldc;
    s.d = p.d;
    s.ldd = p.ldd;
    s.d_bf16 = p.output_kind == OUTPUT_BF16;
    const uintptr_t align = s.d_bf16 ? 8 : 16;
    s.vector_io = (uintptr_t)p.d % align == 0 && p.ldd % 4 == 0 &&
                  (!s.c || ((uintptr_t)s.c % 16 == 0 && p.ldc % 4 == 0));
    s.rows = p.m;
    s.cols = p.n;
    s.tokens = p.k;
    s.col_tiles = bfp8_ceil_div(p.n, SMALL_1D1D_TILE);
    const int64_t tiles = bfp8_ceil_div(p.m, SMALL_1D1D_TILE) * s.col_tiles;
    if (tiles > 0x7fffffff) return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_gemm_1d1d: too many tiles");
    if (trace_enabled())
        fprintf(stderr, "blockfp8 gemm 1d1d small: N=%d K=%d tokens=%d tiles=%lld\n", p.m, p.n, p.k,
                (long long)tiles);
    gemm_fp8_1d1d_small_kernel<<<(unsigned)tiles, SMALL_1D1D_THREADS, 0, bfp8_stream_of(ctx)>>>(s);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

} /* namespace bfp8_gemm */
