/*
 * model_ops.h - the model's non-linear-layer operations behind one table, so
 * that the same forward and backward run on the CPU or on a CUDA device.
 *
 * Every op takes a model_ops_ctx (model_ops_ctx.h) as its first argument,
 * and every CUDA function has exactly the signature of its CPU reference
 * (the functions in rmsnorm.h, rope.h, attention.h, swiglu.h,
 * cross_entropy.h, embedding.h, adamw.h, matmul.h and matmul_bf16.h) and computes the same
 * thing within fp32 rounding; its pointers are device pointers (memory from
 * bfp8_malloc of a CUDA context), and it runs asynchronously on the
 * context's stream, except the two functions that return a number
 * (loss_mean, gradient_global_norm), which wait for it.
 *
 * Failures: a CUDA op keeps its first failure in the model_ops_ctx and
 * model_ops_status() reports it; the ops return nothing (or their number).
 * A status per op would put a check after each of the some twenty calls per
 * layer and make the two ops that return a number take an out pointer,
 * while a failure on the device (an asynchronous launch error) is seen only
 * later anyway; so the caller checks model_ops_status() where it needs to
 * know: the model at the end of a forward, a backward, an optimizer step.
 * The CPU references cannot fail.
 */
#ifndef BFP8_MODEL_MODEL_OPS_H
#define BFP8_MODEL_MODEL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "blockfp8.h"
#include "model/adamw.h"
#include "model/model_ops_ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct model_ops {
    const char *name; /* "cpu" or "cuda" */
    void (*embedding_forward)(model_ops_ctx *oc, float *out, const int32_t *tokens, const float *table, int64_t count,
                              int64_t dim);
    void (*embedding_backward)(model_ops_ctx *oc, float *dtable, const float *dout, const int32_t *tokens,
                               int64_t count, int64_t dim);
    void (*rmsnorm_forward)(model_ops_ctx *oc, float *out, float *rstd, const float *x, const float *weight,
                            int64_t tokens, int64_t dim, float eps);
    void (*rmsnorm_forward_bf16)(model_ops_ctx *oc, uint16_t *out, float *rstd, const float *x, const float *weight,
                                 int64_t tokens, int64_t dim, float eps);
    void (*rmsnorm_backward)(model_ops_ctx *oc, float *dx, float *dweight, const float *dout, const float *x,
                             const float *weight, const float *rstd, int64_t tokens, int64_t dim);
    void (*rmsnorm_backward_bf16)(model_ops_ctx *oc, float *dx, float *dweight, const uint16_t *dout, const float *x,
                                  const float *weight, const float *rstd, int64_t tokens, int64_t dim);
    void (*rope_forward)(model_ops_ctx *oc, float *x, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                         int64_t row_stride, const float *cos_table, const float *sin_table);
    void (*rope_backward)(model_ops_ctx *oc, float *dx, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                          int64_t row_stride, const float *cos_table, const float *sin_table);
    void (*attention_forward)(model_ops_ctx *oc, float *out, float *probs, float *scratch, const float *qkv,
                              int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim);
    void (*attention_backward)(model_ops_ctx *oc, float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *probs, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim);
    /* attention with RoPE folded in (attention.h): the flash path's op */
    void (*rope_attention_forward)(model_ops_ctx *oc, float *out, uint16_t *out_bf16, float *probs, float *scratch,
                                   const float *qkv, const uint16_t *qkv_bf16, int64_t batch, int64_t seq,
                                   int64_t n_heads, int64_t head_dim, const float *cos_table, const float *sin_table);
    void (*rope_attention_backward)(model_ops_ctx *oc, float *dqkv, uint16_t *dqkv_bf16, float *scratch,
                                    const float *dout, const uint16_t *dout_bf16, const float *qkv,
                                    const uint16_t *qkv_bf16, const float *probs, int64_t batch, int64_t seq,
                                    int64_t n_heads, int64_t head_dim, const float *cos_table, const float *sin_table);
    void (*swiglu_forward)(model_ops_ctx *oc, float *out, const float *gate_up, int64_t tokens, int64_t hidden);
    void (*swiglu_backward)(model_ops_ctx *oc, float *dgate_up, const float *dout, const float *gate_up, int64_t tokens,
                            int64_t hidden);
    void (*swiglu_forward_bf16)(model_ops_ctx *oc, uint16_t *out, const uint16_t *gate_up, int64_t tokens,
                                int64_t hidden);
    void (*swiglu_backward_bf16)(model_ops_ctx *oc, uint16_t *dgate_up, const uint16_t *dout, const uint16_t *gate_up,
                                 int64_t tokens, int64_t hidden);
    void (*cross_entropy_rows)(model_ops_ctx *oc, float *row_losses, void *dlogits, bfp8_dtype dlogits_dtype,
                               const float *logits, const int32_t *targets, int64_t tokens, int64_t vocab, float scale);
    double (*loss_mean)(model_ops_ctx *oc, const float *row_losses, int64_t n);
    void (*matmul_f32)(model_ops_ctx *oc, float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed,
                       const float *b, int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate);
    void (*matmul_bf16)(model_ops_ctx *oc, float *c, int64_t ldc, const uint16_t *a, int64_t lda, int a_transposed,
                        const uint16_t *b, int64_t ldb, int b_transposed, int64_t M, int64_t N, int64_t K, float alpha,
                        int accumulate);
    void (*transpose_f32)(model_ops_ctx *oc, float *dst, const float *src, int64_t rows, int64_t cols);
    void (*adamw_update)(model_ops_ctx *oc, float *param, const float *grad, float *m, float *v, size_t n,
                         const adamw_hparams *h, float grad_scale, int64_t step, int decay);
    double (*gradient_global_norm)(model_ops_ctx *oc, const float *grad, size_t n);
    /* dst = src (n floats); dst = 0; dst += src; dst = bf16(src) (round to
     * nearest even); dst = f32(src), or dst += f32(src) when add; dst = a +
     * f32(b) (a may be dst) */
    void (*copy_f32)(model_ops_ctx *oc, float *dst, const float *src, int64_t n);
    void (*zero_f32)(model_ops_ctx *oc, float *dst, int64_t n);
    void (*add_f32)(model_ops_ctx *oc, float *dst, const float *src, int64_t n);
    void (*f32_to_bf16)(model_ops_ctx *oc, uint16_t *dst, const float *src, int64_t n);
    void (*bf16_to_f32)(model_ops_ctx *oc, float *dst, const uint16_t *src, int64_t n, int add);
    void (*add_bf16_f32)(model_ops_ctx *oc, float *dst, const float *a, const uint16_t *b, int64_t n);
} model_ops;

