/*
 * flash_attention.cu - causal multi-head attention without stored
 * probabilities (model_cuda_set_flash_attention, `--flash-attention`): the
 * products on the tensor cores in bf16 (mma.sync m16n8k16, fp32
 * accumulation), the softmax online, the way FlashAttention-2 does it.
 *
 * Same arguments and layouts as attention_forward_cuda / _backward_cuda
 * (attention.h): qkv is fp32, per token q | k | v with head h at h * head_dim
 * of each; out and dqkv fp32. What the backward needs of the forward goes
 * into the layer's `probs` buffer instead of the probabilities:
 *   probs[0, B*H*T)              LSE: log2 of each query row's softmax sum,
 *                                in units of log2 (scores scaled by log2 e)
 *   probs[B*H*T, B*H*T + B*T*dim) a copy of out (O, for rowsum(dO * O))
 * (model_create sizes the buffer for this when flash attention is on).
 * The scratch (flash_attention_scratch_floats) holds rowsum(dO * O) per query
 * and head and the bf16 copies below.
 *
 * Kernels (head_dim D = 64 or 128):
 *   to bf16     q, k, v (and, for the backward, dO) rounded to bf16 into
 *               head-major copies [batch][heads][seq][D] in the scratch, so
 *               every tile below is a contiguous block for cp.async
 *   forward     a CTA per (128 queries, head, sequence), 4 warps of 32 rows
 *               (two 16-row blocks sharing every K and V fragment): the keys
 *               up to the diagonal in double-buffered stages of 64 rows,
 *               S = Q K^T, running max and sum, O += P V; writes O, its copy
 *               and the LSE
 *   dsum        rowsum(dO * O) per (token, head), one warp each
 *   dK, dV      a CTA per (128 keys, head, sequence), 8 warps of 16 keys,
 *               the queries from the diagonal on in stages of 64 (each used
 *               in two halves of 32, for registers): P^T from S^T and the
 *               LSE, dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - dsum),
 *               dK += dS^T Q
 *   dQ          a CTA per (128 queries, head, sequence), 4 warps of 32 rows
 *               as in the forward, the keys up to the diagonal in stages of
 *               32: P, dP = dO V^T, dS, dQ += dS K
 * Products are mma.sync m16n8k16 (bf16 in, fp32 accumulation) on fragments
 * read with ldmatrix (.trans where the tile is stored contraction-major);
 * shared rows are padded by 16 bytes, so the fragment reads are free of bank
 * conflicts. Warps whose rows see none of a stage's keys (or queries) skip
 * it. No atomics: every output element is summed by one thread in a fixed
 * order, so the results repeat bit for bit (the trainer's resume depends on
 * it).
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "model/cuda/model_cuda_common.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

constexpr int kPad = 8;             /* bf16 of padding per shared row: conflict-free ldmatrix */
constexpr int kBlockQ = 128;        /* queries per CTA: forward, dQ (8 warps of 16) */
constexpr int kBlockKV = 128;       /* keys per CTA: dK, dV (8 warps of 16) */
constexpr int kStep = 64;           /* keys (forward, dQ) or queries (dK, dV) per pipeline stage */
constexpr int kThreads = 256;
constexpr float kLog2e = 1.4426950408889634f;

bool g_flash = false;

template <int D> __host__ __device__ constexpr int ld() { return D + kPad; }

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const uint16_t *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
/* A fragment (16 x 16: rows row0.., contraction k0..) of a row-major tile. */
template <int D>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const uint16_t *s, int row0, int k0, int lane) {
    ldsm_x4(a, s + (row0 + lane % 16) * ld<D>() + k0 + (lane / 16) * 8);
}
/* B fragments of two 8-column tiles (columns n0.. and n0+8.., contraction
 * k0..) of a tile stored with the columns as rows, element (k, n) at
 * s[n * ld + k]: b[0], b[1] for n0, b[2], b[3] for n0 + 8. */
template <int D>
__device__ __forceinline__ void frag_b_nk(uint32_t (&b)[4], const uint16_t *s, int n0, int k0, int lane) {
    ldsm_x4(b, s + (n0 + lane % 8 + (lane / 16) * 8) * ld<D>() + k0 + ((lane / 8) % 2) * 8);
}
/* The same from a tile stored with the contraction as rows, (k, n) at s[k * ld + n]. */
template <int D>
__device__ __forceinline__ void frag_b_kn(uint32_t (&b)[4], const uint16_t *s, int n0, int k0, int lane) {
    ldsm_x4_trans(b, s + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * ld<D>() + n0 + (lane / 16) * 8);
}
/* Accumulators of two adjacent 16 x 8 tiles as the A fragment of the next
 * product (the contraction over those 16 columns). */
