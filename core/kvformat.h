/* core/kvformat.h: the element conversions of the KV-cache formats beyond
 * e4m3 (core/fp8.h), usable from C and from CUDA device code: OCP fp8 e5m2,
 * fp4 e2m1 (the values of NVFP4) and the integer roundings of the int8
 * caches. The CPU reference and the CUDA kernels of the online
 * quantization (kernels/cpu/kvquant_fmt_ref.c, kernels/cuda/kvquant_fmt.cu)
 * both call these, so host and device agree bit for bit.
 *
 * e5m2: 1 sign bit, 5 exponent bits (bias 15), 2 mantissa bits; infinities
 * 0x7c / 0xfc, NaN 0x7d..0x7f; largest finite 0x7b = 57344; smallest normal
 * 2^-14; subnormals m * 2^-16, m in 1..3. kvcal_fp8_e5m2_from_float rounds to
 * nearest even and saturates (|x| >= 57344 and +-Inf give +-57344), as
 * CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2) does and as
 * vLLM's fp8_e5m2 cache stores; NaN gives 0x7f; the sign of zero is kept.
 *
 * e2m1: 1 sign bit (bit 3), 2 exponent bits, 1 mantissa bit: magnitudes 0,
 * 0.5, 1, 1.5, 2, 3, 4, 6. kvcal_fp4_e2m1_from_float rounds to nearest even
 * (as cvt.rn.satfinite.e2m1x2.f32), saturates at +-6 (Inf included) and maps
 * NaN to 0 (as vLLM's software e2m1 of pre-Blackwell GPUs). */
#ifndef KVCAL_CORE_KVFORMAT_H
#define KVCAL_CORE_KVFORMAT_H

#include <math.h>
#include <stdint.h>

#include "core/fp8.h"

#define KVCAL_FP8_E5M2_MAX 57344.0f
#define KVCAL_FP8_E5M2_NAN 0x7f
#define KVCAL_FP4_E2M1_MAX 6.0f

/* float -> e5m2 byte (RNE, saturating, NaN -> 0x7f). */
static inline KVCAL_HOST_DEVICE uint8_t kvcal_fp8_e5m2_from_float(float x)
{
    uint32_t bits = kvcal_fp8_float_bits(x);
    uint8_t sign = (uint8_t)((bits >> 24) & 0x80u);
    uint32_t a = bits & 0x7fffffffu;
    if (a > 0x7f800000u)
        return KVCAL_FP8_E5M2_NAN;
    if (a >= 0x47600000u) /* 57344.0f and above, infinity included */
        return (uint8_t)(sign | 0x7bu);
    uint32_t e = a >> 23;
    if (e >= 113) { /* |x| >= 2^-14: normal e5m2 */
        uint32_t code = ((e - 112) << 2) | ((a >> 21) & 3u);
        uint32_t rem = a & 0x1fffffu;
        if (rem > 0x100000u || (rem == 0x100000u && (code & 1u)))
            code++; /* a carry into the exponent is the correct result */
        return (uint8_t)(sign | code);
    }
    if (e == 0)
        return sign;
    /* subnormal e5m2: m = RNE(|x| / 2^-16); |x| = M * 2^(e - 150) */
    uint32_t m_full = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 134u - e; /* >= 22 here */
    if (shift > 24u)
        return sign;
    uint32_t q = m_full >> shift;
    uint32_t rem = m_full & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++; /* q == 4 encodes 2^-14, the smallest normal: correct */
    return (uint8_t)(sign | q);
}

/* e5m2 byte -> float (exact). */
static inline KVCAL_HOST_DEVICE float kvcal_fp8_e5m2_to_float(uint8_t v)
{
    uint32_t sign = (uint32_t)(v & 0x80u) << 24;
    uint32_t e = (v >> 2) & 0x1fu, m = v & 3u;
    if (e == 0x1fu)
        return kvcal_fp8_bits_float(sign | (m ? 0x7fc00000u : 0x7f800000u));
    if (e == 0) {
        float f = (float)m * 0x1p-16f;
        return sign ? -f : f;
    }
    return kvcal_fp8_bits_float(sign | ((e + 112u) << 23) | (m << 21));
}

/* float -> e2m1 nibble (RNE, saturating at 6, NaN -> 0). */
static inline KVCAL_HOST_DEVICE uint8_t kvcal_fp4_e2m1_from_float(float x)
{
    uint32_t bits = kvcal_fp8_float_bits(x);
    uint32_t a_bits = bits & 0x7fffffffu;
    if (a_bits > 0x7f800000u)
        return 0;
    uint8_t sign = (uint8_t)((bits >> 28) & 8u);
    float a = kvcal_fp8_bits_float(a_bits);
    uint8_t m;
    if (a <= 0.25f)
        m = 0;
    else if (a < 0.75f)
        m = 1;
    else if (a <= 1.25f)
        m = 2;
    else if (a < 1.75f)
        m = 3;
    else if (a <= 2.5f)
        m = 4;
    else if (a < 3.5f)
        m = 5;
    else if (a <= 5.0f)
        m = 6;
    else
        m = 7;
    return (uint8_t)(sign | m);
}

/* e2m1 nibble (low 4 bits of v) -> float (exact). */
static inline KVCAL_HOST_DEVICE float kvcal_fp4_e2m1_to_float(uint8_t v)
{
    uint32_t m = v & 7u;
    /* 0, 0.5, 1, 1.5, 2, 3, 4, 6: exponent m >> 1, mantissa m & 1 */
    float f = m < 2u ? 0.5f * (float)m
                     : (float)(1u << ((m >> 1) - 1u)) * (1.0f + 0.5f * (float)(m & 1u));
    return (v & 8u) ? -f : f;
}

/* How an integer cache rounds x * (1 / scale) to its code. */
#define KVCAL_INT_ROUND_NEAREST_EVEN 0
#define KVCAL_INT_ROUND_TOWARD_ZERO 1

/* y clamped to [lo, hi], then rounded by `rounding` (NaN -> 0): the
 * integer code of a value already divided by its scale. */
static inline KVCAL_HOST_DEVICE int kvcal_int_code(float y, int rounding, float lo,
                                                   float hi)
{
    if (!(y == y))
        return 0;
    y = y < lo ? lo : (y > hi ? hi : y);
    return (int)(rounding == KVCAL_INT_ROUND_TOWARD_ZERO ? truncf(y) : rintf(y));
}

#endif
