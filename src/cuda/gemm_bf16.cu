/*
 * gemm_bf16.cu - the bf16 GEMM of the baseline recipe, through cuBLASLt:
 *
 *     D[M, N] = C + op(A)[M, K] . op(B)[N, K]^T     fp32 accumulation
 *
 * with the transposes of include/blockfp8.h (a stored M x K, or K x M when
 * a_transposed; b stored N x K, or K x N when b_transposed), D bf16 or f32,
 * C f32 or NULL (it may alias D). Tested by tests/gemm, timed by
 * bench/gemm and bench/linear.
 *
 * Row-major to cuBLASLt's column-major: a row-major R x C matrix with row
 * stride ld is the column-major C x R matrix with the same ld. So the
 * library computes D^T (N x M) = op(B) (N x K) . op(A)^T (K x M): cuBLAS's
 * "A" is our b, its "B" is our a, m = N, n = M.
 *
 * The cuBLASLt handle and a 32 MiB workspace are created on first use and
 * kept in the context (runtime.cu frees them).
 */
#include <cublasLt.h>

#include "cuda/cuda_common.cuh"

static const size_t kCublasLtWorkspaceBytes = (size_t)32 << 20;

static bfp8_status cublaslt_failure(cublasStatus_t status, const char *what) {
    return bfp8_fail(status == CUBLAS_STATUS_ALLOC_FAILED ? BFP8_ERR_OUT_OF_MEMORY : BFP8_ERR_CUDA,
                     "bfp8_gemm_bf16: %s failed: %s (%s)", what, cublasLtGetStatusName(status),
                     cublasLtGetStatusString(status));
}

