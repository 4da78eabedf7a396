/* kernels/cpu/kvquant_ref.h: what the CPU reference (kvquant_ref.c) and the
 * CUDA kernels (kernels/cuda/kvquant.cu) of the online KV quantization
 * share, so that both compute the same bytes: the argument checks, the cache
 * geometry and addressing, and the running-scaler state and update rule.
 * Public API: include/kvcal_quant.h. */
#ifndef KVCAL_KERNELS_CPU_KVQUANT_REF_H
#define KVCAL_KERNELS_CPU_KVQUANT_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/fp8.h"
#include "core/scale_rule.h"
#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVCAL_KV_MAX_HEADS 1024
#define KVCAL_KV_MAX_HEAD_DIM 1024

/* Cache geometry resolved from a kvcal_kv_cache, passed by value to kernels. */
typedef struct kvcal_kv_geom {
    int64_t capacity;     /* num_blocks * block_size slots */
    int64_t block_stride; /* bytes between blocks */
    int block_size;
    int num_kv_heads;
    int head_dim;
    int layout;        /* kvcal_cache_layout */
    int64_t row_bytes; /* bytes of one (slot, head) row: head_dim, or a packed format's */
} kvcal_kv_geom;

/* slot = block * block_size + off, in 32-bit arithmetic when the slot fits
 * (a 64-bit division costs a GPU thread dozens of instructions). */
static inline KVCAL_HOST_DEVICE void kvcal_kv_slot_split(kvcal_kv_geom g, int64_t slot,
                                                         int64_t *block, int64_t *off)
{
    if (slot <= 0xffffffffLL) {
        uint32_t b = (uint32_t)slot / (uint32_t)g.block_size;
        *block = b;
        *off = (int64_t)((uint32_t)slot - b * (uint32_t)g.block_size);
    } else {
        *block = slot / g.block_size;
        *off = slot - *block * g.block_size;
    }
}

/* Byte offset of (head, 0) of slot block * block_size + off. */
static inline KVCAL_HOST_DEVICE int64_t kvcal_kv_cache_offset_at(kvcal_kv_geom g,
                                                                 int64_t block,
                                                                 int64_t off, int head)
{
    int64_t row = g.layout == KVCAL_CACHE_NHD ? off * g.num_kv_heads + head
                                              : (int64_t)head * g.block_size + off;
    return block * g.block_stride + row * g.row_bytes;
}

/* Byte offset of (slot, head, 0) in a cache of geometry g. */
static inline KVCAL_HOST_DEVICE int64_t kvcal_kv_cache_offset(kvcal_kv_geom g,
                                                              int64_t slot, int head)
{
    int64_t block, off;
    kvcal_kv_slot_split(g, slot, &block, &off);
    return kvcal_kv_cache_offset_at(g, block, off, head);
}

/* Index of (head) of slot block * block_size + off in the per (token,
 * head) scale arrays. */
static inline KVCAL_HOST_DEVICE int64_t kvcal_kv_scale_index_at(kvcal_kv_geom g,
                                                                int64_t block,
                                                                int64_t off, int head)
{
    return g.layout == KVCAL_CACHE_NHD
               ? (block * g.block_size + off) * g.num_kv_heads + head
               : (block * g.num_kv_heads + head) * g.block_size + off;
}

/* Index of (slot, head) in the per (token, head) scale arrays. */
static inline KVCAL_HOST_DEVICE int64_t kvcal_kv_scale_index(kvcal_kv_geom g,
                                                             int64_t slot, int head)
{
    int64_t block, off;
    kvcal_kv_slot_split(g, slot, &block, &off);
    return kvcal_kv_scale_index_at(g, block, off, head);
}

/* Division by a divisor fixed per launch as a multiply and a shift (the
 * GPU's integer division is a ~20-instruction sequence): for d >= 2,
 * c = ceil(log2 d), mul = ceil(2^(31 + c) / d) (< 2^32) and
 * n / d = (n * mul) >> (31 + c) exactly for every n < 2^31, because
 * n * (mul - 2^(31 + c) / d) < 2^31 <= 2^(31 + c) / d. d = 1 has mul = 0. */
