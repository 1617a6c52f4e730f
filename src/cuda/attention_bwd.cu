/*
 * attention_bwd.cu - the attention backward for sm_90a (bfp8_attention_backward):
 * dQ, dK, dV from Q, K, V, O, dO and the forward's LSE. Three launches:
 *
 *   prepare   per query row: lse2 = lse * log2(e) and delta = rowsum(dO * O)
 *             into the workspace, padded to whole query blocks (+inf and 0,
 *             so padded rows get P = 0); the dQ semaphores to 0
 *   main      a CTA per (128 keys, key/value head, sequence), dK and dV of its
 *             keys in registers for the whole run, in the order of bwd_unit:
 *               - warpgroup 0: warp 0 loads K and V once, then Q, dO, lse2,
 *                 delta of each query block in a 2-stage ring (TMA, bulk
 *                 copies); warp 1 adds each step's dQ into the workspace
 *                 (a bulk reduction from shared memory), in a fixed order
 *                 per query block;
 *               - warpgroups 1, 2: 64 keys each. S^T = K Q^T and dP^T = V dO^T
 *                 (wgmma, shared operands), P^T = exp2(S^T scale_log2 - lse2),
 *                 dS^T = P^T (dP^T - delta); dV += P^T dO and dK += dS^T Q with
 *                 P^T, dS^T as register A operands (dO, Q N-major); dS^T to
 *                 shared memory (double-buffered), then dQ = dS K (dS^T M-major,
 *                 K N-major), each warpgroup a 64 x 64 part of the block's dQ.
 *   finish    dq = scale * (the workspace's sums), bf16.
 *
 * Determinism: every dQ element is the fp32 sum of one term per key block,
 * added by the bulk reduction in L2 in key block order: key block n waits
 * until blocks 0 .. n-1 have added to the query block (a semaphore per query
 * block), and block 0 stores instead of adding, so the sums need no zeroing.
 * The CTA order (bwd_unit) starts the key blocks of a head in that order, and
 * each visits the query blocks from the last one down, so a key block meets
 * a query block after the lower ones, which started earlier, have left it:
 * the waits are short, and never on a CTA that has not started.
 */
#include "cuda/attention_common.cuh"
#include "cuda/hopper.cuh"

