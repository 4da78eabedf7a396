/* io/scales/scales_io.c: format detection, and the public load / write / validate
 * entry points of include/kvcal.h. */
#include "io/scales/scales_io.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"
#include "io/file_read.h"
#include "io/json_file.h"

const char *kvcal_format_name(kvcal_format format)
{
    switch (format) {
    case KVCAL_FORMAT_LEGACY_JSON:
        return "legacy-json";
    case KVCAL_FORMAT_KVCAL_JSON:
        return "kvcal-json";
    case KVCAL_FORMAT_CHECKPOINT:
        return "checkpoint";
    case KVCAL_FORMAT_MODELOPT:
        return "modelopt";
    case KVCAL_FORMAT_QUARK:
        return "quark";
    case KVCAL_FORMAT_KV_SCALE:
        return "kv-scale";
    case KVCAL_FORMAT_TRTLLM:
        return "trtllm";
    case KVCAL_FORMAT_ASCEND:
        return "ascend";
    case KVCAL_FORMAT_UNKNOWN:
        break;
    }
    return "unknown";
}

/* 1 when the file starts like a safetensors file (8-byte little-endian
 * header length that fits the file, then '{'), or is named *.safetensors. */
static int looks_like_safetensors(const char *path, long long size)
{
    size_t n = strlen(path);
    if (n > 12 && !strcmp(path + n - 12, ".safetensors"))
        return 1;
    unsigned char b[9];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(b, 1, sizeof b, f);
    fclose(f);
    if (got != sizeof b || b[8] != '{')
        return 0;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = len << 8 | b[i];
    return len <= (uint64_t)size - 8;
}

/* Turns a JSON parse failure into a finding naming line and column and
 * what an engine's Python json does with the same text. */
static void report_not_json(kvcal_report_t *rep, const char *name, const char *detail)
{
    size_t n = strlen(name);
    const char *d = detail;
    if (!strncmp(d, name, n) && d[n] == ':')
        d += n + 1;
    int line = 0, col = 0, used = 0;
    const char *consequence = "sglang cannot parse it and uses scale 1.0 for every layer";
    if (strstr(d, "duplicate key"))
        consequence = "Python's json (sglang) silently keeps the last value, other "
                      "readers the first";
    else if (strstr(d, "NaN") || strstr(d, "Infinity"))
        consequence = "Python's json (sglang) reads it and the layer's cache becomes NaN";
    else if (strstr(d, "out of the range"))
        consequence = "Python's json (sglang) reads it as Infinity and the layer's cache "
                      "becomes NaN";
    if (sscanf(d, "%d:%d: %n", &line, &col, &used) == 2 && used > 0)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_PARSE, "", consequence,
                         "not JSON at line %d, column %d: %s", line, col, d + used);
    else
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_PARSE, "", consequence,
                         "not JSON: %s", d[0] == ' ' ? d + 1 : d);
}

/* Detects the format of path and runs its checker. An unreadable path is
 * an I/O error status; everything about the content is a finding. */
static kvcal_status check_any(const char *path, const kvcal_scales_ctx *ctx,
                              kvcal_report_t *rep, kvcal_scales_t **out)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot open: %s; check the path", path,
                          strerror(errno));
    if (S_ISDIR(sb.st_mode) && kvcal_scales_is_trtllm_dir(path))
        return kvcal_scales_check_trtllm(path, ctx, rep, out);
    if (S_ISDIR(sb.st_mode) && kvcal_scales_is_ascend_dir(path))
        return kvcal_scales_check_ascend(path, ctx, rep, out);
    if (S_ISDIR(sb.st_mode) ||
        (S_ISREG(sb.st_mode) && looks_like_safetensors(path, sb.st_size)))
        return kvcal_scales_check_checkpoint(path, ctx, rep, out);
    if (!S_ISREG(sb.st_mode))
        return kvcal_file_check_input(path, "scales file", 1);
    if (sb.st_size == 0) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_PARSE, "",
                         "sglang cannot parse it and uses scale 1.0 for every layer",
                         "the file is empty");
        return KVCAL_OK;
    }
    cJSON *root = NULL;
    kvcal_status st = kvcal_json_load(path, &root);
    if (st == KVCAL_ERR_PARSE) {
        report_not_json(rep, path, kvcal_last_error());
        return kvcal_report_status(rep);
    }
    if (st)
        return st;
    if (cJSON_IsObject(root) && cJSON_HasObjectItem(root, "format"))
        st = kvcal_scales_check_kvcal_json(root, ctx, rep, out);
    else if (cJSON_IsObject(root) && cJSON_HasObjectItem(root, "kv_cache"))
        st = kvcal_scales_check_legacy(root, ctx, rep, out);
    else
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "", KVCAL_LEGACY_REJECTED,
            "neither a legacy scales file (no \"kv_cache\") nor a kvcal one (no "
            "\"format\")");
    cJSON_Delete(root);
    return st;
}

/* Loads model_dir's config into *mc and points ctx at it (or at nothing). */
static kvcal_status make_ctx(const char *path, const char *model_dir, int tp,
                             kvcal_model_config *mc, kvcal_scales_ctx *ctx)
{
    ctx->name = path;
    ctx->model = NULL;
    ctx->tp = tp > 0 ? tp : 0;
    if (!model_dir)
        return KVCAL_OK;
    kvcal_status st = kvcal_model_config_load(model_dir, mc);
    if (st)
        return st;
    ctx->model = mc;
    return KVCAL_OK;
}

