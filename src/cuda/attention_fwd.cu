/*
 * attention_fwd.cu - the attention forward for sm_90a: O = softmax(scale Q K^T) V
 * and the log-sum-exp of each query row (bfp8_attention_forward).
 *
 * Persistent: one CTA per SM, each taking the tiles (128 queries of a head
 * of a sequence) blockIdx.x, + gridDim.x, ... of fwd_unit's order (causal:
 * the longest first).
 *   - warpgroup 0, one thread: the producer. TMA loads each tile's Q (once
 *     the previous tile's last S has read it), then the K and V blocks of BN
 *     keys into rings of STAGES buffers (K and V each with their own full /
 *     empty mbarriers, the rings running on across tiles), in the order the
 *     math needs them: K0, K1, V0, K2, V1, ... So the next tile's loads run
 *     while a tile finishes.
 *   - warpgroups 1 and 2: 64 query rows each. S = Q K^T by wgmma (both
 *     operands K-major in shared memory), the online softmax in registers
 *     (exp2 with the scale folded into one FMA), P rounded to bf16 in
 *     registers and used as the A operand of O += P V (V, row-major [keys][d],
 *     is the N-major B operand). Within a warpgroup S(j) and P(j-1) V(j-1)
 *     are issued together, the softmax of S(j) runs while P(j-1) V(j-1) is in
 *     the tensor core, and O is rescaled after it; the two warpgroups take
 *     turns to issue their products (named barriers), so one warpgroup's
 *     softmax also overlaps the other's products.
 *   - causal: only the key blocks up to the diagonal are visited, and only
 *     the blocks that cross it (or the end of the sequence) are masked.
 * O leaves from registers (bf16, rows past seq not written), LSE in natural
 * log units: scale * max + log(sum).
 */
#include "cuda/attention_common.cuh"
#include "cuda/hopper.cuh"

