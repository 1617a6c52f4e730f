/*
 * model_ops.h - the model's non-linear-layer operations behind one table, so
 * that the same forward and backward run on the CPU or on a CUDA device.
 *
 * Every CUDA function has exactly the signature of its CPU reference (the
 * functions in rmsnorm.h, rope.h, attention.h, swiglu.h, cross_entropy.h,
 * embedding.h, adamw.h and matmul.h) and computes the same thing within
 * fp32 rounding; its pointers are device pointers (memory from bfp8_malloc
 * of a CUDA context), and it runs asynchronously on the stream given to
 * model_cuda_set_stream (the context's), except the two functions that
 * return a number (cross_entropy_forward, gradient_global_norm), which wait
 * for it. A CUDA or cuBLAS failure is kept and reported by
 * model_cuda_status(); the functions themselves return nothing, like their
 * CPU references.
 */
#ifndef BFP8_MODEL_MODEL_OPS_H
#define BFP8_MODEL_MODEL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "blockfp8.h"
#include "model/adamw.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct model_ops {
    const char *name; /* "cpu" or "cuda" */
    void (*embedding_forward)(float *out, const int32_t *tokens, const float *table, int64_t count,
                              int64_t dim);
    void (*embedding_backward)(float *dtable, const float *dout, const int32_t *tokens, int64_t count,
                               int64_t dim);
    void (*rmsnorm_forward)(float *out, float *rstd, const float *x, const float *weight, int64_t tokens,
                            int64_t dim, float eps);
    void (*rmsnorm_backward)(float *dx, float *dweight, const float *dout, const float *x,
                             const float *weight, const float *rstd, int64_t tokens, int64_t dim);
    void (*rope_forward)(float *x, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                         int64_t row_stride, const float *cos_table, const float *sin_table);
    void (*rope_backward)(float *dx, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                          int64_t row_stride, const float *cos_table, const float *sin_table);
    void (*attention_forward)(float *out, float *probs, float *scratch, const float *qkv, int64_t batch,
                              int64_t seq, int64_t n_heads, int64_t head_dim);
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *probs, int64_t batch, int64_t seq, int64_t n_heads,
                               int64_t head_dim);
    void (*swiglu_forward)(float *out, const float *gate_up, int64_t tokens, int64_t hidden);
    void (*swiglu_backward)(float *dgate_up, const float *dout, const float *gate_up, int64_t tokens,
                            int64_t hidden);
    double (*cross_entropy_forward)(float *row_losses, const float *logits, const int32_t *targets,
                                    int64_t tokens, int64_t vocab);
    void (*cross_entropy_backward)(float *dlogits, const float *logits, const int32_t *targets,
                                   int64_t tokens, int64_t vocab, float scale);
    void (*matmul_f32)(float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed,
                       const float *b, int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate);
    void (*transpose_f32)(float *dst, const float *src, int64_t rows, int64_t cols);
    void (*adamw_update)(float *param, const float *grad, float *m, float *v, size_t n,
                         const adamw_hparams *h, float grad_scale, int64_t step, int decay);
    double (*gradient_global_norm)(const float *grad, size_t n);
    /* dst = src (n floats); dst = 0; dst += src; dst = bf16(src) (round to
     * nearest even); dst = f32(src), or dst += f32(src) when add */
    void (*copy_f32)(float *dst, const float *src, int64_t n);
    void (*zero_f32)(float *dst, int64_t n);
    void (*add_f32)(float *dst, const float *src, int64_t n);
    void (*f32_to_bf16)(uint16_t *dst, const float *src, int64_t n);
    void (*bf16_to_f32)(float *dst, const uint16_t *src, int64_t n, int add);
} model_ops;

/* The CPU references, and the table of a context's backend (the CUDA table
 * also sets its stream to the context's; NULL when this build has no CUDA). */
extern const model_ops model_ops_cpu;
const model_ops *model_ops_for(const bfp8_context *ctx);

/* --- the CUDA implementations (src/model/cuda/) ----------------------------- */
void model_cuda_set_stream(void *cuda_stream);
/* 1: the fp32 products (matmul_f32, attention) on the tensor cores in TF32
 * (inputs rounded to 10 mantissa bits, fp32 accumulation); 0 (the default):
 * exact fp32 products, as on the CPU. */
