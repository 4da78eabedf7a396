/* kernels/cpu/kvquant_fmt_ref.c: CPU reference of the cache formats beyond
 * e4m3 (include/kvcal_quant.h, kvcal_kv_format): quantization with static
 * or dynamic per (token, head) parameters, and dequantization. The CUDA
 * kernels (kernels/cuda/kvquant_fmt.cu) must match these bytes exactly;
 * both compute through kernels/cpu/kvquant_fmt.h. */
#include "kernels/cpu/kvquant_fmt.h"

#include <math.h>
#include <string.h>

#include "core/status.h"

int64_t kvcal_kv_format_row_bytes(kvcal_kv_format format, int head_dim)
{
    switch (format) {
    case KVCAL_KV_FORMAT_FP8_E4M3:
    case KVCAL_KV_FORMAT_FP8_E5M2:
    case KVCAL_KV_FORMAT_INT8:
    case KVCAL_KV_FORMAT_INT8_ASYM:
        return head_dim;
    case KVCAL_KV_FORMAT_NVFP4:
        return head_dim > 0 && head_dim % KVCAL_KV_NVFP4_BLOCK == 0
                   ? head_dim / 2 + head_dim / KVCAL_KV_NVFP4_BLOCK
                   : 0;
    }
    return 0;
}

static const char *format_name(int f)
{
    static const char *const names[] = {"FP8_E4M3", "FP8_E5M2", "INT8", "INT8_ASYM",
                                        "NVFP4"};
    return f >= 0 && f <= KVCAL_KV_FORMAT_NVFP4 ? names[f] : "unknown";
}

static kvcal_status check_values(const char *fn, const float *s, int n, const char *which,
                                 int positive)
{
    for (int i = 0; s && i < n; i++)
        if (!(isfinite(s[i]) && (!positive || s[i] > 0.0f)))
            return kvcal_fail(KVCAL_ERR_NONFINITE, "%s: %s[%d] = %g: must be finite%s",
                              fn, which, i, (double)s[i], positive ? " and > 0" : "");
    return KVCAL_OK;
}

kvcal_status kvcal_kvfmt_check(const char *fn, const kvcal_kv_batch *batch,
                               const kvcal_kv_cache *cache, const kvcal_kv_qparams *p,
                               int need_data, kvcal_kv_geom *g)
{
    if (!p)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: params is NULL", fn);
    const int f = (int)p->format;
    if (f < KVCAL_KV_FORMAT_FP8_E4M3 || f > KVCAL_KV_FORMAT_NVFP4)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: unknown format %d", fn, f);
    if (p->rounding != KVCAL_KV_ROUND_NEAREST_EVEN &&
        p->rounding != KVCAL_KV_ROUND_TOWARD_ZERO)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: unknown rounding %d", fn,
                          (int)p->rounding);
    int64_t row = cache ? kvcal_kv_format_row_bytes(p->format, cache->head_dim) : 1;
    if (cache && row == 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: %s needs head_dim a multiple of %d, not %d", fn,
                          format_name(f), KVCAL_KV_NVFP4_BLOCK, cache->head_dim);
    const int stat = p->k_scale || p->v_scale, asym = f == KVCAL_KV_FORMAT_INT8_ASYM;
    const int scaled = f != KVCAL_KV_FORMAT_FP8_E5M2;
    if (!scaled && (stat || p->k_zero || p->v_zero))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: FP8_E5M2 is a cast: pass no scale and no zero point", fn);
    if (stat && (!p->k_scale || !p->v_scale))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "%s: only one of k_scale / v_scale is set: set both (static) or "
            "neither (dynamic)",
            fn);
    if (!asym && (p->k_zero || p->v_zero || p->k_zero_cache || p->v_zero_cache))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: zero points belong to INT8_ASYM, not %s", fn,
                          format_name(f));
    if (asym && stat && (!p->k_zero || !p->v_zero))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "%s: static INT8_ASYM needs k_zero and v_zero beside the scales", fn);
    if (asym && !stat && (p->k_zero || p->v_zero))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: dynamic INT8_ASYM takes no static zero point", fn);
    if (f == KVCAL_KV_FORMAT_NVFP4 && !stat)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: NVFP4 needs its global scales (k_scale, v_scale)", fn);
    if (stat && p->granularity != KVCAL_GRANULARITY_TENSOR &&
        p->granularity != KVCAL_GRANULARITY_HEAD)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: granularity %d is neither TENSOR nor HEAD", fn,
                          (int)p->granularity);
    const int dyn = scaled && !stat;
    kvcal_status st = kvcal_kv_check_args_rows(fn, batch, cache, need_data, dyn, row, g);
    if (st != KVCAL_OK)
        return st;
    if (asym && !stat && (!p->k_zero_cache || !p->v_zero_cache))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "%s: dynamic INT8_ASYM records a zero point per (token, head) in "
            "k_zero_cache / v_zero_cache: pass both",
            fn);
    if (f == KVCAL_KV_FORMAT_NVFP4)
        g->row_bytes = cache->head_dim / 2;
    return KVCAL_OK;
}

