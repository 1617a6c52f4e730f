/*
 * convert.cu - bfp8_cuda_convert (element-wise dtype conversion of a matrix,
 * any pair of dtypes) and bfp8_cuda_dequantize (out = code * scale, 1x128 or
 * 128x128 scales, f32 or bf16 out).
 *
 * Both go through fp32, like src/cpu: decoding is formats.h's (exact, the
 * same code the CPU runs), encoding is the hardware's cvt.rn(.satfinite),
 * which tests/quantize checks bit for bit against formats.h over all
 * 2^32 inputs. A thread handles 8 consecutive elements of a row, with one
 * vector access each way where the pointers and leading dimensions allow,
 * else scalar accesses (ragged row ends, odd layouts).
 */
#include "cuda/cuda_common.cuh"
#include "cuda/hopper.cuh"
#include "formats/formats.h"

namespace {

constexpr int kThreads = 256;
constexpr int kElems = 8; /* per thread and step; divides 128, so one scale per step */

/* ------------------------------------------------------------------------ */
/* Formats: storage type, decode to fp32, encode pairs from fp32             */

template <bfp8_dtype D> struct fmt;

template <> struct fmt<BFP8_F32> {
    using T = uint32_t;
    static __device__ __forceinline__ float decode(T s) { return __uint_as_float(s); }
    static __device__ __forceinline__ void encode2(float a, float b, T &x, T &y) {
        x = __float_as_uint(a);
        y = __float_as_uint(b);
    }
};

template <> struct fmt<BFP8_BF16> {
    using T = uint16_t;
    static __device__ __forceinline__ float decode(T s) { return bfp8_decode_bf16(s); }
    static __device__ __forceinline__ void encode2(float a, float b, T &x, T &y) {
        const uint32_t d = bfp8_sm90::cvt_bf16x2(a, b);
        x = (T)(d & 0xffffu);
        y = (T)(d >> 16);
    }
};

template <> struct fmt<BFP8_E4M3> {
    using T = uint8_t;
    static __device__ __forceinline__ float decode(T s) { return bfp8_decode_e4m3(s); }
    static __device__ __forceinline__ void encode2(float a, float b, T &x, T &y) {
        const uint16_t d = (uint16_t)bfp8_sm90::cvt_e4m3x2(a, b);
        x = (T)(d & 0xffu);
        y = (T)(d >> 8);
    }
};

template <> struct fmt<BFP8_E5M2> {
    using T = uint8_t;
    static __device__ __forceinline__ float decode(T s) { return bfp8_decode_e5m2(s); }
    static __device__ __forceinline__ void encode2(float a, float b, T &x, T &y) {
        const uint16_t d = (uint16_t)bfp8_sm90::cvt_e5m2x2(a, b);
        x = (T)(d & 0xffu);
        y = (T)(d >> 8);
    }
};

/* ------------------------------------------------------------------------ */
/* 8 elements of a row: vector (8 * sizeof(T) bytes) or n scalar accesses     */

template <typename T> struct words8 {
    static constexpr int kWords = 2 * (int)sizeof(T); /* 8 elements in 32-bit words */
    uint32_t w[kWords];
};

template <typename T> __device__ __forceinline__ void load8(const T *p, int n, bool vec, T (&t)[8]) {
    if (vec && n == kElems) {
        words8<T> v;
        if (sizeof(T) == 1) {
            const uint2 a = *reinterpret_cast<const uint2 *>(p);
            v.w[0] = a.x; v.w[1] = a.y;
        } else {
#pragma unroll
            for (int h = 0; h < words8<T>::kWords / 4; ++h) {
                const uint4 a = reinterpret_cast<const uint4 *>(p)[h];
                v.w[4 * h] = a.x; v.w[4 * h + 1] = a.y; v.w[4 * h + 2] = a.z; v.w[4 * h + 3] = a.w;
            }
        }
        constexpr int kPerWord = 4 / (int)sizeof(T);
#pragma unroll
        for (int e = 0; e < kElems; ++e)
            t[e] = (T)(v.w[e / kPerWord] >> (8 * sizeof(T) * (e % kPerWord)));
    } else {
#pragma unroll
        for (int e = 0; e < kElems; ++e) t[e] = e < n ? p[e] : (T)0;
    }
}

template <typename T> __device__ __forceinline__ void store8(T *p, int n, bool vec, const T (&t)[8]) {
    if (vec && n == kElems) {
        constexpr int kPerWord = 4 / (int)sizeof(T);
        words8<T> v;
#pragma unroll
        for (int i = 0; i < words8<T>::kWords; ++i) v.w[i] = 0;
#pragma unroll
        for (int e = 0; e < kElems; ++e)
            v.w[e / kPerWord] |= (uint32_t)t[e] << (8 * sizeof(T) * (e % kPerWord));
        if (sizeof(T) == 1) {
            *reinterpret_cast<uint2 *>(p) = make_uint2(v.w[0], v.w[1]);
        } else {
#pragma unroll
            for (int h = 0; h < words8<T>::kWords / 4; ++h)
                reinterpret_cast<uint4 *>(p)[h] =
                    make_uint4(v.w[4 * h], v.w[4 * h + 1], v.w[4 * h + 2], v.w[4 * h + 3]);
        }
    } else {
#pragma unroll
        for (int e = 0; e < kElems; ++e)
            if (e < n) p[e] = t[e];
    }
}

/* Vector access is possible for every 8-element step of a matrix. */
static bool vector_ok(const void *p, int64_t ld, size_t size) {
    const size_t bytes = kElems * size < 16 ? kElems * size : 16;
    return (uintptr_t)p % bytes == 0 && (size_t)ld * size % bytes == 0;
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */

template <bfp8_dtype S, bfp8_dtype D>
__global__ void __launch_bounds__(kThreads)
    convert_kernel(const void *src_, int64_t src_ld, void *dst_, int64_t dst_ld, int64_t rows,
                   int64_t cols, int64_t steps_per_row, bool vec) {
    using TS = typename fmt<S>::T;
    using TD = typename fmt<D>::T;
    const TS *src = static_cast<const TS *>(src_);
    TD *dst = static_cast<TD *>(dst_);
    const int64_t total = rows * steps_per_row;
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * kThreads) {
        const int64_t r = i / steps_per_row, c = (i - r * steps_per_row) * kElems;
        const int n = (int)min((int64_t)kElems, cols - c);
        TS in[8];
        load8(src + r * src_ld + c, n, vec, in);
        TD out[8];
#pragma unroll
        for (int e = 0; e < kElems; e += 2)
            fmt<D>::encode2(fmt<S>::decode(in[e]), fmt<S>::decode(in[e + 1]), out[e], out[e + 1]);
        store8(dst + r * dst_ld + c, n, vec, out);
    }
}

template <bfp8_dtype D>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(const uint8_t *codes, int64_t ld, const float *scales, int64_t scale_ld,
                      bool per_row, void *out_, int64_t out_ld, int64_t rows, int64_t cols,
                      int64_t steps_per_row, bool vec) {
    using TD = typename fmt<D>::T;
    TD *out = static_cast<TD *>(out_);
    const int64_t total = rows * steps_per_row;
    for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * kThreads) {
        const int64_t r = i / steps_per_row, c = (i - r * steps_per_row) * kElems;
        const int n = (int)min((int64_t)kElems, cols - c);
        const float scale = per_row ? scales[(c / 128) * scale_ld + r]
                                    : scales[(r / 128) * scale_ld + c / 128];
        uint8_t q[8];
        load8(codes + r * ld + c, n, vec, q);
        TD o[8];
#pragma unroll
        for (int e = 0; e < kElems; e += 2)
            fmt<D>::encode2(__fmul_rn(bfp8_decode_e4m3(q[e]), scale),
                            __fmul_rn(bfp8_decode_e4m3(q[e + 1]), scale), o[e], o[e + 1]);
        store8(out + r * out_ld + c, n, vec, o);
    }
}