void model_cuda_set_tf32(int tf32);
/* 1: attention with head_dim 64 or 128 runs flash style (the library's
 * sm_90a attention kernels: bf16 tensor-core products, online softmax, no
 * probabilities kept: flash_attention.cu); each layer's probs buffer then
 * holds what backward needs instead (batch x heads x seq log-sum-exps and a
 * bf16 copy of the output, in the batch x heads x seq + tokens x dim floats
 * model_create gives it). Off by default. */
void model_cuda_set_flash_attention(int on);
int model_cuda_flash_attention_supported(int64_t head_dim);
/* Floats of attention scratch flash attention needs: bf16 copies of qkv, dO
 * and dqkv (7 tokens x dim bf16), and the backward's workspace (its dQ sums,
 * f32 per query row padded to 128 rows, with two floats and a semaphore per
 * row, and alignment), which flash_attention.cu checks it fits. */
static inline int64_t flash_attention_scratch_floats(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
    const int64_t elems = batch * seq * heads * head_dim, rows_pad = batch * heads * ((seq + 127) / 128 * 128);
    return (7 * elems + 1) / 2 + rows_pad * (head_dim + 3) + 1024;
}
/* BFP8_OK, or the first CUDA / cuBLAS failure of an op since the last call
 * (the message through bfp8_last_error()); the kept failure is then cleared. */
bfp8_status model_cuda_status(void);

void embedding_forward_cuda(float *out, const int32_t *tokens, const float *table, int64_t count,
                            int64_t dim);
void embedding_backward_cuda(float *dtable, const float *dout, const int32_t *tokens, int64_t count,
                             int64_t dim);
void rmsnorm_forward_cuda(float *out, float *rstd, const float *x, const float *weight, int64_t tokens,
                          int64_t dim, float eps);
void rmsnorm_backward_cuda(float *dx, float *dweight, const float *dout, const float *x,
                           const float *weight, const float *rstd, int64_t tokens, int64_t dim);
void rope_forward_cuda(float *x, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                       int64_t row_stride, const float *cos_table, const float *sin_table);
void rope_backward_cuda(float *dx, int64_t batch, int64_t seq, int64_t n_heads, int64_t head_dim,
                        int64_t row_stride, const float *cos_table, const float *sin_table);
void attention_forward_cuda(float *out, float *probs, float *scratch, const float *qkv, int64_t batch,
                            int64_t seq, int64_t n_heads, int64_t head_dim);
void attention_backward_cuda(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *probs, int64_t batch, int64_t seq, int64_t n_heads,
                             int64_t head_dim);
void swiglu_forward_cuda(float *out, const float *gate_up, int64_t tokens, int64_t hidden);
void swiglu_backward_cuda(float *dgate_up, const float *dout, const float *gate_up, int64_t tokens,
                          int64_t hidden);
double cross_entropy_forward_cuda(float *row_losses, const float *logits, const int32_t *targets,
                                  int64_t tokens, int64_t vocab);
void cross_entropy_backward_cuda(float *dlogits, const float *logits, const int32_t *targets,
                                 int64_t tokens, int64_t vocab, float scale);
void matmul_f32_cuda(float *c, int64_t ldc, const float *a, int64_t lda, int a_transposed,
                     const float *b, int64_t ldb, int64_t M, int64_t N, int64_t K, int accumulate);
void transpose_f32_cuda(float *dst, const float *src, int64_t rows, int64_t cols);
void adamw_update_cuda(float *param, const float *grad, float *m, float *v, size_t n,
                       const adamw_hparams *h, float grad_scale, int64_t step, int decay);
double gradient_global_norm_cuda(const float *grad, size_t n);
void copy_f32_cuda(float *dst, const float *src, int64_t n);
void zero_f32_cuda(float *dst, int64_t n);
void add_f32_cuda(float *dst, const float *src, int64_t n);
void f32_to_bf16_cuda(uint16_t *dst, const float *src, int64_t n);
void bf16_to_f32_cuda(float *dst, const uint16_t *src, int64_t n, int add);

#ifdef __cplusplus
}
#endif

#endif