kvcal_status kvcal_kvfmt_dequantize_check(const char *fn, const kvcal_kv_batch *batch,
                                          const kvcal_kv_cache *cache,
                                          const kvcal_kv_qparams *p, const void *k_out,
                                          const void *v_out, kvcal_dtype out_dtype,
                                          kvcal_kv_geom *g)
{
    kvcal_status st = kvcal_kvfmt_check(fn, batch, cache, p, 0, g);
    return st != KVCAL_OK ? st : kvcal_kv_check_outputs(fn, batch, k_out, v_out, out_dtype);
}

int64_t kvcal_kv_nvfp4_scale_offset(const kvcal_kv_cache *cache, int kv, int64_t slot,
                                    int head, int s)
{
    kvcal_kv_batch none = {0};
    kvcal_kv_qparams p = {KVCAL_KV_FORMAT_NVFP4,
                          0,
                          KVCAL_GRANULARITY_TENSOR,
                          &(float){1},
                          &(float){1},
                          NULL,
                          NULL,
                          NULL,
                          NULL};
    kvcal_kv_geom g;
    if (kvcal_kvfmt_check("kvcal_kv_nvfp4_scale_offset", &none, cache, &p, 0, &g) ||
        (kv != 0 && kv != 1) || slot < 0 || slot >= g.capacity || head < 0 ||
        head >= g.num_kv_heads || s < 0 || s >= g.head_dim / KVCAL_KV_NVFP4_BLOCK)
        return -1;
    int64_t block, off;
    kvcal_kv_slot_split(g, slot, &block, &off);
    return kvcal_kvfmt_nvfp4_scale_at(g, block, off, head, s, kv);
}

// --- quantization ---------------------------------------------------------

/* Parameters of row (slot, head h) of kv (0 K, 1 V): static, or computed
 * from x (head_dim values), and recorded beside the cache when it keeps
 * them. */
static kvcal_kvfmt_row row_params(const kvcal_kv_qparams *p, const kvcal_kv_cache *c,
                                  kvcal_kv_geom g, int kv, int64_t slot, int h,
                                  const float *x)
{
    const float *ss = kv ? p->v_scale : p->k_scale;
    const float *zs = kv ? p->v_zero : p->k_zero;
    float *scale_out = kv ? c->v_scale : c->k_scale;
    float *zero_out = kv ? p->v_zero_cache : p->k_zero_cache;
    const int i = p->granularity == KVCAL_GRANULARITY_HEAD ? h : 0;
    kvcal_kvfmt_row r = {1.0f, 0.0f, 1.0f};
    if (p->format == KVCAL_KV_FORMAT_FP8_E5M2)
        return r;
    if (ss) {
        r = kvcal_kvfmt_row_make(ss[i], zs ? zs[i] : 0.0f);
    } else if (p->format == KVCAL_KV_FORMAT_INT8) {
        float a = 0.0f;
        for (int d = 0; d < g.head_dim; d++)
            a = fmaxf(a, kvcal_kv_finite_abs(x[d]));
        r = kvcal_kvfmt_row_make(kvcal_kvfmt_int8_scale(a), 0.0f);
    } else {
        float mn = INFINITY, mx = -INFINITY;
        for (int d = 0; d < g.head_dim; d++)
            if (kvcal_kv_finite_abs(x[d]) == fabsf(x[d]))
                mn = fminf(mn, x[d]), mx = fmaxf(mx, x[d]);
        r = kvcal_kvfmt_asym_row(mn, mx);
    }
    int64_t si = kvcal_kv_scale_index(g, slot, h);
    if (scale_out)
        scale_out[si] = r.scale;
    if (zero_out)
        zero_out[si] = r.zero;
    return r;
}

