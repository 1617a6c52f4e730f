/*
 * formats.c - the public converters: thin wrappers over formats.h.
 */
#include "formats/formats.h"

#include "internal.h"

size_t bfp8_dtype_size(bfp8_dtype dtype) {
    switch (dtype) {
    case BFP8_F32: return 4;
    case BFP8_BF16: return 2;
    case BFP8_E4M3:
    case BFP8_E5M2: return 1;
    }
    return 0;
}

const char *bfp8_dtype_name(bfp8_dtype dtype) {
    switch (dtype) {
    case BFP8_F32: return "f32";
    case BFP8_BF16: return "bf16";
    case BFP8_E4M3: return "e4m3";
    case BFP8_E5M2: return "e5m2";
    }
    return "unknown";
}

uint8_t bfp8_f32_to_e4m3(float x) { return bfp8_encode_e4m3(x); }
uint8_t bfp8_f32_to_e5m2(float x) { return bfp8_encode_e5m2(x); }
float bfp8_e4m3_to_f32(uint8_t code) { return bfp8_decode_e4m3(code); }
float bfp8_e5m2_to_f32(uint8_t code) { return bfp8_decode_e5m2(code); }
uint16_t bfp8_f32_to_bf16(float x) { return bfp8_encode_bf16(x); }
float bfp8_bf16_to_f32(uint16_t bits) { return bfp8_decode_bf16(bits); }

/* Value i of a host buffer of dtype t, as fp32. */
static float load_as_f32(bfp8_dtype t, const void *p, size_t i) {
    switch (t) {
    case BFP8_F32: return ((const float *)p)[i];
    case BFP8_BF16: return bfp8_decode_bf16(((const uint16_t *)p)[i]);
    case BFP8_E4M3: return bfp8_decode_e4m3(((const uint8_t *)p)[i]);
    case BFP8_E5M2: return bfp8_decode_e5m2(((const uint8_t *)p)[i]);
    }
    return 0.0f;
}

static void store_from_f32(bfp8_dtype t, void *p, size_t i, float v) {
    switch (t) {
    case BFP8_F32: ((float *)p)[i] = v; break;
    case BFP8_BF16: ((uint16_t *)p)[i] = bfp8_encode_bf16(v); break;
    case BFP8_E4M3: ((uint8_t *)p)[i] = bfp8_encode_e4m3(v); break;
    case BFP8_E5M2: ((uint8_t *)p)[i] = bfp8_encode_e5m2(v); break;
    }
}

bfp8_status bfp8_convert_host(bfp8_dtype dst_dtype, void *dst, bfp8_dtype src_dtype,
                              const void *src, size_t n) {
    if (bfp8_dtype_size(dst_dtype) == 0 || bfp8_dtype_size(src_dtype) == 0)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "bfp8_convert_host: unknown dtype");
    if (n == 0) return BFP8_OK;
    if (!dst || !src) return bfp8_fail(BFP8_ERR_NULL_POINTER, "bfp8_convert_host: NULL buffer");
    /* Every fp8 and bf16 value is exact in fp32, so going through fp32 is exact. */
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; ++i) store_from_f32(dst_dtype, dst, i, load_as_f32(src_dtype, src, i));
    return BFP8_OK;
}