namespace bfp8_attn {

using namespace bfp8_sm90;

template <int D> struct BwdShape {
    static constexpr int BN = kBwdBlockK, BM = BwdBlock<D>::Q, CHUNKS = D / 64, STAGES = 2;
    static constexpr int KV_BYTES = BN * D * 2;    /* K (or V) */
    static constexpr int QS_BYTES = BM * D * 2;    /* one stage of Q (or dO) */
    static constexpr int DS_BYTES = BN * BM * 2;   /* dS^T: BM / 64 chunks of [BN keys][64 queries] */
    static constexpr int DQ_BYTES = BM * D * 4;    /* the step's dQ, f32 */
    static constexpr int K_OFF = 0, V_OFF = K_OFF + KV_BYTES;
    static constexpr int Q_OFF = V_OFF + KV_BYTES;
    static constexpr int DO_OFF = Q_OFF + STAGES * QS_BYTES;
    static constexpr int DS_OFF = DO_OFF + STAGES * QS_BYTES;
    static constexpr int DQ_OFF = DS_OFF + 2 * DS_BYTES; /* dS double-buffered */
    static constexpr int LSE_OFF = DQ_OFF + DQ_BYTES; /* per stage: lse2[BM], delta[BM] */
    static constexpr int BAR_OFF = LSE_OFF + STAGES * 2 * BM * 4;
    static constexpr int SMEM = BAR_OFF + 8 * (3 + 2 * STAGES) + 1024;
    static_assert(SMEM <= 227 * 1024, "shared memory");
};

template <int N> __device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1) attention_bwd_kernel(const __grid_constant__ BwdParams p) {
    using S = BwdShape<D>;
    constexpr int BN = S::BN, BM = S::BM;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    uint8_t *const sk = smem + S::K_OFF, *const sv = smem + S::V_OFF, *const sq = smem + S::Q_OFF;
    uint8_t *const sdo = smem + S::DO_OFF, *const sds = smem + S::DS_OFF;
    float *const sdq = reinterpret_cast<float *>(smem + S::DQ_OFF);
    float *const slse = reinterpret_cast<float *>(smem + S::LSE_OFF);
    uint64_t *const bars = reinterpret_cast<uint64_t *>(smem + S::BAR_OFF);
    uint64_t *const kv_full = bars, *const dq_full = bars + 1, *const dq_empty = bars + 2;
    uint64_t *const full = bars + 3, *const empty = full + S::STAGES;

    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        mbar_init(kv_full, 1);
        mbar_init(dq_full, 8); /* one arrive per math warp */
        mbar_init(dq_empty, 1);
        for (int s = 0; s < S::STAGES; ++s) {
            mbar_init(&full[s], 1 + 32); /* the copies' expected bytes, and warp 0's lane stores of lse2, delta */
            mbar_init(&empty[s], 256);   /* every math thread, after its last read of the stage */
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (wg == 0) {
        regs_decrease<kBwdProducerRegs>();
        const BwdUnit unit = bwd_unit(p, block_index_read());
        const int n_block = unit.n_block, b = unit.bhk / p.kv_heads, hk = unit.bhk % p.kv_heads;
        const int warp = threadIdx.x / 32, steps = p.group * bwd_steps_per_head(p, n_block, BM);
        if (warp == 0) { /* loads: lane 0 issues the tensor copies, every lane stores its share of lse2, delta */
            const int lane = threadIdx.x % 32;
            if (lane == 0) {
                tma_prefetch_descriptor(&p.q_map);
                tma_prefetch_descriptor(&p.do_map);
                mbar_arrive_expect_tx(kv_full, 2 * S::KV_BYTES);
#pragma unroll
                for (int c = 0; c < S::CHUNKS; ++c) {
                    tma_load_4d(sk + c * BN * 128, &p.k_map, kv_full, c * 64, hk, n_block * BN, b);
                    tma_load_4d(sv + c * BN * 128, &p.v_map, kv_full, c * 64, hk, n_block * BN, b);
                }
            }
            for (int it = 0; it < steps; ++it) {
                const BwdStep st = bwd_step(p, hk, n_block, BM, it);
                const int s = it % S::STAGES;
                mbar_wait(&empty[s], ((it / S::STAGES) & 1) ^ 1);
                if (lane == 0) {
                    mbar_arrive_expect_tx(&full[s], 2 * S::QS_BYTES);
#pragma unroll
                    for (int c = 0; c < S::CHUNKS; ++c) {
                        tma_load_4d(sq + s * S::QS_BYTES + c * BM * 128, &p.q_map, &full[s], c * 64, st.q_head,
                                    st.q_block * BM, b);
                        tma_load_4d(sdo + s * S::QS_BYTES + c * BM * 128, &p.do_map, &full[s], c * 64, st.q_head,
                                    st.q_block * BM, b);
                    }
                }
                const int64_t row = ((int64_t)b * p.heads + st.q_head) * p.seq_pad + (int64_t)st.q_block * BM;
                float *dst = slse + s * 2 * BM;
#pragma unroll
                for (int i = lane; i < BM; i += 32) {
                    dst[i] = p.lse2[row + i];
                    dst[BM + i] = p.delta[row + i];
                }
                mbar_arrive_at(smem_u32(&full[s]));
            }
        } else if (warp == 1) { /* dQ adds */
            for (int it = 0; it < steps; ++it) {
                const BwdStep st = bwd_step(p, hk, n_block, BM, it);
                const int64_t qb = ((int64_t)b * p.heads + st.q_head) * p.n_q_blocks + st.q_block;
                mbar_wait(dq_full, it & 1);
                if (threadIdx.x == 32) {
                    const int rank = bwd_dq_rank(p, n_block, st.q_block, BM);
                    /* wait for the key blocks before this one in the query block's order */
                    while (ld_acquire_gpu(&p.dq_sems[qb]) != (unsigned)rank) {
                    }
                    fence_proxy_async_global();
                    float *dst = p.dq_accum + qb * (BM * D);
                    if (rank == 0)
                        bulk_store(dst, sdq, S::DQ_BYTES);
                    else
                        bulk_reduce_add_f32(dst, sdq, S::DQ_BYTES);
                    bulk_commit_group();
                    bulk_wait_read_all();
                    mbar_arrive_at(smem_u32(dq_empty));
                    bulk_wait_all();
                    fence_proxy_async_global();
                    red_release_gpu_add(&p.dq_sems[qb], 1u);
                }
                __syncwarp();
            }
            if (threadIdx.x == 32) bulk_wait_all();
        }
        return;
    }

    /* ---- math warpgroups: keys [n_block * BN + 64 w, + 64) ---- */
    regs_increase<kBwdMathRegs>();
    const BwdUnit unit = bwd_unit(p, block_index_read());
    const int n_block = unit.n_block, b = unit.bhk / p.kv_heads, hk = unit.bhk % p.kv_heads;
    const int steps = p.group * bwd_steps_per_head(p, n_block, BM);
    const int w = wg - 1, lt = threadIdx.x % 128, warp = lt / 32, lane = lt % 32, t = lane % 4;
    const int key_first = n_block * BN + 64 * w;
    const int key0 = key_first + 16 * warp + lane / 4; /* this thread's keys: key0, key0 + 8 */

    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;
    mbar_wait(kv_full, 0);
    for (int it = 0; it < steps; ++it) {
        const BwdStep st = bwd_step(p, hk, n_block, BM, it);
        const int s = it % S::STAGES, q_first = st.q_block * BM;
        const uint8_t *qt = sq + s * S::QS_BYTES, *dot = sdo + s * S::QS_BYTES;
        const float *lse2 = slse + s * 2 * BM, *delta = lse2 + BM;
        mbar_wait(&full[s], (it / S::STAGES) & 1);

        /* S^T = K Q^T, dP^T = V dO^T: 64 keys x BM queries each */
        float sp[BM / 2], dp[BM / 2];
        fence_regs(sp);
        fence_regs(dp);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const int off = (kk / 4) * BN * 128 + 64 * w * 128 + (kk % 4) * 32;
            wgmma_ss<0, 0>(sp, desc_sw128(sk + off), desc_sw128(qt + (kk / 4) * BM * 128 + (kk % 4) * 32), kk > 0);
        }
        wgmma_commit();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const int off = (kk / 4) * BN * 128 + 64 * w * 128 + (kk % 4) * 32;
            wgmma_ss<0, 0>(dp, desc_sw128(sv + off), desc_sw128(dot + (kk / 4) * BM * 128 + (kk % 4) * 32), kk > 0);
        }
        wgmma_commit();
        fence_regs(sp);
        fence_regs(dp);

        wgmma_wait<1>();
        fence_regs(sp);
        /* P^T = exp2(S^T scale_log2 - lse2[q]), 0 where masked */
        const bool masked = key_first + 64 > p.seq || (p.causal && key_first + 63 > q_first);
#pragma unroll
        for (int jj = 0; jj < BM / 8; ++jj) {
            const float2 l2 = *reinterpret_cast<const float2 *>(lse2 + 8 * jj + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = exp2_approx(fmaf(sp[4 * jj + e], p.scale_log2, -((e & 1) ? l2.y : l2.x)));
                if (masked) {
                    const int key = key0 + 8 * (e >> 1), q = q_first + 8 * jj + 2 * t + (e & 1);
                    if (key >= p.seq || (p.causal && key > q)) x = 0.0f;
                }
                sp[4 * jj + e] = x;
            }
        }
        wgmma_wait<0>();
        fence_regs(dp);
        /* dS^T = P^T (dP^T - delta[q]); P^T and dS^T to bf16 A fragments */
        uint32_t pa[BM / 4], dsa[BM / 4];
#pragma unroll
        for (int jj = 0; jj < BM / 8; ++jj) {
            const float2 dl = *reinterpret_cast<const float2 *>(delta + 8 * jj + 2 * t);
            dsa[2 * jj] = pack_bf16(sp[4 * jj] * (dp[4 * jj] - dl.x), sp[4 * jj + 1] * (dp[4 * jj + 1] - dl.y));
            dsa[2 * jj + 1] =
                pack_bf16(sp[4 * jj + 2] * (dp[4 * jj + 2] - dl.x), sp[4 * jj + 3] * (dp[4 * jj + 3] - dl.y));
            pa[2 * jj] = pack_bf16(sp[4 * jj], sp[4 * jj + 1]);
            pa[2 * jj + 1] = pack_bf16(sp[4 * jj + 2], sp[4 * jj + 3]);
        }
        /* dS^T to shared memory (double-buffered), 128-byte swizzled: element
         * (key, q) of chunk q / 64 at key * 128 + ((q % 64) / 8 ^ key % 8) * 16 + (q % 8) * 2 */
        uint8_t *ds_buf = sds + (it & 1) * S::DS_BYTES;
#pragma unroll
        for (int jj = 0; jj < BM / 8; ++jj)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int key = 64 * w + 16 * warp + lane / 4 + 8 * r, q = 8 * jj + 2 * t;
                uint8_t *dst = ds_buf + (q / 64) * BN * 128 + key * 128 + ((((q % 64) / 8) ^ (key % 8)) * 16) +
                               (q % 8) * 2;
                *reinterpret_cast<uint32_t *>(dst) = dsa[2 * jj + r];
            }
        fence_proxy_async_shared();

        /* dV += P^T dO, dK += dS^T Q (contraction over the BM queries) */
        fence_regs(dv);
        fence_regs(dk);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) {
            const uint32_t a[4] = {pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3]};
            wgmma_rs<1>(dv, a, desc_sw128(dot + kk * 16 * 128, BM * 128), 1);
        }
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) {
            const uint32_t a[4] = {dsa[4 * kk], dsa[4 * kk + 1], dsa[4 * kk + 2], dsa[4 * kk + 3]};
            wgmma_rs<1>(dk, a, desc_sw128(qt + kk * 16 * 128, BM * 128), 1);
        }
        wgmma_commit();
        fence_regs(dv);
        fence_regs(dk);

        named_barrier_sync(kBarDsReady, 256);
        /* dQ (this warpgroup's 64 x 64: rows dq_row0.., columns dq_col0..) = dS K over the BN keys */
        const int dq_row0 = BM == 128 ? 64 * w : 0, dq_col0 = BM == 128 ? 0 : 64 * w;
        float dq[32];
        fence_regs(dq);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            wgmma_ss<1, 1>(dq, desc_sw128(ds_buf + (dq_row0 / 64) * BN * 128 + kk * 16 * 128),
                           desc_sw128(sk + (dq_col0 / 64) * BN * 128 + kk * 16 * 128), kk > 0);
        wgmma_commit();
        fence_regs(dq);
        wgmma_wait<0>();
        fence_regs(dq);
        fence_regs(dv);
        fence_regs(dk);
        mbar_arrive_at(smem_u32(&empty[s])); /* after this thread's reads of the stage (lse2, delta too) */
        /* the step's dQ to shared memory in thread order, for warp 1 of the producer */
        mbar_wait(dq_empty, (it & 1) ^ 1);
