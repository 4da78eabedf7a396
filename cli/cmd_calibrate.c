/* cli/cmd_calibrate.c: `kvcal calibrate`: runs a model over calibration
 * samples, observes every K and V the engine would cache, and writes the
 * scales in every format engines read. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calib/attn_search.h"
#include "calib/executor.h"
#include "calib/model.h"
#include "cli/cmd_common.h"
#include "cli/cmd_outputs.h"
#include "cli/cmd_progress.h"
#include "cli/cmd_ranks.h"
#include "cli/cmd_resume.h"
#include "cli/command.h"
#include "cli/data_path.h"
#include "core/scales.h"
#include "core/status.h"
#include "io/atomic_file.h"
#include "io/dataset/dataset.h"
#include "io/json_file.h"
#include "io/report/report_html.h"
#include "io/scales/scales_io.h"
#include "io/stats_hdf5.h"
#include "kvcal.h"
#include "observers/observer.h"
#include "observers/stats.h"

#define DEFAULT_DATASET "datasets/default_calibration.txt"
#define DEFAULT_BATCH 4
#define ATTN_SAMPLES 4 /* samples the attention observer searches on */
/* samples a chunk, the progress of a run saved after each */
#define DEFAULT_SAVE_EVERY 64
/* the default, recorded as is in provenance; read from kvcal's data folder */
static const char default_dataset[] = DEFAULT_DATASET;

typedef struct {
    kvcal_cmd_run_options run;
    const char *out, *stats_path, *format;
    const char *report_path; /* --report: the HTML report, or NULL */
    int output_named;        /* --out, --format, --stats or --report given */
    int time_only;           /* --time-only */
    int profile;             /* --profile */
    int resume;              /* --resume */
    int save_every; /* --save-every: samples a chunk, progress saved after each */
    const char *observer_text; /* --observer as given */
    kvcal_observer_config observer;
    kvcal_granularity granularity;
    kvcal_kv_format kv_dtype; /* --kv-dtype */
    int q_scale;              /* --q-scale: observe Q, write q_scale */
    int signed_range;         /* --signed-range: keep each channel's min and max */
    int force_offsets;        /* --force-offsets: non-zero offsets into --format ascend */
    kvcal_cmd_ranks *ranks;   /* this process's rank of the run */
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
        "  --batch B            samples per forward pass (default 4; at most the\n"
        "                       number of samples)\n"
        "  --observer KIND      minmax | ema[:DECAY] | percentile:P | mse |\n"
        "                       attention[:N] (default minmax); attention: per head\n"
        "                       the candidate of the others (minmax, percentiles\n"
        "                       99.999 to 99, mse) whose K (V), through the\n"
        "                       --kv-dtype cache, moves the attention output least\n"
        "                       on the first N samples\n"
        "                       (default 4), searched on the cpu\n"
        "  --granularity G      tensor | head (default tensor)\n"
        "  --tp N               tensor-parallel size of the legacy file (default 1):\n"
        "                       1 to 4096, dividing the kv heads or a multiple of them\n"
        "  --device D           cpu | cuda (default cpu)\n"
        "  --max-device-memory SIZE\n"
        "                       cuda: device memory kvcal may take (bytes, or with\n"
        "                       K, M, G, T: 24G; default the free memory less\n"
        "                       512 MiB); a model whose weights do not fit runs\n"
        "                       with two layers on the device at a time\n"
        "  --out PATH           output file, or directory for the checkpoint formats\n"
        "                       and all (default kvcal_scales.json,\n"
        "                       kv_cache_scales.json, kvcal-<format> or kvcal-out)\n"
        "  --format F           legacy | kvcal | checkpoint (or compressed-tensors) |\n"
        "                       modelopt | quark | kv-scale | trtllm | ascend | all\n"
        "                       (default kvcal; kvcal convert --help says what\n"
        "                       each holds); all writes\n"
        "                       kv_cache_scales.json, kvcal_scales.json and\n"
        "                       checkpoint/ under --out\n"
        "  --kv-dtype D         the cache the scales are for: fp8_e4m3 (default;\n"
        "                       absmax / 448), int8 (absmax / 127), int8_asym (a\n"
        "                       scale and an offset per head from each channel's\n"
        "                       signed range, ModelSlim's rule: int8 with zero\n"
        "                       points) or nvfp4 (the global scale, absmax / (6 x\n"
        "                       448)); int8 and int8_asym write --format kvcal or\n"
        "                       ascend (vllm-ascend's C8; int8: offsets 0), nvfp4\n"
        "                       kvcal or modelopt (kv_cache_quant_algo NVFP4); int8\n"
        "                       and nvfp4 also checkpoint (compressed-tensors'\n"
        "                       kv_cache_scheme type int, or num_bits 4 tensor_group\n"
        "                       with k_global_scale = 448 x 6 / amax; vLLM 0.32.0\n"
        "                       refuses both at start, sglang ignores them;\n"
        "                       schemas/README.md says which engine reads what);\n"
        "                       fp8_e5m2 needs no scale\n"
        "  --force-offsets      --format ascend: write int8_asym's non-zero offsets,\n"
        "                       which vllm-ascend 0.23.0.post1 ignores on decode\n"
        "                       (refused without it)\n"
        "  --q-scale            also observe every query after RoPE (and q_norm) and\n"
        "                       write q_scale (max |q| / 448, e4m3's: FlashAttention\n"
        "                       3 quantizes the query with an fp8 cache) per layer\n"
        "                       and per query head into kvcal, checkpoint (vLLM\n"
        "                       reduces per-head ones to kv-head groups by max) and\n"
        "                       quark outputs and --stats; the last layer's queries\n"
        "                       are then computed too\n"
        "  --signed-range       also keep each channel's signed min and max in --stats\n"
        "                       (what static int8 with offsets needs; cuda reads K and\n"
        "                       V once more)\n"
        "  --stats FILE.h5      also write the HDF5 statistics\n"
        "  --report FILE.html   also write the HTML report of the scales and statistics\n"
        "                       (what kvcal report writes)\n"
        "  --seed S             sample selection seed (default 0)\n"
        "  --quiet              no progress line (on a terminal a line rewritten in\n"
        "                       place; elsewhere a plain line every\n"
        "                       $KVCAL_PROGRESS_INTERVAL seconds, default 10, and at\n"
        "                       the end)\n"
        "  --json               print the summary as JSON on stdout\n"
        "  --save-every N       keep the statistics of the finished samples beside\n"
        "                       --out (OUT.kvcal-progress.h5 and .json) after every\n"
        "                       N samples (default 64; 0: never); SIGINT or SIGTERM\n"
        "                       stops the run there (exit 2)\n"
        "  --resume             continue from that progress (same model, data and\n"
        "                       options) to the outputs an uninterrupted run writes\n"
        "  --time-only          run the samples without observing K/V and write\n"
        "                       nothing: the rate without the observers (what they\n"
        "                       cost is the difference to a normal run)\n"
        "  --profile            print where the forward passes' time went, op by op\n"
        "                       (device time on cuda; the experts' steps of a MoE op\n"
        "                       apart), and add it to --json's summary as op_profile;\n"
        "                       \"between layers and batches\" is the device's time\n"
        "                       between one layer's ops on a batch and the next\n"
        "                       (waiting for the weights' load or the host)\n\n"
        "Every output is written to a temporary file beside it, and all are renamed\n"
        "into place once every one was written: a failed run writes nothing (and\n"
        "removes the directories it created). An output that is an input (the\n"
        "dataset, the model's files, the tokenizer: by any name, links included) is\n"
        "refused; only a checkpoint may go into the model directory itself (its\n"
        "config.json and index rewritten, every field kept). A symbolic link at an\n"
        "output path is written through: the file it names is replaced, the link\n"
        "kept; a link to nothing is refused.\n"
        "The same inputs and seed give byte-identical outputs.\n"
        "Several processes (mpirun -np N kvcal calibrate ..., or torchrun's RANK,\n"
        "WORLD_SIZE and LOCAL_RANK with --device cuda) split the batches in order;\n"
        "rank 0 writes the outputs one process writes, byte for byte.\n"
        "exit codes: 0 ok, 1 invalid input, 2 usage or I/O error\n");
}

