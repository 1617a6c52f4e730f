/*
 * gemm_fp8_workspace.cu - the device memory a CUDA context keeps for the
 * FP8 GEMMs, made on first use and grown when a call needs more: the
 * exchange of a split last wave, the scale operand of 1D1D 256 x 112 tiles,
 * and the group tables of the grouped GEMMs (with the small kernels that
 * write the last two).
 */
#include <stdlib.h>

#include "cuda/gemm_fp8_host.h"
#include "cuda/tensor_map.cuh"

namespace bfp8_gemm {

namespace {

/* Whether work is being captured into a CUDA graph on ctx's stream, where a
 * cudaMalloc would break the capture (an error counts as yes). */
bool capturing(const bfp8_context *ctx) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(bfp8_stream_of(ctx), &capture) != cudaSuccess ||
        capture != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        return true;
    }
    return false;
}

} /* namespace */

/* ------------------------------------------------------------------------ */
/* Splitting the last wave                                                   */

/* room for a BM x BN tile, BM * BN <= 256 * 128 */
constexpr int SPLIT_MAX_TILE_FLOATS = 256 * 128;

SplitWorkspace split_workspace(const bfp8_context *ctx) {
    bfp8_cuda_state *st = bfp8_cuda_state_of(ctx);
    const size_t counter_bytes = ((size_t)split_workspace_counters(ctx) * sizeof(unsigned) + 255) / 256 * 256;
    if (!st->gemm_split_workspace) {
        /* (inside a capture, the captured GEMM runs unsplit instead) */
        if (capturing(ctx)) return SplitWorkspace{nullptr, nullptr};
        const size_t bytes = counter_bytes + (size_t)st->num_sms * SPLIT_MAX_TILE_FLOATS * sizeof(float);
        void *w = nullptr;
        if (cudaMalloc(&w, bytes) != cudaSuccess) {
            cudaGetLastError();
            return SplitWorkspace{nullptr, nullptr};
        }
        if (cudaMemsetAsync(w, 0, counter_bytes, bfp8_stream_of(ctx)) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(w);
            return SplitWorkspace{nullptr, nullptr};
        }
        st->gemm_split_workspace = w;
    }
    uint8_t *w = static_cast<uint8_t *>(st->gemm_split_workspace);
    return SplitWorkspace{reinterpret_cast<unsigned *>(w), reinterpret_cast<float *>(w + counter_bytes)};
}

int split_workspace_counters(const bfp8_context *ctx) { return bfp8_cuda_state_of(ctx)->num_sms * 3; }

int64_t split_workspace_floats(const bfp8_context *ctx) {
    return (int64_t)bfp8_cuda_state_of(ctx)->num_sms * SPLIT_MAX_TILE_FLOATS;
}

/* ------------------------------------------------------------------------ */
/* The scale operand of 1D1D 256 x 112 tiles (SharedLayout::SCALE_MMA)       */

/* B's 1x128 scales (num_k_blocks rows of n floats, scale_ld apart) as the
 * B operand of the kernel's scale wgmma: for column c of k-block kb, the
 * eight tf32 words (hi, lo, 0, 0, hi, 0, 0, 0) at (kb * n + c) * 32 bytes,
 * hi the upper 19 bits of the scale and lo the rest (exact in fp32). */
constexpr int SCALE_OPERAND_THREADS = 256;
constexpr int64_t SCALE_OPERAND_ENTRY_BYTES = 32;
__global__ void __launch_bounds__(SCALE_OPERAND_THREADS)
    scale_operand_kernel(const float *scales, int64_t scale_ld, int n, int num_k_blocks, uint4 *operand) {
    const int c = blockIdx.x * SCALE_OPERAND_THREADS + threadIdx.x;
    if (c >= n) return;
    for (int kb = blockIdx.y; kb < num_k_blocks; kb += gridDim.y) {
        const float s = __ldg(scales + (int64_t)kb * scale_ld + c);
        const uint32_t hi = __float_as_uint(s) & 0xffffe000u;
        const uint32_t lo = __float_as_uint(s - __uint_as_float(hi));
        uint4 *entry = operand + 2 * ((int64_t)kb * n + c);
        entry[0] = make_uint4(hi, lo, 0u, 0u);
        entry[1] = make_uint4(hi, 0u, 0u, 0u);
    }
}

