/*
 * internal.h - what the library's own layers share and users never see:
 * error reporting, the context, and the backend entry points.
 *
 * Every op is split in three: the public function in src/ops validates its
 * arguments (once, for both backends) and dispatches to bfp8_cpu_<op> in
 * src/cpu or bfp8_cuda_<op> in src/cuda. The two implementations share one
 * signature, take arguments that are already valid, and are tested against
 * each other.
 */
#ifndef BFP8_INTERNAL_H
#define BFP8_INTERNAL_H

#include "blockfp8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/* Record a message for bfp8_last_error() and return status. printf-style. */
bfp8_status bfp8_fail(bfp8_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define BFP8_TRY(expr)                                                                       \
    do {                                                                                     \
        bfp8_status bfp8_try_status_ = (expr);                                               \
        if (bfp8_try_status_ != BFP8_OK) return bfp8_try_status_;                            \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Context                                                                   */

struct bfp8_context {
    bfp8_backend backend;
    int device;          /* CUDA device ordinal */
    void *stream;        /* cudaStream_t */
    void *cuda_state;    /* src/cuda: cuBLASLt handle, workspace, device properties */
    int quantize_pdl;    /* BFP8_OPTION_QUANTIZE_PDL */
    int quantize_warm_l2; /* BFP8_OPTION_QUANTIZE_WARM_L2 */
    int gemm_pdl;        /* BFP8_OPTION_GEMM_PDL */
    /* The layers' transient operands live within one call on the context's stream (bfp8_linear: the quantized
     * x of a forward, dy and dy^T of a backward; bfp8_moe: the permuted activations and their fp8 layouts that
     * no backward reads), so the layers of a context share this buffer, grown by bfp8_linear_create and
     * bfp8_moe_create to the largest layer's need (linear.c, moe.c). */
    void *call_scratch;
    size_t call_scratch_bytes;
};

/* Grow ctx->call_scratch to at least `bytes` (what it held is lost). */
bfp8_status bfp8_context_reserve_call_scratch(bfp8_context *ctx, size_t bytes);

/* An fp8-blockwise layer whose caller quantizes its input (or its dy) itself, fused into the op that makes it:
 * the views of where the layer's forward (backward) reads the quantized operands for `tokens` rows (the last
 * forward's), and the quantize options of the layer (its non-finite flag), then the forward (backward) from
 * them. bfp8_linear_input_views ends the last forward (its backward can no longer run). */
bfp8_status bfp8_linear_input_views(bfp8_linear *lin, int64_t tokens, bfp8_qmatrix *x_q, bfp8_qmatrix *xt_q,
                                    bfp8_quantize_options *options);
bfp8_status bfp8_linear_forward_quantized(bfp8_linear *lin, int64_t tokens, void *y, bfp8_dtype y_dtype);
bfp8_status bfp8_linear_dy_views(bfp8_linear *lin, bfp8_qmatrix *dy_q, bfp8_qmatrix *dyt_q,
                                 bfp8_quantize_options *options);
bfp8_status bfp8_linear_backward_quantized(bfp8_linear *lin, void *dx, bfp8_dtype dx_dtype, float *dw,
                                           int accumulate);

/* bfp8_linear_backward with an f32 dy (quantized as it is) and a bf16 dx: fp8-blockwise only, for a caller
 * whose gradient arrives in f32 (the trainer's residual stream). */
bfp8_status bfp8_linear_backward_f32_dy(bfp8_linear *lin, const float *dy, uint16_t *dx, float *dw, int accumulate);

bfp8_status bfp8_cuda_context_init(bfp8_context *ctx);
void bfp8_cuda_context_release(bfp8_context *ctx);
int bfp8_cuda_count_devices(void);
bfp8_status bfp8_cuda_malloc(bfp8_context *ctx, void **ptr, size_t bytes);
void bfp8_cuda_free(bfp8_context *ctx, void *ptr);
bfp8_status bfp8_cuda_memset_zero(bfp8_context *ctx, void *ptr, size_t bytes);
bfp8_status bfp8_cuda_copy(bfp8_context *ctx, void *dst, const void *src, size_t bytes, int to_device);
bfp8_status bfp8_cuda_synchronize(bfp8_context *ctx);
bfp8_status bfp8_cuda_memory_in_use(const bfp8_context *ctx, size_t *bytes);
/* BFP8_OK when ptr is device memory (or managed) usable by ctx's device. */
bfp8_status bfp8_cuda_check_pointer(const bfp8_context *ctx, const void *ptr, const char *what);

/* ------------------------------------------------------------------------ */
/* Validation helpers shared by the ops                                      */

int64_t bfp8_ceil_div(int64_t a, int64_t b);
int64_t bfp8_round_up(int64_t a, int64_t multiple);
bfp8_status bfp8_check_matrix(const bfp8_context *ctx, const bfp8_matrix *m, const char *what);
bfp8_status bfp8_check_qmatrix(const bfp8_context *ctx, const bfp8_qmatrix *q, bfp8_granularity gran,
                               const char *what);
bfp8_status bfp8_check_pointer(const bfp8_context *ctx, const void *ptr, const char *what);
/* Offsets of a grouped GEMM as the kernels take offsets they cannot check
 * (blockfp8.h): out[0] = 0, out[g + 1] = in[g + 1] rounded down to a
 * multiple of 128, clamped to [out[g], tokens rounded down to 128]. */
void bfp8_clamp_group_offsets(const int64_t *in, int num_groups, int64_t tokens, int64_t *out);
/* Number of scale floats q's layout spans (last used index + 1). */
int64_t bfp8_qmatrix_scale_span(const bfp8_qmatrix *q);

/* ------------------------------------------------------------------------ */
/* SwiGLU fused with the 1x128 quantizer (src/ops/swiglu_ops.c), for the     */
/* fp8-blockwise trainer's MLP: both layouts from one pass.                  */

/* h = silu(g) u of gate_up = [g | u] (tokens x 2 hidden, bf16), rounded to
 * bf16 and quantized 1x128: out_rows tokens x hidden, out_cols hidden x
 * tokens; bit for bit bfp8_quantize_1x128 of the backend's SwiGLU. */
bfp8_status bfp8_swiglu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                       bfp8_qmatrix *out_cols, const bfp8_quantize_options *options);
/* [dg | du], SwiGLU's gradients from dout (tokens x hidden, bf16) and
 * gate_up, rounded to bf16 and quantized 1x128: out_rows tokens x 2 hidden,
 * out_cols 2 hidden x tokens; hidden a multiple of 128 (no group straddles
 * g and u). */
bfp8_status bfp8_swiglu_backward_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *dout,
                                                const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                                bfp8_qmatrix *out_cols, const bfp8_quantize_options *options);
