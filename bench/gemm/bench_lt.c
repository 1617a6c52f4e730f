/*
 * bench_lt.c - the cuBLASLt FP8 GEMM of the benchmarks (bench_lt.h).
 */
#include "bench_lt.h"

#include <stdio.h>
#include <string.h>

void lt_gemm_destroy(lt_gemm *g) {
    if (g->d_layout) cublasLtMatrixLayoutDestroy(g->d_layout);
    if (g->b_layout) cublasLtMatrixLayoutDestroy(g->b_layout);
    if (g->a_layout) cublasLtMatrixLayoutDestroy(g->a_layout);
    if (g->op) cublasLtMatmulDescDestroy(g->op);
    g->d_layout = g->b_layout = g->a_layout = NULL;
    g->op = NULL;
}

#define LT_STEP(call)                                                                        \
    do {                                                                                     \
        const cublasStatus_t lt_step_status_ = (call);                                       \
        if (lt_step_status_ != CUBLAS_STATUS_SUCCESS) {                                      \
            snprintf(g->reason, sizeof g->reason, "%s: %s", #call,                          \
                     cublasLtGetStatusName(lt_step_status_));                                \
            goto failed;                                                                     \
        }                                                                                    \
    } while (0)

int lt_gemm_create(lt_gemm *g, cublasLtHandle_t handle, const lt_gemm_spec *s) {
    memset(g, 0, sizeof *g);
    cublasLtMatmulPreference_t preference = NULL;
    const cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
    const size_t workspace_bytes = BENCH_LT_WORKSPACE_BYTES;
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    memset(&heuristic, 0, sizeof heuristic);
    LT_STEP(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_STEP(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose));
    LT_STEP(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof no_transpose));
    /* Scalar scaling is the default; the docs ask to leave modes not in use untouched. */
    if (s->b_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
        LT_STEP(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &s->b_scale_mode,
                                               sizeof s->b_scale_mode));
    if (s->a_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
        LT_STEP(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &s->a_scale_mode,
                                               sizeof s->a_scale_mode));
    LT_STEP(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &s->b_scales,
                                           sizeof s->b_scales));
    LT_STEP(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &s->a_scales,
                                           sizeof s->a_scales));
    if (s->fast_accum)
        LT_STEP(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &s->fast_accum,
                                               sizeof s->fast_accum));
    LT_STEP(cublasLtMatrixLayoutCreate(&g->a_layout, CUDA_R_8F_E4M3, (uint64_t)s->depth, (uint64_t)s->cols, s->ldb));
    LT_STEP(cublasLtMatrixLayoutCreate(&g->b_layout, CUDA_R_8F_E4M3, (uint64_t)s->depth, (uint64_t)s->rows, s->lda));
    LT_STEP(cublasLtMatrixLayoutCreate(&g->d_layout, s->d_type, (uint64_t)s->cols, (uint64_t)s->rows, s->ldd));
    LT_STEP(cublasLtMatmulPreferenceCreate(&preference));
    LT_STEP(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace_bytes, sizeof workspace_bytes));
    LT_STEP(cublasLtMatmulAlgoGetHeuristic(handle, g->op, g->a_layout, g->b_layout, g->d_layout,
                                           g->d_layout, preference, 1, &heuristic, &found));
    if (found < 1) {
        snprintf(g->reason, sizeof g->reason, "cublasLtMatmulAlgoGetHeuristic returned no algorithm");
        goto failed;
    }
    cublasLtMatmulPreferenceDestroy(preference);
    g->algo = heuristic.algo;
    g->beta = s->accumulate ? 1.0f : 0.0f;
    g->ok = 1;
    return 1;
failed:
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    lt_gemm_destroy(g);
    g->ok = 0;
    return 0;
}

cublasStatus_t lt_gemm_run(lt_gemm *g, cublasLtHandle_t handle, const void *a,
                                  const void *a_scales, const void *b, const void *b_scales, void *d,
                                  void *workspace, cudaStream_t stream) {
    cublasStatus_t status = cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                           &b_scales, sizeof b_scales);
    if (status == CUBLAS_STATUS_SUCCESS)
        status = cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scales,
                                                sizeof a_scales);
    const float alpha = 1.0f;
    if (status == CUBLAS_STATUS_SUCCESS)
        status = cublasLtMatmul(handle, g->op, &alpha, b, g->a_layout, a, g->b_layout, &g->beta, d,
                                g->d_layout, d, g->d_layout, &g->algo, workspace, BENCH_LT_WORKSPACE_BYTES, stream);
    return status;
}

