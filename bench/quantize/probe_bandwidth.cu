/*
 * probe_bandwidth.cu - what the memory system gives the byte mixes of the
 * quantizers, without any quantization: where is the ceiling of a kernel
 * that reads x once and writes two code matrices?
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
 *   (the three above also with one tile / stack per CTA, grid = tiles)
 *   copies     4 vectors in flight per thread (plain, or no-L1 loads and
 *              streaming stores); by the TMA unit (cp.async.bulk through a
 *              ring of shared-memory stages: chunk size, depth, cyclic or
 *              blocked walk, L2 evict-first hints); non-persistent block
 *              copies (a CTA per piece, every load before any store)
 *   bulk two-seq / q+t128  the dual byte mix through the TMA unit, x^T as
 *              sequential pieces or as 128-byte bulk stores at its stride
 * It also starts a 256 MiB cudaMemcpy beside a kernel that holds every SM
 * thread slot, to tell whether the copy runs on the SMs (it waits: it does).
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
/* A 16-byte store under an L2 policy: 0 none, 1 evict-last, 2 evict-first. */
template <int kPolicy> __device__ __forceinline__ void store16(uint8_t *dst, uint4 w) {
    if (kPolicy == 0) {
        *reinterpret_cast<uint4 *>(dst) = w;
        return;
    }
    uint64_t pol;
    if (kPolicy == 1) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    else asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(dst), "r"(w.x), "r"(w.y),
                 "r"(w.z), "r"(w.w), "l"(pol)
                 : "memory");
}

template <bool kLinearT, int kTPolicy = 0>
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
            store16<kTPolicy>(dst, w);
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

/* Each thread moves 4 vectors per step, all 4 loads issued before a store
 * (4x the bytes in flight of probe_copy). kNoCache: loads not allocated in
 * L1, with a 256-byte L2 prefetch, and streaming (.cs) stores; else .cs
 * loads and plain stores. */
template <bool kNoCache> __device__ __forceinline__ uint4 copy_load(const uint4 *p) {
    if (!kNoCache) return __ldcs(p);
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
template <bool kNoCache>
__global__ void probe_copy_unrolled(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n16) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = copy_load<kNoCache>(src + i + u * stride);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            if (kNoCache) __stcs(dst + i + u * stride, v[u]);
            else dst[i + u * stride] = v[u];
        }
    }
    for (; i < n16; i += stride) dst[i] = src[i];
}

/* ---- the TMA unit's 1-D bulk copies (cp.async.bulk), global <-> shared ---- */
__device__ __forceinline__ uint32_t sptr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bulk_load(void *smem, const void *gmem, uint32_t bytes, uint64_t *bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sptr(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(sptr(smem)), "l"(gmem), "r"(bytes), "r"(sptr(bar)) : "memory");
}
__device__ __forceinline__ void bulk_store(void *gmem, const void *smem, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gmem), "r"(sptr(smem)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void mbar_init(uint64_t *bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sptr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}"
                 ::"r"(sptr(bar)), "r"(parity) : "memory");
}

/* Copy by the TMA unit alone: one thread per CTA streams kChunk-byte pieces
 * through kStages shared-memory stages (loads kStages - 1 ahead, at most two
 * stores in flight). n_chunks pieces; the persistent grid walks them
 * cyclically (CTA b: b, b + grid, ...) or, kBlocked, as one contiguous range
 * per CTA. kHint: loads and stores carry an L2 evict-first policy. */
