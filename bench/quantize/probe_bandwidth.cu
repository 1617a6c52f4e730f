/*
 * probe_bandwidth.cu - what the memory system gives the byte mixes of the
 * quantizers, without any quantization (issue #3: where is the ceiling of a
 * kernel that reads x once and writes two code matrices?).
 *
 *   probe_bandwidth [--rows R] [--cols C] [--reps N]
 *
 * x is R x C bf16 (default 16384 x 4096). Each probe moves bytes only (a
 * "code" is the high byte of a bf16); GB/s counts bytes read + written and
 * is compared with cudaMemcpyAsync device-to-device of 1 GiB and of the
 * probe's own byte count, timed in the same run:
 *   copy       read 2RC, write 2RC (16-byte vectors, grid-stride)
 *   half       read 2RC, write RC        (one stream like "x as stored")
 *   two-seq    read 2RC, write RC + RC   (two streams, both like "x as stored")
 *   tile-q+t   read 2RC, write RC + RC^T (128 x 128 tiles: row codes from
 *              registers, transposed codes through shared memory: the data
 *              flow of the dual quantizer without its maxima, scales and
 *              the barriers that they need)
 *   tile-q+t, t tile by tile: the same instructions, the transposed codes
 *              of each tile stored as 16 contiguous KB (not x^T's layout)
 *   stack-q+t  tile-q+t over 512 x 128 stacks of 4 tiles: x^T written as
 *              one 512-byte piece per row and warp instruction
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#define PROBE_CHECK(call)                                                                            \
    do {                                                                                             \
        cudaError_t e_ = (call);                                                                     \
        if (e_ != cudaSuccess) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

/* The high bytes of 4 bf16 words (8 values) as 8 bytes. */
__device__ __forceinline__ uint2 high_bytes(uint4 v) {
    return make_uint2(__byte_perm(v.x, v.y, 0x7531), __byte_perm(v.z, v.w, 0x7531));
}

__global__ void probe_copy(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n16) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += 2 * stride) {
        const uint4 a = src[i];
        const bool second = i + stride < n16;
        uint4 b = make_uint4(0, 0, 0, 0);
        if (second) b = src[i + stride];
        dst[i] = a;
        if (second) dst[i + stride] = b;
    }
}

/* 32 input bytes (16 bf16) per step: 16 code bytes to out0 (and out1). */
template <bool kTwo>
__global__ void probe_codes(const uint4 *__restrict__ x, uint4 *__restrict__ out0, uint4 *__restrict__ out1,
                            size_t n_out16) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_out16; i += stride) {
        const uint4 a = x[2 * i], b = x[2 * i + 1];
        const uint2 lo = high_bytes(a), hi = high_bytes(b);
        const uint4 v = make_uint4(lo.x, lo.y, hi.x, hi.y);
        out0[i] = v;
        if (kTwo) out1[i] = v;
    }
}

/* A thread's 8 x 8 block of the tile at (r0, c0) (rows rb*8.., columns
 * cc*8..): read, its codes stored as x is laid out, kept in code[row][half]. */
__device__ __forceinline__ void block_codes(const uint16_t *__restrict__ x, int64_t cols, uint8_t *__restrict__ q,
                                            int64_t r0, int64_t c0, int rb, int cc, uint32_t (&code)[8][2]) {
    uint4 v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = *reinterpret_cast<const uint4 *>(x + (r0 + rb * 8 + i) * cols + c0 + cc * 8);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const uint2 h = high_bytes(v[i]);
        code[i][0] = h.x;
        code[i][1] = h.y;
        *reinterpret_cast<uint2 *>(q + (r0 + rb * 8 + i) * cols + c0 + cc * 8) = h;
    }
}

/* Column j of the block (byte j of each row's codes) as 8 bytes, row 0 first. */
__device__ __forceinline__ uint2 block_column(const uint32_t (&code)[8][2], int j) {
    const int w = j >> 2, sh = (j & 3) * 8;
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        lo |= ((code[i][w] >> sh) & 0xffu) << (8 * i);
        hi |= ((code[i + 4][w] >> sh) & 0xffu) << (8 * i);
    }
    return make_uint2(lo, hi);
}

/* 128 x 128 tiles over a persistent grid; 256 threads, each an 8 x 8 block
 * (rows rb*8.., columns cc*8..) loaded straight from global memory. */
