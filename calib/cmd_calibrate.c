/* calib/cmd_calibrate.c: `kvcal calibrate`: runs a model over calibration
 * samples, observes every K and V the engine would cache, and writes the
 * scales in every format engines read. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calib/cmd_common.h"
#include "calib/command.h"
#include "calib/data_path.h"
#include "calib/model.h"
#include "calib/runner.h"
#include "calib/runner_cuda.h"
#include "core/scales.h"
#include "core/status.h"
#include "io/dataset.h"
#include "io/json_file.h"
#include "io/stats_hdf5.h"
#include "kvcal.h"
#include "observers/observer.h"
#include "observers/stats.h"

#define DEFAULT_DATASET "datasets/default_calibration.txt"
/* the default, recorded as is in provenance; read from kvcal's data folder */
static const char default_dataset[] = DEFAULT_DATASET;

typedef struct {
    kvcal_cmd_run_options run;
    const char *out, *stats_path, *format;
    int output_named; /* --out, --format or --stats given */
    int time_only;    /* --time-only */
    kvcal_observer_config observer;
    kvcal_granularity granularity;
} options;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: kvcal calibrate --model DIR|FILE [options]\n\n"
        "Runs the model over calibration samples, observes every K (after RoPE and\n"
        "k_norm) and V (after v_proj) the engine would cache, and writes FP8 e4m3\n"
        "scales (scale = max(absmax / 448, 1/(448*512))).\n\n"
        "  --model DIR|FILE     Hugging Face checkpoint directory (config.json +\n"
        "                       safetensors) or llama2.c .bin file\n"
        "  --dataset FILE       text, JSONL ({\"text\": ...} or {\"input_ids\": [...]})\n"
        "                       or HDF5 token set (default: " DEFAULT_DATASET ")\n"
        "  --tokenizer PATH     tokenizer.json / tokenizer.model / llama2.c "
        "tokenizer.bin\n"
        "                       (default: found next to the model)\n"
        "  --text-field NAME    JSONL field holding the text (default \"text\")\n"
        "  --num-samples N      samples (default 32)\n"
        "  --seq-len L          tokens per sample (default min(256, model context))\n"
        "  --batch B            samples per forward pass (default 4)\n"
        "  --observer KIND      minmax | ema[:DECAY] | percentile:P | mse (default "
        "minmax)\n"
        "  --granularity G      tensor | head (default tensor)\n"
        "  --tp N               tensor-parallel size of the legacy file (default 1)\n"
        "  --device D           cpu | cuda (default cpu)\n"
        "  --out PATH           output file, or directory for checkpoint / all\n"
        "                       (default kvcal_scales.json, kv_cache_scales.json,\n"
        "                       kvcal-checkpoint or kvcal-out)\n"
        "  --format F           legacy | kvcal | checkpoint | all (default kvcal); all\n"
        "                       writes kv_cache_scales.json, kvcal_scales.json and\n"
        "                       checkpoint/ under --out\n"
        "  --stats FILE.h5      also write the HDF5 statistics\n"
        "  --seed S             sample selection seed (default 0)\n"
        "  --quiet              no progress line\n"
        "  --json               print the summary as JSON on stdout\n"
        "  --time-only          run the samples without observing K/V and write\n"
        "                       nothing: the rate without the observers (what they\n"
        "                       cost is the difference to a normal run)\n\n"
        "The same inputs and seed give byte-identical outputs.\n"
        "exit codes: 0 ok, 1 invalid input, 2 usage or I/O error\n");
}

static int fail(kvcal_status st)
{
    fprintf(stderr, "kvcal calibrate: %s\n", kvcal_last_error());
    return kvcal_cmd_run_exit_code(st);
}

enum { O_OBSERVER = KVCAL_OPT_RUN_END, O_GRAN, O_OUT, O_FORMAT, O_STATS, O_TIME_ONLY };

