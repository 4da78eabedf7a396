/* observers/observer.c: observer kinds, thresholds from the statistics
 * (minmax, ema, percentile, mse) and the reduction to K/V scales. */
#include "observers/observer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp8.h"
#include "core/scale_rule.h"
#include "core/status.h"

#define MSE_REFINE_STEPS 16

static const char *kv_name(int kv)
{
    return kv == KVCAL_K ? "K" : "V";
}

// --- configuration -----------------------------------------------------------

kvcal_observer_config kvcal_observer_default(void)
{
    kvcal_observer_config c;
    c.kind = KVCAL_OBSERVER_MINMAX;
    c.ema_decay = KVCAL_OBSERVER_EMA_DECAY_DEFAULT;
    c.percentile = 99.99;
    c.thresholds = NULL;
    c.search_samples = 0;
    return c;
}

const char *kvcal_observer_name(kvcal_observer_kind kind)
{
    switch (kind) {
    case KVCAL_OBSERVER_MINMAX:
        return "minmax";
    case KVCAL_OBSERVER_EMA:
        return "ema";
    case KVCAL_OBSERVER_PERCENTILE:
        return "percentile";
    case KVCAL_OBSERVER_MSE:
        return "mse";
    case KVCAL_OBSERVER_ATTENTION:
        return "attention";
    }
    return "unknown";
}

/* Parses a whole finite number; 0 on success. */
static int parse_number(const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

kvcal_status kvcal_observer_parse(const char *text, kvcal_observer_config *out)
{
    static const char choices[] =
        "use minmax, ema, ema:D (decay D in [0, 1), e.g. ema:0.99), percentile:P "
        "(0 < P <= 100, e.g. percentile:99.99) or mse";
    if (!text || !out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_observer_parse: NULL argument");
    kvcal_observer_config c = kvcal_observer_default();
    const char *colon = strchr(text, ':');
    size_t name_len = colon ? (size_t)(colon - text) : strlen(text);
    const char *arg = colon ? colon + 1 : NULL;
    double v = 0.0;
    if (name_len == 6 && !strncmp(text, "minmax", 6) && !arg) {
        c.kind = KVCAL_OBSERVER_MINMAX;
    } else if (name_len == 3 && !strncmp(text, "mse", 3) && !arg) {
        c.kind = KVCAL_OBSERVER_MSE;
    } else if (name_len == 3 && !strncmp(text, "ema", 3)) {
        c.kind = KVCAL_OBSERVER_EMA;
        if (arg) {
            if (parse_number(arg, &v) || !(v >= 0.0 && v < 1.0))
                return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                                  "observer '%s': the EMA decay must be a number in "
                                  "[0, 1) (weight of the running average; 0.99 keeps "
                                  "1%% of each new batch)",
                                  text);
            c.ema_decay = v;
        }
    } else if (name_len == 10 && !strncmp(text, "percentile", 10)) {
        c.kind = KVCAL_OBSERVER_PERCENTILE;
        if (!arg || parse_number(arg, &v) || !(v > 0.0 && v <= 100.0))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "observer '%s': percentile needs P in (0, 100], as in "
                              "percentile:99.99",
                              text);
        c.percentile = v;
    } else {
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "unknown observer '%s': %s", text,
                          choices);
    }
    *out = c;
    return KVCAL_OK;
}

kvcal_status kvcal_observer_params_json(const kvcal_observer_config *cfg, char *buf,
                                        size_t n)
{
    int w;
    switch (cfg->kind) {
    case KVCAL_OBSERVER_EMA:
        w = snprintf(buf, n, "{\"decay\": %.10g}", cfg->ema_decay);
        break;
    case KVCAL_OBSERVER_PERCENTILE:
        w = snprintf(buf, n, "{\"percentile\": %.10g}", cfg->percentile);
        break;
    case KVCAL_OBSERVER_ATTENTION:
        w = snprintf(buf, n, "{\"samples\": %d}", cfg->search_samples);
        break;
    default:
        w = snprintf(buf, n, "{}");
        break;
    }
    if (w < 0 || (size_t)w >= n)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_observer_params_json: buffer of %zu bytes is too small",
                          n);
    return KVCAL_OK;
}

// --- histogram readings ------------------------------------------------------

/* Value range [lo, hi] of bin b, clipped to the head's absmax (the bin that
 * holds absmax ends there, and the last bin has no upper edge). */
static void bin_range(int b, int num_bins, float absmax, double *lo, double *hi)
{
    double l = b == 0 ? 0.0 : (double)kvcal_hist_bin_lower(b);
    double h = b == num_bins - 1 ? (double)absmax : (double)kvcal_hist_bin_lower(b + 1);
    if (h > absmax)
        h = absmax;
    if (l > h)
        l = h;
    *lo = l;
    *hi = h;
}

