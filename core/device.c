/* core/device.c: how many CUDA devices this process can use. */
#include "kvcal.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

int kvcal_cuda_device_count(void)
{
#ifdef KVCAL_WITH_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
#else
    return 0;
#endif
}