__device__ __forceinline__ void acc_as_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
    a[0] = pack_bf16(lo[0], lo[1]);
    a[1] = pack_bf16(lo[2], lo[3]);
    a[2] = pack_bf16(hi[0], hi[1]);
    a[3] = pack_bf16(hi[2], hi[3]);
}

/* acc (16 rows x D, in tiles of 8 columns) += a (16 x 16) times the 16 x D
 * slice at contraction rows k0.. of a tile stored [k][n]. */
template <int D>
__device__ __forceinline__ void mma_rows_by_tile(float (&acc)[D / 8][4], const uint32_t (&a)[4],
                                                 const uint16_t *kn_tile, int k0, int lane) {
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
        uint32_t bb[4];
        frag_b_kn<D>(bb, kn_tile, n * 8, k0, lane);
        mma_bf16(acc[n], a, bb[0], bb[1]);
        mma_bf16(acc[n + 1], a, bb[2], bb[3]);
    }
}
/* s (16 rows x 8 NT columns) += rows row0.. of a_tile times rows n0.. of
 * nk_tile transposed, over all D: scores, or dP from dO and V. */
template <int D, int NT>
__device__ __forceinline__ void mma_rows_by_rows(float (&s)[NT][4], const uint16_t *a_tile, int row0,
                                                 const uint16_t *nk_tile, int n0, int lane) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        frag_a<D>(a, a_tile, row0, kk * 16, lane);
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            uint32_t bb[4];
            frag_b_nk<D>(bb, nk_tile, n0 + j * 8, kk * 16, lane);
            mma_bf16(s[j], a, bb[0], bb[1]);
            mma_bf16(s[j + 1], a, bb[2], bb[3]);
        }
    }
}
template <int N> __device__ __forceinline__ void zero(float (&x)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i) x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
}
/* Row r (0: g, 1: g + 8) of a 16 x D accumulator, times scale, to dst[0..D). */
template <int D>
__device__ __forceinline__ void store_row(float *dst, const float (&acc)[D / 8][4], int r, float scale, int t) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float2 *>(dst + n * 8 + 2 * t) =
            make_float2(acc[n][2 * r] * scale, acc[n][2 * r + 1] * scale);
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
/* rows [r0, r0 + ROWS) of one head's [seq][D] bf16 matrix into a [ROWS][D +
 * kPad] tile, rows past seq zero-filled. */
template <int ROWS, int D, int NT = kThreads>
__device__ __forceinline__ void load_async(uint16_t *dst, const uint16_t *head, int r0, int seq) {
    constexpr int kChunks = ROWS * D / 8;
    for (int i = threadIdx.x; i < kChunks; i += NT) {
        const int r = i / (D / 8), c = (i % (D / 8)) * 8;
        const bool valid = r0 + r < seq;
        cp_async16(dst + r * ld<D>() + c, head + (int64_t)(valid ? r0 + r : 0) * D + c, valid);
    }
}

/* Keys and values of stage kb (in buffer kb % 2 of ks, vs) are in shared
 * memory for every thread; those of stage kb + 1 are on their way into the
 * other buffer (the caller syncs again before that buffer is reused). */