/* The same checks as bfp8_quantize_1x128's options (src/ops/ops.c). */
bfp8_status bfp8_check_quantize_options(const bfp8_context *ctx, const bfp8_quantize_options *options,
                                        const char *fn);

/* ------------------------------------------------------------------------ */
/* Backend entry points. Arguments are validated; the two backends of one   */
/* op share a signature.                                                     */

/* CPU reference (src/cpu). */
bfp8_status bfp8_cpu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out_rows,
                                bfp8_qmatrix *out_cols, const bfp8_quantize_options *options);
/* group_rows 0: x is one matrix; else a stack of them (bfp8_quantize_128x128_stacked) */
bfp8_status bfp8_cpu_quantize_128x128(bfp8_context *ctx, const bfp8_matrix *x, int64_t group_rows, bfp8_qmatrix *out,
                                  bfp8_qmatrix *out_t, const bfp8_quantize_options *options);
bfp8_status bfp8_cpu_dequantize(bfp8_context *ctx, const bfp8_qmatrix *q, bfp8_matrix *out);
bfp8_status bfp8_cpu_convert(bfp8_context *ctx, const bfp8_matrix *src, bfp8_matrix *dst);
bfp8_status bfp8_cpu_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                           bfp8_matrix *d);
bfp8_status bfp8_cpu_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                           const bfp8_matrix *c, bfp8_matrix *d);
/* Grouped GEMMs: offsets_on_backend 0, host offsets already checked; 1,
 * offsets in backend memory, taken as bfp8_clamp_group_offsets makes them. */
bfp8_status bfp8_cpu_gemm_1d2d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                       const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                       bfp8_matrix *d);
bfp8_status bfp8_cpu_gemm_1d1d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                       const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                       const bfp8_matrix *c, bfp8_matrix *d);
bfp8_status bfp8_cpu_gemm_bf16(bfp8_context *ctx, const bfp8_matrix *a, int a_transposed,
                           const bfp8_matrix *b, int b_transposed, const bfp8_matrix *c,
                           bfp8_matrix *d);
