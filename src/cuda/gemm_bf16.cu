/* gemm_bf16.cu - bf16 GEMM through cuBLASLt (placeholder: being written). */
#include "cuda/cuda_common.cuh"

bfp8_status bfp8_cuda_gemm_bf16(bfp8_context *ctx, const bfp8_matrix *a, int a_transposed,
                                const bfp8_matrix *b, int b_transposed, const bfp8_matrix *c,
                                bfp8_matrix *d) {
    (void)ctx; (void)a; (void)a_transposed; (void)b; (void)b_transposed; (void)c; (void)d;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cuda_gemm_bf16: not implemented yet");
}
