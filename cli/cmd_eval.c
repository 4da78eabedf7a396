/* cli/cmd_eval.c: `kvcal eval`: what a low-precision KV cache costs in
 * accuracy. Runs the model over held-out samples once per mode, with K and V
 * quantized (e4m3, or the other cache formats of calib/kv_sim.h) and
 * dequantized before attention exactly as an engine with that cache computes
 * (through the library's online quantization: the
 * CPU reference on the fp32 CPU runner, the CUDA kernels on the bf16 CUDA
 * runner), and reports perplexity against the unquantized baseline plus,
 * per layer, the SQNR of K and V, the fraction of clipped values and the
 * relative error of the attention output. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cmd_common.h"
#include "cli/cmd_outputs.h"
#include "cli/cmd_progress.h"
#include "cli/command.h"
#include "calib/executor.h"
#include "calib/model.h"
#include "core/scales.h"
#include "core/status.h"
#include "io/atomic_file.h"
#include "io/dataset/dataset.h"
#include "io/report/report_html.h"
#include "kvcal.h"

#define DEFAULT_BATCH 4

enum {
    MODE_BASELINE,
    MODE_STATIC_TENSOR,
    MODE_STATIC_HEAD,
    MODE_UNIT,
    MODE_DYNAMIC,
    MODE_FIRST_BATCH,
    NUM_E4M3_MODES,
    /* then calib/kv_sim.h's kvcal_kv_sim_cache_modes */
    NUM_MODES = NUM_E4M3_MODES + KVCAL_KV_SIM_CACHE_MODES
};
static const char *const e4m3_names[NUM_E4M3_MODES] = {
    "baseline", "static-tensor", "static-head", "unit", "dynamic", "first-batch"};
static const char *const e4m3_help[NUM_E4M3_MODES] = {
    "K/V unquantized (fp32 on cpu, bf16 on cuda)",
    "one K and one V scale per layer from --scales (max over heads)",
    "per-head K and V scales from --scales",
    "every scale 1.0: what engines do when the scales file is missing",
    "a scale per token and kv head (vLLM's fp8_per_token_head)",
    "per-head scales fixed from the first batch's absmax"};
#define DEFAULT_TOLERANCE 0.5 /* --tolerance: percent of the baseline's perplexity */

static const kvcal_kv_sim_cache_mode *cache_mode(int m)
{
    return m >= NUM_E4M3_MODES ? &kvcal_kv_sim_cache_modes[m - NUM_E4M3_MODES] : NULL;
}

static const char *mode_name(int m)
{
    return cache_mode(m) ? cache_mode(m)->name : e4m3_names[m];
}

/* 1 for the modes that read --scales */
static int mode_needs_scales(int m)
{
    return m == MODE_STATIC_TENSOR || m == MODE_STATIC_HEAD ||
           (cache_mode(m) && cache_mode(m)->mode == KVCAL_KV_SIM_STATIC);
}

typedef struct {
    kvcal_cmd_run_options run;
    const char *scales;
    const char *report;     /* --report FILE.html, or NULL */
    const char *modes_text; /* --modes as given, or NULL */
    int modes[NUM_MODES];   /* 1 = run */
    double tolerance;       /* --tolerance, percent */
    int modes_all;          /* --modes holds "all": leave out what does not apply */
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvcal eval --model DIR|FILE --dataset FILE [options]\n\n"
            "Runs the model over held-out samples with the KV cache simulated in FP8\n"
            "e4m3 or another cache format (K and V quantized, then dequantized before\n"
            "attention) under each mode, and reports perplexity against the\n"
            "unquantized baseline (fp32 on cpu, bf16 on cuda), the cache's bytes per\n"
            "token, the smallest cache within --tolerance and, per layer, the SQNR of\n"
            "K and V, the fraction of clipped values and the relative error of the\n"
            "attention output.\n\n"
            "  --model DIR|FILE     Hugging Face checkpoint directory or llama2.c .bin\n"
            "  --dataset FILE       held-out text, JSONL or HDF5 token set\n"
            "  --scales FILE|DIR    scales to evaluate (any format kvcal reads)\n"
            "  --modes LIST         comma-separated, from:\n");
    for (int m = 0; m < NUM_MODES; m++)
        fprintf(f, "                         %-19s %s\n", mode_name(m),
                cache_mode(m) ? cache_mode(m)->help : e4m3_help[m]);
    fprintf(
        f, "                       (default: the e4m3 modes; all: every mode; the\n"
           "                       static modes need --scales, an e4m3 scale set whose\n"
           "                       absmax each format's scales are made from)\n"
           "  --tolerance PCT      the recommended cache is the smallest whose\n"
           "                       perplexity is within PCT percent of the baseline\n"
           "                       (default 0.5)\n"
           "  --tokenizer PATH     tokenizer (default: found next to the model)\n"
           "  --text-field NAME    JSONL field holding the text (default \"text\")\n"
           "  --num-samples N      samples (default 16)\n"
           "  --seq-len L          tokens per sample (default min(256, model context))\n"
           "  --batch B            samples per forward pass (default 4; at most the\n"
           "                       number of samples); first-batch fixes its scales on\n"
           "                       the first B samples\n"
           "  --seed S             sample selection seed (default 1)\n"
           "  --tp N               tensor-parallel size a legacy file is read for\n"
           "                       (default 1)\n"
           "  --device D           cpu | cuda (default cpu)\n"
           "  --max-device-memory SIZE\n"
           "                       cuda: device memory kvcal may take (bytes, or with\n"
           "                       K, M, G, T: 24G; default the free memory less\n"
           "                       512 MiB); a model whose weights do not fit runs\n"
           "                       with two layers on the device at a time\n"
           "  --quiet              no progress line (on a terminal a line rewritten in\n"
           "                       place; elsewhere a plain line every\n"
           "                       $KVCAL_PROGRESS_INTERVAL seconds, default 10, and at\n"
           "                       the end of each mode)\n"
           "  --json               print the report as JSON on stdout\n"
           "  --report FILE.html   also write the HTML report (what kvcal report\n"
           "                       writes: the table, the change per mode, the\n"
           "                       --scales per layer and head); never an input\n\n"
           "exit codes: 0 ok, 1 invalid input or a non-finite result, 2 usage or I/O "
           "error\n");
}

static int parse_modes(const char *text, int *modes, int *all)
{
    char buf[512];
    if (snprintf(buf, sizeof buf, "%s", text) >= (int)sizeof buf)
        return -1;
    memset(modes, 0, sizeof(int) * NUM_MODES);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int m = 0; m < NUM_MODES; m++)
            if (!strcmp(tok, mode_name(m)) || !strcmp(tok, "all"))
                modes[m] = found = 1;
        *all |= !strcmp(tok, "all");
        if (!found) {
            fprintf(stderr, "kvcal eval: --modes: unknown mode '%s' (see --help)\n", tok);
            return -1;
        }
    }
    return 0;
}

enum { O_SCALES = KVCAL_OPT_RUN_END, O_MODES, O_REPORT, O_TOLERANCE };

/* eval's own options (kvcal_cmd_own_option); ctx: the options, whose
 * modes_text keeps --modes until the other options are known. */
static int own_option(int c, const char *arg, void *ctx)
{
    options *o = ctx;
    switch (c) {
    case O_SCALES:
        return kvcal_cmd_parse_path("eval", "--scales", arg, &o->scales) ? -1 : 1;
    case O_MODES:
        o->modes_text = arg;
        return 1;
    case O_REPORT:
        return kvcal_cmd_parse_path("eval", "--report", arg, &o->report) ? -1 : 1;
    case O_TOLERANCE: {
        char *end;
        o->tolerance = strtod(arg, &end);
        if (*end || !(o->tolerance >= 0.0 && o->tolerance < 1e6)) {
            fprintf(stderr, "kvcal eval: --tolerance '%s': give a percentage >= 0, e.g. "
                            "0.5\n", arg);
            return -1;
        }
        return 1;
    }
    default:
        return 0;
    }
}

/* Parses argv into *o; returns -1 on a usage error (message printed), 1 for
 * --help, 0 to run. */
