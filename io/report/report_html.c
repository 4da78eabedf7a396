/* io/report/report_html.c: the calibration report as one HTML file (see the
 * header). Inputs are checked first; the file is then written in one pass
 * through io/atomic_file. */
#include "io/report/report_html.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hist_rule.h"
#include "core/scale_rule.h"
#include "core/status.h"
#include "io/atomic_file.h"
#include "observers/observer.h"

#define EVAL_MAX_MODES 32
#define WARN_LIST_MAX 12 /* items listed per kind of warning */
#define WORST_CHANNELS 3 /* (layer, K or V) drawn channel by channel */
#define HIST_GROUP 8     /* histogram bins drawn as one bar: 8 an octave */
#define K_COLOUR "#3b6fb6"
#define V_COLOUR "#d9822b"
#define MISSING_COLOUR "#c8c8c8"

// --- the eval report --------------------------------------------------------

static const char *const eval_layer_keys[] = {"k_sqnr_db", "v_sqnr_db", "k_clipped",
                                              "v_clipped", "attention_rel_error"};
enum { EV_K_SQNR, EV_V_SQNR, EV_K_CLIP, EV_V_CLIP, EV_ATT, EV_KEYS };

typedef struct eval_mode {
    const char *name;
    double ppl, change, change_rel; /* NAN where the report has null */
    const cJSON *layers;            /* (num_layers) objects, or NULL (baseline) */
    /* against the baseline, NAN (noise -1) where the report has none: the
     * 95% interval of change_rel, the verdict, KLD and top-1 agreement */
    double ci_lo, ci_hi, tokens_to_resolve, kld_mean, kld_p99, top1;
    int within_noise;
    /* the layer that costs the most (-1: not said), what by, its value, the
     * weaker of its K and V */
    int costliest;
    const char *cost_by, *weaker;
    double cost_value;
    /* against the best mode (vs_best; best "" when none): its 95% interval */
    const char *best;
    double best_lo, best_hi;
    int best_noise;
} eval_mode;

typedef struct eval_view {
    const char *architecture, *dataset, *device, *baseline_dtype, *scales;
    double num_samples, num_tokens, seq_len;
    int num_modes;
    int num_layers; /* of the modes that have layers; 0 when none has */
    eval_mode modes[EVAL_MAX_MODES];
} eval_view;

static kvcal_status eval_bad(const char *path, const char *where, const char *what)
{
    return kvcal_fail(KVCAL_ERR_FORMAT,
                      "%s: %s: %s; give the JSON that `kvcal eval --json` prints", path,
                      where, what);
}

/* o[key] as a number (null: NAN when nullable); -1 when missing or not one. */
static int eval_number(const cJSON *o, const char *key, int nullable, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(v)) {
        *out = v->valuedouble;
        return 0;
    }
    if (nullable && cJSON_IsNull(v)) {
        *out = NAN;
        return 0;
    }
    return -1;
}

static const char *eval_string(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The value `key` (EV_*) of layer l of mode m (NAN for null). */
static double eval_layer(const eval_mode *m, int l, int key)
{
    double v = NAN;
    eval_number(cJSON_GetArrayItem(m->layers, l), eval_layer_keys[key], 1, &v);
    return v;
}

static kvcal_status eval_read(const cJSON *j, const char *path, eval_view *ev)
{
    char where[96];
    memset(ev, 0, sizeof *ev);
    if (!cJSON_IsObject(j))
        return eval_bad(path, "top level", "not a JSON object");
    const cJSON *modes = cJSON_GetObjectItemCaseSensitive(j, "modes");
    if (!cJSON_IsArray(modes) || cJSON_GetArraySize(modes) < 1)
        return eval_bad(path, "modes", "missing or not a non-empty array");
    if (cJSON_GetArraySize(modes) > EVAL_MAX_MODES)
        return eval_bad(path, "modes", "more modes than kvcal eval runs");
    ev->architecture = eval_string(j, "architecture");
    ev->dataset = eval_string(j, "dataset");
    ev->device = eval_string(j, "device");
    ev->baseline_dtype = eval_string(j, "baseline_dtype");
    ev->scales = eval_string(j, "scales");
    eval_number(j, "num_samples", 0, &ev->num_samples);
    eval_number(j, "num_tokens", 0, &ev->num_tokens);
    eval_number(j, "seq_len", 0, &ev->seq_len);
    const cJSON *m;
    cJSON_ArrayForEach(m, modes)
    {
        int i = ev->num_modes++;
        eval_mode *e = &ev->modes[i];
        snprintf(where, sizeof where, "modes[%d]", i);
        if (!cJSON_IsObject(m) || !(e->name = eval_string(m, "mode"))[0])
            return eval_bad(path, where, "not an object with a \"mode\" name");
        if (eval_number(m, "perplexity", 1, &e->ppl) ||
            eval_number(m, "perplexity_change", 1, &e->change) ||
            eval_number(m, "perplexity_change_rel", 1, &e->change_rel))
            return eval_bad(path, where,
                            "perplexity, perplexity_change or perplexity_change_rel "
                            "missing or not a number");
        const cJSON *ci =
            cJSON_GetObjectItemCaseSensitive(m, "perplexity_change_rel_ci95");
        const cJSON *noise = cJSON_GetObjectItemCaseSensitive(m, "within_noise");
        e->ci_lo = e->ci_hi = e->tokens_to_resolve = e->kld_mean = e->kld_p99 = e->top1 =
            NAN;
        e->within_noise = cJSON_IsBool(noise) ? cJSON_IsTrue(noise) : -1;
        if (cJSON_IsArray(ci) && cJSON_GetArraySize(ci) == 2 &&
            cJSON_IsNumber(cJSON_GetArrayItem(ci, 0)) &&
            cJSON_IsNumber(cJSON_GetArrayItem(ci, 1)))
            e->ci_lo = cJSON_GetArrayItem(ci, 0)->valuedouble,
            e->ci_hi = cJSON_GetArrayItem(ci, 1)->valuedouble;
        eval_number(m, "tokens_to_resolve", 1, &e->tokens_to_resolve);
        eval_number(m, "kld_mean", 1, &e->kld_mean);
        eval_number(m, "kld_p99", 1, &e->kld_p99);
        eval_number(m, "top1_agreement", 1, &e->top1);
        const cJSON *cl = cJSON_GetObjectItemCaseSensitive(m, "costliest_layer");
        double layer = -1;
        e->cost_value = NAN;
        if (cJSON_IsObject(cl) && !eval_number(cl, "layer", 0, &layer))
            eval_number(cl, "value", 1, &e->cost_value);
        e->costliest = (int)layer;
        const cJSON *vb = cJSON_GetObjectItemCaseSensitive(m, "vs_best");
        const cJSON *bci =
            cJSON_GetObjectItemCaseSensitive(vb, "perplexity_change_rel_ci95");
        const cJSON *bn = cJSON_GetObjectItemCaseSensitive(vb, "within_noise");
        e->best = eval_string(vb, "mode");
        e->best_lo = e->best_hi = NAN;
        e->best_noise = cJSON_IsBool(bn) ? cJSON_IsTrue(bn) : -1;
        if (cJSON_IsArray(bci) && cJSON_GetArraySize(bci) == 2 &&
            cJSON_IsNumber(cJSON_GetArrayItem(bci, 0)) &&
            cJSON_IsNumber(cJSON_GetArrayItem(bci, 1)))
            e->best_lo = cJSON_GetArrayItem(bci, 0)->valuedouble,
            e->best_hi = cJSON_GetArrayItem(bci, 1)->valuedouble;
        e->cost_by = eval_string(cl, "by");
        e->weaker = eval_string(cl, "weaker");
        const cJSON *layers = cJSON_GetObjectItemCaseSensitive(m, "layers");
        if (!layers)
            continue;
        int n = cJSON_GetArraySize(layers);
        if (!cJSON_IsArray(layers) || n < 1 || (ev->num_layers && n != ev->num_layers))
            return eval_bad(path, where,
                            "layers is not an array of as many layers as the other "
                            "modes'");
        ev->num_layers = n;
        e->layers = layers;
        for (int l = 0; l < n; l++) {
            const cJSON *o = cJSON_GetArrayItem(layers, l);
            double v, index;
            snprintf(where, sizeof where, "modes[%d].layers[%d]", i, l);
            if (!cJSON_IsObject(o) || eval_number(o, "layer", 0, &index) || index != l)
                return eval_bad(path, where,
                                "not an object with \"layer\" equal to its index");
            for (int k = 0; k < EV_KEYS; k++)
                if (eval_number(o, eval_layer_keys[k], k != EV_K_CLIP && k != EV_V_CLIP,
                                &v) ||
                    ((k == EV_K_CLIP || k == EV_V_CLIP) && !(v >= 0 && v <= 1)))
                    return eval_bad(path, where,
                                    k == EV_K_CLIP || k == EV_V_CLIP
                                        ? "k_clipped or v_clipped missing or not a "
                                          "fraction in [0, 1]"
                                        : "k_sqnr_db, v_sqnr_db or attention_rel_error "
                                          "missing or not a number");
        }
    }
    return KVCAL_OK;
}

// --- what the figures share -----------------------------------------------------

typedef struct report {
    FILE *f;
    const kvcal_report_html_inputs *in;
    const kvcal_scales_t *s; /* NULL: eval alone */
    const kvcal_stats_t *st; /* NULL: no statistics */
    const eval_view *ev;     /* NULL: no eval report */
    int L, H;
    int hist_layer;
    double *clip[2]; /* (L) fraction clipping under the written scale, or NULL */
} report;

/* Text with &, <, >, " and ' escaped (for element text and attributes). */
static void esc(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&#39;", f);
            break;
        default:
            fputc(*s, f);
        }
}

