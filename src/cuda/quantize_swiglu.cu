/*
 * quantize_swiglu.cu - SwiGLU fused with the 1x128 quantizer, both layouts
 * (internal.h): the MLP of the fp8-blockwise trainer hands its hidden
 * activation (forward) and its gate-and-up gradient (backward) to the next
 * linear layer as codes and scales, never written in bf16 and read back.
 *
 *   forward   gate_up = [g | u] (tokens x 2 hidden, bf16)
 *             h = bf16(silu(g) u)                     -> h_q, h^T_q
 *   backward  dout = dh (tokens x hidden, bf16)
 *             dg, du = bf16(SwiGLU's gradients)       -> [dg | du]_q, [dg | du]^T_q
 *
 * A CTA owns a 128 x 128 tile of h (rows: tokens, columns: hidden units):
 * it stages the bf16 tiles of g and u (and dh) by cp.async, writes h (or dg
 * over g and du over u) in place as bf16, with the arithmetic of
 * nn/swiglu_math.h, and runs quantize_tile of the tile kernel
 * (quantize_tiles_kernel.cuh) on it; the backward's second tile (du) lands
 * `hidden` columns to the right of the first. So the codes and scales are
 * bit for bit those of the model's CUDA SwiGLU (swiglu_cuda.cu) followed by
 * bfp8_quantize_1x128. Elements outside x are staged as zeros, and SwiGLU
 * and its gradients keep zeros zero, so ragged tiles need nothing more.
 */
#include "cuda/quantize_launch.cuh"
#include "nn/swiglu_math.h"

using namespace bfp8_quant;

namespace {

constexpr int kStageBytes = kTile * kTile * 2; /* one bf16 tile */

struct swiglu_args {
    tile_args out;              /* the codes: x (and rows, cols) are h's (backward: dg's), tokens x hidden */
    const uint16_t *gate_up;    /* tokens x 2 hidden, leading dimension gate_up_ld */
    int64_t gate_up_ld;
    const uint16_t *dout;       /* backward: tokens x hidden, leading dimension dout_ld */
    int64_t dout_ld;
    int64_t hidden;
};

/* The args of one bf16 source: rows x cols at p, leading dimension ld. */
__device__ __forceinline__ tile_args source(const tile_args &shape, const uint16_t *p, int64_t ld) {
    tile_args a = shape;
    a.x = p;
    a.x_ld = ld;
    return a;
}

/* The 8 bf16 of 16-byte chunk `chunk` of a staged tile, widened. */
__device__ __forceinline__ void load8(const uint8_t *stage, int chunk, float (&v)[8]) {
    const uint4 w = reinterpret_cast<const uint4 *>(stage)[chunk];
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        v[2 * e] = bfp8_decode_bf16((uint16_t)(words[e] & 0xffffu));
        v[2 * e + 1] = bfp8_decode_bf16((uint16_t)(words[e] >> 16));
    }
}

/* 8 values rounded to bf16 as bfp8_encode_bf16 rounds them, by the hardware
 * conversion (one instruction a pair); only a NaN's bits may differ, and a
 * NaN makes its groups' codes 0x7f and their scales NaN either way. */
__device__ __forceinline__ void store8(uint8_t *stage, int chunk, const float (&v)[8]) {
    uint32_t words[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) words[e] = cvt_bf16x2(v[2 * e], v[2 * e + 1]);
    reinterpret_cast<uint4 *>(stage)[chunk] = make_uint4(words[0], words[1], words[2], words[3]);
}

