/* kernels/cpu/kvquant_ref.c: CPU reference of the online FP8 KV quantization
 * (include/kvcal_quant.h): static, dynamic per (token, head) and running
 * per-head scales, dequantization, and the scaler object. The CUDA kernels
 * (kernels/cuda/kvquant.cu) must match these bytes exactly. */
#include "kernels/cpu/kvquant_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "kernels/kv_device_memory.h"

// --- element conversions (exact where the format allows, RNE otherwise) ---

static uint32_t float_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Round to nearest even; NaN -> 0x7fff; overflow -> +-Inf (as
 * __float2half_rn). */
static uint16_t float_to_f16(float f)
{
    uint32_t x = float_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u)
        return 0x7fffu;
    if (a >= 0x477ff000u) /* >= 65520: rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* >= 2^-14: normal half */
        uint32_t r = a - 0x38000000u;
        uint32_t h = r >> 13, rem = r & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    if (a <= 0x33000000u) /* <= 2^-25: rounds to zero */
        return sign;
    uint32_t e = a >> 23;
    uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u),
             half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

/* Round to nearest even; NaN -> 0x7fff (as __float2bfloat16_rn). */
static uint16_t float_to_bf16(float f)
{
    uint32_t x = float_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return 0x7fffu;
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

void kvcal_kv_store_elem(void *p, kvcal_dtype dtype, int64_t i, float v)
{
    switch (dtype) {
    case KVCAL_DTYPE_F16:
        ((uint16_t *)p)[i] = float_to_f16(v);
        return;
    case KVCAL_DTYPE_BF16:
        ((uint16_t *)p)[i] = float_to_bf16(v);
        return;
    default:
        break; /* F32 (dtype_ok refuses the rest) */
    }
    ((float *)p)[i] = v;
}

// --- argument checks (shared with the launches) --------------------------

int kvcal_kv_dtype_ok(kvcal_dtype d)
{
    return d == KVCAL_DTYPE_F32 || d == KVCAL_DTYPE_F16 || d == KVCAL_DTYPE_BF16;
}

kvcal_status kvcal_kv_check_args(const char *fn, const kvcal_kv_batch *batch,
                                 const kvcal_kv_cache *cache, int need_data,
                                 int need_scales, kvcal_kv_geom *g)
{
    int64_t row_bytes = cache ? cache->head_dim : 0;
    return kvcal_kv_check_args_rows(fn, batch, cache, need_data, need_scales, row_bytes,
                                    g);
}

kvcal_status kvcal_kv_check_args_rows(const char *fn, const kvcal_kv_batch *batch,
                                      const kvcal_kv_cache *cache, int need_data,
                                      int need_scales, int64_t row_bytes,
                                      kvcal_kv_geom *g)
{
    if (!batch || !cache)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: batch or cache is NULL: pass both",
                          fn);
    if (!cache->k || !cache->v)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: cache.k or cache.v is NULL: pass the K and V caches", fn);
    if (cache->num_blocks < 0 || cache->block_size < 1)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: cache has %lld blocks of %d slots: need num_blocks >= 0, "
                          "block_size >= 1",
                          fn, (long long)cache->num_blocks, cache->block_size);
    if (cache->num_kv_heads < 1 || cache->num_kv_heads > KVCAL_KV_MAX_HEADS)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: cache.num_kv_heads %d out of [1, %d]", fn,
                          cache->num_kv_heads, KVCAL_KV_MAX_HEADS);
    if (cache->head_dim < 1 || cache->head_dim > KVCAL_KV_MAX_HEAD_DIM)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: cache.head_dim %d out of [1, %d]",
                          fn, cache->head_dim, KVCAL_KV_MAX_HEAD_DIM);
    if (cache->layout != KVCAL_CACHE_NHD && cache->layout != KVCAL_CACHE_HND)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: cache.layout %d is neither NHD nor HND", fn,
                          (int)cache->layout);
    int64_t block_bytes = (int64_t)cache->block_size * cache->num_kv_heads * row_bytes;
    if (cache->block_stride != 0 && cache->block_stride < block_bytes)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: cache.block_stride %lld < one block (%lld bytes): pass 0 "
                          "for a contiguous cache",
                          fn, (long long)cache->block_stride, (long long)block_bytes);
    if (need_scales && (!cache->k_scale || !cache->v_scale))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: cache.k_scale / v_scale are NULL: this mode records a "
                          "scale per (token, head) there",
                          fn);
    if (batch->num_tokens < 0 || (batch->num_tokens > 0 && !batch->slot_mapping))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: batch of %lld tokens without a slot_mapping", fn,
                          (long long)batch->num_tokens);
    if (need_data) {
        if (!kvcal_kv_dtype_ok(batch->dtype))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "%s: batch.dtype %d is not F32, F16 or BF16", fn,
                              (int)batch->dtype);
        if (batch->num_tokens > 0 && (!batch->k || !batch->v))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: batch.k or batch.v is NULL",
                              fn);
        int64_t row = (int64_t)(cache->num_kv_heads - 1);
        if (batch->k_head_stride < cache->head_dim ||
            batch->v_head_stride < cache->head_dim ||
            batch->k_token_stride < row * batch->k_head_stride + cache->head_dim ||
            batch->v_token_stride < row * batch->v_head_stride + cache->head_dim)
            return kvcal_fail(
                KVCAL_ERR_INVALID_ARG,
                "%s: batch strides (K %lld/%lld, V %lld/%lld elements per token/head) "
                "overlap rows of %d heads x %d: strides are in elements",
                fn, (long long)batch->k_token_stride, (long long)batch->k_head_stride,
                (long long)batch->v_token_stride, (long long)batch->v_head_stride,
                cache->num_kv_heads, cache->head_dim);
    }
    g->capacity = cache->num_blocks * cache->block_size;
    g->block_stride = cache->block_stride ? cache->block_stride : block_bytes;
    g->block_size = cache->block_size;
    g->num_kv_heads = cache->num_kv_heads;
    g->head_dim = cache->head_dim;
    g->layout = (int)cache->layout;
    g->row_bytes = row_bytes;
    return KVCAL_OK;
}

