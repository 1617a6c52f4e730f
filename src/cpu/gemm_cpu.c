/* gemm_cpu.c - CPU reference GEMMs (placeholder: being written). */
#include "internal.h"

bfp8_status bfp8_cpu_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                               bfp8_matrix *d) {
    (void)ctx; (void)a; (void)b; (void)d;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cpu_gemm_1d2d: not implemented yet");
}
bfp8_status bfp8_cpu_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                               const bfp8_matrix *c, bfp8_matrix *d) {
    (void)ctx; (void)a; (void)b; (void)c; (void)d;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cpu_gemm_1d1d: not implemented yet");
}
bfp8_status bfp8_cpu_gemm_bf16(bfp8_context *ctx, const bfp8_matrix *a, int a_transposed,
                               const bfp8_matrix *b, int b_transposed, const bfp8_matrix *c,
                               bfp8_matrix *d) {
    (void)ctx; (void)a; (void)a_transposed; (void)b; (void)b_transposed; (void)c; (void)d;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cpu_gemm_bf16: not implemented yet");
}