enum {
    O_OBSERVER = KVCAL_OPT_RUN_END,
    O_GRAN,
    O_OUT,
    O_FORMAT,
    O_STATS,
    O_REPORT,
    O_TIME_ONLY,
    O_RESUME,
    O_SAVE_EVERY,
    O_KV_DTYPE,
    O_Q_SCALE,
    O_SIGNED_RANGE,
    O_FORCE_OFFSETS,
    O_PROFILE
};

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
    case O_REPORT:
        o->output_named = 1;
        return kvcal_cmd_parse_path("calibrate", "--report", arg, &o->report_path) ? -1
                                                                                   : 1;
    case O_TIME_ONLY:
        o->time_only = 1;
        return 1;
    case O_Q_SCALE:
        o->q_scale = 1;
        return 1;
    case O_SIGNED_RANGE:
        o->signed_range = 1;
        return 1;
    case O_FORCE_OFFSETS:
        o->force_offsets = 1;
        return 1;
    case O_PROFILE:
        o->profile = 1;
        return 1;
    case O_RESUME:
        o->resume = 1;
        return 1;
    case O_SAVE_EVERY:
        return kvcal_cmd_parse_int("calibrate", "--save-every", arg, 0, KVCAL_CMD_INT_MAX,
                                   &o->save_every)
                   ? -1
                   : 1;
    case O_OBSERVER:
        o->observer_text = arg;
        if (!strncmp(arg, "attention", 9) && (!arg[9] || arg[9] == ':')) {
            o->observer = kvcal_observer_default();
            o->observer.kind = KVCAL_OBSERVER_ATTENTION;
            o->observer.search_samples = ATTN_SAMPLES;
            return !arg[9] || !kvcal_cmd_parse_int("calibrate", "--observer attention:N",
                                                   arg + 10, 1, KVCAL_CMD_INT_MAX,
                                                   &o->observer.search_samples)
                       ? 1
                       : -1;
        }
        if (kvcal_observer_parse(arg, &o->observer)) {
            fprintf(stderr, "kvcal calibrate: --observer: %s\n", kvcal_last_error());
            return -1;
        }
        return 1;
    case O_KV_DTYPE:
        if (!strcmp(arg, "fp8_e4m3") || !strcmp(arg, "fp8"))
            o->kv_dtype = KVCAL_KV_FORMAT_FP8_E4M3;
        else if (!strcmp(arg, "int8"))
            o->kv_dtype = KVCAL_KV_FORMAT_INT8;
        else if (!strcmp(arg, "nvfp4"))
            o->kv_dtype = KVCAL_KV_FORMAT_NVFP4;
        else if (!strcmp(arg, "int8_asym"))
            o->kv_dtype = KVCAL_KV_FORMAT_INT8_ASYM;
        else {
            fprintf(
                stderr,
                "kvcal calibrate: --kv-dtype '%s': expected fp8_e4m3, int8, int8_asym "
                "or nvfp4%s\n",
                arg,
                !strcmp(arg, "fp8_e5m2") ? " (fp8_e5m2 is a cast: it needs no scale; "
                                           "kvcal eval --modes fp8-e5m2 says what it "
                                           "costs)"
                                         : "");
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
        {"report", required_argument, 0, O_REPORT},
        {"time-only", no_argument, 0, O_TIME_ONLY},
        {"resume", no_argument, 0, O_RESUME},
        {"save-every", required_argument, 0, O_SAVE_EVERY},
        {"kv-dtype", required_argument, 0, O_KV_DTYPE},
        {"q-scale", no_argument, 0, O_Q_SCALE},
        {"signed-range", no_argument, 0, O_SIGNED_RANGE},
        {"force-offsets", no_argument, 0, O_FORCE_OFFSETS},
        {"profile", no_argument, 0, O_PROFILE},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    o->run.dataset = default_dataset;
    o->run.num_samples = 32;
    o->run.tp = 1;
    o->format = "kvcal";
    o->observer = kvcal_observer_default();
    o->observer_text = "minmax";
    o->save_every = DEFAULT_SAVE_EVERY;
    o->granularity = KVCAL_GRANULARITY_TENSOR;
    int rc = kvcal_cmd_parse_run_argv("calibrate", argc, argv, longopts, 1, &o->run,
                                      own_option, o);
    if (rc)
        return rc;
    if (!o->run.model) {
        fprintf(stderr, "kvcal calibrate: --model is required (see --help)\n");
        return -1;
    }
    if (o->time_only && (o->output_named || o->resume)) {
        fprintf(stderr, "kvcal calibrate: --time-only writes nothing; leave out --out, "
                        "--format, --stats, --report and --resume\n");
        return -1;
    }
    static const char *const default_out[] = {
        [KVCAL_FORMAT_LEGACY_JSON] = "kv_cache_scales.json",
        [KVCAL_FORMAT_KVCAL_JSON] = "kvcal_scales.json",
        [KVCAL_FORMAT_CHECKPOINT] = "kvcal-checkpoint",
        [KVCAL_FORMAT_MODELOPT] = "kvcal-modelopt",
        [KVCAL_FORMAT_QUARK] = "kvcal-quark",
        [KVCAL_FORMAT_KV_SCALE] = "kvcal-kv-scale",
        [KVCAL_FORMAT_TRTLLM] = "kvcal-trtllm"};
    kvcal_format fmt = KVCAL_FORMAT_UNKNOWN; /* UNKNOWN for all */
    if (strcmp(o->format, "all") && kvcal_cmd_parse_format(o->format, &fmt)) {
        fprintf(stderr, "kvcal calibrate: --format '%s': expected %s, or all\n",
                o->format, KVCAL_CMD_FORMATS);
        return -1;
    }
    /* where an engine reads them: NVFP4 global scales from a ModelOpt
     * checkpoint (kv_cache_quant_algo NVFP4); static int8 scales from
     * vllm-ascend's C8 checkpoint (ModelOpt maps INT8 to auto); int8 and
     * NVFP4 in compressed-tensors' own kv_cache_scheme too, for its
     * consumers (vLLM 0.32.0 refuses both at start) */
    const int nvfp4 = o->kv_dtype == KVCAL_KV_FORMAT_NVFP4;
    const int asym = o->kv_dtype == KVCAL_KV_FORMAT_INT8_ASYM;
    const int int8 = o->kv_dtype == KVCAL_KV_FORMAT_INT8 || asym;
    if (o->kv_dtype == KVCAL_KV_FORMAT_FP8_E4M3 && fmt == KVCAL_FORMAT_ASCEND) {
        fprintf(stderr, "kvcal calibrate: --format ascend is vllm-ascend's C8 cache, "
                        "int8: add --kv-dtype int8 (offsets 0) or int8_asym\n");
        return -1;
    }
    if (o->kv_dtype != KVCAL_KV_FORMAT_FP8_E4M3 &&
        ((fmt != KVCAL_FORMAT_KVCAL_JSON && !(nvfp4 && fmt == KVCAL_FORMAT_MODELOPT) &&
          !(int8 && fmt == KVCAL_FORMAT_ASCEND) &&
          !(!asym && fmt == KVCAL_FORMAT_CHECKPOINT)) ||
         o->report_path)) {
        fprintf(
            stderr,
            "kvcal calibrate: --kv-dtype %s writes --format kvcal%s only (%s; the "
            "report draws e4m3's): leave out --format %s%s\n",
            nvfp4   ? "nvfp4"
            : !asym ? "int8"
                    : "int8_asym",
            nvfp4   ? ", modelopt or checkpoint (compressed-tensors)"
            : !asym ? ", ascend or checkpoint (compressed-tensors)"
                    : " or ascend",
            nvfp4 ? "vLLM reads NVFP4 global scales only from a ModelOpt checkpoint"
            : !asym
                ? "vllm-ascend loads static int8 scales; compressed-tensors describes "
                  "them, vLLM refuses that scheme"
                : "vllm-ascend alone reads offsets",
            o->format, o->report_path ? " and --report" : "");
        return -1;
    }
    if (o->force_offsets && fmt != KVCAL_FORMAT_ASCEND) {
        fprintf(stderr, "kvcal calibrate: --force-offsets goes with --format ascend\n");
        return -1;
    }
    /* offsets come from each channel's signed range */
    o->signed_range |= o->kv_dtype == KVCAL_KV_FORMAT_INT8_ASYM;
    if (o->kv_dtype == KVCAL_KV_FORMAT_INT8_ASYM &&
        o->observer.kind == KVCAL_OBSERVER_ATTENTION) {
        fprintf(stderr,
                "kvcal calibrate: --observer attention searches symmetric scales; "
                "with --kv-dtype int8_asym use minmax, ema, percentile or mse "
                "(their threshold clips the signed range)\n");
        return -1;
    }
    if (!o->out)
        o->out = fmt == KVCAL_FORMAT_UNKNOWN ? "kvcal-out" : default_out[fmt];
    return 0;
}