template <bool kBackward, bool kAligned>
__global__ void __launch_bounds__(kThreads, 2) swiglu_quantize_kernel(const __grid_constant__ swiglu_args s) {
    constexpr int kStages = kBackward ? 3 : 2;
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t *const gate = smem, *const up = smem + kStageBytes, *const dh = smem + 2 * kStageBytes;
    uint8_t *const scratch = smem + kStages * kStageBytes;
    const tile_args g_src = source(s.out, s.gate_up, s.gate_up_ld);
    const tile_args u_src = source(s.out, s.gate_up + s.hidden, s.gate_up_ld);
    const tile_args d_src = source(s.out, s.dout, s.dout_ld);
    griddep_wait(); /* (a programmatic dependent launch: the previous kernel wrote gate_up / dout) */
    griddep_launch_dependents();
    for (int64_t tile = blockIdx.x; tile < s.out.num_tiles; tile += gridDim.x) {
        const tile_pos p = tile_at(s.out, tile);
        __syncthreads(); /* the previous tile is done with the stages */
        stage_tile<uint16_t, kAligned>(g_src, p, gate);
        stage_tile<uint16_t, kAligned>(u_src, p, up);
        if (kBackward) stage_tile<uint16_t, kAligned>(d_src, p, dh);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        /* SwiGLU in place: 2048 chunks of 8 per tile, 8 a thread */
#pragma unroll 2
        for (int chunk = (int)threadIdx.x; chunk < kTile * kTile / 8; chunk += kThreads) {
            float g[8], u[8];
            load8(gate, chunk, g);
            load8(up, chunk, u);
            if (kBackward) {
                float d[8], dg[8], du[8];
                load8(dh, chunk, d);
#pragma unroll
                for (int e = 0; e < 8; ++e) bfp8_swiglu_grads(g[e], u[e], d[e], &dg[e], &du[e]);
                store8(gate, chunk, dg);
                store8(up, chunk, du);
            } else {
                float h[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) h[e] = bfp8_swiglu_value(g[e], u[e]);
                store8(gate, chunk, h);
            }
        }
        __syncthreads();
        const bool full = kAligned && p.nr == kTile && p.nc == kTile;
        if (full)
            quantize_tile<uint16_t, false, true, true, kAligned, kAligned>(s.out, p, gate, scratch);
        else
            quantize_tile<uint16_t, false, true, true, kAligned, false>(s.out, p, gate, scratch);
        if (kBackward) { /* du: the same tile, hidden columns on (hidden is a multiple of 128) */
            tile_pos pu = p;
            pu.c0 += s.hidden;
            pu.tc += s.hidden / kTile;
            __syncthreads(); /* the first tile's transposed codes are out of the scratch */
            if (full)
                quantize_tile<uint16_t, false, true, true, kAligned, kAligned>(s.out, pu, up, scratch);
            else
                quantize_tile<uint16_t, false, true, true, kAligned, false>(s.out, pu, up, scratch);
        }
    }
}

template <bool kBackward, bool kAligned>
bfp8_status launch(bfp8_context *ctx, const swiglu_args &s) {
    auto kernel = swiglu_quantize_kernel<kBackward, kAligned>;
    constexpr int smem = (kBackward ? 3 : 2) * kStageBytes + kScratchBytes + kMultBytes;
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    BFP8_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (s.out.num_tiles == 0) return BFP8_OK;
    cudaLaunchAttribute pdl;
    const cudaLaunchConfig_t config = tile_launch_config(ctx, s.out.num_tiles, smem, &pdl);
    BFP8_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, s));
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

/* The arguments: `rows x hidden` tiles of h (dg); out_rows / out_cols as validated by src/ops. */
swiglu_args make_args(const bfp8_matrix *gate_up, const bfp8_matrix *dout, int64_t hidden, bfp8_qmatrix *out_rows,
                      bfp8_qmatrix *out_cols, const bfp8_quantize_options *options, bool *aligned) {
    const bfp8_matrix h = {NULL, BFP8_BF16, gate_up->rows, hidden, hidden};
    swiglu_args s = {};
    s.out = make_tile_args(&h, out_rows, out_cols, options, aligned);
    s.gate_up = static_cast<const uint16_t *>(gate_up->data);
    s.gate_up_ld = gate_up->ld;
    s.hidden = hidden;
    *aligned = *aligned && (uintptr_t)s.gate_up % 16 == 0 && gate_up->ld % 8 == 0 && hidden % 8 == 0;
    if (dout) {
        s.dout = static_cast<const uint16_t *>(dout->data);
        s.dout_ld = dout->ld;
        *aligned = *aligned && (uintptr_t)s.dout % 16 == 0 && dout->ld % 8 == 0;
    }
    return s;
}

} /* namespace */

bfp8_status bfp8_cuda_swiglu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                            bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    bool aligned;
    const swiglu_args s = make_args(gate_up, NULL, gate_up->cols / 2, out_rows, out_cols, options, &aligned);
    return aligned ? launch<false, true>(ctx, s) : launch<false, false>(ctx, s);
}

bfp8_status bfp8_cuda_swiglu_backward_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *dout,
                                                     const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                                     bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    bool aligned;
    const swiglu_args s = make_args(gate_up, dout, dout->cols, out_rows, out_cols, options, &aligned);
    return aligned ? launch<true, true>(ctx, s) : launch<true, false>(ctx, s);
}