template <int D, int NT = kThreads, int STEP = kStep>
__device__ __forceinline__ void key_stage_ready(uint16_t *ks, uint16_t *vs, const uint16_t *k_head,
                                                const uint16_t *v_head, int kb, int steps, int seq) {
    if (kb + 1 < steps) {
        const int next = (kb + 1) & 1;
        load_async<STEP, D, NT>(ks + next * STEP * ld<D>(), k_head, (kb + 1) * STEP, seq);
        load_async<STEP, D, NT>(vs + next * STEP * ld<D>(), v_head, (kb + 1) * STEP, seq);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
    __syncthreads();
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* ------------------------------------------------------------------------ */
/* bf16 copies, head-major: [batch][heads][seq][D]                           */

/* q, k, v of qkv (per token q | k | v, each heads x D) into q16, k16, v16. */
__global__ void qkv_to_heads_kernel(uint16_t *q16, uint16_t *k16, uint16_t *v16, const float *qkv, int64_t tokens,
                                    int seq, int heads, int head_dim) {
    const int64_t dim = (int64_t)heads * head_dim, groups = tokens * 3 * dim / 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = i * 8, token = e / (3 * dim), col = e % (3 * dim);
        const int which = (int)(col / dim), h = (int)((col % dim) / head_dim), d = (int)(col % head_dim);
        const float4 a = *reinterpret_cast<const float4 *>(qkv + e), b = *reinterpret_cast<const float4 *>(qkv + e + 4);
        const int64_t bi = token / seq, t = token % seq;
        uint16_t *dst = (which == 0 ? q16 : which == 1 ? k16 : v16) + ((bi * heads + h) * seq + t) * head_dim + d;
        *reinterpret_cast<uint4 *>(dst) = make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y),
                                                     pack_bf16(b.z, b.w));
    }
}
/* x (per token heads x D) into x16. */
__global__ void rows_to_heads_kernel(uint16_t *x16, const float *x, int64_t tokens, int seq, int heads, int head_dim) {
    const int64_t dim = (int64_t)heads * head_dim, groups = tokens * dim / 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = i * 8, token = e / dim, col = e % dim;
        const int h = (int)(col / head_dim), d = (int)(col % head_dim);
        const float4 a = *reinterpret_cast<const float4 *>(x + e), b = *reinterpret_cast<const float4 *>(x + e + 4);
        const int64_t bi = token / seq, t = token % seq;
        *reinterpret_cast<uint4 *>(x16 + ((bi * heads + h) * seq + t) * head_dim + d) =
            make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
    }
}

/* ------------------------------------------------------------------------ */
/* Forward: a CTA per (128 queries, head, sequence), keys in stages of 64    */

/* Each warp owns 32 query rows as two 16-row blocks that share every K and
 * V fragment it reads (half the ldmatrix traffic per product of 16-row
 * warps: ncu of those showed a third of all stalls waiting on ldmatrix), so
 * a CTA is 4 warps and two CTAs share an SM (2 x 104 KB of shared memory).
 * Every element sees the same products, in the same order, as with 16-row
 * warps, so the same bits. */
constexpr int kPairThreads = kBlockQ; /* 128 queries, 32 a warp: 4 warps (the forward and dQ) */

/* s[b] (16 rows x 8 NT columns, rows row0 + 16 b..) += rows of a_tile times
 * rows n0.. of nk_tile transposed, over all D, for both row blocks b. */
template <int D, int NT>
__device__ __forceinline__ void mma_two_blocks_by_rows(float (&s)[2][NT][4], const uint16_t *a_tile, int row0,
                                                       const uint16_t *nk_tile, int n0, int lane) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a0[4], a1[4];
        frag_a<D>(a0, a_tile, row0, kk * 16, lane);
        frag_a<D>(a1, a_tile, row0 + 16, kk * 16, lane);
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            uint32_t bb[4];
            frag_b_nk<D>(bb, nk_tile, n0 + j * 8, kk * 16, lane);
            mma_bf16(s[0][j], a0, bb[0], bb[1]);
            mma_bf16(s[0][j + 1], a0, bb[2], bb[3]);
            mma_bf16(s[1][j], a1, bb[0], bb[1]);
            mma_bf16(s[1][j + 1], a1, bb[2], bb[3]);
        }
    }
}

/* acc[b] (16 rows x D) += the A fragment of block b (16 x 16) times the 16 x D
 * slice at contraction rows k0.. of a tile stored [k][n], for both blocks b,
 * every B fragment serving both: O += P V, or dQ += dS K. */
template <int D>
__device__ __forceinline__ void mma_two_blocks_by_tile(float (&acc)[2][D / 8][4], const uint32_t (&a0)[4],
                                                       const uint32_t (&a1)[4], const uint16_t *kn_tile, int k0,
                                                       int lane) {
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
        uint32_t bb[4];
        frag_b_kn<D>(bb, kn_tile, n * 8, k0, lane);
        mma_bf16(acc[0][n], a0, bb[0], bb[1]);
        mma_bf16(acc[0][n + 1], a0, bb[2], bb[3]);
        mma_bf16(acc[1][n], a1, bb[0], bb[1]);
        mma_bf16(acc[1][n + 1], a1, bb[2], bb[3]);
    }
}