// --- running ----------------------------------------------------------------

static void warn_stderr(void *ctx, const char *message)
{
    (void)ctx;
    fprintf(stderr, "kvcal calibrate: warning: %s\n", message);
}

/* How long each phase of a run took (seconds): reading the model and
 * samples and readying the device, the forward passes, the outputs. */
typedef struct {
    double load, forward, write;
    double save;              /* the forward's progress saves (--save-every) */
    double reduce;            /* several ranks: their statistics brought together */
    int ranks;                /* processes the samples were split over */
    int cuda;                 /* the run's device: 1 cuda, 0 cpu */
    int layers_resident;      /* layers whose weights the device held at once */
    char fp8_fallback[512];   /* kvcal_exec_fp8_fallback's line */
    kvcal_load_stats weights; /* the layers' load, at the forward's end */
    kvcal_op_time ops[KVCAL_OP_PROFILE_LABELS]; /* --profile: time by op */
    int n_ops;
} phases;

typedef struct {
    kvcal_cmd_progress pr;
    double load; /* the load phase's seconds, for the progress line */
    kvcal_cmd_ranks *ranks;
} progress_ctx;

/* SIGINT or SIGTERM seen during a run: it stops after the chunk in flight,
 * its progress saved. A second signal ends the process at once. */
static volatile int interrupted;

static void show_progress(void *ctx, const kvcal_exec_progress *p)
{
    progress_ctx *c = ctx;
    kvcal_cmd_ranks_poll(c->ranks, &interrupted);
    const double elapsed = kvcal_cmd_progress_elapsed(&c->pr), done = p->tokens_done;
    const int final = p->samples_done == p->samples_total;
    char where[96] = "";
    int n = 0;
    if (c->ranks->size > 1) /* rank 0 shows its own part */
        n = snprintf(where, sizeof where, " of rank 0's (%d ranks)", c->ranks->size);
    if (p->layer)
        snprintf(where + n, sizeof where - n, " (layer %d/%d)", p->layer, p->layers);
    kvcal_cmd_progress_update(
        &c->pr, final,
        "calibrate: %d/%d samples%s, %.0f tokens, %.0f tokens/s, ETA %.0f s (load %.1f "
        "s)",
        p->samples_done, p->samples_total, where, done,
        elapsed > 0 ? done / elapsed : 0.0,
        done > 0 ? elapsed * ((double)p->tokens_total - done) / done : 0.0, c->load);
}

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void catch_signals(int on)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on ? on_signal : SIG_DFL;
    sa.sa_flags = on ? SA_RESETHAND : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Runs every sample through the model on the chosen device, folding K/V
 * into stats (NULL: nothing observed, --time-only) from sample first on
 * (a resumed run), the progress saved into r after each chunk (r NULL:
 * not saved). batch: samples per forward pass, at most s->num_samples. */
/* The attention observer's thresholds (layers, 2, kv_heads) into *out
 * (caller frees): the search of calib/attn_search.h over the first samples,
 * on a cpu executor whatever --device says (it needs Q, K and V on the
 * host). */
static kvcal_status attention_thresholds(kvcal_model_t *model, const kvcal_samples *s,
                                         const options *o, int batch,
                                         const kvcal_stats_t *stats, float **out)
{
    const kvcal_model_desc *d = kvcal_model_describe(model);
    kvcal_exec_t *x = NULL;
    kvcal_exec_options xo;
    memset(&xo, 0, sizeof xo);
    xo.device = KVCAL_DEVICE_CPU;
    xo.backend.max_batch = batch;
    xo.backend.max_seq_len = s->seq_len;
    *out = malloc((size_t)d->num_layers * 2 * d->num_kv_heads * sizeof **out);
    kvcal_status st =
        *out ? kvcal_exec_create(model, &xo, &x)
             : kvcal_fail(KVCAL_ERR_NOMEM, "attention observer: out of memory");
    const kvcal_exec_samples run = {.ids = s->ids,
                                    .lengths = s->lengths,
                                    .num_samples = s->num_samples,
                                    .seq_len = s->seq_len,
                                    .batch = batch};
    kvcal_attn_search_result r = {*out, NULL, NULL};
    if (!st)
        st = kvcal_attn_search(x, d, stats, &run, o->observer.search_samples, o->kv_dtype,
                               &r);
    kvcal_exec_destroy(x);
    if (st) {
        free(*out);
        *out = NULL;
    }
    return st;
}

static kvcal_status run_samples_from(kvcal_model_t *model, const kvcal_samples *s,
                                     const options *o, int batch, kvcal_stats_t *stats,
                                     int first, kvcal_cmd_resume *r, double t_start,
                                     phases *ph)
{
    kvcal_exec_t *x = NULL;
    kvcal_exec_options xo;
    progress_ctx pc = {.ranks = o->ranks};
    kvcal_exec_samples run = {.ids = s->ids,
                              .lengths = s->lengths,
                              .num_samples = s->num_samples,
                              .seq_len = s->seq_len,
                              .batch = batch,
                              .progress = show_progress,
                              .progress_ctx = &pc,
                              .first_sample = first,
                              .chunk_samples = o->save_every,
                              .chunk_done = r ? kvcal_cmd_resume_save : NULL,
                              .chunk_ctx = r,
                              .stop = &interrupted};
    if (!kvcal_cmd_ranks_narrow(o->ranks, &run)) {
        ph->load = kvcal_cmd_now_s() - t_start; /* a rank without a sample */
        return KVCAL_OK;
    }
    kvcal_status st = kvcal_cmd_exec_options(&o->run, batch, s->seq_len, &xo);
    xo.profile = o->profile;
    ph->cuda = o->run.cuda;
    if (!st)
        st = kvcal_exec_create(model, &xo, &x);
    if (st)
        return st;
    ph->load = pc.load = kvcal_cmd_now_s() - t_start;
    ph->layers_resident = kvcal_exec_layers_resident(x);
    snprintf(ph->fp8_fallback, sizeof ph->fp8_fallback, "%s", kvcal_exec_fp8_fallback(x));
    kvcal_cmd_progress_start(&pc.pr, o->run.quiet, 0.0);
    catch_signals(1);
    st = kvcal_exec_calibrate(x, &run, stats, o->observer.ema_decay);
    catch_signals(0);
    kvcal_cmd_progress_end(&pc.pr);
    if (r)
        kvcal_cmd_resume_wait(r);
    ph->forward = kvcal_cmd_progress_elapsed(&pc.pr);
    ph->save = r ? r->save_seconds : 0.0;
    kvcal_exec_load_stats(x, &ph->weights);
    const kvcal_op_time *ops = NULL;
    ph->n_ops = kvcal_exec_op_profile(x, &ops);
    if (ph->n_ops)
        memcpy(ph->ops, ops, (size_t)ph->n_ops * sizeof *ops);
    kvcal_exec_destroy(x);
    return st;
}

