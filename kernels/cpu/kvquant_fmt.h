/* kernels/cpu/kvquant_fmt.h: what the CPU reference (kvquant_fmt_ref.c) and
 * the CUDA kernels (kernels/cuda/kvquant_fmt.cu) of the cache formats
 * beyond e4m3 (include/kvcal_quant.h, kvcal_kv_format) share, so that both
 * compute the same bytes: a row's parameters, each value's code and its
 * dequantized value, the argument checks. Every product is written out so
 * that no compiler contracts it into an fma (the one fma, of INT8_ASYM's
 * dequantization, is explicit on both sides). */
#ifndef KVCAL_KERNELS_CPU_KVQUANT_FMT_H
#define KVCAL_KERNELS_CPU_KVQUANT_FMT_H

#include <math.h>
#include <stdint.h>

#include "core/kvformat.h"
#include "kernels/cpu/kvquant_ref.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVCAL_KV_INT8_MAX 127.0f
#define KVCAL_KV_INT8_SCALE_FLOOR 1e-6f /* vLLM's int8_per_token_head floor */
#define KVCAL_KV_NVFP4_BLOCK 16

/* The parameters one (token, head) row is quantized with. */
typedef struct kvcal_kvfmt_row {
    float scale; /* INT8 / INT8_ASYM scale, NVFP4 global scale g */
    float zero;  /* INT8_ASYM zero point */
    float inv;   /* 1 / scale, 0 when scale is 0 */
} kvcal_kvfmt_row;

static inline KVCAL_HOST_DEVICE kvcal_kvfmt_row kvcal_kvfmt_row_make(float scale,
                                                                     float zero)
{
    kvcal_kvfmt_row r = {scale, zero, scale > 0.0f ? 1.0f / scale : 0.0f};
    return r;
}

/* Dynamic INT8 scale of a row of finite absmax a. */
static inline KVCAL_HOST_DEVICE float kvcal_kvfmt_int8_scale(float absmax)
{
    float s = absmax / KVCAL_KV_INT8_MAX;
    return s > KVCAL_KV_INT8_SCALE_FLOOR ? s : KVCAL_KV_INT8_SCALE_FLOOR;
}

/* Dynamic INT8_ASYM parameters of a row whose finite values span [mn, mx]
 * (mn > mx: no finite value). */
static inline KVCAL_HOST_DEVICE kvcal_kvfmt_row kvcal_kvfmt_asym_row(float mn, float mx)
{
    if (mn > mx)
        mn = mx = 0.0f;
    return kvcal_kvfmt_row_make((mx - mn) / 255.0f, mn);
}

/* kvcal_kvfmt_int8_scale and kvcal_kvfmt_asym_row without an fp32
 * division (a multi-instruction sequence with a branch on the GPU): a / 127
 * and a / 255 in fp32 equal the double products a * (1 / 127.0) and
 * a * (1 / 255.0) rounded to fp32 for every finite a >= 0 (the double
 * product is within 2^-52 of the quotient, relative; a quotient of a 24-bit
 * significand by 2^k - 1 is never closer than ~2^-33 to the midpoint of two
 * fp32 values; checked on all 2^31 non-negative finite floats as well), and
 * both are odd in a. What the CUDA kernels compute. */
static inline KVCAL_HOST_DEVICE float kvcal_kvfmt_int8_scale_dmul(float absmax)
{
    float s = (float)((double)absmax * (1.0 / 127.0));
    return s > KVCAL_KV_INT8_SCALE_FLOOR ? s : KVCAL_KV_INT8_SCALE_FLOOR;
}

static inline KVCAL_HOST_DEVICE kvcal_kvfmt_row kvcal_kvfmt_asym_row_dmul(float mn,
                                                                          float mx)
{
    if (mn > mx)
        mn = mx = 0.0f;
    return kvcal_kvfmt_row_make((float)((double)(mx - mn) * (1.0 / 255.0)), mn);
}