#pragma unroll
        for (int i = 0; i < 32; ++i) sdq[i * 256 + w * 128 + lt] = dq[i];
        fence_proxy_async_shared();
        __syncwarp();
        if (lane == 0) mbar_arrive_at(smem_u32(dq_full));
    }

    /* dK (scaled), dV of this thread's two keys */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = key0 + 8 * r;
        if (key >= p.seq) continue;
        const int64_t tok = (int64_t)b * p.seq + key;
        uint16_t *k_dst = p.dk + tok * p.dk_row_stride + hk * D + 2 * t;
        uint16_t *v_dst = p.dv + tok * p.dv_row_stride + hk * D + 2 * t;
#pragma unroll
        for (int jj = 0; jj < D / 8; ++jj) {
            *reinterpret_cast<uint32_t *>(k_dst + 8 * jj) =
                pack_bf16(dk[4 * jj + 2 * r] * p.scale, dk[4 * jj + 2 * r + 1] * p.scale);
            *reinterpret_cast<uint32_t *>(v_dst + 8 * jj) = pack_bf16(dv[4 * jj + 2 * r], dv[4 * jj + 2 * r + 1]);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* prepare and finish                                                        */

struct PrepParams {
    const uint16_t *o, *d_o;
    const float *lse;
    float *lse2, *delta;
    unsigned *dq_sems;
    int64_t o_row_stride, do_row_stride, sems;
    int seq, seq_pad, heads, head_dim, batch;
};

/* 8 threads per (sequence, head, padded row), 16-byte loads. */
__global__ void attention_bwd_prepare_kernel(const PrepParams p) {
    const int64_t rows = (int64_t)p.batch * p.heads * p.seq_pad;
    const int64_t gid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, row = gid / 8;
    const int part = (int)(gid % 8);
    const int64_t bh = row / p.seq_pad;
    const int tq = (int)(row % p.seq_pad), b = (int)(bh / p.heads), h = (int)(bh % p.heads);
    float acc = 0.0f;
    if (row < rows && tq < p.seq) {
        const int64_t tok = (int64_t)b * p.seq + tq;
        for (int c = part * 8; c < p.head_dim; c += 64) {
            const uint4 x = *reinterpret_cast<const uint4 *>(p.o + tok * p.o_row_stride + h * p.head_dim + c);
            const uint4 y = *reinterpret_cast<const uint4 *>(p.d_o + tok * p.do_row_stride + h * p.head_dim + c);
            const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc += __uint_as_float(xs[i] << 16) * __uint_as_float(ys[i] << 16);
                acc += __uint_as_float(xs[i] & 0xffff0000u) * __uint_as_float(ys[i] & 0xffff0000u);
            }
        }
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    if (row < rows && part == 0) {
        p.delta[row] = acc;
        p.lse2[row] = tq < p.seq ? p.lse[bh * p.seq + tq] * kLog2e : INFINITY;
    }
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = gid; i < p.sems; i += stride) p.dq_sems[i] = 0u;
}

