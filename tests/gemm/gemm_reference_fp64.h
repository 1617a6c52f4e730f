/*
 * gemm_reference_fp64.h - the fp64 reference of a quantized GEMM on the GPU
 * (D[r, c] = sum_k a[r, k] b[c, k], both operands dequantized exactly), and
 * the worst per-128x128-tile SQNR of an output against it.
 */
#ifndef BFP8_TEST_GEMM_REFERENCE_FP64_H
#define BFP8_TEST_GEMM_REFERENCE_FP64_H

#include <stdint.h>

#include "blockfp8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* a: rows x K, b: cols x K (device memory, either granularity); out: rows x
 * cols, bf16 or f32, row stride ld_out. *worst_db: 10 log10(sum ref^2 /
 * sum (out - ref)^2) of the worst tile (+inf where exact, -inf where a
 * tile holds a non-finite output). Synchronizes the device. Returns 0, or
 * -1 when an allocation or CUDA call failed. */
int gemm_reference_worst_tile_db(const bfp8_qmatrix *a, const bfp8_qmatrix *b, const void *out,
                                 bfp8_dtype out_dtype, int64_t ld_out, double *worst_db);

#ifdef __cplusplus
}
#endif

#endif
