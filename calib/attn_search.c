/* calib/attn_search.c: thresholds chosen by attention-output error (see
 * attn_search.h). */
#include "calib/attn_search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/scale_rule.h"
#include "core/scales.h"
#include "core/status.h"
#include "kernels/cpu/ops.h"
#include "observers/observer.h"

#define C KVCAL_ATTN_CANDIDATES

typedef struct {
    const kvcal_model_desc *d;
    kvcal_kv_format format;
    float *cand;       /* (layers, 2, kv_heads, C) candidate thresholds */
    double *err;       /* (layers, 2, kv_heads, C) summed squared errors */
    float *deq[2];     /* (T, kv_heads, head_dim) K and V after the round trip */
    float *att0;       /* (T, heads, head_dim) on the exact K and V */
    float *att;        /* (T, heads, head_dim) */
    uint8_t *cache[2]; /* (T, kv_heads) rows of the format's bytes */
    int64_t *slots;    /* 0 .. T - 1 */
} search;

/* The format's static scale of threshold t, as eval's static modes take
 * it from a scales file: e4m3's, times 448 / the format's largest value. */
static float format_scale(kvcal_kv_format f, float t)
{
    return (float)((double)kvcal_scale_from_absmax(t) * KVCAL_FP8_E4M3_MAX /
                   kvcal_scales_format_qmax(f));
}

/* K and V (T, kv_heads, head_dim) of candidate c of layer l through the
 * cache format into sr->deq: both quantized into a cache of T one-token
 * blocks and dequantized by the library's reference. */
static kvcal_status round_trip(search *sr, int l, int c, const float *k, const float *v,
                               int64_t T)
{
    const int HKV = sr->d->num_kv_heads, hd = sr->d->head_dim;
    const int64_t row = (int64_t)HKV * hd;
    float scale[2][1024];
    for (int kv = 0; kv < 2; kv++)
        for (int h = 0; h < HKV; h++)
            scale[kv][h] = format_scale(
                sr->format, sr->cand[(((size_t)l * 2 + kv) * HKV + h) * C + c]);
    const kvcal_kv_batch b = {k, v, KVCAL_DTYPE_F32, T, row, hd, row, hd, sr->slots};
    const kvcal_kv_cache cache = {sr->cache[0], sr->cache[1], NULL, NULL,           T, 1,
                                  HKV,          hd,           0,    KVCAL_CACHE_NHD};
    const kvcal_kv_qparams q = {sr->format,
                                KVCAL_KV_ROUND_NEAREST_EVEN,
                                KVCAL_GRANULARITY_HEAD,
                                scale[0],
                                scale[1],
                                NULL,
                                NULL,
                                NULL,
                                NULL};
    kvcal_status st = kvcal_kv_quantize_fmt_ref(&b, &cache, &q);
    return st ? st
              : kvcal_kv_dequantize_fmt_ref(&b, &cache, &q, sr->deq[0], sr->deq[1],
                                            KVCAL_DTYPE_F32);
}

/* The tap: for each sample of the batch, every candidate of layer l. */
static kvcal_status score(void *ctx, int l, const kvcal_rows *rows, const float *q,
                          const float *k, const float *v)
{
    search *sr = ctx;
    const kvcal_model_desc *d = sr->d;
    const int H = d->num_heads, HKV = d->num_kv_heads, hd = d->head_dim, G = H / HKV;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < rows->batch; b++) {
        const int T = rows->lengths[b];
        const int64_t r0 = rows->start[b];
        const float *qb = q + r0 * H * hd, *kb = k + r0 * HKV * hd,
                    *vb = v + r0 * HKV * hd;
        kvcal_attention_ref(sr->att0, qb, kb, vb, T, H, HKV, hd, scale);
        for (int c = 0; c < C; c++) {
            kvcal_status st = round_trip(sr, l, c, kb, vb, T);
            if (st)
                return st;
            for (int kv = 0; kv < 2; kv++) {
                kvcal_attention_ref(sr->att, qb, kv ? kb : sr->deq[0],
                                    kv ? sr->deq[1] : vb, T, H, HKV, hd, scale);
                for (int h = 0; h < HKV; h++) {
                    double e = 0.0;
                    for (int64_t i = 0; i < T; i++)
                        for (int g = h * G; g < (h + 1) * G; g++)
                            for (int c2 = 0; c2 < hd; c2++) {
                                const int64_t j = (i * H + g) * hd + c2;
                                const double diff = (double)sr->att[j] - sr->att0[j];
                                e += diff * diff;
                            }
                    sr->err[(((size_t)l * 2 + kv) * HKV + h) * C + c] += e;
                }
            }
        }
    }
    return KVCAL_OK;
}