kvcal_status kvcal_kv_check_static(const char *fn, kvcal_granularity granularity,
                                   const float *k_scale, const float *v_scale)
{
    if (granularity != KVCAL_GRANULARITY_TENSOR && granularity != KVCAL_GRANULARITY_HEAD)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: granularity %d is neither TENSOR nor HEAD", fn,
                          (int)granularity);
    if (!k_scale || !v_scale)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: k_scale or v_scale is NULL: pass the static scales", fn);
    return KVCAL_OK;
}

static kvcal_status check_scale_values(const char *fn, const float *s, int n,
                                       const char *which)
{
    for (int i = 0; i < n; i++)
        if (!kvcal_scale_is_valid(s[i]))
            return kvcal_fail(KVCAL_ERR_NONFINITE,
                              "%s: %s[%d] = %g: scales must be finite and > 0", fn, which,
                              i, (double)s[i]);
    return KVCAL_OK;
}

// --- quantization ---------------------------------------------------------

/* Quantizes one of K (kv 0) or V (kv 1) of every valid token. scales: the
 * static per-head scales indexed h * scale_step (scale_step 0 = per tensor),
 * or NULL for the dynamic per (token, head) scale. scale_out: where the used
 * scales are recorded, or NULL. */
static void quantize_rows(const kvcal_kv_batch *b, kvcal_kv_geom g, const void *src,
                          int64_t token_stride, int64_t head_stride, uint8_t *dst,
                          const float *scales, int scale_step, float *scale_out)
{
    float row[KVCAL_KV_MAX_HEAD_DIM];
    for (int64_t t = 0; t < b->num_tokens; t++) {
        int64_t slot = b->slot_mapping[t];
        if (slot < 0 || slot >= g.capacity)
            continue;
        for (int h = 0; h < g.num_kv_heads; h++) {
            int64_t base = t * token_stride + h * head_stride;
            float absmax = 0.0f;
            for (int d = 0; d < g.head_dim; d++) {
                row[d] = kvcal_kv_load_elem(src, b->dtype, base + d);
                absmax = fmaxf(absmax, kvcal_kv_finite_abs(row[d]));
            }
            float scale =
                scales ? scales[h * scale_step] : kvcal_scale_from_absmax(absmax);
            float inv = 1.0f / scale;
            uint8_t *out = dst + kvcal_kv_cache_offset(g, slot, h);
            for (int d = 0; d < g.head_dim; d++)
                out[d] = kvcal_fp8_e4m3_from_float(row[d] * inv);
            if (scale_out)
                scale_out[kvcal_kv_scale_index(g, slot, h)] = scale;
        }
    }
}

