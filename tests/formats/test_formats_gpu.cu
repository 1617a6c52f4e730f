/*
 * test_gpu_formats.cu - the GPU's converters and the quantize kernels' scale
 * math against formats.h, bit for bit, over every input:
 *
 *   - all 2^32 fp32 bit patterns through the hardware cvt.rn.satfinite.e4m3x2.f32,
 *     cvt.rn.satfinite.e5m2x2.f32 and cvt.rn.bf16x2.f32, against
 *     bfp8_encode_e4m3 / _e5m2 / _bf16 compiled for the device (the same code
 *     the CPU runs): so the CPU converters equal the hardware, NaN included;
 *   - every amax (all 2^31 non-negative patterns) through quantize_tiles_kernel.cuh's
 *     group_multiplier, pow2 off and on, against formats.h's
 *     bfp8_scale_multiplier and 1.0f / mult, on the device; and a sample of
 *     them against the same functions run on the host.
 *
 *   ctest --test-dir build -R gpu_quantize_formats --output-on-failure
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda/quantize_tiles_kernel.cuh"
#include "formats/formats.h"

extern "C" {
#include "test_util.h"
}

#define CUDA_OK(call)                                                                        \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) test_fatal("%s: %s", #call, cudaGetErrorString(e_));         \
    } while (0)

enum { kFormats = 3, kRecords = 8 };
static const char *const format_names[kFormats] = {"e4m3", "e5m2", "bf16"};

struct mismatches {
    unsigned long long count[kFormats];
    unsigned int recorded[kFormats];
    uint32_t input[kFormats][kRecords];
    uint32_t hardware[kFormats][kRecords];
    uint32_t formats[kFormats][kRecords];
};

__device__ void record(mismatches *m, int f, uint32_t in, uint32_t hw, uint32_t sw) {
    const unsigned slot = atomicAdd(&m->recorded[f], 1u);
    if (slot < kRecords) {
        m->input[f][slot] = in;
        m->hardware[f][slot] = hw;
        m->formats[f][slot] = sw;
    }
}

/* Pair i holds the inputs 2i (low half of each cvt result) and 2i + 1. */
__global__ void all_fp32_kernel(mismatches *m) {
    unsigned long long local[kFormats] = {0, 0, 0};
    const uint64_t pairs = 1ull << 31;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < pairs;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t u0 = (uint32_t)(2 * i), u1 = u0 + 1;
        const float x0 = __uint_as_float(u0), x1 = __uint_as_float(u1);
        uint16_t e4, e5;
        uint32_t b16;
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(e4) : "f"(x1), "f"(x0));
        asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(e5) : "f"(x1), "f"(x0));
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(b16) : "f"(x1), "f"(x0));
        const uint32_t hw[kFormats][2] = {{e4 & 0xffu, (uint32_t)e4 >> 8},
                                          {e5 & 0xffu, (uint32_t)e5 >> 8},
                                          {b16 & 0xffffu, b16 >> 16}};
        const uint32_t sw[kFormats][2] = {{bfp8_encode_e4m3(x0), bfp8_encode_e4m3(x1)},
                                          {bfp8_encode_e5m2(x0), bfp8_encode_e5m2(x1)},
                                          {bfp8_encode_bf16(x0), bfp8_encode_bf16(x1)}};
#pragma unroll
        for (int f = 0; f < kFormats; ++f)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (hw[f][h] != sw[f][h]) {
                    ++local[f];
                    record(m, f, h ? u1 : u0, hw[f][h], sw[f][h]);
                }
    }
    for (int f = 0; f < kFormats; ++f)
        if (local[f]) atomicAdd(&m->count[f], local[f]);
}

/* Every amax pattern 0 .. 2^31 - 1: group_multiplier against formats.h. */
__global__ void all_amax_kernel(unsigned long long *bad, uint32_t *first_bad) {
    unsigned long long local = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 31);
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t a = (uint32_t)i;
        for (int pow2 = 0; pow2 < 2; ++pow2) {
            float mult, scale;
            const int nonfinite = bfp8_quant::group_multiplier(a, pow2, mult, scale);
            uint32_t want_mult, want_scale;
            if (bfp8_amax_bits_nonfinite(a)) {
                want_mult = want_scale = BFP8_NAN_SCALE_BITS;
            } else {
                const float m = bfp8_scale_multiplier(__uint_as_float(a), pow2);
                want_mult = __float_as_uint(m);
                want_scale = __float_as_uint(1.0f / m);
            }
            if (nonfinite != bfp8_amax_bits_nonfinite(a) || __float_as_uint(mult) != want_mult ||
                __float_as_uint(scale) != want_scale) {
                ++local;
                atomicCAS(first_bad, 0xffffffffu, a | (uint32_t)pow2 << 31);
            }
        }
    }
    if (local) atomicAdd(bad, local);
}

/* Multiplier and scale of the given amax patterns, for the host comparison. */
__global__ void sample_amax_kernel(const uint32_t *amax, int n, int pow2, uint32_t *mult,
                                   uint32_t *scale) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float m, s;
    bfp8_quant::group_multiplier(amax[i], pow2, m, s);
    mult[i] = __float_as_uint(m);
    scale[i] = __float_as_uint(s);
}

