/* cli/cmd_eval.c: `kvcal eval`: what a low-precision KV cache costs in
 * accuracy. Runs the model over held-out samples once per mode, with K and V
 * quantized (e4m3, or the other cache formats of calib/kv_sim.h) and
 * dequantized before attention exactly as an engine with that cache computes
 * (through the library's online quantization: the
 * CPU reference on the fp32 CPU runner, the CUDA kernels on the bf16 CUDA
 * runner), and reports against the unquantized baseline on the same
 * tokens the KL divergence, top-1 agreement and perplexity change with its
 * interval (calib/eval_stats.h), plus, per layer, the SQNR of K and V, the
 * fraction of clipped values and the relative error of the attention
 * output. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/eval_stats.h"
#include "calib/executor.h"
#include "calib/model.h"
#include "cli/cmd_common.h"
#include "cli/cmd_outputs.h"
#include "cli/cmd_progress.h"
#include "cli/cmd_ranks.h"
#include "cli/command.h"
#include "core/scales.h"
#include "core/status.h"
#include "io/atomic_file.h"
#include "io/dataset/dataset.h"
#include "io/report/report_html.h"
#include "io/scales/scales_io.h"
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
    int modes_all; /* --modes holds "all": modes that do not apply are left out */
    kvcal_cmd_ranks *ranks; /* this process's rank of the run */
    int attribute;          /* --attribute: each layer's cache alone, per mode */
} options;

static void usage(FILE *f)
{
    fprintf(
        f, "usage: kvcal eval --model DIR|FILE --dataset FILE [options]\n\n"
           "Runs the model over held-out samples with the KV cache simulated in FP8\n"
           "e4m3 or another cache format (K and V quantized, then dequantized before\n"
           "attention) under each mode, and reports against the unquantized baseline\n"
           "(fp32 on cpu, bf16 on cuda) on the same tokens: the KL divergence of the\n"
           "next-token distributions (mean, 99th percentile), top-1 agreement and the\n"
           "perplexity change with its 95%% interval over the samples (within noise or\n"
           "not, and the tokens that would resolve it), each mode against the best one,\n"
           "the cache's bytes per token and the smallest cache within --tolerance; and,\n"
           "per layer, the SQNR of K and V, the fraction of clipped values and the\n"
           "relative error of the attention output.\n\n"
           "  --model DIR|FILE     Hugging Face checkpoint directory or llama2.c .bin\n"
           "  --dataset FILE       held-out text, JSONL or HDF5 token set\n"
           "  --scales FILE|DIR    scales to evaluate (any format kvcal reads)\n"
           "  --modes LIST         comma-separated, from:\n");
    for (int m = 0; m < NUM_MODES; m++)
        fprintf(f, "                         %-19s %s\n", mode_name(m),
                cache_mode(m) ? cache_mode(m)->help : e4m3_help[m]);
    fprintf(
        f, "                       (default: the e4m3 modes; all: every mode; the\n"
           "                       static modes need --scales, a scale set whose\n"
           "                       absmax (or range) each format's scales are made\n"
           "                       from; int8-asym-static takes the scales and offsets\n"
           "                       of an int8_asym set as they are)\n"
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
           "  --attribute          per mode, also one run per layer with only that\n"
           "                       layer's cache simulated: the KL divergence and the\n"
           "                       perplexity change each layer costs alone (layers x\n"
           "                       modes more runs); the costliest layer is named by\n"
           "                       it (else by its attention error)\n"
           "  --json               print the report as JSON on stdout\n"
           "  --report FILE.html   also write the HTML report (what kvcal report\n"
           "                       writes: the table, the change per mode, the\n"
           "                       --scales per layer and head); never an input\n\n"
           "Several processes (mpirun -np N kvcal eval ...) split the samples; rank 0\n"
           "reports.\n"
           "exit codes: 0 ok, 1 invalid input or a non-finite result, 2 usage or I/O "
           "error\n");
}

/* Parses --modes (comma-separated names, any length; a name named twice
 * runs once) into modes; -1 with the message printed on an empty list, an
 * empty item or an unknown name. */
static int parse_modes(const char *text, int *modes, int *all)
{
    memset(modes, 0, sizeof(int) * NUM_MODES);
    for (const char *tok = text;; tok++) {
        const size_t n = strcspn(tok, ",");
        if (n == 0) {
            fprintf(stderr,
                    "kvcal eval: --modes '%.64s%s': %s; give comma-separated mode names "
                    "(e.g. --modes static-head,dynamic; see --help)\n",
                    text, strlen(text) > 64 ? "..." : "",
                    *text ? "an empty mode name" : "no mode named");
            return -1;
        }
        const int is_all = n == 3 && !strncmp(tok, "all", 3);
        int found = is_all;
        for (int m = 0; m < NUM_MODES; m++)
            if (is_all || (strlen(mode_name(m)) == n && !strncmp(tok, mode_name(m), n)))
                modes[m] = found = 1;
        *all |= is_all;
        if (!found) {
            fprintf(stderr, "kvcal eval: --modes: unknown mode '%.*s' (see --help)\n",
                    n > 64 ? 64 : (int)n, tok);
            return -1;
        }
        tok += n;
        if (!*tok)
            return 0;
    }
}

