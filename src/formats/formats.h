/*
 * formats.h - one definition of the number-format math, for host C and CUDA.
 *
 * fp32 -> e4m3 / e5m2: round to nearest even, saturating to +-max finite
 * (infinities too); any NaN becomes the canonical 0x7f, as the hardware's
 * cvt.rn.satfinite.{e4m3,e5m2}x2.f32 does. fp32 -> bf16: round to nearest
 * even, NaN becomes the canonical 0x7fff, as cvt.rn.bf16.f32 does.
 * Device kernels use the hardware instructions; these functions are the CPU
 * side and are tested bit-exact against both (tests/formats).
 */
#ifndef BFP8_FORMATS_H
#define BFP8_FORMATS_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define BFP8_HD __host__ __device__ __forceinline__
#else
#define BFP8_HD static inline
#endif

BFP8_HD uint32_t bfp8_bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

BFP8_HD float bfp8_float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Round a positive finite fp32 |x| (bits a, below the format's saturation
 * point) to a small float with `mbits` mantissa bits, exponent bias `bias`.
 * Returns the magnitude code. */
BFP8_HD uint32_t bfp8_round_small_float(uint32_t a, int mbits, int bias) {
    const int32_t e = (int32_t)(a >> 23) - 127;     /* unbiased exponent of x */
    const int32_t emin = 1 - bias;                  /* smallest normal exponent */
    if (e >= emin) {                                /* normal result */
        const int shift = 23 - mbits;
        uint32_t v = ((uint32_t)(e + bias) << mbits) | ((a & 0x7fffffu) >> shift);
        const uint32_t rem = a & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (v & 1u))) v++; /* may carry into the exponent: fine */
        return v;
    }
    /* subnormal result: units of 2^(emin - mbits) */
    const int shift = 23 - mbits + (emin - e);      /* > 23 - mbits */
    if (shift > 24) return 0;                       /* |x| <= half the smallest subnormal */
    const uint32_t sig = (a & 0x7fffffu) | 0x800000u; /* fp32 subnormals land in shift > 24 */
    uint32_t v = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (v & 1u))) v++;
    return v;
}

BFP8_HD uint8_t bfp8_encode_e4m3(float x) {
    const uint32_t u = bfp8_bits_of(x), a = u & 0x7fffffffu;
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (a > 0x7f800000u) return 0x7f;                /* NaN -> canonical NaN */
    if (a >= 0x43e00000u) return sign | 0x7e;        /* >= 448 (inf too) -> 448 */
    return sign | (uint8_t)bfp8_round_small_float(a, 3, 7);
}

BFP8_HD uint8_t bfp8_encode_e5m2(float x) {
    const uint32_t u = bfp8_bits_of(x), a = u & 0x7fffffffu;
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (a > 0x7f800000u) return 0x7f;                /* NaN -> canonical NaN */
    if (a >= 0x47600000u) return sign | 0x7b;        /* >= 57344 (inf too) -> 57344 */
    return sign | (uint8_t)bfp8_round_small_float(a, 2, 15);
}

/* Decode a small float code with `ebits` exponent and `mbits` mantissa bits. */
BFP8_HD float bfp8_decode_small_float(uint8_t code, int ebits, int mbits, int bias) {
    const uint32_t sign = (uint32_t)(code & 0x80u) << 24;
    const uint32_t e = (code >> mbits) & ((1u << ebits) - 1u);
    const uint32_t m = code & ((1u << mbits) - 1u);
    if (e == 0) { /* zero or subnormal: m * 2^(1 - bias - mbits), exact in fp32 */
        float mag = (float)m;
        for (int i = 0; i < bias - 1 + mbits; ++i) mag *= 0.5f;
        return bfp8_float_of(sign | bfp8_bits_of(mag));
    }
    return bfp8_float_of(sign | ((e - (uint32_t)bias + 127u) << 23) | (m << (23 - mbits)));
}

BFP8_HD float bfp8_decode_e4m3(uint8_t code) {
    if ((code & 0x7fu) == 0x7fu) return bfp8_float_of(0x7fc00000u | ((uint32_t)(code & 0x80u) << 24));
    return bfp8_decode_small_float(code, 4, 3, 7);
}

BFP8_HD float bfp8_decode_e5m2(uint8_t code) {
    const uint32_t sign = (uint32_t)(code & 0x80u) << 24;
    if ((code & 0x7fu) == 0x7cu) return bfp8_float_of(sign | 0x7f800000u);          /* inf */
    if ((code & 0x7fu) > 0x7cu) return bfp8_float_of(sign | 0x7fc00000u);            /* NaN */
    return bfp8_decode_small_float(code, 5, 2, 15);
}

BFP8_HD uint16_t bfp8_encode_bf16(float x) {
    const uint32_t u = bfp8_bits_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;                 /* canonical NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);          /* RNE; overflow -> inf */
}

BFP8_HD float bfp8_decode_bf16(uint16_t b) { return bfp8_float_of((uint32_t)b << 16); }

/* ------------------------------------------------------------------------ */
/* Scales (docs/RECIPE.md section 3), shared by every quantizer.             */

#define BFP8_FLT_MAX_BITS 0x7f7fffffu

/* Quantization multiplier of a group with max |x| = amax (finite, >= 0). */
BFP8_HD float bfp8_scale_multiplier(float amax, int pow2) {
    float mult = amax == 0.0f ? 1.0f : 448.0f / amax;
    if (bfp8_bits_of(mult) == 0x7f800000u) mult = bfp8_float_of(BFP8_FLT_MAX_BITS);
    if (pow2) mult = bfp8_float_of(bfp8_bits_of(mult) & 0xff800000u); /* mult is normal */
    return mult;
}

/* amax of a group is non-finite (NaN or Inf). Reading |x| as bits makes
 * the max of NaNs well defined: NaN bits compare above Inf bits. */
BFP8_HD int bfp8_amax_bits_nonfinite(uint32_t amax_bits) { return amax_bits >= 0x7f800000u; }

#define BFP8_NAN_SCALE_BITS 0x7fc00000u

#endif /* BFP8_FORMATS_H */
