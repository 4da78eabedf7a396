/* cli/cmd_validate_scales.c: `kvcal validate-scales FILE [--model DIR]
 * [--tp N] [--json] [--strict]`: tells, before deployment, whether an
 * engine will load a scales file or silently fall back to scale 1.0. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cmd_common.h"
#include "cli/command.h"
#include "io/scales/scales_io.h"
#include "kvcal.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: kvcal validate-scales FILE [--model DIR] [--tp N] [--json] [--strict]\n\n"
        "Checks a KV-cache scales file (legacy JSON, kvcal JSON, a checkpoint\n"
        "directory / .safetensors shard with k_scale/v_scale or the ModelOpt, Quark\n"
        "or single kv_scale names, a TensorRT-LLM checkpoint directory, or a\n"
        "vllm-ascend C8 directory with quant_model_description.json) the way vLLM,\n"
        "sglang, TensorRT-LLM and vllm-ascend read it, and says what the engine would\n"
        "do with each problem.\n\n"
        "  --model DIR  model directory (config.json): checks layers, kv heads, "
        "model_type\n"
        "               and the architecture (sglang reads legacy files for few)\n"
        "  --tp N       tensor-parallel size the model is served with (legacy files "
        "hold\n"
        "               one entry per rank; default: the file's rank count)\n"
        "  --json       print the findings as JSON on stdout\n"
        "  --strict     warnings fail too (exit 1)\n\n"
        "exit codes: 0 valid, 1 invalid (or warnings with --strict), 2 usage or I/O "
        "error\n");
}

static int print_json(const char *path, const kvcal_report_t *rep, int passes)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "findings");
    cJSON_AddStringToObject(root, "file", path);
    cJSON_AddStringToObject(root, "format", kvcal_format_name(kvcal_report_format(rep)));
    cJSON_AddBoolToObject(root, "valid", passes);
    cJSON_AddNumberToObject(root, "errors",
                            kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR));
    cJSON_AddNumberToObject(root, "warnings",
                            kvcal_report_count_severity(rep, KVCAL_SEVERITY_WARNING));
    for (int i = 0; list && i < kvcal_report_count(rep); i++) {
        kvcal_finding f;
        kvcal_report_get(rep, i, &f);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(list, o);
        cJSON_AddStringToObject(o, "severity",
                                f.severity == KVCAL_SEVERITY_ERROR ? "error" : "warning");
        cJSON_AddStringToObject(o, "place", f.place);
        cJSON_AddStringToObject(o, "message", f.message);
        cJSON_AddStringToObject(o, "consequence", f.consequence);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "kvcal validate-scales: out of memory\n");
        return KVCAL_EXIT_USAGE;
    }
    printf("%s\n", text);
    free(text);
    return 0;
}

static void print_text(const char *path, const kvcal_report_t *rep, int passes)
{
    for (int i = 0; i < kvcal_report_count(rep); i++) {
        kvcal_finding f;
        kvcal_report_get(rep, i, &f);
        printf("%s: %s%s%s%s%s%s\n", path,
               f.severity == KVCAL_SEVERITY_WARNING ? "warning: " : "", f.place,
               f.place[0] ? ": " : "", f.message, f.consequence[0] ? ": " : "",
               f.consequence);
    }
    int errors = kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR);
    int warnings = kvcal_report_count_severity(rep, KVCAL_SEVERITY_WARNING);
    if (errors + warnings > kvcal_report_count(rep))
        printf("%s: (%d more findings not shown)\n", path,
               errors + warnings - kvcal_report_count(rep));
    printf("%s: %s: %s (%d error%s, %d warning%s)\n", path,
           kvcal_format_name(kvcal_report_format(rep)), passes ? "valid" : "INVALID",
           errors, errors == 1 ? "" : "s", warnings, warnings == 1 ? "" : "s");
}

KVCAL_COMMAND(validate_scales, "validate-scales", "check scales for a model and TP size");

int kvcal_cmd_validate_scales(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'}, {"tp", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},        {"strict", no_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *model = NULL;
    int tp = 0, json = 0, strict = 0, c;
    kvcal_cmd_seen_options seen = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:t:jsh", opts, NULL)) != -1) {
        if (kvcal_cmd_mark_option("validate-scales", opts, c, optarg, &seen))
            return KVCAL_EXIT_USAGE;
        switch (c) {
        case 'm':
            if (kvcal_cmd_parse_path("validate-scales", "--model", optarg, &model))
                return KVCAL_EXIT_USAGE;
            break;
        case 't':
            if (kvcal_cmd_parse_int("validate-scales", "--tp", optarg, 1, KVCAL_TP_MAX,
                                    &tp))
                return KVCAL_EXIT_USAGE;
            break;
        case 'j':
            json = 1;
            break;
        case 's':
            strict = 1;
            break;
        case 'h':
            usage(stdout);
            return KVCAL_EXIT_OK;
        default:
            usage(stderr);
            return KVCAL_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "kvcal validate-scales: expected exactly one FILE\n");
        usage(stderr);
        return KVCAL_EXIT_USAGE;
    }
    const char *path;
    if (kvcal_cmd_parse_path("validate-scales", "FILE", argv[optind], &path))
        return KVCAL_EXIT_USAGE;
    kvcal_report_t *rep = NULL;
    kvcal_status st = kvcal_scales_validate_file(path, model, tp, &rep);
    if (st) {
        fprintf(stderr, "kvcal validate-scales: %s\n", kvcal_last_error());
        return KVCAL_EXIT_USAGE;
    }
    if (!model && !json && !kvcal_format_is_dir(kvcal_report_format(rep)))
        fprintf(stderr,
                "note: no --model given: layer count, kv heads and model_type were "
                "not checked against config.json\n");
    int passes = kvcal_report_passes(rep, strict);
    int rc = json ? print_json(path, rep, passes) : (print_text(path, rep, passes), 0);
    kvcal_report_destroy(rep);
    return rc ? rc : passes ? KVCAL_EXIT_OK : KVCAL_EXIT_INVALID;
}