namespace bfp8_attn {

using namespace bfp8_sm90;

template <int D, int BN, int STAGES> struct FwdShape {
    static constexpr int BM = kFwdBlockQ;
    static constexpr int CHUNKS = D / 64;
    static constexpr int Q_BYTES = BM * D * 2;
    static constexpr int KV_BYTES = BN * D * 2;
    static constexpr int Q_OFF = 0;
    static constexpr int K_OFF = Q_OFF + Q_BYTES;
    static constexpr int V_OFF = K_OFF + STAGES * KV_BYTES;
    static constexpr int BAR_OFF = V_OFF + STAGES * KV_BYTES;
    static constexpr int SMEM = BAR_OFF + 8 * (2 + 4 * STAGES) + 1024; /* + alignment slack */
    static_assert(SMEM <= 227 * 1024, "shared memory");
};

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int N> __device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N> __device__ __forceinline__ void fence_regs(uint32_t (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

template <int D, int BN, int STAGES>
__global__ void __launch_bounds__(kThreads, 1) attention_fwd_kernel(const __grid_constant__ FwdParams p) {
    using S = FwdShape<D, BN, STAGES>;
    constexpr int BM = S::BM;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    uint8_t *const sq = smem + S::Q_OFF, *const sk = smem + S::K_OFF, *const sv = smem + S::V_OFF;
    uint64_t *const bars = reinterpret_cast<uint64_t *>(smem + S::BAR_OFF);
    uint64_t *const q_full = bars, *const q_empty = bars + 1, *const k_full = bars + 2, *const v_full = k_full + STAGES;
    uint64_t *const k_empty = v_full + STAGES, *const v_empty = k_empty + STAGES;
    const int wg = threadIdx.x / 128;
    /* persistent: this CTA's units are blockIdx.x, + gridDim.x, ... of fwd_unit's order */
    const int units = p.n_q_tiles * p.bh_count;
    auto blocks_of = [&](int q0) { return p.causal ? min(p.n_k_blocks, (q0 + BM - 1) / BN + 1) : p.n_k_blocks; };

    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
        mbar_init(q_empty, 8); /* one arrive per math warp */
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&k_full[s], 1);
            mbar_init(&v_full[s], 1);
            mbar_init(&k_empty[s], 8);
            mbar_init(&v_empty[s], 8);
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (wg == 0) { /* producer */
        regs_decrease<kFwdProducerRegs>();
        if (threadIdx.x == 0) {
            tma_prefetch_descriptor(&p.q_map);
            tma_prefetch_descriptor(&p.k_map);
            tma_prefetch_descriptor(&p.v_map);
            int kv = 0; /* K / V blocks loaded so far: ring position */
            auto load = [&](const CUtensorMap *map, uint8_t *ring, uint64_t *full, uint64_t *empty, int g, int key0,
                            int hk, int b) {
                const int s = g % STAGES;
                mbar_wait(&empty[s], ((g / STAGES) & 1) ^ 1);
                mbar_arrive_expect_tx(&full[s], S::KV_BYTES);
#pragma unroll
                for (int c = 0; c < S::CHUNKS; ++c)
                    tma_load_4d(ring + s * S::KV_BYTES + c * BN * 128, map, &full[s], c * 64, hk, key0, b);
            };
            for (int u = blockIdx.x, tile = 0; u < units; u += gridDim.x, ++tile) {
                const FwdUnit unit = fwd_unit(p, u);
                const int b = unit.bh / p.heads, h = unit.bh % p.heads, hk = h / p.group, q0 = unit.q_tile * BM;
                const int n = blocks_of(q0);
                mbar_wait(q_empty, (tile & 1) ^ 1);
                mbar_arrive_expect_tx(q_full, S::Q_BYTES);
#pragma unroll
                for (int c = 0; c < S::CHUNKS; ++c) tma_load_4d(sq + c * BM * 128, &p.q_map, q_full, c * 64, h, q0, b);
                load(&p.k_map, sk, k_full, k_empty, kv, 0, hk, b);
                for (int j = 0; j < n; ++j) {
                    if (j + 1 < n) load(&p.k_map, sk, k_full, k_empty, kv + j + 1, (j + 1) * BN, hk, b);
                    load(&p.v_map, sv, v_full, v_empty, kv + j, j * BN, hk, b);
                }
                kv += n;
            }
        }
        return;
    }

    /* ---- math warpgroups ---- */
    regs_increase<kFwdMathRegs>();
    const int w = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, t = lane % 4;
    const uint8_t *const q_rows = sq + 64 * w * 128;

    float o[D / 2];
    float s[BN / 2];
    uint32_t pa[BN / 4];
    float m[2], l[2];
    int kv = 0;             /* ring position of the tile's block 0 */
    bool first_round = true; /* of the whole run: ping-pong starts with warpgroup 0 */

    auto issue_s = [&](int g) { /* s = Q K^T of ring block g */
        const uint8_t *kt = sk + (g % STAGES) * S::KV_BYTES;
        fence_regs(s);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const int off = (kk % 4) * 32; /* 16 bf16 along the 128-byte row */
            wgmma_ss<0, 0>(s, desc_sw128(q_rows + (kk / 4) * BM * 128 + off),
                           desc_sw128(kt + (kk / 4) * BN * 128 + off), kk > 0);
        }
        wgmma_commit();
        fence_regs(s);
    };
    auto issue_pv = [&](int g) { /* o += P V of ring block g */
        const uint8_t *vt = sv + (g % STAGES) * S::KV_BYTES;
        fence_regs(o);
        fence_regs(pa);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            const uint32_t a[4] = {pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3]};
            wgmma_rs<1>(o, a, desc_sw128(vt + kk * 16 * 128, BN * 128), 1);
        }
        wgmma_commit();
        fence_regs(o);
        fence_regs(pa);
    };
    /* After this thread's warp has finished its reads of the buffer: __syncwarp
     * orders every lane's accesses before lane 0's arrive. */
    auto release = [&](uint64_t *bar) {
        __syncwarp();
        if (lane == 0) mbar_arrive_at(smem_u32(bar));
    };
    auto wait_full = [&](uint64_t *full, int g) { mbar_wait(&full[g % STAGES], (g / STAGES) & 1); };
    /* The two warpgroups take turns to issue their products (ping-pong), so that
     * one's softmax runs under the other's products; warpgroup 0 goes first, and
     * the turns run on across tiles (both see the same rounds). */
    auto my_turn = [&]() {
        if (!(w == 0 && first_round)) named_barrier_sync(kBarTurn0 + w, 256);
        first_round = false;
    };
    auto your_turn = [&](bool last_of_run) {
        if (!(w == 1 && last_of_run)) named_barrier_arrive(kBarTurn0 + (w ^ 1), 256);
    };

    for (int u = blockIdx.x, tile = 0; u < units; u += gridDim.x, ++tile) {
        const FwdUnit unit = fwd_unit(p, u);
        const int b = unit.bh / p.heads, h = unit.bh % p.heads, q0 = unit.q_tile * BM;
        const int n_blocks = blocks_of(q0);
        const bool last_tile = u + (int)gridDim.x >= units;
        const int row0 = q0 + 64 * w + 16 * warp + lane / 4; /* this thread's rows: row0, row0 + 8 */
        const int first_row = q0 + 64 * w;
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0.0f;

        /* Masks block j where it needs it, turns s into exp2(scale (s - max))
         * and returns the factors that rescale what was summed before. */
        auto softmax = [&](int j, float (&alpha)[2]) {
            const int k0 = j * BN;
            if (k0 + BN > p.seq || (p.causal && k0 + BN - 1 > first_row)) {
#pragma unroll
                for (int jj = 0; jj < BN / 8; ++jj)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int key = k0 + 8 * jj + 2 * t + (e & 1), row = row0 + 8 * (e >> 1);
                        if (key >= p.seq || (p.causal && key > row)) s[4 * jj + e] = -INFINITY;
                    }
            }
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int jj = 0; jj < BN / 8; ++jj) {
                mx[0] = fmaxf(mx[0], fmaxf(s[4 * jj], s[4 * jj + 1]));
                mx[1] = fmaxf(mx[1], fmaxf(s[4 * jj + 2], s[4 * jj + 3]));
            }
            float ms[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mx[r] = quad_max(mx[r]);
                ms[r] = mx[r] == -INFINITY ? 0.0f : mx[r] * p.scale_log2; /* a row with no key yet */
                alpha[r] = exp2_approx(m[r] * p.scale_log2 - ms[r]);
                m[r] = mx[r];
            }
            float sum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int jj = 0; jj < BN / 8; ++jj)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float v = exp2_approx(fmaf(s[4 * jj + e], p.scale_log2, -ms[e >> 1]));
                    s[4 * jj + e] = v;
                    sum[e >> 1] += v;
                }
            l[0] = l[0] * alpha[0] + sum[0];
            l[1] = l[1] * alpha[1] + sum[1];
        };
        auto to_bf16 = [&]() {
#pragma unroll
            for (int i = 0; i < BN / 4; ++i) pa[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
        };
        auto rescale = [&](const float (&alpha)[2]) {
#pragma unroll
            for (int jj = 0; jj < D / 8; ++jj) {
                o[4 * jj] *= alpha[0];
                o[4 * jj + 1] *= alpha[0];
                o[4 * jj + 2] *= alpha[1];
                o[4 * jj + 3] *= alpha[1];
            }
        };

        mbar_wait(q_full, tile & 1);
        float alpha[2];
        /* round 0: S(0) alone */
        wait_full(k_full, kv);
        my_turn();
        issue_s(kv);
        your_turn(false);
        wgmma_wait<0>();
        fence_regs(s);
        release(&k_empty[kv % STAGES]);
        if (n_blocks == 1) release(q_empty); /* the tile's last read of Q */
        softmax(0, alpha);
        to_bf16();
        /* rounds 1 .. n-1: S(j) with P(j-1) V(j-1) */
        for (int j = 1; j < n_blocks; ++j) {
            wait_full(k_full, kv + j);
            wait_full(v_full, kv + j - 1);
            my_turn();
            issue_s(kv + j);
            issue_pv(kv + j - 1);
            your_turn(false);
            wgmma_wait<1>();
            fence_regs(s);
            release(&k_empty[(kv + j) % STAGES]);
            if (j == n_blocks - 1) release(q_empty);
            softmax(j, alpha);
            wgmma_wait<0>();
            fence_regs(o);
            release(&v_empty[(kv + j - 1) % STAGES]);
            rescale(alpha);
            to_bf16();
        }
        /* round n: the last P V */
        wait_full(v_full, kv + n_blocks - 1);
        my_turn();
        issue_pv(kv + n_blocks - 1);
        your_turn(last_tile);
        wgmma_wait<0>();
        fence_regs(o);
        release(&v_empty[(kv + n_blocks - 1) % STAGES]);
        kv += n_blocks;

        /* ---- epilogue: O / l (bf16) and the LSE of the rows inside the sequence ---- */
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float sum = quad_sum(l[r]);
            const int row = row0 + 8 * r;
            if (row >= p.seq) continue;
            const float inv = 1.0f / sum;
            uint16_t *dst = p.o + ((int64_t)b * p.seq + row) * p.o_row_stride + h * D + 2 * t;
#pragma unroll
            for (int jj = 0; jj < D / 8; ++jj)
                *reinterpret_cast<uint32_t *>(dst + 8 * jj) =
                    pack_bf16(o[4 * jj + 2 * r] * inv, o[4 * jj + 2 * r + 1] * inv);
            if (t == 0) p.lse[(int64_t)unit.bh * p.seq + row] = m[r] * p.scale + logf(sum);
        }
    }
}

