/*
 * flash_attention.cu - causal multi-head attention without stored
 * probabilities (model_ops_ctx.flash_attention, `--flash-attention`): the
 * library's sm_90a attention (bfp8_attention_forward / _backward kernels,
 * src/cuda/attention_*.cu: TMA, wgmma, bf16 products with fp32
 * accumulation, online softmax) on bf16 copies of the model's activations,
 * with RoPE folded into the copies when asked (rope_attention_*_cuda).
 *
 * Same arguments and layouts as attention_forward_cuda / _backward_cuda
 * (attention.h): qkv is fp32, per token q | k | v with head h at h * head_dim
 * of each; out and dqkv fp32; or bf16 (qkv_bf16, out_bf16, dout_bf16,
 * dqkv_bf16) for the fused op's bf16 neighbours. What the backward needs of the forward goes
 * into the layer's `probs` buffer instead of the probabilities
 * (flash_attention_saved_floats, model_ops.h):
 *   probs[0, B*H*T)                   LSE of each query row (natural log)
 *   from float B*H*T rounded up to 4  O as bf16 (tokens x dim)
 *   then                              q | k | v as bf16 (tokens x 3 dim), q and
 *                                     k rotated when RoPE is folded in
 * so the backward reads the kernel's own inputs and never qkv. The scratch
 * (flash_attention_scratch_floats) holds the bf16 dO and dq | dk | dv and the
 * backward's workspace.
 *
 * Bytes per layer, tokens x dim = n: the forward reads qkv (12n) and writes
 * its bf16 copy (6n), RoPE included; the backward converts dO (unless it
 * comes in bf16) and widens dq | dk | dv (6n read, 12n or 6n written) with
 * RoPE's backward rotation in the same pass. The kernels are deterministic
 * (the trainer's resume depends on results that repeat bit for bit).
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda/attention_common.cuh"
#include "model/cuda/model_kernels.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

__global__ void f32_to_bf16_kernel(uint2 *dst, const float4 *src, int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = src[i];
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        dst[i] = make_uint2(*reinterpret_cast<const uint32_t *>(&lo), *reinterpret_cast<const uint32_t *>(&hi));
    }
}

__global__ void bf16_to_f32_kernel(float4 *dst, const uint2 *src, int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const uint2 v = src[i];
        dst[i] = make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
                             __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
    }
}

/* dst = src over rows of q | k | v (3 dim each, both dense), converted
 * between fp32 and bf16, with the pairs (x[i], x[i + half]) of every q and k
 * head rotated by RoPE's angle of the row's position (sin_sign -1: back, the
 * backward) when cos_table is not NULL. An item is 8 values: 4 pairs of a q
 * or k head, or 8 consecutive values of v. */
template <typename Src, typename Dst>
__global__ void qkv_convert_kernel(Dst *__restrict__ dst, const Src *__restrict__ src, int64_t rows, int64_t seq,
                                   int heads, int head_dim, const float *__restrict__ cos_table,
                                   const float *__restrict__ sin_table, float sin_sign) {
    const int half = head_dim / 2, quarter = half / 4, dim = heads * head_dim;
    const int qk_items = 2 * heads * quarter, items = qk_items + dim / 8;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int64_t pos = row % seq, base = row * 3 * dim;
        for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < items; j += gridDim.y * blockDim.x) {
            if (j >= qk_items) {
                const int64_t at = base + 2 * dim + (int64_t)(j - qk_items) * 8;
                store<4>(dst + at, load<4>(src + at));
                store<4>(dst + at + 4, load<4>(src + at + 4));
                continue;
            }
            const int part = j / (heads * quarter), rem = j - part * heads * quarter;
            const int h = rem / quarter, i = (rem - h * quarter) * 4;
            const int64_t at = base + (int64_t)part * dim + (int64_t)h * head_dim + i;
            floats<4> a = load<4>(src + at), b = load<4>(src + at + half);
            if (cos_table) {
                const floats<4> c = load<4>(cos_table + pos * half + i), s = load<4>(sin_table + pos * half + i);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float sn = sin_sign * s.v[e], ae = a.v[e], be = b.v[e];
                    a.v[e] = ae * c.v[e] - be * sn;
                    b.v[e] = ae * sn + be * c.v[e];
                }
            }
            store<4>(dst + at, a);
            store<4>(dst + at + half, b);
        }
    }
}