/* v as a short number ("%.4g"), "n/a" when not finite. */
static const char *num4(char *buf, size_t n, double v)
{
    if (isfinite(v))
        snprintf(buf, n, "%.4g", v);
    else
        snprintf(buf, n, "n/a");
    return buf;
}

/* A fraction as a percentage: "0.012%", "0%". */
static const char *pct(char *buf, size_t n, double v)
{
    if (!isfinite(v))
        snprintf(buf, n, "n/a");
    else if (v == 0)
        snprintf(buf, n, "0%%");
    else
        snprintf(buf, n, "%.3g%%", 100.0 * v);
    return buf;
}

static float max_over_heads(const float *a, int H, int l)
{
    float m = 0.0f;
    for (int h = 0; h < H; h++)
        m = a[l * H + h] > m ? a[l * H + h] : m;
    return m;
}

static float tensor_scale(const kvcal_scales_t *s, int kv, int l)
{
    return max_over_heads(kv == KVCAL_K ? s->k_head : s->v_head, s->num_kv_heads, l);
}

/* The smallest of 1, 2, 5, 10, 20, 50, ... labels whose spacing is at least
 * min_px when one label stands every `px` pixels. */
static int label_step(double px, double min_px)
{
    for (int step = 1;; step *= 10)
        for (int m = 1; m <= 5; m += m == 1 ? 1 : 3)
            if (step * m * px >= min_px || step > 1000000)
                return step * m;
}

/* A round tick step for about n ticks over [0, range]. */
static double tick_step(double range, int n)
{
    double raw = range / n, p = pow(10.0, floor(log10(raw)));
    double m = raw / p;
    return p * (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10);
}

/* A linear y axis from 0 (at y0 + h) to ymax (at y0), grid lines across w
 * from x0; labels as percentages when percent. */
static void y_axis(FILE *f, double x0, double y0, double w, double h, double ymax,
                   int percent)
{
    double step = tick_step(ymax, 4);
    char b[32];
    for (double t = 0; t <= ymax * (1 + 1e-9); t += step) {
        double y = y0 + h - h * t / ymax;
        fprintf(f,
                "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>",
                x0, y, x0 + w, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", x0 - 4,
                y + 4, percent ? pct(b, sizeof b, t) : num4(b, sizeof b, t));
    }
    fprintf(f, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
            x0, y0 + h, x0 + w, y0 + h);
}

/* Layer numbers under columns of width cw starting at x0, every label_step. */
static void layer_labels(FILE *f, int L, double x0, double cw, double y)
{
    int step = label_step(cw, 26);
    for (int l = 0; l < L; l += step)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>",
                x0 + (l + 0.5) * cw, y, l);
    fprintf(f, "\n");
}

static void swatch(FILE *f, double x, double y, const char *colour, const char *label)
{
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>", x,
            y - 10, colour);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", x + 16, y);
    esc(f, label);
    fprintf(f, "</text>\n");
}

static void figure_open(FILE *f, const char *id, const char *kind, double w, double h,
                        const char *label)
{
    fprintf(f,
            "<figure id=\"%s\" class=\"%s\">\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
            "viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" role=\"img\" "
            "aria-label=\"",
            id, kind, w, h, w, h);
    esc(f, label);
    fprintf(f, "\">\n");
}

static void figure_close(FILE *f, const char *caption_html)
{
    fprintf(f, "</svg>\n<figcaption>%s</figcaption>\n</figure>\n", caption_html);
}

// --- colour scales and heatmaps --------------------------------------------------

/* viridis at ten evenly spaced points: dark blue (low) to yellow (high),
 * readable in grey and by the colour-blind */
static const unsigned char viridis[10][3] = {
    {68, 1, 84},    {72, 40, 120},  {62, 73, 137},  {49, 104, 142}, {38, 130, 142},
    {31, 158, 137}, {53, 183, 121}, {110, 206, 88}, {181, 222, 43}, {253, 231, 37}};

static void colour_at(double t, char out[8])
{
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    double x = t * 9;
    int i = (int)x < 9 ? (int)x : 8;
    double u = x - i;
    int c[3];
    for (int k = 0; k < 3; k++)
        c[k] = (int)lround(viridis[i][k] + u * (viridis[i + 1][k] - viridis[i][k]));
    snprintf(out, 8, "#%02x%02x%02x", c[0], c[1], c[2]);
}

typedef struct colour_scale {
    double lo, hi;
    int log; /* 1: colours follow log10 of the value (values > 0 only) */
} colour_scale;

/* Whether v is drawn in the colour scale (else as a missing cell). */
static int drawn(double v, int zero_missing)
{
    return isfinite(v) && !(zero_missing && v <= 0);
}

static double scale_t(const colour_scale *c, double v)
{
    if (c->hi <= c->lo)
        return 0.5;
    return c->log ? (log10(v) - log10(c->lo)) / (log10(c->hi) - log10(c->lo))
                  : (v - c->lo) / (c->hi - c->lo);
}

static double scale_value(const colour_scale *c, double t)
{
    return c->log ? pow(10.0, log10(c->lo) + t * (log10(c->hi) - log10(c->lo)))
                  : c->lo + t * (c->hi - c->lo);
}

/* One figure: rows x layers cells coloured by value. */
typedef struct heatmap {
    const char *id;
    const char *what; /* the value's name: "K absmax" */
    const double *v;  /* (row r, layer c) at v[c * col_stride + r * row_stride] */
    int rows, cols;
    int col_stride, row_stride;
    const char *const *row_names; /* NULL: "head r" */
    int zero_missing;             /* a 0 is a missing cell (absmax never seen) */
    const char *missing;          /* what a missing cell means */
    const char *caption;          /* HTML */
} heatmap;

static void heatmap_write(FILE *f, const heatmap *m)
{
    char col[8];
    colour_scale cs = {INFINITY, -INFINITY, 0};
    int any_missing = 0;
    size_t longest = 6;
    for (int r = 0; r < m->rows; r++) {
        if (m->row_names && strlen(m->row_names[r]) > longest)
            longest = strlen(m->row_names[r]);
        for (int c = 0; c < m->cols; c++) {
            double v = m->v[c * m->col_stride + r * m->row_stride];
            if (!drawn(v, m->zero_missing)) {
                any_missing = 1;
                continue;
            }
            cs.lo = fmin(cs.lo, v);
            cs.hi = fmax(cs.hi, v);
        }
    }
    if (cs.lo > cs.hi)
        cs.lo = cs.hi = 0;
    cs.log = cs.lo > 0 && cs.hi / cs.lo > 20;
    const double ml = 14 + 6.5 * (double)longest, mt = 6;
    const double cw = fmax(6, fmin(40, floor(840.0 / m->cols)));
    const double ch = m->rows <= 8    ? 22
                      : m->rows <= 16 ? 14
                                      : fmax(4, floor(320.0 / m->rows));
    const double gw = cw * m->cols, gh = ch * m->rows;
    const double lw = 300, ly = mt + gh + 42;
    const double w = ml + fmax(gw, lw + 64 + (any_missing ? 200 : 0)) + 12, h = ly + 34;
    figure_open(f, m->id, "chart heatmap", w, h, m->what);
    int rstep = label_step(ch, 12);
    for (int r = 0; r < m->rows; r += rstep) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", ml - 6,
                mt + (r + 0.5) * ch + 4);
        if (m->row_names)
            esc(f, m->row_names[r]);
        else
            fprintf(f, "head %d", r);
        fprintf(f, "</text>");
    }
    fprintf(f, "\n");
    for (int r = 0; r < m->rows; r++)
        for (int c = 0; c < m->cols; c++) {
            double v = m->v[c * m->col_stride + r * m->row_stride];
            int ok = drawn(v, m->zero_missing);
            if (ok)
                colour_at(scale_t(&cs, v), col);
            fprintf(f,
                    "<rect class=\"cell\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                    "height=\"%.1f\" fill=\"%s\" data-row=\"%d\" data-layer=\"%d\" "
                    "data-value=\"%.9g\"><title>layer %d, ",
                    ml + c * cw, mt + r * ch, cw, ch, ok ? col : MISSING_COLOUR, r, c,
                    isfinite(v) ? v : 0.0, c);
            if (m->row_names)
                esc(f, m->row_names[r]);
            else
                fprintf(f, "head %d", r);
            fprintf(f, ": %s ", m->what);
            if (isfinite(v))
                fprintf(f, "%.6g", v);
            if (!ok) {
                fprintf(f, isfinite(v) ? " (" : "");
                esc(f, m->missing);
                fprintf(f, isfinite(v) ? ")" : "");
            }
            fprintf(f, "</title></rect>\n");
        }
    if (cw >= 8 && ch >= 8)
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                "fill=\"none\" stroke=\"#888\" stroke-width=\"0.5\"/>\n",
                ml, mt, gw, gh);
    layer_labels(f, m->cols, ml, cw, mt + gh + 14);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
            "class=\"axis-title\">layer</text>\n",
            ml + gw / 2, mt + gh + 28);
    /* the legend: the colour ramp with five values, and the missing colour */
    fprintf(f, "<defs><linearGradient id=\"ramp-%s\">", m->id);
    for (int k = 0; k <= 9; k++) {
        colour_at(k / 9.0, col);
        fprintf(f, "<stop offset=\"%.3f\" stop-color=\"%s\"/>", k / 9.0, col);
    }
    fprintf(f, "</linearGradient></defs>\n");
    fprintf(
        f,
        "<g class=\"legend\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"10\" "
        "fill=\"url(#ramp-%s)\"/>",
        ml, ly, lw, m->id);
    char tick[5][32];
    size_t wide = 0;
    for (int k = 0; k <= 4; k++) {
        num4(tick[k], sizeof tick[k], scale_value(&cs, cs.hi > cs.lo ? k / 4.0 : 0.5));
        wide = strlen(tick[k]) > wide ? strlen(tick[k]) : wide;
    }
    const int kstep =
        lw / 4 > 1.5 * 6.5 * (double)wide + 10 ? 1 : 2; /* labels that do not touch */
    for (int k = 0; k <= 4; k += kstep) {
        double x = ml + k / 4.0 * lw;
        fprintf(f,
                "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>",
                x, ly + 10, x, ly + 14);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">%s</text>", x, ly + 25,
                k == 0   ? "start"
                : k == 4 ? "end"
                         : "middle",
                tick[k]);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>", ml + lw + 8, ly + 9,
            cs.log ? "log scale" : "linear");
    if (any_missing) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>",
                ml + lw + 64, ly, MISSING_COLOUR);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", ml + lw + 78, ly + 9);
        esc(f, m->missing);
        fprintf(f, "</text>");
    }
    fprintf(f, "</g>\n");
    figure_close(f, m->caption);
}

