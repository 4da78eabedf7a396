/* kvcal_quant.h: online KV quantization into a paged cache: FP8 (e4m3fn)
 * with static, dynamic or running scales, and the other cache formats
 * engines offer (e5m2, int8, int8 with zero points, NVFP4)
 * (included by kvcal.h, or alone; the conventions stated in kvcal.h apply).
 *
 * Every operation exists twice with identical semantics, bit for bit:
 *   kvcal_kv_<op>_ref     CPU reference; every pointer is a host pointer;
 *   kvcal_kv_<op>_launch  CUDA; every data pointer is a device pointer and
 *                         the work is enqueued on the caller's stream
 *                         (NULL = legacy default stream). Returns once
 *                         enqueued; the caller synchronizes. A launch
 *                         checks its arguments (never the device data) and
 *                         returns KVCAL_ERR_NO_DEVICE in a build without
 *                         CUDA.
 *
 * Numbers (DESIGN.md, "Scale semantics"):
 * - stored byte q = e4m3(x * (1 / scale)): the reciprocal is taken once per
 *   scale in fp32, the product rounded to fp32, then to e4m3 by round to
 *   nearest even, saturating at +-448;
 * - dequantized value = e4m3_value(q) * scale;
 * - NaN policy: a NaN input is stored as the e4m3 NaN 0x7f (its sign and
 *   payload dropped) so that it stays visible to attention; +-Inf and any
 *   |x * (1/scale)| >= 448 saturate to +-448; -0 is stored as 0x80.
 *   Scales computed by the library (dynamic and running modes) ignore NaN
 *   and +-Inf inputs: one bad value never poisons the scale of its head.
 * - computed scales follow the one scale rule max(absmax / 448,
 *   1 / (448 * 512)) (core/scale_rule.h).
 *
 * Slots: slot_mapping[t] = block * block_size + offset places token t in the
 * cache. A negative slot is padding and is skipped; a slot >= num_blocks *
 * block_size is skipped too (never written out of bounds). Nothing else of
 * the cache is touched.
 */
#ifndef KVCAL_QUANT_H
#define KVCAL_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kvcal_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A CUDA stream (cudaStream_t is struct CUstream_st *): callers pass their
 * cudaStream_t unchanged; this header needs no CUDA header. */
struct CUstream_st;

/* Element types, one enum for the whole library. K/V inputs and dequantized
 * outputs are F32, F16 or BF16; the others name the safetensors dtypes
 * (io/checkpoint/safetensors.h). Values only grow at the end. */
typedef enum kvcal_dtype {
    KVCAL_DTYPE_F32 = 0,
    KVCAL_DTYPE_F16 = 1,
    KVCAL_DTYPE_BF16 = 2,
    KVCAL_DTYPE_F8_E4M3 = 3, /* "F8_E4M3" (e4m3fn) */
    KVCAL_DTYPE_I32 = 4,
    KVCAL_DTYPE_I64 = 5,
    KVCAL_DTYPE_F64 = 6,
    KVCAL_DTYPE_U8 = 7,
    KVCAL_DTYPE_I8 = 8,
    KVCAL_DTYPE_F8_E5M2 = 9,
    KVCAL_DTYPE_I16 = 10,
    KVCAL_DTYPE_BOOL = 11,
    KVCAL_DTYPE_U16 = 12,
    KVCAL_DTYPE_U32 = 13,
    KVCAL_DTYPE_U64 = 14
} kvcal_dtype;

/* Layout of one paged cache (K and V each have one). */
typedef enum kvcal_cache_layout {
    KVCAL_CACHE_NHD = 0, /* (num_blocks, block_size, num_kv_heads, head_dim): vLLM */
    KVCAL_CACHE_HND = 1  /* (num_blocks, num_kv_heads, block_size, head_dim) */
} kvcal_cache_layout;

/* New K and V rows of one step, for one layer. Element (t, h, d) of K is
 * k[t * k_token_stride + h * k_head_stride + d] (strides in elements;
 * head_dim is contiguous). head_dim and num_kv_heads are the cache's. */