/* The CPU references, and the table of a context's backend (NULL when this
 * build has no CUDA and the context is a CUDA one). */
extern const model_ops model_ops_cpu;
const model_ops *model_ops_for(const bfp8_context *ctx);

/* An ops context for ctx's backend: its stream, the options, no failure,
 * no profile. Nothing is allocated until a CUDA op needs it. */
void model_ops_ctx_init(model_ops_ctx *oc, const bfp8_context *ctx, int tf32, int flash_attention);
/* Frees what the CUDA ops made (cuBLAS handle, scratch buffers), after
 * waiting for the stream; the object can be initialised again. */
void model_ops_ctx_release(model_ops_ctx *oc);
/* BFP8_OK, or the first failure of an op since the last call (the message
 * through bfp8_last_error()); the kept failure is then cleared. On CUDA a
 * launch failure not yet seen is picked up first. */
bfp8_status model_ops_status(model_ops_ctx *oc);
/* Keep a failure in oc (the first one wins): what the CUDA ops call. */
void model_ops_fail(model_ops_ctx *oc, const char *message);

/* --- the CUDA implementations (src/model/cuda/) ----------------------------- */
/* Frees oc->cuda (model_ops_ctx_release); keeps a launch failure not yet
 * seen (model_ops_status). */
void model_cuda_release(model_ops_ctx *oc);
void model_cuda_poll(model_ops_ctx *oc);
int model_cuda_flash_attention_supported(int64_t head_dim);
/* Floats of attention scratch flash attention needs: bf16 copies of dO and
 * dqkv (4 tokens x dim bf16), and the backward's workspace (its dQ sums, f32
 * per query row padded to 128 rows, with two floats and a semaphore per row,
 * and alignment), which flash_attention.cu checks it fits. */
static inline int64_t flash_attention_scratch_floats(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
    const int64_t elems = batch * seq * heads * head_dim, rows_pad = batch * heads * ((seq + 127) / 128 * 128);
    return 2 * elems + rows_pad * (head_dim + 3) + 1024;
}
/* Floats of a layer's `probs` buffer with flash attention: what its backward
 * reads (flash_attention.cu): the log-sum-exp of each query row (padded to
 * 4), the output as bf16 and the q | k | v the kernel read as bf16. */
static inline int64_t flash_attention_saved_floats(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
    return (batch * heads * seq + 3) / 4 * 4 + 2 * batch * seq * heads * head_dim;
}

void embedding_forward_cuda(model_ops_ctx *oc, float *out, const int32_t *tokens, const float *table, int64_t count,
                            int64_t dim);
