/* kernels/kv_device_memory.h: device memory for the library's own objects
 * (a running scaler kept on the device, include/kvcal_quant.h; a
 * calibrator's statistics, include/kvcal_calibrate.h), which their CPU
 * sides (kernels/cpu/kvquant_ref.c, observers/calibrator.c) create, read
 * and write. Defined in kernels/cuda/kvquant.cu; in a build without CUDA in
 * kernels/nocuda.c, where they return KVCAL_ERR_NO_DEVICE. */
#ifndef KVCAL_KERNELS_KV_DEVICE_MEMORY_H
#define KVCAL_KERNELS_KV_DEVICE_MEMORY_H

#include <stddef.h>

#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocates `bytes` of device memory on the current device, zeroed when it
 * returns (whichever stream uses it next). */
kvcal_status kvcal_kv_device_alloc(size_t bytes, void **out);

/* Frees device memory from kvcal_kv_device_alloc; NULL is a no-op. */
void kvcal_kv_device_free(void *p);

/* Copies `bytes` from device to host after the work queued on `stream`. */
kvcal_status kvcal_kv_device_read(void *dst, const void *src, size_t bytes,
                                  struct CUstream_st *stream);

/* Copies `bytes` from host to device in the order of `stream`, and waits
 * for the copy (the host buffer is free to change once it returns). */
kvcal_status kvcal_kv_device_write(void *dst, const void *src, size_t bytes,
                                   struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif
