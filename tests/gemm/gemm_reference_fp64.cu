/*
 * gemm_reference_fp64.cu - an fp64 GEMM of quantized operands on the GPU,
 * and the per-128x128-tile SQNR of an output against it: the reference of
 * test_gemm_grid, fast enough for the largest grid shapes (a host fp64
 * reference would take minutes there). The operands are dequantized exactly
 * (code * scale in fp64) and summed in fp64: what the FP8 GEMMs compute,
 * without their fp32 rounding.
 */
#include "gemm_reference_fp64.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int TILE = 32; /* outputs per block side, and k-chunk */

__device__ double e4m3_value(uint8_t code) {
    const int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
    double v;
    if (exponent == 15 && mantissa == 7) return nan("");
    if (exponent == 0) v = ldexp((double)mantissa, -9);
    else v = ldexp((double)(8 + mantissa), exponent - 10);
    return sign ? -v : v;
}

/* One element of a quantized operand, row r and column (contraction index) c. */
__device__ double dequantized(const bfp8_qmatrix &q, int64_t r, int64_t c) {
    const int64_t kb = c / 128;
    const float scale = q.granularity == BFP8_GRAN_1X128 ? q.scales[kb * q.scale_ld + r]
                                                          : q.scales[(r / 128) * q.scale_ld + kb];
    return e4m3_value(q.data[r * q.ld + c]) * (double)scale;
}

/* ref[r, c] = sum_k a[r, k] b[c, k], tiled through shared memory. */
__global__ void reference_kernel(bfp8_qmatrix a, bfp8_qmatrix b, double *ref) {
    __shared__ double sa[TILE][TILE + 1], sb[TILE][TILE + 1];
    const int64_t r0 = (int64_t)blockIdx.y * TILE, c0 = (int64_t)blockIdx.x * TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
    double acc = 0.0;
    for (int64_t k0 = 0; k0 < a.cols; k0 += TILE) {
        const int64_t k = k0 + tx;
        sa[ty][tx] = r0 + ty < a.rows && k < a.cols ? dequantized(a, r0 + ty, k) : 0.0;
        sb[ty][tx] = c0 + ty < b.rows && k < b.cols ? dequantized(b, c0 + ty, k) : 0.0;
        __syncthreads();
#pragma unroll 8
        for (int j = 0; j < TILE; ++j) acc += sa[ty][j] * sb[tx][j];
        __syncthreads();
    }
    if (r0 + ty < a.rows && c0 + tx < b.rows) ref[(r0 + ty) * b.rows + c0 + tx] = acc;
}

/* Per 128x128 tile: sum ref^2 and sum (out - ref)^2; a non-finite output counts in bad. */
__global__ void tile_error_kernel(const double *ref, const void *out, int out_is_bf16, int64_t ld_out, int64_t rows,
                                  int64_t cols, int64_t tiles_c, double *signal, double *noise,
                                  unsigned long long *bad) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    const int64_t r = i / cols, c = i % cols;
    const double x = ref[i];
    const double y = out_is_bf16 ? (double)__bfloat162float(static_cast<const __nv_bfloat16 *>(out)[r * ld_out + c])
                                 : (double)static_cast<const float *>(out)[r * ld_out + c];
    const int64_t tile = (r / 128) * tiles_c + c / 128;
    if (!isfinite(y)) {
        atomicAdd(&bad[tile], 1ull);
        return;
    }
    atomicAdd(&signal[tile], x * x);
    atomicAdd(&noise[tile], (y - x) * (y - x));
}

} /* namespace */

extern "C" int gemm_reference_worst_tile_db(const bfp8_qmatrix *a, const bfp8_qmatrix *b, const void *out,
                                            bfp8_dtype out_dtype, int64_t ld_out, double *worst_db) {
    const int64_t rows = a->rows, cols = b->rows;
    const int64_t tiles_r = (rows + 127) / 128, tiles_c = (cols + 127) / 128, tiles = tiles_r * tiles_c;
    double *ref = NULL, *signal = NULL, *noise = NULL;
    unsigned long long *bad = NULL;
    int failed = cudaMalloc(&ref, (size_t)(rows * cols) * sizeof(double)) != cudaSuccess ||
                 cudaMalloc(&signal, (size_t)tiles * sizeof(double)) != cudaSuccess ||
                 cudaMalloc(&noise, (size_t)tiles * sizeof(double)) != cudaSuccess ||
                 cudaMalloc(&bad, (size_t)tiles * sizeof(unsigned long long)) != cudaSuccess;
    double *host = (double *)malloc((size_t)tiles * 2 * sizeof(double));
    unsigned long long *host_bad = (unsigned long long *)malloc((size_t)tiles * sizeof(unsigned long long));
    if (!failed && host && host_bad) {
        cudaMemset(signal, 0, (size_t)tiles * sizeof(double));
        cudaMemset(noise, 0, (size_t)tiles * sizeof(double));
        cudaMemset(bad, 0, (size_t)tiles * sizeof(unsigned long long));
        reference_kernel<<<dim3((unsigned)((cols + TILE - 1) / TILE), (unsigned)((rows + TILE - 1) / TILE)),
                           dim3(TILE, TILE)>>>(*a, *b, ref);
        const int64_t n = rows * cols;
        tile_error_kernel<<<(unsigned)((n + 255) / 256), 256>>>(ref, out, out_dtype == BFP8_BF16, ld_out, rows, cols,
                                                               tiles_c, signal, noise, bad);
        failed = cudaMemcpy(host, signal, (size_t)tiles * sizeof(double), cudaMemcpyDeviceToHost) != cudaSuccess ||
                 cudaMemcpy(host + tiles, noise, (size_t)tiles * sizeof(double), cudaMemcpyDeviceToHost) != cudaSuccess ||
                 cudaMemcpy(host_bad, bad, (size_t)tiles * sizeof(unsigned long long), cudaMemcpyDeviceToHost) !=
                     cudaSuccess;
    } else {
        failed = 1;
    }
    if (!failed) {
        double worst = INFINITY;
        for (int64_t t = 0; t < tiles; ++t) {
            double db;
            if (host_bad[t]) db = -INFINITY;
            else if (host[tiles + t] == 0.0) db = INFINITY; /* exact (an all-zero tile included) */
            else db = 10.0 * log10(host[t] / host[tiles + t]);
            if (db < worst) worst = db;
        }
        *worst_db = worst;
    }
    cudaFree(ref);
    cudaFree(signal);
    cudaFree(noise);
    cudaFree(bad);
    free(host);
    free(host_bad);
    return failed ? -1 : 0;
}