static int parse_options(int argc, char **argv, options *o)
{
    static const struct option longopts[] = {
        KVCAL_CMD_RUN_LONGOPTS,
        {"scales", required_argument, 0, O_SCALES},
        {"modes", required_argument, 0, O_MODES},
        {"report", required_argument, 0, O_REPORT},
        {"tolerance", required_argument, 0, O_TOLERANCE},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    o->run.num_samples = 16;
    o->run.tp = 1;
    o->run.seed = 1;
    o->tolerance = DEFAULT_TOLERANCE;
    int rc =
        kvcal_cmd_parse_run_argv("eval", argc, argv, longopts, 2, &o->run, own_option, o);
    if (rc)
        return rc;
    const char *modes = o->modes_text;
    if (!o->run.model || !o->run.dataset) {
        fprintf(stderr, "kvcal eval: --model and --dataset are required (see --help)\n");
        return -1;
    }
    if (modes) {
        if (parse_modes(modes, o->modes, &o->modes_all))
            return -1;
        for (int m = 0; m < NUM_MODES; m++)
            if (o->modes[m] && mode_needs_scales(m) && !o->scales) {
                if (o->modes_all) {
                    o->modes[m] = 0;
                    continue;
                }
                fprintf(stderr, "kvcal eval: --modes %s needs --scales FILE\n",
                        mode_name(m));
                return -1;
            }
    } else {
        for (int m = 0; m < NUM_E4M3_MODES; m++)
            o->modes[m] = !mode_needs_scales(m) || o->scales != NULL;
    }
    return 0;
}

// --- one mode ------------------------------------------------------------------

/* Per layer sums over every batch of a mode: kvcal_eval_layer_sums
 * (calib/backend.h), the same on both devices. */
typedef kvcal_eval_layer_sums layer_sums;

typedef struct {
    int mode;
    double ppl;
    double kv_bytes;  /* KV cache bytes per token (kvcal_kv_sim_bytes_per_token) */
    int clip_counted; /* e4m3 modes: clipped values counted */
    layer_sums *sums; /* owned; NULL for the baseline */
} mode_result;

typedef struct {
    kvcal_cmd_progress pr;
    int mode;
} progress_ctx;

static void show_progress(void *ctx, const kvcal_exec_progress *p)
{
    progress_ctx *c = ctx;
    char where[64] = "";
    if (p->layer)
        snprintf(where, sizeof where, " (layer %d/%d)", p->layer, p->layers);
    kvcal_cmd_progress_update(&c->pr, p->samples_done == p->samples_total,
                              "eval %s: %d/%d samples%s, %.0f s", mode_name(c->mode),
                              p->samples_done, p->samples_total, where,
                              kvcal_cmd_progress_elapsed(&c->pr));
}

/* The simulated cache of `mode`; ks and vs (layers, kv_heads) scratch, then
 * (layers) more floats past vs for the query's scales. */
static kvcal_kv_sim_config mode_config(int mode, const kvcal_scales_t *scales,
                                       const kvcal_model_desc *d, float *ks, float *vs)
{
    kvcal_kv_sim_config c = {.mode = KVCAL_KV_SIM_STATIC, .k_scale = ks, .v_scale = vs};
    if (cache_mode(mode))
        return kvcal_kv_sim_cache_mode_config(
            cache_mode(mode), scales, d->num_layers, d->num_kv_heads, ks, vs,
            vs + (size_t)d->num_layers * d->num_kv_heads);
    switch (mode) {
    case MODE_BASELINE:
        return (kvcal_kv_sim_config){.mode = KVCAL_KV_SIM_EXACT};
    case MODE_DYNAMIC:
        return (kvcal_kv_sim_config){.mode = KVCAL_KV_SIM_DYNAMIC};
    case MODE_FIRST_BATCH:
        return (kvcal_kv_sim_config){.mode = KVCAL_KV_SIM_FIRST_BATCH};
    default:
        kvcal_kv_sim_static_scales(scales,
                                   mode == MODE_STATIC_TENSOR ? KVCAL_KV_SCALES_TENSOR
                                   : mode == MODE_STATIC_HEAD ? KVCAL_KV_SCALES_HEAD
                                                              : KVCAL_KV_SCALES_UNIT,
                                   d->num_layers, d->num_kv_heads, ks, vs);
        return c;
    }
}

/* Runs every sample once under `mode`; fills r. */
static kvcal_status run_mode(kvcal_exec_t *x, const kvcal_model_desc *d,
                             const kvcal_samples *s, const options *o,
                             const kvcal_scales_t *scales, int mode, mode_result *r)
{
    double nll = 0.0;
    long long count = 0;
    const size_t lh = (size_t)d->num_layers * d->num_kv_heads;
    float *ks = malloc((2 * lh + (size_t)d->num_layers) * sizeof *ks);
    r->sums = mode == MODE_BASELINE ? NULL : calloc((size_t)d->num_layers, sizeof *r->sums);
    kvcal_status st = KVCAL_OK;
    if (!ks || (mode != MODE_BASELINE && !r->sums)) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of memory");
        goto done;
    }
    const kvcal_kv_sim_config cfg = mode_config(mode, scales, d, ks, ks + lh);
    progress_ctx pc = {.mode = mode};
    kvcal_cmd_progress_start(&pc.pr, o->run.quiet, 0.0);
    const kvcal_exec_samples run = {.ids = s->ids,
                                    .lengths = s->lengths,
                                    .num_samples = s->num_samples,
                                    .seq_len = s->seq_len,
                                    .batch = o->run.batch,
                                    .progress = show_progress,
                                    .progress_ctx = &pc};
    st = kvcal_exec_eval(x, &run, &cfg, &nll, &count, r->sums);
    kvcal_cmd_progress_end(&pc.pr);
    if (!st && count == 0)
        st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                        "%s: no sample has two tokens to predict from", o->run.dataset);
