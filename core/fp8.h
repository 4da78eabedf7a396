/* core/fp8.h: OCP FP8 e4m3fn conversion, usable from C and from CUDA device
 * code. Every module that rounds a float to e4m3 (observers, the online
 * quantization kernels and their CPU references) uses these two functions,
 * so host and device agree bit for bit.
 *
 * e4m3fn: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no
 * infinities; S.1111.111 (0x7f / 0xff) is NaN; largest finite 0x7e = 448;
 * smallest normal 2^-6; subnormals m * 2^-9, m in 1..7.
 *
 * Policy of kvcal_fp8_e4m3_from_float:
 * - round to nearest, ties to even (on the 3-bit mantissa);
 * - saturating: |x| >= 448, infinities included, gives +-448 (0x7e / 0xfe),
 *   as CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) does;
 * - NaN (any sign, any payload) gives 0x7f;
 * - the sign of zero is kept (-0.0f -> 0x80).
 * Float subnormals (< 2^-126) round to +-0. */
#ifndef KVCAL_CORE_FP8_H
#define KVCAL_CORE_FP8_H

#include <stdint.h>
#ifndef __CUDA_ARCH__
#include <string.h>
#endif

#include "core/scale_rule.h"

#define KVCAL_FP8_E4M3_NAN 0x7f
#define KVCAL_FP8_E4M3_MAX_CODE 0x7e

static inline KVCAL_HOST_DEVICE uint32_t kvcal_fp8_float_bits(float x)
{
#ifdef __CUDA_ARCH__
    return (uint32_t)__float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

static inline KVCAL_HOST_DEVICE float kvcal_fp8_bits_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* float -> e4m3fn byte (RNE, saturating, NaN -> 0x7f; see the policy above). */
static inline KVCAL_HOST_DEVICE uint8_t kvcal_fp8_e4m3_from_float(float x)
{
    uint32_t bits = kvcal_fp8_float_bits(x);
    uint8_t sign = (uint8_t)((bits >> 24) & 0x80u);
    uint32_t a = bits & 0x7fffffffu;
    if (a > 0x7f800000u)
        return KVCAL_FP8_E4M3_NAN;
    if (a >= 0x43e00000u) /* 448.0f, and everything above, infinity included */
        return (uint8_t)(sign | KVCAL_FP8_E4M3_MAX_CODE);
    uint32_t e = a >> 23;
    if (e >= 121) { /* |x| >= 2^-6: normal e4m3 */
        uint32_t code = ((e - 120) << 3) | ((a >> 20) & 7u);
        uint32_t rem = a & 0xfffffu;
        if (rem > 0x80000u || (rem == 0x80000u && (code & 1u)))
            code++; /* a carry into the exponent is the correct result */
        return (uint8_t)(sign | code);
    }
    if (e == 0) /* float zero or float subnormal: far below 2^-10 */
        return sign;
    /* subnormal e4m3: m = RNE(|x| / 2^-9); |x| = M * 2^(e - 150) */
    uint32_t m_full = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 141u - e; /* >= 21 here */
    if (shift > 24u)
        return sign; /* |x| < 2^-10: rounds to zero */
    uint32_t q = m_full >> shift;
    uint32_t rem = m_full & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++; /* q == 8 encodes 2^-6, the smallest normal: correct */
    return (uint8_t)(sign | q);
}

/* e4m3fn byte -> float (exact; 0x7f / 0xff -> NaN). */
static inline KVCAL_HOST_DEVICE float kvcal_fp8_e4m3_to_float(uint8_t v)
{
    uint32_t sign = (uint32_t)(v & 0x80u) << 24;
    uint32_t e = (v >> 3) & 0xfu;
    uint32_t m = v & 7u;
    if (e == 0xfu && m == 7u)
        return kvcal_fp8_bits_float(sign | 0x7fc00000u);
    if (e == 0) { /* m * 2^-9, as the float with exponent of m's leading bit */
        if (m == 0)
            return kvcal_fp8_bits_float(sign);
        uint32_t lead = m >= 4u ? 2u : (m >= 2u ? 1u : 0u);
        uint32_t frac = (m << (23u - lead)) & 0x7fffffu;
        return kvcal_fp8_bits_float(sign | ((118u + lead) << 23) | frac);
    }
    return kvcal_fp8_bits_float(sign | ((e + 120u) << 23) | (m << 20));
}

/* x rounded through e4m3 and back: kvcal_fp8_e4m3_to_float(from_float(x)). */
static inline KVCAL_HOST_DEVICE float kvcal_fp8_e4m3_round(float x)
{
    return kvcal_fp8_e4m3_to_float(kvcal_fp8_e4m3_from_float(x));
}

#endif
