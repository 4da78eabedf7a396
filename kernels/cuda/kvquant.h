/* kernels/cuda/kvquant.h: internal host-side helpers of the CUDA online KV
 * quantization (kvquant.cu) that the tests call. In a build without CUDA
 * they are defined in kernels/nocuda.c (no device, no fast path). */
#ifndef KVCAL_KERNELS_CUDA_KVQUANT_H
#define KVCAL_KERNELS_CUDA_KVQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (n) = e4m3 bytes of x (n) converted by the device path the kernels
 * use (the hardware cvt.rn.satfinite.e4m3x2.f32); device pointers. Lets
 * tests compare it with core/fp8.h on every input. */
kvcal_status kvcal_fp8_e4m3_encode_launch(const float *x, uint8_t *out, int64_t n,
                                          struct CUstream_st *stream);

/* Batches of at least this many tokens take the fast quantization kernel
 * when their shape allows it (kvcal_kv_fast_path_applies); smaller ones,
 * decode steps among them, the generic kernel. */
#define KVCAL_KV_FAST_MIN_TOKENS 4096

/* 1 when a quantization of batch into cache (static, dynamic or a scaler
 * step, whose two passes then both run on it) runs on the fast kernel: F16
 * or BF16 inputs, head_dim 64, 128 or 256, 16-byte aligned rows and
 * strides, 8-byte aligned caches and block stride, at least
 * KVCAL_KV_FAST_MIN_TOKENS tokens, fewer than 2^31 rows (tokens x kv
 * heads), slots and bytes per cache block; 0 otherwise and for a batch or
 * cache the launches reject (the scales are not looked at). Lets tests
 * check which kernel they reach. */
int kvcal_kv_fast_path_applies(const kvcal_kv_batch *batch, const kvcal_kv_cache *cache);

/* 1 when a dequantization of batch's slots of cache into k_out / v_out runs
 * on the fast kernel: head_dim 64, 128 or 256, 16-byte aligned caches,
 * block stride and outputs, at least KVCAL_KV_FAST_MIN_TOKENS tokens and the
 * 2^31 bounds above; 0 otherwise and for a batch or cache the launches
 * reject (outputs, dtype and scales are not checked). For the tests. */
int kvcal_kv_dequant_fast_path_applies(const kvcal_kv_batch *batch,
                                       const kvcal_kv_cache *cache, const void *k_out,
                                       const void *v_out);

#ifdef __cplusplus
}
#endif

#endif