/* calibrate's own options into the options at ctx (kvcal_cmd_own_option). */
static int own_option(int c, const char *arg, void *ctx)
{
    options *o = ctx;
    switch (c) {
    case O_OUT:
        o->output_named = 1;
        return kvcal_cmd_parse_path("calibrate", "--out", arg, &o->out) ? -1 : 1;
    case O_FORMAT:
        o->output_named = 1;
        o->format = arg;
        return 1;
    case O_STATS:
        o->output_named = 1;
        return kvcal_cmd_parse_path("calibrate", "--stats", arg, &o->stats_path) ? -1 : 1;
    case O_TIME_ONLY:
        o->time_only = 1;
        return 1;
    case O_OBSERVER:
        if (kvcal_observer_parse(arg, &o->observer)) {
            fprintf(stderr, "kvcal calibrate: --observer: %s\n", kvcal_last_error());
            return -1;
        }
        return 1;
    case O_GRAN:
        if (!strcmp(arg, "tensor"))
            o->granularity = KVCAL_GRANULARITY_TENSOR;
        else if (!strcmp(arg, "head"))
            o->granularity = KVCAL_GRANULARITY_HEAD;
        else {
            fprintf(stderr,
                    "kvcal calibrate: --granularity '%s': expected tensor or head\n",
                    arg);
            return -1;
        }
        return 1;
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
        {"observer", required_argument, 0, O_OBSERVER},
        {"granularity", required_argument, 0, O_GRAN},
        {"out", required_argument, 0, O_OUT},
        {"format", required_argument, 0, O_FORMAT},
        {"stats", required_argument, 0, O_STATS},
        {"time-only", no_argument, 0, O_TIME_ONLY},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    o->run.dataset = default_dataset;
    o->run.num_samples = 32;
    o->run.batch = 4;
    o->run.tp = 1;
    o->format = "kvcal";
    o->observer = kvcal_observer_default();
    o->granularity = KVCAL_GRANULARITY_TENSOR;
    int rc = kvcal_cmd_parse_run_argv("calibrate", argc, argv, longopts, 1, &o->run,
                                      own_option, o);
    if (rc)
        return rc;
    if (!o->run.model) {
        fprintf(stderr, "kvcal calibrate: --model is required (see --help)\n");
        return -1;
    }
    if (o->time_only && o->output_named) {
        fprintf(stderr, "kvcal calibrate: --time-only writes nothing; leave out --out, "
                        "--format and --stats\n");
        return -1;
    }
    static const char *const formats[] = {"legacy", "kvcal", "checkpoint", "all"};
    static const char *const default_out[] = {"kv_cache_scales.json", "kvcal_scales.json",
                                              "kvcal-checkpoint", "kvcal-out"};
    int f = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(o->format, formats[i]))
            f = i;
    if (f < 0) {
        fprintf(stderr,
                "kvcal calibrate: --format '%s': expected legacy, kvcal, checkpoint or "
                "all\n",
                o->format);
        return -1;
    }
    if (!o->out)
        o->out = default_out[f];
    return 0;
}

// --- observing ----------------------------------------------------------------

typedef struct {
    kvcal_stats_t *stats;
} observe_ctx;

static kvcal_status observe_kv(void *p, const kvcal_runner_kv *kv)
{
    observe_ctx *c = p;
    int64_t row = (int64_t)kv->num_kv_heads * kv->head_dim;
    for (int b = 0; b < kv->batch; b++)
        for (int which = KVCAL_K; which <= KVCAL_V; which++) {
            const float *x = (which == KVCAL_K ? kv->k : kv->v) + kv->start[b] * row;
            kvcal_kv_block blk =
                kvcal_kv_block_dense(x, 1, kv->lengths[b], kv->num_kv_heads, kv->head_dim,
                                     NULL, &kv->sample_ids[b]);
            kvcal_status st = kvcal_stats_observe_ref(c->stats, kv->layer, which, &blk);
            if (st)
                return st;
        }
    return KVCAL_OK;
}

static void warn_stderr(void *ctx, const char *message)
{
    (void)ctx;
    fprintf(stderr, "kvcal calibrate: warning: %s\n", message);
}