template <int D, int BN, int STAGES> bfp8_status launch_fwd(const FwdParams &params, int ctas, cudaStream_t stream) {
    auto kernel = attention_fwd_kernel<D, BN, STAGES>;
    constexpr int smem = FwdShape<D, BN, STAGES>::SMEM;
    BFP8_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<ctas, kThreads, smem, stream>>>(params);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

} /* namespace bfp8_attn */

using namespace bfp8_attn;

bfp8_status bfp8_attention_forward_launch(cudaStream_t stream, int num_sms, const bfp8_attention_desc *d,
                                          const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *o,
                                          float *lse) {
    constexpr int BN = 128, STAGES = 2;
    const int64_t B = d->batch, T = d->seq, H = d->n_heads, Hk = d->n_kv_heads, D = d->head_dim;
    FwdParams p;
    memset(&p, 0, sizeof p);
    BFP8_TRY(bfp8_attention_tensor_map(&p.q_map, q, D, H, T, B, d->q_row_stride, kFwdBlockQ, "attention q"));
    BFP8_TRY(bfp8_attention_tensor_map(&p.k_map, k, D, Hk, T, B, d->k_row_stride, BN, "attention k"));
    BFP8_TRY(bfp8_attention_tensor_map(&p.v_map, v, D, Hk, T, B, d->v_row_stride, BN, "attention v"));
    p.o = o;
    p.lse = lse;
    p.o_row_stride = d->o_row_stride;
    p.seq = (int)T;
    p.heads = (int)H;
    p.group = (int)(H / Hk);
    p.n_q_tiles = (int)bfp8_cdiv(T, kFwdBlockQ);
    p.n_k_blocks = (int)bfp8_cdiv(T, BN);
    p.bh_count = (int)(B * H);
    /* K and V of a head: 4 T D bytes; keep a section's in about 24 MB of L2 */
    const int64_t per_head = 4 * T * D;
    p.section = (int)(per_head >= ((int64_t)24 << 20) ? 1 : ((int64_t)24 << 20) / per_head);
    if (p.section > p.bh_count) p.section = p.bh_count;
    p.scale = d->softmax_scale;
    p.scale_log2 = d->softmax_scale * kLog2e;
    p.causal = d->causal;
    const int64_t units = (int64_t)p.n_q_tiles * p.bh_count;
    if (units > INT32_MAX) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_attention_forward: too many tiles");
    const int ctas = (int)(units < num_sms ? units : num_sms);
    return D == 64 ? launch_fwd<64, BN, STAGES>(p, ctas, stream) : launch_fwd<128, BN, STAGES>(p, ctas, stream);
}
