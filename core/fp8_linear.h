/* core/fp8_linear.h: how an FP8 linear layer is served, usable from C and
 * from CUDA device code: the granularities of its weight and activation
 * scales, and the element formulas of the activation quantization and of
 * the weights' requantization, each as vLLM computes it (sources in
 * schemas/README.md, "FP8 weights"). The CPU reference
 * (kernels/cpu/fp8_ref.c), the CUDA kernels (kernels/cuda/fp8_linear.cu)
 * and the model loader (calib/model.c) all call these, so that host and
 * device quantize every activation to the same byte.
 *
 * A served FP8 linear layer computes out = (xq * sx) (wq * sw)^T + bias with
 * xq, wq e4m3fn and sx, sw the scales of the granularity below; the product
 * accumulates in fp32. */
#ifndef KVCAL_CORE_FP8_LINEAR_H
#define KVCAL_CORE_FP8_LINEAR_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fp8.h"

/* Scales of a weight (out, in). Values only grow at the end. */
typedef enum kvcal_fp8_weight_scale {
    KVCAL_FP8W_NONE = 0,    /* not FP8: a bf16 / fp16 / fp32 weight */
    KVCAL_FP8W_TENSOR = 1,  /* one scale */
    KVCAL_FP8W_CHANNEL = 2, /* one per output row */
    KVCAL_FP8W_BLOCK = 3    /* one per block_n x block_k block */
} kvcal_fp8_weight_scale;

/* Scales of the activation (rows, in) an FP8 weight multiplies. Values only
 * grow at the end. */
typedef enum kvcal_fp8_act_scale {
    KVCAL_FP8A_NONE = 0,   /* not quantized (weight-only FP8, W8A16) */
    KVCAL_FP8A_STATIC = 1, /* the checkpoint's input_scale, one per tensor */
    KVCAL_FP8A_TOKEN = 2,  /* dynamic, one per row */
    KVCAL_FP8A_GROUP = 3   /* dynamic, one per row and group of columns */
} kvcal_fp8_act_scale;

/* How one logical weight of a model is served. */
typedef struct kvcal_fp8_linear {
    kvcal_fp8_weight_scale w;
    kvcal_fp8_act_scale a;
    int block_n, block_k; /* KVCAL_FP8W_BLOCK: rows and columns of a block */
    int group;            /* KVCAL_FP8A_GROUP: columns of an activation group */
} kvcal_fp8_linear;

/* The smallest per-token scale (vLLM's min_scaling_factor: 1 / (448 * 512),
 * kvcal's own scale floor) and the absmax floor of a token group (vLLM's
 * per_token_group_quant_fp8 eps). */
#define KVCAL_FP8_GROUP_EPS 1e-10f

/* --- activations --------------------------------------------------------- */

/* Static and dynamic per-tensor quantization: x times the reciprocal of the
 * scale (inv = 1.0f / scale, computed once), clamped to +-448 as
 * fmaxf(-448, fminf(y, 448)), rounded to nearest even (vLLM's
 * scaled_fp8_conversion<true>). */
static inline KVCAL_HOST_DEVICE uint8_t kvcal_fp8_quant_mul(float x, float inv)
{
    const float y = fmaxf(-KVCAL_FP8_E4M3_MAX, fminf(x * inv, KVCAL_FP8_E4M3_MAX));
    return kvcal_fp8_e4m3_from_float(y);
}

/* Dynamic per-token quantization: x divided by the token's scale, clamped
 * as kvcal_fp8_quant_mul (scaled_fp8_conversion<false>). */
static inline KVCAL_HOST_DEVICE uint8_t kvcal_fp8_quant_div(float x, float scale)
{
    const float y = fmaxf(-KVCAL_FP8_E4M3_MAX, fminf(x / scale, KVCAL_FP8_E4M3_MAX));
    return kvcal_fp8_e4m3_from_float(y);
}

/* kvcal_fp8_quant_div's quotient x / scale without a division, from inv =
 * 1.0f / scale (computed once a row): q = x inv is within an ulp of x /
 * scale, and one FMA with the exact remainder x - q scale rounds it as the
 * division rounds (Markstein's correction) wherever the remainder does not
 * underflow; the sign copied from x keeps an underflowing quotient signed
 * as the division's. For a bf16 row's values and the finite scale of its
 * absmax (kvcal_fp8_token_scale) the e4m3 bytes equal
 * kvcal_fp8_quant_div's (tests/test_fp8_linear.c: every bf16 value against
 * every fifth bf16 absmax): the quotients that differ lie below 2^-95 and
 * round to zero. The device kernels take it: a division is several
 * instructions and one of the special-function unit's a value, this three. */
static inline KVCAL_HOST_DEVICE float kvcal_fp8_token_quotient(float x, float scale,
                                                               float inv)
{
#ifdef __CUDA_ARCH__
    const float q = __fmul_rn(x, inv);
    return copysignf(__fmaf_rn(__fmaf_rn(-q, scale, x), inv, q), x);
#else
    const float q = x * inv;
    return copysignf(fmaf(fmaf(-q, scale, x), inv, q), x);
#endif
}

