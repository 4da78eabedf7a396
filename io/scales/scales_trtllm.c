/* io/scales/scales_trtllm.c: TensorRT-LLM's KV-cache scaling factors, the
 * legacy per-layer `kv_cache_scaling_factor` of its converted checkpoints.
 *
 * What TensorRT-LLM does (read from its source, tensorrt_llm/quantization/
 * quantize.py kv_cache_quantize() and the models' convert_checkpoint
 * helpers, e.g. models/llama/convert.py):
 * - A converted checkpoint is a directory: config.json (TensorRT-LLM's own
 *   PretrainedConfig: architecture, num_hidden_layers, num_key_value_heads,
 *   "quantization": {"quant_algo", "kv_cache_quant_algo"}, "mapping":
 *   {"world_size", "tp_size", "pp_size"}) and one rank<r>.safetensors per
 *   rank of mapping.world_size.
 * - With kv_cache_quant_algo FP8 (or INT8) every attention layer declares
 *   `transformer.layers.<i>.attention.kv_cache_scaling_factor`, a float32
 *   Parameter of shape (1,): one dequantization scale shared by K and V
 *   (absmax / 448 for FP8), the same value in every rank's file. Without a
 *   KV-cache algorithm no layer declares it and the cache is not quantized.
 * kvcal writes config.json (the fields above that the scales depend on) and
 * rank<r>.safetensors holding only the factors, max(k, v) over the layer's
 * heads: the scales to merge into the weights trtllm's convert_checkpoint
 * writes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/status.h"
#include "io/atomic_file.h"
#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"
#include "io/path.h"
#include "io/scales/scales_io.h"

#define TRT_FACTOR "transformer.layers.%d.attention.kv_cache_scaling_factor"
#define TRT_PREFIX "transformer.layers."
#define TRT_SUFFIX ".attention.kv_cache_scaling_factor"
#define TRT_UNUSED "TensorRT-LLM does not use the factors"

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int kvcal_scales_is_trtllm_dir(const char *dir)
{
    char p[4096];
    return !kvcal_path_join(p, sizeof p, dir, "rank0.safetensors") && is_file(p);
}

/* An integer field of obj; -1 when absent or not a positive integer. */
static int int_field(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 65536 &&
                   v->valuedouble == (int)v->valuedouble
               ? (int)v->valuedouble
               : -1;
}

/* The layer of a factor's name, or -1. */
static long factor_layer(const char *name)
{
    size_t n = strlen(name), np = sizeof TRT_PREFIX - 1, ns = sizeof TRT_SUFFIX - 1;
    if (n <= np + ns || strncmp(name, TRT_PREFIX, np) ||
        strcmp(name + n - ns, TRT_SUFFIX))
        return -1;
    char digits[16];
    size_t d = n - np - ns;
    if (d >= sizeof digits)
        return -1;
    memcpy(digits, name + np, d);
    digits[d] = '\0';
    return kvcal_parse_index_key(digits);
}

/* Checks config.json; returns the rank count (0 on error) and the layer
 * count in *layers. */
static int check_config(const cJSON *cfg, const kvcal_scales_ctx *ctx,
                        kvcal_report_t *rep, int *layers)
{
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(cfg, "quantization");
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(q, "kv_cache_quant_algo");
    if (!cJSON_IsString(kv) || strcasecmp(kv->valuestring, "FP8"))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "config.json: quantization.kv_cache_quant_algo",
                         TRT_UNUSED
                         ": without FP8 no layer declares "
                         "kv_cache_scaling_factor and the cache stays unquantized",
                         "%s, expected \"FP8\"",
                         cJSON_IsString(kv) ? kv->valuestring : "missing or null");
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(cfg, "mapping");
    int world = int_field(map, "world_size");
    if (world < 0) {
        int t = int_field(map, "tp_size"), pp = int_field(map, "pp_size");
        world = t > 0 ? t * (pp > 0 ? pp : 1) : 1;
    }
    *layers = int_field(cfg, "num_hidden_layers");
    if (*layers < 0 && ctx->model)
        *layers = ctx->model->num_layers;
    if (*layers < 0) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "config.json: num_hidden_layers",
                         "TensorRT-LLM cannot build the engine", "missing");
        return 0;
    }
    if (ctx->model && ctx->model->num_layers != *layers)
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH,
            "config.json: num_hidden_layers", "the factors belong to another model",
            "%d, but the model has %d layers", *layers, ctx->model->num_layers);
    if (ctx->tp > 0 && ctx->tp != world) {
        char why[256];
        snprintf(why, sizeof why,
                 "TensorRT-LLM builds one engine per rank of the checkpoint's mapping, "
                 "not --tp; it is for tp %d (--tp %d); to serve at tp %d, rewrite it "
                 "(kvcal convert DIR --to trtllm --tp %d)",
                 world, world, ctx->tp, ctx->tp);
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH,
                         "config.json: mapping.world_size", why, "%d ranks but tp %d",
                         world, ctx->tp);
    }
    return world;
}