template <bool kLinearT>
__global__ void __launch_bounds__(256, 2)
    probe_tile_qt(const uint16_t *__restrict__ x, int64_t rows, int64_t cols, uint8_t *__restrict__ q,
                  uint8_t *__restrict__ t) {
    __shared__ __align__(16) uint8_t transposed[128 * 128];
    const int tid = (int)threadIdx.x, rb = tid >> 4, cc = tid & 15;
    const int64_t col_tiles = cols / 128, num_tiles = rows / 128 * col_tiles;
    for (int64_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        const int64_t r0 = tile / col_tiles * 128, c0 = tile % col_tiles * 128;
        uint32_t code[8][2];
        block_codes(x, cols, q, r0, c0, rb, cc, code);
        __syncthreads(); /* the previous tile's transposed codes are out */
#pragma unroll
        for (int j = 0; j < 8; ++j) { /* column cc*8+j */
            const int c = cc * 8 + j, unit = rb ^ ((c >> 3) & 15);
            *reinterpret_cast<uint2 *>(transposed + c * 128 + unit * 8) = block_column(code, j);
        }
        __syncthreads();
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const int c = (tid >> 3) + 32 * s, k = tid & 7, f = (c >> 3) & 15;
            uint4 w = *reinterpret_cast<const uint4 *>(transposed + c * 128 + ((2 * k) ^ (f & ~1)) * 8);
            if (f & 1) w = make_uint4(w.z, w.w, w.x, w.y);
            uint8_t *dst = kLinearT ? t + tile * 16384 + c * 128 + k * 16 : t + (c0 + c) * rows + r0 + k * 16;
            *reinterpret_cast<uint4 *>(dst) = w;
        }
    }
}

/* probe_tile_qt over stacks of 4 tiles (512 rows x 128 columns): the
 * transposed codes of the stack wait in shared memory and go out as one
 * 512-byte piece per row of x^T and warp instruction. */
__global__ void __launch_bounds__(256, 2)
    probe_stack_qt(const uint16_t *__restrict__ x, int64_t rows, int64_t cols, uint8_t *__restrict__ q,
                   uint8_t *__restrict__ t) {
    extern __shared__ __align__(16) uint8_t stack_t[]; /* 128 rows of 512 bytes */
    const int tid = (int)threadIdx.x, rb = tid >> 4, cc = tid & 15;
    const int64_t col_tiles = cols / 128, num_stacks = rows / 512 * col_tiles;
    for (int64_t st = blockIdx.x; st < num_stacks; st += gridDim.x) {
        const int64_t s0 = st / col_tiles * 512, c0 = st % col_tiles * 128;
        __syncthreads(); /* the previous stack is out */
        for (int sub = 0; sub < 4; ++sub) {
            const int64_t r0 = s0 + sub * 128;
            uint32_t code[8][2];
            block_codes(x, cols, q, r0, c0, rb, cc, code);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                /* row c of the stack, 8-byte unit sub*16 + rb; 16-byte units rotated by c / 8 to spread banks */
                const int c = cc * 8 + j, unit = sub * 16 + rb, u16 = ((unit >> 1) + (c >> 3)) & 31;
                *reinterpret_cast<uint2 *>(stack_t + c * 512 + u16 * 16 + (unit & 1) * 8) = block_column(code, j);
            }
        }
        __syncthreads();
#pragma unroll 4
        for (int s = 0; s < 16; ++s) {
            const int c = (tid >> 5) + 8 * s, k = tid & 31, u16 = (k + (c >> 3)) & 31;
            const uint4 w = *reinterpret_cast<const uint4 *>(stack_t + c * 512 + u16 * 16);
            *reinterpret_cast<uint4 *>(t + (c0 + c) * rows + s0 + k * 16) = w;
        }
    }
}

struct timer {
    cudaEvent_t a, b;
    timer() {
        PROBE_CHECK(cudaEventCreate(&a));
        PROBE_CHECK(cudaEventCreate(&b));
    }
};

template <typename F> static double median_ms(F launch, int reps) {
    timer tm;
    for (int i = 0; i < 3; ++i) launch();
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
        PROBE_CHECK(cudaEventRecord(tm.a));
        launch();
        PROBE_CHECK(cudaEventRecord(tm.b));
        PROBE_CHECK(cudaEventSynchronize(tm.b));
        float m;
        PROBE_CHECK(cudaEventElapsedTime(&m, tm.a, tm.b));
        ms.push_back(m);
    }
    PROBE_CHECK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

