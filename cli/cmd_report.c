/* cli/cmd_report.c: `kvcal report`: one self-contained HTML file with the
 * figures a user looks at in a calibration (io/report/report_html.h): the
 * scales per layer and head, clipping, outlier channels, a histogram and
 * what each cache mode of `kvcal eval` costs. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_common.h"
#include "cli/command.h"
#include "core/status.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/report/report_html.h"
#include "io/stats_hdf5.h"
#include "kvcal.h"

#define DEFAULT_OUT "kvcal_report.html"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: kvcal report [SCALES] [--stats FILE.h5] [--eval FILE.json] [options]\n\n"
        "Writes one self-contained HTML file (inline SVG and CSS, no script, no\n"
        "network) with the figures of a calibration: provenance; K and V absmax\n"
        "and the scales written per layer and kv head; per layer, the absmax with\n"
        "the range of the written scale and the fraction that clips under it;\n"
        "with --stats, the outlier channels and the |x| histogram of one layer;\n"
        "with --eval, the table and the perplexity change of each cache mode; and\n"
        "warnings (scales of exactly 1.0, heads never seen, clipping).\n\n"
        "  SCALES               scales file (kvcal JSON: everything; legacy JSON or\n"
        "                       a checkpoint: the scales alone); may be left out\n"
        "                       with --eval\n"
        "  --stats FILE.h5      the statistics of calibrate --stats\n"
        "  --eval FILE.json     the output of kvcal eval --json\n"
        "  --layer N            layer of the histograms, with --stats (default: the\n"
        "                       layer of the largest K absmax)\n"
        "  --clip-threshold F   warn when a layer clips more than the fraction F\n"
        "                       (default 0.001)\n"
        "  --tp N               tensor-parallel size a legacy file is read for\n"
        "                       (default: its rank count)\n"
        "  --out FILE.html      the report (default " DEFAULT_OUT "); never one of\n"
        "                       the inputs; written to a temporary and renamed\n\n"
        "Each option is given at most once.\n\n"
        "exit codes: 0 ok, 1 invalid input, 2 usage or I/O error\n");
}

typedef struct {
    const char *scales, *stats, *eval, *out;
    int layer, tp;
    double clip_threshold;
} options;

/* -1 on a usage error (message printed), 1 for --help, 0 to run. */
static int parse_options(int argc, char **argv, options *o)
{
    enum { O_STATS = 256, O_EVAL, O_LAYER, O_CLIP, O_TP, O_OUT, O_HELP };
    static const struct option longopts[] = {
        {"stats", required_argument, 0, O_STATS},
        {"eval", required_argument, 0, O_EVAL},
        {"layer", required_argument, 0, O_LAYER},
        {"clip-threshold", required_argument, 0, O_CLIP},
        {"tp", required_argument, 0, O_TP},
        {"out", required_argument, 0, O_OUT},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof *o);
    o->out = DEFAULT_OUT;
    o->layer = -1;
    o->clip_threshold = KVCAL_REPORT_CLIP_THRESHOLD;
    optind = 1;
    opterr = 0;
    int c;
    kvcal_cmd_seen_options seen = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        char *end;
        if (kvcal_cmd_mark_option("report", longopts, c, optarg, &seen))
            return -1;
        switch (c) {
        case O_STATS:
            if (kvcal_cmd_parse_path("report", "--stats", optarg, &o->stats))
                return -1;
            break;
        case O_EVAL:
            if (kvcal_cmd_parse_path("report", "--eval", optarg, &o->eval))
                return -1;
            break;
        case O_OUT:
            if (kvcal_cmd_parse_path("report", "--out", optarg, &o->out))
                return -1;
            break;
        case O_LAYER:
            if (kvcal_cmd_parse_int("report", "--layer", optarg, 0, KVCAL_CMD_INT_MAX,
                                    &o->layer))
                return -1;
            break;
        case O_TP:
            if (kvcal_cmd_parse_int("report", "--tp", optarg, 1, 4096, &o->tp))
                return -1;
            break;
        case O_CLIP:
            o->clip_threshold = strtod(optarg, &end);
            if (!optarg[0] || *end ||
                !(o->clip_threshold >= 0 && o->clip_threshold <= 1)) {
                fprintf(stderr,
                        "kvcal report: --clip-threshold '%s': expected a fraction in [0, "
                        "1], e.g. 0.001 for 0.1%%\n",
                        optarg);
                return -1;
            }
            break;
        case 'h':
        case O_HELP:
            return 1;
        case ':':
            fprintf(stderr, "kvcal report: %s needs a value (see --help)\n",
                    argv[optind - 1]);
            return -1;
        default:
            fprintf(stderr, "kvcal report: unknown option '%s' (see --help)\n",
                    argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc - 1) {
        fprintf(stderr,
                "kvcal report: expected at most one SCALES file, got '%s' and '%s'\n",
                argv[optind], argv[optind + 1]);
        return -1;
    }
    if (optind == argc - 1 &&
        kvcal_cmd_parse_path("report", "SCALES", argv[optind], &o->scales))
        return -1;
    if (!o->scales && !o->eval) {
        fprintf(stderr,
                "kvcal report: give a SCALES file, --eval FILE.json, or both (see "
                "--help)\n");
        return -1;
    }
    if (o->stats && !o->scales) {
        fprintf(stderr,
                "kvcal report: --stats needs the SCALES file it was reduced to\n");
        return -1;
    }
    if (o->layer >= 0 && !o->stats) {
        fprintf(stderr,
                "kvcal report: --layer %d picks the layer of the histograms, "
                "which need --stats FILE.h5; give it or leave out --layer\n",
                o->layer);
        return -1;
    }
    return 0;
}

/* The output must be writable and none of the inputs: -1 with a message. */
static int check_output(const options *o)
{
    kvcal_inputs_t *in = NULL;
    kvcal_status st = kvcal_inputs_create(&in);
    if (!st && o->scales)
        st = kvcal_inputs_add(in, o->scales, "the scales file", NULL);
    if (!st && o->stats)
        st = kvcal_inputs_add(in, o->stats, "the statistics", NULL);
    if (!st && o->eval)
        st = kvcal_inputs_add(in, o->eval, "the eval report", NULL);
    if (!st && strlen(o->out) > KVCAL_ATOMIC_PATH_MAX)
        st = kvcal_fail(KVCAL_ERR_IO,
                        "--out %.64s...: output path too long; use a path "
                        "shorter than %zu bytes",
                        o->out, (size_t)KVCAL_ATOMIC_PATH_MAX + 1);
    if (!st)
        st = kvcal_atomic_check(o->out);
    if (!st)
        st = kvcal_inputs_check(in, "--out", o->out);
    kvcal_inputs_destroy(in);
    if (st)
        fprintf(stderr, "kvcal report: %s\n", kvcal_last_error());
    return st ? -1 : 0;
}

/* The statistics (taken of `model`) must be of the scales' model: a field
 * of the identity both files fill in (a name, a count other than 0) is the
 * same in both. */
static kvcal_status check_same_model(const options *o, const kvcal_scales_t *scales,
                                     const kvcal_model_identity *model)
{
    const kvcal_model_identity *a = model, *b = &scales->model;
    const char *field = NULL;
    char in_stats[96], in_scales[96];
    if (a->architecture[0] && b->architecture[0] &&
        strcmp(a->architecture, b->architecture)) {
        field = "architecture";
        snprintf(in_stats, sizeof in_stats, "%.80s", a->architecture);
        snprintf(in_scales, sizeof in_scales, "%.80s", b->architecture);
    } else if (a->model_type[0] && b->model_type[0] &&
               strcmp(a->model_type, b->model_type)) {
        field = "model_type";
        snprintf(in_stats, sizeof in_stats, "%.80s", a->model_type);
        snprintf(in_scales, sizeof in_scales, "%.80s", b->model_type);
    } else if (a->num_attention_heads && b->num_attention_heads &&
               a->num_attention_heads != b->num_attention_heads) {
        field = "num_attention_heads";
        snprintf(in_stats, sizeof in_stats, "%d", a->num_attention_heads);
        snprintf(in_scales, sizeof in_scales, "%d", b->num_attention_heads);
    } else if (a->head_dim && b->head_dim && a->head_dim != b->head_dim) {
        field = "head_dim";
        snprintf(in_stats, sizeof in_stats, "%d", a->head_dim);
        snprintf(in_scales, sizeof in_scales, "%d", b->head_dim);
    }
    if (!field)
        return KVCAL_OK;
    return kvcal_fail(KVCAL_ERR_MISMATCH,
                      "%s: statistics of another model than the scales of %s (model "
                      "%s: %s here, %s there); give the statistics of the same "
                      "calibration",
                      o->stats, o->scales, field, in_stats, in_scales);
}

KVCAL_COMMAND(report, "report", "write an HTML report of scales, statistics and eval");

int kvcal_cmd_report(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc == 1) {
        usage(stdout);
        return KVCAL_EXIT_OK;
    }
    if (rc || check_output(&o))
        return KVCAL_EXIT_USAGE;
    kvcal_scales_t *scales = NULL;
    kvcal_stats_t *stats = NULL;
    cJSON *eval = NULL;
    kvcal_status st = KVCAL_OK;
    kvcal_model_identity stats_model;
    if ((o.scales && (st = kvcal_scales_load(o.scales, NULL, o.tp, &scales))) ||
        (o.stats && (st = kvcal_stats_read_hdf5(o.stats, &stats, &stats_model, NULL))) ||
        (stats && (st = check_same_model(&o, scales, &stats_model))) ||
        (o.eval && (st = kvcal_json_load(o.eval, &eval))))
        goto done;
    const kvcal_report_html_inputs in = {scales, o.scales, stats,   o.stats,
                                         eval,   o.eval,   o.layer, o.clip_threshold};
    if (!(st = kvcal_report_html_write(o.out, &in)))
        printf("wrote %s\n", o.out);
done:
    if (st)
        fprintf(stderr, "kvcal report: %s\n", kvcal_last_error());
    cJSON_Delete(eval);
    kvcal_stats_destroy(stats);
    kvcal_scales_destroy(scales);
    return st ? kvcal_cmd_file_exit_code(st) : KVCAL_EXIT_OK;
}