static const uint64_t *head_hist(const kvcal_stats_t *s, int layer, int kv, int head)
{
    return s->hist[kv] + ((size_t)layer * s->num_kv_heads + (size_t)head) * s->num_bins;
}

static uint64_t hist_total(const uint64_t *h, int num_bins)
{
    uint64_t n = 0;
    for (int b = 0; b < num_bins; b++)
        n += h[b];
    return n;
}

/* Value below which a fraction q (0 < q <= 1) of the counts lie, linear
 * inside the bin; *bin_out (may be NULL) gets that bin. */
static double hist_quantile(const uint64_t *h, int num_bins, float absmax, double q,
                            int *bin_out)
{
    uint64_t n = hist_total(h, num_bins);
    if (n == 0 || absmax <= 0.0f) {
        if (bin_out)
            *bin_out = 0;
        return 0.0;
    }
    double rank = q * (double)n;
    uint64_t cum = 0;
    int last = 0;
    for (int b = 0; b < num_bins; b++) {
        if (!h[b])
            continue;
        last = b;
        if ((double)(cum + h[b]) >= rank) {
            double lo, hi;
            bin_range(b, num_bins, absmax, &lo, &hi);
            if (bin_out)
                *bin_out = b;
            return lo + (rank - (double)cum) / (double)h[b] * (hi - lo);
        }
        cum += h[b];
    }
    if (bin_out)
        *bin_out = last;
    return absmax;
}

/* Mean of (x - dequant(quant(x)))^2 for x uniform in [lo, hi] at scale s,
 * integrated exactly cell by cell of the e4m3 grid (a point when lo == hi). */
static double bin_sq_error(double lo, double hi, float s)
{
    uint8_t c = kvcal_fp8_e4m3_from_float((float)(lo / s));
    if (hi <= lo) {
        double d = lo - (double)kvcal_fp8_e4m3_to_float(c) * s;
        return d * d;
    }
    double acc = 0.0, x0 = lo;
    while (x0 < hi) {
        double q = (double)kvcal_fp8_e4m3_to_float(c) * s;
        double x1 = hi; /* the top code's cell has no upper end (saturation) */
        if (c < KVCAL_FP8_E4M3_MAX_CODE) {
            x1 = 0.5 * (q + (double)kvcal_fp8_e4m3_to_float((uint8_t)(c + 1)) * s);
            if (x1 <= x0) { /* x0 sits on the boundary and rounded down */
                c++;
                continue;
            }
            x1 = x1 < hi ? x1 : hi;
        }
        acc += ((x1 - q) * (x1 - q) * (x1 - q) - (x0 - q) * (x0 - q) * (x0 - q)) / 3.0;
        x0 = x1;
        c++;
    }
    return acc / (hi - lo);
}

/* Expected squared e4m3 round-trip error of the histogram at threshold t,
 * values uniform inside each bin; lo, hi, c (n) hold the populated bins. */
static double mse_error(const double *lo, const double *hi, const double *c, int n,
                        float t)
{
    float s = kvcal_scale_from_absmax(t);
    double e = 0.0;
    for (int i = 0; i < n; i++)
        e += c[i] * bin_sq_error(lo[i], hi[i], s);
    return e;
}