kvcal_status kvcal_scales_check_trtllm(const char *dir, const kvcal_scales_ctx *ctx,
                                       kvcal_report_t *rep, kvcal_scales_t **out)
{
    kvcal_report_set_format(rep, KVCAL_FORMAT_TRTLLM);
    if (out)
        *out = NULL;
    char p[4096];
    cJSON *cfg = NULL;
    float *vals = NULL; /* (L) max over the ranks */
    kvcal_checkpoint_t *ck = NULL;
    kvcal_status st = KVCAL_OK;
    if (kvcal_path_join(p, sizeof p, dir, "config.json") || !is_file(p) ||
        kvcal_json_load(p, &cfg) != KVCAL_OK) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "config.json",
                         "TensorRT-LLM cannot load the checkpoint", "%s",
                         is_file(p) ? kvcal_last_error() : "missing");
        goto done;
    }
    int layers = 0, world = check_config(cfg, ctx, rep, &layers);
    if (!world)
        goto done;
    vals = calloc((size_t)layers, sizeof *vals);
    if (!vals) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    kvcal_value_tally tally = {0};
    for (int r = 0;; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank%d.safetensors", r);
        if (kvcal_path_join(p, sizeof p, dir, name) || !is_file(p)) {
            if (r < world)
                kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, name,
                                 "TensorRT-LLM cannot build this rank's engine",
                                 "missing: mapping.world_size is %d", world);
            if (r >= world)
                break;
            continue;
        }
        if (r >= world) {
            kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, name,
                             "TensorRT-LLM never reads it",
                             "beyond mapping.world_size %d", world);
            continue;
        }
        if (kvcal_checkpoint_open(p, &ck) != KVCAL_OK) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_PARSE, name,
                             "TensorRT-LLM cannot load the checkpoint", "%s",
                             kvcal_last_error());
            continue;
        }
        for (int l = 0; l < layers; l++) {
            char t_name[96], place[160];
            snprintf(t_name, sizeof t_name, TRT_FACTOR, l);
            snprintf(place, sizeof place, "%s: %s", name, t_name);
            const kvcal_tensor_info *t = kvcal_checkpoint_find(ck, t_name);
            float v = 0.0f;
            if (!t) {
                kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, place,
                                 "TensorRT-LLM fails to load the rank's weights (the "
                                 "layer declares the factor)",
                                 "missing");
                continue;
            }
            if (t->numel != 1 || t->dtype != KVCAL_DTYPE_F32) {
                kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                                 "TensorRT-LLM declares it a float32 Parameter of shape "
                                 "(1,) and fails to load another",
                                 "%lld values of %s", (long long)t->numel,
                                 kvcal_dtype_name(t->dtype) ? kvcal_dtype_name(t->dtype)
                                                            : "?");
                continue;
            }
            kvcal_tensor_to_f32(t, &v);
            if (kvcal_report_check_value(rep, KVCAL_FORMAT_TRTLLM, (double)v, place,
                                         &tally) &&
                v > vals[l])
                vals[l] = v;
        }
        for (int i = 0; i < kvcal_checkpoint_count(ck); i++) {
            long l = factor_layer(kvcal_checkpoint_at(ck, i)->name);
            if (l >= layers)
                kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH,
                                 kvcal_checkpoint_at(ck, i)->name,
                                 "TensorRT-LLM has no such layer",
                                 "layer %ld beyond num_hidden_layers %d", l, layers);
        }
        kvcal_checkpoint_close(ck);
        ck = NULL;
    }
    kvcal_report_flush_tally(rep, KVCAL_FORMAT_TRTLLM, &tally);
    if (kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR) > 0 || !out)
        goto done;
    int heads = ctx->model ? kvcal_model_config_cache_kv_heads(ctx->model)
                           : int_field(cfg, "num_key_value_heads");
    kvcal_scales_t *s = NULL;
    if ((st = kvcal_scales_create(layers, heads > 0 ? heads : 1, &s)))
        goto done;
    for (int l = 0; l < layers; l++)
        kvcal_scales_set_layer(s, l, vals[l], vals[l]);
    s->granularity = KVCAL_GRANULARITY_TENSOR;
    s->kv_shared = 1;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(cfg, "architecture");
    if (cJSON_IsString(arch))
        snprintf(s->model.architecture, sizeof s->model.architecture, "%s",
                 arch->valuestring);
    if (ctx->model) {
        snprintf(s->model.model_type, sizeof s->model.model_type, "%s",
                 ctx->model->model_type);
        s->model.num_attention_heads = ctx->model->num_attention_heads;
        s->model.head_dim = kvcal_model_config_cache_head_dim(ctx->model);
    }
    *out = s;