enum { O_SCALES = KVCAL_OPT_RUN_END, O_MODES, O_REPORT, O_TOLERANCE, O_ATTRIBUTE };

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
    case O_ATTRIBUTE:
        o->attribute = 1;
        return 1;
    case O_REPORT:
        return kvcal_cmd_parse_path("eval", "--report", arg, &o->report) ? -1 : 1;
    case O_TOLERANCE: {
        char *end;
        o->tolerance = strtod(arg, &end);
        if (end == arg || *end || !(o->tolerance >= 0.0 && o->tolerance < 1e6)) {
            fprintf(stderr,
                    "kvcal eval: --tolerance '%s': give a percentage in [0, 1e6), e.g. "
                    "0.5\n",
                    arg);
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
        {"attribute", no_argument, 0, O_ATTRIBUTE},
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
    double kv_bytes;        /* KV cache bytes per token (kvcal_kv_sim_bytes_per_token) */
    int clip_counted;       /* e4m3 modes: clipped values counted */
    layer_sums *sums;       /* owned; NULL for the baseline */
    float *nll, *kld, *top; /* (tokens) owned; kld and top NULL for the baseline */
    kvcal_eval_compare cmp; /* against the baseline (not for the baseline) */
    /* against the best mode (the least perplexity but the baseline's), on
     * the same tokens; best -1 for the best itself and the baseline */
    kvcal_eval_compare vs_best;
    int best;
    /* (layers) owned, --attribute: the mode's cache in that layer alone */
    double *kld_alone, *change_alone;
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

/* The simulated cache of `mode`; scratch (5, layers, kv_heads) floats for
 * its scales (kvcal_kv_sim_cache_mode_config), *q (may be NULL) what its
 * query's scale is. */
static kvcal_kv_sim_config mode_config(int mode, const kvcal_scales_t *scales,
                                       const kvcal_model_desc *d, float *scratch,
                                       kvcal_kv_sim_q_source *q)
{
    float *ks = scratch, *vs = ks + (size_t)d->num_layers * d->num_kv_heads;
    kvcal_kv_sim_config c = {.mode = KVCAL_KV_SIM_STATIC, .k_scale = ks, .v_scale = vs};
    if (cache_mode(mode))
        return kvcal_kv_sim_cache_mode_config(cache_mode(mode), scales, d->num_layers,
                                              d->num_kv_heads, scratch, q);
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

/* Several ranks: their error sums of a mode added on rank 0 in rank order
 * (in another order than one process's, so equal to it within rounding;
 * the counts exactly). */
static kvcal_status reduce_sums(kvcal_cmd_ranks *ranks, const kvcal_model_desc *d,
                                layer_sums *sums)
{
    if (ranks->size == 1 || !sums)
        return KVCAL_OK;
    const size_t bytes = (size_t)d->num_layers * sizeof *sums;
    unsigned char *all = malloc(bytes * (size_t)ranks->size);
    kvcal_status st = all ? kvcal_cmd_ranks_gather(ranks, sums, bytes, all)
                          : kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of memory");
    for (int r = 1; !st && ranks->rank == 0 && r < ranks->size; r++)
        for (int l = 0; l < d->num_layers; l++) {
            layer_sums add;
            memcpy(&add, all + r * bytes + l * sizeof add, sizeof add);
            for (int i = 0; i < 3; i++) {
                kvcal_error_sums *dst = i < 2 ? &sums[l].kv[i] : &sums[l].att;
                const kvcal_error_sums *src = i < 2 ? &add.kv[i] : &add.att;
                dst->x2 += src->x2;
                dst->e2 += src->e2;
                dst->clipped += src->clipped;
                dst->n += src->n;
            }
        }
    free(all);
    return st;
}

/* Several ranks: each rank's per-token values (each[r] bytes of rank r:
 * its part's tokens, in sample order) joined on rank 0 in rank order, the
 * order of one process's run (ranks hold consecutive batches): *v becomes
 * the whole run's there. */
static kvcal_status gather_tokens(kvcal_cmd_ranks *ranks, const size_t *each, float **v)
{
    if (ranks->size == 1 || !*v)
        return KVCAL_OK;
    size_t total = 0;
    for (int r = 0; r < ranks->size; r++)
        total += each[r];
    float *all = malloc(total ? total : 1);
    kvcal_status st = all ? kvcal_cmd_ranks_gatherv(ranks, *v, each, all)
                          : kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of memory");
    if (st) {
        free(all);
        return st;
    }
    free(*v);
    *v = all;
    return KVCAL_OK;
}

/* Runs every sample once under `mode`; fills r (base: the baseline's
 * result, NULL when r is the baseline: its distributions are kept).
 * Several ranks: each runs its part (first-batch, whose scales come from
 * the run's first batch, on rank 0 alone, without KL divergence and top-1:
 * rank 0 holds the baseline's distributions of its part only), they meet,
 * and rank 0 gets the whole run's tokens and sums. */
static kvcal_status run_mode(kvcal_exec_t *x, const kvcal_model_desc *d,
                             const kvcal_samples *s, const options *o,
                             const kvcal_scales_t *scales, int mode,
                             const mode_result *base, const unsigned char *layers,
                             mode_result *r)
{
    const size_t lh = (size_t)d->num_layers * d->num_kv_heads;
    kvcal_cmd_ranks *ranks = o->ranks;
    const int whole = mode == MODE_FIRST_BATCH && ranks->size > 1;
    const kvcal_exec_samples all = {.ids = s->ids,
                                    .lengths = s->lengths,
                                    .num_samples = s->num_samples,
                                    .seq_len = s->seq_len,
                                    .batch = o->run.batch,
                                    .progress = show_progress};
    kvcal_exec_samples run = all;
    const int mine = whole ? ranks->rank == 0 : kvcal_cmd_ranks_narrow(ranks, &run);
    if (!mine)
        run.num_samples = 0;
    /* every rank's bytes of per-token values, known to every rank */
    size_t *each = calloc((size_t)ranks->size, sizeof *each);
    for (int i = 0; each && i < ranks->size; i++) {
        kvcal_exec_samples part = all;
        if (whole) {
            part.num_samples = i == 0 ? all.num_samples : 0;
        } else if (ranks->size > 1) {
            const kvcal_dp_part p =
                kvcal_dp_layout(all.num_samples, all.batch, i, ranks->size);
            part.lengths = all.lengths + p.first_sample;
            part.num_samples = p.num_samples;
        }
        each[i] = (size_t)kvcal_exec_predicted_tokens(&part) * sizeof(float);
    }
    const int64_t n = kvcal_exec_predicted_tokens(&run);
    const int64_t total = kvcal_exec_predicted_tokens(&all);
    const int compare = base && !whole;
    float *ks = malloc(5 * lh * sizeof *ks);
    r->mode = mode;
    r->sums = base ? calloc((size_t)d->num_layers, sizeof *r->sums) : NULL;
    r->nll = malloc((size_t)(n ? n : 1) * sizeof *r->nll);
    r->kld = base ? malloc((size_t)(compare && n ? n : 1) * sizeof *r->kld) : NULL;
    r->top = base ? malloc((size_t)(compare && n ? n : 1) * sizeof *r->top) : NULL;
    kvcal_status st = KVCAL_OK;
    if (!each || !ks || !r->nll || (base && (!r->sums || !r->kld || !r->top))) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of memory");
        goto done;
    }
    if (total == 0) {
        st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                        "%s: no sample has two tokens to predict from", o->run.dataset);
        goto done;
    }
    kvcal_kv_sim_q_source q_source = KVCAL_KV_SIM_Q_NONE;
    kvcal_kv_sim_config cfg = mode_config(mode, scales, d, ks, &q_source);
    cfg.layers = layers;
    static const char *const q_text[] = {
        "",
        "the set's per-query-head q_scale, reduced to one per kv-head group by their "
        "max as vLLM reads it",
        "the set's q_scale per layer",
        "1.0: the set has no q_scale, and vLLM 0.32.0 then quantizes the query under "
        "1.0 (BaseKVCacheMethod.process_weights_after_loading, whatever its warning "
        "says; compressed-tensors keeps its ones); calibrate --q-scale writes one"};
    if (q_source && !o->run.quiet && (!o->ranks || o->ranks->rank == 0))
        fprintf(stderr, "eval %s: the query in e4m3 under %s\n", mode_name(mode),
                q_text[q_source]);
    r->kv_bytes = kvcal_kv_sim_bytes_per_token(d, &cfg);
    r->clip_counted =
        !cache_mode(mode) || cache_mode(mode)->format == KVCAL_KV_FORMAT_FP8_E4M3;
    progress_ctx pc = {.mode = mode};
    run.progress_ctx = &pc;
    const kvcal_eval_tokens tok = {r->nll, base == NULL, compare ? r->kld : NULL,
                                   compare ? r->top : NULL};
    kvcal_cmd_progress_start(&pc.pr, o->run.quiet, 0.0);
    if (run.num_samples)
        st = kvcal_exec_eval(x, &run, &cfg, &tok, r->sums);
    kvcal_cmd_progress_end(&pc.pr);
    if ((st = kvcal_cmd_ranks_meet(ranks, st, 0)) ||
        (st = reduce_sums(ranks, d, r->sums)) ||
        (st = gather_tokens(ranks, each, &r->nll)))
        goto done;
    if (compare && ((st = gather_tokens(ranks, each, &r->kld)) ||
                    (st = gather_tokens(ranks, each, &r->top))))
        goto done;
    if (ranks->rank != 0)
        goto done;
    if (base && !compare) {
        /* no distributions compared: the statistics of KLD and top-1 are NaN */
        float *nan_kld = realloc(r->kld, (size_t)total * sizeof *r->kld);
        float *nan_top = nan_kld ? realloc(r->top, (size_t)total * sizeof *r->top) : NULL;
        r->kld = nan_kld ? nan_kld : r->kld;
        r->top = nan_top ? nan_top : r->top;
        if (!nan_kld || !nan_top) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of memory");
            goto done;
        }
        for (int64_t i = 0; i < total; i++)
            r->kld[i] = r->top[i] = NAN;
    }
    double nll = 0.0;
    for (int64_t i = 0; i < total; i++)
        nll += r->nll[i];
    r->ppl = exp(nll / (double)total);
    if (base) {
        float *scratch = malloc((size_t)total * sizeof *scratch);
        if (!scratch) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of memory");
            goto done;
        }
        kvcal_eval_compare_tokens(&r->cmp, r->nll, base->nll, r->kld, r->top, s->lengths,
                                  s->num_samples, scratch);
        free(scratch);
    }