static void quantize_kv(const kvcal_kv_batch *b, const kvcal_kv_cache *c, kvcal_kv_geom g,
                        const float *k_scale, const float *v_scale, int scale_step)
{
    quantize_rows(b, g, b->k, b->k_token_stride, b->k_head_stride, c->k, k_scale,
                  scale_step, c->k_scale);
    quantize_rows(b, g, b->v, b->v_token_stride, b->v_head_stride, c->v, v_scale,
                  scale_step, c->v_scale);
}

kvcal_status kvcal_kv_quantize_static_ref(const kvcal_kv_batch *batch,
                                          const kvcal_kv_cache *cache,
                                          kvcal_granularity granularity,
                                          const float *k_scale, const float *v_scale)
{
    static const char fn[] = "kvcal_kv_quantize_static_ref";
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kv_check_args(fn, batch, cache, 1, 0, &g);
    if (st == KVCAL_OK)
        st = kvcal_kv_check_static(fn, granularity, k_scale, v_scale);
    if (st != KVCAL_OK)
        return st;
    int n = granularity == KVCAL_GRANULARITY_HEAD ? g.num_kv_heads : 1;
    if ((st = check_scale_values(fn, k_scale, n, "k_scale")) != KVCAL_OK ||
        (st = check_scale_values(fn, v_scale, n, "v_scale")) != KVCAL_OK)
        return st;
    quantize_kv(batch, cache, g, k_scale, v_scale, granularity == KVCAL_GRANULARITY_HEAD);
    return KVCAL_OK;
}

kvcal_status kvcal_kv_quantize_dynamic_ref(const kvcal_kv_batch *batch,
                                           const kvcal_kv_cache *cache)
{
    kvcal_kv_geom g;
    kvcal_status st =
        kvcal_kv_check_args("kvcal_kv_quantize_dynamic_ref", batch, cache, 1, 1, &g);
    if (st != KVCAL_OK)
        return st;
    quantize_kv(batch, cache, g, NULL, NULL, 0);
    return KVCAL_OK;
}

// --- running scaler -------------------------------------------------------