typedef struct kvcal_kv_fastdiv {
    uint32_t d, mul, shift; /* shift = c - 1 after the high 32 bits */
} kvcal_kv_fastdiv;

static inline kvcal_kv_fastdiv kvcal_kv_fastdiv_make(uint32_t d)
{
    kvcal_kv_fastdiv f = {d, 0, 0};
    if (d < 2)
        return f;
    uint32_t c = 0;
    while ((1ull << c) < d)
        c++;
    f.mul = (uint32_t)(((1ull << (31 + c)) + d - 1) / d);
    f.shift = c - 1;
    return f;
}

/* n / f.d for n < 2^31. */
static inline KVCAL_HOST_DEVICE uint32_t kvcal_kv_fastdiv_div(kvcal_kv_fastdiv f,
                                                              uint32_t n)
{
    return f.mul ? (uint32_t)(((uint64_t)n * f.mul) >> 32) >> f.shift : n;
}

/* kvcal_scale_from_absmax(absmax) without an fp32 division (a
 * multi-instruction sequence with a branch on the GPU): absmax / 448 in fp32
 * equals the double product absmax * (1 / 448) rounded to fp32 for every
 * finite absmax >= 0. Why: 1/448 = (1/7) 2^-6, the double product is within
 * 2^-52 of absmax / 448 (relative), and a quotient of a 24-bit significand by
 * 7 is never closer than 2^-28 (relative) to the midpoint of two fp32 values
 * (checked on all 2^31 non-negative finite floats as well). */
static inline KVCAL_HOST_DEVICE float kvcal_kv_scale_from_absmax_dmul(float absmax)
{
    float s = (float)((double)absmax * (1.0 / 448.0));
    return s > KVCAL_SCALE_FLOOR ? s : KVCAL_SCALE_FLOOR;
}

/* |x| when x is finite, 0 for NaN and +-Inf: what computed scales see. */
static inline KVCAL_HOST_DEVICE float kvcal_kv_finite_abs(float x)
{
    float a = x < 0.0f ? -x : x;
    return a <= 3.4028234663852886e38f ? a : 0.0f;
}

