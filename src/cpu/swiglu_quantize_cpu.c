/*
 * swiglu_quantize_cpu.c - CPU reference of SwiGLU fused with the 1x128
 * quantizer (internal.h): the bf16 SwiGLU (or its gradients) into a host
 * buffer, with nn/swiglu_math.h's arithmetic and formats.h's rounding, then
 * the CPU quantizer on it, so the result is by construction that of the
 * unfused passes.
 */
#include <stdlib.h>

#include "formats/formats.h"
#include "internal.h"
#include "nn/swiglu_math.h"

static bfp8_status host_bf16(int64_t rows, int64_t cols, uint16_t **out) {
    *out = malloc((size_t)(rows * cols) * sizeof **out + 1);
    return *out ? BFP8_OK : bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "swiglu quantize: out of host memory");
}

bfp8_status bfp8_cpu_swiglu_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                           bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    const int64_t tokens = gate_up->rows, hidden = gate_up->cols / 2;
    uint16_t *h;
    BFP8_TRY(host_bf16(tokens, hidden, &h));
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
        const uint16_t *g = (const uint16_t *)gate_up->data + t * gate_up->ld, *u = g + hidden;
        for (int64_t i = 0; i < hidden; ++i)
            h[t * hidden + i] = bfp8_encode_bf16(bfp8_swiglu_value(bfp8_decode_bf16(g[i]), bfp8_decode_bf16(u[i])));
    }
    const bfp8_matrix hm = {h, BFP8_BF16, tokens, hidden, hidden};
    const bfp8_status st = bfp8_cpu_quantize_1x128(ctx, &hm, out_rows, out_cols, options);
    free(h);
    return st;
}

bfp8_status bfp8_cpu_swiglu_backward_quantize_1x128(bfp8_context *ctx, const bfp8_matrix *dout,
                                                    const bfp8_matrix *gate_up, bfp8_qmatrix *out_rows,
                                                    bfp8_qmatrix *out_cols, const bfp8_quantize_options *options) {
    const int64_t tokens = dout->rows, hidden = dout->cols;
    uint16_t *dgu;
    BFP8_TRY(host_bf16(tokens, 2 * hidden, &dgu));
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
        const uint16_t *g = (const uint16_t *)gate_up->data + t * gate_up->ld, *u = g + hidden;
        const uint16_t *d = (const uint16_t *)dout->data + t * dout->ld;
        uint16_t *dg = dgu + t * 2 * hidden, *du = dg + hidden;
        for (int64_t i = 0; i < hidden; ++i) {
            float vg, vu;
            bfp8_swiglu_grads(bfp8_decode_bf16(g[i]), bfp8_decode_bf16(u[i]), bfp8_decode_bf16(d[i]), &vg, &vu);
            dg[i] = bfp8_encode_bf16(vg);
            du[i] = bfp8_encode_bf16(vu);
        }
    }
    const bfp8_matrix m = {dgu, BFP8_BF16, tokens, 2 * hidden, 2 * hidden};
    const bfp8_status st = bfp8_cpu_quantize_1x128(ctx, &m, out_rows, out_cols, options);
    free(dgu);
    return st;
}