__device__ __forceinline__ void bulk_load_hint(void *smem, const void *gmem, uint32_t bytes, uint64_t *bar,
                                               uint64_t pol) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sptr(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1], %2, [%3], %4;" ::"r"(sptr(smem)), "l"(gmem), "r"(bytes), "r"(sptr(bar)), "l"(pol)
                 : "memory");
}
__device__ __forceinline__ void bulk_store_hint(void *gmem, const void *smem, uint32_t bytes, uint64_t pol) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(gmem),
                 "r"(sptr(smem)), "r"(bytes), "l"(pol) : "memory");
}
template <int kChunk, int kStages, bool kBlocked = false, bool kHint = false>
__global__ void __launch_bounds__(32) probe_bulk_copy(const uint8_t *__restrict__ src, uint8_t *__restrict__ dst,
                                                      int64_t n_chunks) {
    extern __shared__ __align__(128) uint8_t stage_mem[];
    __shared__ __align__(8) uint64_t full[kStages];
    if (threadIdx.x != 0) return;
    uint64_t pol = 0;
    if (kHint) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const int64_t per = (n_chunks + gridDim.x - 1) / gridDim.x, first = blockIdx.x * per;
    const int64_t mine = kBlocked ? (first < n_chunks ? (n_chunks - first < per ? n_chunks - first : per) : 0)
                                  : (n_chunks > blockIdx.x ? (n_chunks - 1 - blockIdx.x) / gridDim.x + 1 : 0);
    auto chunk = [&](int64_t k) { return kBlocked ? first + k : (int64_t)blockIdx.x + k * gridDim.x; };
    auto load = [&](int s, int64_t k) {
        if (kHint) bulk_load_hint(stage_mem + s * kChunk, src + chunk(k) * kChunk, kChunk, &full[s], pol);
        else bulk_load(stage_mem + s * kChunk, src + chunk(k) * kChunk, kChunk, &full[s]);
    };
    for (int64_t k = 0; k < mine && k < kStages; ++k) load((int)k, k);
    for (int64_t k = 0; k < mine; ++k) {
        const int s = (int)(k % kStages);
        mbar_wait(&full[s], (uint32_t)((k / kStages) & 1));
        if (kHint) bulk_store_hint(dst + chunk(k) * kChunk, stage_mem + s * kChunk, kChunk, pol);
        else bulk_store(dst + chunk(k) * kChunk, stage_mem + s * kChunk, kChunk);
        bulk_commit();
        /* stage of chunk k-1 refilled with chunk k-1+kStages once its store has read it */
        const int64_t refill = k - 1 + kStages;
        if (k >= 1 && refill < mine) {
            bulk_wait_read<1>();
            load((int)((k - 1) % kStages), refill);
        }
    }
    bulk_wait_all();
}

/* The dual quantizer's byte mix through the TMA unit: 32 KB of bf16 in per
 * piece, its 16 KB of high bytes made by 256 threads in shared memory, then
 * stored twice (two sequential outputs, or the second as 128 pieces of 128
 * bytes at x^T's stride when kStridedSecond: the transposed layout's write
 * pattern for 128 x 128 tiles). */
