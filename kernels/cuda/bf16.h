/* kernels/cuda/bf16.h: bfloat16 storage type of the CUDA backend, with the
 * host conversions the runner and the tests use to fill and read device
 * buffers. Plain C; the device side uses __nv_bfloat16 on the same bits. */
#ifndef KVCAL_KERNELS_CUDA_BF16_H
#define KVCAL_KERNELS_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

/* The 16 bits of a bfloat16 (the upper half of a float32). */
typedef uint16_t kvcal_bf16;

/* Rounds to nearest, ties to even; NaN stays a (quiet) NaN, infinities stay. */
static inline kvcal_bf16 kvcal_bf16_from_float(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (kvcal_bf16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (kvcal_bf16)(u >> 16);
}

/* Exact. */
static inline float kvcal_bf16_to_float(kvcal_bf16 h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x rounded to the nearest bfloat16, as a float. */
static inline float kvcal_bf16_round(float x)
{
    return kvcal_bf16_to_float(kvcal_bf16_from_float(x));
}

#endif
