/*
 * attention_host.cu - the CUDA backend's attention entry points
 * (bfp8_cuda_attention_*, internal.h) and the 4-D tensor maps the kernels
 * read q, k, v and d_o through. The kernels: attention_fwd.cu, attention_bwd.cu.
 */
#include "cuda/attention_common.cuh"
#include "cuda/tensor_map.cuh"

bfp8_status bfp8_attention_tensor_map(CUtensorMap *map, const uint16_t *base, int64_t head_dim, int64_t heads,
                                      int64_t seq, int64_t batch, int64_t row_stride, int box_rows,
                                      const char *what) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = bfp8_cuda_tensor_map_encoder();
    if (!encode) return bfp8_fail(BFP8_ERR_CUDA, "cuTensorMapEncodeTiled is not available from the driver");
    const cuuint64_t dims[4] = {(cuuint64_t)head_dim, (cuuint64_t)heads, (cuuint64_t)seq, (cuuint64_t)batch};
    const cuuint64_t strides[3] = {(cuuint64_t)head_dim * 2, (cuuint64_t)row_stride * 2,
                                   (cuuint64_t)row_stride * 2 * (cuuint64_t)seq};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)box_rows, 1};
    const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<uint16_t *>(base), dims, strides,
                              box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return bfp8_fail(BFP8_ERR_CUDA,
                         "cuTensorMapEncodeTiled(%s: %lld x %lld x %lld x %lld, row stride %lld) failed: %d", what,
                         (long long)batch, (long long)seq, (long long)heads, (long long)head_dim,
                         (long long)row_stride, (int)r);
    return BFP8_OK;
}

bfp8_status bfp8_cuda_attention_forward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                        const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse) {
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    return bfp8_attention_forward_launch(bfp8_stream_of(ctx), bfp8_cuda_state_of(ctx)->num_sms, desc, q, k, v, o,
                                         lse);
}

bfp8_status bfp8_cuda_attention_backward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                         const uint16_t *k, const uint16_t *v, const uint16_t *o,
                                         const uint16_t *d_o, const float *lse, uint16_t *dq, uint16_t *dk,
                                         uint16_t *dv, void *workspace, size_t workspace_bytes) {
    (void)workspace_bytes; /* checked against bfp8_cuda_attention_backward_workspace_size */
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    return bfp8_attention_backward_launch(bfp8_stream_of(ctx), desc, q, k, v, o, d_o, lse, dq, dk, dv, workspace,
                                          bfp8_attn::kBwdDefault);
}

bfp8_status bfp8_cuda_attention_backward_variant(bfp8_context *ctx, const bfp8_attention_desc *desc,
                                                 const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                                 const uint16_t *o, const uint16_t *d_o, const float *lse,
                                                 uint16_t *dq, uint16_t *dk, uint16_t *dv, void *workspace,
                                                 int variant) {
    if (variant < 0 || variant >= bfp8_attn::kBwdVariants)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "attention backward variant %d does not exist", variant);
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    return bfp8_attention_backward_launch(bfp8_stream_of(ctx), desc, q, k, v, o, d_o, lse, dq, dk, dv, workspace,
                                          variant);
}
