/*
 * flash_attention.cu - causal multi-head attention without stored
 * probabilities (model_ops_ctx.flash_attention, `--flash-attention`): the
 * library's sm_90a attention (bfp8_attention_forward / _backward kernels,
 * src/cuda/attention_*.cu: TMA, wgmma, bf16 products with fp32
 * accumulation, online softmax) on bf16 copies of the model's fp32
 * activations.
 *
 * Same arguments and layouts as attention_forward_cuda / _backward_cuda
 * (attention.h): qkv is fp32, per token q | k | v with head h at h * head_dim
 * of each; out and dqkv fp32. What the backward needs of the forward goes
 * into the layer's `probs` buffer instead of the probabilities:
 *   probs[0, B*H*T)                  LSE of each query row (natural log)
 *   from float B*H*T rounded up to 4  O as bf16 (B*T x dim), what backward reads
 * (model_create sizes the buffer for this when flash attention is on). The
 * scratch (flash_attention_scratch_floats) holds the bf16 copies of qkv and
 * dO, the bf16 dq | dk | dv, and the backward's workspace.
 *
 * The forward rounds qkv to bf16 in place of its token rows (the kernels read
 * q, k, v with a row stride of 3 dim), runs the kernel and widens O to fp32;
 * the backward rounds qkv and dO again, runs the kernels (deterministic: the
 * trainer's resume depends on results that repeat bit for bit) and widens
 * dq | dk | dv into dqkv.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda/attention_common.cuh"
#include "model/cuda/model_cuda_common.cuh"
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

/* The scratch: bf16 qkv (tokens x 3 dim), dO (tokens x dim), dqkv (tokens x 3 dim), then the workspace. */
struct scratch_parts {
    uint16_t *qkv16, *do16, *dqkv16;
    void *workspace;
};
scratch_parts split_scratch(float *scratch, const bfp8_attention_desc &d) {
    const int64_t elems = d.batch * d.seq * d.n_heads * d.head_dim;
    uint16_t *qkv16 = reinterpret_cast<uint16_t *>(scratch);
    const uintptr_t ws = (reinterpret_cast<uintptr_t>(qkv16 + 7 * elems) + 255) / 256 * 256;
    return {qkv16, qkv16 + 3 * elems, qkv16 + 4 * elems, reinterpret_cast<void *>(ws)};
}

/* O's bf16 copy in the layer's probs buffer, 16-byte aligned after the LSEs. */
uint16_t *o_copy(float *probs, const bfp8_attention_desc &d) {
    return reinterpret_cast<uint16_t *>(probs + (d.batch * d.n_heads * d.seq + 3) / 4 * 4);
}

} /* namespace */

extern "C" int model_cuda_flash_attention_supported(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

/* The flash path of attention_forward_cuda / _backward_cuda (attention_cuda.cu):
 * returns 0 when it does not apply (off, or another head size). */
int flash_attention_forward(model_ops_ctx *oc, float *out, float *probs, float *scratch, const float *qkv,
                            int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
    if (!oc->flash_attention || (head_dim != 64 && head_dim != 128)) return 0;
    const bfp8_attention_desc d = desc_of(batch, seq, heads, head_dim);
    const int64_t dim = heads * head_dim, tokens = batch * seq;
    const scratch_parts sp = split_scratch(scratch, d);
    uint16_t *o16 = o_copy(probs, d);
    to_bf16(oc, sp.qkv16, qkv, tokens * 3 * dim, "flash attention: qkv to bf16");
    failed_op(oc,
              bfp8_attention_forward_launch(stream(oc), num_sms(oc), &d, sp.qkv16, sp.qkv16 + dim, sp.qkv16 + 2 * dim,
                                            o16, probs),
              "flash attention forward");
    to_f32(oc, out, o16, tokens * dim, "flash attention: out to f32");
    return 1;
}

int flash_attention_backward(model_ops_ctx *oc, float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *probs, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
    if (!oc->flash_attention || (head_dim != 64 && head_dim != 128)) return 0;
    const bfp8_attention_desc d = desc_of(batch, seq, heads, head_dim);
    const int64_t dim = heads * head_dim, tokens = batch * seq;
    const scratch_parts sp = split_scratch(scratch, d);
    const size_t ws_bytes = bfp8_cuda_attention_backward_workspace_size(&d);
    const uintptr_t end = reinterpret_cast<uintptr_t>(scratch + flash_attention_scratch_floats(batch, seq, heads,
                                                                                                head_dim));
    if (reinterpret_cast<uintptr_t>(sp.workspace) + ws_bytes > end) {
        failed(oc, cudaErrorInvalidValue, "flash attention backward: scratch smaller than the workspace");
        return 1;
    }
    const uint16_t *o16 = o_copy(const_cast<float *>(probs), d);
    to_bf16(oc, sp.qkv16, qkv, tokens * 3 * dim, "flash attention: qkv to bf16");
    to_bf16(oc, sp.do16, dout, tokens * dim, "flash attention: dO to bf16");
    failed_op(oc,
              bfp8_attention_backward_launch(stream(oc), &d, sp.qkv16, sp.qkv16 + dim, sp.qkv16 + 2 * dim, o16, sp.do16,
                                             probs, sp.dqkv16, sp.dqkv16 + dim, sp.dqkv16 + 2 * dim, sp.workspace,
                                             bfp8_attn::kBwdDefault),
              "flash attention backward");
    to_f32(oc, dqkv, sp.dqkv16, tokens * 3 * dim, "flash attention: dqkv to f32");
    return 1;
}