void embedding_backward_cuda(model_ops_ctx *oc, float *dtable, const float *dout, const int32_t *tokens, int64_t count,
                             int64_t dim);
void rmsnorm_forward_cuda(model_ops_ctx *oc, float *out, float *rstd, const float *x, const float *weight,
                          int64_t tokens, int64_t dim, float eps);
void rmsnorm_forward_bf16_cuda(model_ops_ctx *oc, uint16_t *out, float *rstd, const float *x, const float *weight,
                               int64_t tokens, int64_t dim, float eps);
void rmsnorm_backward_cuda(model_ops_ctx *oc, float *dx, float *dweight, const float *dout, const float *x,
                           const float *weight, const float *rstd, int64_t tokens, int64_t dim);
void rmsnorm_backward_bf16_cuda(model_ops_ctx *oc, float *dx, float *dweight, const uint16_t *dout, const float *x,
                                const float *weight, const float *rstd, int64_t tokens, int64_t dim);
void rope_forward_cuda(model_ops_ctx *oc, float *x, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                       int64_t row_stride, const float *cos_table, const float *sin_table);
void rope_backward_cuda(model_ops_ctx *oc, float *dx, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                        int64_t row_stride, const float *cos_table, const float *sin_table);
void attention_forward_cuda(model_ops_ctx *oc, float *out, float *probs, float *scratch, const float *qkv,
                            int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim);
void attention_backward_cuda(model_ops_ctx *oc, float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *probs, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim);
void rope_attention_forward_cuda(model_ops_ctx *oc, float *out, uint16_t *out_bf16, float *probs, float *scratch,
                                 const float *qkv, const uint16_t *qkv_bf16, int64_t batch, int64_t seq,
                                 int64_t n_heads, int64_t head_dim, const float *cos_table, const float *sin_table);
void rope_attention_backward_cuda(model_ops_ctx *oc, float *dqkv, uint16_t *dqkv_bf16, float *scratch,
                                  const float *dout, const uint16_t *dout_bf16, const float *qkv,
                                  const uint16_t *qkv_bf16, const float *probs, int64_t batch, int64_t seq,
                                  int64_t n_heads, int64_t head_dim, const float *cos_table, const float *sin_table);
void swiglu_forward_cuda(model_ops_ctx *oc, float *out, const float *gate_up, int64_t tokens, int64_t hidden);
void swiglu_backward_cuda(model_ops_ctx *oc, float *dgate_up, const float *dout, const float *gate_up, int64_t tokens,
                          int64_t hidden);
void swiglu_forward_bf16_cuda(model_ops_ctx *oc, uint16_t *out, const uint16_t *gate_up, int64_t tokens,
                              int64_t hidden);
void swiglu_backward_bf16_cuda(model_ops_ctx *oc, uint16_t *dgate_up, const uint16_t *dout, const uint16_t *gate_up,
                               int64_t tokens, int64_t hidden);
void cross_entropy_rows_cuda(model_ops_ctx *oc, float *row_losses, void *dlogits, bfp8_dtype dlogits_dtype,
                             const float *logits, const int32_t *targets, int64_t tokens, int64_t vocab, float scale);
double loss_mean_cuda(model_ops_ctx *oc, const float *row_losses, int64_t n);
void matmul_f32_cuda(model_ops_ctx *oc, float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed,
                     const float *b, int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate);
void matmul_bf16_cuda(model_ops_ctx *oc, float *c, int64_t ldc, const uint16_t *a, int64_t lda, int a_transposed,
                      const uint16_t *b, int64_t ldb, int b_transposed, int64_t M, int64_t N, int64_t K, float alpha,
                      int accumulate);
void transpose_f32_cuda(model_ops_ctx *oc, float *dst, const float *src, int64_t rows, int64_t cols);
void adamw_update_cuda(model_ops_ctx *oc, float *param, const float *grad, float *m, float *v, size_t n,
                       const adamw_hparams *h, float grad_scale, int64_t step, int decay);
double gradient_global_norm_cuda(model_ops_ctx *oc, const float *grad, size_t n);
void copy_f32_cuda(model_ops_ctx *oc, float *dst, const float *src, int64_t n);
void zero_f32_cuda(model_ops_ctx *oc, float *dst, int64_t n);
void add_f32_cuda(model_ops_ctx *oc, float *dst, const float *src, int64_t n);
void f32_to_bf16_cuda(model_ops_ctx *oc, uint16_t *dst, const float *src, int64_t n);
void bf16_to_f32_cuda(model_ops_ctx *oc, float *dst, const uint16_t *src, int64_t n, int add);
void add_bf16_f32_cuda(model_ops_ctx *oc, float *dst, const float *a, const uint16_t *b, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