static void check_converters(void) {
    mismatches *d_m;
    CUDA_OK(cudaMalloc(&d_m, sizeof(mismatches)));
    CUDA_OK(cudaMemset(d_m, 0, sizeof(mismatches)));
    all_fp32_kernel<<<132 * 16, 256>>>(d_m);
    CUDA_OK(cudaGetLastError());
    mismatches m;
    CUDA_OK(cudaMemcpy(&m, d_m, sizeof m, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(d_m));
    for (int f = 0; f < kFormats; ++f) {
        for (unsigned k = 0; k < m.recorded[f] && k < kRecords; ++k)
            fprintf(stderr, "  %s: fp32 0x%08x -> hardware 0x%x, formats.h 0x%x\n", format_names[f],
                    m.input[f][k], m.hardware[f][k], m.formats[f][k]);
        CHECK(m.count[f] == 0, "%s: %llu of 2^32 fp32 inputs differ between the hardware and formats.h",
              format_names[f], m.count[f]);
    }
    printf("converters: e4m3 %llu, e5m2 %llu, bf16 %llu mismatches over 2^32 inputs\n", m.count[0],
           m.count[1], m.count[2]);
}

static void check_scale_math(void) {
    unsigned long long *d_bad;
    uint32_t *d_first;
    CUDA_OK(cudaMalloc(&d_bad, sizeof *d_bad));
    CUDA_OK(cudaMalloc(&d_first, sizeof *d_first));
    CUDA_OK(cudaMemset(d_bad, 0, sizeof *d_bad));
    CUDA_OK(cudaMemset(d_first, 0xff, sizeof *d_first));
    all_amax_kernel<<<132 * 16, 256>>>(d_bad, d_first);
    CUDA_OK(cudaGetLastError());
    unsigned long long bad;
    uint32_t first;
    CUDA_OK(cudaMemcpy(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&first, d_first, sizeof first, cudaMemcpyDeviceToHost));
    CHECK(bad == 0, "group_multiplier differs from formats.h on %llu (amax, pow2) pairs, first amax 0x%08x pow2 %u",
          bad, first & 0x7fffffffu, first >> 31);
    printf("scale math (device): %llu mismatches over 2^31 amax patterns x pow2 off/on\n", bad);
    CUDA_OK(cudaFree(d_bad));
    CUDA_OK(cudaFree(d_first));

    /* Host: every 4099th pattern plus the edges. */
    const uint32_t edges[] = {0u, 1u, 2u, 0x007fffffu, 0x00800000u, 0x01000000u, 0x3f800000u,
                              0x43e00000u, 0x7f7fffffu, 0x7f800000u, 0x7fc00000u, 0x7fffffffu,
                              0x0000abcdu, 0x00400000u, 0x02a00000u};
    const int n_edges = (int)(sizeof edges / sizeof edges[0]);
    const int n = n_edges + (int)((0x80000000ull + 4098) / 4099);
    uint32_t *amax = (uint32_t *)test_malloc((size_t)n * 4), *mult = (uint32_t *)test_malloc((size_t)n * 4),
             *scale = (uint32_t *)test_malloc((size_t)n * 4);
    memcpy(amax, edges, sizeof edges);
    for (int i = n_edges; i < n; ++i) amax[i] = (uint32_t)((uint64_t)(i - n_edges) * 4099);
    uint32_t *d_amax, *d_mult, *d_scale;
    CUDA_OK(cudaMalloc(&d_amax, (size_t)n * 4));
    CUDA_OK(cudaMalloc(&d_mult, (size_t)n * 4));
    CUDA_OK(cudaMalloc(&d_scale, (size_t)n * 4));
    CUDA_OK(cudaMemcpy(d_amax, amax, (size_t)n * 4, cudaMemcpyHostToDevice));
    int64_t host_bad = 0;
    for (int pow2 = 0; pow2 < 2; ++pow2) {
        sample_amax_kernel<<<(n + 255) / 256, 256>>>(d_amax, n, pow2, d_mult, d_scale);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaMemcpy(mult, d_mult, (size_t)n * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(scale, d_scale, (size_t)n * 4, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i) {
            uint32_t want_mult = BFP8_NAN_SCALE_BITS, want_scale = BFP8_NAN_SCALE_BITS;
            if (!bfp8_amax_bits_nonfinite(amax[i])) {
                const float m = bfp8_scale_multiplier(bfp8_float_of(amax[i]), pow2);
                want_mult = bfp8_bits_of(m);
                want_scale = bfp8_bits_of(1.0f / m);
            }
            if (mult[i] != want_mult || scale[i] != want_scale) {
                if (host_bad < 5)
                    fprintf(stderr, "  amax 0x%08x pow2 %d: device mult 0x%08x scale 0x%08x, host 0x%08x 0x%08x\n",
                            amax[i], pow2, mult[i], scale[i], want_mult, want_scale);
                ++host_bad;
            }
        }
    }
    CHECK(host_bad == 0, "device scale math differs from the host's on %lld sampled amax values",
          (long long)host_bad);
    printf("scale math (host sample): %lld mismatches over %d amax patterns x pow2 off/on\n",
           (long long)host_bad, n);
    CUDA_OK(cudaFree(d_amax));
    CUDA_OK(cudaFree(d_mult));
    CUDA_OK(cudaFree(d_scale));
    free(amax);
    free(mult);
    free(scale);
}

int main(void) {
    TEST_REQUIRE_GPU();
    check_converters();
    check_scale_math();
    return test_exit_code("gpu_quantize_formats");
}