done:
    free(each);
    free(ks);
    return st;
}

static void free_result(mode_result *r)
{
    free(r->kld_alone);
    free(r->change_alone);
    free(r->sums);
    free(r->nll);
    free(r->kld);
    free(r->top);
    memset(r, 0, sizeof *r);
}

/* --attribute: res[i]'s mode once per layer with only that layer's cache
 * simulated, against the baseline res[0]. */
static kvcal_status attribute(kvcal_exec_t *x, const kvcal_model_desc *d,
                              const kvcal_samples *s, const options *o,
                              const kvcal_scales_t *scales, mode_result *res, int i)
{
    const int L = d->num_layers;
    mode_result *r = &res[i];
    unsigned char *mask = calloc((size_t)L, 1);
    r->kld_alone = malloc((size_t)L * sizeof *r->kld_alone);
    r->change_alone = malloc((size_t)L * sizeof *r->change_alone);
    kvcal_status st = mask && r->kld_alone && r->change_alone
                          ? KVCAL_OK
                          : kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of memory");
    for (int l = 0; !st && l < L; l++) {
        mode_result one;
        if (!kvcal_model_layer_caches(d, l)) { /* linear attention: no cache */
            r->kld_alone[l] = r->change_alone[l] = 0.0;
            continue;
        }
        memset(&one, 0, sizeof one);
        memset(mask, 0, (size_t)L);
        mask[l] = 1;
        if (!(st = run_mode(x, d, s, o, scales, r->mode, &res[0], mask, &one))) {
            r->kld_alone[l] = one.cmp.kld_mean;
            r->change_alone[l] = expm1(one.cmp.ln_ratio);
        }
        free_result(&one);
    }
    free(mask);
    return st;
}

