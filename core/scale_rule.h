/* core/scale_rule.h: the one scale rule of kvcal (DESIGN.md, "Scale
 * semantics"), usable from C and from CUDA device code.
 *
 *   dequantized = fp8_value * scale
 *   scale       = max(absmax / 448, 1 / (448 * 512))
 *
 * 448 is the largest finite OCP e4m3fn value. Every module that turns an
 * absmax into a scale calls kvcal_scale_from_absmax(); nothing else divides
 * by 448. */
#ifndef KVCAL_CORE_SCALE_RULE_H
#define KVCAL_CORE_SCALE_RULE_H

#include <math.h>

#ifdef __CUDACC__
#define KVCAL_HOST_DEVICE __host__ __device__
#else
#define KVCAL_HOST_DEVICE
#endif

#define KVCAL_FP8_E4M3_MAX 448.0f
#define KVCAL_SCALE_FLOOR (1.0f / (448.0f * 512.0f))

/* absmax >= 0 and finite (callers check first); returns a scale >= floor. */
static inline KVCAL_HOST_DEVICE float kvcal_scale_from_absmax(float absmax)
{
    float s = absmax / KVCAL_FP8_E4M3_MAX;
    return s > KVCAL_SCALE_FLOOR ? s : KVCAL_SCALE_FLOOR;
}

/* A value x quantized with `scale` clips when |x| / scale > 464: 464 is the
 * midpoint between 448 and the next e4m3 step (480), so round-to-nearest
 * takes anything above it past 448 (to 480, which saturates to 448), while
 * 464 itself rounds to the even 448. kvcal eval counts clipped values with
 * kvcal_value_clips; calibrate's k_clip / v_clip estimate counts the
 * observed |x| above kvcal_clip_bound(scale). */
#define KVCAL_CLIP_RATIO 464.0f

/* 1 when |x| (ax >= 0) clips under scale: ax * (1 / scale) > 464. */
static inline KVCAL_HOST_DEVICE int kvcal_value_clips(float ax, float scale)
{
    return ax * (1.0f / scale) > KVCAL_CLIP_RATIO;
}

/* The |x| above which values quantized with scale clip: 464 * scale. */
static inline KVCAL_HOST_DEVICE double kvcal_clip_bound(float scale)
{
    return (double)KVCAL_CLIP_RATIO * (double)scale;
}

/* 1 when a scale may be written to a file: finite and > 0. */
static inline KVCAL_HOST_DEVICE int kvcal_scale_is_valid(float s)
{
    return s > 0.0f && s <= 3.4028234663852886e38f;
}

/* --- int8 with zero points (vllm-ascend's C8 cache) ------------------------
 *
 * The cache stores q = clamp(round(x / scale + offset), -128, 127) and reads
 * back x = (q - offset) * scale (vllm-ascend's kv_cache_scale /
 * kv_cache_offset). Scale and offset of a signed range [lo, hi] are
 * ModelSlim's (msmodelslim/ir/api/impl/int_quantization.py,
 * calculate_int_qparam, asymmetric, signed int8), in fp32: the range is
 * widened to hold 0, scale = max(hi / 255 - lo / 255, FLT_EPSILON), offset
 * = round_half_even(-lo / scale) - 128, an integer in [-128, 127]. */
#define KVCAL_INT8_ASYM_LEVELS 255.0f
#define KVCAL_INT8_ASYM_SCALE_FLOOR 1.1920928955078125e-7f /* FLT_EPSILON */

static inline KVCAL_HOST_DEVICE void kvcal_int8_asym_params(float lo, float hi,
                                                            float *scale, float *offset)
{
    lo = lo < 0.0f ? lo : 0.0f;
    hi = hi > 0.0f ? hi : 0.0f;
    float s = hi / KVCAL_INT8_ASYM_LEVELS - lo / KVCAL_INT8_ASYM_LEVELS;
    s = s > KVCAL_INT8_ASYM_SCALE_FLOOR ? s : KVCAL_INT8_ASYM_SCALE_FLOOR;
    *scale = s;
    *offset = rintf(-lo / s) - 128.0f;
}

/* 1 when an offset may be written: an integer in [-128, 127]. */
static inline KVCAL_HOST_DEVICE int kvcal_int8_offset_is_valid(float o)
{
    return o >= -128.0f && o <= 127.0f && o == rintf(o);
}

#endif