// --- outputs --------------------------------------------------------------------

/* Every file a run writes, known before it runs: checked against the inputs
 * and against each other first, then written as one batch. */
typedef struct {
    char legacy[4096], kvcal[4096], checkpoint[4096]; /* "" when not written */
    kvcal_format dir_format;                          /* the format of `checkpoint` */
    char files[9][4096];                              /* every file, checkpoint's too */
    const char *option[9];                            /* the option naming each */
    int in_checkpoint[9];                             /* 1 for the checkpoint's files */
    int nfiles;
} output_plan;

static void model_dir_of(const char *model, char *dir, size_t n);

/* Appends "<dir>/<name>" (dir alone when name is NULL) to the plan's files
 * and into where (may be NULL); -1 with a message when it is too long. */
static int plan_file(output_plan *p, const char *option, const char *dir,
                     const char *name, char *where)
{
    char *f = p->files[p->nfiles];
    if ((name ? kvcal_path_join(f, sizeof p->files[0], dir, name)
              : snprintf(f, sizeof p->files[0], "%s", dir) >= (int)sizeof p->files[0]) ||
        strlen(f) > KVCAL_ATOMIC_PATH_MAX) {
        fprintf(stderr,
                "kvcal calibrate: %s %.64s...: output path too long; use a path shorter "
                "than %zu bytes\n",
                option, dir,
                (size_t)KVCAL_ATOMIC_PATH_MAX + 1 - (name ? strlen(name) + 1 : 0));
        return -1;
    }
    p->option[p->nfiles++] = option;
    if (where)
        snprintf(where, sizeof p->legacy, "%s", f);
    return 0;
}

/* The files of --format, --out, --stats and --report; -1 (message printed)
 * when a path is too long. */
static int plan_outputs(const options *o, output_plan *p)
{
    memset(p, 0, sizeof *p);
    int all = !strcmp(o->format, "all");
    p->dir_format = KVCAL_FORMAT_CHECKPOINT;
    if (!all)
        kvcal_cmd_parse_format(o->format, &p->dir_format);
    if ((all || !strcmp(o->format, "legacy")) &&
        plan_file(p, "--out", o->out, all ? "kv_cache_scales.json" : NULL, p->legacy))
        return -1;
    if ((all || !strcmp(o->format, "kvcal")) &&
        plan_file(p, "--out", o->out, all ? "kvcal_scales.json" : NULL, p->kvcal))
        return -1;
    if (all || kvcal_format_is_dir(p->dir_format)) {
        const char *names[KVCAL_CMD_MAX_DIR_FILES];
        char model_dir[4096];
        model_dir_of(o->run.model, model_dir, sizeof model_dir);
        int count =
            kvcal_cmd_dir_files(p->dir_format, model_dir, names, KVCAL_CMD_MAX_DIR_FILES);
        if ((all ? kvcal_path_join(p->checkpoint, sizeof p->checkpoint, o->out,
                                   "checkpoint")
                 : snprintf(p->checkpoint, sizeof p->checkpoint, "%s", o->out) >=
                       (int)sizeof p->checkpoint) ||
            strlen(p->checkpoint) + 64 >= sizeof p->checkpoint) {
            fprintf(stderr,
                    "kvcal calibrate: --out %.64s...: output path too long; use a path "
                    "shorter than %zu bytes\n",
                    o->out,
                    sizeof p->checkpoint - 64 - (all ? strlen("/checkpoint") : 0));
            return -1;
        }
        for (int i = 0; i < count; i++) {
            p->in_checkpoint[p->nfiles] = 1;
            if (plan_file(p, "--out", p->checkpoint, names[i], NULL))
                return -1;
        }
    }
    if (o->stats_path && plan_file(p, "--stats", o->stats_path, NULL, NULL))
        return -1;
    if (o->report_path && plan_file(p, "--report", o->report_path, NULL, NULL))
        return -1;
    return 0;
}

/* The model's directory: the model path, or the folder of a model file. */
static void model_dir_of(const char *model, char *dir, size_t n)
{
    struct stat sb;
    if (stat(model, &sb) == 0 && !S_ISDIR(sb.st_mode))
        kvcal_path_dirname(model, dir, n);
    else
        snprintf(dir, n, "%s", model);
}

/* Whether a file the run writes or reads is one of its own progress files
 * (OUT.kvcal-progress.h5 and .json, kvcal_cmd_resume_init's names), which
 * the run writes over after every --save-every samples, reads on --resume
 * and removes at its end: -1 with a message naming the option and the fix. */
static int check_progress_names(const output_plan *p, const options *o,
                                const char *dataset_path,
                                const kvcal_inputs_t *model_inputs)
{
    if (!o->save_every && !o->resume)
        return 0; /* no progress kept or read */
    kvcal_cmd_resume r;
    const kvcal_model_identity none = {0};
    if (kvcal_cmd_resume_init(&r, o->out, NULL, &none))
        return -1;
    const char *progress[] = {r.stats_path, r.run_path};
    const char *fix = o->resume ? "" : " (or --save-every 0: no progress kept)";
    for (int k = 0; k < 2; k++) {
        const char *opt = NULL, *path = NULL, *is = "is";
        for (int i = 0; !opt && i < p->nfiles; i++)
            if (kvcal_path_same_file(p->files[i], progress[k])) {
                opt = p->option[i];
                path = p->files[i];
            }
        if (opt) {
            fprintf(stderr,
                    "kvcal calibrate: %s %s: is %s, where this run keeps its progress "
                    "(beside --out %s), written over as the run goes and removed at "
                    "its end; give %s another path%s\n",
                    opt, path, progress[k], o->out, opt, fix);
            return -1;
        }
        if (o->run.tokenizer && kvcal_path_same_file(o->run.tokenizer, progress[k])) {
            opt = "--tokenizer";
            path = o->run.tokenizer;
        } else if (kvcal_path_same_file(dataset_path, progress[k])) {
            opt = "--dataset";
            path = dataset_path;
        } else if (kvcal_path_same_file(o->run.model, progress[k]) ||
                   kvcal_inputs_check(model_inputs, "--model", progress[k])) {
            opt = "--model";
            path = o->run.model;
            is = kvcal_path_same_file(o->run.model, progress[k]) ? "is" : "holds";
        }
        if (opt) {
            fprintf(stderr,
                    "kvcal calibrate: %s %s: %s %s, where this run keeps its progress "
                    "(beside --out %s), written over as the run goes and removed at "
                    "its end: the input would be lost; give --out another path, or the "
                    "input another name\n",
                    opt, path, is, progress[k], o->out);
            return -1;
        }
    }
    return 0;
}

/* Whether some output is an input, or two outputs are one file, or either
 * is one of the run's progress files: -1 with a message naming them. The
 * checkpoint may be written into the model's own directory (its
 * config.json and index are rewritten with every field kept), so its files
 * are not checked against the model's there. */
