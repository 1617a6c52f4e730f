/*
 * attention_cuda.cu - causal multi-head self-attention on the GPU, fp32,
 * forward and backward: the CUDA versions of attention_forward and
 * attention_backward (attention.h, model_ops.h), same layouts, same result
 * within fp32 rounding.
 *
 * The six matrix products of attention (S = Q K^T, O = P V, dP = dO V^T,
 * dQ = dS K, dK = dS^T Q, dV = P^T dO) are cuBLAS SGEMMs, one strided-batched
 * call per sequence and block of rows covering all of its heads: inside a
 * token row the heads lie head_dim apart, so a head is a constant stride from
 * the previous one, but the next sequence is seq * 3 * dim away, which is no
 * multiple of that stride, hence the loop over the batch. Two row kernels do
 * the rest: the causal softmax of the scores and its backward. Both are one
 * warp per row.
 *
 * The upper triangle of P (and dS) is zero, so the products skip most of it,
 * as the CPU reference does: the queries go in blocks [r0, r1) of kSeqBlock
 * rows (the last one ragged), and a block meets only the keys [0, r1) (S, O,
 * dP, dQ); likewise a block of keys [s0, s1) meets only the queries
 * [s0, seq) (dK, dV). What is left of each product is about
 * 1/2 + kSeqBlock / (2 seq) of the full seq x seq one (9/16 at seq 2048):
 * the lower triangle and the masked halves of the diagonal blocks. The
 * result is the same up to the order of fp32 sums (cuBLAS picks its kernel
 * by shape): the skipped terms are products with exact zeros of P or dS; the
 * row kernels read only s <= t, which lies inside the computed blocks, and
 * write the whole row (true zeros above the diagonal), so no element of
 * probs or of the scratch that a product reads is left from before.
 *
 * The cuBLAS handle does pure fp32 math (no TF32): the result matches the CPU
 * reference within reordering of fp32 sums, and repeats bit for bit.
 */
#include <limits.h>
#include <math.h>

#include "model/cuda/model_cuda_common.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

constexpr int kWarpSize = 32;
constexpr int kRowsPerBlock = 8; /* one warp per row */
constexpr int kRowThreads = kRowsPerBlock * kWarpSize;
/* Query rows (or keys) per block of the products: smaller skips more of the
 * triangle, larger makes fewer and bigger cuBLAS calls. */
constexpr int64_t kSeqBlock = 256;

/* End of the block of rows that starts at start: start + kSeqBlock, or seq
 * for the last, ragged one. */
inline int64_t block_end(int64_t start, int64_t seq) {
    return seq - start > kSeqBlock ? start + kSeqBlock : seq;
}

/* ------------------------------------------------------------------------ */
/* Row kernels                                                               */

__device__ float warp_sum(float x) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__device__ float warp_max(float x) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

/* probs holds rows x seq raw scores Q K^T (row r is query t = r % seq of
 * its (batch, head)), formed only for s < r1, the end of t's block, so only
 * for s <= t is the row read; it becomes softmax(scale * scores[0..t])
 * followed by zeros up to seq. Three passes over the row (max, sum, write)
 * read it from cache; the exponentials are recomputed rather than stored to
 * keep it simple. */
__global__ void causal_softmax_rows(float *probs, int64_t rows, int64_t seq, float scale) {
    const int lane = threadIdx.x % kWarpSize;
    const int64_t warps = (int64_t)gridDim.x * kRowsPerBlock;
    for (int64_t r = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize; r < rows; r += warps) {
        float *row = probs + r * seq;
        const int64_t t = r % seq;
        /* __fmul_rn: the scaled score is rounded before the subtraction, as
         * on the CPU, instead of being fused into it */
        float max_score = -INFINITY;
        for (int64_t s = lane; s <= t; s += kWarpSize) max_score = fmaxf(max_score, __fmul_rn(row[s], scale));
        max_score = warp_max(max_score);
        float sum = 0.0f;
        for (int64_t s = lane; s <= t; s += kWarpSize) sum += expf(__fmul_rn(row[s], scale) - max_score);
        const float inv_sum = 1.0f / warp_sum(sum);
        for (int64_t s = lane; s < seq; s += kWarpSize)
            row[s] = s <= t ? expf(__fmul_rn(row[s], scale) - max_score) * inv_sum : 0.0f;
    }
}

/* ds holds rows x seq of dP = dO V^T, formed like the scores for s < r1,
 * and read like them for s <= t only; each row becomes
 * dS = P * (dP - sum_s P dP) * scale over s <= t, zeros after up to seq. */
