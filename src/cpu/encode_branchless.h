/*
 * encode_branchless.h - fp32 -> e4m3 for the CPU quantizer's inner loops:
 * the same function as bfp8_encode_e4m3 in formats/formats.h (round to
 * nearest even, saturating to +-448, NaN -> 0x7f), written without branches
 * so that the compiler vectorizes a loop of it. formats.h stays the
 * definition; tests/formats/test_formats.c checks that the two agree on all
 * 2^32 fp32 inputs.
 */
#ifndef BFP8_ENCODE_BRANCHLESS_H
#define BFP8_ENCODE_BRANCHLESS_H

#include <stdint.h>

#include "formats/formats.h"

static inline __attribute__((always_inline)) uint8_t bfp8_encode_e4m3_branchless(float x) {
    const uint32_t u = bfp8_bits_of(x);
    const int32_t a = (int32_t)(u & 0x7fffffffu); /* |x| bits; signed compares vectorize on SSE2 */
    const uint32_t sign = (u >> 24) & 0x80u;
    /* |x| >= 2^-6, a normal e4m3: keep 3 mantissa bits, ties to even (a carry
     * into the exponent is the right result), then rebias the exponent
     * from 127 to 7. */
    const uint32_t normal = (((uint32_t)a + 0x7ffffu + (((uint32_t)a >> 20) & 1u)) >> 20) - (120u << 3);
    /* |x| < 2^-6: adding 2^14, whose fp32 ulp is 2^-9 (the e4m3 subnormal
     * step), rounds |x| to that step with the FPU's own ties-to-even; the
     * step count is the code (8 steps = 2^-6, the smallest normal). */
    const uint32_t subnormal = bfp8_bits_of(bfp8_float_of((uint32_t)a) + 16384.0f) - 0x46800000u;
    /* Selects as masks: a ternary here may be compiled as a branch, and a
     * loop with a branch is not vectorized. */
    const uint32_t is_subnormal = 0u - (uint32_t)(a < 0x3c800000);
    const uint32_t is_saturated = 0u - (uint32_t)(a >= 0x43e00000); /* >= 448, infinities too */
    const uint32_t is_nan = 0u - (uint32_t)(a > 0x7f800000);
    uint32_t mag = (subnormal & is_subnormal) | (normal & ~is_subnormal);
    mag = (0x7eu & is_saturated) | (mag & ~is_saturated);
    return (uint8_t)((0x7fu & is_nan) | ((sign | mag) & ~is_nan));
}

#endif /* BFP8_ENCODE_BRANCHLESS_H */
