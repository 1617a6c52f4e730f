/* gemm_1d1d.cu - FP8 1D1D GEMM on sm_90a (placeholder: being written). */
#include "cuda/cuda_common.cuh"

bfp8_status bfp8_cuda_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                const bfp8_matrix *c, bfp8_matrix *d) {
    (void)ctx; (void)a; (void)b; (void)c; (void)d;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cuda_gemm_1d1d: not implemented yet");
}