// --- sections --------------------------------------------------------------------

static void row(FILE *f, const char *key, const char *value)
{
    fprintf(f, "<tr><th>%s</th><td>", key);
    esc(f, value);
    fprintf(f, "</td></tr>\n");
}

static void provenance(const report *r)
{
    FILE *f = r->f;
    char b[1024];
    fprintf(f,
            "<section id=\"provenance\">\n<h2>Provenance</h2>\n<table class=\"kv\">\n");
    if (r->s) {
        const kvcal_model_identity *m = &r->s->model;
        const kvcal_provenance *p = &r->s->provenance;
        snprintf(b, sizeof b, "%s%s%s%s",
                 m->architecture[0] ? m->architecture : "unknown",
                 m->model_type[0] ? " (model_type " : "", m->model_type,
                 m->model_type[0] ? ")" : "");
        row(f, "model", b);
        snprintf(b, sizeof b, "%d layers, %d attention heads, %d kv heads, head_dim %d",
                 r->L, m->num_attention_heads, r->H, m->head_dim);
        if (!m->num_attention_heads || !m->head_dim)
            snprintf(b, sizeof b, "%d layers, %d kv heads", r->L, r->H);
        row(f, "shape", b);
        if (r->in->scales_path)
            row(f, "scales file", r->in->scales_path);
        snprintf(b, sizeof b, "%s%s",
                 r->s->granularity == KVCAL_GRANULARITY_HEAD
                     ? "per kv head"
                     : "per tensor (one K and one V scale a layer)",
                 r->s->kv_shared ? "; one value for K and V (a legacy file)" : "");
        row(f, "granularity", b);
        if (p->observer[0]) {
            int params = p->observer_params[0] && strcmp(p->observer_params, "{}");
            snprintf(b, sizeof b, "%s%s%s", p->observer, params ? " " : "",
                     params ? p->observer_params : "");
            row(f, "observer", b);
        }
        if (p->dataset[0]) {
            row(f, "calibration data", p->dataset);
            snprintf(b, sizeof b, "%lld samples, %lld tokens, seed %lld", p->num_samples,
                     p->num_tokens, p->seed);
            row(f, "tokens", b);
        }
        if (p->tool_version[0])
            row(f, "calibrated with", p->tool_version);
    }
    if (r->st) {
        if (r->in->stats_path)
            row(f, "statistics file", r->in->stats_path);
        snprintf(b, sizeof b, "%lld batches, %lld tokens a layer, %d channels a head",
                 (long long)r->st->batches, (long long)r->st->tokens[0], r->st->head_dim);
        row(f, "statistics", b);
    }
    if (r->ev) {
        const eval_view *e = r->ev;
        if (r->in->eval_path)
            row(f, "eval report", r->in->eval_path);
        if (!r->s && e->architecture[0])
            row(f, "model", e->architecture);
        if (e->dataset[0])
            row(f, "eval data", e->dataset);
        snprintf(
            b, sizeof b, "%.0f samples x %.0f tokens, %.0f tokens, on %s (%s baseline)",
            e->num_samples, e->seq_len, e->num_tokens, e->device[0] ? e->device : "?",
            e->baseline_dtype[0] ? e->baseline_dtype : "?");
        row(f, "eval run", b);
        if (e->scales[0])
            row(f, "eval scales", e->scales);
    }
    snprintf(b, sizeof b, "kvcal %s", kvcal_version());
    row(f, "report by", b);
    fprintf(f, "</table>\n</section>\n");
}

/* --- warnings */

/* One kind of warning, listed up to WARN_LIST_MAX times. */
typedef struct warn_list {
    FILE *f; /* NULL: count only */
    const char *kind;
    int n;
} warn_list;

