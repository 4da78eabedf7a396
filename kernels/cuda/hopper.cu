/* kernels/cuda/hopper.cu: the host side of kvcal's Hopper GEMMs
 * (hopper.cuh): whether the GPU runs their sm_90a code, and their TMA
 * tensor maps (the driver's encoder, fetched once at run time, so that
 * nothing links libcuda). */
#include <cudaTypedefs.h>
#include <string.h>

#include "core/device.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/hopper.cuh"

kvcal_status kvcal_sm90_check(const char *who, int *sms)
{
    int device = 0, major = 0, minor = 0;
    KVCAL_CUDA_TRY(cudaGetDevice(&device));
    KVCAL_CUDA_TRY(
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    KVCAL_CUDA_TRY(
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    KVCAL_CUDA_TRY(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device));
    if (major != 9)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: needs a Hopper GPU (compute capability 9.x), this one is %d.x", who,
            major);
    char code[32];
    kvcal_cuda_code_for_device(kvcal_cuda_build_targets(), major, minor, code,
                               sizeof code);
    if (minor != 0 || (strcmp(code, "sm_90a") && strcmp(code, "compute_90a")))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: needs sm_90a code on this GPU (compute capability %d.%d), "
                          "where this build runs %s; rebuild with sm_90a in CUDA_ARCH",
                          who, major, minor, *code ? code : "none of its code");
    return KVCAL_OK;
}

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t,
                                    void *, const cuuint64_t *, const cuuint64_t *,
                                    const cuuint32_t *, const cuuint32_t *,
                                    CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* A 2D tensor map over (outer, inner) row-major elements of elem_bytes at
 * ptr, boxes of box_outer rows of 128 bytes, the 128-byte swizzle. */
static kvcal_status encode_map(CUtensorMap *map, CUtensorMapDataType type, int elem_bytes,
                               const void *ptr, int64_t outer, int64_t inner,
                               int box_outer, const char *who, const char *what)
{
    static encode_tiled_fn encode = NULL;
    if (!encode) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult found;
        KVCAL_CUDA_TRY(cudaGetDriverEntryPointByVersion(
            "cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !fn)
            return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                              "%s: the driver has no cuTensorMapEncodeTiled", who);
        encode = (encode_tiled_fn)fn;
    }
    const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
    const cuuint64_t strides[1] = {(cuuint64_t)inner * elem_bytes};
    const cuuint32_t box[2] = {(cuuint32_t)(128 / elem_bytes), (cuuint32_t)box_outer},
                     elem_strides[2] = {1, 1};
    const CUresult r =
        encode(map, type, 2, const_cast<void *>(ptr), dims, strides, box, elem_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return kvcal_fail(KVCAL_ERR_CUDA,
                          "%s: cuTensorMapEncodeTiled for %s (%lld x %lld) failed with "
                          "CUresult %d",
                          who, what, (long long)outer, (long long)inner, (int)r);
    return KVCAL_OK;
}

kvcal_status kvcal_sm90_tensor_map(CUtensorMap *map, const void *ptr, int64_t outer,
                                   int64_t inner, int box_outer, const char *who,
                                   const char *what)
{
    static_assert(KVCAL_SM90_BK * 2 == 128, "a bf16 k block is one swizzled row");
    return encode_map(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ptr, outer, inner,
                      box_outer, who, what);
}

kvcal_status kvcal_sm90_tensor_map_e4m3(CUtensorMap *map, const void *ptr, int64_t outer,
                                        int64_t inner, int box_outer, const char *who,
                                        const char *what)
{
    return encode_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, ptr, outer, inner, box_outer,
                      who, what);
}

kvcal_status kvcal_sm90_cluster_config(const void *kernel, int cluster, int threads,
                                       size_t smem, int tiles, int sms,
                                       cudaStream_t stream, cudaLaunchConfig_t *cfg,
                                       cudaLaunchAttribute *attr, const char *who)
{
    KVCAL_CUDA_TRY(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    *cfg = cudaLaunchConfig_t{};
    cfg->gridDim = dim3(sms / cluster * cluster);
    cfg->blockDim = dim3(threads);
    cfg->dynamicSmemBytes = smem;
    cfg->stream = stream;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = cluster;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg->attrs = attr;
    cfg->numAttrs = 1;
    int clusters_max = 0;
    KVCAL_CUDA_TRY(cudaOccupancyMaxActiveClusters(&clusters_max, kernel, cfg));
    if (clusters_max < 1)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: no cluster of %d CTAs fits this GPU", who, cluster);
    cfg->gridDim = dim3((tiles < clusters_max ? tiles : clusters_max) * cluster);
    return KVCAL_OK;
}
