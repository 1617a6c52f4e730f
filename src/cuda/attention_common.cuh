/*
 * attention_common.cuh - what the attention kernels (attention_fwd.cu,
 * attention_bwd.cu) and their host side (attention_host.cu) share: the
 * kernels' parameters, the warp roles, the tile order, the variants.
 *
 * Both kernels are warp-specialized: warpgroup 0 is the producer (its warp
 * 0 issues the tensor-copy loads; in the backward, its warp 1 adds dQ into
 * the workspace), warpgroups 1 and 2 do the math on 64 rows each, with the
 * accumulators in registers (setmaxnreg moves registers from the producer
 * to them). Tiles in shared memory are rows of 128 bytes (64 bf16) written
 * by TMA with 128-byte swizzle; a head_dim of 128 is two such column chunks.
 */
#pragma once

#include <cuda.h>
#include <stdint.h>

#include "cuda/cuda_common.cuh"


namespace bfp8_attn {

constexpr int kThreads = 384; /* producer warpgroup + 2 math warpgroups */
/* Registers per thread after setmaxnreg: the forward's producer needs few, the
 * backward's (with its dQ warp) more. setmaxnreg.inc waits until the registers
 * are free in the CTA's pool, so what the producer gives back must cover what
 * the math warpgroups take. */
constexpr int kFwdProducerRegs = 24, kFwdMathRegs = 240;
constexpr int kBwdProducerRegs = 40, kBwdMathRegs = 232;
static_assert((168 - kFwdProducerRegs) * 128 >= (kFwdMathRegs - 168) * 256, "register reallocation must balance");
static_assert((168 - kBwdProducerRegs) * 128 >= (kBwdMathRegs - 168) * 256, "register reallocation must balance");
constexpr float kLog2e = 1.4426950408889634f;

/* Named barriers (0 is __syncthreads). */
enum { kBarTurn0 = 1, kBarTurn1 = 2, kBarDsReady = 3 };

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */

constexpr int kFwdBlockQ = 128; /* queries per CTA: 64 per math warpgroup */

struct FwdParams {
    CUtensorMap q_map, k_map, v_map; /* 4-D (d, head, token, sequence); boxes of 64 x 1 x rows x 1 */
    uint16_t *o;
    float *lse;
    int64_t o_row_stride;
    int seq, heads, group; /* group: query heads per key/value head */
    int n_q_tiles, n_k_blocks;
    int bh_count;         /* batch * heads */
    int section;          /* (sequence, head) pairs per section of the tile order (L2 reuse of K, V) */
    float scale_log2;     /* softmax_scale * log2(e) */
    float scale;
    int causal;
};

/* Unit u of the forward's order -> query tile and (sequence, head): sections
 * of `section` (sequence, head) pairs, each with its tiles longest first
 * (causal) and the pairs of a tile together, so K and V of a section stay
 * in L2 while its tiles run. */
struct FwdUnit {
    int q_tile, bh;
};
__device__ __forceinline__ FwdUnit fwd_unit(const FwdParams &p, int u) {
    const int per_section = p.section * p.n_q_tiles;
    const int sec = u / per_section, first = sec * p.section;
    const int size = min(p.section, p.bh_count - first), within = u - sec * per_section;
    const int rank = within / size;
    return FwdUnit{p.causal ? p.n_q_tiles - 1 - rank : rank, first + within % size};
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */

constexpr int kBwdBlockK = 128; /* keys per CTA: 64 per math warpgroup */
/* Backward variants (bench/attention times them; the library runs kBwdDefault):
 * the key block order of bwd_unit, or for causal attention its time order. */
enum BwdVariant { kBwdKeyOrder = 0, kBwdTimeOrder = 1, kBwdVariants = 2 };
constexpr int kBwdDefault = kBwdKeyOrder;
template <int D> struct BwdBlock {
    static constexpr int Q = D == 128 ? 64 : 128; /* queries per step */
};

struct BwdParams {
    CUtensorMap q_map, k_map, v_map, do_map; /* 4-D as in the forward; q, d_o boxes of BlockQ rows */
    uint16_t *dk, *dv;
    int64_t dk_row_stride, dv_row_stride;
    const float *lse2;  /* [batch * heads][seq_pad]: lse * log2(e), +inf past seq */
    const float *delta; /* [batch * heads][seq_pad]: rowsum(dO * O), 0 past seq */
    float *dq_accum;    /* [batch * heads][n_q_blocks][BlockQ * D], each block in the math threads' order */
    unsigned *dq_sems;  /* [batch * heads][n_q_blocks]: key blocks that have added (deterministic order) */
    int seq, seq_pad, heads, kv_heads, group;
    int n_q_blocks, n_k_blocks;
    int bhk_count; /* batch * kv_heads */
    int section;   /* (sequence, key head) pairs per section of the CTA order */
    float scale_log2, scale;
    int causal;
    int time_order; /* causal attention in the time order (see bwd_unit) */
};

/* The backward's order. Key blocks of a (sequence, key head) pair add their
 * dQ terms to a query block in a fixed order (deterministic sums), and a key
 * block only ever waits for ones launched before it, so no wait can be on a
 * CTA that has not started:
 *   key block order (the default): the key blocks from 0 up (causal: the
 *     longest first), each visiting its query blocks from the last one down
 *     to its diagonal (or to 0), adding in key block order: a key block
 *     reaches a query block after the lower ones, started earlier, left it;
 *   time order (kBwdTimeOrder, causal only): the key blocks from the last one
 *     down, each visiting its query blocks from the diagonal up; a query block
 *     gets the highest key block's terms first, and the key blocks of a pair
 *     work on different query blocks at any time.
 * CTAs go in sections of `section` pairs (their Q and dO stay in L2 while the
 * section runs), the pairs fastest. */
struct BwdUnit {
    int n_block, bhk;
};
__device__ __forceinline__ BwdUnit bwd_unit(const BwdParams &p, int x) {
    const int per_section = p.section * p.n_k_blocks;
    const int sec = x / per_section, first = sec * p.section;
    const int size = min(p.section, p.bhk_count - first), within = x - sec * per_section;
    const int rank = within / size;
    return BwdUnit{p.time_order ? p.n_k_blocks - 1 - rank : rank, first + within % size};
}

struct BwdStep {
    int q_head, q_block;
};
__device__ __forceinline__ int bwd_diagonal(int n_block, int block_q) { return n_block * (kBwdBlockK / block_q); }
__device__ __forceinline__ int bwd_steps_per_head(const BwdParams &p, int n_block, int block_q) {
    return p.causal ? p.n_q_blocks - bwd_diagonal(n_block, block_q) : p.n_q_blocks;
}
__device__ __forceinline__ BwdStep bwd_step(const BwdParams &p, int kv_head, int n_block, int block_q, int it) {
    const int per_head = bwd_steps_per_head(p, n_block, block_q), tau = it % per_head;
    return BwdStep{kv_head * p.group + it / per_head,
                   p.time_order ? bwd_diagonal(n_block, block_q) + tau : p.n_q_blocks - 1 - tau};
}
/* Key blocks that add to query block m before key block n. */
__device__ __forceinline__ int bwd_dq_rank(const BwdParams &p, int n_block, int m, int block_q) {
    return p.time_order ? m / (kBwdBlockK / block_q) - n_block : n_block;
}

} /* namespace bfp8_attn */

/* Host side (attention_host.cu, attention_fwd.cu, attention_bwd.cu); also
 * what the trainer's CUDA attention (src/model/cuda/flash_attention.cu) calls. */
/* A 4-D tensor map over a token-major bf16 tensor: (d, head, token, sequence),
 * boxes of 64 x 1 x box_rows x 1, 128-byte swizzle. */
bfp8_status bfp8_attention_tensor_map(CUtensorMap *map, const uint16_t *base, int64_t head_dim, int64_t heads,
                                      int64_t seq, int64_t batch, int64_t row_stride, int box_rows, const char *what);
/* The kernels of a resolved, valid desc on `stream`; num_sms: the device's
 * multiprocessors (the forward's persistent grid). */
bfp8_status bfp8_attention_forward_launch(cudaStream_t stream, int num_sms, const bfp8_attention_desc *desc,
                                          const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *o,
                                          float *lse);
bfp8_status bfp8_attention_backward_launch(cudaStream_t stream, const bfp8_attention_desc *desc, const uint16_t *q,
                                           const uint16_t *k, const uint16_t *v, const uint16_t *o,
                                           const uint16_t *d_o, const float *lse, uint16_t *dq, uint16_t *dk,
                                           uint16_t *dv, void *workspace, int variant);