/* e2m1(y)'s magnitude code shifted left by 22 (0 to 7 << 22) for y not NaN,
 * in fp32 arithmetic alone: the e2m1 of the format kernels' v2 (timed in
 * bench/kvquant_fmt_v2.cuh; the kernels now take kvcal_fp4_e2m1_r6): |y|
 * clamped at 6 is rounded to the e2m1 grid by adding and
 * subtracting 1.5 * 2^(22 + e), e the binade of max(|y|, 1), whose ulp is
 * the grid's spacing there (0.5 * 2^e), so that the fp32 adder rounds to
 * nearest even on the grid; the grid value times 2^-126 is encoded in fp32
 * as the e2m1 code shifted by 22 (e2m1's 0.5 becomes the fp32 subnormal
 * 2^-127). Equals (kvcal_fp4_e2m1_from_float(y) & 7) << 22 for every
 * non-NaN float (checked on all of them; tests/test_kvquant_fmt.c checks a
 * sample). */
static inline KVCAL_HOST_DEVICE uint32_t kvcal_fp4_e2m1_mag22(float y)
{
    const float a = fminf(fabsf(y), KVCAL_FP4_E2M1_MAX);
    const float m = kvcal_fp8_bits_float(
        (kvcal_fp8_float_bits(fmaxf(a, 1.0f)) & 0x7f800000u) + 0x0b400000u);
    const float r = (a + m) - m;
    return kvcal_fp8_float_bits(r * 0x1p-126f);
}

/* RNE_e2m1(min(|y|, 6)) x 2^-6 for y not NaN, in fp32 arithmetic alone,
 * exactly, from y16 = y x 2^16 (exact but for y >= 2^112, where both clamp
 * at 6): the e4m3 byte of the result is e2m1(y)'s magnitude code shifted
 * left by 2 (e2m1's 2 exponent and 1 mantissa bits are e4m3's bits 2-4 at
 * this scale), which lets GPUs without an e2m1 conversion (before sm_100)
 * convert two values an instruction with their e4m3 conversion. a = min(|y|,
 * 6) x 2^16 is rounded to the e2m1 grid by adding m = 2^(16 + e), e the
 * binade of max(|y|, 1), to a x 2^-22 in one fma and subtracting it: the
 * fma's result stays in m's binade, whose ulp, 2^(e - 7), is the grid's
 * spacing (2^(e - 1)) times 2^-6, so the fma rounds to nearest even on the
 * grid (m is 2^16 times a power of two: the scale keeps the 5 instructions
 * free of an exponent adjustment). Checked on all 4,278,190,082 non-NaN
 * floats y ((kvcal_fp8_e4m3_from_float(r) >> 2) | sign equals
 * kvcal_fp4_e2m1_from_float(y), and no other bit of the byte is set);
 * tests/test_kvquant_fmt.c checks a sample. The fast CUDA kernel passes
 * x * (inv_d x 2^16) for y16, which is y x 2^16 rounded once: the same but
 * where y is subnormal, whose code is 0 either way. */
static inline KVCAL_HOST_DEVICE float kvcal_fp4_e2m1_r6(float y16)
{
    const float a = fminf(fabsf(y16), KVCAL_FP4_E2M1_MAX * 0x1p16f);
    const float m =
        kvcal_fp8_bits_float(kvcal_fp8_float_bits(fmaxf(a, 0x1p16f)) & 0x7f800000u);
    return fmaf(a, 0x1p-22f, m) - m;
}

/* The byte of x in an 8-bit format (FP8_E5M2, INT8, INT8_ASYM). */
static inline KVCAL_HOST_DEVICE uint8_t kvcal_kvfmt_code(int format, int rounding,
                                                         kvcal_kvfmt_row r, float x)
{
    if (format == KVCAL_KV_FORMAT_FP8_E5M2)
        return kvcal_fp8_e5m2_from_float(x);
    if (format == KVCAL_KV_FORMAT_INT8)
        return (uint8_t)(int8_t)kvcal_int_code(x * r.inv, rounding, -128.0f, 127.0f);
    float y = (x - r.zero) * r.inv;
    return (uint8_t)kvcal_int_code(y, rounding, 0.0f, 255.0f);
}

/* The value of byte q of an 8-bit format. */
static inline KVCAL_HOST_DEVICE float kvcal_kvfmt_value(int format, kvcal_kvfmt_row r,
                                                        uint8_t q)
{
    if (format == KVCAL_KV_FORMAT_FP8_E5M2)
        return kvcal_fp8_e5m2_to_float(q);
    if (format == KVCAL_KV_FORMAT_INT8)
        return (float)(int8_t)q * r.scale;
    return fmaf((float)q, r.scale, r.zero);
}