/* Dynamic per-token-group quantization: x divided by the group's scale,
 * clamped as fminf(fmaxf(y, -448), 448) (per_token_group_quant's
 * QuantizeGroup; only a NaN tells the two clamps apart). */
static inline KVCAL_HOST_DEVICE uint8_t kvcal_fp8_quant_group(float x, float scale)
{
    const float y = fminf(fmaxf(x / scale, -KVCAL_FP8_E4M3_MAX), KVCAL_FP8_E4M3_MAX);
    return kvcal_fp8_e4m3_from_float(y);
}

/* A token's scale from its absmax: max(absmax / 448, 1 / (448 * 512)), the
 * one scale rule (core/scale_rule.h), which vLLM's per-token kernel shares. */
static inline KVCAL_HOST_DEVICE float kvcal_fp8_token_scale(float absmax)
{
    return kvcal_scale_from_absmax(absmax);
}

/* A token group's scale from its absmax: max(absmax, 1e-10) / 448. */
static inline KVCAL_HOST_DEVICE float kvcal_fp8_group_scale(float absmax)
{
    return fmaxf(absmax, KVCAL_FP8_GROUP_EPS) / KVCAL_FP8_E4M3_MAX;
}

/* --- weights ------------------------------------------------------------- */

/* x rounded to IEEE fp16 (nearest even; subnormals kept, overflow to
 * infinity), returned as a float. */
static inline KVCAL_HOST_DEVICE float kvcal_half_round(float x)
{
    const uint32_t bits = kvcal_fp8_float_bits(x);
    const uint32_t sign = bits & 0x80000000u, a = bits & 0x7fffffffu;
    if (a >= 0x7f800000u) /* infinity, NaN */
        return x;
    if (a >= 0x477ff000u) /* 65520 and above round to infinity */
        return kvcal_fp8_bits_float(sign | 0x7f800000u);
    if ((a >> 23) < 113u) { /* below 2^-14: a multiple of 2^-24 (exact scalings) */
        const float r = rintf(kvcal_fp8_bits_float(a) * 16777216.0f) / 16777216.0f;
        return kvcal_fp8_bits_float(sign | kvcal_fp8_float_bits(r));
    }
    const uint32_t rem = a & 0x1fffu; /* the 13 mantissa bits fp16 drops */
    uint32_t kept = a & ~0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (kept & 0x2000u)))
        kept += 0x2000u; /* a carry into the exponent is the correct result */
    return kvcal_fp8_bits_float(sign | kept);
}

/* What byte b of a weight shard with per-tensor scale s_shard becomes when
 * the engine requantizes a fused weight to the largest of its shards'
 * scales s_max (vLLM's requantize_with_max_scale): the shard dequantized
 * to fp16 (b * s_shard in fp32, rounded to fp16), then quantized with
 * s_max as activations are (kvcal_fp8_quant_mul, 1 / s_max). */
static inline KVCAL_HOST_DEVICE uint8_t kvcal_fp8_requant(uint8_t b, float s_shard,
                                                          float s_max)
{
    const float dq = kvcal_half_round(kvcal_fp8_e4m3_to_float(b) * s_shard);
    return kvcal_fp8_quant_mul(dq, 1.0f / s_max);
}

/* Floats of a weight's scales as kvcal lays them out (host and device):
 * TENSOR 4 + rows (the scale, 3 unused, then the scale once per row, the
 * per-channel form the GEMMs take beside per-token activations); CHANNEL
 * rows; BLOCK ceil(rows / block_n) rows of kvcal_fp8_block_ld(cols,
 * block_k) (cuBLASLt's BLK128x128 layout: block columns padded to 4). */
static inline KVCAL_HOST_DEVICE int64_t kvcal_fp8_block_ld(int64_t cols, int block_k)
{
    return ((cols + block_k - 1) / block_k + 3) / 4 * 4;
}

static inline KVCAL_HOST_DEVICE int64_t kvcal_fp8_weight_scales(const kvcal_fp8_linear *f,
                                                                int64_t rows,
                                                                int64_t cols)
{
    switch (f->w) {
    case KVCAL_FP8W_TENSOR:
        return 4 + rows;
    case KVCAL_FP8W_CHANNEL:
        return rows;
    case KVCAL_FP8W_BLOCK:
        return (rows + f->block_n - 1) / f->block_n *
               kvcal_fp8_block_ld(cols, f->block_k);
    default:
        return 0;
    }
}

/* The scale of weight element (r, c) in that layout. */
static inline KVCAL_HOST_DEVICE float kvcal_fp8_weight_scale_at(const kvcal_fp8_linear *f,
                                                                const float *scales,
                                                                int64_t r, int64_t c,
                                                                int64_t cols)
{
    switch (f->w) {
    case KVCAL_FP8W_TENSOR:
        return scales[0];
    case KVCAL_FP8W_CHANNEL:
        return scales[r];
    default:
        return scales[r / f->block_n * kvcal_fp8_block_ld(cols, f->block_k) +
                      c / f->block_k];
    }
}

#endif