static int grid_for(const bfp8_context *ctx, int64_t total) {
    const int64_t blocks = bfp8_cdiv(total, kThreads);
    const int64_t cap = (int64_t)bfp8_cuda_state_of(ctx)->num_sms * 16;
    return (int)(blocks < cap ? blocks : cap);
}

template <bfp8_dtype S, bfp8_dtype D>
static bfp8_status launch_convert(bfp8_context *ctx, const bfp8_matrix *src, bfp8_matrix *dst) {
    const int64_t steps = bfp8_cdiv(src->cols, kElems);
    const bool vec = vector_ok(src->data, src->ld, bfp8_dtype_size(S)) &&
                     vector_ok(dst->data, dst->ld, bfp8_dtype_size(D));
    convert_kernel<S, D><<<grid_for(ctx, src->rows * steps), kThreads, 0, bfp8_stream_of(ctx)>>>(
        src->data, src->ld, dst->data, dst->ld, src->rows, src->cols, steps, vec);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

template <bfp8_dtype S>
static bfp8_status convert_from(bfp8_context *ctx, const bfp8_matrix *src, bfp8_matrix *dst) {
    switch (dst->dtype) {
    case BFP8_F32: return launch_convert<S, BFP8_F32>(ctx, src, dst);
    case BFP8_BF16: return launch_convert<S, BFP8_BF16>(ctx, src, dst);
    case BFP8_E4M3: return launch_convert<S, BFP8_E4M3>(ctx, src, dst);
    case BFP8_E5M2: return launch_convert<S, BFP8_E5M2>(ctx, src, dst);
    }
    return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_convert: unknown dtype %d", (int)dst->dtype);
}

} /* namespace */