static void progress(int done, int total, long long tokens, double elapsed)
{
    double rate = elapsed > 0 ? tokens / elapsed : 0;
    double eta = done > 0 ? elapsed * (total - done) / done : 0;
    fprintf(stderr,
            "\rcalibrate: %d/%d samples, %lld tokens, %.0f tokens/s, ETA %.0f s   ", done,
            total, tokens, rate, eta);
    fflush(stderr);
}

/* Runs every sample through the model, folding K/V into stats. On the CUDA
 * device K/V are observed there and folded into stats batch by batch
 * (batch_absmax, tokens) and at the end (absmax, histograms). With stats
 * NULL nothing is observed (--time-only). */
static kvcal_status run_samples(kvcal_model_t *model, const kvcal_samples *s,
                                const options *o, kvcal_stats_t *stats, double *seconds)
{
    kvcal_runner_t *r = NULL;
    kvcal_cuda_runner_t *cr = NULL;
    int64_t *ids = NULL; /* (batch) sample ids */
    kvcal_status st =
        o->run.cuda ? kvcal_cuda_runner_create(model, o->run.batch, s->seq_len, &cr)
                    : kvcal_runner_create(model, (int64_t)o->run.batch * s->seq_len, &r);
    if (st)
        return st;
    int show = !o->run.quiet && isatty(STDERR_FILENO);
    observe_ctx ctx = {stats};
    kvcal_runner_outputs out = {stats ? observe_kv : NULL, &ctx, NULL, NULL, NULL};
    long long tokens = 0;
    double t0 = kvcal_cmd_now_s();
    ids = malloc(sizeof(int64_t) * (size_t)o->run.batch);
    if (!ids) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int b0 = 0; b0 < s->num_samples && !st; b0 += o->run.batch) {
        int n = s->num_samples - b0 < o->run.batch ? s->num_samples - b0 : o->run.batch;
        for (int i = 0; i < n; i++) {
            ids[i] = b0 + i;
            tokens += s->lengths[b0 + i];
        }
        const int32_t *batch = s->ids + (int64_t)b0 * s->seq_len; // (n, seq_len)
        if (stats)
            kvcal_stats_begin_batch(stats);
        st = o->run.cuda ? kvcal_cuda_runner_forward(cr, batch, s->lengths + b0, n,
                                                     s->seq_len, ids, stats)
                         : kvcal_runner_forward(r, batch, s->lengths + b0, n, s->seq_len,
                                                ids, &out);
        if (!st && stats)
            st = kvcal_stats_end_batch(stats, o->observer.ema_decay);
        if (show)
            progress(b0 + n, s->num_samples, tokens, kvcal_cmd_now_s() - t0);
    }
    if (!st && o->run.cuda && stats)
        st = kvcal_cuda_runner_collect(cr, stats);
    if (show)
        fprintf(stderr, "\n");
    *seconds = kvcal_cmd_now_s() - t0;
done:
    free(ids);
    kvcal_cuda_runner_destroy(cr);
    kvcal_runner_destroy(r);
    return st;
}

// --- outputs --------------------------------------------------------------------

/* A config.json describing a llama2.c model as the equivalent
 * LlamaForCausalLM, for the checkpoint format (which merges its scheme into
 * the model's config). Written into a fresh directory under `parent`. */
static kvcal_status write_llama2c_config(const kvcal_model_desc *d, const char *parent,
                                         char *dir, size_t n)
{
    if (snprintf(dir, n, "%s/.kvcal-model-XXXXXX", parent) >= (int)n)
        return kvcal_fail(KVCAL_ERR_IO, "%s: path too long", parent);
    if (!mkdtemp(dir))
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot create a temporary directory: %s",
                          dir, strerror(errno));
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "llama");
    cJSON_AddNumberToObject(c, "hidden_size", d->hidden_size);
    cJSON_AddNumberToObject(c, "intermediate_size", d->intermediate_size);
    cJSON_AddNumberToObject(c, "num_hidden_layers", d->num_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", d->num_heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", d->num_kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", d->head_dim);
    cJSON_AddNumberToObject(c, "vocab_size", d->vocab_size);
    cJSON_AddNumberToObject(c, "max_position_embeddings", d->max_seq_len);
    cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-5); /* run.c's constant */
    cJSON_AddNumberToObject(c, "rope_theta", 10000.0);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", d->tied_embeddings);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    char path[4200];
    int len = snprintf(path, sizeof path, "%s/config.json", dir);
    kvcal_status st = len < 0 || (size_t)len >= sizeof path
                          ? kvcal_fail(KVCAL_ERR_IO, "%s: path too long", dir)
                          : kvcal_json_write(path, c);
    cJSON_Delete(c);
    return st;
}

