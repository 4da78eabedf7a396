/* kernels/cuda/cuda_util.h: error checking shared by the CUDA kernels
 * (C++ / CUDA translation units only). Every CUDA runtime call and every
 * launch is checked; a failure records one line (file:line, the call, CUDA's
 * message) through kvcal_fail() and returns a kvcal_status up. */
#ifndef KVCAL_KERNELS_CUDA_CUDA_UTIL_H
#define KVCAL_KERNELS_CUDA_CUDA_UTIL_H

#include <cuda_runtime_api.h>

extern "C" {
#include "core/status.h"
}

/* Out of memory is KVCAL_ERR_DEVICE_MEMORY, anything else KVCAL_ERR_CUDA. */
static inline kvcal_status kvcal_cuda_status(cudaError_t err)
{
    return err == cudaErrorMemoryAllocation ? KVCAL_ERR_DEVICE_MEMORY : KVCAL_ERR_CUDA;
}

/* Returns from the enclosing function (returning kvcal_status) on failure. */
#define KVCAL_CUDA_TRY(call)                                                             \
    do {                                                                                 \
        cudaError_t kvcal_err_ = (call);                                                 \
        if (kvcal_err_ != cudaSuccess)                                                   \
            return kvcal_fail(kvcal_cuda_status(kvcal_err_), "%s:%d: %s: %s", __FILE__,  \
                              __LINE__, #call, cudaGetErrorString(kvcal_err_));          \
    } while (0)

/* After a <<<...>>> launch: reports a bad configuration or an earlier
 * asynchronous fault, naming the kernel. */
#define KVCAL_CUDA_CHECK_LAUNCH(name)                                                    \
    do {                                                                                 \
        cudaError_t kvcal_err_ = cudaGetLastError();                                     \
        if (kvcal_err_ != cudaSuccess)                                                   \
            return kvcal_fail(kvcal_cuda_status(kvcal_err_), "%s:%d: launching %s: %s",  \
                              __FILE__, __LINE__, name, cudaGetErrorString(kvcal_err_)); \
    } while (0)

#endif
