/* kernels/cuda/cp_async.cuh: asynchronous 16-byte copies global -> shared
 * (sm_80 and later), shared by the kernels that stage tiles with them
 * (attention.cu, moe.cu). Device code only. */
#ifndef KVCAL_KERNELS_CUDA_CP_ASYNC_CUH
#define KVCAL_KERNELS_CUDA_CP_ASYNC_CUH

#include <stdint.h>

static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, zero-filled when !valid (src is not read then). */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(n));
}
static __device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> static __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#endif