static void warn_item(warn_list *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void warn_item(warn_list *w, const char *fmt, ...)
{
    char b[512];
    va_list ap;
    if (w->n++ >= WARN_LIST_MAX || !w->f)
        return;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    fprintf(w->f, "<li class=\"warning\" data-kind=\"%s\">", w->kind);
    esc(w->f, b);
    fprintf(w->f, "</li>\n");
}

static void warn_rest(warn_list *w, const char *what)
{
    if (w->f && w->n > WARN_LIST_MAX)
        fprintf(w->f, "<li class=\"more\" data-kind=\"%s\">and %d more %s</li>\n",
                w->kind, w->n - WARN_LIST_MAX, what);
}

/* The warnings, into f (NULL: only counted); returns how many. */
static int warnings(const report *r, FILE *f)
{
    static const char *const kv_name[2] = {"K", "V"};
    int total = 0;
    char b1[32], b2[32];
    if (r->s) {
        warn_list w = {f, "unit-scale", 0};
        /* a layer that caches nothing (linear attention) holds no scale to warn of */
        for (int l = 0; l < r->L; l++)
            for (int h = 0; kvcal_scales_layer_cached(r->s, l) && h < r->H; h++)
                for (int kv = 0; kv < 2; kv++)
                    if ((kv == KVCAL_K ? r->s->k_head : r->s->v_head)[l * r->H + h] ==
                        1.0f)
                        warn_item(&w,
                                  "layer %d, head %d: the %s scale is exactly 1.0, the "
                                  "default an engine uses when it has no scale: was this "
                                  "head calibrated?",
                                  l, h, kv_name[kv]);
        warn_rest(&w, "scales of exactly 1.0");
        total += w.n;
        warn_list u = {f, "never-seen", 0};
        for (int l = 0; l < r->L; l++)
            for (int h = 0; kvcal_scales_layer_cached(r->s, l) && h < r->H; h++)
                for (int kv = 0; kv < 2; kv++) {
                    const float *a = kv == KVCAL_K ? r->s->k_absmax : r->s->v_absmax;
                    int seen = r->s->has_absmax ? a[l * r->H + h] > 0
                               : r->st ? kvcal_stats_head_absmax(r->st, l, kv, h) > 0
                                       : 1;
                    if (!seen)
                        warn_item(&u,
                                  "layer %d, head %d: %s never saw a non-zero value; its "
                                  "scale is the floor 1/(448*512)",
                                  l, h, kv_name[kv]);
                }
        warn_rest(&u, "heads never seen");
        total += u.n;
    }
    if (r->clip[0]) {
        warn_list w = {f, "clip", 0};
        for (int l = 0; l < r->L; l++)
            for (int kv = 0; kv < 2; kv++)
                if (r->clip[kv][l] > r->in->clip_threshold)
                    warn_item(&w,
                              "layer %d: %s of the calibration %s values clip under "
                              "the written scale (above the %s threshold)",
                              l, pct(b1, sizeof b1, r->clip[kv][l]), kv_name[kv],
                              pct(b2, sizeof b2, r->in->clip_threshold));
        warn_rest(&w, "layers clipping");
        total += w.n;
    }
    if (r->ev) {
        warn_list w = {f, "eval-clip", 0}, n = {f, "eval-nonfinite", 0};
        for (int i = 0; i < r->ev->num_modes; i++) {
            const eval_mode *m = &r->ev->modes[i];
            if (!isfinite(m->ppl))
                warn_item(&n, "eval mode %s: the perplexity is not finite", m->name);
            for (int l = 0; m->layers && l < r->ev->num_layers; l++)
                for (int kv = 0; kv < 2; kv++) {
                    double c = eval_layer(m, l, kv == KVCAL_K ? EV_K_CLIP : EV_V_CLIP);
                    if (c > r->in->clip_threshold)
                        warn_item(&w,
                                  "eval mode %s, layer %d: %s of the %s values clipped "
                                  "(above the %s threshold)",
                                  m->name, l, pct(b1, sizeof b1, c), kv_name[kv],
                                  pct(b2, sizeof b2, r->in->clip_threshold));
                }
        }
        warn_rest(&w, "clipping layers in the eval");
        warn_rest(&n, "modes");
        total += w.n + n.n;
    }
    return total;
}

static void warnings_section(const report *r)
{
    FILE *f = r->f;
    char b[32];
    int n = warnings(r, NULL);
    fprintf(f, "<section id=\"warnings\">\n<h2>Warnings (%d)</h2>\n", n);
    if (!n)
        fprintf(f,
                "<p class=\"ok\">None: no scale is exactly 1.0, every head saw "
                "non-zero values and nothing clips more than %s.</p>\n",
                pct(b, sizeof b, r->in->clip_threshold));
    else {
        fprintf(f, "<ul class=\"warnings\">\n");
        warnings(r, f);
        fprintf(f, "</ul>\n");
    }
    fprintf(f, "</section>\n");
}

/* --- per layer x head */

static void heatmaps_section(const report *r, double *buf)
{
    FILE *f = r->f;
    const kvcal_scales_t *s = r->s;
    const size_t n = (size_t)r->L * r->H;
    fprintf(f, "<section id=\"heatmaps\">\n<h2>Per layer and kv head</h2>\n"
               "<p>Columns are layers, rows kv heads; hover a cell for its value.</p>\n");
    struct {
        const char *id, *what, *caption;
        const float *a;
        int zero_missing;
    } maps[4] = {
        {"fig-k-absmax", "K absmax",
         "<b>K absmax</b>: the largest |K| each head cached (after RoPE).", s->k_absmax,
         1},
        {"fig-v-absmax", "V absmax", "<b>V absmax</b>: the largest |V| each head cached.",
         s->v_absmax, 1},
        {"fig-k-scale", "K scale",
         "<b>K scale written</b>: dequantized = fp8 &times; scale; scale = absmax / 448 "
         "for minmax.",
         s->k_head, 0},
        {"fig-v-scale", "V scale", "<b>V scale written</b>.", s->v_head, 0},
    };
    if (!s->has_absmax)
        fprintf(f, "<p class=\"note\">This scales file holds no absmax (only the kvcal "
                   "JSON does): the absmax maps are left out.</p>\n");
    if (kvcal_scales_uncached_layers(s)) {
        fprintf(f, "<p class=\"note\">Layers");
        for (int l = 0, first = 1; l < r->L; l++)
            if (!kvcal_scales_layer_cached(s, l))
                fprintf(f, "%s %d", first ? "" : ",", l), first = 0;
        fprintf(f, " cache nothing (a hybrid model's linear attention): their cells hold "
                   "0 and the floor scale, which no engine reads.</p>\n");
    }
    for (int i = s->has_absmax ? 0 : 2; i < 4; i++) {
        if (i % 2 == 0)
            fprintf(f, "<div class=\"pair\">\n");
        for (size_t k = 0; k < n; k++)
            buf[k] = maps[i].a[k];
        heatmap m = {maps[i].id,
                     maps[i].what,
                     buf,
                     r->H,
                     r->L,
                     r->H,
                     1,
                     NULL,
                     maps[i].zero_missing,
                     "0: never saw a non-zero value",
                     maps[i].caption};
        heatmap_write(f, &m);
        if (i % 2 == 1)
            fprintf(f, "</div>\n");
    }
    fprintf(f, "</section>\n");
}

/* --- per layer */

static void layer_absmax_figure(const report *r)
{
    FILE *f = r->f;
    const kvcal_scales_t *s = r->s;
    double ymax = 0;
    for (int l = 0; l < r->L; l++)
        for (int kv = 0; kv < 2; kv++)
            ymax =
                fmax(ymax, fmax(max_over_heads(kv ? s->v_absmax : s->k_absmax, r->H, l),
                                448.0 * tensor_scale(s, kv, l)));
    ymax = ymax > 0 ? ymax * 1.08 : 1;
    const double ml = 60, mt = 30, pw = fmax(560, fmin(860, 40.0 * r->L)), ph = 200;
    const double gw = pw / r->L, bw = fmax(1, gw * 0.36);
    figure_open(f, "fig-layer-absmax", "chart bars", ml + pw + 16, mt + ph + 40,
                "per-layer K and V absmax");
    swatch(f, ml, 14, K_COLOUR, "K absmax");
    swatch(f, ml + 100, 14, V_COLOUR, "V absmax");
    fprintf(f, "<line class=\"range\" x1=\"%.1f\" y1=\"10\" x2=\"%.1f\" y2=\"10\"/>",
            ml + 200, ml + 216);
    fprintf(f,
            "<text x=\"%.1f\" y=\"14\">448 &#215; the written scale (largest value the "
            "cache holds)</text>\n",
            ml + 222);
    y_axis(f, ml, mt, pw, ph, ymax, 0);
    for (int l = 0; l < r->L; l++)
        for (int kv = 0; kv < 2; kv++) {
            double a = max_over_heads(kv ? s->v_absmax : s->k_absmax, r->H, l);
            double range = 448.0 * tensor_scale(s, kv, l);
            double x = ml + l * gw + gw * 0.14 + kv * bw, y = mt + ph - ph * a / ymax;
            fprintf(
                f,
                "<rect class=\"cell\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                "height=\"%.2f\" "
                "fill=\"%s\" data-layer=\"%d\" data-kv=\"%s\" data-value=\"%.9g\"><title>"
                "layer %d: %s absmax %.6g, 448 &#215; scale %.6g</title></rect>",
                x, y, bw, mt + ph - y, kv ? V_COLOUR : K_COLOUR, l, kv ? "v" : "k", a, l,
                kv ? "V" : "K", a, range);
            double yr = mt + ph - ph * range / ymax;
            fprintf(f,
                    "<line class=\"range\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" "
                    "y2=\"%.2f\"/>\n",
                    x - 1, yr, x + bw + 1, yr);
        }
    layer_labels(f, r->L, ml, gw, mt + ph + 14);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
            "class=\"axis-title\">layer</text>\n",
            ml + pw / 2, mt + ph + 30);
    figure_close(f,
                 "<b>K and V absmax per layer</b> (the largest over its kv heads), and "
                 "the largest value the written scale lets the FP8 cache hold: a bar "
                 "above its mark clips.");
}

static void layer_clip_figure(const report *r)
{
    FILE *f = r->f;
    char b[32];
    double top = 0;
    for (int l = 0; l < r->L; l++)
        for (int kv = 0; kv < 2; kv++)
            top = fmax(top, r->clip[kv][l]);
    /* the bars' own range; the threshold drawn when it falls inside it */
    const int any = top > 0;
    const double ymax = any ? top * 1.25 : fmax(r->in->clip_threshold * 1.2, 1e-4);
    const int threshold_shown = r->in->clip_threshold <= ymax;
    const double ml = 60, mt = 30, pw = fmax(560, fmin(860, 40.0 * r->L)), ph = 140;
    const double gw = pw / r->L, bw = fmax(1, gw * 0.36);
    figure_open(f, "fig-layer-clip", "chart bars", ml + pw + 16, mt + ph + 40,
                "fraction of values clipping per layer");
    swatch(f, ml, 14, K_COLOUR, "K clipped");
    swatch(f, ml + 100, 14, V_COLOUR, "V clipped");
    fprintf(f, "<line class=\"threshold\" x1=\"%.1f\" y1=\"10\" x2=\"%.1f\" y2=\"10\"/>",
            ml + 200, ml + 216);
    fprintf(f, "<text x=\"%.1f\" y=\"14\">warning threshold (%s%s)</text>\n", ml + 222,
            pct(b, sizeof b, r->in->clip_threshold),
            threshold_shown ? "" : ", above every bar");
    y_axis(f, ml, mt, pw, ph, ymax, 1);
    for (int l = 0; l < r->L; l++)
        for (int kv = 0; kv < 2; kv++) {
            double v = r->clip[kv][l];
            double x = ml + l * gw + gw * 0.14 + kv * bw, y = mt + ph - ph * v / ymax;
            fprintf(
                f,
                "<rect class=\"cell\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                "height=\"%.2f\" "
                "fill=\"%s\" data-layer=\"%d\" data-kv=\"%s\" data-value=\"%.9g\"><title>"
                "layer %d: %s of %s clipped</title></rect>\n",
                x, y, bw, mt + ph - y, kv ? V_COLOUR : K_COLOUR, l, kv ? "v" : "k", v, l,
                pct(b, sizeof b, v), kv ? "V" : "K");
        }
    double yt = mt + ph - ph * r->in->clip_threshold / ymax;
    if (threshold_shown)
        fprintf(f,
                "<line class=\"threshold\" x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" "
                "y2=\"%.2f\"/>\n",
                ml, yt, ml + pw, yt);
    if (!any)
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">no calibration value "
                "clips under the written scales</text>\n",
                ml + pw / 2, mt + ph / 2);
    layer_labels(f, r->L, ml, gw, mt + ph + 14);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
            "class=\"axis-title\">layer</text>\n",
            ml + pw / 2, mt + ph + 30);
    figure_close(f, r->s->has_clip
                        ? "<b>Clipping</b>: the fraction of the calibration values that "
                          "clip under the written scale (|x| / scale &gt; 464), as the "
                          "scales file estimates it."
                        : "<b>Clipping</b>: the fraction of the calibration values that "
                          "clip under the written scale (|x| / scale &gt; 464), counted "
                          "from the statistics' histograms.");
}