template <int D>
__global__ void __launch_bounds__(kPairThreads, 2) flash_forward_kernel(float *out, float *lse, float *o_copy,
                                                                        const uint16_t *q16, const uint16_t *k16,
                                                                        const uint16_t *v16, int seq, int heads,
                                                                        float scale_log2) {
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *const qs = smem, *const ks = qs + kBlockQ * ld<D>(), *const vs = ks + 2 * kStep * ld<D>();
    const int qb = gridDim.x - 1 - blockIdx.x; /* the longest rows of keys first */
    const int h = blockIdx.y, b = blockIdx.z, q0 = qb * kBlockQ;
    const int64_t head = ((int64_t)b * heads + h) * seq * D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int row0 = warp * 32;
    /* query of accumulator row r (0: g, 1: g + 8) of block bl */
    auto qrow = [&](int bl, int r) { return q0 + row0 + 16 * bl + g + 8 * r; };
    const int key_end = min(seq, q0 + kBlockQ), steps = (key_end + kStep - 1) / kStep;

    load_async<kBlockQ, D, kPairThreads>(qs, q16 + head, q0, seq);
    load_async<kStep, D, kPairThreads>(ks, k16 + head, 0, seq);
    load_async<kStep, D, kPairThreads>(vs, v16 + head, 0, seq);
    cp_async_commit();
    float o[2][D / 8][4];
    zero(o[0]);
    zero(o[1]);
    float m[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}}, l[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};

    for (int kb = 0; kb < steps; ++kb) {
        const int k0 = kb * kStep, stage = kb & 1;
        key_stage_ready<D, kPairThreads>(ks, vs, k16 + head, v16 + head, kb, steps, seq);
        const uint16_t *kst = ks + stage * kStep * ld<D>(), *vst = vs + stage * kStep * ld<D>();
        /* some key of the stage is visible to the warp's first block, and so
         * to its second: stages start at multiples of 64 and the blocks at
         * multiples of 16 (block 1 alone would see keys from row0 + 16..31
         * past q0, where no stage starts) */
        if (k0 <= q0 + row0 + 15) {
            float s[2][8][4];
            zero(s[0]);
            zero(s[1]);
            mma_two_blocks_by_rows<D, 8>(s, qs, row0, kst, 0, lane);
            const bool masked = k0 + kStep - 1 > q0 + row0; /* the diagonal (or keys past seq) cross the stage */
#pragma unroll
            for (int bl = 0; bl < 2; ++bl) {
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float v = s[bl][j][e] * scale_log2;
                        if (masked && k0 + j * 8 + 2 * t + (e & 1) > qrow(bl, e / 2)) v = -INFINITY;
                        s[bl][j][e] = v;
                        mx[e / 2] = fmaxf(mx[e / 2], v);
                    }
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float m_new = fmaxf(m[bl][r], quad_max(mx[r]));
                    const float ref = m_new == -INFINITY ? 0.0f : m_new; /* a row with no key yet */
                    const float alpha = exp2f(m[bl][r] - ref);
                    l[bl][r] *= alpha;
#pragma unroll
                    for (int n = 0; n < D / 8; ++n) {
                        o[bl][n][2 * r] *= alpha;
                        o[bl][n][2 * r + 1] *= alpha;
                    }
                    m[bl][r] = m_new;
                    mx[r] = ref;
                }
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float p = exp2f(s[bl][j][e] - mx[e / 2]);
                        s[bl][j][e] = p;
                        l[bl][e / 2] += p;
                    }
            }
            /* O += P V */
#pragma unroll
            for (int kk = 0; kk < kStep / 16; ++kk) {
                uint32_t a0[4], a1[4];
                acc_as_a(a0, s[0][2 * kk], s[0][2 * kk + 1]);
                acc_as_a(a1, s[1][2 * kk], s[1][2 * kk + 1]);
                mma_two_blocks_by_tile<D>(o, a0, a1, vst, kk * 16, lane);
            }
        }
        __syncthreads(); /* the stage is free for the load after next */
    }
    const int dim = heads * D;