/* The candidates of every (layer, K/V, head) from the statistics. */
static kvcal_status candidates(const kvcal_stats_t *stats, float *cand)
{
    static const double pct[5] = {99.999, 99.99, 99.9, 99.5, 99.0};
    kvcal_observer_config cfg[C];
    for (int c = 0; c < C; c++)
        cfg[c] = kvcal_observer_default();
    for (int i = 0; i < 5; i++)
        cfg[1 + i].kind = KVCAL_OBSERVER_PERCENTILE, cfg[1 + i].percentile = pct[i];
    cfg[C - 1].kind = KVCAL_OBSERVER_MSE;
    const int L = stats->num_layers, HKV = stats->num_kv_heads;
    for (int l = 0; l < L; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < HKV; h++)
                for (int c = 0; c < C; c++) {
                    kvcal_status st = kvcal_stats_threshold(
                        stats, &cfg[c], l, kv, h,
                        &cand[(((size_t)l * 2 + kv) * HKV + h) * C + c]);
                    if (st)
                        return st;
                }
    return KVCAL_OK;
}

kvcal_status kvcal_attn_search(kvcal_exec_t *x, const kvcal_model_desc *d,
                               const kvcal_stats_t *stats, const kvcal_exec_samples *s,
                               int samples, kvcal_kv_format format,
                               kvcal_attn_search_result *r)
{
    const int L = d->num_layers, HKV = d->num_kv_heads, H = d->num_heads,
              hd = d->head_dim;
    if (HKV > 1024)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "attention observer: %d kv heads, more than the 1024 it takes",
                          HKV);
    if (format != KVCAL_KV_FORMAT_FP8_E4M3 && format != KVCAL_KV_FORMAT_INT8 &&
        format != KVCAL_KV_FORMAT_NVFP4)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "attention observer: cache format %d: it searches for e4m3, "
                          "int8 and NVFP4 caches",
                          (int)format);
    const int64_t row_bytes = kvcal_kv_format_row_bytes(format, hd);
    if (row_bytes == 0)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "attention observer: an NVFP4 cache needs head_dim a multiple "
                          "of 16; the model's is %d",
                          hd);
    const size_t n = (size_t)L * 2 * HKV, T = (size_t)s->seq_len;
    search sr = {
        d,
        format,
        malloc(n * C * sizeof(float)),
        calloc(n * C, sizeof(double)),
        {malloc(T * HKV * hd * sizeof(float)), malloc(T * HKV * hd * sizeof(float))},
        malloc(T * H * hd * sizeof(float)),
        malloc(T * H * hd * sizeof(float)),
        {malloc(T * HKV * (size_t)row_bytes), malloc(T * HKV * (size_t)row_bytes)},
        malloc(T * sizeof(int64_t))};
    kvcal_status st =
        sr.cand && sr.err && sr.deq[0] && sr.deq[1] && sr.att0 && sr.att && sr.cache[0] &&
                sr.cache[1] && sr.slots
            ? candidates(stats, sr.cand)
            : kvcal_fail(KVCAL_ERR_NOMEM, "attention observer: out of memory");
    for (size_t t = 0; !st && t < T; t++)
        sr.slots[t] = (int64_t)t;
    if (samples > s->num_samples)
        samples = s->num_samples;
    for (int b0 = 0; !st && b0 < samples; b0 += s->batch) {
        const int nb = samples - b0 < s->batch ? samples - b0 : s->batch;
        const kvcal_batch b = {s->ids + (int64_t)b0 * s->seq_len, s->lengths + b0, NULL,
                               nb, s->seq_len};
        st = kvcal_exec_forward(x, &b, score, &sr, NULL);
    }
    for (size_t i = 0; !st && i < n; i++) {
        const double *e = sr.err + i * C;
        int best = 0;
        for (int c = 1; c < C; c++)
            best = e[c] < e[best] ? c : best;
        r->thresholds[i] = sr.cand[i * C + best];
        if (r->chosen)
            r->chosen[i] = best;
        if (r->errors)
            memcpy(r->errors + i * C, e, C * sizeof *e);
    }
    free(sr.cand);
    free(sr.err);
    for (int kv = 0; kv < 2; kv++) {
        free(sr.deq[kv]);
        free(sr.cache[kv]);
    }
    free(sr.att0);
    free(sr.att);
    free(sr.slots);
    return st;
}
