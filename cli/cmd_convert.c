/* cli/cmd_convert.c: `kvcal convert FILE --to legacy|kvcal|checkpoint
 * [--model DIR] [--tp N] --out PATH`: reads any scales format into the
 * in-memory set and writes another, saying on stderr what the target
 * cannot hold. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cmd_common.h"
#include "cli/cmd_outputs.h"
#include "cli/command.h"
#include "core/scales.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/scales/scales_io.h"
#include "kvcal.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: kvcal convert FILE --to FORMAT [--model DIR] [--tp N] --out PATH\n"
        "                     [--force-offsets]\n\n"
        "Converts KV-cache scales between formats (FILE: legacy JSON, kvcal JSON, a\n"
        "checkpoint directory / .safetensors shard of any naming below, or a\n"
        "TensorRT-LLM checkpoint directory).\n\n"
        "  --to FORMAT  legacy (sglang --quantization-param-path, vLLM <= 0.6), kvcal "
        "(full\n"
        "               result), checkpoint or compressed-tensors "
        "(kv_scales.safetensors\n"
        "               + config.json with quantization_config.kv_cache_scheme + index,\n"
        "               read by vLLM; an int8 set: type int, an NVFP4 set: num_bits 4\n"
        "               tensor_group with k_global_scale / v_global_scale = 448 x 6 /\n"
        "               amax, compressed-tensors' own schemes, which vLLM 0.32.0\n"
        "               refuses at start and sglang ignores),\n"
        "               modelopt (k_proj.k_scale / v_proj.v_scale, kv_cache_quant_algo\n"
        "               FP8; a ModelOpt-quantized model), quark (k_proj / v_proj /\n"
        "               q_proj.output_scale; a Quark model with an FP8 KV cache),\n"
        "               kv-scale (the old single self_attn.kv_scale; an fp8, modelopt\n"
        "               or quark model), trtllm (rank<r>.safetensors with\n"
        "               kv_cache_scaling_factor + config.json, --tp ranks), ascend\n"
        "               (vllm-ascend's C8: k_proj / v_proj.kv_cache_scale and\n"
        "               kv_cache_offset + quant_model_description.json; int8 sets,\n"
        "               offsets 0 for a symmetric one)\n"
        "  --model DIR  model directory (config.json); required for the checkpoint,\n"
        "               modelopt, quark, kv-scale and ascend targets\n"
        "  --tp N       tensor-parallel size: the rank count a legacy FILE is read with\n"
        "               and a legacy output is written for (default: the file's / 1)\n"
        "  --out PATH   output file (legacy, kvcal) or directory (checkpoint); may be\n"
        "               the model directory itself for --to checkpoint (its config.json\n"
        "               and index are rewritten, every field kept), never FILE or\n"
        "               another input\n"
        "  --force-offsets\n"
        "               --to ascend: write an int8_asym set's non-zero offsets, which\n"
        "               vllm-ascend 0.23.0.post1 ignores on decode (refused without)\n\n"
        "Outputs are written to temporary files beside them and renamed into place\n"
        "once all were written: a failed conversion writes nothing and leaves no\n"
        "directory it created. A symbolic link at --out is written through (the file\n"
        "it names is replaced, the link kept); a link to nothing is refused.\n"
        "exit codes: 0 ok, 1 invalid input, 2 usage or I/O error\n");
}

static int exit_code(kvcal_status st)
{
    return st == KVCAL_ERR_IO || st == KVCAL_ERR_INVALID_ARG || st == KVCAL_ERR_NOMEM
               ? KVCAL_EXIT_USAGE
               : KVCAL_EXIT_INVALID;
}

/* The tensor-parallel size FILE was written for, which a legacy or trtllm
 * output keeps when --tp is not given: a legacy file's rank count (read
 * without the model, the loader gives each rank one head), a TensorRT-LLM
 * checkpoint's mapping.tp_size (else world_size); 1 for the other formats. */