kvcal_status kvcal_scales_validate_file(const char *path, const char *model_dir, int tp,
                                        kvcal_report_t **out)
{
    if (!out || !path)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_scales_validate_file: NULL argument");
    *out = NULL;
    kvcal_model_config mc;
    kvcal_scales_ctx ctx;
    kvcal_report_t *rep = NULL;
    kvcal_status st = make_ctx(path, model_dir, tp, &mc, &ctx);
    if (!st)
        st = kvcal_report_create(&rep);
    if (!st)
        st = check_any(path, &ctx, rep, NULL);
    if (st) {
        kvcal_report_destroy(rep);
        return st;
    }
    *out = rep;
    return KVCAL_OK;
}

kvcal_status kvcal_scales_load(const char *path, const char *model_dir, int tp,
                               kvcal_scales_t **out)
{
    if (!out || !path)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_scales_load: NULL argument");
    *out = NULL;
    kvcal_model_config mc;
    kvcal_scales_ctx ctx;
    kvcal_report_t *rep = NULL;
    kvcal_scales_t *s = NULL;
    kvcal_status st = make_ctx(path, model_dir, tp, &mc, &ctx);
    if (!st)
        st = kvcal_report_create(&rep);
    if (!st)
        st = check_any(path, &ctx, rep, &s);
    if (!st)
        st = kvcal_report_fail_first(rep, path);
    if (!st && !s)
        st = kvcal_fail(KVCAL_ERR_FORMAT, "%s: no scales could be read", path);
    kvcal_report_destroy(rep);
    if (st) {
        kvcal_scales_destroy(s);
        return st;
    }
    *out = s;
    return KVCAL_OK;
}

kvcal_status kvcal_scales_write(const kvcal_scales_t *scales, kvcal_format format,
                                const char *path, const char *model_dir, int tp)
{
    if (!scales || !path)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_scales_write: NULL argument");
    const int nvfp4 = scales->format == KVCAL_KV_FORMAT_NVFP4;
    if (format == KVCAL_FORMAT_ASCEND)
        return kvcal_scales_write_ascend(scales, path, model_dir, 0);
    /* compressed-tensors describes int8 (symmetric) and NVFP4 caches too */
    const int ct = format == KVCAL_FORMAT_CHECKPOINT &&
                   (nvfp4 || scales->format == KVCAL_KV_FORMAT_INT8);
    if (scales->format != KVCAL_KV_FORMAT_FP8_E4M3 && format != KVCAL_FORMAT_KVCAL_JSON &&
        !(nvfp4 && format == KVCAL_FORMAT_MODELOPT) && !ct)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: %s scales: %s (schemas/README.md); write the kvcal format%s "
            "with " KVCAL_FORMAT_OPTIONS,
            path,
            nvfp4                                         ? "NVFP4"
            : scales->format == KVCAL_KV_FORMAT_INT8_ASYM ? "int8_asym"
                                                          : "int8",
            nvfp4 ? "vLLM reads NVFP4 global scales only from a ModelOpt checkpoint "
                    "(kv_cache_quant_algo NVFP4); sglang refuses another dtype"
                  : "sglang refuses another dtype and no vLLM loader gives a static "
                    "int8 cache its scales (compressed-tensors refuses type int)",
            nvfp4 ? ", modelopt or checkpoint (compressed-tensors)"
            : scales->format == KVCAL_KV_FORMAT_INT8
                ? ", ascend (vllm-ascend's C8) or checkpoint (compressed-tensors)"
                : " or ascend (vllm-ascend's C8)");
    const int uncached = kvcal_scales_uncached_layers(scales);
    if (uncached && (format == KVCAL_FORMAT_LEGACY_JSON || format == KVCAL_FORMAT_TRTLLM))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: %d of the %d layers cache nothing (a hybrid model's "
            "linear attention) and this format holds a scale for every "
            "layer; write the checkpoint format (or modelopt, quark, kv-scale, "
            "kvcal) with " KVCAL_FORMAT_OPTIONS,
            path, uncached, scales->num_layers);
    switch (format) {
    case KVCAL_FORMAT_LEGACY_JSON:
        return kvcal_scales_write_legacy(scales, path, tp > 0 ? tp : 1);
    case KVCAL_FORMAT_KVCAL_JSON:
        return kvcal_scales_write_kvcal_json(scales, path);
    case KVCAL_FORMAT_CHECKPOINT:
    case KVCAL_FORMAT_MODELOPT:
    case KVCAL_FORMAT_QUARK:
    case KVCAL_FORMAT_KV_SCALE:
        return kvcal_scales_write_checkpoint(scales, format, path, model_dir);
    case KVCAL_FORMAT_TRTLLM:
        return kvcal_scales_write_trtllm(scales, path, tp > 0 ? tp : 1);
    case KVCAL_FORMAT_ASCEND:
    case KVCAL_FORMAT_UNKNOWN:
        break;
    }
    return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: unknown scales format %d", path,
                      (int)format);
}