static kvcal_status hist_mse_threshold(const uint64_t *h, int num_bins, float absmax,
                                       float *out)
{
    *out = 0.0f;
    if (absmax <= 0.0f || hist_total(h, num_bins) == 0)
        return KVCAL_OK;
    double *lo = malloc((size_t)num_bins * sizeof *lo); // (num_bins) bin ranges
    double *hi = malloc((size_t)num_bins * sizeof *hi);
    double *c = malloc((size_t)num_bins * sizeof *c); // (num_bins) counts
    float *cand = malloc((size_t)(num_bins + 1) * sizeof *cand);
    if (!lo || !hi || !c || !cand) {
        free(lo);
        free(hi);
        free(c);
        free(cand);
        return kvcal_fail(KVCAL_ERR_NOMEM, "mse observer: out of memory");
    }
    int n = 0;
    for (int b = 0; b < num_bins; b++) {
        if (!h[b])
            continue;
        bin_range(b, num_bins, absmax, &lo[n], &hi[n]);
        c[n] = (double)h[b];
        n++;
    }
    int b50 = 0;
    hist_quantile(h, num_bins, absmax, 0.5, &b50);

    /* candidates, largest first: absmax, then every bin edge above the median
     * bin; ties keep the larger threshold (less clipping) */
    int nc = 0;
    cand[nc++] = absmax;
    for (int b = kvcal_hist_bin(absmax); b > b50 && b >= 1; b--)
        if (kvcal_hist_bin_lower(b) < absmax)
            cand[nc++] = kvcal_hist_bin_lower(b);
    int best = 0;
    double best_e = INFINITY;
    for (int i = 0; i < nc; i++) {
        double e = mse_error(lo, hi, c, n, cand[i]);
        if (e < best_e) {
            best_e = e;
            best = i;
        }
    }
    /* refine between the best edge's neighbours */
    float best_t = cand[best];
    float t_hi = cand[best > 0 ? best - 1 : best];
    float t_lo = cand[best + 1 < nc ? best + 1 : best];
    for (int i = 2 * MSE_REFINE_STEPS - 1; i > 0; i--) {
        float t = t_lo + (t_hi - t_lo) * (float)i / (2 * MSE_REFINE_STEPS);
        if (t == cand[best] || t <= 0.0f)
            continue;
        double e = mse_error(lo, hi, c, n, t);
        if (e < best_e) {
            best_e = e;
            best_t = t;
        }
    }
    free(lo);
    free(hi);
    free(c);
    free(cand);
    *out = best_t;
    return KVCAL_OK;
}

// --- thresholds and scales ---------------------------------------------------

kvcal_status kvcal_stats_threshold(const kvcal_stats_t *stats,
                                   const kvcal_observer_config *cfg, int layer, int kv,
                                   int head, float *out)
{
    if (!stats || !cfg || !out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_stats_threshold: NULL argument");
    *out = 0.0f;
    if (layer < 0 || layer >= stats->num_layers || head < 0 ||
        head >= stats->num_kv_heads || (kv != KVCAL_K && kv != KVCAL_V))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_threshold: layer %d kv %d head %d out of range "
                          "(%d layers, %d kv heads)",
                          layer, kv, head, stats->num_layers, stats->num_kv_heads);
    float absmax = kvcal_stats_head_absmax(stats, layer, kv, head);
    const uint64_t *h = head_hist(stats, layer, kv, head);
    switch (cfg->kind) {
    case KVCAL_OBSERVER_MINMAX:
        *out = absmax;
        return KVCAL_OK;
    case KVCAL_OBSERVER_EMA:
        if (stats->batches == 0)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "ema observer: no batch was completed (call "
                              "kvcal_stats_end_batch after each batch)");
        *out = (float)stats->ema[kv][(size_t)layer * stats->num_kv_heads + head];
        return KVCAL_OK;
    case KVCAL_OBSERVER_PERCENTILE:
        if (!(cfg->percentile > 0.0 && cfg->percentile <= 100.0))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "percentile observer: P = %g is outside (0, 100]",
                              cfg->percentile);
        *out = (float)hist_quantile(h, stats->num_bins, absmax, cfg->percentile / 100.0,
                                    NULL);
        if (*out > absmax)
            *out = absmax;
        return KVCAL_OK;
    case KVCAL_OBSERVER_MSE:
        return hist_mse_threshold(h, stats->num_bins, absmax, out);
    case KVCAL_OBSERVER_ATTENTION:
        if (!cfg->thresholds)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "attention observer: no thresholds were searched (kvcal "
                              "calibrate's search gives them)");
        *out = cfg->thresholds[((size_t)layer * 2 + kv) * stats->num_kv_heads + head];
        return KVCAL_OK;
    }
    return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_stats_threshold: unknown observer %d",
                      (int)cfg->kind);
}

/* Counts of (layer, kv, head) that clip under `scale` -- above
 * kvcal_clip_bound(scale), eval's definition; fractional inside the bin --
 * into *clipped, and all counts into *total. */
static void hist_count_clipped(const kvcal_stats_t *s, int layer, int kv, int head,
                               float scale, double *clipped, double *total)
{
    const double t = kvcal_clip_bound(scale);
    const uint64_t *h = head_hist(s, layer, kv, head);
    float absmax = kvcal_stats_head_absmax(s, layer, kv, head);
    double a = 0.0, n = 0.0;
    for (int b = 0; b < s->num_bins; b++) {
        if (!h[b])
            continue;
        double lo, hi;
        bin_range(b, s->num_bins, absmax, &lo, &hi);
        n += (double)h[b];
        if (hi <= t)
            continue;
        a += lo >= t ? (double)h[b] : (double)h[b] * (hi - t) / (hi - lo);
    }
    *clipped = a;
    *total = n;
}