__global__ void causal_softmax_backward_rows(float *ds, const float *probs, int64_t rows, int64_t seq,
                                             float scale) {
    const int lane = threadIdx.x % kWarpSize;
    const int64_t warps = (int64_t)gridDim.x * kRowsPerBlock;
    for (int64_t r = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize; r < rows; r += warps) {
        float *row = ds + r * seq;
        const float *p = probs + r * seq;
        const int64_t t = r % seq;
        float weighted = 0.0f;
        for (int64_t s = lane; s <= t; s += kWarpSize) weighted += p[s] * row[s];
        weighted = warp_sum(weighted);
        for (int64_t s = lane; s < seq; s += kWarpSize)
            row[s] = s <= t ? p[s] * (row[s] - weighted) * scale : 0.0f;
    }
}

/* ------------------------------------------------------------------------ */
/* Products over the heads of one sequence                                   */

/* One row-major matrix per head: head h at data + h * head_stride, rows
 * ld floats apart. */
struct head_matrices {
    const float *data;
    int64_t ld;
    int64_t head_stride;
};

/* For every head h: C[h] = op(A[h]) op(B[h]), all row-major; C is m x n,
 * the contraction k long, op transposes when asked; C is overwritten (beta 0:
 * cuBLAS does not read it, so garbage there is harmless).
 *
 * cuBLAS is column-major, and a row-major matrix read column-major is its
 * transpose; so this computes C^T = op(B)^T op(A)^T: B comes first, m and n
 * swap, and each operand keeps its own transpose flag. Returns false after a
 * failure (kept in oc). */
bool gemm_over_heads(model_ops_ctx *oc, cublasHandle_t handle, bool a_transposed, bool b_transposed, int64_t m,
                     int64_t n, int64_t k, head_matrices a, head_matrices b, float *c, int64_t ldc,
                     int64_t c_head_stride, int64_t heads, const char *what) {
    const float one = 1.0f, zero = 0.0f;
    return !failed(oc,
                   cublasSgemmStridedBatched(handle, b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                                             a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &one,
                                             b.data, (int)b.ld, b.head_stride, a.data, (int)a.ld, a.head_stride, &zero,
                                             c, (int)ldc, c_head_stride, (int)heads),
                   what);
}

/* cuBLAS takes int sizes and leading dimensions: keep a failure if they do not fit. */
bool sizes_fit_cublas(model_ops_ctx *oc, int64_t seq, int64_t n_heads, int64_t head_dim, const char *what) {
    const bool fit = seq <= INT_MAX && n_heads <= INT_MAX && head_dim <= INT_MAX / 3 &&
                     n_heads <= INT_MAX / 3 / head_dim;
    if (!fit) failed(oc, CUBLAS_STATUS_INVALID_VALUE, what);
    return fit;
}

} /* namespace */

/* flash_attention.cu: the path without stored probabilities, when it is on */
int flash_attention_forward(model_ops_ctx *oc, float *out, uint16_t *out_bf16, float *probs, const float *qkv,
                            const uint16_t *qkv_bf16, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                            const float *cos_table, const float *sin_table);
int flash_attention_backward(model_ops_ctx *oc, float *dqkv, uint16_t *dqkv_bf16, float *scratch, const float *dout,
                             const uint16_t *dout_bf16, const float *probs, int64_t batch, int64_t seq, int64_t heads,
                             int64_t head_dim, const float *cos_table, const float *sin_table);

/* ------------------------------------------------------------------------ */
/* Forward and backward                                                      */

extern "C" void attention_forward_cuda(model_ops_ctx *oc, float *out, float *probs, float *scratch, const float *qkv,
                                       int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim) {
    (void)scratch; /* the scores are formed in probs itself */
    if (batch <= 0 || seq <= 0 || n_heads <= 0 || head_dim <= 0) return;
    if (flash_attention_forward(oc, out, nullptr, probs, qkv, nullptr, batch, seq, n_heads, head_dim, nullptr, nullptr))
        return;
    if (!sizes_fit_cublas(oc, seq, n_heads, head_dim, "attention_forward (sizes beyond int)")) return;
    cublasHandle_t handle = cublas(oc);
    if (!handle) return;
    const int64_t dim = n_heads * head_dim, stride = 3 * dim, square = seq * seq;
    const float scale = 1.0f / sqrtf((float)head_dim);

    /* S = Q K^T, raw scores, into probs[b][h]: queries [r0, r1) against the
     * keys [0, r1); the softmax writes the rest of their rows */
    for (int64_t b = 0; b < batch; ++b) {
        const float *q = qkv + b * seq * stride, *k = q + dim;
        float *s_b = probs + b * n_heads * square;
        for (int64_t r0 = 0; r0 < seq; r0 += kSeqBlock) {
            const int64_t r1 = block_end(r0, seq);
            if (!gemm_over_heads(oc, handle, false, true, r1 - r0, r1, head_dim, {q + r0 * stride, stride, head_dim},
                                 {k, stride, head_dim}, s_b + r0 * seq, seq, square, n_heads,
                                 "attention_forward S = Q K^T"))
                return;
        }
    }
    const int64_t rows = batch * n_heads * seq;
    causal_softmax_rows<<<grid_for(rows * kWarpSize, kRowThreads), kRowThreads, 0, stream(oc)>>>(probs, rows, seq,
                                                                                                 scale);
    check_launch(oc, "attention_forward causal_softmax_rows");

    /* O = P V: queries [r0, r1) over the keys [0, r1) (P is 0 after them) */
    for (int64_t b = 0; b < batch; ++b) {
        const float *v = qkv + b * seq * stride + 2 * dim;
        const float *p = probs + b * n_heads * square;
        float *o = out + b * seq * dim;
        for (int64_t r0 = 0; r0 < seq; r0 += kSeqBlock) {
            const int64_t r1 = block_end(r0, seq);
            if (!gemm_over_heads(oc, handle, false, false, r1 - r0, head_dim, r1, {p + r0 * seq, seq, square},
                                 {v, stride, head_dim}, o + r0 * dim, dim, head_dim, n_heads,
                                 "attention_forward O = P V"))
                return;
        }
    }
}

