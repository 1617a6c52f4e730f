/*
 * attention_ops.c - the public attention entry points: validate the
 * descriptor and the pointers once, resolve the defaults (n_kv_heads, the
 * softmax scale, dense row strides), then dispatch to the CPU reference
 * (src/cpu/attention_cpu.c) or the CUDA kernels (src/cuda/attention_*.cu).
 */
#include <math.h>
#include <stdio.h>

#include "internal.h"

/* Sizes the kernels index with 32-bit integers stay below this. */
#define ATTENTION_MAX_DIM ((int64_t)1 << 30)

static bfp8_status check_stride(int64_t *stride, int64_t heads, int64_t head_dim, const char *name,
                                const char *fn) {
    const int64_t dense = heads * head_dim;
    if (*stride == 0) *stride = dense;
    if (*stride < dense)
        return bfp8_fail(BFP8_ERR_LAYOUT, "%s: %s %lld < %lld (the heads x head_dim of a row)", fn, name,
                         (long long)*stride, (long long)dense);
    if (*stride % 8 != 0)
        return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s: %s %lld is not a multiple of 8", fn, name, (long long)*stride);
    if (*stride > ATTENTION_MAX_DIM)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: %s %lld is too large", fn, name, (long long)*stride);
    return BFP8_OK;
}

/* A copy of *in with every default resolved, or a failure. `backward`:
 * the strides of d_o, dq, dk, dv are checked too. */
static bfp8_status resolve_desc(const bfp8_context *ctx, const bfp8_attention_desc *in, int backward,
                                bfp8_attention_desc *out, const char *fn) {
    if (!ctx) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
    if (!in) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: desc is NULL", fn);
    bfp8_attention_desc d = *in;
    if (d.batch < 1 || d.seq < 1 || d.n_heads < 1 || d.n_kv_heads < 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "%s: batch %lld, seq %lld, n_heads %lld, n_kv_heads %lld (sizes must be >= 1)", fn,
                         (long long)d.batch, (long long)d.seq, (long long)d.n_heads, (long long)d.n_kv_heads);
    if (d.batch > ATTENTION_MAX_DIM || d.seq > ATTENTION_MAX_DIM || d.n_heads > 65536 ||
        d.batch * d.seq > ATTENTION_MAX_DIM || d.batch * d.n_heads * d.seq > ((int64_t)1 << 40))
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: batch %lld x seq %lld x n_heads %lld is too large", fn,
                         (long long)d.batch, (long long)d.seq, (long long)d.n_heads);
    if (d.n_kv_heads == 0) d.n_kv_heads = d.n_heads;
    if (d.n_heads % d.n_kv_heads != 0)
        return bfp8_fail(BFP8_ERR_SHAPE, "%s: n_heads %lld is not a multiple of n_kv_heads %lld", fn,
                         (long long)d.n_heads, (long long)d.n_kv_heads);
    if (d.head_dim != 64 && d.head_dim != 128)
        return bfp8_fail(BFP8_ERR_UNSUPPORTED, "%s: head_dim %lld (64 or 128)", fn, (long long)d.head_dim);
    if (d.causal != 0 && d.causal != 1) return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: causal must be 0 or 1", fn);
    if (!(d.softmax_scale >= 0.0f) || isinf(d.softmax_scale))
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "%s: softmax_scale must be finite and >= 0", fn);
    if (d.softmax_scale == 0.0f) d.softmax_scale = 1.0f / sqrtf((float)d.head_dim);
    const int64_t H = d.n_heads, Hk = d.n_kv_heads, D = d.head_dim;
    BFP8_TRY(check_stride(&d.q_row_stride, H, D, "q_row_stride", fn));
    BFP8_TRY(check_stride(&d.k_row_stride, Hk, D, "k_row_stride", fn));
    BFP8_TRY(check_stride(&d.v_row_stride, Hk, D, "v_row_stride", fn));
    BFP8_TRY(check_stride(&d.o_row_stride, H, D, "o_row_stride", fn));
    if (backward) {
        BFP8_TRY(check_stride(&d.do_row_stride, H, D, "do_row_stride", fn));
        BFP8_TRY(check_stride(&d.dq_row_stride, H, D, "dq_row_stride", fn));
        BFP8_TRY(check_stride(&d.dk_row_stride, Hk, D, "dk_row_stride", fn));
        BFP8_TRY(check_stride(&d.dv_row_stride, Hk, D, "dv_row_stride", fn));
    }
    *out = d;
    return BFP8_OK;
}