static kvcal_status make_dir(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot create the directory: %s", path,
                          strerror(errno));
    return KVCAL_OK;
}

/* Writes the requested formats; appends each written path to `written`. */
static kvcal_status write_outputs(const kvcal_scales_t *scales, kvcal_model_t *model,
                                  const options *o, cJSON *written)
{
    const kvcal_model_desc *d = kvcal_model_describe(model);
    int all = !strcmp(o->format, "all");
    char path[4200], model_dir[4200] = "", tmp_dir[4200] = "";
    kvcal_status st = KVCAL_OK;
    if (all && (st = make_dir(o->out)))
        return st;
    if (all || !strcmp(o->format, "legacy")) {
        snprintf(path, sizeof path, all ? "%s/kv_cache_scales.json" : "%s", o->out);
        if ((st = kvcal_scales_write(scales, KVCAL_FORMAT_LEGACY_JSON, path, NULL,
                                     o->run.tp)))
            return st;
        cJSON_AddItemToArray(written, cJSON_CreateString(path));
    }
    if (all || !strcmp(o->format, "kvcal")) {
        snprintf(path, sizeof path, all ? "%s/kvcal_scales.json" : "%s", o->out);
        if ((st = kvcal_scales_write(scales, KVCAL_FORMAT_KVCAL_JSON, path, NULL,
                                     o->run.tp)))
            return st;
        cJSON_AddItemToArray(written, cJSON_CreateString(path));
    }
    if (all || !strcmp(o->format, "checkpoint")) {
        snprintf(path, sizeof path, all ? "%s/checkpoint" : "%s", o->out);
        if (!strcmp(d->source, "llama2c")) {
            char parent[4200];
            snprintf(parent, sizeof parent, "%s", all ? o->out : path);
            if (!all) {
                char *slash = strrchr(parent, '/');
                if (slash)
                    *slash = '\0';
                else
                    snprintf(parent, sizeof parent, ".");
            }
            if ((st = write_llama2c_config(d, parent, tmp_dir, sizeof tmp_dir)))
                goto done;
            snprintf(model_dir, sizeof model_dir, "%s", tmp_dir);
        } else {
            struct stat sb;
            snprintf(model_dir, sizeof model_dir, "%s", o->run.model);
            if (stat(o->run.model, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
                char *slash = strrchr(model_dir, '/');
                if (slash)
                    *slash = '\0';
                else
                    snprintf(model_dir, sizeof model_dir, ".");
            }
        }
        if ((st = kvcal_scales_write(scales, KVCAL_FORMAT_CHECKPOINT, path, model_dir,
                                     o->run.tp)))
            goto done;
        cJSON_AddItemToArray(written, cJSON_CreateString(path));
    }
done:
    if (tmp_dir[0]) {
        char cfg[4300];
        snprintf(cfg, sizeof cfg, "%s/config.json", tmp_dir);
        remove(cfg);
        rmdir(tmp_dir);
    }
    return st;
}

// --- report -------------------------------------------------------------------

static void print_table(const kvcal_scales_t *s, const kvcal_model_desc *d,
                        long long tokens, int samples, double seconds, cJSON *written)
{
    printf("calibrated %s (%s, %d layers, %d kv heads x %d) on %d samples, %lld tokens, "
           "%.1f s, %.0f tokens/s\n",
           d->architecture, d->source, d->num_layers, d->num_kv_heads, d->head_dim,
           samples, tokens, seconds, seconds > 0 ? tokens / seconds : 0.0);
    printf("%5s  %10s  %10s  %10s  %10s\n", "layer", "K absmax", "K scale", "V absmax",
           "V scale");
    for (int l = 0; l < s->num_layers; l++) {
        float ka = 0, va = 0, ks, vs;
        for (int h = 0; h < s->num_kv_heads; h++) {
            int i = kvcal_scales_index(s, l, h);
            ka = s->k_absmax[i] > ka ? s->k_absmax[i] : ka;
            va = s->v_absmax[i] > va ? s->v_absmax[i] : va;
        }
        kvcal_scales_get_tensor(s, l, &ks, &vs);
        printf("%5d  %10.4g  %10.4g  %10.4g  %10.4g\n", l, ka, ks, va, vs);
    }
    cJSON *p;
    cJSON_ArrayForEach(p, written) printf("wrote %s\n", p->valuestring);
}

static void print_json(const kvcal_scales_t *s, const kvcal_model_desc *d,
                       long long tokens, int samples, double seconds, cJSON *written)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "architecture", d->architecture);
    cJSON_AddNumberToObject(root, "num_samples", samples);
    cJSON_AddNumberToObject(root, "num_tokens", (double)tokens);
    cJSON_AddNumberToObject(root, "seconds", seconds);
    cJSON_AddNumberToObject(root, "tokens_per_second",
                            seconds > 0 ? tokens / seconds : 0.0);
    cJSON_AddItemToObject(root, "outputs", cJSON_Duplicate(written, 1));
    cJSON *layers = cJSON_AddArrayToObject(root, "layers");
    for (int l = 0; l < s->num_layers; l++) {
        cJSON *o = cJSON_CreateObject();
        cJSON *ka = cJSON_AddArrayToObject(o, "k_absmax"),
              *va = cJSON_AddArrayToObject(o, "v_absmax");
        cJSON *ks = cJSON_AddArrayToObject(o, "k_scale"),
              *vs = cJSON_AddArrayToObject(o, "v_scale");
        for (int h = 0; h < s->num_kv_heads; h++) {
            int i = kvcal_scales_index(s, l, h);
            cJSON_AddItemToArray(ka, cJSON_CreateNumber(s->k_absmax[i]));
            cJSON_AddItemToArray(va, cJSON_CreateNumber(s->v_absmax[i]));
            cJSON_AddItemToArray(ks, cJSON_CreateNumber(s->k_head[i]));
            cJSON_AddItemToArray(vs, cJSON_CreateNumber(s->v_head[i]));
        }
        cJSON_AddItemToArray(layers, o);
    }
    char *text = cJSON_Print(root);
    if (text)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(root);
}

