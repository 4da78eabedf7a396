/* kernels/cuda/kvquant.h: internal host-side helpers of the CUDA online KV
 * quantization (kvquant.cu) that the rest of the library and the tests call.
 * In a build without CUDA they are defined in kernels/cpu/kvquant_ref.c and
 * return KVCAL_ERR_NO_DEVICE. */
#ifndef KVCAL_KERNELS_CUDA_KVQUANT_H
#define KVCAL_KERNELS_CUDA_KVQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocates `bytes` of zeroed device memory on the current device. */
kvcal_status kvcal_kv_device_alloc(size_t bytes, void **out);

/* Frees device memory from kvcal_kv_device_alloc; NULL is a no-op. */
void kvcal_kv_device_free(void *p);

/* Copies `bytes` from device to host after the work queued on `stream`. */
kvcal_status kvcal_kv_device_read(void *dst, const void *src, size_t bytes,
                                  struct CUstream_st *stream);

/* out (n) = e4m3 bytes of x (n) converted by the device path the kernels
 * use (the hardware cvt.rn.satfinite.e4m3x2.f32); device pointers. Lets
 * tests compare it with core/fp8.h on every input. */
kvcal_status kvcal_fp8_e4m3_encode_launch(const float *x, uint8_t *out, int64_t n,
                                          struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif
