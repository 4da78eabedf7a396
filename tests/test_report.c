/* tests/test_report.c: the HTML report (io/report/report_html.c) as `kvcal
 * report`, `calibrate --report` and `eval --report` write it: read back by
 * an HTML5 parser (tests/report_html_check.py, html5lib), every figure
 * checked cell by cell against the JSON and HDF5 it was drawn from; rendered
 * by headless Chromium, whose console must stay silent; refused inputs and
 * outputs; and `kvcal inspect`'s terminal map of a scales file. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/hist_rule.h"
#include "core/scales.h"
#include "io/report/report_html.h"
#include "io/stats_hdf5.h"
#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"
#define TEXT "datasets/default_calibration.txt"
#define LEGACY "tests/fixtures/llama2-7b/kv_cache_scales.json"
/* stories260K's shape */
#define L 5
#define H 4
#define D 8

static int run(const char *args, char **out)
{
    return kvcal_test_run_kvcal(args, out);
}

/* Runs `kvcal ARGS` with its stdout into the file at path. */
static int run_to_file(const char *args, const char *path)
{
    char *out = NULL;
    int rc = kvcal_test_run_kvcal(args, &out);
    if (!out || kvcal_test_write_file(path, out, strlen(out)))
        rc = -1;
    free(out);
    return rc;
}

static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) ? -1 : (long long)sb.st_size;
}

/* One calibration of stories260K (per head, percentile:99 so that some
 * values clip), its statistics and an eval of it, made once. */
static const char *calib_json, *calib_h5, *eval_json;
static int calibrated(void)
{
    static int done = -1;
    if (done < 0) {
        static char s[512], h[512], e[512];
        snprintf(s, sizeof s, "%s", kvcal_test_path("calib.json"));
        snprintf(h, sizeof h, "%s", kvcal_test_path("calib.h5"));
        snprintf(e, sizeof e, "%s", kvcal_test_path("eval.json"));
        calib_json = s;
        calib_h5 = h;
        eval_json = e;
        char cmd[2048];
        snprintf(
            cmd, sizeof cmd,
            "calibrate --model " MODEL " --dataset " TEXT " --num-samples 8 --seq-len 64 "
            "--granularity head --observer percentile:99 --out %s --stats %s --quiet",
            s, h);
        done = run(cmd, NULL) == 0;
        snprintf(cmd, sizeof cmd,
                 "eval --model " MODEL " --dataset " TEXT " --num-samples 4 --seq-len 64 "
                 "--scales %s --json --quiet",
                 s);
        done = done && run_to_file(cmd, e) == 0;
    }
    CU_ASSERT_TRUE(done);
    return done;
}

static cJSON *load_json(const char *path)
{
    char *text = kvcal_test_read_file(path, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

/* The report at html as tests/report_html_check.py reads it (NULL when it
 * does not parse as HTML5). */
static cJSON *parse_report(const char *html)
{
    char cmd[2048];
    const char *json = kvcal_test_path("parsed.json");
    snprintf(cmd, sizeof cmd, "%s tests/report_html_check.py '%s' > '%s'",
             kvcal_test_html5_python(), html, json);
    int rc = system(cmd);
    CU_ASSERT_EQUAL(rc, 0);
    return rc == 0 ? load_json(json) : NULL;
}

static const cJSON *cells(const cJSON *report, const char *figure)
{
    const cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(report, "figures"), figure);
    return cJSON_GetObjectItem(f, "cells");
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int attr(const cJSON *cell, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(cell, key);
    return cJSON_IsString(v) ? atoi(v->valuestring) : -1;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The number a tooltip shows after "<what> ". */
static double title_number(const cJSON *cell, const char *what)
{
    const char *t = strstr(str(cell, "title"), what);
    return t ? atof(t + strlen(what)) : NAN;
}

static const cJSON *layer_of(const cJSON *scales, int l)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(scales, "layers"), l);
}

static double head_value(const cJSON *scales, int l, const char *key, int h)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(layer_of(scales, l), key), h)
        ->valuedouble;
}

static double max_head_value(const cJSON *scales, int l, const char *key)
{
    double m = 0;
    for (int h = 0; h < H; h++)
        m = fmax(m, head_value(scales, l, key, h));
    return m;
}

/* --- parsed by html5lib ------------------------------------------------------ */

/* A mixture of experts' statistics: the experts section maps the tokens
 * each expert received, layer by layer, and names the experts no token
 * reached (here two, zeroed in the statistics of a calibration of GLM-4.5's
 * golden model; its first layer, dense, routes none). */
static void report_maps_the_tokens_each_expert_received_and_names_cold_experts(void)
{
    char cmd[2048];
    const char *ids = kvcal_test_path("moe_ids.jsonl"), *h5 = kvcal_test_path("moe.h5"),
               *js = kvcal_test_path("moe.json"), *html = kvcal_test_path("moe.html");
    FILE *f = fopen(ids, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int doc = 0; doc < 6; doc++) {
        fprintf(f, "{\"input_ids\": [1");
        for (int t = 1; t < 24; t++)
            fprintf(f, ", %d", 2 + (doc * 31 + t * 17) % 120);
        fprintf(f, "]}\n");
    }
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "calibrate --model tests/fixtures/golden/glm4_moe_dense1_sigmoid_e8_top3_bf16 "
             "--dataset %s --num-samples 6 --seq-len 24 --quiet --out %s --stats %s",
             ids, js, h5);
    CU_ASSERT_EQUAL_FATAL(run(cmd, NULL), 0);
    kvcal_stats_t *st = NULL;
    kvcal_model_identity id;
    kvcal_provenance prov;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(h5, &st, &id, &prov), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(st->num_experts, 8);
    st->expert_tokens[1 * 8 + 5] = 0;
    st->expert_tokens[2 * 8 + 2] = 0;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(h5, st, &id, &prov), KVCAL_OK);
    snprintf(cmd, sizeof cmd, "report %s --stats %s --out %s", js, h5, html);
    CU_ASSERT_EQUAL_FATAL(run(cmd, NULL), 0);
    cJSON *r = parse_report(html);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_STRING_EQUAL(str(cJSON_GetObjectItem(r, "heading"), "experts"), "Experts");
    const cJSON *c = cells(r, "fig-expert-tokens"), *cell;
    CU_ASSERT_EQUAL(cJSON_GetArraySize(c), 3 * 8);
    cJSON_ArrayForEach(cell, c)
    {
        const int e = attr(cell, "row"), l = attr(cell, "layer");
        CU_ASSERT_FATAL(e >= 0 && e < 8 && l >= 0 && l < 3);
        CU_ASSERT_EQUAL(num(cell, "value"), (double)st->expert_tokens[l * 8 + e]);
    }
    char *text = kvcal_test_read_file(html, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "1 layer routed no token (a dense MLP)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "2 experts in 2 layers received no calibration token"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, ">layer 1: expert 5</li>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, ">layer 2: expert 2</li>"));
    free(text);
    kvcal_stats_destroy(st);
    cJSON_Delete(r);
}

static void report_heatmaps_have_a_cell_per_layer_and_head_with_the_json_values(void)
{
    if (!calibrated())
        return;
    const char *html = kvcal_test_path("heat.html");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "report %s --stats %s --eval %s --out %s", calib_json,
             calib_h5, eval_json, html);
    CU_ASSERT_EQUAL_FATAL(run(cmd, NULL), 0);
    cJSON *r = parse_report(html), *s = load_json(calib_json);
    CU_ASSERT_FATAL(r && s);
    static const struct {
        const char *figure, *key, *what;
    } maps[] = {{"fig-k-absmax", "k_absmax", "K absmax "},
                {"fig-v-absmax", "v_absmax", "V absmax "},
                {"fig-k-scale", "k_scale_per_head", "K scale "},
                {"fig-v-scale", "v_scale_per_head", "V scale "}};
    for (int m = 0; m < 4; m++) {
        const cJSON *c = cells(r, maps[m].figure), *cell;
        CU_ASSERT_EQUAL(cJSON_GetArraySize(c), L * H);
        CU_ASSERT_EQUAL(
            num(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "figures"), maps[m].figure),
                "gradients"),
            1);
        int seen[L][H] = {{0}};
        cJSON_ArrayForEach(cell, c)
        {
            int l = attr(cell, "layer"), h = attr(cell, "row");
            CU_ASSERT_FATAL(l >= 0 && l < L && h >= 0 && h < H);
            seen[l][h]++;
            double want = head_value(s, l, maps[m].key, h);
            CU_ASSERT_EQUAL((float)num(cell, "value"), (float)want);
            KVCAL_ASSERT_CLOSE(title_number(cell, maps[m].what), want, 0, 1e-5);
            char where[64];
            snprintf(where, sizeof where, "layer %d, head %d: ", l, h);
            CU_ASSERT_PTR_NOT_NULL(strstr(str(cell, "title"), where));
        }
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++)
                CU_ASSERT_EQUAL(seen[l][h], 1);
    }
    /* per layer: the max over heads, and the clipping the file estimates */
    const cJSON *a = cells(r, "fig-layer-absmax"), *c = cells(r, "fig-layer-clip"), *cell;
    CU_ASSERT_EQUAL(cJSON_GetArraySize(a), 2 * L);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(c), 2 * L);
    cJSON_ArrayForEach(cell, a)
    {
        int l = attr(cell, "layer");
        const char *key = !strcmp(str(cell, "kv"), "k") ? "k_absmax" : "v_absmax";
        CU_ASSERT_EQUAL((float)num(cell, "value"), (float)max_head_value(s, l, key));
    }
    int clipping = 0;
    cJSON_ArrayForEach(cell, c)
    {
        int l = attr(cell, "layer");
        double want =
            num(layer_of(s, l), !strcmp(str(cell, "kv"), "k") ? "k_clip" : "v_clip");
        CU_ASSERT_EQUAL((float)num(cell, "value"), (float)want);
        clipping += want > KVCAL_REPORT_CLIP_THRESHOLD;
    }
    /* percentile:99 leaves about 1% above the scale: every layer warns */
    CU_ASSERT_TRUE(clipping > 0);
    int warned = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(r, "warnings")) warned +=
        !strcmp(str(w, "kind"), "clip");
    CU_ASSERT_EQUAL(warned, clipping);
    const cJSON *rows =
        cJSON_GetObjectItem(cJSON_GetObjectItem(r, "tables"), "layer-table");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(rows), L);
    cJSON_Delete(r);
    cJSON_Delete(s);
}

static void report_draws_outlier_channels_and_the_histogram_from_the_statistics(void)
{
    if (!calibrated())
        return;
    const char *html = kvcal_test_path("stats.html");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "report %s --stats %s --out %s", calib_json, calib_h5,
             html);
    CU_ASSERT_EQUAL_FATAL(run(cmd, NULL), 0);
    cJSON *r = parse_report(html), *s = load_json(calib_json);
    kvcal_stats_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(calib_h5, &st, NULL, NULL), KVCAL_OK);
    CU_ASSERT_FATAL(r && s);
    /* the three (layer, K or V) whose top channel stands furthest above the mean */
    double ratio[L][2];
    for (int l = 0; l < L; l++)
        for (int kv = 0; kv < 2; kv++) {
            const float *a = st->absmax[kv] + (size_t)l * H * D;
            double sum = 0, top = 0;
            for (int i = 0; i < H * D; i++) {
                sum += a[i];
                top = fmax(top, a[i]);
            }
            ratio[l][kv] = top / (sum / (H * D));
        }
    int drawn = 0;
    const cJSON *fig;
    cJSON_ArrayForEach(fig, cJSON_GetObjectItem(r, "figures"))
    {
        int l;
        char kv;
        if (sscanf(fig->string, "fig-channels-%c-%d", &kv, &l) != 2)
            continue;
        int k = kv == 'v';
        drawn++;
        int above = 0;
        for (int m = 0; m < L; m++)
            for (int n = 0; n < 2; n++)
                above += ratio[m][n] > ratio[l][k];
        CU_ASSERT_TRUE(above < 3);
        const cJSON *c = cJSON_GetObjectItem(fig, "cells"), *cell;
        CU_ASSERT_EQUAL(cJSON_GetArraySize(c), H * D);
        cJSON_ArrayForEach(cell, c)
        {
            int h = attr(cell, "head"), ch = attr(cell, "channel");
            CU_ASSERT_FATAL(h >= 0 && h < H && ch >= 0 && ch < D);
            CU_ASSERT_EQUAL((float)num(cell, "value"),
                            st->absmax[k][((size_t)l * H + h) * D + ch]);
        }
    }
    CU_ASSERT_EQUAL(drawn, 3);
    /* the histogram: the layer of the largest K absmax, every count there */
    int hl = 0;
    for (int l = 1; l < L; l++)
        if (max_head_value(s, l, "k_absmax") > max_head_value(s, hl, "k_absmax"))
            hl = l;
    char heading[64];
    snprintf(heading, sizeof heading, "|x| of layer %d", hl);
    CU_ASSERT_STRING_EQUAL(str(cJSON_GetObjectItem(r, "heading"), "histogram"), heading);
    for (int kv = 0; kv < 2; kv++) {
        double want = 0, got = 0;
        for (int h = 0; h < H; h++)
            for (int b = 1; b < st->num_bins - 1; b++)
                want += (double)st->hist[kv][((size_t)hl * H + h) * st->num_bins + b];
        const cJSON *cell, *c = cells(r, kv ? "fig-hist-v" : "fig-hist-k");
        CU_ASSERT_TRUE(cJSON_GetArraySize(c) > 10);
        cJSON_ArrayForEach(cell, c) got += num(cell, "value");
        CU_ASSERT_EQUAL(got, want);
        CU_ASSERT_EQUAL(want, (double)st->tokens[hl] * H * D);
    }
    kvcal_stats_destroy(st);
    cJSON_Delete(r);
    cJSON_Delete(s);
}

static void report_eval_table_and_bars_match_the_eval_json(void)
{
    if (!calibrated())
        return;
    const char *html = kvcal_test_path("eval.html");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "report --eval %s --out %s", eval_json, html);
    CU_ASSERT_EQUAL_FATAL(run(cmd, NULL), 0);
    cJSON *r = parse_report(html), *e = load_json(eval_json);
    CU_ASSERT_FATAL(r && e);
    const cJSON *modes = cJSON_GetObjectItem(e, "modes");
    const int n = cJSON_GetArraySize(modes);
    CU_ASSERT_EQUAL(
        n, 6); /* baseline, static-tensor, static-head, unit, dynamic, first-batch */
    const cJSON *rows =
        cJSON_GetObjectItem(cJSON_GetObjectItem(r, "tables"), "eval-table");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(rows), n);
    for (int i = 0; i < n; i++) {
        const cJSON *m = cJSON_GetArrayItem(modes, i), *row = cJSON_GetArrayItem(rows, i);
        char want[32];
        snprintf(want, sizeof want, "%.4g", num(m, "perplexity"));
        CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(row, 0)->valuestring, str(m, "mode"));
        CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(row, 1)->valuestring, want);
        if (i == 0)
            continue;
        /* the interval, the verdict, KLD and top-1 of the mode */
        const cJSON *ci = cJSON_GetObjectItem(m, "perplexity_change_rel_ci95");
        snprintf(want, sizeof want, "[%+.3f%%, %+.3f%%]",
                 100 * cJSON_GetArrayItem(ci, 0)->valuedouble,
                 100 * cJSON_GetArrayItem(ci, 1)->valuedouble);
        CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(row, 4)->valuestring, want);
        const char *verdict = cJSON_GetArrayItem(row, 5)->valuestring;
        CU_ASSERT_PTR_NOT_NULL(
            strstr(verdict, cJSON_IsTrue(cJSON_GetObjectItem(m, "within_noise"))
                                ? "within noise"
                                : "beyond noise"));
        const cJSON *vb = cJSON_GetObjectItem(m, "vs_best");
        const char *best = str(vb, "mode"),
                   *cell6 = cJSON_GetArrayItem(row, 6)->valuestring;
        if (!strcmp(best, str(m, "mode"))) {
            CU_ASSERT_STRING_EQUAL(cell6, "the best");
        } else {
            const cJSON *bci = cJSON_GetObjectItem(vb, "perplexity_change_rel_ci95");
            char b[128];
            snprintf(b, sizeof b, "[%+.3f%%, %+.3f%%] of %s: %s",
                     100 * cJSON_GetArrayItem(bci, 0)->valuedouble,
                     100 * cJSON_GetArrayItem(bci, 1)->valuedouble, best,
                     cJSON_IsTrue(cJSON_GetObjectItem(vb, "within_noise"))
                         ? "within noise"
                         : "beyond noise");
            CU_ASSERT_STRING_EQUAL(cell6, b);
        }
        snprintf(want, sizeof want, "%.4g", num(m, "kld_mean"));
        CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(row, 7)->valuestring, want);
        snprintf(want, sizeof want, "%.4g", num(m, "kld_p99"));
        CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(row, 8)->valuestring, want);
        snprintf(want, sizeof want, "%.3g%%", 100 * num(m, "top1_agreement"));
        CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(row, 9)->valuestring, want);
    }
    /* each mode's costliest layer named, as the JSON says */
    char *text = kvcal_test_read_file(html, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    for (int i = 1; i < n; i++) {
        const cJSON *m = cJSON_GetArrayItem(modes, i);
        char want[128];
        snprintf(want, sizeof want, "data-mode=\"%s\" data-layer=\"%d\"", str(m, "mode"),
                 (int)num(cJSON_GetObjectItem(m, "costliest_layer"), "layer"));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
    }
    free(text);
    const cJSON *bars = cells(r, "fig-eval-ppl"), *cell;
    CU_ASSERT_EQUAL(cJSON_GetArraySize(bars), n - 1);
    cJSON_ArrayForEach(cell, bars)
    {
        const cJSON *m;
        int found = 0;
        cJSON_ArrayForEach(m, modes) if (!strcmp(str(m, "mode"), str(cell, "mode")))
        {
            found = 1;
            CU_ASSERT_EQUAL((float)num(cell, "value"),
                            (float)num(m, "perplexity_change_rel"));
        }
        CU_ASSERT_TRUE(found);
    }
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cells(r, "fig-eval-k-sqnr")), (n - 1) * L);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cells(r, "fig-eval-v-sqnr")), (n - 1) * L);
    CU_ASSERT_PTR_NULL(cells(r, "fig-k-scale")); /* no scales given */
    cJSON_Delete(r);
    cJSON_Delete(e);
}