kvcal_status kvcal_kv_scaler_create(int num_kv_heads, kvcal_scaler_mode mode,
                                    float ema_alpha, int on_device,
                                    kvcal_kv_scaler_t **out)
{
    static const char fn[] = "kvcal_kv_scaler_create";
    if (!out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (num_kv_heads < 1 || num_kv_heads > KVCAL_KV_MAX_HEADS)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: num_kv_heads %d out of [1, %d]", fn,
                          num_kv_heads, KVCAL_KV_MAX_HEADS);
    if (mode != KVCAL_SCALER_RUNNING_MAX && mode != KVCAL_SCALER_EMA &&
        mode != KVCAL_SCALER_FIRST_BATCH)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: unknown mode %d", fn, (int)mode);
    if (mode == KVCAL_SCALER_EMA && !(ema_alpha > 0.0f && ema_alpha <= 1.0f))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: ema_alpha %g out of (0, 1]", fn,
                          (double)ema_alpha);
    kvcal_kv_scaler_t *s = calloc(1, sizeof *s);
    if (!s)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", fn);
    s->num_kv_heads = num_kv_heads;
    s->mode = mode;
    s->ema_alpha = ema_alpha;
    s->on_device = on_device != 0;
    /* 6 H floats, 2 H + 1 flags, then the 64-bit counters */
    size_t word_bytes =
        ((size_t)(8 * num_kv_heads + 1) * sizeof(float) + 7) & ~(size_t)7;
    size_t bytes = word_bytes + 3 * sizeof(int64_t);
    kvcal_status st = KVCAL_OK;
    if (s->on_device)
        st = kvcal_kv_device_alloc(bytes, &s->slab);
    else if (!(s->slab = calloc(1, bytes)))
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", fn);
    if (st != KVCAL_OK) {
        free(s);
        return st;
    }
    float *f = (float *)s->slab;
    for (int kv = 0; kv < 2; kv++) {
        s->scale[kv] = f + (size_t)(0 + kv) * num_kv_heads;
        s->state[kv] = f + (size_t)(2 + kv) * num_kv_heads;
        s->batch_absmax[kv] = f + (size_t)(4 + kv) * num_kv_heads;
        s->grown[kv] = (unsigned int *)(f + (size_t)(6 + kv) * num_kv_heads);
    }
    s->any_grown = (unsigned int *)(f + (size_t)8 * num_kv_heads);
    s->steps = (int64_t *)((char *)s->slab + word_bytes);
    s->batch_tokens = s->steps + 1;
    s->blocks_done = (unsigned int *)(s->steps + 2);
    *out = s;
    return KVCAL_OK;
}

void kvcal_kv_scaler_destroy(kvcal_kv_scaler_t *scaler)
{
    if (!scaler)
        return;
    if (scaler->on_device)
        kvcal_kv_device_free(scaler->slab);
    else
        free(scaler->slab);
    free(scaler);
}

kvcal_status kvcal_kv_scaler_scales(const kvcal_kv_scaler_t *scaler,
                                    const float **k_scale, const float **v_scale)
{
    if (!scaler || !k_scale || !v_scale)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_kv_scaler_scales: NULL argument");
    *k_scale = scaler->scale[0];
    *v_scale = scaler->scale[1];
    return KVCAL_OK;
}

kvcal_status kvcal_kv_scaler_read(const kvcal_kv_scaler_t *scaler,
                                  struct CUstream_st *stream, float *k_scale,
                                  float *v_scale, int64_t *steps)
{
    if (!scaler)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_kv_scaler_read: scaler is NULL");
    size_t n = (size_t)scaler->num_kv_heads * sizeof(float);
    const void *src[3] = {scaler->scale[0], scaler->scale[1], scaler->steps};
    void *dst[3] = {k_scale, v_scale, steps};
    size_t len[3] = {n, n, sizeof(int64_t)};
    for (int i = 0; i < 3; i++) {
        if (!dst[i])
            continue;
        if (!scaler->on_device) {
            memcpy(dst[i], src[i], len[i]);
            continue;
        }
        kvcal_status st = kvcal_kv_device_read(dst[i], src[i], len[i], stream);
        if (st != KVCAL_OK)
            return st;
    }
    return KVCAL_OK;
}

kvcal_status kvcal_kv_scaler_grown(const kvcal_kv_scaler_t *scaler,
                                   struct CUstream_st *stream, int *grown)
{
    if (!scaler || !grown)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_kv_scaler_grown: NULL argument");
    *grown = 0;
    size_t n = (size_t)scaler->num_kv_heads;
    unsigned int flags[2 * KVCAL_KV_MAX_HEADS];
    for (int kv = 0; kv < 2; kv++) {
        if (!scaler->on_device) {
            memcpy(flags + kv * n, scaler->grown[kv], n * sizeof(unsigned int));
            continue;
        }
        kvcal_status st = kvcal_kv_device_read(flags + kv * n, scaler->grown[kv],
                                               n * sizeof(unsigned int), stream);
        if (st != KVCAL_OK)
            return st;
    }
    for (size_t i = 0; i < 2 * n; i++)
        *grown += flags[i] != 0;
    return KVCAL_OK;
}