static int check_outputs(const output_plan *p, const options *o, const char *dataset_path,
                         const kvcal_inputs_t *model_inputs,
                         const kvcal_inputs_t *other_inputs)
{
    if (check_progress_names(p, o, dataset_path, model_inputs))
        return -1;
    char model_dir[4096];
    model_dir_of(o->run.model, model_dir, sizeof model_dir);
    int into_model = p->checkpoint[0] && kvcal_path_same_file(p->checkpoint, model_dir);
    for (int i = 0; i < p->nfiles; i++) {
        if (kvcal_atomic_check(p->files[i]) ||
            kvcal_inputs_check(other_inputs, p->option[i], p->files[i]) ||
            (!(into_model && p->in_checkpoint[i]) &&
             kvcal_inputs_check(model_inputs, p->option[i], p->files[i]))) {
            fprintf(stderr, "kvcal calibrate: %s\n", kvcal_last_error());
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (kvcal_path_same_file(p->files[i], p->files[j])) {
                fprintf(stderr,
                        "kvcal calibrate: %s %s: is also the output %s of %s; give each "
                        "output its own path\n",
                        p->option[i], p->files[i], p->files[j], p->option[j]);
                return -1;
            }
    }
    return 0;
}

/* The files the run reads: the model's into *model, the tokenizer and the
 * dataset into *other. */
static kvcal_status list_inputs(const options *o, const char *dataset_path,
                                kvcal_inputs_t **model, kvcal_inputs_t **other)
{
    kvcal_status st = kvcal_inputs_create(model);
    if (!st)
        st = kvcal_inputs_create(other);
    if (!st)
        st = kvcal_cmd_add_model_inputs(*model, o->run.model);
    if (!st && o->run.tokenizer)
        st = kvcal_inputs_add(*other, o->run.tokenizer, "the tokenizer", NULL);
    if (!st)
        st = kvcal_inputs_add(*other, dataset_path, "the dataset", NULL);
    return st;
}

/* A config.json describing a llama2.c model as the equivalent
 * LlamaForCausalLM, for the checkpoint format (which merges its scheme into
 * the model's config). Written into a fresh directory under `parent`. */
static kvcal_status write_llama2c_config(const kvcal_llama2c_config *c,
                                         const char *parent, char *dir, size_t n)
{
    if (kvcal_path_join(dir, n, parent, ".kvcal-model-XXXXXX"))
        return kvcal_fail(KVCAL_ERR_IO, "%s: path too long", parent);
    if (!mkdtemp(dir)) {
        int err = errno;
        dir[0] = '\0';
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot create a temporary directory: %s",
                          parent, strerror(err));
    }
    char path[4200];
    return kvcal_path_join(path, sizeof path, dir, "config.json")
               ? kvcal_fail(KVCAL_ERR_IO, "%s: path too long", dir)
               : kvcal_llama2c_write_hf_config(c, path);
}

/* Removes what write_llama2c_config made (nothing when dir is ""). */
static void remove_llama2c_config(const char *dir)
{
    char cfg[4300];
    if (!dir[0])
        return;
    if (!kvcal_path_join(cfg, sizeof cfg, dir, "config.json"))
        remove(cfg);
    rmdir(dir);
}

/* Writes the planned outputs as one batch: all of them, or (on any
 * failure) none and no directory it created. Once all are in place,
 * appends each written path to `written` and what its format keeps and
 * loses to `notes` ("" for the statistics). */
static kvcal_status write_outputs(const kvcal_scales_t *scales,
                                  const kvcal_stats_t *stats, kvcal_model_t *model,
                                  const options *o, const output_plan *p, cJSON *written,
                                  cJSON *notes)
{
    const kvcal_model_desc *d = kvcal_model_describe(model);
    int all = !strcmp(o->format, "all");
    char model_dir[4096], tmp_dir[4096] = "", parent[4096];
    kvcal_atomic_batch_t *batch = NULL;
    kvcal_status st = KVCAL_OK;
    if (p->checkpoint[0] && !strcmp(d->source, "llama2c")) {
        kvcal_path_dirname(o->out, parent, sizeof parent);
        if ((st = write_llama2c_config(kvcal_model_llama2c_config(model), parent, tmp_dir,
                                       sizeof tmp_dir)))
            goto done;
        snprintf(model_dir, sizeof model_dir, "%s", tmp_dir);
    } else {
        model_dir_of(o->run.model, model_dir, sizeof model_dir);
    }
    if ((st = kvcal_atomic_batch_begin(&batch)))
        goto done;
    if ((all && (st = kvcal_atomic_batch_mkdir(batch, o->out))) ||
        (p->checkpoint[0] && (st = kvcal_atomic_batch_mkdir(batch, p->checkpoint))))
        goto done;
    if ((p->legacy[0] && (st = kvcal_scales_write(scales, KVCAL_FORMAT_LEGACY_JSON,
                                                  p->legacy, NULL, o->run.tp))) ||
        (p->kvcal[0] && (st = kvcal_scales_write(scales, KVCAL_FORMAT_KVCAL_JSON,
                                                 p->kvcal, NULL, o->run.tp))) ||
        (p->checkpoint[0] &&
         (st = p->dir_format == KVCAL_FORMAT_ASCEND
                   ? kvcal_scales_write_ascend(scales, p->checkpoint, model_dir,
                                               o->force_offsets)
                   : kvcal_scales_write(scales, p->dir_format, p->checkpoint, model_dir,
                                        o->run.tp))) ||
        (o->stats_path &&
         (st = kvcal_stats_write_hdf5(o->stats_path, stats, &scales->model,
                                      &scales->provenance))))
        goto done;
    if (o->report_path) {
        const char *scales_path = p->kvcal[0]    ? p->kvcal
                                  : p->legacy[0] ? p->legacy
                                                 : p->checkpoint;
        const kvcal_report_html_inputs in = {
            scales, scales_path, stats, o->stats_path,
            NULL,   NULL,        -1,    KVCAL_REPORT_CLIP_THRESHOLD};
        if ((st = kvcal_report_html_write(o->report_path, &in)))
            goto done;
    }
    st = kvcal_atomic_batch_commit(batch);
    batch = NULL;
    if (st)
        goto done;
    const char *names[] = {p->legacy, p->kvcal, p->checkpoint, o->stats_path,
                           o->report_path};
    const kvcal_format formats[] = {KVCAL_FORMAT_LEGACY_JSON, KVCAL_FORMAT_KVCAL_JSON,
                                    p->dir_format, KVCAL_FORMAT_UNKNOWN,
                                    KVCAL_FORMAT_UNKNOWN};
    for (int i = 0; i < 5; i++)
        if (names[i] && names[i][0]) {
            cJSON_AddItemToArray(written, cJSON_CreateString(names[i]));
            cJSON_AddItemToArray(notes, cJSON_CreateString(kvcal_cmd_format_note(
                                            formats[i], scales->granularity,
                                            scales->format, d->mla, d->architecture)));
        }
done:
    kvcal_atomic_batch_abort(batch);
    remove_llama2c_config(tmp_dir);
    return st;
}

// --- report -------------------------------------------------------------------

static int by_ms(const void *a, const void *b)
{
    const double x = ((const kvcal_op_time *)a)->ms, y = ((const kvcal_op_time *)b)->ms;
    return (x < y) - (x > y);
}

/* --profile's table: each op's time in all, a call and its share, the
 * longest first. */
static void print_profile(const phases *ph)
{
    if (!ph->n_ops)
        return;
    kvcal_op_time t[KVCAL_OP_PROFILE_LABELS];
    double all = 0.0;
    memcpy(t, ph->ops, (size_t)ph->n_ops * sizeof *t);
    qsort(t, (size_t)ph->n_ops, sizeof *t, by_ms);
    for (int i = 0; i < ph->n_ops; i++)
        all += t[i].ms;
    printf(
        "op profile (%s time over the forward passes):\n"
        "  %-26s %12s %8s %10s %6s\n",
        ph->cuda ? "device" : "host", "op", "ms in all", "calls", "ms a call", "share");
    for (int i = 0; i < ph->n_ops; i++)
        printf("  %-26s %12.1f %8lld %10.4f %5.1f%%\n", t[i].label, t[i].ms, t[i].calls,
               t[i].ms / (double)t[i].calls, all > 0 ? 100.0 * t[i].ms / all : 0.0);
}

/* --profile's times in the JSON summary, in the order the ops first ran. */
static void add_profile_json(cJSON *root, const phases *ph)
{
    if (!ph->n_ops)
        return;
    cJSON *ops = cJSON_AddArrayToObject(root, "op_profile");
    for (int i = 0; i < ph->n_ops; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", ph->ops[i].label);
        cJSON_AddNumberToObject(o, "ms", ph->ops[i].ms);
        cJSON_AddNumberToObject(o, "calls", (double)ph->ops[i].calls);
        cJSON_AddItemToArray(ops, o);
    }
}

