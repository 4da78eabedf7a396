/* calib/attn_search.c: thresholds chosen by attention-output error (see
 * attn_search.h). */
#include "calib/attn_search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp8.h"
#include "core/scale_rule.h"
#include "core/status.h"
#include "kernels/cpu/ops.h"
#include "observers/observer.h"

#define C KVCAL_ATTN_CANDIDATES

typedef struct {
    const kvcal_model_desc *d;
    float *cand; /* (layers, 2, kv_heads, C) candidate thresholds */
    double *err; /* (layers, 2, kv_heads, C) summed squared errors */
    float *kv;   /* (T, kv_heads, head_dim) K or V rounded */
    float *att0; /* (T, heads, head_dim) on the exact K and V */
    float *att;  /* (T, heads, head_dim) */
} search;

/* x (n, kv_heads, head_dim) through e4m3 under head h's threshold t[h]. */
static void round_trip(float *out, const float *x, int64_t n, int heads, int hd,
                       const float *t)
{
    for (int h = 0; h < heads; h++) {
        const float s = kvcal_scale_from_absmax(t[h]), inv = 1.0f / s;
        for (int64_t i = 0; i < n; i++)
            for (int c = 0; c < hd; c++) {
                const int64_t j = (i * heads + h) * hd + c;
                out[j] =
                    kvcal_fp8_e4m3_to_float(kvcal_fp8_e4m3_from_float(x[j] * inv)) * s;
            }
    }
}

/* The tap: for each sample of the batch, every candidate of layer l. */
static kvcal_status score(void *ctx, int l, const kvcal_rows *rows, const float *q,
                          const float *k, const float *v)
{
    search *sr = ctx;
    const kvcal_model_desc *d = sr->d;
    const int H = d->num_heads, HKV = d->num_kv_heads, hd = d->head_dim, G = H / HKV;
    const float scale = 1.0f / sqrtf((float)hd);
    float t[1024];
    for (int b = 0; b < rows->batch; b++) {
        const int T = rows->lengths[b];
        const int64_t r0 = rows->start[b];
        const float *qb = q + r0 * H * hd, *kb = k + r0 * HKV * hd,
                    *vb = v + r0 * HKV * hd;
        kvcal_attention_ref(sr->att0, qb, kb, vb, T, H, HKV, hd, scale);
        for (int kv = 0; kv < 2; kv++)
            for (int c = 0; c < C; c++) {
                for (int h = 0; h < HKV; h++)
                    t[h] = sr->cand[(((size_t)l * 2 + kv) * HKV + h) * C + c];
                round_trip(sr->kv, kv ? vb : kb, T, HKV, hd, t);
                kvcal_attention_ref(sr->att, qb, kv ? kb : sr->kv, kv ? sr->kv : vb, T, H,
                                    HKV, hd, scale);
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
                               int samples, kvcal_attn_search_result *r)
{
    const int L = d->num_layers, HKV = d->num_kv_heads, H = d->num_heads,
              hd = d->head_dim;
    if (HKV > 1024)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "attention observer: %d kv heads, more than the 1024 it takes",
                          HKV);
    const size_t n = (size_t)L * 2 * HKV, T = (size_t)s->seq_len;
    search sr = {d,
                 malloc(n * C * sizeof(float)),
                 calloc(n * C, sizeof(double)),
                 malloc(T * HKV * hd * sizeof(float)),
                 malloc(T * H * hd * sizeof(float)),
                 malloc(T * H * hd * sizeof(float))};
    kvcal_status st =
        sr.cand && sr.err && sr.kv && sr.att0 && sr.att
            ? candidates(stats, sr.cand)
            : kvcal_fail(KVCAL_ERR_NOMEM, "attention observer: out of memory");
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
        if (r->rel_error)
            r->rel_error[i] = e[0] > 0.0 ? e[best] / e[0] : 1.0;
    }
    free(sr.cand);
    free(sr.err);
    free(sr.kv);
    free(sr.att0);
    free(sr.att);
    return st;
}