/* Checks a scaler step's arguments, shared by the reference and the launch. */
kvcal_status kvcal_kv_scaler_check(const char *fn, const kvcal_kv_scaler_t *scaler,
                                   int on_device, const kvcal_kv_batch *batch,
                                   const kvcal_kv_cache *cache, kvcal_kv_geom *g)
{
    if (!scaler)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: scaler is NULL", fn);
    if (scaler->on_device != on_device)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: the scaler lives on the %s: create it with on_device = %d",
                          fn, scaler->on_device ? "device" : "host", on_device);
    kvcal_status st = kvcal_kv_check_args(fn, batch, cache, 1,
                                          scaler->mode != KVCAL_SCALER_FIRST_BATCH, g);
    if (st != KVCAL_OK)
        return st;
    if (g->num_kv_heads != scaler->num_kv_heads)
        return kvcal_fail(KVCAL_ERR_MISMATCH, "%s: cache has %d kv heads, the scaler %d",
                          fn, g->num_kv_heads, scaler->num_kv_heads);
    return KVCAL_OK;
}

static void absmax_rows(const kvcal_kv_batch *b, kvcal_kv_geom g, const void *src,
                        int64_t token_stride, int64_t head_stride, float *absmax)
{
    for (int64_t t = 0; t < b->num_tokens; t++) {
        int64_t slot = b->slot_mapping[t];
        if (slot < 0 || slot >= g.capacity)
            continue;
        for (int h = 0; h < g.num_kv_heads; h++)
            for (int d = 0; d < g.head_dim; d++) {
                float a = kvcal_kv_finite_abs(
                    kvcal_kv_load_elem(src, b->dtype, t * token_stride + h * head_stride + d));
                absmax[h] = fmaxf(absmax[h], a);
            }
    }
}

kvcal_status kvcal_kv_scaler_quantize_ref(kvcal_kv_scaler_t *scaler,
                                          const kvcal_kv_batch *batch,
                                          const kvcal_kv_cache *cache)
{
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kv_scaler_check("kvcal_kv_scaler_quantize_ref", scaler, 0,
                                            batch, cache, &g);
    if (st != KVCAL_OK)
        return st;
    int64_t valid = 0;
    for (int64_t t = 0; t < batch->num_tokens; t++)
        valid += batch->slot_mapping[t] >= 0 && batch->slot_mapping[t] < g.capacity;
    memset(scaler->grown[0], 0, sizeof(unsigned int) * (size_t)g.num_kv_heads);
    memset(scaler->grown[1], 0, sizeof(unsigned int) * (size_t)g.num_kv_heads);
    *scaler->any_grown = 0;
    if (valid == 0)
        return KVCAL_OK;
    absmax_rows(batch, g, batch->k, batch->k_token_stride, batch->k_head_stride,
                scaler->batch_absmax[0]);
    absmax_rows(batch, g, batch->v, batch->v_token_stride, batch->v_head_stride,
                scaler->batch_absmax[1]);
    for (int kv = 0; kv < 2; kv++)
        for (int h = 0; h < g.num_kv_heads; h++) {
            float before = scaler->scale[kv][h];
            kvcal_kv_scaler_fold((int)scaler->mode, scaler->ema_alpha, *scaler->steps,
                                 scaler->batch_absmax[kv][h], &scaler->state[kv][h],
                                 &scaler->scale[kv][h]);
            scaler->batch_absmax[kv][h] = 0.0f;
            scaler->grown[kv][h] = scaler->scale[kv][h] != before;
            *scaler->any_grown |= scaler->grown[kv][h];
        }
    (*scaler->steps)++;
    quantize_kv(batch, cache, g, scaler->scale[0], scaler->scale[1], 1);
    return KVCAL_OK;
}