#pragma unroll
    for (int bl = 0; bl < 2; ++bl)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int q = qrow(bl, r);
            const float sum = quad_sum(l[bl][r]);
            if (q >= seq) continue;
            const float inv = 1.0f / sum;
            const int64_t row = ((int64_t)b * seq + q) * dim + h * D;
            store_row<D>(out + row, o[bl], r, inv, t);
            store_row<D>(o_copy + row, o[bl], r, inv, t);
            if (t == 0) lse[((int64_t)b * heads + h) * seq + q] = m[bl][r] + log2f(sum);
        }
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */

/* dsum[(b * heads + h) * seq + t] = sum over the head's columns of dO * O. */
__global__ void flash_dsum_kernel(float *dsum, const float *dout, const float *o, int64_t tokens, int seq,
                                  int heads, int head_dim) {
    const int lane = threadIdx.x % 32;
    const int64_t rows = tokens * heads, warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
        const int64_t token = r / heads;
        const int h = (int)(r % heads);
        const float *a = dout + token * heads * head_dim + h * head_dim,
                    *c = o + token * heads * head_dim + h * head_dim;
        float s = 0.0f;
        for (int i = lane; i < head_dim; i += 32) s += a[i] * c[i];
        for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) {
            const int64_t b = token / seq, q = token % seq;
            dsum[(b * heads + h) * seq + q] = s;
        }
    }
}

/* dK, dV: a CTA per (128 keys, head, sequence), the queries from the
 * diagonal on in stages of 64, each used in two halves of 32 (registers). */
template <int D>
__global__ void __launch_bounds__(kThreads) flash_backward_dkv_kernel(float *dqkv, const uint16_t *q16,
                                                                      const uint16_t *k16, const uint16_t *v16,
                                                                      const uint16_t *do16, const float *lse,
                                                                      const float *dsum, int seq, int heads,
                                                                      float scale, float scale_log2) {
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *const ks = smem, *const vs = ks + kBlockKV * ld<D>(), *const qs = vs + kBlockKV * ld<D>();
    uint16_t *const dos = qs + 2 * kStep * ld<D>();
    float *const lse_s = reinterpret_cast<float *>(dos + 2 * kStep * ld<D>()), *const dsum_s = lse_s + 2 * kStep;
    const int kb = blockIdx.x; /* key block 0 meets every query: the longest first */
    const int h = blockIdx.y, b = blockIdx.z, k0 = kb * kBlockKV;
    const int64_t bh = (int64_t)b * heads + h, head = bh * seq * D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int row0 = warp * 16, krow[2] = {k0 + row0 + g, k0 + row0 + g + 8};
    const int first = k0 / kStep, steps = (seq + kStep - 1) / kStep - first;

    load_async<kBlockKV, D>(ks, k16 + head, k0, seq);
    load_async<kBlockKV, D>(vs, v16 + head, k0, seq);
    auto load_queries = [&](int i, int stage) {
        const int q0 = (first + i) * kStep;
        load_async<kStep, D>(qs + stage * kStep * ld<D>(), q16 + head, q0, seq);
        load_async<kStep, D>(dos + stage * kStep * ld<D>(), do16 + head, q0, seq);
        if (threadIdx.x < kStep) {
            const int q = q0 + threadIdx.x;
            lse_s[stage * kStep + threadIdx.x] = q < seq ? lse[bh * seq + q] : INFINITY; /* P = 0 past seq */
            dsum_s[stage * kStep + threadIdx.x] = q < seq ? dsum[bh * seq + q] : 0.0f;
        }
    };
    load_queries(0, 0);
    cp_async_commit();
    float dk[D / 8][4], dv[D / 8][4];
    zero(dk);
    zero(dv);

    for (int i = 0; i < steps; ++i) {
        const int stage = i & 1, q0 = (first + i) * kStep;
        if (i + 1 < steps) {
            load_queries(i + 1, stage ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const uint16_t *qst = qs + stage * kStep * ld<D>(), *dost = dos + stage * kStep * ld<D>();
        const float *lse_st = lse_s + stage * kStep, *dsum_st = dsum_s + stage * kStep;
        if (q0 + kStep - 1 >= k0 + row0) { /* some query of the stage sees this warp's keys */
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int qc = half * 32;
                float p[4][4], dp[4][4];
                zero(p);
                zero(dp);
                /* S^T = K Q^T and dP^T = V dO^T: 16 keys x 32 queries */
                mma_rows_by_rows<D>(p, ks, row0, qst, qc, lane);
                mma_rows_by_rows<D>(dp, vs, row0, dost, qc, lane);
                /* P^T, then dS^T = P^T (dP^T - dsum) in dp */
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int qi = qc + j * 8 + 2 * t + (e & 1);
                        const float pv = krow[e / 2] > q0 + qi ? 0.0f : exp2f(p[j][e] * scale_log2 - lse_st[qi]);
                        p[j][e] = pv;
                        dp[j][e] = pv * (dp[j][e] - dsum_st[qi]);
                    }
                /* dV += P^T dO, dK += dS^T Q over these 32 queries */
#pragma unroll
                for (int kk = 0; kk < 2; ++kk) {
                    uint32_t ap[4], as[4];
                    acc_as_a(ap, p[2 * kk], p[2 * kk + 1]);
                    acc_as_a(as, dp[2 * kk], dp[2 * kk + 1]);
                    mma_rows_by_tile<D>(dv, ap, dost, qc + kk * 16, lane);
                    mma_rows_by_tile<D>(dk, as, qst, qc + kk * 16, lane);
                }
            }
        }
        __syncthreads();
    }
    const int dim = heads * D;
    const int64_t ld3 = 3 * (int64_t)dim;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = krow[r];
        if (key >= seq) continue;
        float *row = dqkv + ((int64_t)b * seq + key) * ld3 + h * D;
        store_row<D>(row + dim, dk, r, scale, t);
        store_row<D>(row + 2 * dim, dv, r, 1.0f, t);
    }
}