typedef struct kvcal_kv_batch {
    const void *k;          /* (num_tokens, num_kv_heads, head_dim) strided */
    const void *v;          /* (num_tokens, num_kv_heads, head_dim) strided */
    kvcal_dtype dtype;      /* F16, BF16 or F32 */
    int64_t num_tokens;     /* >= 0 */
    int64_t k_token_stride; /* elements, >= num_kv_heads * head_dim */
    int64_t k_head_stride;  /* elements, >= head_dim */
    int64_t v_token_stride;
    int64_t v_head_stride;
    const int64_t *slot_mapping; /* (num_tokens); < 0 = padding */
} kvcal_kv_batch;

/* One layer's paged FP8 cache. k and v hold e4m3fn bytes in `layout`; block
 * b starts at k + b * block_stride (bytes; 0 means contiguous, i.e.
 * block_size * num_kv_heads * head_dim, and a larger value admits caches
 * that interleave K and V per block).
 *
 * k_scale / v_scale: per (token, head) scales beside the cache, fp32,
 * (num_blocks, block_size, num_kv_heads) for NHD -- vLLM's
 * fp8_per_token_head k_scale_cache -- and (num_blocks, num_kv_heads,
 * block_size) for HND, always contiguous. Required by the dynamic and
 * running modes, which write the scale of every stored value there; NULL
 * for static scales. */
typedef struct kvcal_kv_cache {
    uint8_t *k;
    uint8_t *v;
    float *k_scale;
    float *v_scale;
    int64_t num_blocks;
    int block_size;   /* tokens per block, >= 1 */
    int num_kv_heads; /* [1, 1024] */
    int head_dim;     /* [1, 1024] */
    int64_t block_stride;
    kvcal_cache_layout layout;
} kvcal_kv_cache;

/* --- static scales ------------------------------------------------------ */

/* Quantizes batch K and V into the cache with fixed scales: k_scale and
 * v_scale hold 1 value (KVCAL_GRANULARITY_TENSOR) or num_kv_heads values
 * (KVCAL_GRANULARITY_HEAD), each finite and > 0. The reference checks the
 * scales (KVCAL_ERR_NONFINITE); the launch cannot read them without a
 * synchronization and leaves the bytes undefined for a bad scale.
 * cache->k_scale / v_scale, when set, receive the scale used for every
 * written (token, head). */
KVCAL_API kvcal_status kvcal_kv_quantize_static_ref(const kvcal_kv_batch *batch,
                                                    const kvcal_kv_cache *cache,
                                                    kvcal_granularity granularity,
                                                    const float *k_scale,
                                                    const float *v_scale);
KVCAL_API kvcal_status kvcal_kv_quantize_static_launch(const kvcal_kv_batch *batch,
                                                       const kvcal_kv_cache *cache,
                                                       kvcal_granularity granularity,
                                                       const float *k_scale,
                                                       const float *v_scale,
                                                       struct CUstream_st *stream);

/* --- dynamic per (token, head) ------------------------------------------ */

/* Quantizes with one scale per token and kv head, max(absmax / 448, floor)
 * over that head's head_dim finite values, written to cache->k_scale /
 * v_scale (required). vLLM's fp8_per_token_head stores the same layout with
 * a floor of 1e-6 instead of 1/(448*512). */
KVCAL_API kvcal_status kvcal_kv_quantize_dynamic_ref(const kvcal_kv_batch *batch,
                                                     const kvcal_kv_cache *cache);
KVCAL_API kvcal_status kvcal_kv_quantize_dynamic_launch(const kvcal_kv_batch *batch,
                                                        const kvcal_kv_cache *cache,
                                                        struct CUstream_st *stream);

/* --- online running per-head scales ------------------------------------- */

/* How a running scaler turns the absmax it has seen into scales. In every
 * mode a head's scale only grows. */
typedef enum kvcal_scaler_mode {
    /* scale = rule(max over all steps of the step's absmax) */
    KVCAL_SCALER_RUNNING_MAX = 0,
    /* ema = step absmax on the first step, then ema + alpha * (absmax - ema)
     * (fmaf); scale = max(previous scale, rule(ema)). Clips rare outliers
     * instead of letting one spike coarsen the head for the rest of the run. */
    KVCAL_SCALER_EMA = 1,
    /* scale = rule(absmax of the first step that has a valid token), then
     * fixed (what engines do when they compute scales on the first batch) */
    KVCAL_SCALER_FIRST_BATCH = 2
} kvcal_scaler_mode;