static void report_of_a_legacy_file_maps_its_scales_alone(void)
{
    const char *html = kvcal_test_path("legacy.html");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "report " LEGACY " --out %s", html);
    CU_ASSERT_EQUAL_FATAL(run(cmd, NULL), 0);
    cJSON *r = parse_report(html);
    CU_ASSERT_FATAL(r != NULL);
    /* llama2-7b: 32 layers, one value a layer (legacy files hold no heads) */
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cells(r, "fig-k-scale")), 32);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cells(r, "fig-v-scale")), 32);
    CU_ASSERT_PTR_NULL(
        cJSON_GetObjectItem(cJSON_GetObjectItem(r, "figures"), "fig-k-absmax"));
    CU_ASSERT_PTR_NULL(
        cJSON_GetObjectItem(cJSON_GetObjectItem(r, "figures"), "fig-layer-clip"));
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(
                        cJSON_GetObjectItem(r, "tables"), "layer-table")),
                    32);
    cJSON_Delete(r);
}

static void report_loads_nothing_runs_no_script_and_forbids_every_load(void)
{
    if (!calibrated())
        return;
    const char *html = kvcal_test_path("self.html");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "report %s --stats %s --eval %s --out %s", calib_json,
             calib_h5, eval_json, html);
    CU_ASSERT_EQUAL_FATAL(run(cmd, NULL), 0);
    cJSON *r = parse_report(html);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(num(r, "scripts"), 0);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(r, "external")), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(str(r, "csp"), "default-src 'none'"));
    cJSON_Delete(r);
}

/* --- written through the library and the CLI, read as text ------------------------ */

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void report_writer_warns_of_unit_scales_unseen_heads_and_clipping(void)
{
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(3, 2, &s), KVCAL_OK);
    s->granularity = KVCAL_GRANULARITY_HEAD;
    s->has_absmax = s->has_clip = 1;
    for (int i = 0; i < 6; i++) {
        s->k_head[i] = s->v_head[i] = 0.01f;
        s->k_absmax[i] = s->v_absmax[i] = 4.48f;
    }
    for (int l = 0; l < 3; l++)
        s->k_clip[l] = s->v_clip[l] = 0;
    const char *path = kvcal_test_path("clean.html");
    kvcal_report_html_inputs in = {s, NULL, NULL, NULL, NULL, NULL, -1, 1e-3};
    CU_ASSERT_EQUAL_FATAL(kvcal_report_html_write(path, &in), KVCAL_OK);
    char *text = kvcal_test_read_file(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "<h2>Warnings (0)</h2>"));
    CU_ASSERT_EQUAL(count(text, "class=\"warning\""), 0);
    free(text);
    s->k_head[kvcal_scales_index(s, 1, 0)] = 1.0f;   /* uncalibrated */
    s->v_absmax[kvcal_scales_index(s, 2, 1)] = 0.0f; /* never saw a value */
    s->v_clip[0] = 2e-3f;                            /* above 0.1% */
    s->k_clip[2] = 5e-4f;                            /* below it: no warning */
    CU_ASSERT_EQUAL_FATAL(kvcal_report_html_write(path, &in), KVCAL_OK);
    text = kvcal_test_read_file(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "<h2>Warnings (3)</h2>"));
    CU_ASSERT_EQUAL(count(text, "data-kind=\"unit-scale\""), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "layer 1, head 0: the K scale is exactly 1.0"));
    CU_ASSERT_EQUAL(count(text, "data-kind=\"never-seen\""), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "layer 2, head 1: V never saw a non-zero value"));
    CU_ASSERT_EQUAL(count(text, "data-kind=\"clip\""), 1);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(text, "layer 0: 0.2% of the calibration V values clip"));
    /* the unseen head is drawn in the missing colour, with its tooltip */
    CU_ASSERT_PTR_NOT_NULL(
        strstr(text, "layer 2, head 1: V absmax 0 (0: never saw a non-zero value)"));
    free(text);
    /* a threshold out of range is refused, and nothing is written */
    in.clip_threshold = 2;
    remove(path);
    CU_ASSERT_EQUAL(kvcal_report_html_write(path, &in), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(file_size(path), -1);
    kvcal_scales_destroy(s);
}

static void report_refuses_an_output_that_is_one_of_its_inputs(void)
{
    if (!calibrated())
        return;
    char cmd[2048];
    const char *const inputs[] = {calib_json, calib_h5, eval_json};
    for (int i = 0; i < 3; i++) {
        long long before = file_size(inputs[i]);
        snprintf(cmd, sizeof cmd, "report %s --stats %s --eval %s --out %s", calib_json,
                 calib_h5, eval_json, inputs[i]);
        CU_ASSERT_EQUAL(run(cmd, NULL), 2);
        CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("the output would replace an input"));
        CU_ASSERT_EQUAL(file_size(inputs[i]), before);
    }
    /* by another name: a symbolic link to the scales */
    const char *link = kvcal_test_path("link.html");
    remove(link);
    CU_ASSERT_EQUAL_FATAL(symlink(calib_json, link), 0);
    snprintf(cmd, sizeof cmd, "report %s --out %s", calib_json, link);
    CU_ASSERT_EQUAL(run(cmd, NULL), 2);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("is the scales file"));
    remove(link);
    CU_ASSERT_EQUAL(run("report --out x.html", NULL), 2);
    CU_ASSERT_TRUE(
        kvcal_test_kvcal_stderr_has("give a SCALES file, --eval FILE.json, or both"));
}

static void report_refuses_an_eval_json_of_another_shape(void)
{
    if (!calibrated())
        return;
    const char *bad = kvcal_test_path("bad_eval.json"),
               *html = kvcal_test_path("bad.html");
    static const struct {
        const char *json, *says;
    } cases[] = {
        {"{\"scales\": \"x\"}", "modes: missing or not a non-empty array"},
        {"{\"modes\": [{\"mode\": \"unit\"}]}", "modes[0]: perplexity"},
        {"{\"modes\": [{\"mode\": \"unit\", \"perplexity\": 2, \"perplexity_change\": 0, "
         "\"perplexity_change_rel\": 0, \"layers\": [{\"layer\": 0, \"k_sqnr_db\": 30, "
         "\"v_sqnr_db\": 30, \"k_clipped\": 2, \"v_clipped\": 0, "
         "\"attention_rel_error\": "
         "0}]}]}",
         "modes[0].layers[0]: k_clipped or v_clipped"},
    };
    char cmd[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CU_ASSERT_EQUAL_FATAL(
            kvcal_test_write_file(bad, cases[i].json, strlen(cases[i].json)), 0);
        remove(html);
        snprintf(cmd, sizeof cmd, "report --eval %s --out %s", bad, html);
        CU_ASSERT_EQUAL(run(cmd, NULL), 1);
        CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has(bad));
        CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has(cases[i].says));
        CU_ASSERT_EQUAL(file_size(html), -1);
    }
    /* an eval of another model than the scales' (llama2-7b: 32 layers) */
    snprintf(cmd, sizeof cmd, "report " LEGACY " --eval %s --out %s", eval_json, html);
    CU_ASSERT_EQUAL(run(cmd, NULL), 1);
    CU_ASSERT_TRUE(
        kvcal_test_kvcal_stderr_has("an eval of 5 layers, but the scales have 32"));
    CU_ASSERT_EQUAL(file_size(html), -1);
    snprintf(cmd, sizeof cmd, "report " LEGACY " --stats %s --out %s", calib_h5, html);
    CU_ASSERT_EQUAL(run(cmd, NULL), 1);
    CU_ASSERT_TRUE(
        kvcal_test_kvcal_stderr_has("statistics of 5 layers x 4 kv heads, but the "
                                    "scales have 32 x 1"));
    CU_ASSERT_EQUAL(file_size(html), -1);
    snprintf(cmd, sizeof cmd, "report %s --stats %s --layer 5 --out %s", calib_json,
             calib_h5, html);
    CU_ASSERT_EQUAL(run(cmd, NULL), 2);
    CU_ASSERT_TRUE(
        kvcal_test_kvcal_stderr_has("histogram layer 5: the model has layers 0 to 4"));
    CU_ASSERT_EQUAL(file_size(html), -1);
}

/* Statistics of another model than the scales' (the same shape, another
 * architecture) are refused, naming both files and the field. */
static void report_refuses_statistics_of_another_model(void)
{
    if (!calibrated())
        return;
    const char *h5 = kvcal_test_path("mistral_stats.h5"),
               *html = kvcal_test_path("mistral.html");
    kvcal_stats_t *st = NULL;
    kvcal_model_identity id = {
        .num_layers = L, .num_attention_heads = 8, .num_kv_heads = H, .head_dim = D};
    snprintf(id.architecture, sizeof id.architecture, "MistralForCausalLM");
    snprintf(id.model_type, sizeof id.model_type, "mistral");
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(L, H, D, &st), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(h5, st, &id, NULL), KVCAL_OK);
    kvcal_stats_destroy(st);
    char cmd[2048];
    remove(html);
    snprintf(cmd, sizeof cmd, "report %s --stats %s --out %s", calib_json, h5, html);
    CU_ASSERT_EQUAL(run(cmd, NULL), 1);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("statistics of another model"));
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has(
        "architecture: MistralForCausalLM here, LlamaForCausalLM there"));
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has(h5));
    CU_ASSERT_EQUAL(file_size(html), -1);
}

/* An option given twice (the first value would be dropped unsaid) and a
 * --layer with no --stats to draw it from are usage errors. */