struct FinishParams {
    const float *dq_accum;
    uint16_t *dq;
    int64_t dq_row_stride;
    int seq, heads, head_dim, block_q, n_q_blocks;
    int64_t pairs; /* batch * heads * n_q_blocks * block_q * head_dim / 2 */
    float scale;
};

/* One thread per pair of adjacent dQ columns: register pair (i, i + 1) of
 * math thread tw in a block's thread-ordered sums (see the main kernel). */
__global__ void attention_bwd_finish_kernel(const FinishParams p) {
    const int64_t gid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gid >= p.pairs) return;
    const int per_block = p.block_q * p.head_dim / 2;
    const int64_t blk = gid / per_block;
    const int within = (int)(gid % per_block);
    const int tw = within % 256, i = 2 * (within / 256);
    const int w = tw / 128, lt = tw % 128, warp = lt / 32, lane = lt % 32;
    const int row = (p.block_q == 128 ? 64 * w : 0) + 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
    const int col = (p.block_q == 128 ? 0 : 64 * w) + 8 * (i / 4) + 2 * (lane % 4);
    const int index = i * 256 + tw;
    const int64_t bh = blk / p.n_q_blocks;
    const int q = (int)(blk % p.n_q_blocks) * p.block_q + row;
    if (q >= p.seq) return;
    const float *src = p.dq_accum + blk * (int64_t)(p.block_q * p.head_dim);
    const float x = src[index] * p.scale, y = src[index + 256] * p.scale;
    const int64_t b = bh / p.heads, h = bh % p.heads;
    *reinterpret_cast<uint32_t *>(p.dq + (b * p.seq + q) * p.dq_row_stride + h * p.head_dim + col) = pack_bf16(x, y);
}