static void print_table(const kvcal_scales_t *s, const kvcal_model_desc *d,
                        long long tokens, int samples, const phases *ph, cJSON *written,
                        cJSON *notes)
{
    const double seconds = ph->forward;
    printf("calibrated %s (%s, %d layers, %d kv heads x %d) on %d samples, %lld tokens, "
           "%.1f s, %.0f tokens/s (load %.2f s, write %.2f s)\n",
           d->architecture, d->source, d->num_layers, d->num_kv_heads, d->head_dim,
           samples, tokens, seconds, seconds > 0 ? tokens / seconds : 0.0, ph->load,
           ph->write);
    if (ph->layers_resident && ph->layers_resident < d->num_layers)
        printf("weights streamed: %d of %d layers on the device at a time\n",
               ph->layers_resident, d->num_layers);
    if (ph->fp8_fallback[0])
        printf(
            "FP8 weights run as dequantized bf16 GEMMs, not the engine's FP8 GEMMs: %s\n",
            ph->fp8_fallback);
    if (ph->weights.bytes > 0)
        printf(
            "weights: %.2f GB onto the device, every layer on its way %.2f s after the "
            "start; waiting for host threads' fills %.2f s, for copies %.2f s\n",
            ph->weights.bytes / 1e9, ph->weights.all_seconds, ph->weights.fill_seconds,
            ph->weights.copy_wait_seconds);
    if (ph->ranks > 1)
        printf("data-parallel: %d ranks, statistics reduced on rank 0 in %.3f s\n",
               ph->ranks, ph->reduce);
    print_profile(ph);
    printf("%5s  %10s  %10s  %10s  %10s\n", "layer", "K absmax", "K scale", "V absmax",
           "V scale");
    for (int l = 0; l < s->num_layers; l++) {
        float ka = 0, va = 0, ks, vs;
        if (!kvcal_model_layer_caches(d, l)) {
            printf("%5d  %s\n", l, "linear attention: no K/V cache, no scales");
            continue;
        }
        for (int h = 0; h < s->num_kv_heads; h++) {
            int i = kvcal_scales_index(s, l, h);
            ka = s->k_absmax[i] > ka ? s->k_absmax[i] : ka;
            va = s->v_absmax[i] > va ? s->v_absmax[i] : va;
        }
        kvcal_scales_get_tensor(s, l, &ks, &vs);
        printf("%5d  %10.4g  %10.4g  %10.4g  %10.4g\n", l, ka, ks, va, vs);
    }
    for (int i = 0; i < cJSON_GetArraySize(written); i++) {
        const char *note = cJSON_GetArrayItem(notes, i)->valuestring;
        printf("wrote %s\n%s%s", cJSON_GetArrayItem(written, i)->valuestring, note,
               note[0] ? "\n" : "");
    }
}

/* A note of kvcal_cmd_format_note as one line: the indentation and line
 * breaks taken out (caller frees). */
static char *one_line(const char *note)
{
    char *t = malloc(strlen(note) + 1), *o = t;
    if (!t)
        return NULL;
    for (const char *c = note; *c; c++) {
        if (*c == '\n')
            *o++ = ' ';
        else if (*c != ' ' || (o > t && o[-1] != ' '))
            *o++ = *c;
    }
    *o = '\0';
    return t;
}

static void print_json(const kvcal_scales_t *s, const kvcal_model_desc *d,
                       long long tokens, int samples, const phases *ph, cJSON *written,
                       cJSON *notes)
{
    const double seconds = ph->forward;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "architecture", d->architecture);
    cJSON_AddNumberToObject(root, "num_samples", samples);
    cJSON_AddNumberToObject(root, "num_tokens", (double)tokens);
    cJSON_AddNumberToObject(root, "seconds", seconds);
    cJSON_AddNumberToObject(root, "tokens_per_second",
                            seconds > 0 ? tokens / seconds : 0.0);
    cJSON *phase = cJSON_AddObjectToObject(root, "phases");
    cJSON_AddNumberToObject(phase, "load_seconds", ph->load);
    cJSON_AddNumberToObject(phase, "forward_seconds", ph->forward);
    cJSON_AddNumberToObject(phase, "write_seconds", ph->write);
    cJSON_AddNumberToObject(phase, "progress_save_seconds", ph->save);
    cJSON_AddNumberToObject(phase, "reduce_seconds", ph->reduce);
    cJSON_AddNumberToObject(root, "ranks", ph->ranks);
    cJSON_AddNumberToObject(root, "layers_resident", ph->layers_resident);
    cJSON_AddStringToObject(root, "fp8_fallback", ph->fp8_fallback);
    cJSON *load = cJSON_AddObjectToObject(root, "weights_load");
    cJSON_AddNumberToObject(load, "bytes", ph->weights.bytes);
    cJSON_AddNumberToObject(load, "all_layers_seconds", ph->weights.all_seconds);
    cJSON_AddNumberToObject(load, "fill_seconds", ph->weights.fill_seconds);
    cJSON_AddNumberToObject(load, "copy_wait_seconds", ph->weights.copy_wait_seconds);
    cJSON_AddNumberToObject(load, "layers_loaded", ph->weights.layers_loaded);
    add_profile_json(root, ph);
    cJSON_AddItemToObject(root, "outputs", cJSON_Duplicate(written, 1));
    cJSON *format_notes = cJSON_AddArrayToObject(root, "format_notes");
    for (int i = 0; i < cJSON_GetArraySize(written); i++) {
        char *note = one_line(cJSON_GetArrayItem(notes, i)->valuestring);
        if (note && note[0]) {
            cJSON *n = cJSON_CreateObject();
            cJSON_AddStringToObject(n, "output",
                                    cJSON_GetArrayItem(written, i)->valuestring);
            cJSON_AddStringToObject(n, "note", note);
            cJSON_AddItemToArray(format_notes, n);
        }
        free(note);
    }
    cJSON *layers = cJSON_AddArrayToObject(root, "layers");
    for (int l = 0; l < s->num_layers; l++) {
        cJSON *o = cJSON_CreateObject();
        cJSON *ka = cJSON_AddArrayToObject(o, "k_absmax"),
              *va = cJSON_AddArrayToObject(o, "v_absmax");
        cJSON *ks = cJSON_AddArrayToObject(o, "k_scale"),
              *vs = cJSON_AddArrayToObject(o, "v_scale");
        cJSON *ko = s->k_offset ? cJSON_AddArrayToObject(o, "k_offset") : NULL,
              *vo = s->k_offset ? cJSON_AddArrayToObject(o, "v_offset") : NULL;
        for (int h = 0; h < s->num_kv_heads; h++) {
            int i = kvcal_scales_index(s, l, h);
            cJSON_AddItemToArray(ka, cJSON_CreateNumber(s->k_absmax[i]));
            cJSON_AddItemToArray(va, cJSON_CreateNumber(s->v_absmax[i]));
            cJSON_AddItemToArray(ks, cJSON_CreateNumber(s->k_head[i]));
            cJSON_AddItemToArray(vs, cJSON_CreateNumber(s->v_head[i]));
            if (ko) {
                cJSON_AddItemToArray(ko, cJSON_CreateNumber(s->k_offset[i]));
                cJSON_AddItemToArray(vo, cJSON_CreateNumber(s->v_offset[i]));
            }
        }
        if (!kvcal_model_layer_caches(d, l)) /* a hybrid model's linear attention */
            cJSON_AddBoolToObject(o, "kv_cache", 0);
        if (s->mla_kv_lora_rank) { /* the MLA entry's parts */
            cJSON_AddNumberToObject(o, "latent_absmax", s->mla_latent_absmax[l]);
            cJSON_AddNumberToObject(o, "rope_absmax", s->mla_rope_absmax[l]);
        }
        cJSON_AddItemToArray(layers, o);
    }
    char *text = cJSON_Print(root);
    if (text)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(root);
}

