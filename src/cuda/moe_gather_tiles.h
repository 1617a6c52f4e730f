/*
 * moe_gather_tiles.h - the MoE permutation into both 1x128 layouts on the
 * quantize tile kernel (moe_gather_tiles.cu), for src/cuda/moe.cu.
 */
#pragma once

#include "internal.h"

/* Rows [0, rows) of the permutation of src by row_slot (top_k slots a
 * token; times weights[slot] when weights is not NULL) quantized by columns
 * into out_qt and, when given, by rows into out_q, and written to out (bf16
 * or f32) when given. Validated by src/ops: rows and src's columns
 * multiples of 128; every row of every matrix 16-byte aligned. */
bfp8_status bfp8_cuda_moe_gather_tiles(bfp8_context *ctx, const bfp8_matrix *src, int64_t rows,
                                       const int32_t *row_slot, int top_k, const float *weights,
                                       const bfp8_matrix *out, const bfp8_qmatrix *out_q, const bfp8_qmatrix *out_qt,
                                       const bfp8_quantize_options *options);
