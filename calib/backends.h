/* calib/backends.h: the backends this build holds, chosen by device: the
 * only place that knows whether the build has CUDA. */
#ifndef KVCAL_CALIB_BACKENDS_H
#define KVCAL_CALIB_BACKENDS_H

#include "calib/backend.h"
#include "kvcal.h"

typedef enum kvcal_device_kind {
    KVCAL_DEVICE_CPU = 0,
    KVCAL_DEVICE_CUDA = 1
} kvcal_device_kind;

/* The backend of `device` for model (borrowed: it must outlive the
 * backend); *out = NULL on failure. cuda: KVCAL_ERR_NO_DEVICE without a
 * device or in a build without CUDA, KVCAL_ERR_DEVICE_MEMORY naming the
 * bytes and the fix, KVCAL_ERR_UNSUPPORTED as
 * kvcal_backend_cuda_check_model. */
kvcal_status kvcal_backend_create(kvcal_device_kind device, kvcal_model_t *model,
                                  const kvcal_backend_options *opt, kvcal_backend **out);

/* Fills *plan for GPU `device`. Loads cuDNN as the backend does (a CUDA
 * context on the device; the current device is restored). KVCAL_ERR_NO_DEVICE
 * for a device that does not exist or in a build without CUDA. */
kvcal_status kvcal_cuda_plan_device(int device, kvcal_cuda_device_plan *plan);

#endif
