/* calib/backends.c: the backends a build holds (see backends.h). */
#include "calib/backends.h"

#include <string.h>

#include "core/status.h"

kvcal_status kvcal_backend_create(kvcal_device_kind device, kvcal_model_t *model,
                                  const kvcal_backend_options *opt, kvcal_backend **out)
{
    *out = NULL;
    if (device == KVCAL_DEVICE_CPU)
        return kvcal_backend_cpu_create(model, opt, out);
#ifdef KVCAL_WITH_CUDA
    return kvcal_backend_cuda_create(model, opt, out);
#else
    return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                      "--device cuda: this kvcal was built without CUDA (rebuild where "
                      "nvcc is installed); use --device cpu");
#endif
}

kvcal_status kvcal_cuda_plan_device(int device, kvcal_cuda_device_plan *plan)
{
    memset(plan, 0, sizeof *plan);
#ifdef KVCAL_WITH_CUDA
    return kvcal_backend_cuda_plan_device(device, plan);
#else
    return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                      "CUDA device %d: this kvcal was built without CUDA", device);
#endif
}
