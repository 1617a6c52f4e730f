/*
 * bench_device.cu - see bench_device.h. Built into bfp8_bench_util, which
 * bench_gemm and bench_linear link.
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdlib.h>

#include "bench_device.h"

static const int kThreads = 256;

static int grid_for(int64_t n) {
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    return (int)(blocks < 132 * 64 ? (blocks > 0 ? blocks : 1) : 132 * 64);
}

__device__ static inline uint64_t mix64(uint64_t z) { /* splitmix64 finalizer */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ static inline float uniform_at(uint64_t seed, uint64_t i) { /* [0, 1) */
    return (float)(mix64(seed * 0x9e3779b97f4a7c15ull + i + 1) >> 40) * 0x1.0p-24f;
}

__device__ static inline float normal_at(uint64_t seed, uint64_t i) { /* Box-Muller */
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + i + 1);
    const float u1 = (float)((h >> 40) + 1) * 0x1.0p-24f; /* (0, 1] */
    const float u2 = (float)(h & 0xffffffull) * 0x1.0p-24f;
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

__device__ static inline float bf16_bits_to_f32(uint16_t bits) {
    return __uint_as_float((uint32_t)bits << 16);
}

__device__ static inline uint16_t f32_to_bf16_bits(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

/* ------------------------------------------------------------------------ */

__global__ void fill_e4m3_kernel(uint8_t *data, int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols, c = i - r * cols;
        data[r * ld + c] = __nv_cvt_float_to_fp8(normal_at(seed, (uint64_t)i) * 160.0f,
                                                 __NV_SATFINITE, __NV_E4M3);
    }
}

__global__ void fill_scales_kernel(float *scales, int64_t n, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        scales[i] = (2.8f / 448.0f) * exp2f(4.0f * uniform_at(seed, (uint64_t)i) - 2.0f);
}

__global__ void fill_normal_kernel(void *x, int is_f32, int64_t rows, int64_t cols, int64_t ld,
                                   float scale, uint64_t seed) {
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols, c = i - r * cols;
        const float v = normal_at(seed, (uint64_t)i) * scale;
        if (is_f32) ((float *)x)[r * ld + c] = v;
        else ((uint16_t *)x)[r * ld + c] = f32_to_bf16_bits(v);
    }
}

__global__ void dequantize_bf16_kernel(const uint8_t *data, int64_t ld, const float *scales,
                                       int64_t scale_ld, int blocks_128x128, int64_t rows,
                                       int64_t cols, uint16_t *out, int64_t ld_out, int transposed) {
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols, c = i - r * cols;
        const float scale = blocks_128x128 ? scales[(r / 128) * scale_ld + c / 128]
                                           : scales[(c / 128) * scale_ld + r];
        __nv_fp8_e4m3 code;
        code.__x = data[r * ld + c];
        out[transposed ? c * ld_out + r : r * ld_out + c] = f32_to_bf16_bits((float)code * scale);
    }
}

extern "C" cudaError_t bench_fill_e4m3(uint8_t *data, int64_t rows, int64_t cols, int64_t ld,
                                       uint64_t seed, cudaStream_t stream) {
    fill_e4m3_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(data, rows, cols, ld, seed);
    return cudaGetLastError();
}

extern "C" cudaError_t bench_fill_scales(float *scales, int64_t n, uint64_t seed, cudaStream_t stream) {
    fill_scales_kernel<<<grid_for(n), kThreads, 0, stream>>>(scales, n, seed);
    return cudaGetLastError();
}

extern "C" cudaError_t bench_fill_normal(void *x, bfp8_dtype dtype, int64_t rows, int64_t cols,
                                         int64_t ld, float scale, uint64_t seed, cudaStream_t stream) {
    fill_normal_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(
        x, dtype == BFP8_F32, rows, cols, ld, scale, seed);
    return cudaGetLastError();
}