/* --time-only's report: the rate alone, nothing observed or written. */
static void print_time_only(const kvcal_model_desc *d, const options *o, long long tokens,
                            int samples, double seconds)
{
    const double rate = seconds > 0 ? tokens / seconds : 0.0;
    if (!o->run.json) {
        printf(
            "ran %s (%s, %d layers) on %d samples, %lld tokens, %.1f s, %.0f tokens/s, "
            "K/V not observed (--time-only): nothing written\n",
            d->architecture, d->source, d->num_layers, samples, tokens, seconds, rate);
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "architecture", d->architecture);
    cJSON_AddNumberToObject(root, "num_samples", samples);
    cJSON_AddNumberToObject(root, "num_tokens", (double)tokens);
    cJSON_AddNumberToObject(root, "seconds", seconds);
    cJSON_AddNumberToObject(root, "tokens_per_second", rate);
    cJSON_AddBoolToObject(root, "observed", 0);
    char *text = cJSON_Print(root);
    if (text)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(root);
}

// --- command ------------------------------------------------------------------

KVCAL_COMMAND(calibrate, "calibrate", "run a model over samples, write K/V cache scales")
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc == 1) {
        usage(stdout);
        return KVCAL_EXIT_OK;
    }
    if (rc)
        return KVCAL_EXIT_USAGE;
    kvcal_model_t *model = NULL;
    kvcal_samples *samples = NULL;
    kvcal_stats_t *stats = NULL;
    kvcal_scales_t *scales = NULL;
    cJSON *written = cJSON_CreateArray();
    kvcal_status st;
    double seconds = 0;
    if ((st = kvcal_model_open(o.run.model, &model)))
        goto fail;
    const kvcal_model_desc *d = kvcal_model_describe(model);
    if (!o.run.seq_len)
        o.run.seq_len = d->max_seq_len < 256 ? d->max_seq_len : 256;
    if (o.run.seq_len > d->max_seq_len) {
        st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                        "--seq-len %d is longer than the model's context of %d tokens "
                        "(max_position_embeddings of %s)",
                        o.run.seq_len, d->max_seq_len, o.run.model);
        goto fail;
    }
    int H = d->num_kv_heads, tp = o.run.tp;
    if ((!strcmp(o.format, "legacy") || !strcmp(o.format, "all")) &&
        !((H >= tp && H % tp == 0) || (H < tp && tp % H == 0))) {
        st = kvcal_fail(KVCAL_ERR_MISMATCH,
                        "--tp %d: %s has %d kv heads, which cannot be split over %d "
                        "ranks; pass the tp size the model is served with",
                        tp, o.run.model, H, tp);
        goto fail;
    }
    kvcal_dataset_options dopt = {o.run.num_samples, o.run.seq_len, (uint64_t)o.run.seed,
                                  1, o.run.text_field};
    char dataset_path[4096];
    if (o.run.dataset == default_dataset) {
        if ((st = kvcal_data_file_find(DEFAULT_DATASET, dataset_path,
                                       sizeof dataset_path)))
            goto fail;
    } else {
        snprintf(dataset_path, sizeof dataset_path, "%s", o.run.dataset);
    }
    if ((st = kvcal_cmd_load_samples("calibrate", o.run.model, d->vocab_size,
                                     o.run.tokenizer, dataset_path, &dopt, &samples)))
        goto fail;
    if (o.time_only) {
        if ((st = run_samples(model, samples, &o, NULL, &seconds)))
            goto fail;
        print_time_only(d, &o, samples->num_tokens, samples->num_samples, seconds);
        rc = KVCAL_EXIT_OK;
        goto done;
    }
    if ((st = kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, &stats)) ||
        (st = run_samples(model, samples, &o, stats, &seconds)))
        goto fail;
    if ((st = kvcal_scales_create(d->num_layers, d->num_kv_heads, &scales)) ||
        (st = kvcal_stats_to_scales(stats, &o.observer, o.granularity, scales,
                                    warn_stderr, NULL)))
        goto fail;
    kvcal_model_identity_get(model, &scales->model);
    kvcal_provenance *prov = &scales->provenance;
    snprintf(prov->dataset, sizeof prov->dataset, "%s", o.run.dataset);
    prov->num_samples = samples->num_samples;
    prov->num_tokens = samples->num_tokens;
    prov->seed = o.run.seed;
    snprintf(prov->tool_version, sizeof prov->tool_version, "kvcal %s", kvcal_version());
    if ((st = write_outputs(scales, model, &o, written)))
        goto fail;
    if (o.stats_path) {
        if ((st = kvcal_stats_write_hdf5(o.stats_path, stats, &scales->model, prov)))
            goto fail;
        cJSON_AddItemToArray(written, cJSON_CreateString(o.stats_path));
    }
    if (o.run.json)
        print_json(scales, d, samples->num_tokens, samples->num_samples, seconds,
                   written);
    else
        print_table(scales, d, samples->num_tokens, samples->num_samples, seconds,
                    written);
    rc = KVCAL_EXIT_OK;
    goto done;
fail:
    rc = fail(st);
done:
    cJSON_Delete(written);
    kvcal_scales_destroy(scales);
    kvcal_stats_destroy(stats);
    kvcal_samples_destroy(samples);
    kvcal_model_close(model);
    return rc;
}