done:
    free(ks);
    if (st) {
        free(r->sums);
        r->sums = NULL;
        return st;
    }
    r->mode = mode;
    r->ppl = exp(nll / (double)count);
    r->kv_bytes = kvcal_kv_sim_bytes_per_token(d, &cfg);
    r->clip_counted =
        !cache_mode(mode) || cache_mode(mode)->format == KVCAL_KV_FORMAT_FP8_E4M3;
    return KVCAL_OK;
}

// --- report ------------------------------------------------------------------

static double sqnr_db(const layer_sums *s, int which)
{
    return 10.0 * log10(s->kv[which].x2 / s->kv[which].e2);
}

static double clip_frac(const layer_sums *s, int which)
{
    const kvcal_error_sums *e = &s->kv[which];
    return e->n ? (double)e->clipped / (double)e->n : 0.0;
}

static double att_err(const layer_sums *s)
{
    return s->att.x2 > 0 ? sqrt(s->att.e2 / s->att.x2) : 0.0;
}

/* Summary of a mode over layers: min SQNR, max clipped fraction and error. */
static void mode_summary(const mode_result *r, int layers, double *k_sqnr, double *v_sqnr,
                         double *clip, double *err)
{
    *k_sqnr = *v_sqnr = INFINITY;
    *clip = *err = 0.0;
    for (int l = 0; l < layers; l++) {
        const layer_sums *s = &r->sums[l];
        *k_sqnr = fmin(*k_sqnr, sqnr_db(s, 0));
        *v_sqnr = fmin(*v_sqnr, sqnr_db(s, 1));
        *clip = fmax(*clip, fmax(clip_frac(s, 0), clip_frac(s, 1)));
        *err = fmax(*err, att_err(s));
    }
}

/* The mode to deploy: the smallest cache (bytes per token) whose perplexity
 * is within tolerance percent of the baseline's, the smaller change among
 * equals; -1 when no mode is. */
static int recommend(const mode_result *res, int nres, double tolerance)
{
    int best = -1;
    for (int i = 1; i < nres; i++) {
        double change = 100.0 * (res[i].ppl - res[0].ppl) / res[0].ppl;
        if (!isfinite(res[i].ppl) || change > tolerance)
            continue;
        if (best < 0 || res[i].kv_bytes < res[best].kv_bytes ||
            (res[i].kv_bytes == res[best].kv_bytes && res[i].ppl < res[best].ppl))
            best = i;
    }
    return best;
}

static void print_table(const mode_result *res, int nres, const kvcal_model_desc *d,
                        const kvcal_samples *s, const options *o)
{
    printf("evaluated %s (%d layers, %d kv heads x %d) on %s (%s baseline), %d "
           "samples, %lld tokens of %s%s%s\n",
           d->architecture, d->num_layers, d->num_kv_heads, d->head_dim,
           o->run.cuda ? "cuda" : "cpu", o->run.cuda ? "bf16" : "fp32", s->num_samples,
           s->num_tokens, o->run.dataset, o->scales ? "; scales " : "",
           o->scales ? o->scales : "");
    double base = res[0].ppl;
    printf("\n%-19s %11s %10s %9s %9s  %11s %11s %9s %9s\n", "mode", "perplexity",
           "change", "change %", "KV B/tok", "min K SQNR", "min V SQNR", "max clip",
           "max att");
    for (int i = 0; i < nres; i++) {
        printf("%-19s %11.4f", mode_name(res[i].mode), res[i].ppl);
        if (!res[i].sums) {
            printf(" %10s %9s %9.0f  %11s %11s %9s %9s\n", "-", "-", res[i].kv_bytes, "-",
                   "-", "-", "-");
            continue;
        }
        double ks, vs, clip, err;
        mode_summary(&res[i], d->num_layers, &ks, &vs, &clip, &err);
        char clip_text[16] = "-";
        if (res[i].clip_counted)
            snprintf(clip_text, sizeof clip_text, "%9.2e", clip);
        printf(" %+10.4f %+8.3f%% %9.0f  %8.1f dB %8.1f dB %9s %9.2e\n",
               res[i].ppl - base, 100.0 * (res[i].ppl - base) / base, res[i].kv_bytes, ks,
               vs, clip_text, err);
    }
    int rec = recommend(res, nres, o->tolerance);
    if (rec < 0)
        printf("\nrecommendation: no mode is within %+.2f%% of the baseline's "
               "perplexity: keep a bf16 cache\n",
               o->tolerance);
    else
        printf("\nrecommendation: %s, the smallest cache within %+.2f%% of the "
               "baseline's perplexity (%.0f of %.0f bytes per token, %+.3f%%)\n",
               mode_name(res[rec].mode), o->tolerance, res[rec].kv_bytes, res[0].kv_bytes,
               100.0 * (res[rec].ppl - base) / base);
    puts("\n(KV B/tok = the cache's bytes per token over every layer's K and V: bf16\n"
         "for the baseline, per (token, head) fp32 scales and zero points of the\n"
         "dynamic modes included; SQNR = 10 log10(sum x^2 / sum (x -\n"
         "dequant(quant(x)))^2);\n"
         "clip = fraction of values saturated past e4m3's rounding to 448 (|x| / scale\n"
         "> 464), counted for the e4m3 modes; att =\n"
         "|attention(q, K', V') - attention(q, K, V)| / |attention(q, K, V)|, with q, K\n"
         "and V of the mode's own forward pass)");
    for (int i = 0; i < nres; i++) {
        if (!res[i].sums)
            continue;
        printf("\n%s per layer:\n%5s %11s %11s %10s %10s %10s\n", mode_name(res[i].mode),
               "layer", "K SQNR dB", "V SQNR dB", "K clip", "V clip", "att err");
        for (int l = 0; l < d->num_layers; l++) {
            const layer_sums *sl = &res[i].sums[l];
            printf("%5d %11.2f %11.2f %10.2e %10.2e %10.2e\n", l, sqnr_db(sl, 0),
                   sqnr_db(sl, 1), clip_frac(sl, 0), clip_frac(sl, 1), att_err(sl));
        }
    }
}

/* A number, or null where it is not finite (an exact round trip has an
 * infinite SQNR). */
