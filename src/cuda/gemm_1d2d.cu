/* gemm_1d2d.cu - FP8 1D2D GEMM on sm_90a (placeholder: being written). */
#include "cuda/cuda_common.cuh"

bfp8_status bfp8_cuda_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                bfp8_matrix *d) {
    (void)ctx; (void)a; (void)b; (void)d;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cuda_gemm_1d2d: not implemented yet");
}