/* Marks the layers of d that cache nothing (a hybrid model's linear
 * attention) in the scale set s. */
static kvcal_status mark_uncached(const kvcal_model_desc *d, kvcal_scales_t *s)
{
    kvcal_status st = KVCAL_OK;
    for (int l = 0; !st && l < d->num_layers; l++)
        if (!kvcal_model_layer_caches(d, l))
            st = kvcal_scales_set_uncached(s, l);
    return st;
}

/* --time-only's report: the rate alone, nothing observed or written. */
static void print_time_only(const kvcal_model_desc *d, const options *o, long long tokens,
                            int samples, const phases *ph)
{
    const double seconds = ph->forward;
    const double rate = seconds > 0 ? tokens / seconds : 0.0;
    if (!o->run.json) {
        printf(
            "ran %s (%s, %d layers) on %d samples, %lld tokens, %.1f s, %.0f tokens/s, "
            "K/V not observed (--time-only): nothing written\n",
            d->architecture, d->source, d->num_layers, samples, tokens, seconds, rate);
        print_profile(ph);
        return;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "architecture", d->architecture);
    cJSON_AddNumberToObject(root, "num_samples", samples);
    cJSON_AddNumberToObject(root, "num_tokens", (double)tokens);
    cJSON_AddNumberToObject(root, "seconds", seconds);
    cJSON_AddNumberToObject(root, "tokens_per_second", rate);
    cJSON_AddBoolToObject(root, "observed", 0);
    add_profile_json(root, ph);
    char *text = cJSON_Print(root);
    if (text)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(root);
}

// --- command ------------------------------------------------------------------

/* What this rank's run is, for the ranks' first meeting: they must agree. */
static uint64_t run_hash(const kvcal_samples *s, int batch, const options *o,
                         const kvcal_model_desc *d)
{
    const int64_t n = (int64_t)s->num_samples * s->seq_len;
    const int shape[] = {s->num_samples, s->seq_len,      batch,      o->time_only,
                         d->num_layers,  d->num_kv_heads, d->head_dim};
    uint64_t h = kvcal_cmd_ranks_hash(KVCAL_CMD_RANKS_HASH0, shape, sizeof shape);
    h = kvcal_cmd_ranks_hash(h, s->ids, (size_t)n * sizeof *s->ids);
    h = kvcal_cmd_ranks_hash(h, s->lengths, (size_t)s->num_samples * sizeof *s->lengths);
    h = kvcal_cmd_ranks_hash(h, &o->observer.ema_decay, sizeof o->observer.ema_decay);
    return kvcal_cmd_ranks_hash(h, o->observer_text, strlen(o->observer_text));
}

/* The ranks meet after their forward passes (kvcal_cmd_ranks_meet); the
 * forward phase lasts until the slowest is done. */
static kvcal_status meet(kvcal_cmd_ranks *r, kvcal_status st, phases *ph)
{
    const double t = kvcal_cmd_now_s();
    st = kvcal_cmd_ranks_meet(r, st, 0);
    kvcal_cmd_ranks_close(r);
    ph->forward += kvcal_cmd_now_s() - t;
    return st;
}

KVCAL_COMMAND(calibrate, "calibrate", "run a model over samples, write K/V cache scales");