done:
    kvcal_checkpoint_close(ck);
    free(vals);
    cJSON_Delete(cfg);
    return st ? st : kvcal_report_status(rep);
}

kvcal_status kvcal_scales_write_trtllm(const kvcal_scales_t *s, const char *dir, int tp)
{
    kvcal_status st = kvcal_scales_check_finite(s, dir);
    if (st)
        return st;
    if (tp < 1 || tp > KVCAL_TP_MAX)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: tp %d out of [1, %d]", dir, tp,
                          KVCAL_TP_MAX);
    if ((st = kvcal_atomic_mkdir(dir)))
        return st;
    int L = s->num_layers;
    char p[4096], *names = malloc((size_t)L * 96);
    float *data = malloc(sizeof(float) * (size_t)L);
    kvcal_tensor_out *t = calloc((size_t)L, sizeof *t);
    cJSON *cfg = cJSON_CreateObject();
    if (!names || !data || !t || !cfg) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    for (int l = 0; l < L; l++) {
        float k, v;
        kvcal_scales_get_tensor(s, l, &k, &v);
        data[l] = k > v ? k : v;
        snprintf(names + (size_t)l * 96, 96, TRT_FACTOR, l);
        t[l].name = names + (size_t)l * 96;
        t[l].dtype = KVCAL_DTYPE_F32;
        t[l].ndim = 1;
        t[l].shape[0] = 1;
        t[l].data = &data[l];
    }
    cJSON *q = cJSON_AddObjectToObject(cfg, "quantization");
    cJSON *map = cJSON_AddObjectToObject(cfg, "mapping");
    if (!(s->model.architecture[0]
              ? cJSON_AddStringToObject(cfg, "architecture", s->model.architecture)
              : cJSON_AddNullToObject(cfg, "architecture")) ||
        !cJSON_AddNumberToObject(cfg, "num_hidden_layers", L) ||
        !cJSON_AddNumberToObject(cfg, "num_key_value_heads", s->num_kv_heads) || !q ||
        !cJSON_AddNullToObject(q, "quant_algo") ||
        !cJSON_AddStringToObject(q, "kv_cache_quant_algo", "FP8") || !map ||
        !cJSON_AddNumberToObject(map, "world_size", tp) ||
        !cJSON_AddNumberToObject(map, "tp_size", tp) ||
        !cJSON_AddNumberToObject(map, "pp_size", 1)) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    char meta[128];
    snprintf(meta, sizeof meta, "{\"format\": \"pt\", \"producer\": \"kvcal %s\"}",
             KVCAL_VERSION_STRING);
    for (int r = 0; r < tp && !st; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank%d.safetensors", r);
        if (kvcal_path_join(p, sizeof p, dir, name))
            st = kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: path too long", dir);
        else
            st = kvcal_safetensors_write(p, t, L, meta);
    }
    if (!st && kvcal_path_join(p, sizeof p, dir, "config.json"))
        st = kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: path too long", dir);
    if (!st)
        st = kvcal_json_write(p, cfg);
done:
    free(names);
    free(data);
    free(t);
    cJSON_Delete(cfg);
    return st;
}