template <int D> bfp8_status launch_bwd(const BwdParams &params, int ctas, cudaStream_t stream) {
    auto kernel = attention_bwd_kernel<D>;
    constexpr int smem = BwdShape<D>::SMEM;
    BFP8_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<ctas, kThreads, smem, stream>>>(params);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

/* The workspace: lse2, delta (floats per padded row), the semaphores, the dQ sums. */
struct BwdWorkspace {
    int64_t seq_pad, n_q_blocks, rows, lse2_off, delta_off, sems_off, accum_off, bytes;
};
BwdWorkspace bwd_workspace(const bfp8_attention_desc *d) {
    const int64_t bq = d->head_dim == 128 ? BwdBlock<128>::Q : BwdBlock<64>::Q;
    BwdWorkspace ws;
    ws.n_q_blocks = bfp8_cdiv(d->seq, bq);
    ws.seq_pad = ws.n_q_blocks * bq;
    ws.rows = d->batch * d->n_heads * ws.seq_pad;
    auto up = [](int64_t x) { return (x + 255) / 256 * 256; };
    ws.lse2_off = 0;
    ws.delta_off = up(ws.rows * 4);
    ws.sems_off = ws.delta_off + up(ws.rows * 4);
    ws.accum_off = ws.sems_off + up(d->batch * d->n_heads * ws.n_q_blocks * 4);
    ws.bytes = ws.accum_off + ws.rows * d->head_dim * 4;
    return ws;
}

} /* namespace bfp8_attn */

using namespace bfp8_attn;

size_t bfp8_cuda_attention_backward_workspace_size(const bfp8_attention_desc *desc) {
    return (size_t)bwd_workspace(desc).bytes;
}