static void report_refuses_an_option_given_twice_or_a_layer_it_cannot_draw(void)
{
    if (!calibrated())
        return;
    const char *html = kvcal_test_path("twice.html"),
               *other = kvcal_test_path("twice_other.html");
    char cmd[2048];
    remove(html);
    remove(other);
    snprintf(cmd, sizeof cmd, "report %s --stats %s --stats %s --out %s", calib_json,
             calib_h5, calib_h5, html);
    CU_ASSERT_EQUAL(run(cmd, NULL), 2);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("--stats given twice"));
    snprintf(cmd, sizeof cmd, "report %s --out %s --out %s", calib_json, other, html);
    CU_ASSERT_EQUAL(run(cmd, NULL), 2);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("--out given twice"));
    snprintf(cmd, sizeof cmd, "report %s --layer 1 --layer 2 --out %s", calib_json, html);
    CU_ASSERT_EQUAL(run(cmd, NULL), 2);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("--layer given twice"));
    snprintf(cmd, sizeof cmd, "report %s --layer 99 --out %s", calib_json, html);
    CU_ASSERT_EQUAL(run(cmd, NULL), 2);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("--layer 99"));
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("need --stats"));
    CU_ASSERT_EQUAL(file_size(html), -1);
    CU_ASSERT_EQUAL(file_size(other), -1);
}

static void calibrate_report_is_the_report_commands_byte_for_byte(void)
{
    const char *s = kvcal_test_path("cr.json"), *h = kvcal_test_path("cr.h5");
    const char *a = kvcal_test_path("cr_calibrate.html"),
               *b = kvcal_test_path("cr_report.html");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "calibrate --model " MODEL " --dataset " TEXT
             " --num-samples 4 --seq-len 32 "
             "--granularity head --out %s --stats %s --report %s --quiet",
             s, h, a);
    char *out = NULL;
    CU_ASSERT_EQUAL_FATAL(run(cmd, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, a));
    free(out);
    snprintf(cmd, sizeof cmd, "report %s --stats %s --out %s", s, h, b);
    CU_ASSERT_EQUAL_FATAL(run(cmd, NULL), 0);
    size_t na = 0, nb = 0;
    char *ta = kvcal_test_read_file(a, &na), *tb = kvcal_test_read_file(b, &nb);
    CU_ASSERT_FATAL(ta && tb);
    CU_ASSERT_EQUAL(na, nb);
    CU_ASSERT_TRUE(na == nb && !memcmp(ta, tb, na));
    CU_ASSERT_PTR_NOT_NULL(strstr(ta, "id=\"fig-hist-k\""));
    free(ta);
    free(tb);
}

static void calibrate_report_is_checked_and_written_with_the_other_outputs(void)
{
    const char *s = kvcal_test_path("none.json"), *r = kvcal_test_path("none.html");
    char cmd[2048];
    remove(s);
    remove(r);
    /* refused before any work: the report over the dataset, or over --out */
    snprintf(cmd, sizeof cmd, "calibrate --model " MODEL " --out %s --report " TEXT, s);
    CU_ASSERT_EQUAL(run(cmd, NULL), 2);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("--report"));
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("is the dataset"));
    snprintf(cmd, sizeof cmd, "calibrate --model " MODEL " --out %s --report %s", s, s);
    CU_ASSERT_EQUAL(run(cmd, NULL), 2);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("is also the output"));
    /* a run that fails writes neither the scales nor the report */
    snprintf(cmd, sizeof cmd,
             "calibrate --model " MODEL
             " --format legacy --tp 3 --out %s --report %s --quiet",
             s, r);
    CU_ASSERT_EQUAL(run(cmd, NULL), 1);
    CU_ASSERT_EQUAL(file_size(s), -1);
    CU_ASSERT_EQUAL(file_size(r), -1);
    CU_ASSERT_EQUAL(run("calibrate --model " MODEL " --time-only --report x.html", NULL),
                    2);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("--time-only writes nothing"));
}

static void eval_report_refuses_an_input_and_holds_the_eval(void)
{
    if (!calibrated())
        return;
    const char *r = kvcal_test_path("ev.html");
    char cmd[2048];
    long long before = file_size(calib_json);
    snprintf(cmd, sizeof cmd,
             "eval --model " MODEL " --dataset " TEXT " --num-samples 2 --seq-len 32 "
             "--scales %s --report %s --quiet",
             calib_json, calib_json);
    CU_ASSERT_EQUAL(run(cmd, NULL), 2);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("--report"));
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("is the scales"));
    CU_ASSERT_EQUAL(file_size(calib_json), before);
    snprintf(cmd, sizeof cmd,
             "eval --model " MODEL " --dataset " TEXT " --num-samples 2 --seq-len 32 "
             "--report " MODEL " --quiet");
    CU_ASSERT_EQUAL(run(cmd, NULL), 2);
    CU_ASSERT_TRUE(kvcal_test_kvcal_stderr_has("is the model"));
    snprintf(cmd, sizeof cmd,
             "eval --model " MODEL " --dataset " TEXT " --num-samples 2 --seq-len 32 "
             "--scales %s --modes static-head,unit --report %s --quiet",
             calib_json, r);
    char *out = NULL;
    CU_ASSERT_EQUAL_FATAL(run(cmd, &out), 0);
    free(out);
    char *text = kvcal_test_read_file(r, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "id=\"eval-table\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "id=\"fig-eval-ppl\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "id=\"fig-k-scale\"")); /* its --scales */
    /* baseline, static-head and unit: a row each */
    CU_ASSERT_EQUAL(count(strstr(text, "id=\"eval-table\""), "<tr><td>"), 3);
    free(text);
}

/* --- inspect's terminal map --------------------------------------------------------- */