/* Per-head K and V scales that an engine updates with every step's new K/V.
 * Opaque; lives on the host or on the current CUDA device.
 *
 * Consistency of stored values. A value is written with the scale its head
 * has when it is written and that scale is recorded per (token, head) in
 * cache->k_scale / v_scale; dequantization (and an attention kernel reading
 * vLLM's fp8_per_token_head layout) multiplies by the recorded scale, so a
 * value stored under an older, smaller scale stays exactly what it was when
 * written. Growth therefore only affects new writes, and because scales
 * only grow, no step's values are clipped by a later scale. The running and
 * EMA modes need the per (token, head) arrays. FIRST_BATCH fixes its scales
 * on the first step, so every stored value shares them: there the arrays may
 * be NULL and the engine passes kvcal_kv_scaler_scales() to attention as
 * ordinary per-head scales. */
typedef struct kvcal_kv_scaler kvcal_kv_scaler_t;

/* Creates a scaler of num_kv_heads in [1, 1024] heads, scales unset until
 * the first step. ema_alpha in (0, 1] is used by KVCAL_SCALER_EMA only.
 * on_device = 1 allocates the state on the current CUDA device (for the
 * _launch functions; KVCAL_ERR_NO_DEVICE without one), 0 on the host (for
 * the _ref functions). */
KVCAL_API kvcal_status kvcal_kv_scaler_create(int num_kv_heads, kvcal_scaler_mode mode,
                                              float ema_alpha, int on_device,
                                              kvcal_kv_scaler_t **out);
KVCAL_API void kvcal_kv_scaler_destroy(kvcal_kv_scaler_t *scaler);

/* One engine step: folds the batch's per-head absmax of K and V (finite
 * values of non-padding tokens) into the scaler, then quantizes the batch
 * into the cache with the updated per-head scales, recording them in
 * cache->k_scale / v_scale (see above). A batch with no valid token leaves
 * the scaler unchanged. The launch enqueues two kernels and no host
 * synchronization, so it can be captured in a CUDA graph. On large batches
 * it writes every row with the current scales while reducing the absmax,
 * then rewrites only the rows of heads whose scale grew: once the scales
 * have settled, a step reads and writes its K/V once. */
KVCAL_API kvcal_status kvcal_kv_scaler_quantize_ref(kvcal_kv_scaler_t *scaler,
                                                    const kvcal_kv_batch *batch,
                                                    const kvcal_kv_cache *cache);
KVCAL_API kvcal_status kvcal_kv_scaler_quantize_launch(kvcal_kv_scaler_t *scaler,
                                                       const kvcal_kv_batch *batch,
                                                       const kvcal_kv_cache *cache,
                                                       struct CUstream_st *stream);

/* The scaler's current per-head scales, (num_kv_heads) each, in the
 * scaler's memory (device memory for a device scaler), owned by the scaler
 * and valid until it is destroyed; 0 until the first valid step. */
KVCAL_API kvcal_status kvcal_kv_scaler_scales(const kvcal_kv_scaler_t *scaler,
                                              const float **k_scale,
                                              const float **v_scale);

/* Copies the current per-head scales to host arrays of num_kv_heads floats
 * (either may be NULL) and the number of steps folded in (may be NULL).
 * For a device scaler this synchronizes `stream` first. */
KVCAL_API kvcal_status kvcal_kv_scaler_read(const kvcal_kv_scaler_t *scaler,
                                            struct CUstream_st *stream, float *k_scale,
                                            float *v_scale, int64_t *steps);

/* --- dequantization ------------------------------------------------------ */

/* Gathers the cached values of the batch's slots back to real numbers:
 * k_out / v_out (num_tokens, num_kv_heads, head_dim) contiguous, of
 * out_dtype (fp32 products rounded to nearest even for F16 / BF16). Scales
 * come from cache->k_scale / v_scale when set, otherwise from the static
 * k_scale / v_scale of `granularity`. Rows of skipped slots are not
 * written. batch->k / v and dtype are ignored. The reference checks the
 * static scales (KVCAL_ERR_NONFINITE: finite and > 0); the launch cannot read
 * them without a synchronization. */
