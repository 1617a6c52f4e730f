/*
 * quantize_launch.cuh - launching the quantize tile kernel
 * (quantize_tiles_kernel.cuh) on a context's stream: a CTA per tile, the
 * shared-memory size set once per device, and the context's options for
 * programmatic dependent launch and the L2 warm-up.
 */
#pragma once

#include <atomic>

#include "cuda/quantize_tiles_kernel.cuh"
#include "cuda/tensor_map.cuh"

namespace bfp8_quant {

/* A launch of a CTA per tile (the kernels walk what is past INT32_MAX) on ctx's stream, a programmatic
 * dependent launch when the context's BFP8_OPTION_QUANTIZE_PDL is on (its attribute in *pdl, room for one). */
static inline cudaLaunchConfig_t tile_launch_config(const bfp8_context *ctx, int64_t num_tiles, int smem,
                                                    cudaLaunchAttribute *pdl) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((unsigned)(num_tiles < INT32_MAX ? num_tiles : INT32_MAX));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = (size_t)smem;
    config.stream = bfp8_stream_of(ctx);
    config.attrs = pdl;
    if (ctx->quantize_pdl) add_programmatic_dependent_launch(&config);
    return config;
}

/* Launch quantize_tiles_kernel on ctx's stream, a CTA per tile. The shared
 * memory attribute is set (and the kernel's fit checked) once per device.
 * The context's options (bfp8_context_set_option), both on by default:
 *   BFP8_OPTION_QUANTIZE_PDL: a programmatic dependent launch (the kernel
 *     waits for the previous grid itself, griddep_wait, so its CTAs start
 *     while that grid drains): 2-3 us less a call in chains of calls (H200);
 *   BFP8_OPTION_QUANTIZE_WARM_L2: the first resident CTAs ask for kWarmRows
 *     rows of their tile in L2 before that wait: about a point of the copy
 *     bandwidth on chained calls (bf16 dual 16384x4096: 89.5-89.7 -> 90.5-90.8%), 0.3-0.9
 *     points slower with nothing to overlap (calls with an event between). */
template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned>
bfp8_status launch_quantize_tiles(bfp8_context *ctx, const tile_args &args, const char *fn) {
    auto kernel = quantize_tiles_kernel<In, kBlock, kQ, kT, kAligned>;
    const int smem = kernel_shape<In>::kSmemBytes;
    constexpr int kCachedDevices = 64;
    static std::atomic<int> resident[kCachedDevices]; /* CTAs per SM, once the attribute is set (0: not yet) */
    BFP8_CUDA_TRY(cudaSetDevice(ctx->device));
    const bool cacheable = ctx->device >= 0 && ctx->device < kCachedDevices;
    int per_sm = cacheable ? resident[ctx->device].load(std::memory_order_acquire) : 0;
    if (per_sm == 0) {
        BFP8_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        BFP8_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
        if (per_sm < 1)
            return bfp8_fail(BFP8_ERR_CUDA, "%s: the quantize kernel does not fit on the device", fn);
        if (cacheable) resident[ctx->device].store(per_sm, std::memory_order_release);
    }
    tile_args warmed = args; /* the CTAs of the first wave warm L2 */
    warmed.warm_ctas =
        ctx->quantize_warm_l2 ? (int64_t)per_sm * bfp8_cuda_state_of(ctx)->num_sms : 0;
    CUtensorMap tmap_x = {}; /* TMA staging: x in boxes of one tile */
    if constexpr (kernel_shape<In>::kTmaLoads && kAligned)
        BFP8_TRY(bfp8_cuda_tensor_map_2d(&tmap_x, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.x, (uint64_t)args.cols,
                                         (uint64_t)args.rows, (uint64_t)args.x_ld * sizeof(In), kTile, kTile,
                                         CU_TENSOR_MAP_SWIZZLE_NONE, "x"));
    cudaLaunchAttribute pdl;
    const cudaLaunchConfig_t config = tile_launch_config(ctx, args.num_tiles, smem, &pdl);
    BFP8_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, warmed, tmap_x));
    BFP8_CUDA_CHECK_LAUNCH();
    return BFP8_OK;
}

} /* namespace bfp8_quant */