template <typename Src, typename Dst>
void convert_qkv(model_ops_ctx *oc, Dst *dst, const Src *src, int64_t batch, int64_t seq, int64_t heads,
                 int64_t head_dim, const float *cos_table, const float *sin_table, float sin_sign, const char *what) {
    const int64_t rows = batch * seq, items = 2 * heads * (head_dim / 8) + heads * head_dim / 8;
    const int threads = chunk_threads(items);
    qkv_convert_kernel<Src, Dst><<<rows_by_chunks(rows, items, threads), threads, 0, stream(oc)>>>(
        dst, src, rows, seq, (int)heads, (int)head_dim, cos_table, sin_table, sin_sign);
    check_launch(oc, what);
}

/* n (a multiple of 4) values */
void to_bf16(model_ops_ctx *oc, uint16_t *dst, const float *src, int64_t n, const char *what) {
    f32_to_bf16_kernel<<<grid_for(n / 4, 256), 256, 0, stream(oc)>>>(reinterpret_cast<uint2 *>(dst),
                                                                     reinterpret_cast<const float4 *>(src), n / 4);
    check_launch(oc, what);
}
void to_f32(model_ops_ctx *oc, float *dst, const uint16_t *src, int64_t n, const char *what) {
    bf16_to_f32_kernel<<<grid_for(n / 4, 256), 256, 0, stream(oc)>>>(reinterpret_cast<float4 *>(dst),
                                                                     reinterpret_cast<const uint2 *>(src), n / 4);
    check_launch(oc, what);
}

int num_sms(model_ops_ctx *oc) {
    int device = 0, n = 0;
    if (failed(oc, cudaGetDevice(&device), "flash attention: cudaGetDevice") ||
        failed(oc, cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "flash attention: SM count"))
        return 1;
    return n;
}

/* Keep a failure of the library's kernels, with the library's message. */
bool failed_op(model_ops_ctx *oc, bfp8_status s, const char *what) {
    if (s == BFP8_OK) return false;
    char message[320];
    snprintf(message, sizeof message, "%s (%s)", what, bfp8_last_error());
    return failed(oc, cudaErrorUnknown, message);
}

bfp8_attention_desc desc_of(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
    const int64_t dim = heads * head_dim;
    bfp8_attention_desc d = {};
    d.batch = batch, d.seq = seq, d.n_heads = heads, d.n_kv_heads = heads, d.head_dim = head_dim;
    d.causal = 1;
    d.softmax_scale = 1.0f / sqrtf((float)head_dim);
    d.q_row_stride = d.k_row_stride = d.v_row_stride = 3 * dim;
    d.dq_row_stride = d.dk_row_stride = d.dv_row_stride = 3 * dim;
    d.o_row_stride = d.do_row_stride = dim;
    return d;
}

/* The scratch: bf16 dO (tokens x dim), dqkv (tokens x 3 dim), then the workspace. */
struct scratch_parts {
    uint16_t *do16, *dqkv16;
    void *workspace;
};
scratch_parts split_scratch(float *scratch, const bfp8_attention_desc &d) {
    const int64_t elems = d.batch * d.seq * d.n_heads * d.head_dim;
    uint16_t *do16 = reinterpret_cast<uint16_t *>(scratch);
    const uintptr_t ws = (reinterpret_cast<uintptr_t>(do16 + 4 * elems) + 255) / 256 * 256;
    return {do16, do16 + elems, reinterpret_cast<void *>(ws)};
}