/* The context's device buffer for the scale operand, at least `bytes`; NULL
 * where it cannot be had (inside a CUDA graph capture when it must grow, or
 * out of memory): the GEMM then runs another tile. It grows after the
 * kernels reading it (cudaFree synchronizes the device). */
static void *scale_operand_space(const bfp8_context *ctx, size_t bytes) {
    bfp8_cuda_state *st = bfp8_cuda_state_of(ctx);
    if (bytes <= st->gemm_scale_operand_bytes) return st->gemm_scale_operand;
    if (capturing(ctx)) return nullptr;
    if (st->gemm_scale_operand) cudaFree(st->gemm_scale_operand);
    st->gemm_scale_operand = nullptr;
    st->gemm_scale_operand_bytes = 0;
    const size_t want = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    if (cudaMalloc(&st->gemm_scale_operand, want) != cudaSuccess) {
        cudaGetLastError();
        st->gemm_scale_operand = nullptr;
        return nullptr;
    }
    st->gemm_scale_operand_bytes = want;
    return st->gemm_scale_operand;
}

static size_t scale_operand_bytes(int n, int num_k_blocks) {
    return (size_t)num_k_blocks * (size_t)n * SCALE_OPERAND_ENTRY_BYTES;
}

bool scale_operand_available(const bfp8_context *ctx, int n, int num_k_blocks) {
    return scale_operand_space(ctx, scale_operand_bytes(n, num_k_blocks)) != nullptr;
}

/* num_k_blocks matrices of n rows x 8 words, read in boxes of 8 words x bn
 * rows, 32-byte swizzle (the layout the kernel's wgmma descriptor names). */
bfp8_status make_scale_operand(const bfp8_context *ctx, const bfp8_qmatrix *b, int n, int num_k_blocks, int bn,
                               CUtensorMap *map) {
    void *space = scale_operand_space(ctx, scale_operand_bytes(n, num_k_blocks));
    if (!space) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "bfp8_gemm_1d1d: no device memory for the scale operand");
    const dim3 grid((unsigned)bfp8_ceil_div(n, SCALE_OPERAND_THREADS),
                    (unsigned)(num_k_blocks < 65535 ? num_k_blocks : 65535));
    scale_operand_kernel<<<grid, SCALE_OPERAND_THREADS, 0, bfp8_stream_of(ctx)>>>(
        b->scales, b->scale_ld, n, num_k_blocks, static_cast<uint4 *>(space));
    BFP8_CUDA_CHECK_LAUNCH();
    const uint64_t row_bytes = SCALE_OPERAND_ENTRY_BYTES;
    return bfp8_cuda_tensor_map_3d(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, space, 8, (uint64_t)n,
                                   (uint64_t)num_k_blocks, row_bytes, row_bytes * (uint64_t)n, 8, (uint32_t)bn,
                                   CU_TENSOR_MAP_SWIZZLE_32B, "b scale operand");
}

/* ------------------------------------------------------------------------ */
/* Group tables of the grouped GEMMs (Params::group_table)                   */

/* The context's device buffer for the table, at least `count` ints. It grows
 * (after a device synchronization: cudaFree) when a call needs more; what
 * writes it runs on the context's stream, after the kernels that still read
 * the previous table. */
static bfp8_status group_table_space(const bfp8_context *ctx, size_t count, int **device) {
    bfp8_cuda_state *st = bfp8_cuda_state_of(ctx);
    const size_t bytes = count * sizeof(int);
    if (bytes > st->gemm_group_table_bytes) {
        if (st->gemm_group_table) {
            BFP8_CUDA_TRY(cudaFree(st->gemm_group_table));
            st->gemm_group_table = nullptr;
            st->gemm_group_table_bytes = 0;
        }
        const size_t want = bytes < 4096 ? 4096 : bytes * 2;
        BFP8_CUDA_TRY(cudaMalloc(&st->gemm_group_table, want));
        st->gemm_group_table_bytes = want;
    }
    *device = static_cast<int *>(st->gemm_group_table);
    return BFP8_OK;
}