static int input_tp(const char *path)
{
    kvcal_report_t *rep = NULL;
    if (kvcal_scales_validate_file(path, NULL, 0, &rep))
        return 1;
    const kvcal_format f = kvcal_report_format(rep);
    kvcal_report_destroy(rep);
    int tp = 1;
    if (f == KVCAL_FORMAT_LEGACY_JSON) {
        kvcal_scales_t *t = NULL;
        if (!kvcal_scales_load(path, NULL, 0, &t))
            tp = kvcal_scales_num_kv_heads(t);
        kvcal_scales_destroy(t);
    } else if (f == KVCAL_FORMAT_TRTLLM) {
        char p[4096];
        cJSON *cfg = NULL;
        if (!kvcal_path_join(p, sizeof p, path, "config.json") &&
            !kvcal_json_load(p, &cfg)) {
            const cJSON *map = cJSON_GetObjectItemCaseSensitive(cfg, "mapping");
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(map, "tp_size");
            if (!cJSON_IsNumber(t))
                t = cJSON_GetObjectItemCaseSensitive(map, "world_size");
            if (cJSON_IsNumber(t) && t->valuedouble >= 1 &&
                t->valuedouble <= KVCAL_TP_MAX && t->valuedouble == (int)t->valuedouble)
                tp = (int)t->valuedouble;
        }
        cJSON_Delete(cfg);
    }
    return tp;
}

/* Whether some layer has K != V, and whether two heads of a layer differ. */
static void describe(const kvcal_scales_t *s, int *kv_differ, int *heads_differ)
{
    *kv_differ = *heads_differ = 0;
    for (int l = 0; l < kvcal_scales_num_layers(s); l++) {
        float k0, v0;
        kvcal_scales_get_head(s, l, 0, &k0, &v0);
        for (int h = 0; h < kvcal_scales_num_kv_heads(s); h++) {
            float k, v;
            kvcal_scales_get_head(s, l, h, &k, &v);
            *kv_differ |= k != v;
            *heads_differ |= k != k0 || v != v0;
        }
    }
}

/* Tells on stderr what the target format loses or cannot express. */
static void report_losses(const kvcal_scales_t *s, kvcal_format to, int tp)
{
    int kv_differ, heads_differ;
    describe(s, &kv_differ, &heads_differ);
    if (to == KVCAL_FORMAT_LEGACY_JSON) {
        if (kv_differ)
            fprintf(stderr,
                    "convert: lost: separate K and V scales become one value per layer "
                    "and rank, max(k, v)\n");
        if (heads_differ && kvcal_scales_num_kv_heads(s) > tp)
            fprintf(stderr,
                    "convert: lost: per-head scales become one value per rank (max "
                    "over the %d kv heads each rank holds at tp %d)\n",
                    kvcal_scales_num_kv_heads(s) / tp, tp);
    }
    if (s->mla_kv_lora_rank && to != KVCAL_FORMAT_KVCAL_JSON)
        fprintf(stderr,
                "convert: note: scales of an MLA model's latent entry: vLLM 0.32.0 "
                "loads no checkpoint KV scale into an MLA layer (k_scale stays 1.0)%s; "
                "the kvcal format keeps the latent and RoPE parts' absmax "
                "(schemas/README.md)\n",
                to == KVCAL_FORMAT_MODELOPT
                    ? ", sglang 0.5.23 loads k_proj.k_scale into attn_mqa.k_scale"
                    : "");
    if (to == KVCAL_FORMAT_CHECKPOINT && !kv_differ && !s->mla_kv_lora_rank)
        fprintf(stderr,
                "convert: note: the source holds %s: k_scale == v_scale in every "
                "layer\n",
                s->kv_shared
                    ? "one value for K and V (legacy format or a single kv_scale)"
                    : "equal K and V scales");
    const int nvfp4 = s->format == KVCAL_KV_FORMAT_NVFP4;
    if (to == KVCAL_FORMAT_CHECKPOINT && (nvfp4 || s->format == KVCAL_KV_FORMAT_INT8))
        fprintf(
            stderr,
            "convert: note: compressed-tensors' %s kv_cache_scheme: vLLM 0.32.0 "
            "refuses it at start (NotImplementedError), sglang 0.5.23 ignores it "
            "(scale 1.0); for compressed-tensors' own consumers (schemas/README.md)\n",
            nvfp4 ? "NVFP4 (num_bits 4, tensor_group)" : "int8 (type int)");
    if (to == KVCAL_FORMAT_CHECKPOINT && nvfp4 && heads_differ)
        fprintf(stderr, "convert: lost: per-head scales become one global scale per "
                        "layer (from the max over its kv heads): compressed-tensors' "
                        "NVFP4 holds one\n");
    else if (to == KVCAL_FORMAT_CHECKPOINT && !nvfp4 &&
             kvcal_scales_granularity(s) == KVCAL_GRANULARITY_HEAD)
        fprintf(stderr,
                "convert: note: per-head scales are written with kv_cache_scheme "
                "strategy \"attn_head\": vLLM's compressed-tensors method loads them "
                "(its FlashAttention 3 backend applies them per head, on Hopper); "
                "sglang reads per-tensor scales only\n");
    if (to != KVCAL_FORMAT_CHECKPOINT && to != KVCAL_FORMAT_LEGACY_JSON &&
        to != KVCAL_FORMAT_KVCAL_JSON && to != KVCAL_FORMAT_ASCEND && heads_differ)
        fprintf(stderr,
                "convert: lost: per-head scales become one per layer (the max over "
                "its kv heads): %s holds no per-head scales\n",
                kvcal_format_name(to));
    if ((to == KVCAL_FORMAT_KV_SCALE || to == KVCAL_FORMAT_TRTLLM) && kv_differ)
        fprintf(stderr,
                "convert: lost: separate K and V scales become one value per layer, "
                "max(k, v)\n");
    if (to == KVCAL_FORMAT_ASCEND && s->format == KVCAL_KV_FORMAT_INT8)
        fprintf(stderr, "convert: note: a symmetric int8 set: every kv_cache_offset is "
                        "0\n");
    if (to != KVCAL_FORMAT_KVCAL_JSON && to != KVCAL_FORMAT_QUARK && s->has_q)
        fprintf(stderr, "convert: lost: the query scales (q_scale; kept by the kvcal and "
                        "quark formats)\n");
    if (to != KVCAL_FORMAT_KVCAL_JSON &&
        (s->has_absmax || s->has_clip || s->provenance.observer[0]))
        fprintf(stderr,
                "convert: lost: observed absmax, clipping estimates and calibration "
                "provenance (kept only by the kvcal format)\n");
}

