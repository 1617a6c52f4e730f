/*
 * test_swiglu_quantize.c - SwiGLU fused with the 1x128 quantizer
 * (bfp8_swiglu_quantize_1x128, bfp8_swiglu_backward_quantize_1x128;
 * internal.h) against the unfused passes of the same backend, bit for bit:
 * the model's bf16 SwiGLU op of the backend (model_ops.h), then
 * bfp8_quantize_1x128 of what it wrote. Ragged token and hidden counts,
 * zero blocks, outliers, wide ranges and non-finite values (the flag must
 * rise exactly when the unfused quantizer's does); bad input.
 * The CPU half always runs, the CUDA half where a device is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model/model_ops.h"
#include "test_util.h"

typedef struct backend {
    bfp8_context *ctx;
    model_ops_ctx oc;
    int cuda;
} backend;

static void *alloc(backend *b, size_t bytes) {
    void *p = NULL;
    if (bfp8_malloc(b->ctx, &p, bytes ? bytes : 16) != BFP8_OK) test_fatal("bfp8_malloc: %s", bfp8_last_error());
    return p;
}

static void upload(backend *b, void *dst, const void *src, size_t bytes) {
    if (bfp8_copy_to_backend(b->ctx, dst, src, bytes) != BFP8_OK) test_fatal("copy: %s", bfp8_last_error());
}

static void *download(backend *b, const void *src, size_t bytes) {
    void *host = test_malloc(bytes ? bytes : 16);
    if (bfp8_copy_to_host(b->ctx, host, src, bytes) != BFP8_OK) test_fatal("copy: %s", bfp8_last_error());
    return host;
}

/* A rows x cols 1x128 operand in backend memory, zeroed. */
static bfp8_qmatrix qalloc(backend *b, int64_t rows, int64_t cols) {
    bfp8_qmatrix q;
    size_t data_bytes, scale_bytes;
    if (bfp8_qmatrix_layout(&q, rows, cols, BFP8_GRAN_1X128, &data_bytes, &scale_bytes) != BFP8_OK)
        test_fatal("layout: %s", bfp8_last_error());
    q.data = alloc(b, data_bytes);
    q.scales = alloc(b, scale_bytes);
    if (bfp8_memset_zero(b->ctx, q.data, data_bytes) != BFP8_OK ||
        bfp8_memset_zero(b->ctx, q.scales, scale_bytes) != BFP8_OK)
        test_fatal("memset: %s", bfp8_last_error());
    return q;
}

static void qfree(backend *b, bfp8_qmatrix *q) {
    bfp8_free(b->ctx, q->data);
    bfp8_free(b->ctx, q->scales);
}

/* Codes and scales of two operands of one layout, bit for bit. */
static void compare(backend *b, const char *what, const bfp8_qmatrix *got, const bfp8_qmatrix *want) {
    size_t data_bytes, scale_bytes;
    bfp8_qmatrix layout;
    (void)bfp8_qmatrix_layout(&layout, got->rows, got->cols, BFP8_GRAN_1X128, &data_bytes, &scale_bytes);
    uint8_t *g = download(b, got->data, data_bytes), *w = download(b, want->data, data_bytes);
    float *gs = download(b, got->scales, scale_bytes), *ws = download(b, want->scales, scale_bytes);
    const int64_t bad_codes = test_compare_bytes(what, g, got->ld, w, want->ld, got->rows, got->cols);
    const int64_t bad_scales = test_compare_f32_bits(what, gs, ws, (int64_t)(scale_bytes / sizeof(float)));
    CHECK(bad_codes == 0 && bad_scales == 0, "%s: %lld codes, %lld scales differ", what, (long long)bad_codes,
          (long long)bad_scales);
    free(g), free(w), free(gs), free(ws);
}

static uint32_t read_flag(backend *b, uint32_t *flag) {
    uint32_t *v = download(b, flag, sizeof *flag);
    const uint32_t r = *v;
    free(v);
    return r;
}