static void layer_table(const report *r)
{
    FILE *f = r->f;
    const kvcal_scales_t *s = r->s;
    char b[6][32];
    fprintf(f,
            "<table id=\"layer-table\" class=\"num\">\n<thead><tr><th>layer</th>%s"
            "<th>K scale</th>%s<th>V scale</th>%s</tr></thead>\n<tbody>\n",
            s->has_absmax ? "<th>K absmax</th>" : "",
            s->has_absmax ? "<th>V absmax</th>" : "",
            r->clip[0] ? "<th>K clipped</th><th>V clipped</th>" : "");
    for (int l = 0; l < r->L; l++) {
        fprintf(f, "<tr><td>%d</td>", l);
        if (s->has_absmax)
            fprintf(f, "<td>%s</td>",
                    num4(b[0], 32, max_over_heads(s->k_absmax, r->H, l)));
        fprintf(f, "<td>%s</td>", num4(b[1], 32, tensor_scale(s, KVCAL_K, l)));
        if (s->has_absmax)
            fprintf(f, "<td>%s</td>",
                    num4(b[2], 32, max_over_heads(s->v_absmax, r->H, l)));
        fprintf(f, "<td>%s</td>", num4(b[3], 32, tensor_scale(s, KVCAL_V, l)));
        if (r->clip[0])
            fprintf(f, "<td>%s</td><td>%s</td>", pct(b[4], 32, r->clip[0][l]),
                    pct(b[5], 32, r->clip[1][l]));
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</tbody>\n</table>\n");
}

static void layers_section(const report *r)
{
    fprintf(r->f, "<section id=\"layers\">\n<h2>Per layer</h2>\n");
    if (r->s->has_absmax)
        layer_absmax_figure(r);
    if (r->clip[0])
        layer_clip_figure(r);
    else
        fprintf(r->f,
                "<p class=\"note\">No clipping estimate: this scales file holds "
                "none (only the kvcal JSON does) and no statistics were given.</p>\n");
    layer_table(r);
    fprintf(r->f, "</section>\n");
}

/* --- outlier channels */

/* How far the largest channel of (layer, kv) stands above the mean. */
static double outlier_ratio(const kvcal_stats_t *st, int l, int kv, int *top)
{
    const int n = st->num_kv_heads * st->head_dim;
    const float *a = st->absmax[kv] + (size_t)l * n; /* (H, head_dim) */
    double sum = 0;
    *top = 0;
    for (int i = 0; i < n; i++) {
        sum += a[i];
        if (a[i] > a[*top])
            *top = i;
    }
    return sum > 0 ? a[*top] / (sum / n) : 0;
}

static void channel_figure(const report *r, int l, int kv)
{
    FILE *f = r->f;
    const kvcal_stats_t *st = r->st;
    const int D = st->head_dim, n = r->H * D;
    const float *a = st->absmax[kv] + (size_t)l * n; /* (H, head_dim) */
    int top;
    double ratio = outlier_ratio(st, l, kv, &top);
    double ymax = 0;
    for (int i = 0; i < n; i++)
        ymax = fmax(ymax, a[i]);
    for (int h = 0; h < r->H; h++)
        ymax = fmax(ymax, 448.0 * (kv ? r->s->v_head : r->s->k_head)[l * r->H + h]);
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    const double ml = 60, mt = 30, pw = 860, ph = 160, cw = pw / n;
    char id[64], label[160];
    snprintf(id, sizeof id, "fig-channels-%s-%d", kv ? "v" : "k", l);
    snprintf(label, sizeof label, "per-channel %s absmax of layer %d", kv ? "V" : "K", l);
    figure_open(f, id, "chart channels", ml + pw + 16, mt + ph + 40, label);
    fprintf(f,
            "<text x=\"%.1f\" y=\"14\">layer %d %s: the largest channel, head %d channel "
            "%d, is %.4g, %.1f &#215; the mean channel</text>\n",
            ml, l, kv ? "V" : "K", top / D, top % D, a[top], ratio);
    y_axis(f, ml, mt, pw, ph, ymax, 0);
    static const char *const shade[2][2] = {{K_COLOUR, "#86a9dc"}, {V_COLOUR, "#efb67c"}};
    for (int i = 0; i < n; i++) {
        double y = mt + ph - ph * a[i] / ymax;
        fprintf(
            f,
            "<rect class=\"cell\" x=\"%.2f\" y=\"%.2f\" width=\"%.3f\" height=\"%.2f\" "
            "fill=\"%s\" data-head=\"%d\" data-channel=\"%d\" data-value=\"%.9g\"><title>"
            "head %d, channel %d: %s absmax %.6g</title></rect>\n",
            ml + i * cw, y, cw > 1.5 ? cw * 0.85 : cw, mt + ph - y,
            shade[kv][(i / D) % 2], i / D, i % D, a[i], i / D, i % D, kv ? "V" : "K",
            a[i]);
    }
    int hstep = label_step(cw * D, 40);
    for (int h = 0; h < r->H; h++) {
        double x0 = ml + h * D * cw,
               yr = mt + ph -
                    ph * 448.0 * (kv ? r->s->v_head : r->s->k_head)[l * r->H + h] / ymax;
        fprintf(f,
                "<line class=\"range\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" "
                "y2=\"%.2f\"><title>head %d: 448 &#215; scale = %.6g</title></line>",
                x0, yr, x0 + D * cw, yr, h,
                448.0 * (kv ? r->s->v_head : r->s->k_head)[l * r->H + h]);
        if (h % hstep == 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">h%d</text>\n",
                    x0 + D * cw / 2, mt + ph + 14, h);
    }
    fprintf(
        f,
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"axis-title\">kv head "
        "(each %d channels)</text>\n",
        ml + pw / 2, mt + ph + 30, D);
    figure_close(f, "<b>Per-channel absmax</b>, channel by channel within each kv head "
                    "(the shades alternate by head); the line over each head marks 448 "
                    "&#215; its written scale.");
}

static void channels_section(const report *r)
{
    struct {
        double ratio;
        int l, kv;
    } worst[WORST_CHANNELS];
    int n = 0;
    for (int l = 0; l < r->L; l++)
        for (int kv = 0; kv < 2; kv++) {
            int top;
            double q = outlier_ratio(r->st, l, kv, &top);
            int at = n < WORST_CHANNELS ? n++ : WORST_CHANNELS;
            while (at > 0 && worst[at - 1].ratio < q) {
                if (at < WORST_CHANNELS)
                    worst[at] = worst[at - 1];
                at--;
            }
            if (at < WORST_CHANNELS) {
                worst[at].ratio = q;
                worst[at].l = l;
                worst[at].kv = kv;
            }
        }
    fprintf(r->f,
            "<section id=\"channels\">\n<h2>Outlier channels</h2>\n<p>The %d layer "
            "tensors whose largest channel stands furthest above their mean channel "
            "(from the statistics).</p>\n",
            n);
    for (int i = 0; i < n; i++)
        channel_figure(r, worst[i].l, worst[i].kv);
    fprintf(r->f, "</section>\n");
}

/* --- histograms */

static void histogram_figure(const report *r, int kv)
{
    FILE *f = r->f;
    const kvcal_stats_t *st = r->st;
    const int l = r->hist_layer, B = st->num_bins;
    const int groups = (B - 2) / HIST_GROUP; /* bins 1 .. B-2, 8 to a bar */
    double below = 0, above = 0, total = 0, gmax = 0;
    double *g = calloc((size_t)groups, sizeof *g);
    if (!g)
        return;
    for (int h = 0; h < r->H; h++) {
        const uint64_t *c = st->hist[kv] + ((size_t)l * r->H + h) * B;
        below += (double)c[0];
        above += (double)c[B - 1];
        for (int b = 1; b < B - 1; b++)
            g[(b - 1) / HIST_GROUP] += (double)c[b];
    }
    int first = -1, last = -1;
    for (int i = 0; i < groups; i++) {
        total += g[i];
        gmax = fmax(gmax, g[i]);
        if (g[i] > 0) {
            last = i;
            if (first < 0)
                first = i;
        }
    }
    total += below + above;
    const float scale = tensor_scale(r->s, kv, l);
    const double top = 448.0 * scale, normal = scale / 64.0, zero = scale / 1024.0;
    /* x: log2 |x| over the bars that hold values and the marks */
    double lo =
        first < 0 ? log2(zero)
                  : fmin(log2(kvcal_hist_bin_lower(1 + first * HIST_GROUP)), log2(zero));
    double hi = last < 0 ? log2(top)
                         : fmax(log2(kvcal_hist_bin_lower(1 + (last + 1) * HIST_GROUP)),
                                log2(top));
    lo = floor(lo) - 0.5;
    hi = ceil(hi) + 0.5;
    const double ml = 60, mt = 44, pw = 860, ph = 170, ymax = log10(fmax(gmax, 1)) + 0.3;
    char id[32], label[96];
    snprintf(id, sizeof id, "fig-hist-%s", kv ? "v" : "k");
    snprintf(label, sizeof label, "|%s| histogram of layer %d", kv ? "V" : "K", l);
#define XPOS(log2v) (ml + pw * ((log2v)-lo) / (hi - lo))
    figure_open(f, id, "chart histogram", ml + pw + 16, mt + ph + 44, label);
    fprintf(f,
            "<rect class=\"band\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
            "height=\"%.1f\"><title>"
            "what e4m3 holds under the scale: |x| from %.3g to %.4g</title></rect>\n",
            XPOS(log2(zero)), (double)mt, XPOS(log2(top)) - XPOS(log2(zero)), ph, zero,
            top);
    for (int d = 0; d <= (int)ymax; d++) {
        double y = mt + ph - ph * d / ymax;
        fprintf(f,
                "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s%.0f</text>\n",
                ml, y, ml + pw, y, ml - 4, y + 4, d < 4 ? "" : "1e",
                d < 4 ? pow(10, d) : (double)d);
    }
    for (int i = first; i >= 0 && i <= last; i++) {
        double a = kvcal_hist_bin_lower(1 + i * HIST_GROUP);
        double b = kvcal_hist_bin_lower(1 + (i + 1) * HIST_GROUP);
        double x0 = XPOS(log2(a)), x1 = XPOS(log2(b));
        double y = g[i] > 0 ? mt + ph - ph * log10(g[i] + 1) / ymax : mt + ph;
        char p[32];
        fprintf(
            f,
            "<rect class=\"cell\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
            "fill=\"%s\" data-lo=\"%.9g\" data-value=\"%.17g\"><title>|%s| in [%.4g, "
            "%.4g): "
            "%.0f values (%s)</title></rect>\n",
            x0, y, fmax(0.5, x1 - x0 - 0.3), mt + ph - y, kv ? V_COLOUR : K_COLOUR, a,
            g[i], kv ? "V" : "K", a, b, g[i],
            pct(p, sizeof p, total > 0 ? g[i] / total : 0));
    }
    fprintf(f, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
            ml, mt + ph, ml + pw, mt + ph);
    /* ticks at powers of ten, each decade 3.3 octaves wide */
    const int dstep = label_step(pw / (hi - lo) * log2(10.0), 52);
    for (int e = (int)ceil(lo / log2(10.0)); e <= (int)floor(hi / log2(10.0)); e++)
        if (e % dstep == 0) {
            char t[32];
            double x = XPOS(e * log2(10.0));
            snprintf(t, sizeof t, e >= -3 && e <= 3 ? "%.0f" : "1e%.0f",
                     e >= -3 && e <= 3 ? pow(10, e) : (double)e);
            if (e < 0 && e >= -3)
                snprintf(t, sizeof t, "%.*f", -e, pow(10, e));
            fprintf(
                f,
                "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>",
                x, mt + ph, x, mt + ph + 4, x, mt + ph + 15, t);
        }
    fprintf(
        f,
        "\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"axis-title\">|%s| "
        "(log scale, bars of 1/8 octave; counts on a log scale)</text>\n",
        ml + pw / 2, mt + ph + 32, kv ? "V" : "K");
    struct {
        double v;
        const char *cls, *text;
    } marks[3] = {{zero, "mark-zero", "2^-10 × scale: below, rounds to 0"},
                  {normal, "mark-normal", "2^-6 × scale: below, subnormal (fewer bits)"},
                  {top, "mark-top", "448 × scale: above, clips"}};
    for (int k = 0; k < 3; k++) {
        double x = XPOS(log2(marks[k].v));
        fprintf(
            f,
            "<line class=\"%s\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"><title>",
            marks[k].cls, x, mt - 4, x, mt + ph);
        esc(f, marks[k].text);
        fprintf(f, " (%.4g)</title></line>", marks[k].v);
        fprintf(f,
                "<line class=\"%s\" x1=\"%.1f\" y1=\"12\" x2=\"%.1f\" y2=\"12\"/>"
                "<text x=\"%.1f\" y=\"16\">",
                marks[k].cls, ml + k * 290, ml + k * 290 + 16, ml + k * 290 + 22);
        esc(f, marks[k].text);
        fprintf(f, "</text>\n");
    }
    fprintf(f,
            "<text x=\"%.1f\" y=\"34\">layer %d %s, %.0f values; %.0f below 2^-20 (zeros "
            "included), %.0f at or above 2^20</text>\n",
            ml, l, kv ? "V" : "K", total, below, above);
#undef XPOS
    free(g);
    char cap[320];
    snprintf(cap, sizeof cap,
             "<b>|%s| of layer %d</b>, all its kv heads together, with the range the "
             "layer's scale (%.4g, the largest over its heads) gives the FP8 cache "
             "shaded.",
             kv ? "V" : "K", l, scale);
    figure_close(f, cap);
}

static void histogram_section(const report *r)
{
    fprintf(r->f, "<section id=\"histogram\">\n<h2>|x| of layer %d</h2>\n",
            r->hist_layer);
    histogram_figure(r, KVCAL_K);
    histogram_figure(r, KVCAL_V);
    fprintf(r->f, "</section>\n");
}

/* --- eval */

static void eval_ppl_figure(const report *r)
{
    FILE *f = r->f;
    const eval_view *e = r->ev;
    double lo = 0, hi = 0;
    int n = 0;
    for (int i = 0; i < e->num_modes; i++)
        if (strcmp(e->modes[i].name, "baseline") && isfinite(e->modes[i].change_rel)) {
            lo = fmin(lo, 100 * e->modes[i].change_rel);
            hi = fmax(hi, 100 * e->modes[i].change_rel);
            n++;
        }
    if (!n) {
        fprintf(f, "<p class=\"note\">No mode other than the baseline has a finite "
                   "perplexity change to draw.</p>\n");
        return;
    }
    double span = hi - lo > 0 ? hi - lo : 1;
    lo -= span * 0.05 + (lo < 0 ? span * 0.15 : 0);
    hi += span * 0.2;
    const double ml = 110, mt = 10, pw = 620, bh = 22, ph = bh * n;
#define XP(v) (ml + pw * ((v)-lo) / (hi - lo))
    figure_open(f, "fig-eval-ppl", "chart bars", ml + pw + 20, mt + ph + 40,
                "perplexity change per mode");
    double step = tick_step(hi - lo, 5);
    for (double t = ceil(lo / step) * step; t <= hi; t += step) {
        char tick[32];
        if (fabs(t) < step * 1e-6)
            snprintf(tick, sizeof tick, "0%%");
        else
            snprintf(tick, sizeof tick, "%+.3g%%", t);
        fprintf(f,
                "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                XP(t), mt, XP(t), mt + ph, XP(t), mt + ph + 14, tick);
    }
    int k = 0;
    for (int i = 0; i < e->num_modes; i++) {
        const eval_mode *m = &e->modes[i];
        if (!strcmp(m->name, "baseline") || !isfinite(m->change_rel))
            continue;
        double v = 100 * m->change_rel, y = mt + k * bh + 3;
        double x0 = XP(fmin(0, v)), x1 = XP(fmax(0, v));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", ml - 6,
                y + bh / 2 + 1);
        esc(f, m->name);
        fprintf(f, "</text>");
        fprintf(
            f,
            "<rect class=\"cell\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
            "fill=\"%s\" data-mode=\"",
            x0, y, fmax(0.5, x1 - x0), bh - 6, v > 0 ? "#c0504d" : "#4f9a5b");
        esc(f, m->name);
        fprintf(f, "\" data-value=\"%.9g\"><title>", m->change_rel);
        esc(f, m->name);
        fprintf(f, ": perplexity %.6g, %+.4g (%+.3f%%)</title></rect>", m->ppl, m->change,
                v);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">%+.2f%%</text>\n",
                v < 0 ? x0 - 4 : x1 + 4, y + bh / 2 + 1, v < 0 ? "end" : "start", v);
        k++;
    }
    fprintf(f, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
            XP(0), mt - 2, XP(0), mt + ph + 2);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"axis-title\">"
            "perplexity change against the baseline</text>\n",
            ml + pw / 2, mt + ph + 30);
