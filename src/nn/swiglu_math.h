/*
 * swiglu_math.h - SwiGLU's value and gradients, one definition for every
 * place that computes them: the model's SwiGLU on both backends
 * (src/model/swiglu.c, src/model/cuda/swiglu_cuda.cu) and the SwiGLU
 * quantizers (src/cpu/swiglu_quantize_cpu.c, src/cuda/quantize_swiglu.cu),
 * so that a fused pass and the unfused passes of one backend agree bit for
 * bit. (expf is the host's libm on the CPU and CUDA's expf on the GPU: the
 * two backends may differ in the last bit.)
 */
#ifndef BFP8_NN_SWIGLU_MATH_H
#define BFP8_NN_SWIGLU_MATH_H

#include <math.h>

#include "formats/formats.h" /* BFP8_HD */

/* silu(g) * u */
BFP8_HD float bfp8_swiglu_value(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/* The gradients of g and u from d, the gradient of silu(g) * u. */
BFP8_HD void bfp8_swiglu_grads(float g, float u, float d, float *dg, float *du) {
    const float sig = 1.0f / (1.0f + expf(-g));
    *du = d * (g * sig);
    *dg = d * u * sig * (1.0f + g * (1.0f - sig));
}

#endif /* BFP8_NN_SWIGLU_MATH_H */