/* Element i of p, an F32, F16 or BF16 array, as a float (exact). */
static inline float kvcal_kv_load_elem(const void *p, kvcal_dtype dtype, int64_t i)
{
    uint32_t u;
    float f;
    if (dtype == KVCAL_DTYPE_F32)
        return ((const float *)p)[i];
    uint16_t x = ((const uint16_t *)p)[i];
    if (dtype == KVCAL_DTYPE_BF16) {
        u = (uint32_t)x << 16;
    } else {
        uint32_t sign = (uint32_t)(x & 0x8000u) << 16;
        uint32_t e = (x >> 10) & 0x1fu, m = x & 0x3ffu;
        if (e == 0) {
            f = (float)m * 0x1p-24f;
            return sign ? -f : f;
        }
        u = sign | (e == 0x1fu ? 0x7f800000u : (e + 112u) << 23) | (m << 13);
    }
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Checks a batch and a cache for the op named `fn`; fills *g. need_data: the
 * batch's k / v must be set; need_scales: the cache's per (token, head)
 * arrays must be set. Records the failure through kvcal_fail. */
kvcal_status kvcal_kv_check_args(const char *fn, const kvcal_kv_batch *batch,
                                 const kvcal_kv_cache *cache, int need_data,
                                 int need_scales, kvcal_kv_geom *g);

/* kvcal_kv_check_args for a cache whose (slot, head) rows hold row_bytes
 * bytes (a format other than e4m3: kernels/cpu/kvquant_fmt_ref.c). */
kvcal_status kvcal_kv_check_args_rows(const char *fn, const kvcal_kv_batch *batch,
                                      const kvcal_kv_cache *cache, int need_data,
                                      int need_scales, int64_t row_bytes,
                                      kvcal_kv_geom *g);

/* Element i of p (F32, F16 or BF16) set to v, rounded to nearest even. */
void kvcal_kv_store_elem(void *p, kvcal_dtype dtype, int64_t i, float v);

/* 1 for F32, F16 and BF16, the dtypes of K/V inputs and outputs. */
int kvcal_kv_dtype_ok(kvcal_dtype d);

/* Checks the static scale arguments of `fn` (pointers only). */
kvcal_status kvcal_kv_check_static(const char *fn, kvcal_granularity granularity,
                                   const float *k_scale, const float *v_scale);

/* Checks the outputs of a dequantization for `fn`: out_dtype F32, F16 or
 * BF16, k_out and v_out set when there are tokens. */
kvcal_status kvcal_kv_check_outputs(const char *fn, const kvcal_kv_batch *batch,
                                    const void *k_out, const void *v_out,
                                    kvcal_dtype out_dtype);

/* Checks a dequantization's arguments for `fn`; fills *g. */
kvcal_status kvcal_kv_dequantize_check(const char *fn, const kvcal_kv_batch *batch,
                                       const kvcal_kv_cache *cache,
                                       kvcal_granularity granularity,
                                       const float *k_scale, const float *v_scale,
                                       const void *k_out, const void *v_out,
                                       kvcal_dtype out_dtype, kvcal_kv_geom *g);

/* --- running scaler ------------------------------------------------------ */

/* State of a kvcal_kv_scaler_t. Every array lives in one slab, on the host
 * or on the device; index [kv] is 0 for K and 1 for V. */
struct kvcal_kv_scaler {
    int num_kv_heads;
    kvcal_scaler_mode mode;
    float ema_alpha;
    int on_device;
    float *scale[2];           /* (H) scales of new writes; 0 = unset */
    float *state[2];           /* (H) running absmax (RUNNING_MAX, FIRST_BATCH) or ema */
    float *batch_absmax[2];    /* (H) this step's absmax; zeroed after each fold */
    unsigned int *grown[2];    /* (H) 1 where the last step's fold grew the scale */
    unsigned int *any_grown;   /* (1) 1 when some grown[kv][h] is */
    int64_t *steps;            /* (1) steps with a valid token folded in */
    int64_t *batch_tokens;     /* (1) valid tokens of this step; zeroed after the fold */
    unsigned int *blocks_done; /* (1) device: blocks that finished the reduction */
    void *slab;
};

/* Checks a scaler step's arguments for `fn`: the scaler must live where
 * on_device says; the per (token, head) arrays are required unless the
 * mode is FIRST_BATCH. Fills *g. */
kvcal_status kvcal_kv_scaler_check(const char *fn, const kvcal_kv_scaler_t *scaler,
                                   int on_device, const kvcal_kv_batch *batch,
                                   const kvcal_kv_cache *cache, kvcal_kv_geom *g);

/* Number of per-head scales (K and V counted apart) that the scaler's last
 * step grew, through *grown; 0 after a step that grew none or had no valid
 * token. Synchronizes `stream` for a device scaler. For the tests: a step
 * that grows no scale is the CUDA path's one-pass case. */
kvcal_status kvcal_kv_scaler_grown(const kvcal_kv_scaler_t *scaler,
                                   struct CUstream_st *stream, int *grown);

/* Folds one head's step absmax b into its state and scale; steps is the
 * number of steps folded before this one. Scales only grow. */
static inline KVCAL_HOST_DEVICE void kvcal_kv_scaler_fold(int mode, float alpha,
                                                          int64_t steps, float b,
                                                          float *state, float *scale)
{
    if (mode == KVCAL_SCALER_FIRST_BATCH) {
        if (steps == 0) {
            *state = b;
            *scale = kvcal_scale_from_absmax(b);
        }
        return;
    }
    if (steps == 0)
        *state = b;
    else if (mode == KVCAL_SCALER_RUNNING_MAX)
        *state = *state > b ? *state : b;
    else
        *state = fmaf(alpha, b - *state, *state);
    float s = kvcal_scale_from_absmax(*state);
    *scale = *scale > s ? *scale : s;
}

#ifdef __cplusplus
}
#endif

#endif