/* dQ: a CTA per (128 queries, head, sequence), 4 warps of 32 query rows (two
 * 16-row blocks sharing every K and V fragment, as in the forward), keys in
 * stages of 32 so that two CTAs fit an SM (2 x 104 KB of shared memory).
 * Each block sees the keys, products and sums of the 16-row-warp form that
 * preceded it (stages of 64, bench/results/2026-12-02_h200_s16_flash_
 * attention.txt) in the same order: a stage runs when its 64-key pair would
 * have, keys past the diagonal included, so the bits are the same. */
constexpr int kDqStep = 32;

template <int D>
__global__ void __launch_bounds__(kPairThreads, D == 64 ? 3 : 2)
    flash_backward_dq_kernel(float *dqkv, const uint16_t *q16, const uint16_t *k16, const uint16_t *v16,
                             const uint16_t *do16, const float *lse, const float *dsum, int seq, int heads, float scale,
                             float scale_log2) {
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *const qs = smem, *const dos = qs + kBlockQ * ld<D>(), *const ks = dos + kBlockQ * ld<D>();
    uint16_t *const vs = ks + 2 * kDqStep * ld<D>();
    /* the rows' LSE and dsum, read from shared memory each stage (in registers they spill) */
    float *const lse_s = reinterpret_cast<float *>(vs + 2 * kDqStep * ld<D>()), *const dsum_s = lse_s + kBlockQ;
    const int qb = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, q0 = qb * kBlockQ;
    const int64_t bh = (int64_t)b * heads + h, head = bh * seq * D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int row0 = warp * 32;
    auto qrow = [&](int bl, int r) { return q0 + row0 + 16 * bl + g + 8 * r; };
    /* the keys of whole 64-key stages, as before: past key_end they are masked (zero) */
    const int key_end = min(seq, q0 + kBlockQ), steps = (key_end + kStep - 1) / kStep * (kStep / kDqStep);
    for (int i = threadIdx.x; i < kBlockQ; i += kPairThreads) {
        const bool valid = q0 + i < seq;
        lse_s[i] = valid ? lse[bh * seq + q0 + i] : INFINITY;
        dsum_s[i] = valid ? dsum[bh * seq + q0 + i] : 0.0f;
    } /* (read after the first stage's __syncthreads) */
    load_async<kBlockQ, D, kPairThreads>(qs, q16 + head, q0, seq);
    load_async<kBlockQ, D, kPairThreads>(dos, do16 + head, q0, seq);
    load_async<kDqStep, D, kPairThreads>(ks, k16 + head, 0, seq);
    load_async<kDqStep, D, kPairThreads>(vs, v16 + head, 0, seq);
    cp_async_commit();
    float dq[2][D / 8][4];
    zero(dq[0]);
    zero(dq[1]);

    for (int kb = 0; kb < steps; ++kb) {
        const int k0 = kb * kDqStep, stage = kb & 1;
        key_stage_ready<D, kPairThreads, kDqStep>(ks, vs, k16 + head, v16 + head, kb, steps, seq);
        const uint16_t *kst = ks + stage * kDqStep * ld<D>(), *vst = vs + stage * kDqStep * ld<D>();
        /* the 64-key stage holding k0 is visible to block 0, hence to block 1
         * (see the forward: no 64-key stage starts 16..31 rows past row0) */
        if ((k0 & ~(kStep - 1)) <= q0 + row0 + 15) {
            /* in halves of 16 keys (registers): S = Q K^T and dP = dO V^T for
             * 2 x 16 queries, dS, then dQ += dS K, every K and V fragment
             * serving both blocks */
#pragma unroll
            for (int hk = 0; hk < kDqStep / 16; ++hk) {
                float p[2][2][4], dp[2][2][4];
                zero(p[0]);
                zero(p[1]);
                zero(dp[0]);
                zero(dp[1]);
                mma_two_blocks_by_rows<D, 2>(p, qs, row0, kst, hk * 16, lane);
                mma_two_blocks_by_rows<D, 2>(dp, dos, row0, vst, hk * 16, lane);
#pragma unroll
                for (int bl = 0; bl < 2; ++bl)
#pragma unroll
                    for (int j = 0; j < 2; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int key = k0 + hk * 16 + j * 8 + 2 * t + (e & 1), q = qrow(bl, e / 2);
                            const float pv = key > q ? 0.0f : exp2f(p[bl][j][e] * scale_log2 - lse_s[q - q0]);
                            dp[bl][j][e] = pv * (dp[bl][j][e] - dsum_s[q - q0]);
                        }
                uint32_t a0[4], a1[4];
                acc_as_a(a0, dp[0][0], dp[0][1]);
                acc_as_a(a1, dp[1][0], dp[1][1]);
                mma_two_blocks_by_tile<D>(dq, a0, a1, kst, hk * 16, lane);
            }
        }
        __syncthreads();
    }
    const int dim = heads * D;
    const int64_t ld3 = 3 * (int64_t)dim;
#pragma unroll
    for (int bl = 0; bl < 2; ++bl)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int q = qrow(bl, r);
            if (q >= seq) continue;
            store_row<D>(dqkv + ((int64_t)b * seq + q) * ld3 + h * D, dq[bl], r, scale, t);
        }
}