extern "C" cudaError_t bench_dequantize_bf16(const bfp8_qmatrix *q, uint16_t *out, int64_t ld_out,
                                             int transposed, cudaStream_t stream) {
    dequantize_bf16_kernel<<<grid_for(q->rows * q->cols), kThreads, 0, stream>>>(
        q->data, q->ld, q->scales, q->scale_ld, q->granularity == BFP8_GRAN_128X128, q->rows,
        q->cols, out, ld_out, transposed);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------ */
/* Comparison: one block per 128x128 tile, sums in fp64.                    */

enum { kTileSums = 4 }; /* signal, noise, sum x*y, sum y*y */

__device__ static inline float load_f32(const void *base, int is_f32, int64_t index) {
    return is_f32 ? ((const float *)base)[index] : bf16_bits_to_f32(((const uint16_t *)base)[index]);
}

__device__ static inline double warp_sum(double v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

__global__ void __launch_bounds__(256) compare_tiles_kernel(
    const void *ref, int ref_f32, int64_t ld_ref, const void *out, int out_f32, int64_t ld_out,
    int64_t rows, int64_t cols, double *tile_sums, unsigned long long *tile_nonfinite) {
    const int64_t r0 = (int64_t)blockIdx.y * 128, c0 = (int64_t)blockIdx.x * 128;
    const int nr = (int)(rows - r0 < 128 ? rows - r0 : 128);
    const int nc = (int)(cols - c0 < 128 ? cols - c0 : 128);
    double sums[kTileSums] = {0.0, 0.0, 0.0, 0.0};
    unsigned long long nonfinite = 0;
    for (int i = threadIdx.x; i < 128 * 128; i += blockDim.x) {
        const int r = i >> 7, c = i & 127;
        if (r >= nr || c >= nc) continue;
        const float x = load_f32(ref, ref_f32, (r0 + r) * ld_ref + c0 + c);
        const float y = load_f32(out, out_f32, (r0 + r) * ld_out + c0 + c);
        if (!isfinite(x) || !isfinite(y)) {
            ++nonfinite;
            continue;
        }
        const double dx = x, dy = y;
        sums[0] += dx * dx;
        sums[1] += (dx - dy) * (dx - dy);
        sums[2] += dx * dy;
        sums[3] += dy * dy;
    }
    __shared__ double warp_sums[kTileSums][8];
    __shared__ unsigned long long warp_nonfinite[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int j = 0; j < kTileSums; ++j) sums[j] = warp_sum(sums[j]);
    for (int offset = 16; offset > 0; offset >>= 1)
        nonfinite += __shfl_down_sync(0xffffffffu, nonfinite, offset);
    if (lane == 0) {
        for (int j = 0; j < kTileSums; ++j) warp_sums[j][warp] = sums[j];
        warp_nonfinite[warp] = nonfinite;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const int64_t tile = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
        unsigned long long total_nonfinite = 0;
        for (int j = 0; j < kTileSums; ++j) {
            double total = 0.0;
            for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += warp_sums[j][w];
            tile_sums[tile * kTileSums + j] = total;
        }
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total_nonfinite += warp_nonfinite[w];
        tile_nonfinite[tile] = total_nonfinite;
    }
}

static double db_of(double signal, double noise) {
    if (noise == 0.0) return INFINITY;
    if (signal == 0.0) return -INFINITY;
    return 10.0 * log10(signal / noise);
}

extern "C" cudaError_t bench_compare(const void *ref, bfp8_dtype ref_dtype, int64_t ld_ref,
                                     const void *out, bfp8_dtype out_dtype, int64_t ld_out,
                                     int64_t rows, int64_t cols, cudaStream_t stream,
                                     bench_comparison *result) {
    const int64_t tiles_r = (rows + 127) / 128, tiles_c = (cols + 127) / 128;
    const int64_t tiles = tiles_r * tiles_c;
    if (tiles_r > 65535 || tiles_c > 2147483647) return cudaErrorInvalidValue;
    double *sums_dev = NULL;
    unsigned long long *nonfinite_dev = NULL;
    double *sums = (double *)malloc((size_t)tiles * kTileSums * sizeof(double));
    unsigned long long *nonfinite = (unsigned long long *)malloc((size_t)tiles * sizeof(unsigned long long));
    cudaError_t err = sums && nonfinite ? cudaSuccess : cudaErrorMemoryAllocation;
    if (err == cudaSuccess) err = cudaMalloc((void **)&sums_dev, (size_t)tiles * kTileSums * sizeof(double));
    if (err == cudaSuccess) err = cudaMalloc((void **)&nonfinite_dev, (size_t)tiles * sizeof(unsigned long long));
    if (err == cudaSuccess) {
        compare_tiles_kernel<<<dim3((unsigned)tiles_c, (unsigned)tiles_r), kThreads, 0, stream>>>(
            ref, ref_dtype == BFP8_F32, ld_ref, out, out_dtype == BFP8_F32, ld_out, rows, cols,
            sums_dev, nonfinite_dev);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(sums, sums_dev, (size_t)tiles * kTileSums * sizeof(double),
                              cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(nonfinite, nonfinite_dev, (size_t)tiles * sizeof(unsigned long long),
                              cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err == cudaSuccess) {
        double total[kTileSums] = {0.0, 0.0, 0.0, 0.0};
        result->nonfinite = 0;
        result->worst_tile_db = INFINITY;
        result->worst_tile_row = result->worst_tile_col = 0;
        for (int64_t t = 0; t < tiles; ++t) {
            for (int j = 0; j < kTileSums; ++j) total[j] += sums[t * kTileSums + j];
            result->nonfinite += (int64_t)nonfinite[t];
            const double db = nonfinite[t] ? -INFINITY
                                           : db_of(sums[t * kTileSums], sums[t * kTileSums + 1]);
            if (db < result->worst_tile_db || t == 0) {
                result->worst_tile_db = db;
                result->worst_tile_row = t / tiles_c;
                result->worst_tile_col = t % tiles_c;
            }
        }
        result->overall_db = db_of(total[0], total[1]);
        const double denominator = total[0] + total[3];
        result->calc_diff = denominator == 0.0 ? 0.0 : 1.0 - 2.0 * total[2] / denominator;
    }
    if (sums_dev) cudaFree(sums_dev);
    if (nonfinite_dev) cudaFree(nonfinite_dev);
    free(sums);
    free(nonfinite);
    return err;
}