double kvcal_stats_clip_fraction(const kvcal_stats_t *stats, int layer, int kv, int head,
                                 float scale)
{
    double clipped, total;
    hist_count_clipped(stats, layer, kv, head, scale, &clipped, &total);
    return total > 0.0 ? clipped / total : 0.0;
}

/* Threshold of layer `layer` read as one tensor: percentile and mse from
 * the heads' summed histogram up to the layer's absmax; ema from the moving
 * average of the layer's per-batch absmax (ema_tensor); minmax takes the
 * max of the heads' thresholds t (H), which is the layer's absmax. */
static kvcal_status layer_threshold(const kvcal_stats_t *s,
                                    const kvcal_observer_config *cfg, int layer, int kv,
                                    const float *t, float *out)
{
    float m = 0.0f, absmax = 0.0f;
    for (int h = 0; h < s->num_kv_heads; h++) {
        m = t[h] > m ? t[h] : m;
        float a = kvcal_stats_head_absmax(s, layer, kv, h);
        absmax = a > absmax ? a : absmax;
    }
    *out = cfg->kind == KVCAL_OBSERVER_EMA ? (float)s->ema_tensor[kv][layer] : m;
    if (cfg->kind != KVCAL_OBSERVER_PERCENTILE && cfg->kind != KVCAL_OBSERVER_MSE)
        return KVCAL_OK;
    uint64_t *sum = calloc((size_t)s->num_bins, sizeof *sum); // (num_bins)
    if (!sum)
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_stats_to_scales: out of memory");
    for (int h = 0; h < s->num_kv_heads; h++) {
        const uint64_t *hh = head_hist(s, layer, kv, h);
        for (int b = 0; b < s->num_bins; b++)
            sum[b] += hh[b];
    }
    kvcal_status st = KVCAL_OK;
    if (cfg->kind == KVCAL_OBSERVER_MSE) {
        st = hist_mse_threshold(sum, s->num_bins, absmax, out);
    } else {
        *out =
            (float)hist_quantile(sum, s->num_bins, absmax, cfg->percentile / 100.0, NULL);
        if (*out > absmax)
            *out = absmax;
    }
    free(sum);
    return st;
}

/* q_scale (per layer) and q_head (per query head) from q_absmax, when the
 * statistics observed the queries: max |q| / 448 whatever the K/V observer
 * (FP8 attention quantizes the query to e4m3 under a static scale). */
/* The tokens the statistics observed: those of the layers that cache. */
static int64_t observed_tokens(const kvcal_stats_t *stats)
{
    int64_t n = 0;
    for (int l = 0; l < stats->num_layers; l++)
        n = stats->tokens[l] > n ? stats->tokens[l] : n;
    return n;
}

static kvcal_status queries_to_scales(const kvcal_stats_t *stats, kvcal_scales_t *out,
                                      kvcal_warn_fn warn, void *warn_ctx)
{
    if (!stats->q_absmax)
        return KVCAL_OK;
    const int Hq = stats->num_q_heads;
    kvcal_status st = kvcal_scales_set_q_heads(out, Hq);
    for (int l = 0; !st && l < stats->num_layers; l++) {
        const float m = kvcal_stats_q_group_absmax(stats, l, 0, Hq);
        for (int h = 0; h < Hq; h++)
            out->q_head[(size_t)l * Hq + h] =
                kvcal_scale_from_absmax(stats->q_absmax[(size_t)l * Hq + h]);
        out->q_scale[l] = kvcal_scale_from_absmax(m);
        if (m == 0.0f && warn && kvcal_scales_layer_cached(out, l)) {
            char msg[160];
            snprintf(
                msg, sizeof msg,
                "layer %d Q never saw a non-zero value; q_scale gets the floor scale "
                "%g",
                l, (double)out->q_scale[l]);
            warn(warn_ctx, msg);
        }
    }
    if (!st)
        out->has_q = 1;
    return st;
}

/* The signed range of (layer, kv) over heads h0 .. h1 - 1 and their
 * channels, clipped to [-t, t] (the observer's threshold). */
static void signed_range(const kvcal_stats_t *s, int layer, int kv, int h0, int h1,
                         float t, float *lo, float *hi)
{
    const size_t D = (size_t)s->head_dim;
    const float *mn = s->min[kv] + ((size_t)layer * s->num_kv_heads + h0) * D;
    const float *mx = s->max[kv] + ((size_t)layer * s->num_kv_heads + h0) * D;
    float a = 0.0f, b = 0.0f;
    for (size_t c = 0; c < (size_t)(h1 - h0) * D; c++) {
        a = mn[c] < a ? mn[c] : a;
        b = mx[c] > b ? mx[c] : b;
    }
    *lo = a > -t ? a : -t;
    *hi = b < t ? b : t;
}