/* The table made on the host, copied (one copy on the context's stream). */
static bfp8_status upload_group_table(const bfp8_context *ctx, const int *table, size_t count, const int **device) {
    int *space = nullptr;
    BFP8_TRY(group_table_space(ctx, count, &space));
    BFP8_CUDA_TRY(cudaMemcpyAsync(space, table, count * sizeof(int), cudaMemcpyHostToDevice, bfp8_stream_of(ctx)));
    *device = space;
    return BFP8_OK;
}

/* The table made on the GPU from offsets in device memory, clamped as
 * bfp8_clamp_group_offsets does (one CTA; the clamped offsets, in units of
 * 128 tokens, in shared memory). m_table: the grouped 1D2D table of
 * 128-row tiles (count first, then first row, group, group end per tile);
 * else the grouped 1D1D one (each group's first k-block, and the end). */
constexpr int GROUP_TABLE_THREADS = 256;
constexpr int DEVICE_OFFSETS_MAX_GROUPS = 8192; /* 32 KB of shared memory */
__global__ void __launch_bounds__(GROUP_TABLE_THREADS)
    build_group_table(const int64_t *offsets, int num_groups, int64_t tokens, bool m_table, int *table) {
    __shared__ int blocks[DEVICE_OFFSETS_MAX_GROUPS + 1]; /* clamped offset / 128 */
    if (threadIdx.x == 0) {
        const int64_t last = tokens / 128;
        int64_t prev = 0;
        blocks[0] = 0;
        for (int g = 0; g < num_groups; ++g) {
            int64_t v = offsets[g + 1] / 128;
            v = v < prev ? prev : v;
            prev = v > last ? last : v;
            blocks[g + 1] = (int)prev;
        }
    }
    __syncthreads();
    if (!m_table) {
        for (int g = threadIdx.x; g <= num_groups; g += blockDim.x) table[g] = blocks[g];
        return;
    }
    const int tiles = blocks[num_groups];
    if (threadIdx.x == 0) table[0] = tiles;
    for (int t = threadIdx.x; t < tiles; t += blockDim.x) {
        int lo = 0, hi = num_groups - 1; /* the group g with blocks[g] <= t < blocks[g + 1] */
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (blocks[mid] <= t) lo = mid;
            else hi = mid - 1;
        }
        int *e = table + 1 + 3 * t;
        e[0] = 128 * t;
        e[1] = lo;
        e[2] = 128 * blocks[lo + 1];
    }
}

bfp8_status make_group_table(const bfp8_context *ctx, const int64_t *offsets, int num_groups, int64_t tokens,
                             bool on_device, bool m_table, int bm, const int **device) {
    if (on_device) {
        if (num_groups > DEVICE_OFFSETS_MAX_GROUPS)
            return bfp8_fail(BFP8_ERR_UNSUPPORTED, "grouped GEMM: at most %d groups with offsets in device memory",
                             DEVICE_OFFSETS_MAX_GROUPS);
        int *space = nullptr;
        BFP8_TRY(group_table_space(ctx, m_table ? 1 + 3 * (size_t)(tokens / 128) : (size_t)num_groups + 1, &space));
        build_group_table<<<1, GROUP_TABLE_THREADS, 0, bfp8_stream_of(ctx)>>>(offsets, num_groups, tokens, m_table,
                                                                              space);
        BFP8_CUDA_CHECK_LAUNCH();
        *device = space;
        return BFP8_OK;
    }
    const int64_t tiles = m_table ? grouped_m_tiles(offsets, num_groups, bm) : 0;
    const size_t count = m_table ? 1 + 3 * (size_t)tiles : (size_t)num_groups + 1;
    int *table = static_cast<int *>(malloc(count * sizeof(int)));
    if (!table) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "grouped GEMM: group table");
    if (m_table) {
        table[0] = (int)tiles;
        int *entry = table + 1;
        for (int g = 0; g < num_groups; ++g)
            for (int64_t r = offsets[g]; r < offsets[g + 1]; r += bm, entry += 3) {
                entry[0] = (int)r;
                entry[1] = g;
                entry[2] = (int)offsets[g + 1];
            }
    } else {
        for (int g = 0; g <= num_groups; ++g) table[g] = (int)(offsets[g] / 128);
    }
    const bfp8_status st = upload_group_table(ctx, table, count, device);
    free(table);
    return st;
}

} /* namespace bfp8_gemm */
