/*
 * cuda_stubs.c - the CUDA backend's entry points in a build without CUDA:
 * every one reports BFP8_ERR_NO_DEVICE, so a CPU-only build links and says
 * clearly why CUDA is not there.
 */
#include "internal.h"

static bfp8_status no_cuda(void) {
    return bfp8_fail(BFP8_ERR_NO_DEVICE, "blockfp8 was built without CUDA support");
}

int bfp8_cuda_count_devices(void) { return 0; }
bfp8_status bfp8_cuda_context_init(bfp8_context *ctx) { (void)ctx; return no_cuda(); }
void bfp8_cuda_context_release(bfp8_context *ctx) { (void)ctx; }
bfp8_status bfp8_cuda_malloc(bfp8_context *ctx, void **ptr, size_t bytes) {
    (void)ctx; (void)ptr; (void)bytes; return no_cuda();
}
void bfp8_cuda_free(bfp8_context *ctx, void *ptr) { (void)ctx; (void)ptr; }
bfp8_status bfp8_cuda_memset_zero(bfp8_context *ctx, void *ptr, size_t bytes) {
    (void)ctx; (void)ptr; (void)bytes; return no_cuda();
}
bfp8_status bfp8_cuda_copy(bfp8_context *ctx, void *dst, const void *src, size_t bytes, int to_device) {
    (void)ctx; (void)dst; (void)src; (void)bytes; (void)to_device; return no_cuda();
}
bfp8_status bfp8_cuda_synchronize(bfp8_context *ctx) { (void)ctx; return no_cuda(); }
bfp8_status bfp8_cuda_memory_in_use(const bfp8_context *ctx, size_t *bytes) {
    (void)ctx; (void)bytes; return no_cuda();
}
bfp8_status bfp8_cuda_check_pointer(const bfp8_context *ctx, const void *ptr, const char *what) {
    (void)ctx; (void)ptr; (void)what; return no_cuda();
}
bfp8_status bfp8_cuda_swiglu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                            bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    (void)ctx; (void)gate_up; (void)out_rows; (void)out_cols; (void)options; return no_cuda();
}
bfp8_status bfp8_cuda_swiglu_backward_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *dout,
                                                     const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                                     bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    (void)ctx; (void)dout; (void)gate_up; (void)out_rows; (void)out_cols; (void)options; return no_cuda();
}
bfp8_status bfp8_cuda_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out_rows,
                                     bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    (void)ctx; (void)x; (void)out_rows; (void)out_cols; (void)options; return no_cuda();
}
bfp8_status bfp8_cuda_quantize_128x128(bfp8_context *ctx, const bfp8_matrix *x, int64_t group_rows,
                                       bfp8_qmatrix *out, bfp8_qmatrix *out_t, const bfp8_quantize_options *options) {
    (void)ctx; (void)x; (void)group_rows; (void)out; (void)out_t; (void)options; return no_cuda();
}
bfp8_status bfp8_cuda_dequantize(bfp8_context *ctx, const bfp8_qmatrix *q, bfp8_matrix *out) {
    (void)ctx; (void)q; (void)out; return no_cuda();
}
bfp8_status bfp8_cuda_convert(bfp8_context *ctx, const bfp8_matrix *src, bfp8_matrix *dst) {
    (void)ctx; (void)src; (void)dst; return no_cuda();
}
bfp8_status bfp8_cuda_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                bfp8_matrix *d) {
    (void)ctx; (void)a; (void)b; (void)d; return no_cuda();
}
bfp8_status bfp8_cuda_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                const bfp8_matrix *c, bfp8_matrix *d) {
    (void)ctx; (void)a; (void)b; (void)c; (void)d; return no_cuda();
}
bfp8_status bfp8_cuda_gemm_1d2d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                        const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                        bfp8_matrix *d) {
    (void)ctx; (void)a; (void)b; (void)group_offsets; (void)num_groups; (void)offsets_on_backend; (void)d;
    return no_cuda();
}
bfp8_status bfp8_cuda_gemm_1d1d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                        const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                        const bfp8_matrix *c, bfp8_matrix *d) {
    (void)ctx; (void)a; (void)b; (void)group_offsets; (void)num_groups; (void)offsets_on_backend; (void)c; (void)d;
    return no_cuda();
}
bfp8_status bfp8_cuda_gemm_bf16(bfp8_context *ctx, const bfp8_matrix *a, int a_transposed,
                                const bfp8_matrix *b, int b_transposed, const bfp8_matrix *c,
                                bfp8_matrix *d) {
    (void)ctx; (void)a; (void)a_transposed; (void)b; (void)b_transposed; (void)c; (void)d;
    return no_cuda();
}
bfp8_status bfp8_cuda_attention_forward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                        const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse) {
    (void)ctx; (void)desc; (void)q; (void)k; (void)v; (void)o; (void)lse;
    return no_cuda();
}
bfp8_status bfp8_cuda_attention_backward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                         const uint16_t *k, const uint16_t *v, const uint16_t *o,
                                         const uint16_t *d_o, const float *lse, uint16_t *dq, uint16_t *dk,
                                         uint16_t *dv, void *workspace, size_t workspace_bytes) {
    (void)ctx; (void)desc; (void)q; (void)k; (void)v; (void)o; (void)d_o; (void)lse; (void)dq; (void)dk; (void)dv;
    (void)workspace; (void)workspace_bytes;
    return no_cuda();
}
size_t bfp8_cuda_attention_backward_workspace_size(const bfp8_attention_desc *desc) {
    (void)desc;
    return 0;
}
bfp8_status bfp8_cuda_attention_backward_variant(bfp8_context *ctx, const bfp8_attention_desc *desc,
                                                 const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                                 const uint16_t *o, const uint16_t *d_o, const float *lse,
                                                 uint16_t *dq, uint16_t *dk, uint16_t *dv, void *workspace,
                                                 int variant) {
    (void)ctx; (void)desc; (void)q; (void)k; (void)v; (void)o; (void)d_o; (void)lse; (void)dq; (void)dk; (void)dv;
    (void)workspace; (void)variant;
    return no_cuda();
}
bfp8_status bfp8_cuda_moe_route(bfp8_context *ctx, const float *logits, const float *bias, int64_t tokens,
        int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize, float scale, float *scores,
        int32_t *topk_expert, float *topk_weight, float *score_sum) {
    (void)ctx;
    (void)logits; (void)bias; (void)tokens; (void)num_experts; (void)top_k; (void)score_fn; (void)normalize;
    (void)scale; (void)scores; (void)topk_expert; (void)topk_weight; (void)score_sum;
    return no_cuda();
}
bfp8_status bfp8_cuda_moe_route_backward(bfp8_context *ctx, const float *scores, const int32_t *topk_expert,
        const float *d_topk_weight, const float *score_grad, int64_t tokens, int num_experts, int top_k,
        bfp8_moe_score_fn score_fn, int normalize, float scale, float *d_logits) {
    (void)ctx;
    (void)scores; (void)topk_expert; (void)d_topk_weight; (void)score_grad; (void)tokens; (void)num_experts;
    (void)top_k; (void)score_fn; (void)normalize; (void)scale; (void)d_logits;
    return no_cuda();
}
bfp8_status bfp8_cuda_moe_dispatch(bfp8_context *ctx, const int32_t *topk_expert, int64_t tokens, int top_k,
        int num_experts, int64_t capacity, int64_t max_rows, int32_t *slot_row, int32_t *row_slot, int64_t *offsets,
        int64_t *routed) {
    (void)ctx;
    (void)topk_expert; (void)tokens; (void)top_k; (void)num_experts; (void)capacity; (void)max_rows; (void)slot_row;
    (void)row_slot; (void)offsets; (void)routed;
    return no_cuda();
}
bfp8_status bfp8_cuda_moe_permute(bfp8_context *ctx, const bfp8_matrix *x, const int32_t *row_slot, int top_k,
        bfp8_matrix *xp, bfp8_qmatrix *xp_q, bfp8_qmatrix *xp_qt, const bfp8_quantize_options *options) {
    (void)ctx;
    (void)x; (void)row_slot; (void)top_k; (void)xp; (void)xp_q; (void)xp_qt; (void)options;
    return no_cuda();
}
bfp8_status bfp8_cuda_moe_combine(bfp8_context *ctx, const bfp8_matrix *yp, const int32_t *slot_row,
        const float *topk_weight, int top_k, int accumulate, bfp8_matrix *y) {
    (void)ctx;
    (void)yp; (void)slot_row; (void)topk_weight; (void)top_k; (void)accumulate; (void)y;
    return no_cuda();
}
bfp8_status bfp8_cuda_moe_combine_backward(bfp8_context *ctx, const bfp8_matrix *dy, const bfp8_matrix *yp,
        const int32_t *row_slot, const int32_t *slot_row, const float *topk_weight, int top_k, bfp8_matrix *dyp,
        bfp8_qmatrix *dyp_q, bfp8_qmatrix *dyp_qt, const bfp8_quantize_options *options, float *d_topk_weight) {
    (void)ctx;
    (void)dy; (void)yp; (void)row_slot; (void)slot_row; (void)topk_weight; (void)top_k; (void)dyp; (void)dyp_q;
    (void)dyp_qt;
    (void)options; (void)d_topk_weight;
    return no_cuda();
}
bfp8_status bfp8_cuda_moe_swiglu(bfp8_context *ctx, const bfp8_matrix *gu, bfp8_matrix *h) {
    (void)ctx;
    (void)gu; (void)h;
    return no_cuda();
}
bfp8_status bfp8_cuda_moe_swiglu_backward(bfp8_context *ctx, const bfp8_matrix *gu, const bfp8_matrix *dh,
        bfp8_matrix *dgu) {
    (void)ctx;
    (void)gu; (void)dh; (void)dgu;
    return no_cuda();
}
