/*
 * test_gemm_gpu.h - what test_gemm_gpu.c shares with gemm_gpu_timing.c (its
 * --time mode): the CUDA context, allocation, the forced configurations.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "blockfp8.h"

enum gemm_kind { GEMM_1D2D, GEMM_1D1D };

/* The CUDA context of the test; made again by use_config. */
extern bfp8_context *gpu;

/* Device memory from gpu; fatal when it cannot be had. */
void *gpu_alloc(size_t bytes);

/* BFP8_GEMM_CONFIG for the GEMMs that follow (NULL or "": the heuristic's
 * choice); gpu is made again, since the library reads it at context creation. */
void use_config(const char *config);

/* Every tile the heuristic chooses among, and "" for its choice; whether a
 * configuration exists for a GEMM kind. */
extern const char *const configs[];
extern const int NUM_CONFIGS;
int config_fits(enum gemm_kind kind, const char *config);

/* A device operand of random fp8 codes (no NaN) and scales in [0.5, 1), for
 * timing and profiling (no quantizer); freed with bfp8_free on gpu. */
bfp8_qmatrix random_device_operand(int64_t rows, int64_t cols, bfp8_granularity gran, uint64_t seed);

/* --time [FILTER] */
void time_configs(const char *filter);