bfp8_status bfp8_cpu_swiglu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                           bfp8_qmatrix *out_cols, const bfp8_quantize_options *options);
bfp8_status bfp8_cpu_swiglu_backward_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *dout,
                                                    const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                                    bfp8_qmatrix *out_cols, const bfp8_quantize_options *options);

/* CUDA (src/cuda; without CUDA support, src/core/cuda_stubs.c). */
bfp8_status bfp8_cuda_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *x, bfp8_qmatrix *out_rows,
                                 bfp8_qmatrix *out_cols, const bfp8_quantize_options *options);
bfp8_status bfp8_cuda_quantize_128x128(bfp8_context *ctx, const bfp8_matrix *x, int64_t group_rows,
                                   bfp8_qmatrix *out, bfp8_qmatrix *out_t, const bfp8_quantize_options *options);
bfp8_status bfp8_cuda_swiglu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                            bfp8_qmatrix *out_cols, const bfp8_quantize_options *options);
bfp8_status bfp8_cuda_swiglu_backward_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *dout,
                                                     const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                                     bfp8_qmatrix *out_cols, const bfp8_quantize_options *options);
bfp8_status bfp8_cuda_dequantize(bfp8_context *ctx, const bfp8_qmatrix *q, bfp8_matrix *out);
bfp8_status bfp8_cuda_convert(bfp8_context *ctx, const bfp8_matrix *src, bfp8_matrix *dst);
bfp8_status bfp8_cuda_gemm_1d2d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                            bfp8_matrix *d);
bfp8_status bfp8_cuda_gemm_1d1d(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                            const bfp8_matrix *c, bfp8_matrix *d);
bfp8_status bfp8_cuda_gemm_1d2d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                        const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                        bfp8_matrix *d);
bfp8_status bfp8_cuda_gemm_1d1d_grouped(bfp8_context *ctx, const bfp8_qmatrix *a, const bfp8_qmatrix *b,
                                        const int64_t *group_offsets, int num_groups, int offsets_on_backend,
                                        const bfp8_matrix *c, bfp8_matrix *d);
bfp8_status bfp8_cuda_gemm_bf16(bfp8_context *ctx, const bfp8_matrix *a, int a_transposed,
                            const bfp8_matrix *b, int b_transposed, const bfp8_matrix *c,
                            bfp8_matrix *d);


/* Attention (src/ops/attention_ops.c validates; src/cpu/attention_cpu.c,
 * src/cuda/attention_*.cu). The desc the backends get has every default
 * resolved: n_kv_heads, softmax_scale and all eight row strides are set. */
bfp8_status bfp8_cpu_attention_forward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                       const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse);
bfp8_status bfp8_cpu_attention_backward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                        const uint16_t *k, const uint16_t *v, const uint16_t *o,
                                        const uint16_t *d_o, const float *lse, uint16_t *dq, uint16_t *dk,
                                        uint16_t *dv, void *workspace, size_t workspace_bytes);
bfp8_status bfp8_cuda_attention_forward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                        const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse);
bfp8_status bfp8_cuda_attention_backward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                         const uint16_t *k, const uint16_t *v, const uint16_t *o,
                                         const uint16_t *d_o, const float *lse, uint16_t *dq, uint16_t *dk,
                                         uint16_t *dv, void *workspace, size_t workspace_bytes);
/* Workspace bytes of the CUDA backward (a resolved desc); the CPU needs none. */
size_t bfp8_cuda_attention_backward_workspace_size(const bfp8_attention_desc *desc);
/* The CUDA backward with a chosen kernel variant, for bench/attention to
 * compare them (0: the default, 1: causal attention in the time order, see
 * src/cuda/attention_common.cuh); desc resolved, arguments unchecked,
 * workspace as sized by bfp8_cuda_attention_backward_workspace_size. */
bfp8_status bfp8_cuda_attention_backward_variant(bfp8_context *ctx, const bfp8_attention_desc *desc,
                                                 const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                                 const uint16_t *o, const uint16_t *d_o, const float *lse,
                                                 uint16_t *dq, uint16_t *dk, uint16_t *dv, void *workspace,
                                                 int variant);


/* Mixture of experts (src/ops/moe_ops.c validates; src/cpu/moe_cpu.c,
 * src/cuda/moe.cu): the ops of blockfp8.h's MoE section, arguments checked
 * (the permuted row count P is the rows of the permuted output or input). */