static cJSON *json_number(double v)
{
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

/* The report as JSON (caller deletes; NULL when out of memory). */
static cJSON *report_json(const mode_result *res, int nres, const kvcal_model_desc *d,
                          const kvcal_samples *s, const options *o)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "architecture", d->architecture);
    cJSON_AddStringToObject(root, "dataset", o->run.dataset);
    cJSON_AddStringToObject(root, "device", o->run.cuda ? "cuda" : "cpu");
    cJSON_AddStringToObject(root, "baseline_dtype", o->run.cuda ? "bf16" : "fp32");
    if (o->scales)
        cJSON_AddStringToObject(root, "scales", o->scales);
    cJSON_AddNumberToObject(root, "num_samples", s->num_samples);
    cJSON_AddNumberToObject(root, "num_tokens", (double)s->num_tokens);
    cJSON_AddNumberToObject(root, "seq_len", s->seq_len);
    cJSON *modes = cJSON_AddArrayToObject(root, "modes");
    for (int i = 0; i < nres; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "mode", mode_name(res[i].mode));
        cJSON_AddNumberToObject(m, "kv_bytes_per_token", res[i].kv_bytes);
        cJSON_AddItemToObject(m, "perplexity", json_number(res[i].ppl));
        cJSON_AddItemToObject(m, "perplexity_change",
                              json_number(res[i].ppl - res[0].ppl));
        cJSON_AddItemToObject(m, "perplexity_change_rel",
                              json_number((res[i].ppl - res[0].ppl) / res[0].ppl));
        if (res[i].sums) {
            cJSON *layers = cJSON_AddArrayToObject(m, "layers");
            for (int l = 0; l < d->num_layers; l++) {
                const layer_sums *sl = &res[i].sums[l];
                cJSON *o_l = cJSON_CreateObject();
                cJSON_AddNumberToObject(o_l, "layer", l);
                cJSON_AddItemToObject(o_l, "k_sqnr_db", json_number(sqnr_db(sl, 0)));
                cJSON_AddItemToObject(o_l, "v_sqnr_db", json_number(sqnr_db(sl, 1)));
                cJSON_AddNumberToObject(o_l, "k_clipped", clip_frac(sl, 0));
                cJSON_AddNumberToObject(o_l, "v_clipped", clip_frac(sl, 1));
                cJSON_AddItemToObject(o_l, "attention_rel_error",
                                      json_number(att_err(sl)));
                cJSON_AddItemToArray(layers, o_l);
            }
        }
        cJSON_AddItemToArray(modes, m);
    }
    int rec = recommend(res, nres, o->tolerance);
    cJSON_AddNumberToObject(root, "tolerance_pct", o->tolerance);
    if (rec < 0)
        cJSON_AddNullToObject(root, "recommendation");
    else
        cJSON_AddStringToObject(root, "recommendation", mode_name(res[rec].mode));
    return root;
}

static void print_json(const cJSON *root)
{
    char *text = cJSON_Print(root);
    if (text)
        printf("%s\n", text);
    free(text);
}

/* Whether --report may be written: writable, and none of the inputs (the
 * model's files, the dataset, the tokenizer, --scales); -1 with a message. */
static int check_report(const options *o)
{
    kvcal_inputs_t *in = NULL;
    kvcal_status st = kvcal_inputs_create(&in);
    if (!st)
        st = kvcal_cmd_add_model_inputs(in, o->run.model);
    if (!st)
        st = kvcal_inputs_add(in, o->run.dataset, "the dataset", NULL);
    if (!st && o->run.tokenizer)
        st = kvcal_inputs_add(in, o->run.tokenizer, "the tokenizer", NULL);
    if (!st && o->scales)
        st = kvcal_inputs_add(in, o->scales, "the scales", NULL);
    if (!st && strlen(o->report) > KVCAL_ATOMIC_PATH_MAX)
        st = kvcal_fail(KVCAL_ERR_IO,
                        "--report %.64s...: output path too long; use a path shorter "
                        "than %zu bytes",
                        o->report, (size_t)KVCAL_ATOMIC_PATH_MAX + 1);
    if (!st)
        st = kvcal_atomic_check(o->report);
    if (!st)
        st = kvcal_inputs_check(in, "--report", o->report);
    kvcal_inputs_destroy(in);
    if (st)
        fprintf(stderr, "kvcal eval: %s\n", kvcal_last_error());
    return st ? -1 : 0;
}

// --- command -----------------------------------------------------------------

/* The directory holding the model's config.json (NULL for a llama2.c file). */
static const char *model_dir_of(const options *o, const kvcal_model_desc *d)
{
    struct stat sb;
    if (!strcmp(d->source, "llama2c") || stat(o->run.model, &sb) != 0 ||
        !S_ISDIR(sb.st_mode))
        return NULL;
    return o->run.model;
}