bfp8_status bfp8_attention_backward_launch(cudaStream_t stream, const bfp8_attention_desc *d, const uint16_t *q,
                                           const uint16_t *k, const uint16_t *v, const uint16_t *o,
                                           const uint16_t *d_o, const float *lse, uint16_t *dq, uint16_t *dk,
                                           uint16_t *dv, void *workspace, int variant) {
    const int64_t B = d->batch, T = d->seq, H = d->n_heads, Hk = d->n_kv_heads, D = d->head_dim;
    const int bq = D == 128 ? BwdBlock<128>::Q : BwdBlock<64>::Q;
    const BwdWorkspace ws = bwd_workspace(d);
    uint8_t *wsb = static_cast<uint8_t *>(workspace);

    PrepParams pp;
    pp.o = o, pp.d_o = d_o, pp.lse = lse;
    pp.lse2 = reinterpret_cast<float *>(wsb + ws.lse2_off);
    pp.delta = reinterpret_cast<float *>(wsb + ws.delta_off);
    pp.dq_sems = reinterpret_cast<unsigned *>(wsb + ws.sems_off);
    float *const dq_accum = reinterpret_cast<float *>(wsb + ws.accum_off);
    pp.o_row_stride = d->o_row_stride, pp.do_row_stride = d->do_row_stride;
    pp.sems = B * H * ws.n_q_blocks;
    pp.seq = (int)T, pp.seq_pad = (int)ws.seq_pad, pp.heads = (int)H, pp.head_dim = (int)D, pp.batch = (int)B;
    attention_bwd_prepare_kernel<<<(unsigned)((ws.rows * 8 + 255) / 256), 256, 0, stream>>>(pp);
    BFP8_CUDA_CHECK_LAUNCH();

    BwdParams p;
    memset(&p, 0, sizeof p);
    BFP8_TRY(bfp8_attention_tensor_map(&p.q_map, q, D, H, T, B, d->q_row_stride, bq, "attention q"));
    BFP8_TRY(bfp8_attention_tensor_map(&p.do_map, d_o, D, H, T, B, d->do_row_stride, bq, "attention d_o"));
    BFP8_TRY(bfp8_attention_tensor_map(&p.k_map, k, D, Hk, T, B, d->k_row_stride, kBwdBlockK, "attention k"));
    BFP8_TRY(bfp8_attention_tensor_map(&p.v_map, v, D, Hk, T, B, d->v_row_stride, kBwdBlockK, "attention v"));
    p.dk = dk, p.dv = dv;
    p.dk_row_stride = d->dk_row_stride, p.dv_row_stride = d->dv_row_stride;
    p.lse2 = pp.lse2, p.delta = pp.delta, p.dq_accum = dq_accum, p.dq_sems = pp.dq_sems;
    p.seq = (int)T, p.seq_pad = (int)ws.seq_pad, p.heads = (int)H, p.kv_heads = (int)Hk, p.group = (int)(H / Hk);
    p.n_q_blocks = (int)ws.n_q_blocks;
    p.n_k_blocks = (int)bfp8_cdiv(T, kBwdBlockK);
    p.scale = d->softmax_scale;
    p.scale_log2 = d->softmax_scale * kLog2e;
    p.causal = d->causal;
    p.time_order = d->causal && variant == kBwdTimeOrder;
    p.bhk_count = (int)(B * Hk);
    /* Q and dO of a key head's queries: 4 group T D bytes; keep a section's in about 20 MB of L2 */
    const int64_t per_pair = 4 * (H / Hk) * T * D;
    p.section = (int)(per_pair >= ((int64_t)20 << 20) ? 1 : ((int64_t)20 << 20) / per_pair);
    if (p.section > p.bhk_count) p.section = p.bhk_count;
    const int64_t ctas = (int64_t)p.n_k_blocks * B * Hk;
    if (ctas > INT32_MAX) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_attention_backward: too many key blocks");
    BFP8_TRY(D == 64 ? launch_bwd<64>(p, (int)ctas, stream) : launch_bwd<128>(p, (int)ctas, stream));

    FinishParams fp;
    fp.dq_accum = dq_accum, fp.dq = dq, fp.dq_row_stride = d->dq_row_stride;
    fp.seq = (int)T, fp.heads = (int)H, fp.head_dim = (int)D, fp.block_q = bq, fp.n_q_blocks = (int)ws.n_q_blocks;
    fp.pairs = ws.rows * D / 2;
    fp.scale = d->softmax_scale;
    attention_bwd_finish_kernel<<<(unsigned)((fp.pairs + 255) / 256), 256, 0, stream>>>(fp);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}