#define CUBLASLT_TRY(call)                                                                   \
    do {                                                                                     \
        cublasStatus_t cublaslt_status_ = (call);                                            \
        if (cublaslt_status_ != CUBLAS_STATUS_SUCCESS)                                       \
            return cublaslt_failure(cublaslt_status_, #call);                                \
    } while (0)

static bfp8_status ensure_cublaslt(bfp8_context *ctx, struct bfp8_cuda_state *state) {
    if (state->cublaslt) return BFP8_OK;
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    cublasLtHandle_t handle = NULL;
    CUBLASLT_TRY(cublasLtCreate(&handle));
    void *workspace = NULL;
    const cudaError_t err = cudaMalloc(&workspace, kCublasLtWorkspaceBytes);
    if (err != cudaSuccess) {
        cudaGetLastError();
        cublasLtDestroy(handle);
        return bfp8_fail(err == cudaErrorMemoryAllocation ? BFP8_ERR_OUT_OF_MEMORY : BFP8_ERR_CUDA,
                         "bfp8_gemm_bf16: cudaMalloc of the %zu-byte cuBLASLt workspace: %s",
                         kCublasLtWorkspaceBytes, cudaGetErrorString(err));
    }
    state->cublaslt = handle;
    state->cublaslt_workspace = workspace;
    state->cublaslt_workspace_bytes = kCublasLtWorkspaceBytes;
    return BFP8_OK;
}

/* The descriptors of one call, destroyed on every way out. */
struct cublaslt_gemm_descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    cublasLtMatmulPreference_t preference = nullptr;
    ~cublaslt_gemm_descs() {
        if (preference) cublasLtMatmulPreferenceDestroy(preference);
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

/* Largest power of two (<= 256) dividing the address. cuBLASLt's heuristic
 * assumes 256-byte aligned operands unless told otherwise, and would then
 * pick a kernel that faults on a less aligned pointer. */
static uint32_t pointer_alignment(const void *ptr) {
    const uintptr_t address = (uintptr_t)ptr;
    uint32_t alignment = 256;
    while (alignment > 1 && address % alignment != 0) alignment >>= 1;
    return alignment;
}

static cudaDataType_t cuda_type_of(bfp8_dtype dtype) {
    return dtype == BFP8_F32 ? CUDA_R_32F : CUDA_R_16BF;
}

bfp8_status bfp8_cuda_gemm_bf16(bfp8_context *ctx, const bfp8_matrix *a, int a_transposed,
                                const bfp8_matrix *b, int b_transposed, const bfp8_matrix *c,
                                bfp8_matrix *d) {
    struct bfp8_cuda_state *state = bfp8_cuda_state_of(ctx);
    BFP8_TRY(ensure_cublaslt(ctx, state));
    cublasLtHandle_t handle = (cublasLtHandle_t)state->cublaslt;

    const int64_t m = a_transposed ? a->cols : a->rows;
    const int64_t n = b_transposed ? b->cols : b->rows;
    const int64_t k = a_transposed ? a->rows : a->cols;
    if (c && c->data == d->data && c->ld != d->ld)
        return bfp8_fail(BFP8_ERR_LAYOUT, "bfp8_gemm_bf16: c aliases d but c.ld %lld != d.ld %lld",
                         (long long)c->ld, (long long)d->ld);

    cublaslt_gemm_descs descs;
    CUBLASLT_TRY(cublasLtMatmulDescCreate(&descs.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    /* cuBLAS A = our b: stored N x K row-major is K x N column-major, used transposed. */
    const cublasOperation_t op_b = b_transposed ? CUBLAS_OP_N : CUBLAS_OP_T;
    /* cuBLAS B = our a: stored M x K row-major is K x M column-major, used as is. */
    const cublasOperation_t op_a = a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLASLT_TRY(cublasLtMatmulDescSetAttribute(descs.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
    CUBLASLT_TRY(cublasLtMatmulDescSetAttribute(descs.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));

    CUBLASLT_TRY(cublasLtMatrixLayoutCreate(&descs.a, CUDA_R_16BF, (uint64_t)b->cols,
                                            (uint64_t)b->rows, b->ld));
    CUBLASLT_TRY(cublasLtMatrixLayoutCreate(&descs.b, CUDA_R_16BF, (uint64_t)a->cols,
                                            (uint64_t)a->rows, a->ld));
    CUBLASLT_TRY(cublasLtMatrixLayoutCreate(&descs.d, cuda_type_of(d->dtype), (uint64_t)n,
                                            (uint64_t)m, d->ld));
    const bool separate_c = c && c->data != d->data;
    if (separate_c)
        CUBLASLT_TRY(cublasLtMatrixLayoutCreate(&descs.c, cuda_type_of(c->dtype), (uint64_t)n,
                                                (uint64_t)m, c->ld));
    const void *c_data = separate_c ? c->data : d->data;
    cublasLtMatrixLayout_t c_layout = separate_c ? descs.c : descs.d;

    const uint32_t align_a = pointer_alignment(a->data), align_b = pointer_alignment(b->data);
    const uint32_t align_c = pointer_alignment(c_data), align_d = pointer_alignment(d->data);
    /* cuBLAS's A is our b and its B is our a, in the alignments too. */
    CUBLASLT_TRY(cublasLtMatmulPreferenceCreate(&descs.preference));
    CUBLASLT_TRY(cublasLtMatmulPreferenceSetAttribute(descs.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &state->cublaslt_workspace_bytes,
                                                      sizeof state->cublaslt_workspace_bytes));
    CUBLASLT_TRY(cublasLtMatmulPreferenceSetAttribute(descs.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                      &align_b, sizeof align_b));
    CUBLASLT_TRY(cublasLtMatmulPreferenceSetAttribute(descs.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                      &align_a, sizeof align_a));
    CUBLASLT_TRY(cublasLtMatmulPreferenceSetAttribute(descs.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                      &align_c, sizeof align_c));
    CUBLASLT_TRY(cublasLtMatmulPreferenceSetAttribute(descs.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                      &align_d, sizeof align_d));

    cublasLtMatmulHeuristicResult_t heuristic = {};
    int found = 0;
    const cublasStatus_t heuristic_status = cublasLtMatmulAlgoGetHeuristic(
        handle, descs.op, descs.a, descs.b, c_layout, descs.d, descs.preference, 1, &heuristic, &found);
    if (heuristic_status != CUBLAS_STATUS_SUCCESS || found == 0) {
        const size_t d_size = bfp8_dtype_size(d->dtype);
        const bool misaligned = align_a < 16 || align_b < 16 || align_c < 16 || align_d < 16 ||
                                (a->ld * 2) % 16 != 0 || (b->ld * 2) % 16 != 0 ||
                                (d->ld * (int64_t)d_size) % 16 != 0 ||
                                (separate_c && (c->ld * 4) % 16 != 0);
        return bfp8_fail(misaligned ? BFP8_ERR_ALIGNMENT : BFP8_ERR_UNSUPPORTED,
                         "bfp8_gemm_bf16: cuBLASLt has no kernel for M=%lld N=%lld K=%lld "
                         "(a%s ld %lld, b%s ld %lld, d %s ld %lld, pointer alignments a %u b %u "
                         "c %u d %u bytes): %s",
                         (long long)m, (long long)n, (long long)k, a_transposed ? "^T" : "",
                         (long long)a->ld, b_transposed ? "^T" : "", (long long)b->ld,
                         bfp8_dtype_name(d->dtype), (long long)d->ld, align_a, align_b, align_c,
                         align_d,
                         heuristic_status != CUBLAS_STATUS_SUCCESS
                             ? cublasLtGetStatusName(heuristic_status)
                             : "the heuristic returned no algorithm");
    }

    const float alpha = 1.0f, beta = c ? 1.0f : 0.0f;
    CUBLASLT_TRY(cublasLtMatmul(handle, descs.op, &alpha, b->data, descs.a, a->data, descs.b, &beta,
                                c_data, c_layout, d->data, descs.d, &heuristic.algo,
                                state->cublaslt_workspace, state->cublaslt_workspace_bytes,
                                bfp8_stream_of(ctx)));
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}