template <int kStages, bool kStridedSecond>
__global__ void __launch_bounds__(256) probe_bulk_codes(const uint8_t *__restrict__ x, int64_t rows, int64_t cols,
                                                        uint8_t *__restrict__ out0, uint8_t *__restrict__ out1) {
    constexpr int kIn = 32768, kOut = 16384;
    extern __shared__ __align__(128) uint8_t stage_mem[]; /* kStages x kIn, then 2 x kOut */
    __shared__ __align__(8) uint64_t full[kStages];
    uint8_t *out_mem = stage_mem + kStages * kIn;
    const int tid = (int)threadIdx.x;
    const int64_t n_chunks = rows * cols * 2 / kIn;
    const int64_t mine = n_chunks > blockIdx.x ? (n_chunks - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    auto chunk = [&](int64_t k) { return (int64_t)blockIdx.x + k * gridDim.x; };
    if (tid == 0) {
        for (int s = 0; s < kStages; ++s) mbar_init(&full[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int64_t k = 0; k < mine && k < kStages; ++k)
            bulk_load(stage_mem + k * kIn, x + chunk(k) * kIn, kIn, &full[k]);
    }
    __syncthreads();
    for (int64_t k = 0; k < mine; ++k) {
        const int s = (int)(k % kStages), ob = (int)(k & 1);
        if (tid == 0) bulk_wait_read<1>(); /* the stores of piece k-2 have read out_mem[ob] */
        __syncthreads();
        mbar_wait(&full[s], (uint32_t)((k / kStages) & 1));
        const uint4 *in = reinterpret_cast<const uint4 *>(stage_mem + s * kIn);
        uint2 *o = reinterpret_cast<uint2 *>(out_mem + ob * kOut);
#pragma unroll
        for (int i = tid; i < kIn / 16; i += 256) o[i] = high_bytes(in[i]);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (tid == 0) {
            const int64_t c = chunk(k);
            bulk_store(out0 + c * kOut, out_mem + ob * kOut, kOut);
            if (!kStridedSecond) {
                bulk_store(out1 + c * kOut, out_mem + ob * kOut, kOut);
            } else {
                /* piece c = 16384 codes = a 128 x 128 tile (r0, c0) of x in tile order */
                const int64_t col_tiles = cols / 128, r0 = c / col_tiles * 128, c0 = c % col_tiles * 128;
                for (int j = 0; j < 128; ++j)
                    bulk_store(out1 + (c0 + j) * rows + r0, out_mem + ob * kOut + j * 128, 128);
            }
            bulk_commit();
            if (k + kStages < mine) bulk_load(stage_mem + s * kIn, x + chunk(k + kStages) * kIn, kIn, &full[s]);
        }
    }
    if (tid == 0) bulk_wait_all();
}

/* Non-persistent: CTA b copies the kBytes contiguous bytes from b * kBytes,
 * each of its kThreads threads loading all of its vectors before storing. */
template <int kBytes, int kThreads>
__global__ void __launch_bounds__(kThreads) probe_copy_blocks(const uint4 *__restrict__ src, uint4 *__restrict__ dst) {
    constexpr int kPer = kBytes / 16 / kThreads;
    const size_t base = (size_t)blockIdx.x * (kBytes / 16) + threadIdx.x;
    uint4 v[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) v[j] = src[base + (size_t)j * kThreads];
#pragma unroll
    for (int j = 0; j < kPer; ++j) dst[base + (size_t)j * kThreads] = v[j];
}

/* Holds every SM (one CTA each, most of shared memory) for about `cycles`. */
__global__ void probe_hold_sms(long long cycles) {
    extern __shared__ uint8_t hold_mem[];
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (threadIdx.x == 0 && hold_mem[0] == 0xff) hold_mem[1] = 1;
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

    { /* does cudaMemcpy D2D run on the SMs? Start it while a kernel holds every SM. */
        cudaStream_t s1, s2;
        PROBE_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
        PROBE_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
        PROBE_CHECK(cudaFuncSetAttribute(probe_hold_sms, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
        cudaEvent_t e0, e1, e2;
        PROBE_CHECK(cudaEventCreate(&e0));
        PROBE_CHECK(cudaEventCreate(&e1));
        PROBE_CHECK(cudaEventCreate(&e2));
        PROBE_CHECK(cudaEventRecord(e0, s1));
        /* two CTAs of 1024 threads per SM, 100 KB of shared memory each: no
         * thread slot and almost no shared memory left for another kernel */
        probe_hold_sms<<<2 * sms, 1024, 100 * 1024, s1>>>(20000000LL); /* ~10 ms at 2 GHz */
        PROBE_CHECK(cudaEventRecord(e1, s1));
        PROBE_CHECK(cudaStreamWaitEvent(s2, e0, 0));
        PROBE_CHECK(cudaMemcpyAsync(cd, cs, (size_t)256 << 20, cudaMemcpyDeviceToDevice, s2));
        PROBE_CHECK(cudaEventRecord(e2, s2));
        PROBE_CHECK(cudaDeviceSynchronize());
        float hold_ms, copy_ms;
        PROBE_CHECK(cudaEventElapsedTime(&hold_ms, e0, e1));
        PROBE_CHECK(cudaEventElapsedTime(&copy_ms, e0, e2));
        printf("SMs held %.3f ms; a 256 MiB cudaMemcpy D2D started beside it finished after %.3f ms\n", hold_ms,
               copy_ms);
    }
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
    report(
        "half: read 2, write 1",
        median_ms([&] { probe_codes<false><<<grid * 4, 256>>>((const uint4 *)x, (uint4 *)o0, nullptr, n / 16); }, reps),
        3.0 * n);
    report("two-seq: read 2, write 1+1",
           median_ms([&] { probe_codes<true><<<grid * 4, 256>>>((const uint4 *)x, (uint4 *)o0, (uint4 *)o1, n / 16); },
                     reps),
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
    report("copy, 4 vectors in flight",
           median_ms([&] { probe_copy_unrolled<false><<<grid * 4, 256>>>((const uint4 *)x, (uint4 *)o0, 2 * n / 16); },
                     reps),
           4.0 * n);
    {
        auto k6 = probe_bulk_copy<32768, 6>;
        PROBE_CHECK(cudaFuncSetAttribute(k6, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * 32768));
        report("bulk copy 32K x 6, 1 CTA/SM",
               median_ms([&] { k6<<<sms, 32, 6 * 32768>>>(x, o0, (int64_t)(2 * n / 32768)); }, reps), 4.0 * n);
        { /* the bulk copy moves every byte */
            PROBE_CHECK(cudaMemset(o0, 0, 2 * n));
            k6<<<sms, 32, 6 * 32768>>>(x, o0, (int64_t)(2 * n / 32768));
            std::vector<uint8_t> hx(2 * n), ho(2 * n);
            PROBE_CHECK(cudaMemcpy(hx.data(), x, 2 * n, cudaMemcpyDeviceToHost));
            PROBE_CHECK(cudaMemcpy(ho.data(), o0, 2 * n, cudaMemcpyDeviceToHost));
            printf("bulk copy check: %s\n", memcmp(hx.data(), ho.data(), 2 * n) ? "MISMATCH" : "ok");
        }
        auto k3 = probe_bulk_copy<32768, 3>;
        PROBE_CHECK(cudaFuncSetAttribute(k3, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 32768));
        report("bulk copy 32K x 3, 2 CTA/SM",
               median_ms([&] { k3<<<2 * sms, 32, 3 * 32768>>>(x, o0, (int64_t)(2 * n / 32768)); }, reps), 4.0 * n);
        auto kb = probe_bulk_copy<32768, 6, true>;
        PROBE_CHECK(cudaFuncSetAttribute(kb, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * 32768));
        report("bulk copy 32K x 6, blocked",
               median_ms([&] { kb<<<sms, 32, 6 * 32768>>>(x, o0, (int64_t)(2 * n / 32768)); }, reps), 4.0 * n);
        auto kh = probe_bulk_copy<32768, 6, false, true>;
        PROBE_CHECK(cudaFuncSetAttribute(kh, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * 32768));
        report("bulk copy 32K x 6, evict-first",
               median_ms([&] { kh<<<sms, 32, 6 * 32768>>>(x, o0, (int64_t)(2 * n / 32768)); }, reps), 4.0 * n);
        auto k64 = probe_bulk_copy<65536, 3>;
        PROBE_CHECK(cudaFuncSetAttribute(k64, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 65536));
        report("bulk copy 64K x 3, 1 CTA/SM",
               median_ms([&] { k64<<<sms, 32, 3 * 65536>>>(x, o0, (int64_t)(2 * n / 65536)); }, reps), 4.0 * n);
        auto k8 = probe_bulk_copy<8192, 6>;
        PROBE_CHECK(cudaFuncSetAttribute(k8, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * 8192));
        report("bulk copy 8K x 6, 4 CTA/SM",
               median_ms([&] { k8<<<4 * sms, 32, 6 * 8192>>>(x, o0, (int64_t)(2 * n / 8192)); }, reps), 4.0 * n);
        report(
            "copy nc, 4 in flight, .cs",
            median_ms([&] { probe_copy_unrolled<true><<<grid * 4, 256>>>((const uint4 *)x, (uint4 *)o0, 2 * n / 16); },
                      reps),
            4.0 * n);
        const int n_tiles = (int)(rows / 128 * (cols / 128));
        report(
            "tile-q+t, one tile a CTA",
            median_ms([&] { probe_tile_qt<false><<<n_tiles, 256>>>((const uint16_t *)x, rows, cols, o0, o1); }, reps),
            4.0 * n);
        report("tile-q+t, one a CTA, t evict-last",
               median_ms([&] { probe_tile_qt<false, 1><<<n_tiles, 256>>>((const uint16_t *)x, rows, cols, o0, o1); },
                         reps),
               4.0 * n);
        report("tile-q+t, one a CTA, t evict-first",
               median_ms([&] { probe_tile_qt<false, 2><<<n_tiles, 256>>>((const uint16_t *)x, rows, cols, o0, o1); },
                         reps),
               4.0 * n);
        report("t tile by tile, one a CTA",
               median_ms([&] { probe_tile_qt<true><<<n_tiles, 256>>>((const uint16_t *)x, rows, cols, o0, o1); }, reps),
               4.0 * n);
        if (rows % 512 == 0)
            report(
                "stack-q+t, one stack a CTA",
                median_ms([&] { probe_stack_qt<<<n_tiles / 4, 256, 65536>>>((const uint16_t *)x, rows, cols, o0, o1); },
                          reps),
                4.0 * n);
        report("bulk copy 32K x 6, cs -> cd",
               median_ms([&] { k6<<<sms, 32, 6 * 32768>>>(cs, cd, (int64_t)(2 * n / 32768)); }, reps), 4.0 * n);
        report("cudaMemcpy x -> o0",
               median_ms([&] { PROBE_CHECK(cudaMemcpyAsync(o0, x, 2 * n, cudaMemcpyDeviceToDevice)); }, reps), 4.0 * n);
        report("blocks 16K, 256 thr",
               median_ms([&] { probe_copy_blocks<16384, 256><<<2 * n / 16384, 256>>>((const uint4 *)x, (uint4 *)o0); },
                         reps),
               4.0 * n);
        report("blocks 64K, 256 thr",
               median_ms([&] { probe_copy_blocks<65536, 256><<<2 * n / 65536, 256>>>((const uint4 *)x, (uint4 *)o0); },
                         reps),
               4.0 * n);
        report("blocks 8K, 128 thr",
               median_ms([&] { probe_copy_blocks<8192, 128><<<2 * n / 8192, 128>>>((const uint4 *)x, (uint4 *)o0); },
                         reps),
               4.0 * n);
        report(
            "blocks 64K, 1024 thr",
            median_ms([&] { probe_copy_blocks<65536, 1024><<<2 * n / 65536, 1024>>>((const uint4 *)x, (uint4 *)o0); },
                      reps),
            4.0 * n);
        auto k16 = probe_bulk_copy<16384, 4>;
        PROBE_CHECK(cudaFuncSetAttribute(k16, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 16384));
        report("bulk copy 16K x 4, 3 CTA/SM",
               median_ms([&] { k16<<<3 * sms, 32, 4 * 16384>>>(x, o0, (int64_t)(2 * n / 16384)); }, reps), 4.0 * n);
        const int smem4 = 4 * 32768 + 2 * 16384, smem2 = 2 * 32768 + 2 * 16384;
        auto c4 = probe_bulk_codes<4, false>, t4 = probe_bulk_codes<4, true>;
        auto c2 = probe_bulk_codes<2, false>, t2 = probe_bulk_codes<2, true>;
        for (auto f : {c4, t4})
            PROBE_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem4));
        for (auto f : {c2, t2})
            PROBE_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem2));
        report("bulk two-seq 4 st, 1 CTA/SM",
               median_ms([&] { c4<<<sms, 256, smem4>>>(x, rows, cols, o0, o1); }, reps), 4.0 * n);
        report("bulk two-seq 2 st, 2 CTA/SM",
               median_ms([&] { c2<<<2 * sms, 256, smem2>>>(x, rows, cols, o0, o1); }, reps), 4.0 * n);
        report("bulk q+t128 4 st, 1 CTA/SM",
               median_ms([&] { t4<<<sms, 256, smem4>>>(x, rows, cols, o0, o1); }, reps), 4.0 * n);
        report("bulk q+t128 2 st, 2 CTA/SM",
               median_ms([&] { t2<<<2 * sms, 256, smem2>>>(x, rows, cols, o0, o1); }, reps), 4.0 * n);
    }
    return 0;
}
