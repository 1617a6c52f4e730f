/*
 * gemm_fp8_host.h - the host side of the FP8 GEMMs that is not a template of
 * a kernel: the per-shape choice of configuration (gemm_fp8_heuristic.cu)
 * and the device memory a context keeps for the GEMMs (gemm_fp8_workspace.cu).
 * The launch itself is gemm_fp8_launch.cuh; the entry points are
 * gemm_fp8_1d2d.cu and gemm_fp8_1d1d.cu.
 */
#pragma once

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda_common.cuh"
#include "cuda/gemm_fp8_params.cuh"

namespace bfp8_gemm {

/* ------------------------------------------------------------------------ */
/* Configurations (gemm_fp8_heuristic.cu)                                    */

struct Config {
    int bm, bn;
    int direct_store; /* bf16 output stored from registers, not by TMA through shared memory */
    int split;        /* k-slices per tile of the last wave: 0 chosen per shape, 1 never, N forced */
    int group_m;      /* raster group height in tile rows; 0: the default */
};

/* A tile the heuristic chooses among, and its measured speed: the time of
 * its whole waves of tiles against 128x128's on large, aligned shapes,
 * averaged over the TARGETS shapes (H200, bench_gemm under each forced
 * configuration, each normalised by cuBLASLt's time in the same run). BM=192
 * (three math warpgroups) is fastest for 1D2D, and for 1D1D (two multiplies
 * per promoted element) by far; 1D1D's 256x112 (row groups) is 1.03-1.06x
 * 192x128 on the TARGETS wgrad shapes, f32 accumulate through the TMA unit. */
struct Candidate {
    int bm, bn;
    double speed;
};
constexpr Candidate CANDIDATES_1D2D[] = {{128, 128, 1.00}, {128, 192, 1.085}, {192, 128, 1.13}};
constexpr Candidate CANDIDATES_1D1D[] = {{128, 128, 1.00}, {128, 192, 1.12}, {192, 128, 1.18}, {256, 112, 1.23}};
constexpr int NUM_CANDIDATES_1D2D = (int)(sizeof CANDIDATES_1D2D / sizeof CANDIDATES_1D2D[0]);
constexpr int NUM_CANDIDATES_1D1D = (int)(sizeof CANDIDATES_1D1D / sizeof CANDIDATES_1D1D[0]);

/* 1D1D outputs of less than one wave of 128 x 128 tiles (a small layer's
 * weight gradient, or few tokens): narrow tiles of one math warpgroup, so
 * that the output and its k-blocks spread over more SMs, each storing less.
 * (TMA outputs only: the kernels for outputs stored from registers are not
 * built.) */
struct NarrowTile {
    int bm, bn;
};
constexpr NarrowTile NARROW_1D1D[] = {{64, 32}, {64, 64}};
constexpr int NUM_NARROW_1D1D = (int)(sizeof NARROW_1D1D / sizeof NARROW_1D1D[0]);

/* 1D1D outputs of less than one wave of 128 x 128 tiles: the tile (narrow
 * or 128 x 128) and split (c: bm, bn, split) with the least modelled time of
 * one wave (k-blocks, the output tile's add into D, a split's
 * exchange); slots_128: CTAs of the 128 x 128 kernel resident at once,
 * narrow_slots: of each narrow tile. False: choose_config's choice stands
 * (larger outputs, or BFP8_GEMM_CONFIG forcing a wider tile or a split;
 * bm=64 forces a narrow one where its tiles fit in one wave). */
bool choose_small_output_1d1d(const bfp8_gemm_tuning &tuning, int m, int n, int num_k_blocks, int slots_128,
                              const int *narrow_slots, Config *c);

/* The configuration with the least estimated time for an m x n output over
 * num_k_blocks, given how many CTAs of each candidate are resident at once
 * (slots, one per candidate; 0: the kernel does not fit), unless the
 * context's BFP8_GEMM_CONFIG forces one (see gemm_fp8_heuristic.cu). */
Config choose_config(const bfp8_gemm_tuning &tuning, bool b_1x128, int m, int n, int num_k_blocks,
                     const int *slots);

/* The options of BFP8_GEMM_CONFIG that a grouped GEMM honours: gm=, store=direct. */
Config grouped_config(const bfp8_gemm_tuning &tuning);

/* The tile of a grouped 1D2D GEMM: 128 x 128, 128 x 192 or 192 x 128 (the
 * order of CANDIDATES_1D2D; slots of each grouped kernel), by the waves of
 * tiles each needs times its measured speed. rows_128: 128-row tiles only.
 * BFP8_GEMM_CONFIG's bm= / bn= force one. */
void grouped_1d2d_tile(const bfp8_gemm_tuning &tuning, const int64_t *offsets, int num_groups, int64_t n,
                       bool rows_128, const int *slots, Config *c);

/* m-tiles of a grouped 1D2D GEMM with `bm`-row tiles: each group's rows from its start. */
int64_t grouped_m_tiles(const int64_t *offsets, int num_groups, int bm);

/* The raster group height, in tile rows. */
int default_group_m(bool b_1x128, int num_tile_rows, int slots);

/* How the epilogue writes D (a TmaOut). */
int output_path(bool b_1x128, const Config &c, const Params &p);

/* Tiles over `slots` resident CTAs: the full waves run whole; the tiles of a
 * partial last wave may be split into k-slices (requested: 0 choose, 1
 * never, N >= 2 that many). */
struct SplitPlan {
    int64_t whole;     /* tiles done whole, first */
    int split;         /* k-slices of each remaining tile (1: none) */
    double tail_waves; /* time of the last wave, in whole-tile times (0: no partial wave) */
};
SplitPlan plan_split(int64_t tiles, int slots, int num_k_blocks, int requested);

/* Whether BFP8_GEMM_TRACE asks for each call's configuration on stderr. */
inline bool trace_enabled(const bfp8_context *ctx) { return bfp8_cuda_state_of(ctx)->gemm_tuning.trace != 0; }
inline const bfp8_gemm_tuning &tuning_of(const bfp8_context *ctx) { return bfp8_cuda_state_of(ctx)->gemm_tuning; }
extern const char *const TMA_OUT_NAMES[4];

/* ------------------------------------------------------------------------ */
/* Few rows, few tokens or small outputs (gemm_fp8_small.cu)                 */

constexpr int SMALL_1D2D_MAX_M = 16; /* 1D2D: rows of A */

/* Whether the small kernel runs a 1D2D GEMM of m rows over k / a 1D1D GEMM
 * of an n x k output over `tokens` (gemm_fp8_heuristic.cu's table; the
 * context's BFP8_GEMM_CONFIG: small=0 turns it off, small=1 on wherever it
 * can run). */
bool small_1d2d_applies(const bfp8_context *ctx, int m, int64_t k);
bool small_1d1d_applies(const bfp8_context *ctx, int n, int k, int tokens);

/* The launches, with the entry point's Params (D: p.m x p.n over p.k). */
bfp8_status launch_small_1d2d(const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                              const Params &p);
bfp8_status launch_small_1d1d(const bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                              const Params &p);

/* ------------------------------------------------------------------------ */
/* Device memory of a context (gemm_fp8_workspace.cu)                        */

/* Room for the exchange of a split last wave: the flags (zeroed once; slice
 * 0 returns each to zero) and a partial BM x BN fp32 tile per resident CTA.
 * NULL pointers where it cannot be had: the GEMM then does not split. */
struct SplitWorkspace {
    unsigned *counters;
    float *partials;
};
SplitWorkspace split_workspace(const bfp8_context *ctx);
/* Its size: counters, and floats of partials. */
int split_workspace_counters(const bfp8_context *ctx);
int64_t split_workspace_floats(const bfp8_context *ctx);

/* 1D1D 256 x 112 with TMA outputs (SharedLayout::SCALE_MMA): whether the
 * scale operand of an n-column GEMM over num_k_blocks can be had; then make
 * it from b's scales, and its tensor map (boxes of bn rows). */
bool scale_operand_available(const bfp8_context *ctx, int n, int num_k_blocks);
bfp8_status make_scale_operand(const bfp8_context *ctx, const bfp8_qmatrix *b, int n, int num_k_blocks, int bn,
                               CUtensorMap *map);

/* Params::group_table for a grouped GEMM, from host offsets (checked) or
 * device ones. m_table: the grouped 1D2D table of `bm`-row tiles; else the
 * grouped 1D1D one (each group's first k-block, and the end). */
bfp8_status make_group_table(const bfp8_context *ctx, const int64_t *offsets, int num_groups, int64_t tokens,
                             bool on_device, bool m_table, int bm, const int **device);

} /* namespace bfp8_gemm */
