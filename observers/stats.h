/* observers/stats.h: running statistics of every K and V the engine would
 * cache, per layer x kv head (x channel), for every observer kind.
 *
 * The layout is fixed here because the CPU runner, the CUDA kernels (which
 * accumulate the same arrays on the device) and the HDF5 writer all share
 * it; everything lives in one slab. */
#ifndef KVCAL_OBSERVERS_STATS_H
#define KVCAL_OBSERVERS_STATS_H

#include <stdint.h>
#include <string.h>

#include "core/scale_rule.h"
#include "kvcal.h"

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

typedef struct kvcal_stats {
    int num_layers;
    int num_kv_heads;
    int head_dim;
    int num_bins;               /* KVCAL_HIST_BINS */
    /* slab-backed; index [kv] is KVCAL_K or KVCAL_V */
    float *absmax[2];           /* (L, H, head_dim) running max |x| */
    uint64_t *hist[2];          /* (L, H, num_bins) counts of |x| */
    float *batch_absmax[2];     /* (L, H) max |x| of the current batch */
    double *ema[2];             /* (L, H) moving average of per-batch absmax */
    int64_t *tokens;            /* (L) tokens observed per layer */
    int64_t batches;            /* batches folded in */
    void *slab;
} kvcal_stats_t;

#endif