int kvcal_cmd_calibrate(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc == 1) {
        usage(stdout);
        return KVCAL_EXIT_OK;
    }
    if (rc)
        return KVCAL_EXIT_USAGE;
    output_plan plan;
    if (!o.time_only && plan_outputs(&o, &plan))
        return KVCAL_EXIT_USAGE;
    kvcal_model_t *model = NULL;
    kvcal_samples *samples = NULL;
    kvcal_stats_t *stats = NULL;
    float *attn_t = NULL; /* the attention observer's thresholds */
    kvcal_scales_t *scales = NULL;
    kvcal_inputs_t *model_inputs = NULL, *other_inputs = NULL;
    cJSON *written = cJSON_CreateArray(), *notes = cJSON_CreateArray(), *run_id = NULL;
    kvcal_cmd_resume resume;
    kvcal_cmd_ranks ranks = {.cmd = "calibrate", .size = 1};
    kvcal_status st;
    const double t_start = kvcal_cmd_now_s();
    phases ph = {0};
    o.ranks = &ranks;
    char dataset_path[4096];
    if (o.run.dataset == default_dataset) {
        if ((st = kvcal_data_file_find(DEFAULT_DATASET, dataset_path,
                                       sizeof dataset_path)))
            goto fail;
    } else {
        snprintf(dataset_path, sizeof dataset_path, "%s", o.run.dataset);
    }
    if (!o.time_only) {
        if ((st = list_inputs(&o, dataset_path, &model_inputs, &other_inputs)))
            goto fail;
        if (kvcal_cmd_ranks_env_rank() == 0 &&
            check_outputs(&plan, &o, dataset_path, model_inputs, other_inputs)) {
            rc = KVCAL_EXIT_USAGE;
            goto done;
        }
    }
    if (kvcal_cmd_ranks_start("calibrate", o.run.cuda, &ranks)) {
        rc = KVCAL_EXIT_USAGE;
        goto done;
    }
    if (ranks.size > 1 && o.resume) {
        if (ranks.rank == 0)
            fprintf(stderr, "kvcal calibrate: --resume continues a run of one process; "
                            "run it without mpirun\n");
        rc = KVCAL_EXIT_USAGE;
        goto done;
    }
    o.run.quiet |= ranks.rank != 0;
    if ((st = kvcal_model_open(o.run.model, &model)))
        goto fail;
    const kvcal_model_desc *d = kvcal_model_describe(model);
    if (!o.run.quiet)
        kvcal_cmd_note_config_engines_ignore("calibrate", d);
    if (!o.time_only && plan.dir_format == KVCAL_FORMAT_ASCEND &&
        !strcmp(d->source, "llama2c")) {
        st = kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                        "--format ascend: %s is a llama2.c model; vllm-ascend serves "
                        "Hugging Face checkpoints, whose weights its "
                        "quant_model_description.json must list: calibrate the "
                        "checkpoint's directory",
                        o.run.model);
        goto fail;
    }
    if (!o.run.seq_len)
        o.run.seq_len = d->max_seq_len < 256 ? d->max_seq_len : 256;
    if (o.run.seq_len > d->max_seq_len) {
        st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                        "--seq-len %d is longer than the model's context of %d tokens "
                        "(max_position_embeddings of %s)",
                        o.run.seq_len, d->max_seq_len, o.run.model);
        goto fail;
    }
    if ((st = kvcal_cmd_check_sparse_seq_len(o.run.seq_len, d)))
        goto fail;
    if (d->mla && o.observer.kind == KVCAL_OBSERVER_ATTENTION) {
        st = kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                        "--observer attention: %s caches MLA latent entries, whose "
                        "attention reads them through kv_b_proj; the search scores "
                        "per-head K and V and does not run it; use another observer",
                        d->architecture);
        goto fail;
    }
    if (d->linear_layers &&
        (!strcmp(o.format, "legacy") || !strcmp(o.format, "all") ||
         !strcmp(o.format, "trtllm") || !strcmp(o.format, "ascend"))) {
        st = kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                        "--format %s: %s is a hybrid model whose %d linear-attention "
                        "layers cache nothing, and this format holds a scale for every "
                        "layer; write --format checkpoint (or modelopt, quark, kv-scale, "
                        "kvcal)",
                        o.format, d->architecture, d->linear_layers);
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
    if ((st = kvcal_cmd_load_samples("calibrate", o.run.model, d->vocab_size,
                                     o.run.tokenizer, dataset_path, &dopt, &samples)))
        goto fail;
    int batch = o.run.batch ? o.run.batch : DEFAULT_BATCH;
    if (batch > samples->num_samples) {
        if (o.run.batch && !o.run.quiet)
            fprintf(stderr,
                    "kvcal calibrate: note: --batch %d is more than the %d samples; "
                    "running %d a pass\n",
                    batch, samples->num_samples, samples->num_samples);
        batch = samples->num_samples;
    }
    if ((st = kvcal_cmd_ranks_layout(&ranks, samples->num_samples, batch, d->num_layers,
                                     d->num_kv_heads)) ||
        (st = kvcal_cmd_ranks_meet(&ranks, KVCAL_OK, run_hash(samples, batch, &o, d))))
        goto fail;
    if (o.time_only) {
        st = run_samples_from(model, samples, &o, batch, NULL, 0, NULL, t_start, &ph);
        if ((st = meet(&ranks, st, &ph)))
            goto fail;
        if (ranks.rank == 0)
            print_time_only(d, &o, samples->num_tokens, samples->num_samples, &ph);
        rc = KVCAL_EXIT_OK;
        goto done;
    }
    /* the run's identity, for its progress files */
    run_id = cJSON_CreateObject();
    cJSON_AddStringToObject(run_id, "model", o.run.model);
    cJSON_AddStringToObject(run_id, "dataset", dataset_path);
    cJSON_AddStringToObject(run_id, "text_field",
                            o.run.text_field ? o.run.text_field : "");
    cJSON_AddStringToObject(run_id, "tokenizer", o.run.tokenizer ? o.run.tokenizer : "");
    cJSON_AddNumberToObject(run_id, "num_samples", samples->num_samples);
    cJSON_AddNumberToObject(run_id, "seq_len", samples->seq_len);
    cJSON_AddNumberToObject(run_id, "batch", batch);
    cJSON_AddNumberToObject(run_id, "seed", (double)o.run.seed);
    cJSON_AddStringToObject(run_id, "observer", o.observer_text);
    cJSON_AddBoolToObject(run_id, "q_scale", o.q_scale);
    cJSON_AddBoolToObject(run_id, "signed_range", o.signed_range);
    cJSON_AddNumberToObject(run_id, "num_tokens", (double)samples->num_tokens);
    kvcal_model_identity identity;
    kvcal_model_identity_get(model, &identity);
    if (kvcal_cmd_resume_init(&resume, o.out, run_id, &identity)) {
        rc = KVCAL_EXIT_USAGE;
        goto done;
    }
    int first = 0;
    if (o.resume) {
        if ((st = kvcal_cmd_resume_load(&resume, &stats, &first)))
            goto fail;
        if (stats->num_layers != d->num_layers ||
            stats->num_kv_heads != d->num_kv_heads || stats->head_dim != d->head_dim ||
            first > samples->num_samples || first % batch) {
            st = kvcal_fail(KVCAL_ERR_MISMATCH,
                            "--resume: %s does not fit this run (%d samples done of %d)",
                            resume.stats_path, first, samples->num_samples);
            goto fail;
        }
        if (!o.run.quiet)
            fprintf(stderr, "kvcal calibrate: resuming after %d of %d samples\n", first,
                    samples->num_samples);
    } else if ((st = kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim,
                                        &stats)))
        goto fail;
    /* the routing counts of a mixture of experts (a resumed run's are read),
     * the queries and the signed range where asked for */
    if (d->mla && (o.q_scale || o.signed_range)) {
        st = kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                        "%s: an MLA model caches one latent entry per token under one "
                        "k_scale; %s is not defined for it (drop the option)",
                        o.run.model,
                        o.q_scale ? "--q-scale (vLLM quantizes MLA's absorbed "
                                    "query, which kvcal does not compute)"
                                  : "--signed-range (no engine caches MLA in int8)");
        goto fail;
    }
    if ((st = kvcal_stats_set_experts(stats, d->num_experts)) ||
        (st = kvcal_stats_set_q_heads(stats, o.q_scale ? d->num_heads : 0)) ||
        (st = kvcal_stats_set_range(stats, o.signed_range)))
        goto fail;
    const int save = o.save_every && ranks.size == 1;
    if ((st = run_samples_from(model, samples, &o, batch, stats, first,
                               save ? &resume : NULL, t_start, &ph))) {
        if (st == KVCAL_ERR_INTERRUPTED && save)
            fprintf(stderr,
                    "kvcal calibrate: the progress is in %s; run the same command with "
                    "--resume to continue\n",
                    resume.run_path);
        goto fail;
    }
    if ((st = meet(&ranks, st, &ph)))
        goto fail;
    const double t_reduce = kvcal_cmd_now_s();
    if ((st = kvcal_cmd_ranks_reduce(&ranks, stats, o.observer.ema_decay)))
        goto fail;
    ph.reduce = kvcal_cmd_now_s() - t_reduce;
    ph.ranks = ranks.size;
    if (ranks.rank != 0) {
        rc = KVCAL_EXIT_OK; /* rank 0 writes */
        goto done;
    }
    if (o.observer.kind == KVCAL_OBSERVER_ATTENTION &&
        (st = attention_thresholds(model, samples, &o, batch, stats, &attn_t)))
        goto fail;
    o.observer.thresholds = attn_t;
    const int asym = o.kv_dtype == KVCAL_KV_FORMAT_INT8_ASYM;
    if ((st = kvcal_scales_create(d->num_layers, d->num_kv_heads, &scales)) ||
        (st = mark_uncached(d, scales)) ||
        (asym && (st = kvcal_scales_set_offsets(scales, 1))) ||
        (st = kvcal_stats_to_scales(stats, &o.observer, o.granularity, scales,
                                    warn_stderr, NULL)) ||
        (o.kv_dtype != KVCAL_KV_FORMAT_FP8_E4M3 && !asym &&
         (st = kvcal_scales_rescale(scales, o.kv_dtype))))
        goto fail;
    kvcal_model_identity_get(model, &scales->model);
    /* an MLA layer's entry: its latent's and its RoPE part's absmax */
    for (int l = 0; d->mla && l < d->num_layers; l++) {
        scales->mla_kv_lora_rank = d->kv_lora_rank;
        scales->mla_rope_dim = d->qk_rope_head_dim;
        scales->mla_latent_absmax[l] =
            kvcal_stats_channels_absmax(stats, l, KVCAL_K, 0, 0, d->kv_lora_rank);
        scales->mla_rope_absmax[l] = kvcal_stats_channels_absmax(
            stats, l, KVCAL_K, 0, d->kv_lora_rank, d->qk_rope_head_dim);
    }
    kvcal_provenance *prov = &scales->provenance;
    snprintf(prov->dataset, sizeof prov->dataset, "%s", o.run.dataset);
    prov->num_samples = samples->num_samples;
    prov->num_tokens = samples->num_tokens;
    prov->seed = o.run.seed;
    snprintf(prov->tool_version, sizeof prov->tool_version, "kvcal %s", kvcal_version());
    const double t_write = kvcal_cmd_now_s();
    if ((st = write_outputs(scales, stats, model, &o, &plan, written, notes)))
        goto fail;
    ph.write = kvcal_cmd_now_s() - t_write;
    kvcal_cmd_resume_clear(&resume);
    if (o.run.json)
        print_json(scales, d, samples->num_tokens, samples->num_samples, &ph, written,
                   notes);
    else
        print_table(scales, d, samples->num_tokens, samples->num_samples, &ph, written,
                    notes);
    rc = KVCAL_EXIT_OK;
    goto done;
fail:
    rc = kvcal_cmd_ranks_fail(&ranks, st);
done:
    kvcal_cmd_ranks_end(&ranks);
    free(attn_t);
    cJSON_Delete(written);
    cJSON_Delete(notes);
    cJSON_Delete(run_id);
    kvcal_inputs_destroy(model_inputs);
    kvcal_inputs_destroy(other_inputs);
    kvcal_scales_destroy(scales);
    kvcal_stats_destroy(stats);
    kvcal_samples_destroy(samples);
    kvcal_model_close(model);
    return rc;
}
