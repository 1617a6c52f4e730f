/*
 * tensor_map.cuh - TMA tensor maps (CUtensorMap) for 2-D row-major
 * matrices, made through the driver's cuTensorMapEncodeTiled; shared by the
 * GEMMs and the quantizers.
 */
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "cuda/cuda_common.cuh"

/* The driver's cuTensorMapEncodeTiled (looked up once), or NULL where the driver lacks it: for maps of
 * other ranks than below (attention_host.cu's 4-D ones). */
PFN_cuTensorMapEncodeTiled_v12000 bfp8_cuda_tensor_map_encoder();

/* A 2-D row-major tensor: `outer` rows of `inner` elements, rows
 * `stride_bytes` apart, read or written in boxes of box_outer rows x
 * box_inner elements; elements outside the tensor read as zero and are never
 * written. `what` names the tensor in the error message. */
bfp8_status bfp8_cuda_tensor_map_2d(CUtensorMap *map, CUtensorMapDataType type, const void *base, uint64_t inner,
                                    uint64_t outer, uint64_t stride_bytes, uint32_t box_inner, uint32_t box_outer,
                                    CUtensorMapSwizzle swizzle, const char *what);
/* The same for `depth` such matrices, depth_stride_bytes apart (boxes one deep). */
bfp8_status bfp8_cuda_tensor_map_3d(CUtensorMap *map, CUtensorMapDataType type, const void *base, uint64_t inner,
                                    uint64_t outer, uint64_t depth, uint64_t stride_bytes,
                                    uint64_t depth_stride_bytes, uint32_t box_inner, uint32_t box_outer,
                                    CUtensorMapSwizzle swizzle, const char *what);
