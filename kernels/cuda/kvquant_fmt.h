/* kernels/cuda/kvquant_fmt.h: internal host-side helpers of the CUDA
 * kernels of the cache formats beyond e4m3 (kvquant_fmt.cu) that the tests
 * and bench/kvquant call. CUDA builds only. */
#ifndef KVCAL_KERNELS_CUDA_KVQUANT_FMT_H
#define KVCAL_KERNELS_CUDA_KVQUANT_FMT_H

#include <stdint.h>

#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (n) = what the kernels store for each value of x (n) in `format`
 * under unit parameters, converted by the device code they use (the
 * conversion instructions of the GPU at hand, or the fp32 arithmetic where
 * it has none): FP8_E5M2 the byte; INT8 the byte of scale 1; INT8_ASYM the
 * byte of scale 1 and zero point 0; NVFP4 the e2m1 nibble of a block of
 * decode scale 1, in the low 4 bits; `rounding` as the int8 formats take
 * it. Device pointers. Lets tests compare them with core/kvformat.h on every
 * input. */
kvcal_status kvcal_kvfmt_encode_launch(kvcal_kv_format format, kvcal_kv_rounding rounding,
                                       const float *x, uint8_t *out, int64_t n,
                                       struct CUstream_st *stream);

/* 1 when kvcal_kv_quantize_fmt_launch(batch, cache, params) runs on the
 * fast kernel: a format other than e4m3, F16 or BF16 inputs, head_dim 64,
 * 128 or 256, 16-byte aligned rows and strides, caches and block stride
 * aligned to 8 bytes, at least KVCAL_KV_FAST_MIN_TOKENS tokens, fewer than
 * 2^31 rows (tokens x kv heads), slots and bytes per cache block; 0
 * otherwise and for arguments the launch rejects. For the tests. */
int kvcal_kv_quantize_fmt_fast_applies(const kvcal_kv_batch *batch,
                                       const kvcal_kv_cache *cache,
                                       const kvcal_kv_qparams *params);

/* 1 when kvcal_kv_dequantize_fmt_launch of these arguments runs on the fast
 * kernel: as above (any output dtype), with 16-byte aligned outputs. */
int kvcal_kv_dequantize_fmt_fast_applies(const kvcal_kv_batch *batch,
                                         const kvcal_kv_cache *cache,
                                         const kvcal_kv_qparams *params,
                                         const void *k_out, const void *v_out);

/* 1 when that fast dequantization into out_dtype runs on NVFP4's staged
 * kernel: an NVFP4 cache into F16 or BF16, caches and block stride aligned
 * to 16 bytes. For the tests. */
int kvcal_kv_dequantize_fmt_staged_applies(const kvcal_kv_batch *batch,
                                           const kvcal_kv_cache *cache,
                                           const kvcal_kv_qparams *params,
                                           const void *k_out, const void *v_out,
                                           kvcal_dtype out_dtype);

#ifdef __cplusplus
}
#endif

#endif