template <int D> constexpr int forward_smem() { return (kBlockQ + 4 * kStep) * ld<D>() * 2; }
template <int D> constexpr int dkv_smem() { return (2 * kBlockKV + 4 * kStep) * ld<D>() * 2 + 4 * kStep * 4; }
template <int D> constexpr int dq_smem() { return (2 * kBlockQ + 4 * kDqStep) * ld<D>() * 2 + 2 * kBlockQ * 4; }

template <int D> bool set_smem_limits() {
    static bool done = false;
    if (done) return true;
    done = !failed(cudaFuncSetAttribute(flash_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        forward_smem<D>()),
                   "flash attention: shared memory (forward)") &&
           !failed(cudaFuncSetAttribute(flash_backward_dkv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        dkv_smem<D>()),
                   "flash attention: shared memory (dK, dV)") &&
           !failed(cudaFuncSetAttribute(flash_backward_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        dq_smem<D>()),
                   "flash attention: shared memory (dQ)");
    return done;
}

/* The scratch: rowsum(dO * O) (batch x heads x seq floats), then the bf16
 * copies q16, k16, v16, do16 (each batch x heads x seq x head_dim), 16-byte
 * aligned. */
struct scratch_parts {
    float *dsum;
    uint16_t *q16, *k16, *v16, *do16;
};
scratch_parts split_scratch(float *scratch, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
    const int64_t rows = batch * heads * seq, each = rows * head_dim;
    uint16_t *bf = reinterpret_cast<uint16_t *>(scratch + (rows + 63) / 64 * 64);
    return {scratch, bf, bf + each, bf + 2 * each, bf + 3 * each};
}