static void inspect_heatmap_has_a_block_per_layer_and_head(void)
{
    if (!calibrated())
        return;
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "inspect %s --heatmap", calib_json);
    CU_ASSERT_EQUAL_FATAL(run(cmd, &out), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    cJSON *s = load_json(calib_json);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    static const char *const blocks[8] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    static const char *const maps[2] = {"K scale by layer", "V scale by layer"};
    static const char *const keys[2] = {"k_scale_per_head", "v_scale_per_head"};
    for (int kv = 0; kv < 2; kv++) {
        const char *m = strstr(out, maps[kv]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        double lo = INFINITY, hi = 0;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                lo = fmin(lo, head_value(s, l, keys[kv], h));
                hi = fmax(hi, head_value(s, l, keys[kv], h));
            }
        for (int h = 0; h < H; h++) {
            char head[32];
            snprintf(head, sizeof head, "\n  head %-4d ", h);
            const char *row = strstr(m, head);
            CU_ASSERT_PTR_NOT_NULL_FATAL(row);
            row += strlen(head);
            for (int l = 0; l < L; l++) {
                double v = head_value(s, l, keys[kv], h);
                int b = (int)((v - lo) / (hi - lo) * 7.0 + 0.5);
                CU_ASSERT_EQUAL(strncmp(row, blocks[b], strlen(blocks[b])), 0);
                row += strlen(blocks[b]);
            }
            CU_ASSERT_EQUAL(*row, '\n');
        }
    }
    free(out);
    /* piped without --heatmap: the table alone, as before */
    snprintf(cmd, sizeof cmd, "inspect %s", calib_json);
    CU_ASSERT_EQUAL_FATAL(run(cmd, &out), 0);
    CU_ASSERT_PTR_NULL(strstr(out, "scale by layer"));
    CU_ASSERT_PTR_NULL(strstr(out, "█"));
    free(out);
    cJSON_Delete(s);
}

/* --- in a real browser -------------------------------------------------------------- */

/* Summary of an 8-bit RGB / RGBA, non-interlaced PNG (what Chromium
 * writes): size, distinct colours (counted up to 4096) and the fraction of
 * pixels unlike the top-left one. 0 on success. */
static int png_summary(const char *path, int *w, int *h, int *colours, double *unlike)
{
    size_t n = 0, idat_n = 0;
    unsigned char *file = (unsigned char *)kvcal_test_read_file(path, &n), *idat = NULL,
                  *raw = NULL;
    int rc = -1, bpp = 0;
    if (!file || n < 8 || memcmp(file, "\x89PNG\r\n\x1a\n", 8))
        goto done;
    for (size_t at = 8; at + 12 <= n;) {
        size_t len = (size_t)file[at] << 24 | file[at + 1] << 16 | file[at + 2] << 8 |
                     file[at + 3];
        const unsigned char *type = file + at + 4, *data = file + at + 8;
        if (at + 12 + len > n)
            goto done;
        if (!memcmp(type, "IHDR", 4)) {
            *w = data[0] << 24 | data[1] << 16 | data[2] << 8 | data[3];
            *h = data[4] << 24 | data[5] << 16 | data[6] << 8 | data[7];
            if (data[8] != 8 || (data[9] != 2 && data[9] != 6) || data[12] != 0)
                goto done;
            bpp = data[9] == 6 ? 4 : 3;
        } else if (!memcmp(type, "IDAT", 4)) {
            unsigned char *grown = realloc(idat, idat_n + len);
            if (!grown)
                goto done;
            idat = grown;
            memcpy(idat + idat_n, data, len);
            idat_n += len;
        }
        at += 12 + len;
    }
    if (!bpp || *w <= 0 || *h <= 0)
        goto done;
    const size_t stride = (size_t)*w * bpp + 1;
    uLongf raw_n = (uLongf)(stride * *h);
    if (!(raw = malloc(raw_n)) || uncompress(raw, &raw_n, idat, idat_n) != Z_OK ||
        raw_n != stride * *h)
        goto done;
    for (int y = 0; y < *h; y++) { /* undo the row filters in place */
        unsigned char *r = raw + y * stride + 1, *up = y ? r - stride : NULL;
        for (size_t x = 0; x < stride - 1; x++) {
            int a = x >= (size_t)bpp ? r[x - bpp] : 0, b = up ? up[x] : 0;
            int c = up && x >= (size_t)bpp ? up[x - bpp] : 0;
            int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
            switch (r[-1]) {
            case 1:
                r[x] += a;
                break;
            case 2:
                r[x] += b;
                break;
            case 3:
                r[x] += (a + b) / 2;
                break;
            case 4:
                r[x] += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
                break;
            }
        }
    }
    static uint32_t seen[8192]; /* open addressing; colour + 1, 0 free */
    memset(seen, 0, sizeof seen);
    int ns = 0;
    long long other = 0;
    uint32_t first = raw[1] << 16 | raw[2] << 8 | raw[3];
    for (int y = 0; y < *h; y++)
        for (int x = 0; x < *w; x++) {
            const unsigned char *p = raw + y * stride + 1 + (size_t)x * bpp;
            uint32_t c = p[0] << 16 | p[1] << 8 | p[2];
            other += c != first;
            uint32_t i = (c * 2654435761u) >> 19;
            while (ns < 4096 && seen[i] && seen[i] != c + 1)
                i = (i + 1) & 8191;
            if (ns < 4096 && !seen[i]) {
                seen[i] = c + 1;
                ns++;
            }
        }
    *colours = ns;
    *unlike = (double)other / ((double)*w * *h);
    rc = 0;
done:
    free(file);
    free(idat);
    free(raw);
    return rc;
}

/* Opens html in headless Chromium twice: a screenshot into png, and the
 * DOM it built into dom. Returns the number of messages Chromium's console
 * printed (each echoed), -1 when Chromium did not run. */
