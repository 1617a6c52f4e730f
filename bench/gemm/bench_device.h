/*
 * bench_device.h - device-side helpers of the benchmarks (bench/gemm,
 * bench/linear): seeded random fills, dequantization of a quantized matrix
 * to bf16, and the comparison of two device matrices by 128x128 tile, all
 * computed on the GPU so that the large shapes cost milliseconds.
 * Implemented in bench_device.cu; every function returns the CUDA error of
 * its launch (cudaSuccess when all went well).
 */
#ifndef BFP8_BENCH_DEVICE_H
#define BFP8_BENCH_DEVICE_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "blockfp8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* e4m3 codes of N(0, 1) * 160 (saturating): what a 1x128-quantized normal
 * tensor looks like. rows x cols, row stride ld bytes; padding untouched. */
cudaError_t bench_fill_e4m3(uint8_t *data, int64_t rows, int64_t cols, int64_t ld, uint64_t seed,
                            cudaStream_t stream);

/* n positive dequantization scales, (2.8 / 448) * 2^u with u uniform in [-2, 2). */
cudaError_t bench_fill_scales(float *scales, int64_t n, uint64_t seed, cudaStream_t stream);

/* N(0, 1) * scale, rows x cols with row stride ld, as bf16 or f32. */
cudaError_t bench_fill_normal(void *x, bfp8_dtype dtype, int64_t rows, int64_t cols, int64_t ld,
                              float scale, uint64_t seed, cudaStream_t stream);

/* out = bf16(code * scale) of a device qmatrix (either granularity); with
 * transposed, out is q->cols x q->rows. ld_out in elements. */
cudaError_t bench_dequantize_bf16(const bfp8_qmatrix *q, uint16_t *out, int64_t ld_out,
                                  int transposed, cudaStream_t stream);

/* How far out is from ref (both rows x cols, bf16 or f32, device memory). */
typedef struct bench_comparison {
    double overall_db;      /* 20 log10(||ref|| / ||ref - out||) over finite pairs */
    double worst_tile_db;   /* min over 128x128 tiles; -inf if a tile holds a non-finite value */
    int64_t worst_tile_row, worst_tile_col;
    double calc_diff;       /* 1 - 2 sum(x y) / sum(x^2 + y^2) */
    int64_t nonfinite;      /* elements where ref or out is NaN or Inf */
} bench_comparison;

/* Synchronizes the stream (it allocates and reads back per-tile sums). */
cudaError_t bench_compare(const void *ref, bfp8_dtype ref_dtype, int64_t ld_ref, const void *out,
                          bfp8_dtype out_dtype, int64_t ld_out, int64_t rows, int64_t cols,
                          cudaStream_t stream, bench_comparison *result);

#ifdef __cplusplus
}
#endif

#endif /* BFP8_BENCH_DEVICE_H */