/* NVFP4: the e4m3 scale byte of a block of finite absmax amax under global
 * scale g (r.scale, r.inv = 1 / g), and through *d the block's decode
 * scale e4m3_value(byte) * g. */
static inline KVCAL_HOST_DEVICE uint8_t kvcal_kvfmt_nvfp4_block(kvcal_kvfmt_row r,
                                                                float amax, float *d)
{
    float sf = (amax * (1.0f / KVCAL_FP4_E2M1_MAX)) * r.inv;
    uint8_t s = kvcal_fp8_e4m3_from_float(sf);
    *d = kvcal_fp8_e4m3_to_float(s) * r.scale;
    return s;
}

/* NVFP4: the e2m1 nibble of x in a block of decode scale d. */
static inline KVCAL_HOST_DEVICE uint8_t kvcal_kvfmt_nvfp4_code(float d, float x)
{
    float inv_d = d > 0.0f ? 1.0f / d : 0.0f;
    return kvcal_fp4_e2m1_from_float(x * inv_d);
}

/* NVFP4: where block scale s of slot offset off lies in K's (kv 0) or
 * V's (kv 1) scale region of a cache block: the region's row *t (a slot
 * offset; with the head, the row is t * H + head in NHD, head * bs + t in
 * HND) and its byte *ss in that row of S = head_dim / 16 bytes (off and s
 * non-negative). V's scales are swizzled for the trtllm-gen kernels when bs
 * and S are multiples of 4: the scales of 4 consecutive slots interleaved,
 * S / 4 of a slot in each of the 4 rows. */
static inline KVCAL_HOST_DEVICE void
kvcal_kvfmt_nvfp4_swizzle(int bs, int S, int off, int s, int kv, int *t, int *ss)
{
    *t = off, *ss = s;
    if (kv == 1 && bs % 4 == 0 && S % 4 == 0) { /* unsigned: no sign fix-up */
        const unsigned o = (unsigned)off, b = (unsigned)s, sg = (unsigned)S / 4u;
        *t = (int)((o & ~3u) + b / sg);
        *ss = (int)(b % sg * 4u + (o & 3u));
    }
}

/* NVFP4: byte offset of block scale s of (block, off, head) in K's (kv 0)
 * or V's (kv 1) cache of geometry g (g.row_bytes: the data bytes of a row,
 * head_dim / 2; see kvcal_kv_nvfp4_scale_offset in include/kvcal_quant.h). */
static inline KVCAL_HOST_DEVICE int64_t kvcal_kvfmt_nvfp4_scale_at(kvcal_kv_geom g,
                                                                   int64_t block,
                                                                   int64_t off, int head,
                                                                   int s, int kv)
{
    const int S = g.head_dim / KVCAL_KV_NVFP4_BLOCK;
    int t, ss;
    kvcal_kvfmt_nvfp4_swizzle(g.block_size, S, (int)off, s, kv, &t, &ss);
    int64_t row = g.layout == KVCAL_CACHE_NHD ? (int64_t)t * g.num_kv_heads + head
                                              : (int64_t)head * g.block_size + t;
    return block * g.block_stride + (int64_t)g.block_size * g.num_kv_heads * g.row_bytes +
           row * S + ss;
}

/* Checks a format call's arguments for `fn` (quantize: need_data 1); fills
 * *g: rows of the format's bytes, NVFP4's of its data bytes alone (its
 * scales are addressed by kvcal_kvfmt_nvfp4_scale_at). */
kvcal_status kvcal_kvfmt_check(const char *fn, const kvcal_kv_batch *batch,
                               const kvcal_kv_cache *cache, const kvcal_kv_qparams *p,
                               int need_data, kvcal_kv_geom *g);

/* kvcal_kvfmt_check for a dequantization of `fn`, and its outputs. */
kvcal_status kvcal_kvfmt_dequantize_check(const char *fn, const kvcal_kv_batch *batch,
                                          const kvcal_kv_cache *cache,
                                          const kvcal_kv_qparams *p, const void *k_out,
                                          const void *v_out, kvcal_dtype out_dtype,
                                          kvcal_kv_geom *g);

#ifdef __cplusplus
}
#endif

#endif
