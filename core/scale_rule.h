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

#endif