KVCAL_COMMAND(eval, "eval", "perplexity and K/V error under FP8 KV cache modes")
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc == 1) {
        usage(stdout);
        return KVCAL_EXIT_OK;
    }
    if (rc || (o.report && check_report(&o)))
        return KVCAL_EXIT_USAGE;
    kvcal_model_t *model = NULL;
    kvcal_samples *samples = NULL;
    kvcal_exec_t *x = NULL;
    kvcal_scales_t *scales = NULL;
    cJSON *json = NULL;
    mode_result res[NUM_MODES];
    int nres = 0;
    kvcal_status st;
    memset(res, 0, sizeof res);
    if ((st = kvcal_model_open(o.run.model, &model)))
        goto fail;
    const kvcal_model_desc *d = kvcal_model_describe(model);
    if (!o.run.seq_len)
        o.run.seq_len = d->max_seq_len < 256 ? d->max_seq_len : 256;
    if (o.run.seq_len > d->max_seq_len) {
        st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                        "--seq-len %d is longer than the model's context of %d tokens",
                        o.run.seq_len, d->max_seq_len);
        goto fail;
    }
    for (int m = 0; m < NUM_MODES; m++)
        if (o.modes[m] && cache_mode(m) &&
            !kvcal_kv_format_row_bytes(cache_mode(m)->format, d->head_dim)) {
            if (!o.modes_all) {
                st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                                "--modes %s: the format needs head_dim a multiple of 16, "
                                "%s has %d",
                                mode_name(m), o.run.model, d->head_dim);
                goto fail;
            }
            o.modes[m] = 0;
            if (!o.run.quiet)
                fprintf(stderr, "kvcal eval: note: %s left out: head_dim %d is not a "
                                "multiple of 16\n", mode_name(m), d->head_dim);
        }
    if (o.scales) {
        if ((st = kvcal_scales_load(o.scales, model_dir_of(&o, d), o.run.tp, &scales)))
            goto fail;
        if (kvcal_scales_num_layers(scales) != d->num_layers ||
            kvcal_scales_num_kv_heads(scales) != d->num_kv_heads) {
            st = kvcal_fail(KVCAL_ERR_MISMATCH,
                            "%s: scales for %d layers x %d kv heads, but %s has %d x %d",
                            o.scales, kvcal_scales_num_layers(scales),
                            kvcal_scales_num_kv_heads(scales), o.run.model, d->num_layers,
                            d->num_kv_heads);
            goto fail;
        }
    }
    kvcal_dataset_options dopt = {o.run.num_samples, o.run.seq_len, (uint64_t)o.run.seed,
                                  1, o.run.text_field};
    if ((st = kvcal_cmd_load_samples("eval", o.run.model, d->vocab_size, o.run.tokenizer,
                                     o.run.dataset, &dopt, &samples)))
        goto fail;
    int batch = o.run.batch ? o.run.batch : DEFAULT_BATCH;
    if (batch > samples->num_samples) {
        if (o.run.batch && !o.run.quiet)
            fprintf(
                stderr,
                "kvcal eval: note: --batch %d is more than the %d samples; running %d "
                "a pass\n",
                batch, samples->num_samples, samples->num_samples);
        batch = samples->num_samples;
    }
    o.run.batch = batch;
    kvcal_exec_options xo;
    if ((st = kvcal_cmd_exec_options(&o.run, batch, samples->seq_len, &xo)) ||
        (st = kvcal_exec_create(model, &xo, &x)))
        goto fail;
    /* the baseline first: every change is measured against it */
    o.modes[MODE_BASELINE] = 1;
    for (int m = 0; m < NUM_MODES; m++) {
        if (!o.modes[m])
            continue;
        if ((st = run_mode(x, d, samples, &o, scales, m, &res[nres])))
            goto fail;
        nres++;
    }
    if ((o.run.json || o.report) && !(json = report_json(res, nres, d, samples, &o))) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (o.report) {
        const kvcal_report_html_inputs in = {
            scales, o.scales, NULL, NULL, json, NULL, -1, KVCAL_REPORT_CLIP_THRESHOLD};
        if ((st = kvcal_report_html_write(o.report, &in)))
            goto fail;
    }
    if (o.run.json)
        print_json(json);
    else
        print_table(res, nres, d, samples, &o);
    rc = KVCAL_EXIT_OK;
    for (int i = 0; i < nres; i++)
        if (!isfinite(res[i].ppl)) {
            fprintf(stderr, "kvcal eval: mode %s gave a non-finite perplexity\n",
                    mode_name(res[i].mode));
            rc = KVCAL_EXIT_INVALID;
        }
    goto done;
fail:
    fprintf(stderr, "kvcal eval: %s\n", kvcal_last_error());
    rc = kvcal_cmd_run_exit_code(st);
done:
    cJSON_Delete(json);
    for (int i = 0; i < NUM_MODES; i++)
        free(res[i].sums);
    kvcal_exec_destroy(x);
    kvcal_scales_destroy(scales);
    kvcal_samples_destroy(samples);
    kvcal_model_close(model);
    return rc;
}