#undef XP
    figure_close(f, "<b>What each cache mode costs</b>: the change of perplexity against "
                    "the unquantized baseline (red: worse).");
}

static void eval_section(const report *r, double *buf)
{
    FILE *f = r->f;
    const eval_view *e = r->ev;
    char b[8][32];
    fprintf(f, "<section id=\"eval\">\n<h2>FP8 cache modes (kvcal eval)</h2>\n");
    fprintf(f,
            "<table id=\"eval-table\" class=\"num\">\n<thead><tr><th>mode</th>"
            "<th>perplexity</th><th>change</th><th>change %%</th><th>95%% interval</th>"
            "<th>verdict</th><th>against the best mode</th><th>KLD mean</th><th>KLD "
            "p99</th><th>top-1</th>"
            "<th>min K SQNR dB</th><th>min V SQNR dB</th><th>max clipped</th>"
            "<th>max attention error</th></tr></thead>\n<tbody>\n");
    for (int i = 0; i < e->num_modes; i++) {
        const eval_mode *m = &e->modes[i];
        double ks = INFINITY, vs = INFINITY, clip = 0, att = 0;
        for (int l = 0; m->layers && l < e->num_layers; l++) {
            double k = eval_layer(m, l, EV_K_SQNR), v = eval_layer(m, l, EV_V_SQNR);
            ks = isnan(k) ? ks : fmin(ks, k);
            vs = isnan(v) ? vs : fmin(vs, v);
            clip = fmax(clip,
                        fmax(eval_layer(m, l, EV_K_CLIP), eval_layer(m, l, EV_V_CLIP)));
            att = fmax(att, eval_layer(m, l, EV_ATT));
        }
        fprintf(f, "<tr><td>");
        esc(f, m->name);
        fprintf(f, "</td><td>%s</td>", num4(b[0], 32, m->ppl));
        if (!m->layers) {
            fprintf(
                f, "<td>-</td><td>-</td><td>-</td><td>-</td><td>-</td><td>-</td>"
                   "<td>-</td><td>-</td><td>-</td><td>-</td><td>-</td><td>-</td></tr>\n");
            continue;
        }
        snprintf(b[1], 32, "%+.4g", m->change);
        snprintf(b[2], 32, "%+.3f%%", 100 * m->change_rel);
        char ci[64] = "n/a", verdict[96] = "n/a";
        if (isfinite(m->ci_lo) && isfinite(m->ci_hi))
            snprintf(ci, sizeof ci, "[%+.3f%%, %+.3f%%]", 100 * m->ci_lo, 100 * m->ci_hi);
        if (m->within_noise >= 0 && isfinite(m->tokens_to_resolve))
            snprintf(verdict, sizeof verdict,
                     m->within_noise ? "within noise: ~%.3g tokens would resolve it"
                                     : "beyond noise (resolved at ~%.3g tokens)",
                     m->tokens_to_resolve);
        else if (m->within_noise >= 0)
            snprintf(verdict, sizeof verdict, "%s",
                     m->within_noise ? "within noise" : "beyond noise");
        fprintf(f, "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>",
                isfinite(m->change) ? b[1] : "n/a",
                isfinite(m->change_rel) ? b[2] : "n/a", ci, verdict);
        if (!m->best[0] || !strcmp(m->best, m->name))
            fprintf(f, "%s", m->best[0] ? "the best" : "n/a");
        else if (isfinite(m->best_lo) && isfinite(m->best_hi) && m->best_noise >= 0) {
            fprintf(f, "[%+.3f%%, %+.3f%%] of ", 100 * m->best_lo, 100 * m->best_hi);
            esc(f, m->best);
            fprintf(f, ": %s", m->best_noise ? "within noise" : "beyond noise");
        } else
            fprintf(f, "n/a");
        fprintf(f, "</td>");
        fprintf(f, "<td>%s</td><td>%s</td><td>%s</td>", num4(b[3], 32, m->kld_mean),
                num4(b[4], 32, m->kld_p99), pct(b[5], 32, m->top1));
        fprintf(f, "<td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
                isinf(ks) ? "exact" : num4(b[3], 32, ks),
                isinf(vs) ? "exact" : num4(b[4], 32, vs), pct(b[5], 32, clip),
                num4(b[6], 32, att));
    }
    fprintf(f, "</tbody>\n</table>\n");
    int named = 0;
    for (int i = 0; i < e->num_modes; i++) {
        const eval_mode *m = &e->modes[i];
        if (m->costliest < 0 || m->costliest >= e->num_layers)
            continue;
        if (!named++)
            fprintf(f, "<ul id=\"eval-costliest\">\n");
        fprintf(f, "<li data-mode=\"");
        esc(f, m->name);
        fprintf(f, "\" data-layer=\"%d\"><b>", m->costliest);
        esc(f, m->name);
        fprintf(f, "</b>: the costliest layer is <b>%d</b> (", m->costliest);
        esc(f, strcmp(m->cost_by, "kld_alone") ? "attention error"
                                               : "KLD with its cache alone");
        fprintf(f, " %.3g; the weaker side ", m->cost_value);
        esc(f, m->weaker);
        fprintf(f, ": SQNR K %.1f dB, V %.1f dB)</li>\n",
                eval_layer(m, m->costliest, EV_K_SQNR),
                eval_layer(m, m->costliest, EV_V_SQNR));
    }
    if (named)
        fprintf(f, "</ul>\n");
    eval_ppl_figure(r);
    const char *names[EVAL_MAX_MODES];
    int rows = 0;
    for (int i = 0; i < e->num_modes; i++)
        if (e->modes[i].layers)
            names[rows++] = e->modes[i].name;
    if (rows)
        fprintf(f, "<div class=\"pair\">\n");
    for (int kv = 0; rows && kv < 2; kv++) {
        int at = 0;
        for (int i = 0; i < e->num_modes; i++) {
            if (!e->modes[i].layers)
                continue;
            for (int l = 0; l < e->num_layers; l++)
                buf[at * e->num_layers + l] =
                    eval_layer(&e->modes[i], l, kv ? EV_V_SQNR : EV_K_SQNR);
            at++;
        }
        heatmap m = {kv ? "fig-eval-v-sqnr" : "fig-eval-k-sqnr",
                     kv ? "V SQNR dB" : "K SQNR dB",
                     buf,
                     rows,
                     e->num_layers,
                     1,
                     e->num_layers,
                     names,
                     0,
                     "exact (no error)",
                     kv ? "<b>V SQNR</b> (dB) per mode and layer: higher is better."
                        : "<b>K SQNR</b> (dB) per mode and layer: 10 log10(sum x&#178; / "
                          "sum (x - dequant(quant(x)))&#178;); higher is better."};
        heatmap_write(f, &m);
    }
    if (rows)
        fprintf(f, "</div>\n");
    fprintf(f, "</section>\n");
}

