/*
 * elementwise_cuda.cu - element-wise copies, sums and bf16 <-> f32
 * conversions of flat arrays on the GPU (the bf16 encoder and decoder of
 * formats.h: the CPU's bits). See model_kernels.cuh.
 */
#include "formats/formats.h"

#include "model/cuda/model_kernels.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

/* formats.h's encoder itself (round to nearest even, NaN -> 0x7fff): the
 * CPU's bits by construction. */
__global__ void f32_to_bf16_kernel(uint16_t *__restrict__ dst, const float *__restrict__ src, int64_t n,
                                   vec4_split split) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const int64_t at = split.head + 4 * i;
        const floats<4> s = load<4>(src + at);
        uint2 packed;
        packed.x = (uint32_t)bfp8_encode_bf16(s.v[0]) | (uint32_t)bfp8_encode_bf16(s.v[1]) << 16;
        packed.y = (uint32_t)bfp8_encode_bf16(s.v[2]) | (uint32_t)bfp8_encode_bf16(s.v[3]) << 16;
        *reinterpret_cast<uint2 *>(dst + at) = packed;
    }
    for (int64_t i = first; i < split.head; i += stride) dst[i] = bfp8_encode_bf16(src[i]);
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride) dst[i] = bfp8_encode_bf16(src[i]);
}

__global__ void add_f32_kernel(float *__restrict__ dst, const float *__restrict__ src, int64_t n, vec4_split split) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const int64_t at = split.head + 4 * i;
        floats<4> d = load<4>(dst + at);
        const floats<4> s = load<4>(src + at);
#pragma unroll
        for (int e = 0; e < 4; ++e) d.v[e] += s.v[e];
        store<4>(dst + at, d);
    }
    for (int64_t i = first; i < split.head; i += stride) dst[i] += src[i];
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride) dst[i] += src[i];
}

__global__ void bf16_to_f32_kernel(float *__restrict__ dst, const uint16_t *__restrict__ src, int64_t n,
                                   vec4_split split, int add) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const int64_t at = split.head + 4 * i;
        const uint2 packed = *reinterpret_cast<const uint2 *>(src + at);
        floats<4> d;
        d.v[0] = bfp8_decode_bf16((uint16_t)(packed.x & 0xffffu));
        d.v[1] = bfp8_decode_bf16((uint16_t)(packed.x >> 16));
        d.v[2] = bfp8_decode_bf16((uint16_t)(packed.y & 0xffffu));
        d.v[3] = bfp8_decode_bf16((uint16_t)(packed.y >> 16));
        if (add) {
            const floats<4> old = load<4>(dst + at);
#pragma unroll
            for (int e = 0; e < 4; ++e) d.v[e] = old.v[e] + d.v[e];
        }
        store<4>(dst + at, d);
    }
    for (int64_t i = first; i < split.head; i += stride)
        dst[i] = add ? dst[i] + bfp8_decode_bf16(src[i]) : bfp8_decode_bf16(src[i]);
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride)
        dst[i] = add ? dst[i] + bfp8_decode_bf16(src[i]) : bfp8_decode_bf16(src[i]);
}

/* dst = a + f32(b): a residual plus a bf16 linear layer's output, one pass
 * instead of a copy and an add. */
__global__ void add_bf16_f32_kernel(float *dst, const float *a, const uint16_t *__restrict__ b, int64_t n,
                                    vec4_split split) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first; i < split.vecs; i += stride) {
        const int64_t at = split.head + 4 * i;
        floats<4> d = load<4>(a + at);
        const floats<4> v = load<4>(b + at);
#pragma unroll
        for (int e = 0; e < 4; ++e) d.v[e] += v.v[e];
        store<4>(dst + at, d);
    }
    for (int64_t i = first; i < split.head; i += stride) dst[i] = a[i] + bfp8_decode_bf16(b[i]);
    for (int64_t i = split.head + 4 * split.vecs + first; i < n; i += stride) dst[i] = a[i] + bfp8_decode_bf16(b[i]);
}

} /* namespace */

extern "C" void copy_f32_cuda(model_ops_ctx *oc, float *dst, const float *src, int64_t n) {
    if (n <= 0 || dst == src) return;
    failed(oc, cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, stream(oc)), "copy_f32");
}

extern "C" void zero_f32_cuda(model_ops_ctx *oc, float *dst, int64_t n) {
    if (n <= 0) return;
    failed(oc, cudaMemsetAsync(dst, 0, (size_t)n * sizeof(float), stream(oc)), "zero_f32");
}

extern "C" void add_f32_cuda(model_ops_ctx *oc, float *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    const void *ptrs[] = {dst, src};
    const int sizes[] = {4, 4};
    const vec4_split split = split_for_vec4(n, ptrs, sizes, 2);
    add_f32_kernel<<<grid_for(split.vecs > 0 ? split.vecs : n, kThreads), kThreads, 0, stream(oc)>>>(dst, src, n,
                                                                                                     split);
    check_launch(oc, "add_f32");
}

extern "C" void f32_to_bf16_cuda(model_ops_ctx *oc, uint16_t *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    const void *ptrs[] = {dst, src};
    const int sizes[] = {2, 4};
    const vec4_split split = split_for_vec4(n, ptrs, sizes, 2);
    f32_to_bf16_kernel<<<grid_for(split.vecs > 0 ? split.vecs : n, kThreads), kThreads, 0, stream(oc)>>>(dst, src, n,
                                                                                                         split);
    check_launch(oc, "f32_to_bf16");
}

extern "C" void bf16_to_f32_cuda(model_ops_ctx *oc, float *dst, const uint16_t *src, int64_t n, int add) {
    if (n <= 0) return;
    const void *ptrs[] = {dst, src};
    const int sizes[] = {4, 2};
    const vec4_split split = split_for_vec4(n, ptrs, sizes, 2);
    bf16_to_f32_kernel<<<grid_for(split.vecs > 0 ? split.vecs : n, kThreads), kThreads, 0, stream(oc)>>>(dst, src, n,
                                                                                                         split, add);
    check_launch(oc, "bf16_to_f32");
}

extern "C" void add_bf16_f32_cuda(model_ops_ctx *oc, float *dst, const float *a, const uint16_t *b, int64_t n) {
    if (n <= 0) return;
    const void *ptrs[] = {dst, a, b};
    const int sizes[] = {4, 4, 2};
    const vec4_split split = split_for_vec4(n, ptrs, sizes, 3);
    add_bf16_f32_kernel<<<grid_for(split.vecs > 0 ? split.vecs : n, kThreads), kThreads, 0, stream(oc)>>>(dst, a, b, n,
                                                                                                          split);
    check_launch(oc, "add_bf16_f32");
}