static void run_case(backend *b, int64_t tokens, int64_t hidden, unsigned fill, uint64_t seed) {
    char what[160];
    snprintf(what, sizeof what, "%s tokens %lld hidden %lld fill %u", b->cuda ? "cuda" : "cpu", (long long)tokens,
             (long long)hidden, fill);
    const size_t gu_bytes = (size_t)(tokens * 2 * hidden) * 2, h_bytes = (size_t)(tokens * hidden) * 2;
    uint16_t *gu_host = test_malloc(gu_bytes), *d_host = test_malloc(h_bytes);
    test_fill_bf16(gu_host, tokens, 2 * hidden, 2 * hidden, 2.0f, fill, seed);
    test_fill_bf16(d_host, tokens, hidden, hidden, 0.5f, fill & ~(unsigned)TEST_FILL_NONFINITE, seed + 1);
    uint16_t *gu = alloc(b, gu_bytes), *d = alloc(b, h_bytes), *h = alloc(b, h_bytes), *dgu = alloc(b, gu_bytes);
    uint32_t *flags = alloc(b, 2 * sizeof(uint32_t));
    upload(b, gu, gu_host, gu_bytes);
    upload(b, d, d_host, h_bytes);
    const bfp8_matrix gum = {gu, BFP8_BF16, tokens, 2 * hidden, 2 * hidden};
    const bfp8_matrix dm = {d, BFP8_BF16, tokens, hidden, hidden};
    const bfp8_quantize_options fused_o = {0, flags}, plain_o = {0, flags + 1};

    /* forward */
    CHECK_OK(bfp8_memset_zero(b->ctx, flags, 2 * sizeof(uint32_t)));
    bfp8_qmatrix q = qalloc(b, tokens, hidden), t = qalloc(b, hidden, tokens);
    bfp8_qmatrix q_ref = qalloc(b, tokens, hidden), t_ref = qalloc(b, hidden, tokens);
    CHECK_OK(bfp8_swiglu_quantize_1x128(b->ctx, &gum, &q, &t, &fused_o));
    model_ops_for(b->ctx)->swiglu_forward_bf16(&b->oc, h, gu, tokens, hidden);
    const bfp8_matrix hm = {h, BFP8_BF16, tokens, hidden, hidden};
    CHECK_OK(bfp8_quantize_1x128(b->ctx, &hm, &q_ref, &t_ref, &plain_o));
    CHECK_OK(bfp8_context_synchronize(b->ctx));
    char sub[200];
    snprintf(sub, sizeof sub, "%s forward rows", what);
    compare(b, sub, &q, &q_ref);
    snprintf(sub, sizeof sub, "%s forward cols", what);
    compare(b, sub, &t, &t_ref);
    CHECK(read_flag(b, flags) == read_flag(b, flags + 1), "%s forward: the non-finite flags differ", what);
    if (fill & TEST_FILL_NONFINITE) CHECK(read_flag(b, flags) == 1u, "%s forward: no non-finite flag", what);
    qfree(b, &q), qfree(b, &t), qfree(b, &q_ref), qfree(b, &t_ref);

    /* backward (hidden a multiple of 128) */
    if (hidden % 128 == 0) {
        CHECK_OK(bfp8_memset_zero(b->ctx, flags, 2 * sizeof(uint32_t)));
        q = qalloc(b, tokens, 2 * hidden), t = qalloc(b, 2 * hidden, tokens);
        q_ref = qalloc(b, tokens, 2 * hidden), t_ref = qalloc(b, 2 * hidden, tokens);
        CHECK_OK(bfp8_swiglu_backward_quantize_1x128(b->ctx, &dm, &gum, &q, &t, &fused_o));
        model_ops_for(b->ctx)->swiglu_backward_bf16(&b->oc, dgu, d, gu, tokens, hidden);
        const bfp8_matrix dgum = {dgu, BFP8_BF16, tokens, 2 * hidden, 2 * hidden};
        CHECK_OK(bfp8_quantize_1x128(b->ctx, &dgum, &q_ref, &t_ref, &plain_o));
        CHECK_OK(bfp8_context_synchronize(b->ctx));
        snprintf(sub, sizeof sub, "%s backward rows", what);
        compare(b, sub, &q, &q_ref);
        snprintf(sub, sizeof sub, "%s backward cols", what);
        compare(b, sub, &t, &t_ref);
        CHECK(read_flag(b, flags) == read_flag(b, flags + 1), "%s backward: the non-finite flags differ", what);
        qfree(b, &q), qfree(b, &t), qfree(b, &q_ref), qfree(b, &t_ref);
    } else {
        q = qalloc(b, tokens, 2 * hidden), t = qalloc(b, 2 * hidden, tokens);
        CHECK_STATUS(bfp8_swiglu_backward_quantize_1x128(b->ctx, &dm, &gum, &q, &t, NULL), BFP8_ERR_SHAPE);
        qfree(b, &q), qfree(b, &t);
    }
    bfp8_free(b->ctx, gu), bfp8_free(b->ctx, d), bfp8_free(b->ctx, h), bfp8_free(b->ctx, dgu);
    bfp8_free(b->ctx, flags);
    free(gu_host), free(d_host);
}

