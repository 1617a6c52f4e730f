/*
 * tensor_map.cu - see tensor_map.cuh.
 */
#include <cudaTypedefs.h>

#include "cuda/tensor_map.cuh"

PFN_cuTensorMapEncodeTiled_v12000 bfp8_cuda_tensor_map_encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (!fn) {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
    return fn;
}

/* A rank-2 or rank-3 map (a kernel must address it with as many coordinates). */
static bfp8_status tensor_map_tiled(CUtensorMap *map, cuuint32_t rank, CUtensorMapDataType type, const void *base,
                                    uint64_t inner, uint64_t outer, uint64_t depth, uint64_t stride_bytes,
                                    uint64_t depth_stride_bytes, uint32_t box_inner, uint32_t box_outer,
                                    CUtensorMapSwizzle swizzle, const char *what) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = bfp8_cuda_tensor_map_encoder();
    if (!encode) return bfp8_fail(BFP8_ERR_CUDA, "cuTensorMapEncodeTiled is not available from the driver");
    const cuuint64_t dims[3] = {inner, outer, depth};
    const cuuint64_t strides[2] = {stride_bytes, depth_stride_bytes};
    const cuuint32_t box[3] = {box_inner, box_outer, 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    CUresult r = encode(map, type, rank, const_cast<void *>(base), dims, strides, box, elem_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return bfp8_fail(BFP8_ERR_CUDA, "cuTensorMapEncodeTiled(%s: %llu x %llu x %llu, strides %llu, %llu) failed: %d",
                         what, (unsigned long long)depth, (unsigned long long)outer, (unsigned long long)inner,
                         (unsigned long long)stride_bytes, (unsigned long long)depth_stride_bytes, (int)r);
    return BFP8_OK;
}

bfp8_status bfp8_cuda_tensor_map_3d(CUtensorMap *map, CUtensorMapDataType type, const void *base, uint64_t inner,
                                    uint64_t outer, uint64_t depth, uint64_t stride_bytes,
                                    uint64_t depth_stride_bytes, uint32_t box_inner, uint32_t box_outer,
                                    CUtensorMapSwizzle swizzle, const char *what) {
    return tensor_map_tiled(map, 3, type, base, inner, outer, depth, stride_bytes, depth_stride_bytes, box_inner,
                            box_outer, swizzle, what);
}

bfp8_status bfp8_cuda_tensor_map_2d(CUtensorMap *map, CUtensorMapDataType type, const void *base, uint64_t inner,
                                    uint64_t outer, uint64_t stride_bytes, uint32_t box_inner, uint32_t box_outer,
                                    CUtensorMapSwizzle swizzle, const char *what) {
    return tensor_map_tiled(map, 2, type, base, inner, outer, 1, stride_bytes, stride_bytes * outer, box_inner,
                            box_outer, swizzle, what);
}
