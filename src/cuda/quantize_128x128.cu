/*
 * quantize_128x128.cu - bfp8_cuda_quantize_128x128: weights in 128 x 128
 * blocks, W (out) and optionally W^T (out_t, the same codes and scales
 * transposed) from one read of W; or a stack of weights, each one's W^T
 * stacked likewise (group_rows). The kernel is quantize_tiles_kernel.cuh
 * with one group per tile.
 */
#include "cuda/quantize_launch.cuh"

using namespace bfp8_quant;

template <typename In, bool kAligned>
static bfp8_status launch_128x128(bfp8_context *ctx, const tile_args &args, bool transposed) {
    static const char fn[] = "bfp8_quantize_128x128";
    if (transposed) return launch_quantize_tiles<In, true, true, true, kAligned>(ctx, args, fn);
    return launch_quantize_tiles<In, true, true, false, kAligned>(ctx, args, fn);
}

bfp8_status bfp8_cuda_quantize_128x128(bfp8_context *ctx, const bfp8_matrix *x, int64_t group_rows,
                                       bfp8_qmatrix *out, bfp8_qmatrix *out_t, const bfp8_quantize_options *options) {
    bool aligned;
    tile_args args = make_tile_args(x, out, out_t, options, &aligned);
    args.t_group_rows = group_rows;
    const bool transposed = out_t != NULL;
    if (x->dtype == BFP8_BF16)
        return aligned ? launch_128x128<uint16_t, true>(ctx, args, transposed)
                       : launch_128x128<uint16_t, false>(ctx, args, transposed);
    return aligned ? launch_128x128<float, true>(ctx, args, transposed)
                   : launch_128x128<float, false>(ctx, args, transposed);
}
