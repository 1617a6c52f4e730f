/*
 * bench_lt.h - the cuBLASLt FP8 GEMM that the benchmarks time against
 * (bench/gemm: bench_gemm, bench_grouped): one matmul descriptor, its
 * layouts and the heuristic's algorithm, made once and run many times.
 */
#ifndef BFP8_BENCH_LT_H
#define BFP8_BENCH_LT_H

#include <cublasLt.h>
#include <stdint.h>

/* The cuBLASLt workspace every run is given (bytes). */
#define BENCH_LT_WORKSPACE_BYTES ((size_t)32 << 20)

/* cuBLASLt, FP8, "TN": our row-major D[rows, cols] = a[rows, K] . b[cols, K]^T
 * is the column-major D^T (cols x rows) = b (K x cols)^T . a (K x rows), so
 * cuBLAS's A is our b (transposed) and its B is our a; m = cols, n = rows.
 * The scales follow the operands: cuBLAS's A scale is our b's. Our layouts
 * (include/blockfp8.h) are what cuBLASLt reads when
 *   1x128:   scales[kb * scale_ld + r] with scale_ld == rows      ("M-major", M x L)
 *   128x128: scales[rb * scale_ld + kb] with scale_ld == ceil4(L) ("K-major", L4 x ceil(R/128))
 * and otherwise get repacked on the GPU (outside the timed region).        */

typedef struct lt_gemm_spec {
    int64_t rows, cols, depth, lda, ldb, ldd;
    int32_t a_scale_mode, b_scale_mode; /* cublasLtMatmulMatrixScale_t of OUR a and b */
    const void *a_scales, *b_scales;
    cudaDataType_t d_type;
    int accumulate; /* D += a.b^T (C = D, beta = 1) */
    int8_t fast_accum;
} lt_gemm_spec;

typedef struct lt_gemm {
    int ok;
    char reason[384];
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a_layout, b_layout, d_layout; /* cuBLAS's A (our b), B (our a), D */
    cublasLtMatmulAlgo_t algo;
    float beta;
} lt_gemm;

/* Returns 1 and g->ok = 1 when cuBLASLt has an algorithm; else 0 and g->reason. */
int lt_gemm_create(lt_gemm *g, cublasLtHandle_t handle, const lt_gemm_spec *s);
void lt_gemm_destroy(lt_gemm *g);
/* D = a . b^T (+ D when accumulate), with these operands and scales. */
cublasStatus_t lt_gemm_run(lt_gemm *g, cublasLtHandle_t handle, const void *a, const void *a_scales,
                           const void *b, const void *b_scales, void *d, void *workspace, cudaStream_t stream);

#endif /* BFP8_BENCH_LT_H */