kvcal_status kvcal_stats_to_scales(const kvcal_stats_t *stats,
                                   const kvcal_observer_config *cfg,
                                   kvcal_granularity gran, kvcal_scales_t *out,
                                   kvcal_warn_fn warn, void *warn_ctx)
{
    if (!stats || !cfg || !out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_stats_to_scales: NULL argument");
    if (out->num_layers != stats->num_layers || out->num_kv_heads != stats->num_kv_heads)
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "kvcal_stats_to_scales: scale set of %d layers x %d kv heads "
                          "does not match statistics of %d x %d",
                          out->num_layers, out->num_kv_heads, stats->num_layers,
                          stats->num_kv_heads);
    if (gran != KVCAL_GRANULARITY_TENSOR && gran != KVCAL_GRANULARITY_HEAD)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_to_scales: unknown granularity %d", (int)gran);
    const int asym = out->format == KVCAL_KV_FORMAT_INT8_ASYM;
    if (asym && (!out->k_offset || !stats->min[0]))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_to_scales: int8 with offsets needs the signed "
                          "range in the statistics (kvcal_stats_set_range) and room "
                          "for the offsets (kvcal_scales_set_offsets)");
    char params[KVCAL_TEXT_MAX];
    kvcal_status st = kvcal_observer_params_json(cfg, params, sizeof params);
    if (st)
        return st;
    const int H = stats->num_kv_heads;
    float *t = malloc((size_t)H * sizeof *t); // (H) thresholds of one layer and K/V
    if (!t)
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_stats_to_scales: out of memory");
    for (int l = 0; l < stats->num_layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            float layer_t = 0.0f;
            for (int h = 0; h < H; h++) {
                st = kvcal_stats_threshold(stats, cfg, l, kv, h, &t[h]);
                if (st) {
                    free(t);
                    return kvcal_fail_context(st, "layer %d %s kv head %d: ", l,
                                              kv_name(kv), h);
                }
            }
            if (gran == KVCAL_GRANULARITY_TENSOR &&
                (st = layer_threshold(stats, cfg, l, kv, t, &layer_t))) {
                free(t);
                return kvcal_fail_context(st, "layer %d %s: ", l, kv_name(kv));
            }
            float *scale = kv == KVCAL_K ? out->k_head : out->v_head;
            float *absmax = kv == KVCAL_K ? out->k_absmax : out->v_absmax;
            float *clip = kv == KVCAL_K ? out->k_clip : out->v_clip;
            double clipped = 0.0, total = 0.0;
            for (int h = 0; h < H; h++) {
                int i = kvcal_scales_index(out, l, h);
                float used = gran == KVCAL_GRANULARITY_TENSOR ? layer_t : t[h];
                double a, n;
                scale[i] = kvcal_scale_from_absmax(used);
                if (asym) {
                    const int tensor = gran == KVCAL_GRANULARITY_TENSOR;
                    float lo, hi;
                    signed_range(stats, l, kv, tensor ? 0 : h, tensor ? H : h + 1, used,
                                 &lo, &hi);
                    kvcal_int8_asym_params(
                        lo, hi, &scale[i],
                        &(kv == KVCAL_K ? out->k_offset : out->v_offset)[i]);
                }
                absmax[i] = kvcal_stats_head_absmax(stats, l, kv, h);
                hist_count_clipped(stats, l, kv, h, scale[i], &a, &n);
                clipped += a;
                total += n;
                if (absmax[i] == 0.0f && warn && kvcal_scales_layer_cached(out, l)) {
                    char msg[256];
                    snprintf(msg, sizeof msg,
                             "layer %d %s kv head %d never saw a non-zero value; %s %g",
                             l, kv_name(kv), h,
                             used > 0.0f ? "it shares the layer's scale"
                                         : "it gets the floor scale",
                             (double)scale[i]);
                    warn(warn_ctx, msg);
                }
            }
            clip[l] = total > 0.0 ? (float)(clipped / total) : 0.0f;
        }
    free(t);
    if ((st = queries_to_scales(stats, out, warn, warn_ctx)))
        return st;
    out->granularity = gran;
    out->kv_shared = 0;
    out->has_absmax = 1;
    out->has_clip = !asym; /* the estimates count e4m3's clipping */
    snprintf(out->provenance.observer, sizeof out->provenance.observer, "%s",
             kvcal_observer_name(cfg->kind));
    memcpy(out->provenance.observer_params, params, sizeof params);
    out->provenance.num_tokens = observed_tokens(stats);
    return KVCAL_OK;
}
