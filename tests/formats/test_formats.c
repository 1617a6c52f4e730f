/*
 * test_formats.c - the number formats (docs/RECIPE.md section 2) from their
 * definitions, independently of formats.h:
 *   - all 256 e4m3 and e5m2 codes and all 65536 bf16 codes decoded, against
 *     sign * 2^e * (1 + m / 2^mbits) (normals), sign * m * 2^(1-bias-mbits)
 *     (subnormals), and the NaN / Inf codes;
 *   - every finite code re-encodes to itself; saturation, infinities, NaN
 *     and round-to-nearest-even ties at hand-picked points;
 *   - the quantizer's branch-free e4m3 encoder (src/cpu/encode_branchless.h)
 *     equals bfp8_f32_to_e4m3 on all 2^32 fp32 inputs.
 * The exhaustive sweep of the converters against ml_dtypes is
 * tests/formats/sweep_converters.py.
 *
 *   build/tests/formats/test_formats
 */
#include <math.h>
#include <string.h>

#include "cpu/encode_branchless.h"
#include "test_util.h"

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Value of a code of a small float format from its definition; NAN for a NaN code. */
static double small_float_value(unsigned code, int ebits, int mbits, int bias, int ieee_specials) {
    const int sign = (code >> (ebits + mbits)) & 1;
    const unsigned e = (code >> mbits) & ((1u << ebits) - 1), m = code & ((1u << mbits) - 1);
    const unsigned emax = (1u << ebits) - 1;
    double v;
    if (ieee_specials && e == emax)
        v = m == 0 ? INFINITY : NAN;
    else if (!ieee_specials && e == emax && m == (1u << mbits) - 1) /* e4m3fn: only S.1111.111 is NaN */
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m, 1 - bias - mbits);
    else
        v = ldexp(1.0 + (double)m / (double)(1u << mbits), (int)e - bias);
    return sign ? -v : v;
}

static void test_decode_all_codes(void) {
    int64_t bad = 0;
    for (unsigned c = 0; c < 256; ++c) {
        const double want4 = small_float_value(c, 4, 3, 7, 0), want5 = small_float_value(c, 5, 2, 15, 1);
        const float got4 = bfp8_e4m3_to_f32((uint8_t)c), got5 = bfp8_e5m2_to_f32((uint8_t)c);
        if (isnan(want4) ? !isnan(got4) : bits(got4) != bits((float)want4)) {
            if (bad++ < 5) fprintf(stderr, "  e4m3 0x%02x -> %g, expected %g\n", c, got4, want4);
        }
        if (isnan(want5) ? !isnan(got5) : bits(got5) != bits((float)want5)) {
            if (bad++ < 5) fprintf(stderr, "  e5m2 0x%02x -> %g, expected %g\n", c, got5, want5);
        }
    }
    CHECK(bad == 0, "%lld fp8 codes decode wrong", (long long)bad);
    CHECK(bfp8_e4m3_to_f32(0x7e) == 448.0f && bfp8_e4m3_to_f32(0x01) == ldexpf(1.0f, -9),
          "e4m3 max / min subnormal");
    CHECK(bfp8_e5m2_to_f32(0x7b) == 57344.0f && bfp8_e5m2_to_f32(0x01) == ldexpf(1.0f, -16),
          "e5m2 max / min subnormal");

    bad = 0;
    for (uint32_t b = 0; b < 65536; ++b) {
        const float got = bfp8_bf16_to_f32((uint16_t)b);
        if (bits(got) != b << 16 && bad++ < 5) fprintf(stderr, "  bf16 0x%04x -> 0x%08x\n", b, bits(got));
    }
    CHECK(bad == 0, "%lld bf16 codes decode wrong", (long long)bad);
}

