/*
 * swiglu.c - SwiGLU, fp32.
 */
#include "model/swiglu.h"
#include "model/parallel.h"

#include <math.h>

#include "formats/formats.h"
#include "nn/swiglu_math.h"

void swiglu_forward(model_ops_ctx *oc, float *out, const float *gate_up, int64_t tokens, int64_t hidden) {
    (void)oc;
#pragma omp parallel for schedule(static) if (tokens * hidden >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < tokens; ++t) {
        const float *gate = gate_up + t * 2 * hidden, *up = gate + hidden;
        float *o = out + t * hidden;
        for (int64_t i = 0; i < hidden; ++i) o[i] = bfp8_swiglu_value(gate[i], up[i]);
    }
}

void swiglu_backward(model_ops_ctx *oc, float *dgate_up, const float *dout, const float *gate_up, int64_t tokens,
                     int64_t hidden) {
    (void)oc;
#pragma omp parallel for schedule(static) if (tokens * hidden >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < tokens; ++t) {
        const float *gate = gate_up + t * 2 * hidden, *up = gate + hidden;
        const float *d = dout + t * hidden;
        float *dgate = dgate_up + t * 2 * hidden, *dup = dgate + hidden;
        for (int64_t i = 0; i < hidden; ++i) bfp8_swiglu_grads(gate[i], up[i], d[i], &dgate[i], &dup[i]);
    }
}

void swiglu_forward_bf16(model_ops_ctx *oc, uint16_t *out, const uint16_t *gate_up, int64_t tokens, int64_t hidden) {
    (void)oc;
#pragma omp parallel for schedule(static) if (tokens * hidden >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < tokens; ++t) {
        const uint16_t *gate = gate_up + t * 2 * hidden, *up = gate + hidden;
        uint16_t *o = out + t * hidden;
        for (int64_t i = 0; i < hidden; ++i) {
            o[i] = bfp8_encode_bf16(bfp8_swiglu_value(bfp8_decode_bf16(gate[i]), bfp8_decode_bf16(up[i])));
        }
    }
}

void swiglu_backward_bf16(model_ops_ctx *oc, uint16_t *dgate_up, const uint16_t *dout, const uint16_t *gate_up,
                          int64_t tokens, int64_t hidden) {
    (void)oc;
#pragma omp parallel for schedule(static) if (tokens * hidden >= PARALLEL_MIN_WORK)
    for (int64_t t = 0; t < tokens; ++t) {
        const uint16_t *gate = gate_up + t * 2 * hidden, *up = gate + hidden, *d = dout + t * hidden;
        uint16_t *dgate = dgate_up + t * 2 * hidden, *dup = dgate + hidden;
        for (int64_t i = 0; i < hidden; ++i) {
            float dg, du;
            bfp8_swiglu_grads(bfp8_decode_bf16(gate[i]), bfp8_decode_bf16(up[i]), bfp8_decode_bf16(d[i]), &dg, &du);
            dgate[i] = bfp8_encode_bf16(dg);
            dup[i] = bfp8_encode_bf16(du);
        }
    }
}