/* Whether an output of `to` at `out` would replace an input: FILE (the
 * scales converted) or, unless the checkpoint goes into the model directory
 * itself, a file of the model. -1 with the message printed. */
static int check_outputs(const char *path, const char *model, kvcal_format to,
                         const char *out)
{
    const char *names[KVCAL_CMD_MAX_DIR_FILES];
    char files[KVCAL_CMD_MAX_DIR_FILES][4096];
    int n = 0, count = kvcal_cmd_dir_files(to, model, names, KVCAL_CMD_MAX_DIR_FILES);
    if (!kvcal_format_is_dir(to)) {
        snprintf(files[n++], sizeof files[0], "%s", out);
    } else {
        for (int i = 0; i < count; i++)
            if (kvcal_path_join(files[n++], sizeof files[0], out, names[i]) ||
                strlen(out) + 64 >= sizeof files[0]) {
                fprintf(stderr,
                        "kvcal convert: --out %.64s...: output path too long; use a path "
                        "shorter than %zu bytes\n",
                        out, sizeof files[0] - 64);
                return -1;
            }
    }
    int into_model = kvcal_format_is_dir(to) && to != KVCAL_FORMAT_TRTLLM &&
                     kvcal_path_same_file(out, model);
    kvcal_inputs_t *in = NULL;
    kvcal_status st = kvcal_inputs_create(&in);
    if (!st)
        st = kvcal_inputs_add(in, path, "the scales file being converted",
                              kvcal_cmd_is_model_file);
    if (!st && model && !into_model)
        st = kvcal_cmd_add_model_inputs(in, model);
    for (int i = 0; i < n && !st; i++)
        if (!(st = kvcal_atomic_check(files[i])))
            st = kvcal_inputs_check(in, "--out", files[i]);
    kvcal_inputs_destroy(in);
    if (st)
        fprintf(stderr, "kvcal convert: %s\n", kvcal_last_error());
    return st ? -1 : 0;
}

/* Writes s in `to` at out as one batch: everything, or nothing and no
 * directory it created. */
static kvcal_status write_output(const kvcal_scales_t *s, kvcal_format to,
                                 const char *out, const char *model, int tp,
                                 int force_offsets)
{
    kvcal_atomic_batch_t *batch = NULL;
    kvcal_status st = kvcal_atomic_batch_begin(&batch);
    if (!st && kvcal_format_is_dir(to))
        st = kvcal_atomic_batch_mkdir(batch, out);
    if (!st)
        st = to == KVCAL_FORMAT_ASCEND
                 ? kvcal_scales_write_ascend(s, out, model, force_offsets)
                 : kvcal_scales_write(s, to, out, model, tp);
    if (st) {
        kvcal_atomic_batch_abort(batch);
        return st;
    }
    return kvcal_atomic_batch_commit(batch);
}

KVCAL_COMMAND(convert, "convert", "convert scales between every format engines read");