template <int D>
void forward(float *out, float *probs, float *scratch, const float *qkv, int64_t batch, int64_t seq, int64_t heads) {
    if (!set_smem_limits<D>()) return;
    const scratch_parts sp = split_scratch(scratch, batch, seq, heads, D);
    const int64_t tokens = batch * seq;
    qkv_to_heads_kernel<<<grid_for(tokens * 3 * heads * D / 8, 256), 256, 0, stream()>>>(sp.q16, sp.k16, sp.v16, qkv,
                                                                                       tokens, (int)seq, (int)heads, D);
    check_launch("flash attention: q, k, v to bf16");
    float *lse = probs, *o_copy = probs + batch * heads * seq;
    const dim3 grid((unsigned)((seq + kBlockQ - 1) / kBlockQ), (unsigned)heads, (unsigned)batch);
    const float scale_log2 = kLog2e / sqrtf((float)D);
    flash_forward_kernel<D><<<grid, kPairThreads, forward_smem<D>(), stream()>>>(
        out, lse, o_copy, sp.q16, sp.k16, sp.v16, (int)seq, (int)heads, scale_log2);
    check_launch("flash attention forward");
}

template <int D>
void backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *probs,
              int64_t batch, int64_t seq, int64_t heads) {
    if (!set_smem_limits<D>()) return;
    const scratch_parts sp = split_scratch(scratch, batch, seq, heads, D);
    const float *lse = probs, *o_copy = probs + batch * heads * seq;
    const int64_t tokens = batch * seq;
    qkv_to_heads_kernel<<<grid_for(tokens * 3 * heads * D / 8, 256), 256, 0, stream()>>>(sp.q16, sp.k16, sp.v16, qkv,
                                                                                       tokens, (int)seq, (int)heads, D);
    check_launch("flash attention: q, k, v to bf16");
    rows_to_heads_kernel<<<grid_for(tokens * heads * D / 8, 256), 256, 0, stream()>>>(sp.do16, dout, tokens, (int)seq,
                                                                                    (int)heads, D);
    check_launch("flash attention: dO to bf16");
    flash_dsum_kernel<<<grid_for(tokens * heads * 32, 256), 256, 0, stream()>>>(sp.dsum, dout, o_copy, tokens,
                                                                               (int)seq, (int)heads, D);
    check_launch("flash attention rowsum(dO * O)");
    const float scale = 1.0f / sqrtf((float)D), scale_log2 = kLog2e * scale;
    const dim3 grid_kv((unsigned)((seq + kBlockKV - 1) / kBlockKV), (unsigned)heads, (unsigned)batch);
    flash_backward_dkv_kernel<D><<<grid_kv, kThreads, dkv_smem<D>(), stream()>>>(
        dqkv, sp.q16, sp.k16, sp.v16, sp.do16, lse, sp.dsum, (int)seq, (int)heads, scale, scale_log2);
    check_launch("flash attention dK, dV");
    const dim3 grid_q((unsigned)((seq + kBlockQ - 1) / kBlockQ), (unsigned)heads, (unsigned)batch);
    flash_backward_dq_kernel<D><<<grid_q, kPairThreads, dq_smem<D>(), stream()>>>(
        dqkv, sp.q16, sp.k16, sp.v16, sp.do16, lse, sp.dsum, (int)seq, (int)heads, scale, scale_log2);
    check_launch("flash attention dQ");
}

} /* namespace */

extern "C" void model_cuda_set_flash_attention(int on) { g_flash = on != 0; }

extern "C" int model_cuda_flash_attention_supported(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

/* The flash path of attention_forward_cuda / _backward_cuda (attention_cuda.cu):
 * returns 0 when it does not apply (off, or another head size). */
int flash_attention_forward(float *out, float *probs, float *scratch, const float *qkv, int64_t batch, int64_t seq,
                            int64_t heads, int64_t head_dim) {
    if (!g_flash || (head_dim != 64 && head_dim != 128)) return 0;
    if (head_dim == 64)
        forward<64>(out, probs, scratch, qkv, batch, seq, heads);
    else
        forward<128>(out, probs, scratch, qkv, batch, seq, heads);
    return 1;
}

int flash_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *probs,
                             int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
    if (!g_flash || (head_dim != 64 && head_dim != 128)) return 0;
    if (head_dim == 64)
        backward<64>(dqkv, scratch, dout, qkv, probs, batch, seq, heads);
    else
        backward<128>(dqkv, scratch, dout, qkv, probs, batch, seq, heads);
    return 1;
}