/* Each mode against the best one (the least perplexity but the
 * baseline's), paired on the same tokens: does the choice matter? */
/* The mode of the least finite perplexity but the baseline's, when there
 * are two such modes to choose from; else -1. */
static int best_mode(const mode_result *res, int nres)
{
    int best = -1;
    for (int i = 1; i < nres; i++)
        if (isfinite(res[i].ppl) && (best < 0 || res[i].ppl < res[best].ppl))
            best = i;
    return nres < 3 ? -1 : best;
}

static kvcal_status compare_with_best(mode_result *res, int nres, const kvcal_samples *s)
{
    const int best = best_mode(res, nres);
    for (int i = 0; i < nres; i++)
        res[i].best = -1;
    if (best < 0)
        return KVCAL_OK;
    const int64_t n = res[best].cmp.tokens;
    float *scratch = malloc((size_t)n * sizeof *scratch);
    if (!scratch)
        return kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of memory");
    for (int i = 1; i < nres; i++)
        if (i != best) {
            res[i].best = best;
            kvcal_eval_compare_tokens(&res[i].vs_best, res[i].nll, res[best].nll,
                                      res[i].kld, res[i].top, s->lengths, s->num_samples,
                                      scratch);
        }
    free(scratch);
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

/* The layer of a mode that costs the most: by the KL divergence its cache
 * costs alone (--attribute), else by its attention error; -1 when no
 * value is finite. */
static int costliest_layer(const mode_result *r, int layers, double *value)
{
    int best = -1;
    *value = NAN;
    for (int l = 0; l < layers; l++) {
        const double v = r->kld_alone ? r->kld_alone[l] : att_err(&r->sums[l]);
        if (isfinite(v) && (best < 0 || v > *value))
            best = l, *value = v;
    }
    return best;
}

/* Of K and V, the one with the lower SQNR in layer l ("K" on a tie). */
static const char *weaker_side(const layer_sums *s)
{
    return sqnr_db(s, 1) < sqnr_db(s, 0) ? "V" : "K";
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

/* n tokens as "812", "45k", "1.3M" (NAN: "-"). */
static const char *tokens_text(char *buf, size_t size, double n)
{
    if (!isfinite(n))
        snprintf(buf, size, "-");
    else if (n < 1e4)
        snprintf(buf, size, "%.0f", ceil(n));
    else if (n < 1e6)
        snprintf(buf, size, "%.0fk", ceil(n / 1e3));
    else if (n < 1e9)
        snprintf(buf, size, "%.1fM", n / 1e6);
    else
        snprintf(buf, size, "%.2gG", n / 1e9);
    return buf;
}

/* Percent change of perplexity from a change of its log. */
static double pct(double ln_ratio)
{
    return 100.0 * expm1(ln_ratio);
}

/* "+1.23% [+0.45, +2.01]", or "+1.23% [n/a]" when c has no interval. */
static const char *change_text(char *buf, size_t size, const kvcal_eval_compare *c)
{
    if (c->no_interval)
        snprintf(buf, size, "%+.2f%% [n/a]", pct(c->ln_ratio));
    else
        snprintf(buf, size, "%+.2f%% [%+.2f, %+.2f]", pct(c->ln_ratio), pct(c->ci_lo),
                 pct(c->ci_hi));
    return buf;
}

/* The verdict of c when it has no interval, into buf. */
static const char *no_interval_text(char *buf, size_t size, const kvcal_eval_compare *c)
{
    snprintf(buf, size,
             "no interval: %lld predicted token%s (2 needed; raise --num-samples or "
             "--seq-len)",
             (long long)c->tokens, c->tokens == 1 ? "" : "s");
    return buf;
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
    printf("\n%-19s %11s %25s %10s %10s %8s  %s\n", "mode", "perplexity",
           "change [95% CI]", "KLD mean", "KLD p99", "top-1", "verdict");
    for (int i = 0; i < nres; i++) {
        printf("%-19s %11.4f", mode_name(res[i].mode), res[i].ppl);
        if (!res[i].sums) {
            printf(" %25s %10s %10s %8s  %s\n", "-", "-", "-", "-",
                   "the reference of every change");
            continue;
        }
        const kvcal_eval_compare *c = &res[i].cmp;
        char ci[64], tk[32], why[128];
        printf(" %25s %10.3g %10.3g %7.2f%%  ", change_text(ci, sizeof ci, c),
               c->kld_mean, c->kld_p99, 100.0 * c->top1);
        if (c->no_interval)
            printf("%s\n", no_interval_text(why, sizeof why, c));
        else if (c->within_noise)
            printf("within noise: ~%s tokens would resolve it\n",
                   tokens_text(tk, sizeof tk, c->tokens_to_resolve));
        else
            printf("beyond noise (resolved at ~%s tokens)\n",
                   tokens_text(tk, sizeof tk, c->tokens_to_resolve));
    }
    for (int i = 0, said = 0; i < nres; i++) {
        const mode_result *r = &res[i];
        if (r->best < 0)
            continue;
        const kvcal_eval_compare *c = &r->vs_best;
        char ci[64], tk[32], why[128];
        if (!said++)
            printf("\nagainst the best mode, %s, on the same tokens:\n",
                   mode_name(res[r->best].mode));
        if (c->no_interval)
            printf("  %-19s %s  %s\n", mode_name(r->mode), change_text(ci, sizeof ci, c),
                   no_interval_text(why, sizeof why, c));
        else
            printf("  %-19s %s  %s ~%s tokens\n", mode_name(r->mode),
                   change_text(ci, sizeof ci, c),
                   c->within_noise ? "within noise: would resolve at"
                                   : "beyond noise: resolved at",
                   tokens_text(tk, sizeof tk, c->tokens_to_resolve));
    }
    printf("\n%-19s %9s  %11s %11s %9s %9s\n", "mode", "KV B/tok", "min K SQNR",
           "min V SQNR", "max clip", "max att");
    for (int i = 0; i < nres; i++) {
        if (!res[i].sums) {
            printf("%-19s %9.0f  %11s %11s %9s %9s\n", mode_name(res[i].mode),
                   res[i].kv_bytes, "-", "-", "-", "-");
            continue;
        }
        double ks, vs, clip, err;
        mode_summary(&res[i], d->num_layers, &ks, &vs, &clip, &err);
        char clip_text[16] = "-";
        if (res[i].clip_counted)
            snprintf(clip_text, sizeof clip_text, "%9.2e", clip);
        printf("%-19s %9.0f  %8.1f dB %8.1f dB %9s %9.2e\n", mode_name(res[i].mode),
               res[i].kv_bytes, ks, vs, clip_text, err);
    }
    const double base = res[0].ppl;
    const int rec = recommend(res, nres, o->tolerance);
    if (rec < 0)
        printf(
            "\nrecommendation: no mode is within %+.2f%% of the baseline's perplexity: "
            "keep a bf16 cache\n",
            o->tolerance);
    else
        printf("\nrecommendation: %s, the smallest cache within %+.2f%% of the "
               "baseline's perplexity (%.0f of %.0f bytes per token, %+.3f%%)\n",
               mode_name(res[rec].mode), o->tolerance, res[rec].kv_bytes, res[0].kv_bytes,
               100.0 * (res[rec].ppl - base) / base);
    printf(
        "\n(%lld predicted tokens in %d windows, paired with the baseline's: change =\n"
        "PPL / PPL_base - 1 with its 95%% interval over windows (Student's t); within\n"
        "noise when the interval holds 0, and the tokens at which it would not if the\n"
        "mean and spread stayed; KLD = KL(baseline || mode) of the next-token\n"
        "distributions, nats, mean and 99th percentile over tokens; top-1 = tokens\n"
        "where both put the same token first. KV B/tok = the cache's bytes per token\n"
        "over every layer's K and V: bf16 for the baseline, per (token, head) fp32\n"
        "scales and zero points of the dynamic modes included. SQNR = 10 log10(sum\n"
        "x^2 / sum (x - dequant(quant(x)))^2); clip = fraction of values saturated\n"
        "past e4m3's rounding to 448 (|x| / scale > 464), counted for the e4m3 modes;\n"
        "att = |attention(q, K', V') - attention(q, K, V)| / |attention(q, K, V)|,\n"
        "with q, K and V of the mode's own forward pass)\n",
        nres > 1 ? (long long)res[1].cmp.tokens : 0LL, nres > 1 ? res[1].cmp.windows : 0);
    for (int i = 0; i < nres; i++) {
        if (!res[i].sums)
            continue;
        const mode_result *r = &res[i];
        printf("\n%s per layer:\n%5s %11s %11s %10s %10s %10s", mode_name(r->mode),
               "layer", "K SQNR dB", "V SQNR dB", "K clip", "V clip", "att err");
        printf(r->kld_alone ? " %11s %13s\n" : "\n", "KLD alone", "change alone");
        for (int l = 0; l < d->num_layers; l++) {
            const layer_sums *sl = &r->sums[l];
            if (!kvcal_model_layer_caches(d, l)) {
                printf("%5d  linear attention: no K/V cache\n", l);
                continue;
            }
            printf("%5d %11.2f %11.2f %10.2e %10.2e %10.2e", l, sqnr_db(sl, 0),
                   sqnr_db(sl, 1), clip_frac(sl, 0), clip_frac(sl, 1), att_err(sl));
            if (r->kld_alone)
                printf(" %11.3g %+12.3f%%", r->kld_alone[l], 100.0 * r->change_alone[l]);
            printf("\n");
        }
        double v;
        const int w = costliest_layer(r, d->num_layers, &v);
        if (w >= 0)
            printf("costliest layer: %d (%s %.3g; the weaker side %s: SQNR K %.1f dB, V "
                   "%.1f dB; clipped K %.2e, V %.2e)\n",
                   w, r->kld_alone ? "KLD with its cache alone" : "attention error", v,
                   weaker_side(&r->sums[w]), sqnr_db(&r->sums[w], 0),
                   sqnr_db(&r->sums[w], 1), clip_frac(&r->sums[w], 0),
                   clip_frac(&r->sums[w], 1));
    }
}

/* A number, or null where it is not finite (an exact round trip has an
 * infinite SQNR). */
static cJSON *json_number(double v)
{
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

/* within_noise for JSON: null when there is no interval to hold 0. */
static cJSON *json_within_noise(const kvcal_eval_compare *c)
{
    return c->no_interval ? cJSON_CreateNull() : cJSON_CreateBool(c->within_noise);
}

/* Per window (sample with a token to predict), the sums of the per-token
 * NLL (and KLD against the baseline) and the token count: what pairs runs
 * over the same samples (other scales files) window by window, as the
 * intervals here pair modes. */
static void add_window_sums(cJSON *m, const mode_result *r, const kvcal_samples *s)
{
    cJSON *w = cJSON_AddObjectToObject(m, "windows");
    cJSON *tokens = cJSON_AddArrayToObject(w, "tokens");
    cJSON *nll = cJSON_AddArrayToObject(w, "nll_sum");
    cJSON *kld = r->kld ? cJSON_AddArrayToObject(w, "kld_sum") : NULL;
    int64_t i = 0;
    for (int k = 0; k < s->num_samples; k++) {
        const int64_t n = s->lengths[k] > 1 ? s->lengths[k] - 1 : 0;
        double a = 0.0, b = 0.0;
        for (int64_t j = 0; j < n; j++, i++)
            a += r->nll[i], b += r->kld ? r->kld[i] : 0.0;
        if (!n)
            continue;
        cJSON_AddItemToArray(tokens, cJSON_CreateNumber((double)n));
        cJSON_AddItemToArray(nll, json_number(a));
        if (kld)
            cJSON_AddItemToArray(kld, json_number(b));
    }
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
    if (nres > 1) {
        cJSON_AddNumberToObject(root, "predicted_tokens", (double)res[1].cmp.tokens);
        cJSON_AddNumberToObject(root, "windows", res[1].cmp.windows);
    }
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
        add_window_sums(m, &res[i], s);
        if (res[i].sums) {
            const kvcal_eval_compare *c = &res[i].cmp;
            cJSON_AddItemToObject(m, "ln_ppl_ratio", json_number(c->ln_ratio));
            cJSON_AddItemToObject(m, "ln_ppl_ratio_se", json_number(c->ln_ratio_se));
            cJSON_AddItemToObject(m, "ln_ppl_ratio_se_window",
                                  json_number(c->ln_ratio_se_window));
            cJSON *ci = cJSON_AddArrayToObject(m, "perplexity_change_rel_ci95");
            cJSON_AddItemToArray(ci, json_number(expm1(c->ci_lo)));
            cJSON_AddItemToArray(ci, json_number(expm1(c->ci_hi)));
            cJSON_AddStringToObject(m, "ci_over",
                                    c->ci_from_windows ? "windows" : "tokens");
            cJSON_AddItemToObject(m, "within_noise", json_within_noise(c));
            cJSON_AddItemToObject(m, "tokens_to_resolve",
                                  json_number(c->tokens_to_resolve));
            cJSON_AddItemToObject(m, "kld_mean", json_number(c->kld_mean));
            cJSON_AddItemToObject(m, "kld_mean_se", json_number(c->kld_se));
            cJSON_AddItemToObject(m, "kld_median", json_number(c->kld_median));
            cJSON_AddItemToObject(m, "kld_p99", json_number(c->kld_p99));
            cJSON_AddItemToObject(m, "kld_max", json_number(c->kld_max));
            cJSON_AddItemToObject(m, "top1_agreement", json_number(c->top1));
            cJSON_AddItemToObject(m, "top1_agreement_se", json_number(c->top1_se));
            /* the best mode itself: a change of 0, so that every device
             * writes the same shape whichever mode is best there */
            const int best = res[i].best >= 0 ? res[i].best : best_mode(res, nres);
            if (best >= 0) {
                const kvcal_eval_compare zero = {.within_noise = 1,
                                                 .tokens_to_resolve = NAN};
                const kvcal_eval_compare *b = res[i].best >= 0 ? &res[i].vs_best : &zero;
                cJSON *vb = cJSON_AddObjectToObject(m, "vs_best");
                cJSON_AddStringToObject(vb, "mode", mode_name(res[best].mode));
                cJSON_AddItemToObject(vb, "ln_ppl_ratio", json_number(b->ln_ratio));
                cJSON *bci = cJSON_AddArrayToObject(vb, "perplexity_change_rel_ci95");
                cJSON_AddItemToArray(bci, json_number(expm1(b->ci_lo)));
                cJSON_AddItemToArray(bci, json_number(expm1(b->ci_hi)));
                cJSON_AddItemToObject(vb, "within_noise", json_within_noise(b));
                cJSON_AddItemToObject(vb, "tokens_to_resolve",
                                      json_number(b->tokens_to_resolve));
            }
            double v;
            const int w = costliest_layer(&res[i], d->num_layers, &v);
            if (w >= 0) {
                cJSON *cl = cJSON_AddObjectToObject(m, "costliest_layer");
                cJSON_AddNumberToObject(cl, "layer", w);
                cJSON_AddStringToObject(
                    cl, "by", res[i].kld_alone ? "kld_alone" : "attention_rel_error");
                cJSON_AddItemToObject(cl, "value", json_number(v));
                cJSON_AddStringToObject(cl, "weaker", weaker_side(&res[i].sums[w]));
            }
            cJSON *layers = cJSON_AddArrayToObject(m, "layers");
            for (int l = 0; l < d->num_layers; l++) {
                const layer_sums *sl = &res[i].sums[l];
                if (!kvcal_model_layer_caches(d, l)) /* linear attention: no cache */
                    continue;
                cJSON *o_l = cJSON_CreateObject();
                cJSON_AddNumberToObject(o_l, "layer", l);
                cJSON_AddItemToObject(o_l, "k_sqnr_db", json_number(sqnr_db(sl, 0)));
                cJSON_AddItemToObject(o_l, "v_sqnr_db", json_number(sqnr_db(sl, 1)));
                cJSON_AddNumberToObject(o_l, "k_clipped", clip_frac(sl, 0));
                cJSON_AddNumberToObject(o_l, "v_clipped", clip_frac(sl, 1));
                cJSON_AddItemToObject(o_l, "attention_rel_error",
                                      json_number(att_err(sl)));
                if (res[i].kld_alone) {
                    cJSON_AddItemToObject(o_l, "kld_alone",
                                          json_number(res[i].kld_alone[l]));
                    cJSON_AddItemToObject(o_l, "perplexity_change_rel_alone",
                                          json_number(res[i].change_alone[l]));
                }
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

/* What this rank's run is, for the ranks' first meeting: they must agree. */
static uint64_t run_hash(const kvcal_samples *s, int batch, const options *o,
                         const kvcal_scales_t *scales)
{
    const int shape[] = {s->num_samples, s->seq_len, batch};
    uint64_t h = kvcal_cmd_ranks_hash(KVCAL_CMD_RANKS_HASH0, shape, sizeof shape);
    h = kvcal_cmd_ranks_hash(h, o->modes, sizeof o->modes);
    if (scales) {
        const size_t n =
            (size_t)scales->num_layers * scales->num_kv_heads * sizeof(float);
        h = kvcal_cmd_ranks_hash(h, scales->k_head, n);
        h = kvcal_cmd_ranks_hash(h, scales->v_head, n);
        if (scales->k_offset)
            h = kvcal_cmd_ranks_hash(h, scales->k_offset, 2 * n);
    }
    h = kvcal_cmd_ranks_hash(h, s->ids,
                             (size_t)s->num_samples * s->seq_len * sizeof *s->ids);
    return kvcal_cmd_ranks_hash(h, s->lengths,
                                (size_t)s->num_samples * sizeof *s->lengths);
}

/* 1 (why says so) when cache mode m cannot run on the model d with scales
 * (may be NULL): an MLA model's modes that no engine runs (and fp8-ds-mla on
 * any other model), a format whose rows head_dim does not fill, zero points
 * the set does not hold. */
static int mode_left_out(int m, const kvcal_model_desc *d, const kvcal_scales_t *scales,
                         char *why, size_t n)
{
    const kvcal_kv_sim_cache_mode *c = cache_mode(m);
    /* MLA: fp8-ds-mla is its cache alone; its other caches are e4m3; a query
     * in FP8 is the absorbed one */
    if (c && c->mode == KVCAL_KV_SIM_DS_MLA && !d->mla)
        snprintf(why, n, "it is the cache of MLA models (DeepSeek-V2/V3, Kimi K2)");
    else if (c && c->fp8_query && d->mla)
        snprintf(why, n,
                 "an MLA model's query in FP8 is vLLM's absorbed query, which kvcal does "
                 "not compute");
    else if (c && d->mla && c->format != KVCAL_KV_FORMAT_FP8_E4M3)
        snprintf(why, n,
                 "no MLA backend of vLLM 0.32.0 caches this format (they cache bf16, fp8 "
                 "e4m3 or fp8_ds_mla)");
    else if (c && !kvcal_kv_format_row_bytes(c->format, d->head_dim))
        snprintf(why, n, "head_dim %d is not a multiple of 16, as the format needs",
                 d->head_dim);
    else if (c && c->mode == KVCAL_KV_SIM_STATIC &&
             c->format == KVCAL_KV_FORMAT_INT8_ASYM && scales &&
             scales->format != KVCAL_KV_FORMAT_INT8_ASYM)
        snprintf(why, n,
                 "the scales hold no offsets (zero points): calibrate --kv-dtype "
                 "int8_asym writes them");
    else
        return 0;
    return 1;
}

/* The directory holding the model's config.json (NULL for a llama2.c file). */
static const char *model_dir_of(const options *o, const kvcal_model_desc *d)
{
    struct stat sb;
    if (!strcmp(d->source, "llama2c") || stat(o->run.model, &sb) != 0 ||
        !S_ISDIR(sb.st_mode))
        return NULL;
    return o->run.model;
}

/* 1 when path holds scales in the legacy JSON format (read at tp), which
 * without a model's config.json holds one scale per layer and rank. */
static int is_legacy_file(const char *path, int tp)
{
    kvcal_report_t *rep = NULL;
    const int legacy = !kvcal_scales_validate_file(path, NULL, tp, &rep) &&
                       kvcal_report_format(rep) == KVCAL_FORMAT_LEGACY_JSON;
    kvcal_report_destroy(rep);
    return legacy;
}

KVCAL_COMMAND(eval, "eval", "perplexity and K/V error under FP8 KV cache modes");

int kvcal_cmd_eval(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc == 1) {
        usage(stdout);
        return KVCAL_EXIT_OK;
    }
    if (rc || (o.report && kvcal_cmd_ranks_env_rank() == 0 && check_report(&o)))
        return KVCAL_EXIT_USAGE;
    kvcal_cmd_ranks ranks = {.cmd = "eval", .size = 1};
    o.ranks = &ranks;
    if (kvcal_cmd_ranks_start("eval", o.run.cuda, &ranks))
        return KVCAL_EXIT_USAGE;
    o.run.quiet |= ranks.rank != 0;
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
    if (!o.run.quiet)
        kvcal_cmd_note_config_engines_ignore("eval", d);
    if (!o.run.seq_len)
        o.run.seq_len = d->max_seq_len < 256 ? d->max_seq_len : 256;
    if (o.run.seq_len > d->max_seq_len) {
        st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                        "--seq-len %d is longer than the model's context of %d tokens",
                        o.run.seq_len, d->max_seq_len);
        goto fail;
    }
    if ((st = kvcal_cmd_check_sparse_seq_len(o.run.seq_len, d)))
        goto fail;
    if (o.scales) {
        const char *dir = model_dir_of(&o, d);
        if ((st = kvcal_scales_load(o.scales, dir, o.run.tp, &scales)) ||
            (!dir && kvcal_scales_num_kv_heads(scales) != d->num_kv_heads &&
             is_legacy_file(o.scales, o.run.tp) &&
             (st = kvcal_scales_spread_legacy_ranks(o.scales, d->num_layers,
                                                    d->num_kv_heads, &scales))))
            goto fail;
        if (kvcal_scales_num_layers(scales) != d->num_layers ||
            kvcal_scales_num_kv_heads(scales) != d->num_kv_heads) {
            st = kvcal_fail(KVCAL_ERR_MISMATCH,
                            "%s: scales for %d layers x %d kv heads, but %s has %d x %d: "
                            "they are another model's; calibrate this one (kvcal "
                            "calibrate --model %s)",
                            o.scales, kvcal_scales_num_layers(scales),
                            kvcal_scales_num_kv_heads(scales), o.run.model, d->num_layers,
                            d->num_kv_heads, o.run.model);
            goto fail;
        }
    }
    /* the modes this model or scale set cannot run: left out of all, refused
     * when named */
    for (int m = 0; m < NUM_MODES; m++) {
        char why[256];
        if (!o.modes[m] || !mode_left_out(m, d, scales, why, sizeof why))
            continue;
        if (!o.modes_all) {
            st = kvcal_fail(KVCAL_ERR_INVALID_ARG, "--modes %s: %s", mode_name(m), why);
            goto fail;
        }
        o.modes[m] = 0;
        if (!o.run.quiet)
            fprintf(stderr, "kvcal eval: note: %s left out: %s\n", mode_name(m), why);
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
    if ((st = kvcal_cmd_ranks_layout(&ranks, samples->num_samples, batch, d->num_layers,
                                     d->num_kv_heads)) ||
        (st = kvcal_cmd_ranks_meet(&ranks, KVCAL_OK,
                                   run_hash(samples, batch, &o, scales))) ||
        (st = kvcal_cmd_exec_options(&o.run, batch, samples->seq_len, &xo)) ||
        (st = kvcal_exec_create(model, &xo, &x)))
        goto fail;
    /* the baseline first: every change is measured against it */
    o.modes[MODE_BASELINE] = 1;
    for (int m = 0; m < NUM_MODES; m++) {
        if (!o.modes[m])
            continue;
        if ((st = run_mode(x, d, samples, &o, scales, m, nres ? &res[0] : NULL, NULL,
                           &res[nres])) ||
            (nres && o.attribute &&
             (st = attribute(x, d, samples, &o, scales, res, nres))))
            goto fail;
        nres++;
    }
    kvcal_cmd_ranks_close(&ranks);
    if (ranks.rank != 0) {
        rc = KVCAL_EXIT_OK; /* rank 0 reports */
        goto done;
    }
    if ((st = compare_with_best(res, nres, samples)))
        goto fail;
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
    rc = kvcal_cmd_ranks_fail(&ranks, st);
done:
    kvcal_cmd_ranks_end(&ranks);
    cJSON_Delete(json);
    for (int i = 0; i < NUM_MODES; i++)
        free_result(&res[i]);
    kvcal_exec_destroy(x);
    kvcal_scales_destroy(scales);
    kvcal_samples_destroy(samples);
    kvcal_model_close(model);
    return rc;
}