KVCAL_API kvcal_status kvcal_kv_dequantize_ref(const kvcal_kv_batch *batch,
                                               const kvcal_kv_cache *cache,
                                               kvcal_granularity granularity,
                                               const float *k_scale, const float *v_scale,
                                               void *k_out, void *v_out,
                                               kvcal_dtype out_dtype);
KVCAL_API kvcal_status kvcal_kv_dequantize_launch(
    const kvcal_kv_batch *batch, const kvcal_kv_cache *cache,
    kvcal_granularity granularity, const float *k_scale, const float *v_scale,
    void *k_out, void *v_out, kvcal_dtype out_dtype, struct CUstream_st *stream);

/* --- cache formats beyond e4m3 ----------------------------------------- */

/* What a cache stores per value. Values only grow at the end. */
typedef enum kvcal_kv_format {
    /* e4m3fn byte, x * (1 / scale): the entry points above */
    KVCAL_KV_FORMAT_FP8_E4M3 = 0,
    /* e5m2 byte of x itself, no scale (core/kvformat.h: RNE, saturating at
     * +-57344): vLLM's and sglang's fp8_e5m2 */
    KVCAL_KV_FORMAT_FP8_E5M2 = 1,
    /* int8 q = clamp(R(x * (1 / scale)), -128, 127); x = q * scale. Dynamic
     * scales are max(absmax / 127, 1e-6) per (token, head), vLLM's
     * int8_per_token_head */
    KVCAL_KV_FORMAT_INT8 = 2,
    /* uint8 q = clamp(R((x - zero) * (1 / scale)), 0, 255); x = fmaf(q,
     * scale, zero). Dynamic: zero = min, scale = (max - min) / 255 per
     * (token, head) over the finite values (LMDeploy's quant_policy=8); a
     * row whose max equals its min stores 0 with scale 0 */
    KVCAL_KV_FORMAT_INT8_ASYM = 3,
    /* NVFP4, vLLM's nvfp4 cache: each cache block holds a data region, per
     * (slot, head) head_dim / 2 bytes of e2m1 pairs (element 2i in the low
     * nibble of byte i) in the cache's layout, then a scale region, per
     * (slot, head) head_dim / 16 e4m3 block scales, one per 16 values, in
     * the same layout; V's scales are swizzled for the trtllm-gen kernels
     * as vLLM writes them when block_size and head_dim / 16 are multiples
     * of 4 (kvcal_kv_nvfp4_scale_offset), K's never. `scale` is the fp32
     * global scale g (ModelOpt: amax / (6 * 448), vLLM's k_scale). Block b:
     * s = e4m3((amax_b * (1 / 6)) * (1 / g)), d = e4m3_value(s) * g, q =
     * e2m1(x * (1 / d)) (0 when d is 0); x = e2m1_value(q) * d, reciprocals
     * rounded to nearest (vLLM's kernel takes rcp.approx.ftz). head_dim
     * must be a multiple of 16; static scales only */
    KVCAL_KV_FORMAT_NVFP4 = 4
} kvcal_kv_format;

/* How the int8 formats round x * (1 / scale). */
typedef enum kvcal_kv_rounding {
    KVCAL_KV_ROUND_NEAREST_EVEN = 0, /* cvt.rni: LMDeploy, vllm-ascend */
    KVCAL_KV_ROUND_TOWARD_ZERO = 1   /* a float stored to an int8 tensor by Triton:
                                        vLLM's int8_per_token_head */
} kvcal_kv_rounding;

/* Bytes one (slot, head) of head_dim values takes in `format`, its NVFP4
 * block scales included (0 for an unknown format or an NVFP4 head_dim that
 * is not a multiple of 16). A cache block of block_size slots takes
 * block_size * num_kv_heads times that. */
KVCAL_API int64_t kvcal_kv_format_row_bytes(kvcal_kv_format format, int head_dim);