// --- the file ----------------------------------------------------------------------

static const char style[] =
    ":root{color-scheme:light}"
    "body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu "
    "Sans',sans-serif;"
    "color:#1d1d1f;background:#fff;max-width:1000px;margin:0 auto;padding:0 20px 40px}"
    "h1{font-size:26px;margin:24px 0 4px}h2{font-size:20px;margin:32px 0 8px;"
    "border-bottom:1px solid #ddd;padding-bottom:4px}"
    "nav{margin:8px 0 16px;font-size:14px}nav a{margin-right:14px;color:#245}"
    ".summary{color:#444;margin:4px 0}"
    "table{border-collapse:collapse;margin:8px 0 16px;font-size:14px}"
    "th,td{border:1px solid #ddd;padding:3px 10px;text-align:left}"
    "table.num td{text-align:right;font-variant-numeric:tabular-nums}"
    "table.num td:first-child{text-align:left}"
    "thead th{background:#f3f3f3}table.kv "
    "th{background:#f7f7f7;font-weight:600;width:150px}"
    ".pair{display:flex;flex-wrap:wrap;gap:0 36px;align-items:flex-start}"
    "figure{margin:14px 0 22px;display:table}"
    "figcaption{display:table-caption;caption-side:bottom;font-size:13px;color:#444}"
    "svg{max-width:100%;height:auto;display:block}"
    "svg text{font:11px system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu "
    "Sans',sans-serif;"
    "fill:#222}svg .axis-title{fill:#555}"
    "svg .grid{stroke:#e6e6e6;stroke-width:1}svg .axis{stroke:#777;stroke-width:1}"
    "svg .range{stroke:#111;stroke-width:2}"
    "svg .threshold{stroke:#c0504d;stroke-width:1.5;stroke-dasharray:5 3}"
    "svg .band{fill:#4f9a5b;fill-opacity:.10}"
    "svg .mark-top{stroke:#c0504d;stroke-width:2}"
    "svg .mark-normal{stroke:#777;stroke-width:1.5;stroke-dasharray:5 3}"
    "svg .mark-zero{stroke:#777;stroke-width:1.5;stroke-dasharray:2 2}"
    "ul.warnings{padding-left:20px}li.warning{color:#8a2b22;margin:2px 0}"
    "li.more{color:#666}.ok{color:#2f6b38}.note{color:#666;font-size:14px}";

/* --- a mixture of experts' routing */

/* The tokens each expert received per layer (the statistics' counts; a token
 * counts once for each of its top-k experts), and the experts no
 * calibration token reached: their weights shaped no K or V of the samples,
 * so the samples may not hold the text they serve. */
