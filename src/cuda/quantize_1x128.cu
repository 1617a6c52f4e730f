/*
 * quantize_1x128.cu - bfp8_cuda_quantize_1x128: activations and gradients in
 * 1 x 128 groups, x as stored (out_rows), x transposed (out_cols) or both
 * from one read of x. The kernel is quantize_tiles_kernel.cuh.
 */
#include "cuda/quantize_launch.cuh"

using namespace bfp8_quant;

template <typename In, bool kAligned>
static bfp8_status launch_1x128(bfp8_context *ctx, const tile_args &args, bool rows, bool cols) {
    static const char fn[] = "bfp8_quantize_1x128";
    if (rows && cols) return launch_quantize_tiles<In, false, true, true, kAligned>(ctx, args, fn);
    if (rows) return launch_quantize_tiles<In, false, true, false, kAligned>(ctx, args, fn);
    return launch_quantize_tiles<In, false, false, true, kAligned>(ctx, args, fn);
}

bfp8_status bfp8_cuda_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out_rows,
                                     bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    bool aligned;
    const tile_args args = make_tile_args(x, out_rows, out_cols, options, &aligned);
    const bool rows = out_rows != NULL, cols = out_cols != NULL;
    if (x->dtype == BFP8_BF16)
        return aligned ? launch_1x128<uint16_t, true>(ctx, args, rows, cols)
                       : launch_1x128<uint16_t, false>(ctx, args, rows, cols);
    return aligned ? launch_1x128<float, true>(ctx, args, rows, cols)
                   : launch_1x128<float, false>(ctx, args, rows, cols);
}