int main(int argc, char **argv) {
    int64_t rows = 16384, cols = 4096;
    int reps = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows")) rows = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols")) cols = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--rows R] [--cols C] [--reps N]\n", argv[0]);
            return 2;
        }
    }
    if (rows % 128 || cols % 128) {
        fprintf(stderr, "rows and cols must be multiples of 128\n");
        return 2;
    }
    int sms = 0;
    PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t n = (size_t)rows * cols, big = (size_t)1 << 30;
    uint8_t *x, *o0, *o1, *cs, *cd;
    PROBE_CHECK(cudaMalloc(&x, 2 * n));
    PROBE_CHECK(cudaMalloc(&o0, 2 * n)); /* also the copy's destination */
    PROBE_CHECK(cudaMalloc(&o1, n));
    PROBE_CHECK(cudaMalloc(&cs, big));
    PROBE_CHECK(cudaMalloc(&cd, big));
    PROBE_CHECK(cudaMemset(x, 0x3c, 2 * n));
    PROBE_CHECK(cudaMemset(o0, 0x5a, 2 * n));
    PROBE_CHECK(cudaMemset(o1, 0x5a, n));
    PROBE_CHECK(cudaMemset(cs, 0x3c, big));
    PROBE_CHECK(cudaMemset(cd, 0x5a, big));

    const double ms_big = median_ms([&] { PROBE_CHECK(cudaMemcpyAsync(cd, cs, big, cudaMemcpyDeviceToDevice)); }, reps);
    const double gbps_big = 2.0 * big / (ms_big * 1e-3) / 1e9;
    printf("x %lldx%lld bf16, %d SMs\n", (long long)rows, (long long)cols, sms);
    printf("%-28s %9.1f us %7.0f GB/s\n", "cudaMemcpy D2D 1 GiB", ms_big * 1e3, gbps_big);

    auto report = [&](const char *name, double ms, double bytes) {
        const size_t half = std::min((size_t)(bytes / 2) / 16 * 16, big);
        const double ms_same =
            median_ms([&] { PROBE_CHECK(cudaMemcpyAsync(cd, cs, half, cudaMemcpyDeviceToDevice)); }, reps);
        const double gbps = bytes / (ms * 1e-3) / 1e9, gbps_same = 2.0 * half / (ms_same * 1e-3) / 1e9;
        printf("%-28s %9.1f us %7.0f GB/s %5.1f%% of 1 GiB copy, %5.1f%% of a copy of the same bytes (%.0f GB/s)\n",
               name, ms * 1e3, gbps, 100.0 * gbps / gbps_big, 100.0 * gbps / gbps_same, gbps_same);
    };
    const int grid = 2 * sms;
    report("copy (own kernel)",
           median_ms([&] { probe_copy<<<grid * 4, 256>>>((const uint4 *)x, (uint4 *)o0, 2 * n / 16); }, reps),
           4.0 * n);
    report("half: read 2, write 1",
           median_ms([&] { probe_codes<false><<<grid * 4, 256>>>((const uint4 *)x, (uint4 *)o0, nullptr, n / 16); }, reps),
           3.0 * n);
    report("two-seq: read 2, write 1+1",
           median_ms([&] { probe_codes<true><<<grid * 4, 256>>>((const uint4 *)x, (uint4 *)o0, (uint4 *)o1, n / 16); }, reps),
           4.0 * n);
    report("tile-q+t: read 2, write 1+1T",
           median_ms([&] { probe_tile_qt<false><<<grid, 256>>>((const uint16_t *)x, rows, cols, o0, o1); }, reps),
           4.0 * n);
    report("tile-q+t, t tile by tile",
           median_ms([&] { probe_tile_qt<true><<<grid, 256>>>((const uint16_t *)x, rows, cols, o0, o1); }, reps),
           4.0 * n);
    if (rows % 512 == 0) {
        PROBE_CHECK(cudaFuncSetAttribute(probe_stack_qt, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
        report("stack-q+t: 512-byte t runs",
               median_ms([&] { probe_stack_qt<<<grid, 256, 65536>>>((const uint16_t *)x, rows, cols, o0, o1); }, reps),
               4.0 * n);
    }
    return 0;
}