/* A tensor argument: present, `align`-byte aligned, in the context's memory. */
static bfp8_status check_tensor(const bfp8_context *ctx, const void *p, size_t align, const char *name,
                                const char *fn) {
    char what[96];
    snprintf(what, sizeof what, "%s: %s", fn, name);
    if (!p) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s is NULL", what);
    if ((uintptr_t)p % align != 0)
        return bfp8_fail(BFP8_ERR_ALIGNMENT, "%s is not %zu-byte aligned", what, align);
    return bfp8_check_pointer(ctx, p, what);
}

static int is_cuda(const bfp8_context *ctx) { return ctx->backend == BFP8_BACKEND_CUDA; }

bfp8_status bfp8_attention_forward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                   const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse) {
    static const char fn[] = "bfp8_attention_forward";
    bfp8_attention_desc d;
    BFP8_TRY(resolve_desc(ctx, desc, 0, &d, fn));
    BFP8_TRY(check_tensor(ctx, q, 16, "q", fn));
    BFP8_TRY(check_tensor(ctx, k, 16, "k", fn));
    BFP8_TRY(check_tensor(ctx, v, 16, "v", fn));
    BFP8_TRY(check_tensor(ctx, o, 16, "o", fn));
    BFP8_TRY(check_tensor(ctx, lse, 4, "lse", fn));
    return is_cuda(ctx) ? bfp8_cuda_attention_forward(ctx, &d, q, k, v, o, lse)
                        : bfp8_cpu_attention_forward(ctx, &d, q, k, v, o, lse);
}

bfp8_status bfp8_attention_backward_workspace_size(const bfp8_context *ctx, const bfp8_attention_desc *desc,
                                                   size_t *bytes) {
    static const char fn[] = "bfp8_attention_backward_workspace_size";
    bfp8_attention_desc d;
    BFP8_TRY(resolve_desc(ctx, desc, 1, &d, fn));
    if (!bytes) return bfp8_fail(BFP8_ERR_NULL_POINTER, "%s: bytes is NULL", fn);
    *bytes = is_cuda(ctx) ? bfp8_cuda_attention_backward_workspace_size(&d) : 0;
    return BFP8_OK;
}

bfp8_status bfp8_attention_backward(bfp8_context *ctx, const bfp8_attention_desc *desc, const uint16_t *q,
                                    const uint16_t *k, const uint16_t *v, const uint16_t *o, const uint16_t *d_o,
                                    const float *lse, uint16_t *dq, uint16_t *dk, uint16_t *dv, void *workspace,
                                    size_t workspace_bytes) {
    static const char fn[] = "bfp8_attention_backward";
    bfp8_attention_desc d;
    BFP8_TRY(resolve_desc(ctx, desc, 1, &d, fn));
    BFP8_TRY(check_tensor(ctx, q, 16, "q", fn));
    BFP8_TRY(check_tensor(ctx, k, 16, "k", fn));
    BFP8_TRY(check_tensor(ctx, v, 16, "v", fn));
    BFP8_TRY(check_tensor(ctx, o, 16, "o", fn));
    BFP8_TRY(check_tensor(ctx, d_o, 16, "d_o", fn));
    BFP8_TRY(check_tensor(ctx, lse, 4, "lse", fn));
    BFP8_TRY(check_tensor(ctx, dq, 16, "dq", fn));
    BFP8_TRY(check_tensor(ctx, dk, 16, "dk", fn));
    BFP8_TRY(check_tensor(ctx, dv, 16, "dv", fn));
    const size_t need = is_cuda(ctx) ? bfp8_cuda_attention_backward_workspace_size(&d) : 0;
    if (workspace_bytes < need)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE,
                         "%s: workspace_bytes %zu < %zu (bfp8_attention_backward_workspace_size)", fn,
                         workspace_bytes, need);
    if (need > 0) BFP8_TRY(check_tensor(ctx, workspace, 256, "workspace", fn));
    return is_cuda(ctx) ? bfp8_cuda_attention_backward(ctx, &d, q, k, v, o, d_o, lse, dq, dk, dv, workspace,
                                                       workspace_bytes)
                        : bfp8_cpu_attention_backward(ctx, &d, q, k, v, o, d_o, lse, dq, dk, dv, workspace,
                                                      workspace_bytes);
}