static int chromium_open(const char *html, const char *png, const char *dom)
{
    char abs[PATH_MAX], cmd[4 * PATH_MAX + 4096];
    const char *log = kvcal_test_path("chromium.log"),
               *profile = kvcal_test_path("chromium-profile");
    if (!realpath(html, abs))
        return -1;
    /* --enable-logging=stderr --v=0 puts every console message on stderr as
     * "...:CONSOLE...] "message", source: ..." */
    snprintf(
        cmd, sizeof cmd,
        "opts='--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run "
        "--enable-logging=stderr --v=0 --user-data-dir=%s --window-size=1200,4000'; "
        "timeout 120 chromium $opts --screenshot='%s' 'file://%s' > /dev/null 2> '%s' && "
        "timeout 120 chromium $opts --dump-dom 'file://%s' > '%s' 2>> '%s'",
        profile, png, abs, log, abs, dom, log);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "tail -n 20 '%s'", log);
        if (system(cmd) != 0)
            printf("(no log)\n");
        return -1;
    }
    char *text = kvcal_test_read_file(log, NULL);
    int messages = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"))
        if (strstr(line, ":CONSOLE")) {
            printf("\n  console: %s", line);
            messages++;
        }
    free(text);
    return text ? messages : -1;
}

static void report_of_the_demo_renders_in_chromium_with_a_silent_console(void)
{
    /* what `make demo` calibrates, and an eval of it */
    const char *dir = kvcal_test_path("demo"), *html = kvcal_test_path("demo.html");
    const char *png = kvcal_test_path("demo.png"), *dom = kvcal_test_path("demo.dom");
    const char *ev = kvcal_test_path("demo_eval.json");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "calibrate --model " MODEL " --dataset " TEXT
             " --format all --out %s --stats "
             "%s/stats.h5 --quiet",
             dir, dir);
    CU_ASSERT_EQUAL_FATAL(run(cmd, NULL), 0);
    snprintf(cmd, sizeof cmd,
             "eval --model " MODEL " --dataset " TEXT
             " --num-samples 4 --seq-len 64 --scales "
             "%s/kvcal_scales.json --json --quiet",
             dir);
    CU_ASSERT_EQUAL_FATAL(run_to_file(cmd, ev), 0);
    snprintf(cmd, sizeof cmd,
             "report %s/kvcal_scales.json --stats %s/stats.h5 --eval %s --out %s", dir,
             dir, ev, html);
    CU_ASSERT_EQUAL_FATAL(run(cmd, NULL), 0);
    CU_ASSERT_EQUAL(chromium_open(html, png, dom), 0);
    int w = 0, h = 0, colours = 0;
    double unlike = 0;
    CU_ASSERT_EQUAL_FATAL(png_summary(png, &w, &h, &colours, &unlike), 0);
    printf("\n  screenshot %dx%d, %d colours, %.1f%% not background ", w, h, colours,
           100 * unlike);
    CU_ASSERT_EQUAL(w, 1200);
    CU_ASSERT_TRUE(colours >= 64); /* the viridis maps alone hold dozens */
    CU_ASSERT_TRUE(unlike > 0.05); /* text, maps and bars, not a white page */
    /* the DOM Chromium built holds every cell of the file */
    char *file = kvcal_test_read_file(html, NULL),
         *built = kvcal_test_read_file(dom, NULL);
    CU_ASSERT_FATAL(file && built);
    CU_ASSERT_TRUE(count(file, "class=\"cell\"") > 500);
    CU_ASSERT_EQUAL(count(built, "class=\"cell\""), count(file, "class=\"cell\""));
    CU_ASSERT_EQUAL(count(built, "<figure id="), count(file, "<figure id="));
    free(file);
    free(built);
}

static void chromium_console_check_sees_a_script_error(void)
{
    const char *html = kvcal_test_path("broken.html"),
               *png = kvcal_test_path("broken.png");
    const char *dom = kvcal_test_path("broken.dom");
    static const char page[] =
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>x"
        "</title></head><body><p>x</p><script>console.error('kvcal "
        "test'); undefined_function();</script></body></html>";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(html, page, strlen(page)), 0);
    CU_ASSERT_EQUAL(chromium_open(html, png, dom), 4); /* two messages, two runs */
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(report_writer_warns_of_unit_scales_unseen_heads_and_clipping),
    KVCAL_TEST(report_refuses_an_output_that_is_one_of_its_inputs),
    KVCAL_TEST(report_refuses_an_eval_json_of_another_shape),
    KVCAL_TEST(report_refuses_statistics_of_another_model),
    KVCAL_TEST(report_refuses_an_option_given_twice_or_a_layer_it_cannot_draw),
    KVCAL_TEST(calibrate_report_is_the_report_commands_byte_for_byte),
    KVCAL_TEST(calibrate_report_is_checked_and_written_with_the_other_outputs),
    KVCAL_TEST(eval_report_refuses_an_input_and_holds_the_eval),
    KVCAL_TEST(inspect_heatmap_has_a_block_per_layer_and_head),
    CU_TEST_INFO_NULL};
KVCAL_SUITE(report, KVCAL_NEEDS_NOTHING, tests)

static CU_TestInfo html5_tests[] = {
    KVCAL_TEST(report_heatmaps_have_a_cell_per_layer_and_head_with_the_json_values),
    KVCAL_TEST(report_draws_outlier_channels_and_the_histogram_from_the_statistics),
    KVCAL_TEST(report_eval_table_and_bars_match_the_eval_json),
    KVCAL_TEST(report_maps_the_tokens_each_expert_received_and_names_cold_experts),
    KVCAL_TEST(report_of_a_legacy_file_maps_its_scales_alone),
    KVCAL_TEST(report_loads_nothing_runs_no_script_and_forbids_every_load),
    CU_TEST_INFO_NULL};
KVCAL_SUITE(report_html5, KVCAL_NEEDS_HTML5LIB, html5_tests)

static CU_TestInfo browser_tests[] = {
    KVCAL_TEST(report_of_the_demo_renders_in_chromium_with_a_silent_console),
    KVCAL_TEST(chromium_console_check_sees_a_script_error), CU_TEST_INFO_NULL};
KVCAL_SUITE(report_browser, KVCAL_NEEDS_CHROMIUM, browser_tests)