bfp8_status bfp8_cpu_moe_route(bfp8_context *ctx, const float *logits, const float *bias, int64_t tokens,
        int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize, float scale, float *scores,
        int32_t *topk_expert, float *topk_weight, float *score_sum);
bfp8_status bfp8_cpu_moe_route_backward(bfp8_context *ctx, const float *scores, const int32_t *topk_expert,
        const float *d_topk_weight, const float *score_grad, int64_t tokens, int num_experts, int top_k,
        bfp8_moe_score_fn score_fn, int normalize, float scale, float *d_logits);
bfp8_status bfp8_cpu_moe_dispatch(bfp8_context *ctx, const int32_t *topk_expert, int64_t tokens, int top_k,
        int num_experts, int64_t capacity, int64_t max_rows, int32_t *slot_row, int32_t *row_slot, int64_t *offsets,
        int64_t *routed);
bfp8_status bfp8_cpu_moe_permute(bfp8_context *ctx, const bfp8_matrix *x, const int32_t *row_slot, int top_k,
        bfp8_matrix *xp, bfp8_qmatrix *xp_q, bfp8_qmatrix *xp_qt, const bfp8_quantize_options *options);
bfp8_status bfp8_cpu_moe_combine(bfp8_context *ctx, const bfp8_matrix *yp, const int32_t *slot_row,
        const float *topk_weight, int top_k, int accumulate, bfp8_matrix *y);
bfp8_status bfp8_cpu_moe_combine_backward(bfp8_context *ctx, const bfp8_matrix *dy, const bfp8_matrix *yp,
        const int32_t *row_slot, const int32_t *slot_row, const float *topk_weight, int top_k, bfp8_matrix *dyp,
        bfp8_qmatrix *dyp_q, bfp8_qmatrix *dyp_qt, const bfp8_quantize_options *options, float *d_topk_weight);
bfp8_status bfp8_cpu_moe_swiglu(bfp8_context *ctx, const bfp8_matrix *gu, bfp8_matrix *h);
bfp8_status bfp8_cpu_moe_swiglu_backward(bfp8_context *ctx, const bfp8_matrix *gu, const bfp8_matrix *dh,
        bfp8_matrix *dgu);
bfp8_status bfp8_cuda_moe_route(bfp8_context *ctx, const float *logits, const float *bias, int64_t tokens,
        int num_experts, int top_k, bfp8_moe_score_fn score_fn, int normalize, float scale, float *scores,
        int32_t *topk_expert, float *topk_weight, float *score_sum);
bfp8_status bfp8_cuda_moe_route_backward(bfp8_context *ctx, const float *scores, const int32_t *topk_expert,
        const float *d_topk_weight, const float *score_grad, int64_t tokens, int num_experts, int top_k,
        bfp8_moe_score_fn score_fn, int normalize, float scale, float *d_logits);
bfp8_status bfp8_cuda_moe_dispatch(bfp8_context *ctx, const int32_t *topk_expert, int64_t tokens, int top_k,
        int num_experts, int64_t capacity, int64_t max_rows, int32_t *slot_row, int32_t *row_slot, int64_t *offsets,
        int64_t *routed);
bfp8_status bfp8_cuda_moe_permute(bfp8_context *ctx, const bfp8_matrix *x, const int32_t *row_slot, int top_k,
        bfp8_matrix *xp, bfp8_qmatrix *xp_q, bfp8_qmatrix *xp_qt, const bfp8_quantize_options *options);
bfp8_status bfp8_cuda_moe_combine(bfp8_context *ctx, const bfp8_matrix *yp, const int32_t *slot_row,
        const float *topk_weight, int top_k, int accumulate, bfp8_matrix *y);
bfp8_status bfp8_cuda_moe_combine_backward(bfp8_context *ctx, const bfp8_matrix *dy, const bfp8_matrix *yp,
        const int32_t *row_slot, const int32_t *slot_row, const float *topk_weight, int top_k, bfp8_matrix *dyp,
        bfp8_qmatrix *dyp_q, bfp8_qmatrix *dyp_qt, const bfp8_quantize_options *options, float *d_topk_weight);
bfp8_status bfp8_cuda_moe_swiglu(bfp8_context *ctx, const bfp8_matrix *gu, bfp8_matrix *h);
bfp8_status bfp8_cuda_moe_swiglu_backward(bfp8_context *ctx, const bfp8_matrix *gu, const bfp8_matrix *dh,
        bfp8_matrix *dgu);

#ifdef __cplusplus
}
#endif

#endif /* BFP8_INTERNAL_H */