/* Row x of (slot, head h) of kv's cache base (its data at out). */
static void quantize_row(const kvcal_kv_qparams *p, kvcal_kvfmt_row r, const float *x,
                         kvcal_kv_geom g, uint8_t *base, int kv, int64_t slot, int h)
{
    uint8_t *out = base + kvcal_kv_cache_offset(g, slot, h);
    if (p->format != KVCAL_KV_FORMAT_NVFP4) {
        for (int d = 0; d < g.head_dim; d++)
            out[d] = kvcal_kvfmt_code((int)p->format, (int)p->rounding, r, x[d]);
        return;
    }
    int64_t block, off;
    kvcal_kv_slot_split(g, slot, &block, &off);
    for (int b = 0; b < g.head_dim / KVCAL_KV_NVFP4_BLOCK; b++) {
        const float *xb = x + b * KVCAL_KV_NVFP4_BLOCK;
        float amax = 0.0f, dec;
        for (int j = 0; j < KVCAL_KV_NVFP4_BLOCK; j++)
            amax = fmaxf(amax, kvcal_kv_finite_abs(xb[j]));
        base[kvcal_kvfmt_nvfp4_scale_at(g, block, off, h, b, kv)] =
            kvcal_kvfmt_nvfp4_block(r, amax, &dec);
        for (int j = 0; j < KVCAL_KV_NVFP4_BLOCK; j += 2)
            out[(b * KVCAL_KV_NVFP4_BLOCK + j) / 2] =
                (uint8_t)(kvcal_kvfmt_nvfp4_code(dec, xb[j]) |
                          kvcal_kvfmt_nvfp4_code(dec, xb[j + 1]) << 4);
    }
}

kvcal_status kvcal_kv_quantize_fmt_ref(const kvcal_kv_batch *batch,
                                       const kvcal_kv_cache *cache,
                                       const kvcal_kv_qparams *params)
{
    static const char fn[] = "kvcal_kv_quantize_fmt_ref";
    if (params && params->format == KVCAL_KV_FORMAT_FP8_E4M3 && !params->k_zero_cache &&
        !params->v_zero_cache)
        return params->k_scale || params->v_scale
                   ? kvcal_kv_quantize_static_ref(batch, cache, params->granularity,
                                                  params->k_scale, params->v_scale)
                   : kvcal_kv_quantize_dynamic_ref(batch, cache);
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kvfmt_check(fn, batch, cache, params, 1, &g);
    if (st != KVCAL_OK)
        return st;
    const int n = params->granularity == KVCAL_GRANULARITY_HEAD ? g.num_kv_heads : 1;
    if ((st = check_values(fn, params->k_scale, n, "k_scale", 1)) != KVCAL_OK ||
        (st = check_values(fn, params->v_scale, n, "v_scale", 1)) != KVCAL_OK ||
        (st = check_values(fn, params->k_zero, n, "k_zero", 0)) != KVCAL_OK ||
        (st = check_values(fn, params->v_zero, n, "v_zero", 0)) != KVCAL_OK)
        return st;
    float x[KVCAL_KV_MAX_HEAD_DIM];
    for (int64_t t = 0; t < batch->num_tokens; t++) {
        int64_t slot = batch->slot_mapping[t];
        if (slot < 0 || slot >= g.capacity)
            continue;
        for (int kv = 0; kv < 2; kv++) {
            const void *src = kv ? batch->v : batch->k;
            int64_t ts = kv ? batch->v_token_stride : batch->k_token_stride;
            int64_t hs = kv ? batch->v_head_stride : batch->k_head_stride;
            uint8_t *dst = kv ? cache->v : cache->k;
            for (int h = 0; h < g.num_kv_heads; h++) {
                for (int d = 0; d < g.head_dim; d++)
                    x[d] = kvcal_kv_load_elem(src, batch->dtype, t * ts + h * hs + d);
                kvcal_kvfmt_row r = row_params(params, cache, g, kv, slot, h, x);
                quantize_row(params, r, x, g, dst, kv, slot, h);
            }
        }
    }
    return KVCAL_OK;
}