static void bad_input(backend *b) {
    uint16_t *gu = alloc(b, 256 * 4 * 2);
    const bfp8_matrix gum = {gu, BFP8_BF16, 2, 512, 512}, f32m = {gu, BFP8_F32, 2, 256, 256};
    bfp8_qmatrix q = qalloc(b, 2, 256), t = qalloc(b, 256, 2), wrong = qalloc(b, 2, 128);
    CHECK_STATUS(bfp8_swiglu_quantize_1x128(NULL, &gum, &q, &t, NULL), BFP8_ERR_NULL_POINTER);
    CHECK_STATUS(bfp8_swiglu_quantize_1x128(b->ctx, NULL, &q, &t, NULL), BFP8_ERR_NULL_POINTER);
    CHECK_STATUS(bfp8_swiglu_quantize_1x128(b->ctx, &gum, NULL, &t, NULL), BFP8_ERR_NULL_POINTER);
    CHECK_STATUS(bfp8_swiglu_quantize_1x128(b->ctx, &f32m, &q, &t, NULL), BFP8_ERR_UNSUPPORTED);
    CHECK_STATUS(bfp8_swiglu_quantize_1x128(b->ctx, &gum, &wrong, &t, NULL), BFP8_ERR_SHAPE);
    const bfp8_matrix dm = {gu, BFP8_BF16, 2, 256, 256};
    CHECK_STATUS(bfp8_swiglu_backward_quantize_1x128(b->ctx, &dm, &gum, &q, &t, NULL), BFP8_ERR_SHAPE);
    qfree(b, &q), qfree(b, &t), qfree(b, &wrong);
    bfp8_free(b->ctx, gu);
}

static void run_backend(backend *b) {
    static const int64_t tokens[] = {1, 127, 128, 129, 300};
    static const int64_t hidden[] = {128, 256, 100, 200};
    static const unsigned fills[] = {0, TEST_FILL_HARD | TEST_FILL_WIDE_RANGE, TEST_FILL_NONFINITE};
    uint64_t seed = 11;
    for (size_t i = 0; i < sizeof tokens / sizeof *tokens; ++i)
        for (size_t j = 0; j < sizeof hidden / sizeof *hidden; ++j)
            for (size_t k = 0; k < sizeof fills / sizeof *fills; ++k)
                run_case(b, tokens[i], hidden[j], fills[k], ++seed);
    run_case(b, 1024, 512, TEST_FILL_HARD, 99); /* many whole tiles */
    bad_input(b);
}

int main(void) {
    backend cpu = {0};
    if (bfp8_context_create(&cpu.ctx, BFP8_BACKEND_CPU, 0) != BFP8_OK) test_fatal("%s", bfp8_last_error());
    model_ops_ctx_init(&cpu.oc, cpu.ctx, 0, 0);
    run_backend(&cpu);
    model_ops_ctx_release(&cpu.oc);
    bfp8_context_destroy(cpu.ctx);
    if (bfp8_cuda_device_count() > 0) {
        backend gpu = {.cuda = 1};
        if (bfp8_context_create(&gpu.ctx, BFP8_BACKEND_CUDA, 0) != BFP8_OK) test_fatal("%s", bfp8_last_error());
        model_ops_ctx_init(&gpu.oc, gpu.ctx, 0, 0);
        run_backend(&gpu);
        CHECK(model_ops_status(&gpu.oc) == BFP8_OK, "CUDA model ops: %s", bfp8_last_error());
        model_ops_ctx_release(&gpu.oc);
        bfp8_context_destroy(gpu.ctx);
    } else {
        printf("no CUDA device: the CPU half only\n");
    }
    return test_exit_code("test_swiglu_quantize");
}
