/* core/hist_rule.h: the histogram bins of |x| every observer uses, and the
 * K / V index, from C and from CUDA device code (the observing kernels bin
 * exactly as observers/stats.c does). */
#ifndef KVCAL_CORE_HIST_RULE_H
#define KVCAL_CORE_HIST_RULE_H

#include <stdint.h>
#include <string.h>

#include "core/scale_rule.h"

/* Histogram of |x|: bins follow the float32 bit pattern, 64 bins per octave
 * (each bin 1/64 .. 1/128 of its value wide) from 2^-20 to 2^20; bin 0 holds
 * |x| < 2^-20 (zeros included), the last bin everything >= 2^20. Computing
 * the bin from the bits makes CPU and GPU histograms identical. */
#define KVCAL_HIST_BINS_PER_OCTAVE 64
#define KVCAL_HIST_MIN_EXP (-20)
#define KVCAL_HIST_OCTAVES 40
#define KVCAL_HIST_BINS (KVCAL_HIST_OCTAVES * KVCAL_HIST_BINS_PER_OCTAVE + 2)

static inline KVCAL_HOST_DEVICE int kvcal_hist_bin(float x)
{
    uint32_t bits;
#ifdef __CUDA_ARCH__
    bits = (uint32_t)__float_as_uint(x);
#else
    memcpy(&bits, &x, sizeof bits);
#endif
    bits &= 0x7fffffffu;
    int32_t b = (int32_t)(bits >> (23 - 6)) - ((127 + KVCAL_HIST_MIN_EXP) << 6) + 1;
    if (b < 1)
        return 0;
    return b > KVCAL_HIST_BINS - 1 ? KVCAL_HIST_BINS - 1 : b;
}

/* Lower edge of bin b >= 1 (bin 0 starts at 0). */
static inline KVCAL_HOST_DEVICE float kvcal_hist_bin_lower(int b)
{
    uint32_t bits = (uint32_t)((b - 1) + ((127 + KVCAL_HIST_MIN_EXP) << 6)) << (23 - 6);
    float f;
#ifdef __CUDA_ARCH__
    f = __uint_as_float(bits);
#else
    memcpy(&f, &bits, sizeof f);
#endif
    return f;
}

/* Index of K (0) or V (1) arrays. */
enum { KVCAL_K = 0, KVCAL_V = 1 };

#endif