// --- dequantization -------------------------------------------------------

static void dequantize_rows(const kvcal_kv_batch *b, kvcal_kv_geom g, const uint8_t *src,
                            const float *token_scales, const float *scales,
                            int scale_step, void *out, kvcal_dtype out_dtype)
{
    for (int64_t t = 0; t < b->num_tokens; t++) {
        int64_t slot = b->slot_mapping[t];
        if (slot < 0 || slot >= g.capacity)
            continue;
        for (int h = 0; h < g.num_kv_heads; h++) {
            float scale = token_scales ? token_scales[kvcal_kv_scale_index(g, slot, h)]
                                       : scales[h * scale_step];
            const uint8_t *in = src + kvcal_kv_cache_offset(g, slot, h);
            int64_t o = (t * g.num_kv_heads + h) * g.head_dim;
            for (int d = 0; d < g.head_dim; d++)
                kvcal_kv_store_elem(out, out_dtype, o + d,
                                    kvcal_fp8_e4m3_to_float(in[d]) * scale);
        }
    }
}

/* Checks a dequantization's arguments, shared by the reference and the launch. */
kvcal_status kvcal_kv_dequantize_check(const char *fn, const kvcal_kv_batch *batch,
                                       const kvcal_kv_cache *cache,
                                       kvcal_granularity granularity,
                                       const float *k_scale, const float *v_scale,
                                       const void *k_out, const void *v_out,
                                       kvcal_dtype out_dtype, kvcal_kv_geom *g)
{
    kvcal_status st = kvcal_kv_check_args(fn, batch, cache, 0, 0, g);
    if (st != KVCAL_OK)
        return st;
    if (!cache->k_scale != !cache->v_scale)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "%s: only one of cache.k_scale / v_scale is set: set both or neither", fn);
    if (!cache->k_scale &&
        (st = kvcal_kv_check_static(fn, granularity, k_scale, v_scale)) != KVCAL_OK)
        return st;
    return kvcal_kv_check_outputs(fn, batch, k_out, v_out, out_dtype);
}

kvcal_status kvcal_kv_check_outputs(const char *fn, const kvcal_kv_batch *batch,
                                    const void *k_out, const void *v_out,
                                    kvcal_dtype out_dtype)
{
    if (!kvcal_kv_dtype_ok(out_dtype))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: out_dtype %d is not F32, F16 or BF16", fn, (int)out_dtype);
    if (batch->num_tokens > 0 && (!k_out || !v_out))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: k_out or v_out is NULL", fn);
    return KVCAL_OK;
}

kvcal_status kvcal_kv_dequantize_ref(const kvcal_kv_batch *batch,
                                     const kvcal_kv_cache *cache,
                                     kvcal_granularity granularity, const float *k_scale,
                                     const float *v_scale, void *k_out, void *v_out,
                                     kvcal_dtype out_dtype)
{
    static const char fn[] = "kvcal_kv_dequantize_ref";
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kv_dequantize_check(fn, batch, cache, granularity, k_scale,
                                                v_scale, k_out, v_out, out_dtype, &g);
    if (st != KVCAL_OK)
        return st;
    int step = granularity == KVCAL_GRANULARITY_HEAD;
    if (!cache->k_scale &&
        ((st = check_scale_values(fn, k_scale, step ? g.num_kv_heads : 1, "k_scale")) !=
             KVCAL_OK ||
         (st = check_scale_values(fn, v_scale, step ? g.num_kv_heads : 1, "v_scale")) !=
             KVCAL_OK))
        return st;
    dequantize_rows(batch, g, cache->k, cache->k_scale, k_scale, step, k_out, out_dtype);
    dequantize_rows(batch, g, cache->v, cache->v_scale, v_scale, step, v_out, out_dtype);
    return KVCAL_OK;
}