/* ------------------------------------------------------------------------ */

bfp8_status bfp8_cuda_convert(bfp8_context *ctx, const bfp8_matrix *src, bfp8_matrix *dst) {
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    /* f32 -> f32 is a copy. The narrower same-dtype pairs go through the
     * kernel like the CPU reference does: their NaNs come out canonical. */
    if (src->dtype == BFP8_F32 && dst->dtype == BFP8_F32) {
        const size_t size = bfp8_dtype_size(src->dtype);
        BFP8_CUDA_TRY(cudaMemcpy2DAsync(dst->data, (size_t)dst->ld * size, src->data,
                                        (size_t)src->ld * size, (size_t)src->cols * size,
                                        (size_t)src->rows, cudaMemcpyDeviceToDevice,
                                        bfp8_stream_of(ctx)));
        return BFP8_OK;
    }
    switch (src->dtype) {
    case BFP8_F32: return convert_from<BFP8_F32>(ctx, src, dst);
    case BFP8_BF16: return convert_from<BFP8_BF16>(ctx, src, dst);
    case BFP8_E4M3: return convert_from<BFP8_E4M3>(ctx, src, dst);
    case BFP8_E5M2: return convert_from<BFP8_E5M2>(ctx, src, dst);
    }
    return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_convert: unknown dtype %d", (int)src->dtype);
}

bfp8_status bfp8_cuda_dequantize(bfp8_context *ctx, const bfp8_qmatrix *q, bfp8_matrix *out) {
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    const int64_t steps = bfp8_cdiv(q->cols, kElems);
    const bool per_row = q->granularity == BFP8_GRAN_1X128;
    const bool vec = vector_ok(q->data, q->ld, 1) &&
                     vector_ok(out->data, out->ld, bfp8_dtype_size(out->dtype));
    const int grid = grid_for(ctx, q->rows * steps);
    if (out->dtype == BFP8_F32)
        dequantize_kernel<BFP8_F32><<<grid, kThreads, 0, bfp8_stream_of(ctx)>>>(
            q->data, q->ld, q->scales, q->scale_ld, per_row, out->data, out->ld, q->rows, q->cols,
            steps, vec);
    else
        dequantize_kernel<BFP8_BF16><<<grid, kThreads, 0, bfp8_stream_of(ctx)>>>(
            q->data, q->ld, q->scales, q->scale_ld, per_row, out->data, out->ld, q->rows, q->cols,
            steps, vec);
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}