/* What the layer's probs buffer keeps: O's bf16 copy, 16-byte aligned after
 * the LSEs, then the bf16 q | k | v the kernel read. */
struct saved_parts {
    uint16_t *o16, *qkv16;
};
saved_parts split_saved(const float *probs, const bfp8_attention_desc &d) {
    const int64_t elems = d.batch * d.seq * d.n_heads * d.head_dim;
    float *lse_end = const_cast<float *>(probs) + (d.batch * d.n_heads * d.seq + 3) / 4 * 4;
    uint16_t *o16 = reinterpret_cast<uint16_t *>(lse_end);
    return {o16, o16 + elems};
}

/* The pointers the conversions read and write four or eight at a time. */
bool aligned_for_flash(model_ops_ctx *oc, const void *const *ptrs, int count, const char *what) {
    for (int i = 0; i < count; ++i)
        if (!aligned16(ptrs[i])) {
            failed(oc, cudaErrorMisalignedAddress, what);
            return false;
        }
    return true;
}

} /* namespace */

extern "C" int model_cuda_flash_attention_supported(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

/* The flash path of attention_forward_cuda / _backward_cuda (attention_cuda.cu)
 * and of rope_attention_*_cuda: returns 0 when it does not apply (off, or
 * another head size). cos_table NULL: no RoPE. Exactly one of out, out_bf16
 * (qkv, qkv_bf16; dqkv, dqkv_bf16; dout, dout_bf16) is given. */
int flash_attention_forward(model_ops_ctx *oc, float *out, uint16_t *out_bf16, float *probs, const float *qkv,
                            const uint16_t *qkv_bf16, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                            const float *cos_table, const float *sin_table) {
    if (!oc->flash_attention || (head_dim != 64 && head_dim != 128)) return 0;
    const bfp8_attention_desc d = desc_of(batch, seq, heads, head_dim);
    const int64_t dim = heads * head_dim, tokens = batch * seq;
    const saved_parts sv = split_saved(probs, d);
    const void *ptrs[] = {out ? (const void *)out : (const void *)out_bf16, probs,
                          qkv ? (const void *)qkv : (const void *)qkv_bf16, cos_table ? cos_table : probs,
                          sin_table ? sin_table : probs};
    if (!aligned_for_flash(oc, ptrs, 5, "flash attention forward: a pointer is not 16-byte aligned")) return 1;
    if (qkv)
        convert_qkv(oc, sv.qkv16, qkv, batch, seq, heads, head_dim, cos_table, sin_table, 1.0f,
                    "flash attention: qkv to bf16");
    else
        convert_qkv(oc, sv.qkv16, qkv_bf16, batch, seq, heads, head_dim, cos_table, sin_table, 1.0f,
                    "flash attention: qkv (bf16)");
    failed_op(oc,
              bfp8_attention_forward_launch(stream(oc), num_sms(oc), &d, sv.qkv16, sv.qkv16 + dim, sv.qkv16 + 2 * dim,
                                            sv.o16, probs),
              "flash attention forward");
    if (out)
        to_f32(oc, out, sv.o16, tokens * dim, "flash attention: out to f32");
    else
        failed(oc,
               cudaMemcpyAsync(out_bf16, sv.o16, (size_t)(tokens * dim) * sizeof(uint16_t), cudaMemcpyDeviceToDevice,
                               stream(oc)),
               "flash attention: out (bf16)");
    return 1;
}

int flash_attention_backward(model_ops_ctx *oc, float *dqkv, uint16_t *dqkv_bf16, float *scratch, const float *dout,
                             const uint16_t *dout_bf16, const float *probs, int64_t batch, int64_t seq, int64_t heads,
                             int64_t head_dim, const float *cos_table, const float *sin_table) {
    if (!oc->flash_attention || (head_dim != 64 && head_dim != 128)) return 0;
    const bfp8_attention_desc d = desc_of(batch, seq, heads, head_dim);
    const int64_t dim = heads * head_dim, tokens = batch * seq;
    const scratch_parts sp = split_scratch(scratch, d);
    const saved_parts sv = split_saved(probs, d);
    const size_t ws_bytes = bfp8_cuda_attention_backward_workspace_size(&d);
    const uintptr_t end = reinterpret_cast<uintptr_t>(scratch + flash_attention_scratch_floats(batch, seq, heads,
                                                                                                head_dim));
    if (reinterpret_cast<uintptr_t>(sp.workspace) + ws_bytes > end) {
        failed(oc, cudaErrorInvalidValue, "flash attention backward: scratch smaller than the workspace");
        return 1;
    }
    const void *ptrs[] = {dqkv ? (const void *)dqkv : (const void *)dqkv_bf16,
                          dout ? (const void *)dout : (const void *)dout_bf16, probs, scratch,
                          cos_table ? cos_table : probs, sin_table ? sin_table : probs};
    if (!aligned_for_flash(oc, ptrs, 6, "flash attention backward: a pointer is not 16-byte aligned")) return 1;
    const uint16_t *do16 = dout_bf16;
    if (!do16) {
        to_bf16(oc, sp.do16, dout, tokens * dim, "flash attention: dO to bf16");
        do16 = sp.do16;
    }
    failed_op(oc,
              bfp8_attention_backward_launch(stream(oc), &d, sv.qkv16, sv.qkv16 + dim, sv.qkv16 + 2 * dim, sv.o16,
                                             do16, probs, sp.dqkv16, sp.dqkv16 + dim, sp.dqkv16 + 2 * dim,
                                             sp.workspace, bfp8_attn::kBwdDefault),
              "flash attention backward");
    if (dqkv)
        convert_qkv(oc, dqkv, sp.dqkv16, batch, seq, heads, head_dim, cos_table, sin_table, -1.0f,
                    "flash attention: dqkv to f32");
    else
        convert_qkv(oc, dqkv_bf16, sp.dqkv16, batch, seq, heads, head_dim, cos_table, sin_table, -1.0f,
                    "flash attention: dqkv (bf16)");
    return 1;
}

extern "C" void rope_attention_forward_cuda(model_ops_ctx *oc, float *out, uint16_t *out_bf16, float *probs,
                                            float *scratch, const float *qkv, const uint16_t *qkv_bf16, int64_t batch,
                                            int64_t seq, int64_t n_heads, int64_t head_dim, const float *cos_table,
                                            const float *sin_table) {
    (void)scratch;
    if (batch <= 0 || seq <= 0 || n_heads <= 0 || head_dim <= 0) return;
    if (!flash_attention_forward(oc, out, out_bf16, probs, qkv, qkv_bf16, batch, seq, n_heads, head_dim, cos_table,
                                 sin_table))
        failed(oc, cudaErrorNotSupported, "rope_attention_forward: flash attention only (head_dim 64 or 128)");
}

extern "C" void rope_attention_backward_cuda(model_ops_ctx *oc, float *dqkv, uint16_t *dqkv_bf16, float *scratch,
                                             const float *dout, const uint16_t *dout_bf16, const float *qkv,
                                             const uint16_t *qkv_bf16, const float *probs, int64_t batch, int64_t seq,
                                             int64_t n_heads, int64_t head_dim, const float *cos_table,
                                             const float *sin_table) {
    (void)qkv, (void)qkv_bf16; /* the forward kept the rotated bf16 copy in probs */
    if (batch <= 0 || seq <= 0 || n_heads <= 0 || head_dim <= 0) return;
    if (!flash_attention_backward(oc, dqkv, dqkv_bf16, scratch, dout, dout_bf16, probs, batch, seq, n_heads, head_dim,
                                  cos_table, sin_table))
        failed(oc, cudaErrorNotSupported, "rope_attention_backward: flash attention only (head_dim 64 or 128)");
}