static void experts_section(const report *r)
{
    FILE *f = r->f;
    const kvcal_stats_t *st = r->st;
    const int E = st->num_experts, L = r->L;
    double *v = malloc((size_t)L * E * sizeof *v);
    char(*names)[24] = malloc((size_t)E * sizeof *names);
    const char **rows = malloc((size_t)E * sizeof *rows);
    fprintf(f, "<section id=\"experts\">\n<h2>Experts</h2>\n");
    if (!v || !names || !rows) {
        fprintf(f, "<p class=\"note\">Out of memory: the routing map is left out.</p>\n");
        goto done;
    }
    int dense = 0, cold_layers = 0;
    long long cold = 0;
    for (int l = 0; l < L; l++) {
        int64_t sum = 0, zero = 0;
        for (int e = 0; e < E; e++) {
            const int64_t c = st->expert_tokens[(size_t)l * E + e];
            v[(size_t)l * E + e] = (double)c;
            sum += c;
            zero += c == 0;
        }
        dense += sum == 0;
        cold += sum ? zero : 0;
        cold_layers += sum && zero;
    }
    fprintf(f,
            "<p>%d experts a layer; hover a cell for the tokens an expert received (a "
            "token counts once for each of its top-k experts). ",
            E);
    if (dense)
        fprintf(f, "%d layer%s routed no token (a dense MLP). ", dense,
                dense == 1 ? "" : "s");
    if (!cold)
        fprintf(f, "Every expert of every mixture layer received tokens.</p>\n");
    else {
        fprintf(f,
                "%lld expert%s in %d layer%s received no calibration token: the samples "
                "never took those routes, so they may not hold the text those experts "
                "serve.</p>\n<ul class=\"cold\">\n",
                cold, cold == 1 ? "" : "s", cold_layers, cold_layers == 1 ? "" : "s");
        for (int l = 0; l < L; l++) {
            const int64_t *c = st->expert_tokens + (size_t)l * E;
            int64_t sum = 0;
            for (int e = 0; e < E; e++)
                sum += c[e];
            int first = 1;
            for (int e = 0; sum && e < E; e++)
                if (!c[e]) {
                    if (first)
                        fprintf(f, "<li data-layer=\"%d\">layer %d: expert %d", l, l, e);
                    else
                        fprintf(f, ", %d", e);
                    first = 0;
                }
            if (!first)
                fprintf(f, "</li>\n");
        }
        fprintf(f, "</ul>\n");
    }
    for (int e = 0; e < E; e++) {
        snprintf(names[e], sizeof names[e], "expert %d", e);
        rows[e] = names[e];
    }
    heatmap m = {"fig-expert-tokens",
                 "tokens routed",
                 v,
                 E,
                 L,
                 E,
                 1,
                 rows,
                 1,
                 "0: no token (a cold expert, or a dense layer)",
                 "<b>Tokens routed</b> to each expert of each layer during the "
                 "calibration."};
    heatmap_write(f, &m);
done:
    fprintf(f, "</section>\n");
    free(v);
    free(names);
    free(rows);
}

static void summary_line(const report *r)
{
    FILE *f = r->f;
    if (!r->s)
        return;
    const kvcal_scales_t *s = r->s;
    fprintf(f, "<p class=\"summary\">%d layers &#215; %d kv heads, %s scales", r->L, r->H,
            s->granularity == KVCAL_GRANULARITY_HEAD ? "per-head" : "per-tensor");
    if (s->has_absmax) {
        for (int kv = 0; kv < 2; kv++) {
            const float *a = kv ? s->v_absmax : s->k_absmax;
            int top = 0;
            for (int i = 0; i < r->L * r->H; i++)
                top = a[i] > a[top] ? i : top;
            fprintf(f, "; largest %s absmax %.4g (layer %d, head %d)", kv ? "V" : "K",
                    a[top], top / r->H, top % r->H);
        }
    }
    fprintf(f, ".</p>\n");
}

static void document(const report *r, double *buf)
{
    FILE *f = r->f;
    const char *arch = r->s ? r->s->model.architecture : r->ev->architecture;
    fprintf(f,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'\">\n<title>kvcal report: ");
    esc(f, arch[0] ? arch : "KV cache scales");
    fprintf(f,
            "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>KV cache scales: ", style);
    esc(f, arch[0] ? arch : "unknown model");
    fprintf(f, "</h1>\n");
    summary_line(r);
    fprintf(
        f,
        "<nav><a href=\"#provenance\">provenance</a><a href=\"#warnings\">warnings</a>");
    if (r->s)
        fprintf(f, "<a href=\"#heatmaps\">layer &#215; head</a><a href=\"#layers\">per "
                   "layer</a>");
    if (r->st)
        fprintf(f, "<a href=\"#channels\">outlier channels</a><a href=\"#histogram\">"
                   "histogram</a>");
    if (r->st && r->st->num_experts > 0 && r->st->expert_tokens)
        fprintf(f, "<a href=\"#experts\">experts</a>");
    if (r->ev)
        fprintf(f, "<a href=\"#eval\">cache modes</a>");
    fprintf(f, "</nav>\n");
    provenance(r);
    warnings_section(r);
    if (r->s) {
        heatmaps_section(r, buf);
        layers_section(r);
    }
    if (r->st) {
        channels_section(r);
        histogram_section(r);
        if (r->st->num_experts > 0 && r->st->expert_tokens)
            experts_section(r);
    }
    if (r->ev)
        eval_section(r, buf);
    fprintf(f, "</body>\n</html>\n");
}

/* The fraction clipping per layer under the written scales: the scales'
 * own estimate, else counted from the statistics (the mean over heads, each
 * head under its own scale); NULL arrays when neither is there. */
static kvcal_status clip_fractions(report *r)
{
    if (!r->s || (!r->s->has_clip && !r->st))
        return KVCAL_OK;
    if (!(r->clip[0] = malloc(2 * (size_t)r->L * sizeof(double))))
        return kvcal_fail(KVCAL_ERR_NOMEM, "report: out of memory");
    r->clip[1] = r->clip[0] + r->L;
    for (int l = 0; l < r->L; l++)
        for (int kv = 0; kv < 2; kv++) {
            if (r->s->has_clip) {
                r->clip[kv][l] = (kv ? r->s->v_clip : r->s->k_clip)[l];
                continue;
            }
            double sum = 0;
            for (int h = 0; h < r->H; h++)
                sum += kvcal_stats_clip_fraction(
                    r->st, l, kv, h, (kv ? r->s->v_head : r->s->k_head)[l * r->H + h]);
            r->clip[kv][l] = sum / r->H;
        }
    return KVCAL_OK;
}

kvcal_status kvcal_report_html_write(const char *path, const kvcal_report_html_inputs *in)
{
    eval_view ev;
    report r = {.in = in, .s = in->scales, .st = in->stats, .hist_layer = in->hist_layer};
    const char *ename = in->eval_path ? in->eval_path : "the eval report";
    const char *sname = in->stats_path ? in->stats_path : "the statistics";
    kvcal_atomic_file af = {0};
    double *buf = NULL;
    kvcal_status st = KVCAL_OK;
    if (!in->scales && !in->eval)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: a report needs scales or an eval report", path);
    if (!(in->clip_threshold >= 0 && in->clip_threshold <= 1))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: clip threshold %g: expected a fraction in [0, 1]", path,
                          in->clip_threshold);
    if (in->stats && !in->scales)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: statistics need the scales they were reduced to", sname);
    if (in->eval) {
        if ((st = eval_read(in->eval, ename, &ev)))
            return st;
        r.ev = &ev;
    }
    r.L = r.s ? r.s->num_layers : ev.num_layers;
    r.H = r.s ? r.s->num_kv_heads : 0;
    if (r.s && (st = kvcal_scales_check_finite(r.s, in->scales_path ? in->scales_path
                                                                    : "the scales")))
        return st;
    if (r.st && (r.st->num_layers != r.L || r.st->num_kv_heads != r.H))
        return kvcal_fail(
            KVCAL_ERR_MISMATCH,
            "%s: statistics of %d layers x %d kv heads, but the scales have "
            "%d x %d; give the statistics of the same calibration",
            sname, r.st->num_layers, r.st->num_kv_heads, r.L, r.H);
    if (r.s && r.ev && r.ev->num_layers && r.ev->num_layers != r.L)
        return kvcal_fail(
            KVCAL_ERR_MISMATCH,
            "%s: an eval of %d layers, but the scales have %d; give the eval "
            "of the same model",
            ename, r.ev->num_layers, r.L);
    if (in->hist_layer < -1 || (r.st && in->hist_layer >= r.L))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: histogram layer %d: the model has layers 0 to %d", path,
                          in->hist_layer, r.L - 1);
    if (r.st && r.hist_layer < 0) {
        r.hist_layer = 0;
        for (int l = 1; l < r.L; l++)
            if (max_over_heads(r.s->has_absmax ? r.s->k_absmax : r.s->k_head, r.H, l) >
                max_over_heads(r.s->has_absmax ? r.s->k_absmax : r.s->k_head, r.H,
                               r.hist_layer))
                r.hist_layer = l;
    }
    size_t cells = (size_t)r.L * (r.H > EVAL_MAX_MODES ? r.H : EVAL_MAX_MODES) + 1;
    if (!(buf = malloc(cells * sizeof *buf))) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if ((st = clip_fractions(&r)) || (st = kvcal_atomic_open(&af, path)))
        goto done;
    r.f = af.f;
    document(&r, buf);
    if (ferror(af.f)) {
        kvcal_atomic_abort(&af);
        st = kvcal_fail(KVCAL_ERR_IO,
                        "%s: writing the report failed; nothing was written "
                        "(check free space)",
                        path);
        goto done;
    }
    st = kvcal_atomic_commit(&af);
done:
    free(r.clip[0]);
    free(buf);
    return st;
}