extern "C" void attention_backward_cuda(model_ops_ctx *oc, float *dqkv, float *scratch, const float *dout,
                                        const float *qkv, const float *probs, int64_t batch, int64_t seq,
                                        int64_t n_heads, int64_t head_dim) {
    if (batch <= 0 || seq <= 0 || n_heads <= 0 || head_dim <= 0) return;
    if (flash_attention_backward(oc, dqkv, nullptr, scratch, dout, nullptr, probs, batch, seq, n_heads, head_dim,
                                 nullptr, nullptr))
        return;
    if (!sizes_fit_cublas(oc, seq, n_heads, head_dim, "attention_backward (sizes beyond int)")) return;
    cublasHandle_t handle = cublas(oc);
    if (!handle) return;
    const int64_t dim = n_heads * head_dim, stride = 3 * dim, square = seq * seq;
    const float scale = 1.0f / sqrtf((float)head_dim);
    /* dP, then dS in place, of (b, h) at scratch + (b * n_heads + h) * seq * seq:
     * batch * n_heads * seq * seq floats, within attention_scratch_floats */
    float *ds = scratch;

    /* dP = dO V^T: queries [r0, r1) against the keys [0, r1); the dS kernel
     * writes the rest of their rows */
    for (int64_t b = 0; b < batch; ++b) {
        const float *d_o = dout + b * seq * dim, *v = qkv + b * seq * stride + 2 * dim;
        float *ds_b = ds + b * n_heads * square;
        for (int64_t r0 = 0; r0 < seq; r0 += kSeqBlock) {
            const int64_t r1 = block_end(r0, seq);
            if (!gemm_over_heads(oc, handle, false, true, r1 - r0, r1, head_dim, {d_o + r0 * dim, dim, head_dim},
                                 {v, stride, head_dim}, ds_b + r0 * seq, seq, square, n_heads,
                                 "attention_backward dP = dO V^T"))
                return;
        }
    }
    const int64_t rows = batch * n_heads * seq;
    causal_softmax_backward_rows<<<grid_for(rows * kWarpSize, kRowThreads), kRowThreads, 0, stream(oc)>>>(
        ds, probs, rows, seq, scale);
    check_launch(oc, "attention_backward causal_softmax_backward_rows");

    /* Per block [r0, r1): dQ of the queries [r0, r1) over the keys [0, r1);
     * dK and dV of the keys [r0, r1) over the queries [r0, seq), the only ones
     * that see them (dS and P are 0 above the diagonal). */
    for (int64_t b = 0; b < batch; ++b) {
        const float *q = qkv + b * seq * stride, *k = q + dim, *d_o = dout + b * seq * dim;
        const float *p = probs + b * n_heads * square, *ds_b = ds + b * n_heads * square;
        float *dq = dqkv + b * seq * stride, *dk = dq + dim, *dv = dq + 2 * dim;
        for (int64_t r0 = 0; r0 < seq; r0 += kSeqBlock) {
            const int64_t r1 = block_end(r0, seq);
            if (!gemm_over_heads(oc, handle, false, false, r1 - r0, head_dim, r1, {ds_b + r0 * seq, seq, square},
                                 {k, stride, head_dim}, dq + r0 * stride, stride, head_dim, n_heads,
                                 "attention_backward dQ = dS K") ||
                !gemm_over_heads(oc, handle, true, false, r1 - r0, head_dim, seq - r0,
                                 {ds_b + r0 * seq + r0, seq, square}, {q + r0 * stride, stride, head_dim},
                                 dk + r0 * stride, stride, head_dim, n_heads, "attention_backward dK = dS^T Q") ||
                !gemm_over_heads(oc, handle, true, false, r1 - r0, head_dim, seq - r0, {p + r0 * seq + r0, seq, square},
                                 {d_o + r0 * dim, dim, head_dim}, dv + r0 * stride, stride, head_dim, n_heads,
                                 "attention_backward dV = P^T dO"))
                return;
        }
    }
}
