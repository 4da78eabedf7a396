/* kernels/nocuda.c: what a build without CUDA has in place of the device
 * code: every entry point of kernels/cuda that the library exports or the
 * CPU side calls, returning KVCAL_ERR_NO_DEVICE (or "no fast path"). The
 * only place such stubs live; compiled only when CUDA=0. */
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/cuda/kv_observe.h"
#include "kernels/cuda/kvquant.h"
#include "kernels/kv_device_memory.h"
#include "kvcal.h"

static kvcal_status no_cuda(const char *fn)
{
    return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                      "%s: this libkvcal was built without CUDA: use the _ref function "
                      "or rebuild with nvcc",
                      fn);
}

kvcal_status kvcal_kv_device_alloc(size_t bytes, void **out)
{
    (void)bytes;
    *out = NULL;
    return no_cuda("on_device = 1");
}

void kvcal_kv_device_free(void *p)
{
    (void)p;
}

kvcal_status kvcal_kv_device_read(void *dst, const void *src, size_t bytes,
                                  struct CUstream_st *stream)
{
    (void)dst, (void)src, (void)bytes, (void)stream;
    return no_cuda("kvcal_kv_scaler_read");
}

kvcal_status kvcal_kv_device_write(void *dst, const void *src, size_t bytes,
                                   struct CUstream_st *stream)
{
    (void)dst, (void)src, (void)bytes, (void)stream;
    return no_cuda("a device calibrator");
}

kvcal_status kvcal_kv_observe_launch(const kvcal_kv_batch *batch, int layer,
                                     const kvcal_kv_stats_device *s,
                                     struct CUstream_st *stream)
{
    (void)batch, (void)layer, (void)s, (void)stream;
    return no_cuda("kvcal_calibrator_observe_launch");
}

kvcal_status kvcal_kv_observe_end_batch_launch(const kvcal_kv_stats_device *s,
                                               double decay, struct CUstream_st *stream)
{
    (void)s, (void)decay, (void)stream;
    return no_cuda("kvcal_calibrator_end_step");
}

int kvcal_kv_fast_path_applies(const kvcal_kv_batch *batch, const kvcal_kv_cache *cache)
{
    (void)batch, (void)cache;
    return 0;
}

int kvcal_kv_dequant_fast_path_applies(const kvcal_kv_batch *batch,
                                       const kvcal_kv_cache *cache, const void *k_out,
                                       const void *v_out)
{
    (void)batch, (void)cache, (void)k_out, (void)v_out;
    return 0;
}

kvcal_status kvcal_fp8_e4m3_encode_launch(const float *x, uint8_t *out, int64_t n,
                                          struct CUstream_st *stream)
{
    (void)x, (void)out, (void)n, (void)stream;
    return no_cuda("kvcal_fp8_e4m3_encode_launch");
}

kvcal_status kvcal_kv_quantize_static_launch(const kvcal_kv_batch *batch,
                                             const kvcal_kv_cache *cache,
                                             kvcal_granularity granularity,
                                             const float *k_scale, const float *v_scale,
                                             struct CUstream_st *stream)
{
    (void)batch, (void)cache, (void)granularity, (void)k_scale, (void)v_scale,
        (void)stream;
    return no_cuda("kvcal_kv_quantize_static_launch");
}

kvcal_status kvcal_kv_quantize_dynamic_launch(const kvcal_kv_batch *batch,
                                              const kvcal_kv_cache *cache,
                                              struct CUstream_st *stream)
{
    (void)batch, (void)cache, (void)stream;
    return no_cuda("kvcal_kv_quantize_dynamic_launch");
}

kvcal_status kvcal_kv_scaler_quantize_launch(kvcal_kv_scaler_t *scaler,
                                             const kvcal_kv_batch *batch,
                                             const kvcal_kv_cache *cache,
                                             struct CUstream_st *stream)
{
    (void)scaler, (void)batch, (void)cache, (void)stream;
    return no_cuda("kvcal_kv_scaler_quantize_launch");
}

kvcal_status kvcal_kv_dequantize_launch(const kvcal_kv_batch *batch,
                                        const kvcal_kv_cache *cache,
                                        kvcal_granularity granularity,
                                        const float *k_scale, const float *v_scale,
                                        void *k_out, void *v_out, kvcal_dtype out_dtype,
                                        struct CUstream_st *stream)
{
    (void)batch, (void)cache, (void)granularity, (void)k_scale, (void)v_scale;
    (void)k_out, (void)v_out, (void)out_dtype, (void)stream;
    return no_cuda("kvcal_kv_dequantize_launch");
}

kvcal_status kvcal_kv_quantize_fmt_launch(const kvcal_kv_batch *batch,
                                          const kvcal_kv_cache *cache,
                                          const kvcal_kv_qparams *params,
                                          struct CUstream_st *stream)
{
    (void)batch, (void)cache, (void)params, (void)stream;
    return no_cuda("kvcal_kv_quantize_fmt_launch");
}

kvcal_status kvcal_kv_dequantize_fmt_launch(const kvcal_kv_batch *batch,
                                            const kvcal_kv_cache *cache,
                                            const kvcal_kv_qparams *params, void *k_out,
                                            void *v_out, kvcal_dtype out_dtype,
                                            struct CUstream_st *stream)
{
    (void)batch, (void)cache, (void)params, (void)k_out, (void)v_out, (void)out_dtype,
        (void)stream;
    return no_cuda("kvcal_kv_dequantize_fmt_launch");
}
