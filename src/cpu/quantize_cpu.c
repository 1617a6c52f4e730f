/* quantize_cpu.c - CPU reference quantizers (placeholder: being written). */
#include "internal.h"

bfp8_status bfp8_cpu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out_rows,
                                    bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    (void)ctx; (void)x; (void)out_rows; (void)out_cols; (void)options;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cpu_quantize_1x128: not implemented yet");
}
bfp8_status bfp8_cpu_quantize_128x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out,
                                      bfp8_qmatrix *out_t, const bfp8_quantize_options *options) {
    (void)ctx; (void)x; (void)out; (void)out_t; (void)options;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cpu_quantize_128x128: not implemented yet");
}
bfp8_status bfp8_cpu_dequantize(bfp8_context *ctx, const bfp8_qmatrix *q, bfp8_matrix *out) {
    (void)ctx; (void)q; (void)out;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cpu_dequantize: not implemented yet");
}
bfp8_status bfp8_cpu_convert(bfp8_context *ctx, const bfp8_matrix *src, bfp8_matrix *dst) {
    (void)ctx; (void)src; (void)dst;
    return bfp8_fail(BFP8_ERR_UNSUPPORTED, "bfp8_cpu_convert: not implemented yet");
}