/* NVFP4: byte offset, from the cache's base, of block scale s (of head_dim
 * / 16) of (slot, head) in K's (kv 0) or V's (kv 1) cache; -1 for a bad
 * argument. With the data of (slot, head) at block * block_stride + row *
 * head_dim / 2 (row = offset * num_kv_heads + head for NHD, head *
 * block_size + offset for HND), the scales start after the block's
 * block_size * num_kv_heads * head_dim / 2 data bytes: at row * head_dim /
 * 16 + s for K; for V, when block_size and head_dim / 16 are multiples of
 * 4, at the swizzled (t', s') of vLLM's reshape_and_cache_nvfp4 (t' = t / 4
 * * 4 + s / (S / 4), s' = s % (S / 4) * 4 + t % 4 with t the slot's
 * offset in its block and S = head_dim / 16, row taken with t'). */
KVCAL_API int64_t kvcal_kv_nvfp4_scale_offset(const kvcal_kv_cache *cache, int kv,
                                              int64_t slot, int head, int s);

/* The quantization of one call. Static scales when k_scale / v_scale are
 * set: 1 value (TENSOR) or num_kv_heads values (HEAD), finite and > 0, with
 * k_zero / v_zero of the same count for INT8_ASYM (finite). NULL scales
 * (and zeros) mean dynamic per (token, head) parameters, computed from each
 * row and written to cache->k_scale / v_scale and to k_zero_cache /
 * v_zero_cache (INT8_ASYM), laid out as cache->k_scale (required then).
 * FP8_E5M2 takes no scale; for FP8_E4M3 the call is
 * kvcal_kv_quantize_static / _dynamic. With static scales, cache->k_scale /
 * v_scale (and the zero arrays), when set, receive the parameters used for
 * every written (token, head). Cache rows hold kvcal_kv_format_row_bytes
 * bytes (block_stride 0 means block_size * num_kv_heads of them). */
typedef struct kvcal_kv_qparams {
    kvcal_kv_format format;
    kvcal_kv_rounding rounding;     /* INT8 and INT8_ASYM */
    kvcal_granularity granularity;  /* of the static arrays */
    const float *k_scale, *v_scale; /* static scales, or NULL: dynamic */
    const float *k_zero, *v_zero;   /* INT8_ASYM static zero points */
    float *k_zero_cache;            /* INT8_ASYM: per (token, head) zero points */
    float *v_zero_cache;
} kvcal_kv_qparams;

/* Quantizes batch K and V into the cache in params->format (above). The
 * reference checks the static scales (KVCAL_ERR_NONFINITE); the launch
 * cannot read them without a synchronization and leaves the bytes
 * undefined for a bad one. */
KVCAL_API kvcal_status kvcal_kv_quantize_fmt_ref(const kvcal_kv_batch *batch,
                                                 const kvcal_kv_cache *cache,
                                                 const kvcal_kv_qparams *params);
KVCAL_API kvcal_status kvcal_kv_quantize_fmt_launch(const kvcal_kv_batch *batch,
                                                    const kvcal_kv_cache *cache,
                                                    const kvcal_kv_qparams *params,
                                                    struct CUstream_st *stream);

/* Dequantizes the batch's slots of a cache in params->format, as
 * kvcal_kv_dequantize does for e4m3: the static parameters of params when
 * set, else the per (token, head) ones beside the cache. The reference
 * checks the static ones as kvcal_kv_quantize_fmt_ref does
 * (KVCAL_ERR_NONFINITE). */
KVCAL_API kvcal_status kvcal_kv_dequantize_fmt_ref(const kvcal_kv_batch *batch,
                                                   const kvcal_kv_cache *cache,
                                                   const kvcal_kv_qparams *params,
                                                   void *k_out, void *v_out,
                                                   kvcal_dtype out_dtype);
KVCAL_API kvcal_status kvcal_kv_dequantize_fmt_launch(const kvcal_kv_batch *batch,
                                                      const kvcal_kv_cache *cache,
                                                      const kvcal_kv_qparams *params,
                                                      void *k_out, void *v_out,
                                                      kvcal_dtype out_dtype,
                                                      struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif
