/*
 * model_kernels.cuh - what the model's CUDA layers share (embedding_cuda.cu,
 * rmsnorm_cuda.cu, rope_cuda.cu, swiglu_cuda.cu, cross_entropy_cuda.cu,
 * adamw_cuda.cu, matmul_cuda.cu, elementwise_cuda.cu; attention is
 * attention_cuda.cu): the CUDA versions (model_ops.h) of embedding.c,
 * rmsnorm.c, rope.c, swiglu.c, cross_entropy.c, adamw.c, matmul.c and the
 * copies and bf16 conversions of model_ops.c. Same signatures, same
 * layouts, same result within fp32 rounding.
 *
 * Every function enqueues on its model_ops_ctx's stream and returns at once,
 * except loss_mean_cuda and gradient_global_norm_cuda, which
 * wait for their number. Failures are kept in the model_ops_ctx
 * (model_cuda_common.cuh) and reported by model_ops_status().
 *
 * Shapes of the kernels:
 *   - per-row work (rmsnorm, cross-entropy, rope, swiglu, embedding): blocks
 *     over rows (x, grid-stride) and column chunks (y); a row's reduction is
 *     one block, so no atomics;
 *   - flat work (adamw, norm, conversions): grid-stride loops;
 *   - four floats per access (float4) where every pointer and row length
 *     allows it, else one (the kernels are templated on the width).
 *
 * Everything is deterministic: the same inputs give the same bits on every
 * run. Sums over tokens (the RMSNorm weight gradient, the global norm) go
 * through fixed per-block partials summed in a fixed order; the embedding
 * gradient sorts the token ids and adds each id's rows in token order, which
 * is also exactly the CPU's order, so that one is bit-exact with the CPU.
 *
 * Built with the project's CUDA flags (sm_90a, ptxas spills are errors).
 */
#pragma once

#include <limits.h>
#include <stdint.h>

#include "formats/formats.h"
#include "model/cuda/model_cuda_common.cuh"

namespace bfp8_model_cuda {

constexpr int kWarpSize = 32;
constexpr int kThreads = 256;        /* flat and column-chunk kernels */
constexpr int kMaxRowThreads = 512;  /* a block that reduces one row */
constexpr int64_t kMaxGridX = INT_MAX;
constexpr int64_t kMaxGridY = 65535;

inline size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

/* ------------------------------------------------------------------------ */
/* Vector accesses and launch shapes                                         */

template <int V> struct floats {
    float v[V];
};

template <int V> __device__ __forceinline__ floats<V> load(const float *p) {
    floats<V> r;
    if constexpr (V == 4) {
        const float4 q = *reinterpret_cast<const float4 *>(p);
        r.v[0] = q.x;
        r.v[1] = q.y;
        r.v[2] = q.z;
        r.v[3] = q.w;
    } else {
        static_assert(V == 1, "widths 1 and 4");
        r.v[0] = *p;
    }
    return r;
}

template <int V> __device__ __forceinline__ void store(float *p, const floats<V> &r) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4 *>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    } else {
        static_assert(V == 1, "widths 1 and 4");
        *p = r.v[0];
    }
}

/* The same from and to bf16 (V of them, 8 bytes for V = 4): widened exactly,
 * rounded as formats.h's bfp8_encode_bf16 (the CPU's bits). */
template <int V> __device__ __forceinline__ floats<V> load(const uint16_t *p) {
    floats<V> r;
    if constexpr (V == 4) {
        const uint2 u = *reinterpret_cast<const uint2 *>(p);
        r.v[0] = __uint_as_float(u.x << 16);
        r.v[1] = __uint_as_float(u.x & 0xffff0000u);
        r.v[2] = __uint_as_float(u.y << 16);
        r.v[3] = __uint_as_float(u.y & 0xffff0000u);
    } else {
        static_assert(V == 1, "widths 1 and 4");
        r.v[0] = bfp8_decode_bf16(*p);
    }
    return r;
}

template <int V> __device__ __forceinline__ void store(uint16_t *p, const floats<V> &r) {
    if constexpr (V == 4) {
        uint2 u;
        u.x = (uint32_t)bfp8_encode_bf16(r.v[0]) | (uint32_t)bfp8_encode_bf16(r.v[1]) << 16;
        u.y = (uint32_t)bfp8_encode_bf16(r.v[2]) | (uint32_t)bfp8_encode_bf16(r.v[3]) << 16;
        *reinterpret_cast<uint2 *>(p) = u;
    } else {
        static_assert(V == 1, "widths 1 and 4");
        *p = bfp8_encode_bf16(r.v[0]);
    }
}

inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Flat arrays that may start anywhere (a tensor inside the parameter
 * buffer): elements [0, head) and [head + 4 vecs, n) one at a time, the rest
 * four at a time. All arrays must reach a 16-byte boundary at the same
 * element, else everything goes one at a time (head = n, vecs = 0). */
struct vec4_split {
    int64_t head, vecs;
};

inline vec4_split split_for_vec4(int64_t n, const void *const *ptrs, const int *elem_bytes, int count) {
    int64_t head = -1;
    for (int i = 0; i < count; ++i) {
        const uintptr_t addr = (uintptr_t)ptrs[i];
        const int bytes = elem_bytes[i], boundary = 4 * bytes;
        if (addr % (uintptr_t)bytes != 0) return {n, 0};
        const int64_t h = (int64_t)((boundary - addr % (uintptr_t)boundary) % (uintptr_t)boundary) / bytes;
        if (head >= 0 && h != head) return {n, 0};
        head = h;
    }
    if (head > n) head = n;
    return {head, (n - head) / 4};
}

/* Threads of a block that reduces a row of `items` accesses: a multiple of
 * the warp size (block_reduce needs full warps), at most kMaxRowThreads. */
inline int row_threads(int64_t items) {
    const int64_t t = (items + kWarpSize - 1) / kWarpSize * kWarpSize;
    return (int)(t < kWarpSize ? kWarpSize : t > kMaxRowThreads ? kMaxRowThreads : t);
}

/* Rows on x (grid-stride beyond kMaxGridX), chunks of `threads` accesses of
 * a row on y (grid-stride beyond kMaxGridY). */
inline dim3 rows_by_chunks(int64_t rows, int64_t items, int threads) {
    const int64_t chunks = (items + threads - 1) / threads;
    return dim3((unsigned)(rows < kMaxGridX ? rows : kMaxGridX),
                (unsigned)(chunks < 1 ? 1 : chunks < kMaxGridY ? chunks : kMaxGridY), 1);
}

/* Threads of a column-chunk kernel: enough for a short row, kThreads for a long one. */
inline int chunk_threads(int64_t items) {
    const int64_t t = (items + kWarpSize - 1) / kWarpSize * kWarpSize;
    return (int)(t < kWarpSize ? kWarpSize : t > kThreads ? kThreads : t);
}

/* ------------------------------------------------------------------------ */
/* Block reductions                                                          */

struct sum_op {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};

struct max_op {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/* Reduce over the block (blockDim.x a multiple of 32, every thread calling):
 * warps by butterfly, then every thread combines the warp results in warp
 * order, so all threads get the same value and it is the same on every run. */
template <typename T, typename Op> __device__ __forceinline__ T block_reduce(T v, Op op) {
    __shared__ T warp_results[kMaxRowThreads / kWarpSize];
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    __syncthreads(); /* a previous call's readers are done with warp_results */
    if (threadIdx.x % kWarpSize == 0) warp_results[threadIdx.x / kWarpSize] = v;
    __syncthreads();
    v = warp_results[0];
    for (int w = 1; w < (int)(blockDim.x / kWarpSize); ++w) v = op(v, warp_results[w]);
    return v;
}

} /* namespace bfp8_model_cuda */
