/*
 * quantize_128x128.cu - bfp8_cuda_quantize_128x128: weights in 128 x 128
 * blocks, W (out) and optionally W^T (out_t, the same codes and scales
 * transposed) from one read of W. The kernel is quantize_common.cuh's tile
 * kernel with one group per tile.
 */
#include "cuda/quantize_common.cuh"

using namespace bfp8_quant;

template <typename In, bool kAligned>
static bfp8_status launch_128x128(bfp8_context *ctx, const tile_args &args, bool transposed) {
    static const char fn[] = "bfp8_quantize_128x128";
    if (transposed) return launch_quantize_tiles<In, true, true, true, kAligned>(ctx, args, fn);
    return launch_quantize_tiles<In, true, true, false, kAligned>(ctx, args, fn);
}

bfp8_status bfp8_cuda_quantize_128x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out,
                                       bfp8_qmatrix *out_t, const bfp8_quantize_options *options) {
    const size_t in_size = bfp8_dtype_size(x->dtype);
    tile_args args = {};
    args.x = x->data;
    args.x_ld = x->ld;
    args.rows = x->rows;
    args.cols = x->cols;
    args.q = out->data;
    args.q_ld = out->ld;
    args.q_scales = out->scales;
    args.q_scale_ld = out->scale_ld;
    bool aligned = aligned16(x->data, x->ld, in_size) && aligned16(out->data, out->ld, 1);
    if (out_t) {
        args.t = out_t->data;
        args.t_ld = out_t->ld;
        args.t_scales = out_t->scales;
        args.t_scale_ld = out_t->scale_ld;
        aligned = aligned && aligned16(out_t->data, out_t->ld, 1);
    }
    args.nonfinite_flag = options ? options->nonfinite_flag : NULL;
    args.pow2 = options ? options->pow2_scales : 0;
    args.col_tiles = bfp8_cdiv(x->cols, kTile);
    args.num_tiles = bfp8_cdiv(x->rows, kTile) * args.col_tiles;

    const bool transposed = out_t != NULL;
    if (x->dtype == BFP8_BF16)
        return aligned ? launch_128x128<uint16_t, true>(ctx, args, transposed)
                       : launch_128x128<uint16_t, false>(ctx, args, transposed);
    return aligned ? launch_128x128<float, true>(ctx, args, transposed)
                   : launch_128x128<float, false>(ctx, args, transposed);
}
