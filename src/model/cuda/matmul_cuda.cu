/*
 * matmul_cuda.cu - the model's matrix products on the GPU through cuBLAS:
 * fp32 (TF32 on request: model_ops_ctx.tf32), bf16 operands with fp32 sums
 * (the output head: head_loss.h), and the fp32 transpose. See
 * model_kernels.cuh.
 */
#include "model/cuda/model_kernels.cuh"
#include "model/model_ops.h"

using namespace bfp8_model_cuda;

namespace {

constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8; /* blockDim (32, 8) */

/* dst[c][r] = src[r][c] through a shared tile; the extra column keeps the
 * transposed reads off a single bank. */
__global__ void transpose_kernel(float *__restrict__ dst, const float *__restrict__ src, int64_t rows,
                                 int64_t cols) {
    __shared__ float tile[kTile][kTile + 1];
    const int64_t c0 = (int64_t)blockIdx.x * kTile;
    const int64_t row_tiles = (rows + kTile - 1) / kTile;
    for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
        const int64_t r0 = rt * kTile;
        for (int k = threadIdx.y; k < kTile; k += kTileRowsPerPass) {
            const int64_t r = r0 + k, c = c0 + threadIdx.x;
            if (r < rows && c < cols) tile[k][threadIdx.x] = src[r * cols + c];
        }
        __syncthreads();
        for (int k = threadIdx.y; k < kTile; k += kTileRowsPerPass) {
            const int64_t c = c0 + k, r = r0 + threadIdx.x;
            if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][k];
        }
        __syncthreads(); /* the tile is refilled by the next pass */
    }
}

} /* namespace */

/* cuBLAS is column-major, and a row-major matrix read column-major is its
 * transpose, so C^T = B^T A^T: B (row-major K x N) is the column-major
 * N x K operand as stored; A is K x M as stored when it is row-major M x K
 * (no transpose), and M x K, to be transposed, when a_transposed. */
extern "C" void matmul_f32_cuda(model_ops_ctx *oc, float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed,
                                const float *b, int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* an empty sum: C = C, or C = 0 (cuBLAS's handling of k = 0 is not relied on) */
        if (!accumulate)
            failed(
                oc,
                cudaMemset2DAsync(c, (size_t)ldc * sizeof(float), 0, (size_t)N * sizeof(float), (size_t)M, stream(oc)),
                "matmul_f32 (zero)");
        return;
    }
    cublasHandle_t handle = cublas(oc);
    if (!handle) return;
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f; /* beta 0: C is not read, as on the CPU */
    failed(oc,
           cublasSgemm_64(handle, CUBLAS_OP_N, a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, b, ldb, a, lda,
                          &beta, c, ldc),
           "matmul_f32");
}

extern "C" void transpose_f32_cuda(model_ops_ctx *oc, float *dst, const float *src, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    const int64_t col_tiles = (cols + kTile - 1) / kTile, row_tiles = (rows + kTile - 1) / kTile;
    if (col_tiles > kMaxGridX) {
        failed(oc, cudaErrorInvalidValue, "transpose_f32 (too many columns)");
        return;
    }
    const dim3 grid((unsigned)col_tiles, (unsigned)(row_tiles < kMaxGridY ? row_tiles : kMaxGridY), 1);
    transpose_kernel<<<grid, dim3(kTile, kTileRowsPerPass, 1), 0, stream(oc)>>>(dst, src, rows, cols);
    check_launch(oc, "transpose_f32");
}

/* The same column-major reading as matmul_f32_cuda, with B transposable too:
 * B^T as stored is the column-major N x K operand unless b_transposed (then
 * it is K x N, to be transposed). bf16 inputs, fp32 compute and output: the
 * tensor cores whatever the handle's math mode. */
extern "C" void matmul_bf16_cuda(model_ops_ctx *oc, float *c, int64_t ldc, const uint16_t *a, int64_t lda,
                                 int a_transposed, const uint16_t *b, int64_t ldb, int b_transposed, int64_t M,
                                 int64_t N, int64_t K, float alpha, int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* an empty sum: C = C, or C = 0 */
        if (!accumulate)
            failed(
                oc,
                cudaMemset2DAsync(c, (size_t)ldc * sizeof(float), 0, (size_t)N * sizeof(float), (size_t)M, stream(oc)),
                "matmul_bf16 (zero)");
        return;
    }
    cublasHandle_t handle = cublas(oc);
    if (!handle) return;
    const float beta = accumulate ? 1.0f : 0.0f; /* beta 0: C is not read, as on the CPU */
    failed(oc,
           cublasGemmEx_64(handle, b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                           N, M, K, &alpha, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
           "matmul_bf16");
}