int kvcal_cmd_convert(int argc, char **argv)
{
    static const struct option opts[] = {
        {"to", required_argument, NULL, 'T'},
        {"model", required_argument, NULL, 'm'},
        {"tp", required_argument, NULL, 't'},
        {"out", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {"force-offsets", no_argument, NULL, 'F'},
        {NULL, 0, NULL, 0},
    };
    const char *model = NULL, *out = NULL;
    kvcal_format to = KVCAL_FORMAT_UNKNOWN;
    int tp = 0, c, force_offsets = 0;
    kvcal_cmd_seen_options seen = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "T:m:t:o:h", opts, NULL)) != -1) {
        if (kvcal_cmd_mark_option("convert", opts, c, optarg, &seen))
            return KVCAL_EXIT_USAGE;
        switch (c) {
        case 'F':
            force_offsets = 1;
            break;
        case 'T':
            if (kvcal_cmd_parse_format(optarg, &to)) {
                fprintf(stderr, "kvcal convert: --to %s: expected %s\n", optarg,
                        KVCAL_CMD_FORMATS);
                return KVCAL_EXIT_USAGE;
            }
            break;
        case 'm':
            if (kvcal_cmd_parse_path("convert", "--model", optarg, &model))
                return KVCAL_EXIT_USAGE;
            break;
        case 't':
            if (kvcal_cmd_parse_int("convert", "--tp", optarg, 1, KVCAL_TP_MAX, &tp))
                return KVCAL_EXIT_USAGE;
            break;
        case 'o':
            if (kvcal_cmd_parse_path("convert", "--out", optarg, &out))
                return KVCAL_EXIT_USAGE;
            break;
        case 'h':
            usage(stdout);
            return KVCAL_EXIT_OK;
        default:
            usage(stderr);
            return KVCAL_EXIT_USAGE;
        }
    }
    if (optind != argc - 1 || to == KVCAL_FORMAT_UNKNOWN || !out) {
        fprintf(stderr, "kvcal convert: expected one FILE, --to and --out\n");
        usage(stderr);
        return KVCAL_EXIT_USAGE;
    }
    if (force_offsets && to != KVCAL_FORMAT_ASCEND) {
        fprintf(stderr, "kvcal convert: --force-offsets goes with --to ascend\n");
        return KVCAL_EXIT_USAGE;
    }
    if (kvcal_format_is_dir(to) && to != KVCAL_FORMAT_TRTLLM && !model) {
        fprintf(stderr,
                "kvcal convert: --to %s needs --model DIR (its config.json is "
                "copied with the KV-cache entries merged)\n",
                kvcal_format_name(to));
        return KVCAL_EXIT_USAGE;
    }
    const char *path;
    if (kvcal_cmd_parse_path("convert", "FILE", argv[optind], &path))
        return KVCAL_EXIT_USAGE;
    if (check_outputs(path, model, to, out))
        return KVCAL_EXIT_USAGE;
    kvcal_scales_t *s = NULL;
    kvcal_status st = kvcal_scales_load(path, model, tp, &s);
    if (st) {
        fprintf(stderr, "kvcal convert: %s\n", kvcal_last_error());
        return exit_code(st);
    }
    const int out_tp = tp ? tp
                       : to == KVCAL_FORMAT_LEGACY_JSON || to == KVCAL_FORMAT_TRTLLM
                           ? input_tp(path)
                           : 1;
    if (kvcal_format_is_dir(to) && to != KVCAL_FORMAT_TRTLLM &&
        to != KVCAL_FORMAT_ASCEND) {
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof p, "%s/model.safetensors", model);
        int single = stat(p, &sb) == 0;
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", model);
        if (!single && stat(p, &sb) != 0)
            fprintf(stderr,
                    "convert: note: %s has no model.safetensors or index: the new "
                    "index lists only kv_scales.safetensors\n",
                    model);
    }
    st = write_output(s, to, out, model, out_tp, force_offsets);
    int rc = KVCAL_EXIT_OK;
    if (st) {
        fprintf(stderr, "kvcal convert: %s\n", kvcal_last_error());
        rc = exit_code(st);
    } else {
        char ranks[32] = "";
        if (to == KVCAL_FORMAT_LEGACY_JSON || to == KVCAL_FORMAT_TRTLLM)
            snprintf(ranks, sizeof ranks, ", %d rank%s", out_tp, out_tp == 1 ? "" : "s");
        report_losses(s, to, out_tp);
        fprintf(stderr, "convert: wrote %s (%s, %d layers x %d kv heads%s)\n", out,
                kvcal_format_name(to), kvcal_scales_num_layers(s),
                kvcal_scales_num_kv_heads(s), ranks);
    }
    kvcal_scales_destroy(s);
    return rc;
}