static void test_encode_points(void) {
    /* Every finite code is a fixed point of decode -> encode. */
    int64_t bad = 0;
    for (unsigned c = 0; c < 256; ++c) {
        const float v4 = bfp8_e4m3_to_f32((uint8_t)c), v5 = bfp8_e5m2_to_f32((uint8_t)c);
        if (!isnan(v4) && bfp8_f32_to_e4m3(v4) != c) ++bad;
        if (isfinite(v5) && bfp8_f32_to_e5m2(v5) != c) ++bad;
    }
    for (uint32_t b = 0; b < 65536; ++b) {
        const float v = bfp8_bf16_to_f32((uint16_t)b);
        if (!isnan(v) && bfp8_f32_to_bf16(v) != b) ++bad;
    }
    CHECK(bad == 0, "%lld codes do not survive decode -> encode", (long long)bad);

    struct { float x; uint8_t e4m3, e5m2; } cases[] = {
        {448.0f, 0x7e, 0x5f},          {464.0f, 0x7e, 0x5f},          /* 464: e4m3 tie above max: saturates */
        {-1e30f, 0xfe, 0xfb},          {INFINITY, 0x7e, 0x7b},        {-INFINITY, 0xfe, 0xfb},
        {57344.0f, 0x7e, 0x7b},        {61440.0f, 0x7e, 0x7b},        /* e5m2 tie above max: saturates */
        {NAN, 0x7f, 0x7f},             {-NAN, 0x7f, 0x7f},
        {0x1p-10f, 0x00, 0x14},        /* e4m3: half the smallest subnormal, a tie, to even (0) */
        {0x3p-10f, 0x02, 0x1a},        /* e4m3: 1.5 subnormal steps, to even (2); e5m2: exact */
        {0x5p-10f, 0x02, 0x1d},        /* e4m3: 2.5 steps, to even (2); e5m2: exact */
        {1.0625f, 0x38, 0x3c},         /* e4m3: halfway 1 / 1.125 -> 1 (even) */
        {1.1875f, 0x3a, 0x3d},         /* e4m3: halfway 1.125 / 1.25 -> 1.25 (even) */
        {1.125f, 0x39, 0x3c},          /* e5m2: halfway 1 / 1.25 -> 1 (even) */
        {1.375f, 0x3b, 0x3e},          /* e5m2: halfway 1.25 / 1.5 -> 1.5 (even) */
        {-0.0f, 0x80, 0x80},           {0x1p-30f, 0x00, 0x00},        {-0x1p-30f, 0x80, 0x80},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        CHECK(bfp8_f32_to_e4m3(cases[i].x) == cases[i].e4m3, "e4m3(%a) = 0x%02x, expected 0x%02x", cases[i].x,
              bfp8_f32_to_e4m3(cases[i].x), cases[i].e4m3);
        CHECK(bfp8_f32_to_e5m2(cases[i].x) == cases[i].e5m2, "e5m2(%a) = 0x%02x, expected 0x%02x", cases[i].x,
              bfp8_f32_to_e5m2(cases[i].x), cases[i].e5m2);
    }
    CHECK(bfp8_f32_to_bf16(NAN) == 0x7fff && bfp8_f32_to_bf16(-NAN) == 0x7fff, "bf16 canonical NaN");
    CHECK(bfp8_f32_to_bf16(0x1.01p0f) == 0x3f80 && bfp8_f32_to_bf16(0x1.03p0f) == 0x3f82,
          "bf16 ties to even");
    CHECK(bfp8_f32_to_bf16(0x1.fffffep127f) == 0x7f80, "bf16: FLT_MAX rounds to inf");
}

static void test_branchless_encoder_exhaustive(void) {
    int64_t bad = 0;
    #pragma omp parallel for schedule(static) reduction(+ : bad)
    for (int64_t i = 0; i < (int64_t)1 << 32; ++i) {
        const float x = bfp8_float_of((uint32_t)i);
        if (bfp8_encode_e4m3_branchless(x) != bfp8_f32_to_e4m3(x)) {
            if (bad < 3)
                fprintf(stderr, "  0x%08x: branch-free 0x%02x, formats.h 0x%02x\n", (unsigned)i,
                        bfp8_encode_e4m3_branchless(x), bfp8_f32_to_e4m3(x));
            ++bad;
        }
    }
    CHECK(bad == 0, "the branch-free e4m3 encoder differs from formats.h on %lld of 2^32 inputs", (long long)bad);
}

int main(void) {
    test_decode_all_codes();
    test_encode_points();
    test_branchless_encoder_exhaustive();
    return test_exit_code("test_formats");
}