// --- dequantization -------------------------------------------------------

kvcal_status kvcal_kv_dequantize_fmt_ref(const kvcal_kv_batch *batch,
                                         const kvcal_kv_cache *cache,
                                         const kvcal_kv_qparams *params, void *k_out,
                                         void *v_out, kvcal_dtype out_dtype)
{
    static const char fn[] = "kvcal_kv_dequantize_fmt_ref";
    if (params && params->format == KVCAL_KV_FORMAT_FP8_E4M3 && !params->k_zero_cache &&
        !params->v_zero_cache) {
        kvcal_kv_cache c = *cache;
        if (params->k_scale)
            c.k_scale = c.v_scale = NULL;
        return kvcal_kv_dequantize_ref(batch, &c, params->granularity, params->k_scale,
                                       params->v_scale, k_out, v_out, out_dtype);
    }
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kvfmt_dequantize_check(fn, batch, cache, params, k_out, v_out,
                                                   out_dtype, &g);
    if (st != KVCAL_OK)
        return st;
    const int step = params->granularity == KVCAL_GRANULARITY_HEAD;
    const int n = step ? g.num_kv_heads : 1;
    if ((st = check_values(fn, params->k_scale, n, "k_scale", 1)) != KVCAL_OK ||
        (st = check_values(fn, params->v_scale, n, "v_scale", 1)) != KVCAL_OK ||
        (st = check_values(fn, params->k_zero, n, "k_zero", 0)) != KVCAL_OK ||
        (st = check_values(fn, params->v_zero, n, "v_zero", 0)) != KVCAL_OK)
        return st;
    for (int64_t t = 0; t < batch->num_tokens; t++) {
        int64_t slot = batch->slot_mapping[t];
        if (slot < 0 || slot >= g.capacity)
            continue;
        for (int kv = 0; kv < 2; kv++) {
            const float *ss = kv ? params->v_scale : params->k_scale;
            const float *zs = kv ? params->v_zero : params->k_zero;
            const float *sc = kv ? cache->v_scale : cache->k_scale;
            const float *zc = kv ? params->v_zero_cache : params->k_zero_cache;
            const uint8_t *src = kv ? cache->v : cache->k;
            void *out = kv ? v_out : k_out;
            for (int h = 0; h < g.num_kv_heads; h++) {
                int64_t si = kvcal_kv_scale_index(g, slot, h);
                kvcal_kvfmt_row r = {1.0f, 0.0f, 1.0f};
                if (ss)
                    r = kvcal_kvfmt_row_make(ss[h * step], zs ? zs[h * step] : 0.0f);
                else if (params->format != KVCAL_KV_FORMAT_FP8_E5M2)
                    r = kvcal_kvfmt_row_make(sc[si], zc ? zc[si] : 0.0f);
                const uint8_t *in = src + kvcal_kv_cache_offset(g, slot, h);
                int64_t o = (t * g.num_kv_heads + h) * g.head_dim, block, off;
                kvcal_kv_slot_split(g, slot, &block, &off);
                for (int d = 0; d < g.head_dim; d++) {
                    float v;
                    if (params->format == KVCAL_KV_FORMAT_NVFP4) {
                        uint8_t s = src[kvcal_kvfmt_nvfp4_scale_at(
                            g, block, off, h, d / KVCAL_KV_NVFP4_BLOCK, kv)];
                        float dec = kvcal_fp8_e4m3_to_float(s) * r.scale;
                        v = kvcal_fp4_e2m1_to_float(
                                (uint8_t)(in[d / 2] >> (4 * (d & 1)))) *
                            dec;
                    } else {
                        v = kvcal_kvfmt_value((int)params->format, r, in[d]);
                    }
                    kvcal_kv_store_elem(out, out_dtype, o + d, v);
                }
            }
        }
    }
    return KVCAL_OK;
}
