/* io/scales/scales_checkpoint.c: K/V scales stored in a Hugging Face checkpoint:
 * the compressed-tensors convention vLLM reads today, and the namings of
 * ModelOpt (k_proj.k_scale), Quark (k_proj.output_scale) and the old single
 * kv_scale (schemas/README.md gives each producer's and vLLM's rules).
 *
 * What the producers and vLLM 0.33.0 do (read from their source):
 * - llm-compressor / compressed-tensors (src/compressed_tensors/quantization/
 *   lifecycle/initialize.py) register `k_scale` and `v_scale` on the
 *   attention module: names `model.layers.<i>.self_attn.k_scale` /
 *   `.v_scale`; shape (1,) for strategy "tensor" and (num_kv_heads, 1, 1)
 *   for strategy "attn_head"; dtype the module's dtype (bf16, f16 or f32).
 *   config.json gets quantization_config {"quant_method":
 *   "compressed-tensors", ..., "kv_cache_scheme": {"num_bits": 8, "type":
 *   "float", "strategy": "tensor", "dynamic": false, "symmetric": true}}.
 * - vLLM picks the quantization method from quantization_config.quant_method
 *   (compression_config when quantization_config is absent;
 *   transformers_utils/model_arch_config_convertor.py). Its attention layer
 *   gets a KV-cache method only from compressed-tensors, fp8, modelopt and
 *   quark (get_quant_method of each config): kvcal_checkpoint_loader().
 * - Without a quantization method, AutoWeightsLoader (models/utils.py, used
 *   by Llama, Qwen2, Qwen3) finds no parameter for `...self_attn.k_scale`
 *   and raises ValueError: the model does not load. With a method that has
 *   no KV-cache method (awq, gptq, ...), the tensors are renamed to
 *   `.attn.k_scale` (QuantizationConfig.get_cache_scale_mapper) and skipped
 *   (QuantizationConfig._ignore_unexpected_suffixes): scale 1.0 everywhere.
 * - compressed-tensors (CompressedTensorsKVCacheMethod in
 *   quantization/compressed_tensors/compressed_tensors.py) refuses at start
 *   a scheme that is not 8-bit float, symmetric, strategy tensor or
 *   attn_head; creates k_scale / v_scale as torch.ones(n) (n = num_kv_heads
 *   for attn_head, else 1), so a missing tensor leaves 1.0; loads [1] and
 *   (n) through default_weight_loader (a size mismatch is an
 *   AssertionError) or, for attn_head, a loader that flattens the tensor and
 *   slices each rank's heads with quantization_config.total_num_kv_heads (a
 *   [1] tensor broadcasts at tp 1 and leaves an empty slice on the other
 *   ranks at tp > 1); checks no value.
 * - fp8, modelopt and quark use BaseKVCacheMethod
 *   (quantization/kv_cache.py): k_scale / v_scale start at -1.0 and load
 *   only a single value (KVCacheScaleParameter.weight_loader raises
 *   ValueError otherwise); after loading, both > 0 are used, both < 0 give
 *   1.0, otherwise k_scale must be > 0 (an assertion) and max(k, v) is used
 *   for both.
 * - The deprecated single `.self_attn.kv_scale` is renamed to k_scale
 *   (get_cache_scale_mapper): v_scale stays at its start value. The older
 *   `.self_attn.k_proj.k_scale` (modelopt) is renamed too; this reader also
 *   accepts `.k_proj.output_scale` (older compressed-tensors and quark checkpoints).
 * Written here: f32 tensors (exact for kvcal's float scales; vLLM copies
 * them into float32 parameters), shape [1] or [H, 1, 1], under the names of
 * the format asked for (write_name()); the per-head shape only for
 * compressed-tensors' attn_head, the one method that reads it. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/status.h"
#include "io/atomic_file.h"
#include "io/checkpoint/lm_prefix.h"
#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"
#include "io/scales/scales_io.h"
#include "io/scales/sglang_loaders.h"

#define CK_MAX_LAYERS 65536
#define CK_IGNORED "vLLM uses scale 1.0 for the layer"

/* KIND_KG / KIND_VG: compressed-tensors' NVFP4 global scales (k_global_scale,
 * the reciprocal of kvcal's, 448 x 6 / amax: generate_gparam in
 * quantization/utils/helpers.py), registered instead of k_scale / v_scale
 * under a tensor_group scheme with dynamic "local" (initialize_qparams). */
enum {
    KIND_K = 0,
    KIND_V = 1,
    KIND_KV = 2,
    KIND_Q = 3,
    KIND_PROB = 4,
    KIND_KG = 5,
    KIND_VG = 6,
    KIND_COUNT = 7
};

/* Name suffixes after "model.layers.<i>.self_attn.", by kind, and the
 * format whose producer writes them. */
static const struct {
    const char *suffix;
    int kind;
    kvcal_format format;
} scale_names[] = {
    {"k_scale", KIND_K, KVCAL_FORMAT_CHECKPOINT},
    {"v_scale", KIND_V, KVCAL_FORMAT_CHECKPOINT},
    {"q_scale", KIND_Q, KVCAL_FORMAT_CHECKPOINT},
    {"k_proj.output_scale", KIND_K, KVCAL_FORMAT_QUARK},
    {"v_proj.output_scale", KIND_V, KVCAL_FORMAT_QUARK},
    {"q_proj.output_scale", KIND_Q, KVCAL_FORMAT_QUARK},
    {"prob_output_scale", KIND_PROB, KVCAL_FORMAT_QUARK},
    {"k_proj.k_scale", KIND_K, KVCAL_FORMAT_MODELOPT},
    {"v_proj.v_scale", KIND_V, KVCAL_FORMAT_MODELOPT},
    /* a fused-QKV model's (ModelOpt's Phi-3), and the qkqkv_proj spelling
       (a stacked mapping's "v_proj" -> "qkv_proj" applied to it): vLLM's
       base get_cache_scale_mapper (quantization/base_config.py, regex
       \.self_attn\.qk(?:qk)?v_proj\.([kv])_scale$) renames both to the
       attention's under every quantization method, as
       maybe_remap_kv_scale_name (model_loader/weight_utils.py) does;
       sglang's loaders do not (check_sglang_names) */
    {"qkv_proj.k_scale", KIND_K, KVCAL_FORMAT_MODELOPT},
    {"qkv_proj.v_scale", KIND_V, KVCAL_FORMAT_MODELOPT},
    {"qkqkv_proj.k_scale", KIND_K, KVCAL_FORMAT_MODELOPT},
    {"qkqkv_proj.v_scale", KIND_V, KVCAL_FORMAT_MODELOPT},
    {"kv_scale", KIND_KV, KVCAL_FORMAT_KV_SCALE},
    {"k_global_scale", KIND_KG, KVCAL_FORMAT_CHECKPOINT},
    {"v_global_scale", KIND_VG, KVCAL_FORMAT_CHECKPOINT},
    /* the attention module's own parameters, which both engines' loaders
       take as they are (sglang's ERNIE 4.5 takes no other) */
    {"attn.k_scale", KIND_K, KVCAL_FORMAT_CHECKPOINT},
    {"attn.v_scale", KIND_V, KVCAL_FORMAT_CHECKPOINT},
};

/* The names a format writes after "<prefix>layers.<i>.self_attn.", by
 * kind; NULL where it writes none. */
static const char *write_name(kvcal_format f, int kind)
{
    switch (f) {
    case KVCAL_FORMAT_MODELOPT:
        return kind == KIND_K   ? "k_proj.k_scale"
               : kind == KIND_V ? "v_proj.v_scale"
                                : NULL;
    case KVCAL_FORMAT_QUARK:
        return kind == KIND_K   ? "k_proj.output_scale"
               : kind == KIND_V ? "v_proj.output_scale"
               : kind == KIND_Q ? "q_proj.output_scale"
                                : NULL;
    case KVCAL_FORMAT_KV_SCALE:
        return kind == KIND_KV ? "kv_scale" : NULL;
    default:
        return kind == KIND_K    ? "k_scale"
               : kind == KIND_V  ? "v_scale"
               : kind == KIND_Q  ? "q_scale"
               : kind == KIND_KG ? "k_global_scale"
               : kind == KIND_VG ? "v_global_scale"
                                 : NULL;
    }
}

long kvcal_scales_parse_attn_name(const char *name, const char **suffix, int *layout)
{
    const int lm = kvcal_lm_prefix_of(name);
    if (lm < 0)
        return -1;
    const char *p = name + strlen(kvcal_lm_prefix(lm)) + strlen("layers.");
    char digits[16];
    size_t n = strspn(p, "0123456789");
    if (n == 0 || n >= sizeof digits)
        return -1;
    memcpy(digits, p, n);
    digits[n] = '\0';
    long layer = kvcal_parse_index_key(digits);
    p += n;
    if (layer < 0 || strncmp(p, ".self_attn.", 11))
        return -1;
    *suffix = p + 11;
    if (layout)
        *layout = lm;
    return layer;
}

/* Parses a K/V scale tensor name; returns the layer or -1. *format (may be
 * NULL) gets the format whose producer writes the name. */
static long parse_scale_name_of(const char *name, int *kind, kvcal_format *format,
                                int *layout)
{
    const char *p;
    long layer = kvcal_scales_parse_attn_name(name, &p, layout);
    if (layer < 0)
        return -1;
    for (size_t i = 0; i < sizeof scale_names / sizeof scale_names[0]; i++)
        if (!strcmp(p, scale_names[i].suffix)) {
            *kind = scale_names[i].kind;
            if (format)
                *format = scale_names[i].format;
            return layer;
        }
    return -1;
}

static long parse_scale_name(const char *name, int *kind)
{
    return parse_scale_name_of(name, kind, NULL, NULL);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir/name into buf; returns 0, or -1 when it does not fit. */
static int join(char *buf, size_t size, const char *dir, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* Directory part of a file path ("." when none). */
static void dir_of(const char *path, char *buf, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(buf, size, ".");
    else
        snprintf(buf, size, "%.*s", (int)(slash - path), path);
}

/* --- reading ------------------------------------------------------------- */

/* The quantization methods of vLLM 0.33 whose config gives the attention
 * layer no KV-cache method (their get_quant_method returns None for it). */
static const char *const no_kv_methods[] = {
    "awq",
    "auto_awq",
    "awq_marlin",
    "gptq",
    "auto_gptq",
    "gptq_marlin",
    "moe_wna16",
    "experts_int8",
    "fbgemm_fp8",
    "torchao",
    "inc",
    "humming",
    "fp_quant",
    "mxfp4",
    "gpt_oss_mxfp4",
    "online",
    "fp8_per_tensor",
    "fp8_per_block",
    "fp8_per_channel",
    "int8_per_channel_weight_only",
    "nvfp4_per_token",
    NULL,
};
/* Those whose KV-cache method is BaseKVCacheMethod, unchanged (fp8 is the
 * one kvcal models in full). */
static const char *const base_kv_methods[] = {
    "fp8",
    "modelopt",
    "modelopt_fp4",
    "modelopt_mxfp8",
    "modelopt_mixed",
    "mxfp8",
    "deepseek_v4_fp8",
    "quark",
    NULL,
};

static int in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (!strcmp(*list, s))
            return 1;
    return 0;
}

/* quantization_config as vLLM finds it (compression_config when absent). */
static cJSON *quant_config_of(const cJSON *config)
{
    cJSON *qc = cJSON_GetObjectItemCaseSensitive(config, "quantization_config");
    if (!qc)
        qc = cJSON_GetObjectItemCaseSensitive(config, "compression_config");
    return qc;
}

/* Which of vLLM 0.33's KV-cache loaders reads the scales (io/scales/scales_checkpoint.c
 * says what each does), and the quant_method as vLLM normalizes it. */
typedef enum loader {
    KVCAL_LOADER_NONE,               /* no quantization method: the model does not load */
    KVCAL_LOADER_IGNORED,            /* awq, gptq, ...: the tensors are skipped */
    KVCAL_LOADER_COMPRESSED_TENSORS, /* CompressedTensorsKVCacheMethod */
    KVCAL_LOADER_BASE,               /* fp8, modelopt, quark: BaseKVCacheMethod */
    KVCAL_LOADER_UNKNOWN,            /* a method vLLM 0.33 does not know */
    KVCAL_LOADER_UNKNOWN_MODELOPT,   /* a ModelOpt quant_algo vLLM refuses */
} loader;

/* quantization.quant_algo of a ModelOpt hf_quant_config.json (producer
 * modelopt, or the legacy modelopt_quant_config), NULL when there is none. */
static const char *modelopt_algo(const cJSON *qc)
{
    const cJSON *prod = cJSON_GetObjectItemCaseSensitive(qc, "producer");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(prod, "name");
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(qc, "quantization");
    int modelopt = (cJSON_IsString(name) && !strcmp(name->valuestring, "modelopt")) ||
                   cJSON_HasObjectItem(q, "modelopt_quant_config");
    const cJSON *algo = cJSON_GetObjectItemCaseSensitive(q, "quant_algo");
    return modelopt && cJSON_IsObject(q) && cJSON_IsString(algo) ? algo->valuestring
                                                                 : NULL;
}

static loader loader_of(const cJSON *config, char *method, size_t size)
{
    const cJSON *qc = quant_config_of(config);
    snprintf(method, size, "%s", "");
    if (!cJSON_IsObject(qc))
        return KVCAL_LOADER_NONE;
    const cJSON *qm = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
    if (!cJSON_IsString(qm) || !qm->valuestring[0]) {
        /* ModelOpt's hf_quant_config.json names no quant_method: vLLM sets it
         * from quantization.quant_algo when the producer is modelopt
         * (model_arch_config_convertor.py, _normalize_quantization_config). */
        const char *algo = modelopt_algo(qc);
        if (!algo)
            return KVCAL_LOADER_NONE;
        if (!strcasecmp(algo, "FP8") || !strcasecmp(algo, "FP8_PER_CHANNEL_PER_TOKEN") ||
            !strcasecmp(algo, "FP8_PB_WO"))
            snprintf(method, size, "modelopt");
        else if (!strcasecmp(algo, "NVFP4"))
            snprintf(method, size, "modelopt_fp4");
        else
            return KVCAL_LOADER_UNKNOWN_MODELOPT;
        return KVCAL_LOADER_BASE;
    }
    size_t i = 0;
    for (; qm->valuestring[i] && i + 1 < size; i++)
        method[i] = (char)tolower((unsigned char)qm->valuestring[i]);
    method[i] = '\0';
    if (!strcmp(method, "compressed_tensors"))
        snprintf(method, size, "compressed-tensors");
    if (!strcmp(method, "compressed-tensors"))
        return KVCAL_LOADER_COMPRESSED_TENSORS;
    if (in_list(no_kv_methods, method))
        return KVCAL_LOADER_IGNORED;
    if (in_list(base_kv_methods, method))
        return KVCAL_LOADER_BASE;
    return KVCAL_LOADER_UNKNOWN;
}

/* What the checker learned from config.json. */
typedef struct scheme {
    loader loader;
    int strategy; /* compressed-tensors: 1 attn_head, 0 tensor, -1 none, 2 unchecked */
    int maps_output_scale; /* the config's cache scale mapper renames
                              k_proj.output_scale (fp8, quark) */
    char method[64];       /* quant_method as vLLM normalizes it */
    int nvfp4;             /* modelopt: the cache is NVFP4 (the scales its global
                              scales, amax / (6 x 448)) */
    kvcal_kv_format ct;    /* compressed-tensors: the cache kv_cache_scheme
                              describes (NVFP4: global scales as k_global_scale,
                              448 x 6 / amax) */
} scheme;

/* What the engines do with a compressed-tensors kv_cache_scheme for an int8
 * or NVFP4 cache (schemas/README.md, "compressed-tensors schemes of the
 * other cache dtypes"): one line each. */
static void report_ct_engines(kvcal_report_t *rep, kvcal_kv_format kvf)
{
    const char *place = "config.json: quantization_config.kv_cache_scheme";
    const int nvfp4 = kvf == KVCAL_KV_FORMAT_NVFP4;
    const char *what = nvfp4 ? "NVFP4 (num_bits 4, type float, tensor_group of 16)"
                             : "int8 (num_bits 8, type int)";
    kvcal_report_add(
        rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, place,
        nvfp4 ? "vLLM 0.32.0 refuses to start (NotImplementedError in "
                "CompressedTensorsKVCacheMethod.validate_kv_cache_scheme, "
                "compressed_tensors/compressed_tensors.py: num_bits 8, type float only); "
                "older vLLM refused its strategy tensor_group too"
              : "vLLM 0.32.0 refuses to start (NotImplementedError in "
                "CompressedTensorsKVCacheMethod.validate_kv_cache_scheme, "
                "compressed_tensors/compressed_tensors.py: num_bits 8, type float only); "
                "vLLM before its PR 45312 tested `and` there and read int8 scales as "
                "fp8 scales",
        "vLLM: %s", what);
    kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, place,
                     "sglang 0.5.23 starts but ignores the scheme "
                     "(CompressedTensorsConfig.get_quant_method: \"Ignoring "
                     "compressed-tensors kv_cache_scheme\", static per-tensor fp8 "
                     "only): no KV-cache method, the scale tensors are skipped and "
                     "the cache runs in --kv-cache-dtype at scale 1.0",
                     "sglang: %s", what);
    kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, place,
                     nvfp4 ? "compressed-tensors 0.17.0 parses it (QuantizationArgs) "
                             "and registers k_global_scale / v_global_scale, shape "
                             "[1], 448 x 6 / amax (initialize_qparams, "
                             "generate_gparam): the names and values written here"
                           : "compressed-tensors 0.17.0 parses it (QuantizationArgs) "
                             "and registers k_scale / v_scale of this shape "
                             "(initialize_qparams); kvcal writes absmax / 127 (no value "
                             "clips), its own calibration absmax / 127.5 "
                             "(calculate_qparams: +absmax rounds to 128, clamped to 127)",
                     "compressed-tensors: %s", what);
}

/* Checks kv_cache_scheme of a compressed-tensors config: *kvf gets the
 * cache it describes (8-bit float e4m3, 8-bit int, 4-bit float NVFP4).
 * Returns 1 for attn_head, 0 for one scale per layer, -1 when unknown. */
static int check_ct_scheme(const cJSON *qc, kvcal_report_t *rep, kvcal_kv_format *kvf)
{
    const char *startup = "vLLM refuses to start (NotImplementedError)";
    *kvf = KVCAL_KV_FORMAT_FP8_E4M3;
    const cJSON *ks = cJSON_GetObjectItemCaseSensitive(qc, "kv_cache_scheme");
    if (!cJSON_IsObject(ks)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK,
                         "config.json: quantization_config.kv_cache_scheme",
                         "vLLM (compressed-tensors) then reads one scale per layer "
                         "(shape [1]); llm-compressor writes the scheme",
                         "missing");
        return -1;
    }
    const cJSON *bits = cJSON_GetObjectItemCaseSensitive(ks, "num_bits");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ks, "type");
    const double nb = cJSON_IsNumber(bits) ? bits->valuedouble : -1.0;
    const char *ty = cJSON_IsString(type) ? type->valuestring : "";
    if (nb == 8.0 && !strcmp(ty, "int"))
        *kvf = KVCAL_KV_FORMAT_INT8;
    else if (nb == 4.0 && !strcmp(ty, "float"))
        *kvf = KVCAL_KV_FORMAT_NVFP4;
    else if (nb != 8.0 || strcmp(ty, "float"))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
                         "config.json: quantization_config.kv_cache_scheme", startup,
                         "num_bits must be 8 and type \"float\" (fp8) or \"int\" "
                         "(int8), or num_bits 4 and type \"float\" (NVFP4)");
    const int nvfp4 = *kvf == KVCAL_KV_FORMAT_NVFP4;
    const cJSON *sym = cJSON_GetObjectItemCaseSensitive(ks, "symmetric");
    if (!cJSON_IsTrue(sym))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
                         "config.json: quantization_config.kv_cache_scheme.symmetric",
                         startup, "must be true");
    const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(ks, "dynamic");
    const int local = cJSON_IsString(dyn) && !strcmp(dyn->valuestring, "local");
    if (cJSON_IsTrue(dyn))
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
            "config.json: quantization_config.kv_cache_scheme.dynamic",
            "sglang 0.5.23 ignores the scheme (CompressedTensorsKVCacheMethod."
            "is_supported_scheme: dynamic false only; CompressedTensorsConfig."
            "get_quant_method gives the attention no KV-cache method): the scale "
            "tensors are skipped and its cache runs at scale 1.0. vLLM 0.32.0 never "
            "reads it (CompressedTensorsKVCacheMethod.validate_kv_cache_scheme) and "
            "uses the stored scales as static scales",
            "true, but the checkpoint stores static scales (write false)");
    else if (nvfp4 && !local)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "config.json: quantization_config.kv_cache_scheme.dynamic",
                         "compressed-tensors cannot create static block scales for a "
                         "KV cache (initialize_qparams: their shape holds the "
                         "sequence length): its NVFP4 caches compute them as the "
                         "cache is written and store the global scale alone",
                         "must be \"local\" for NVFP4");
    else if (!nvfp4 && local)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "config.json: quantization_config.kv_cache_scheme.dynamic",
                         "compressed-tensors refuses the scheme (QuantizationArgs: "
                         "\"local is only supported for strategy tensor_group\")",
                         "\"local\" goes with NVFP4 only; write false");
    const cJSON *strat = cJSON_GetObjectItemCaseSensitive(ks, "strategy");
    const char *sn = cJSON_IsString(strat) ? strat->valuestring : "";
    if (nvfp4) {
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(ks, "group_size");
        if (strcmp(sn, "tensor_group") || !cJSON_IsNumber(gs) || gs->valuedouble != 16.0)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                             "config.json: quantization_config.kv_cache_scheme",
                             "not NVFP4: compressed-tensors' NVFP4 (quant_scheme.py "
                             "NVFP4) is strategy tensor_group, group_size 16, one e4m3 "
                             "scale per 16 values under one global scale",
                             "num_bits 4 float needs strategy \"tensor_group\" and "
                             "group_size 16");
        report_ct_engines(rep, *kvf);
        return 0;
    }
    int head = !strcmp(sn, "attn_head");
    if (!head && strcmp(sn, "tensor")) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
                         "config.json: quantization_config.kv_cache_scheme.strategy",
                         startup, "must be \"tensor\" or \"attn_head\"");
        return -1;
    }
    /* vLLM's get_quant_config (model_loader/weight_utils.py) fills in
     * total_num_kv_heads from the model when config_groups is present. */
    if (head && !cJSON_HasObjectItem(qc, "config_groups") &&
        !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(qc, "total_num_kv_heads")))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "config.json: quantization_config.total_num_kv_heads",
                         "vLLM's attn_head scale loader reads it to slice each rank's "
                         "heads and fails to load the model without it (vLLM adds it "
                         "itself only when config_groups is present)",
                         "missing for strategy attn_head");
    if (*kvf == KVCAL_KV_FORMAT_INT8)
        report_ct_engines(rep, *kvf);
    return head;
}

/* The ModelOpt KV-cache algorithm as vLLM reads it for kv_cache_dtype
 * "auto" (vllm/utils/torch_utils.py, get_kv_cache_quant_algo_string):
 * kv_cache_scheme (a dict: static 8-bit float is fp8, 4-bit float nvfp4) or
 * kv_cache_quant_algo ("FP8", "NVFP4"), in quantization or at the top.
 * Warns when it is neither: vLLM still loads the scales, but keeps the
 * cache in the model's dtype unless --kv-cache-dtype says otherwise.
 * Returns 1 for NVFP4. */
static int check_modelopt_config(const cJSON *qc, kvcal_report_t *rep)
{
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(qc, "quantization");
    if (!cJSON_IsObject(inner))
        inner = qc;
    const char *const keys[] = {"kv_cache_scheme", "kv_cache_quant_algo"};
    const cJSON *algo = NULL;
    for (int i = 0; i < 2 && !algo; i++) {
        algo = cJSON_GetObjectItemCaseSensitive(inner, keys[i]);
        if (!algo || cJSON_IsNull(algo))
            algo = cJSON_GetObjectItemCaseSensitive(qc, keys[i]);
        if (algo && cJSON_IsNull(algo))
            algo = NULL;
    }
    int fp8 = 0, nvfp4 = 0;
    if (cJSON_IsString(algo)) {
        fp8 = !strcasecmp(algo->valuestring, "fp8");
        nvfp4 = !strcasecmp(algo->valuestring, "nvfp4");
    } else if (cJSON_IsObject(algo)) {
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(algo, "num_bits");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(algo, "type");
        const int fl = cJSON_IsString(type) && !strcmp(type->valuestring, "float");
        fp8 = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(algo, "dynamic")) &&
              cJSON_IsNumber(bits) && bits->valuedouble == 8 && fl;
        nvfp4 = cJSON_IsNumber(bits) && bits->valuedouble == 4 && fl;
    }
    if (!fp8 && !nvfp4)
        kvcal_report_add(
            rep, KVCAL_SEVERITY_WARNING, KVCAL_OK,
            inner == qc ? "quantization_config.kv_cache_quant_algo"
                        : "quantization.kv_cache_quant_algo",
            "vLLM loads the scales but, with --kv-cache-dtype auto, keeps the cache in "
            "the model's dtype: pass --kv-cache-dtype fp8 (kvcal convert --to modelopt "
            "sets it to FP8)",
            "%s, not FP8", algo ? "another KV-cache algorithm" : "missing or null");
    return nvfp4;
}

/* vLLM's QuarkConfig.from_config and QuarkKVCacheMethod (quark/quark.py):
 * the export object with a kv_cache_group list is required; a non-empty
 * group must match layer_quant_config entries whose output_tensors agree
 * and are fp8_e4m3 per_tensor. */
static void check_quark_config(const cJSON *qc, kvcal_report_t *rep)
{
    const char *startup = "vLLM refuses to start (QuarkConfig.from_config)";
    const cJSON *exp = cJSON_GetObjectItemCaseSensitive(qc, "export");
    const cJSON *group = cJSON_GetObjectItemCaseSensitive(exp, "kv_cache_group");
    if (!cJSON_IsObject(exp) || !cJSON_IsArray(group)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "config.json: quantization_config.export.kv_cache_group",
                         startup, "missing (Quark writes the export object with it)");
        return;
    }
    if (cJSON_GetArraySize(group) == 0) {
        kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK,
                         "config.json: quantization_config.export.kv_cache_group",
                         "vLLM loads the scales but the model declares no quantized KV "
                         "cache: pass --kv-cache-dtype fp8",
                         "empty");
        return;
    }
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(qc, "layer_quant_config");
    const cJSON *first = NULL;
    for (const cJSON *g = group->child; g; g = g->next) {
        const cJSON *e = cJSON_IsString(g) && cJSON_IsObject(layers)
                             ? cJSON_GetObjectItemCaseSensitive(layers, g->valuestring)
                             : NULL;
        const cJSON *ot = cJSON_GetObjectItemCaseSensitive(e, "output_tensors");
        if (!cJSON_IsObject(ot)) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                             "config.json: quantization_config.layer_quant_config",
                             startup,
                             "no output_tensors for the kv_cache_group entry \"%.60s\"",
                             cJSON_IsString(g) ? g->valuestring : "?");
            return;
        }
        if (first && !cJSON_Compare(first, ot, 1)) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                             "config.json: quantization_config.layer_quant_config",
                             startup,
                             "the kv_cache_group entries quantize K and V differently");
            return;
        }
        first = ot;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(first, "dtype");
    const cJSON *qs = cJSON_GetObjectItemCaseSensitive(first, "qscheme");
    if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "fp8_e4m3") ||
        !cJSON_IsString(qs) || strcmp(qs->valuestring, "per_tensor"))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
                         "config.json: quantization_config.layer_quant_config",
                         "vLLM refuses to start (NotImplementedError in "
                         "QuarkKVCacheMethod: fp8_e4m3 per_tensor only)",
                         "the K/V output_tensors are not dtype fp8_e4m3, qscheme "
                         "per_tensor");
}

/* vLLM's Fp8Config.from_config (quantization/fp8.py) reads activation_scheme
 * with get_from_keys (ValueError "Cannot find any of ['activation_scheme']"
 * when the key is missing) and Fp8Config.__init__ refuses any value but
 * "static" or "dynamic" (ACTIVATION_SCHEMES): the engine does not start. */
static void check_fp8_config(const cJSON *qc, kvcal_report_t *rep)
{
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(qc, "activation_scheme");
    if (cJSON_IsString(act) &&
        (!strcmp(act->valuestring, "static") || !strcmp(act->valuestring, "dynamic")))
        return;
    kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                     "config.json: quantization_config.activation_scheme",
                     act ? "vLLM refuses to start (Fp8Config: ValueError \"Unsupported "
                           "activation scheme\"; ACTIVATION_SCHEMES are static and "
                           "dynamic)"
                         : "vLLM refuses to start (Fp8Config.from_config: ValueError "
                           "\"Cannot find any of ['activation_scheme'] in the model's "
                           "quantization config\")",
                     "%s, not \"static\" or \"dynamic\"",
                     !act                  ? "missing"
                     : cJSON_IsString(act) ? "another value"
                                           : "not a string");
}

/* vLLM's ModelOptQuantConfigBase.from_config (quantization/modelopt.py),
 * shared by every ModelOpt config: quant_algo (in `quantization` when the
 * config nests it, else beside quant_method) is required ("Missing
 * 'quant_algo' in quantization config") and, upper-cased, must be one of
 * QUANT_ALGOS; ValueError otherwise, the engine does not start.
 * ModelOptMxFp8Config.from_config first rewrites a config with neither into
 * MXFP8 (modelopt_mxfp8 alone). */
static void check_modelopt_algo(const cJSON *qc, const char *method, kvcal_report_t *rep)
{
    static const char *const algos[] = {
        "FP8",   "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "W4A16_NVFP4",
        "MXFP8", "MIXED_PRECISION",           NULL};
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(qc, "quantization");
    const int nested = inner != NULL;
    const cJSON *algo =
        cJSON_GetObjectItemCaseSensitive(nested ? inner : qc, "quant_algo");
    const char *place = nested
                            ? "config.json: quantization_config.quantization.quant_algo"
                            : "config.json: quantization_config.quant_algo";
    if (!nested && !algo && !strcmp(method, "modelopt_mxfp8"))
        return;
    if (nested && !cJSON_IsObject(inner)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "config.json: quantization_config.quantization",
                         "vLLM refuses to start (ModelOptQuantConfigBase.from_config: "
                         "ValueError \"Expected 'quantization' to be a dictionary\")",
                         "not an object");
        return;
    }
    if (!algo || cJSON_IsNull(algo) || cJSON_IsFalse(algo) ||
        (cJSON_IsString(algo) && !algo->valuestring[0])) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                         "vLLM refuses to start (ModelOptQuantConfigBase.from_config: "
                         "ValueError \"Missing 'quant_algo' in quantization config\")",
                         "missing under quant_method \"%.40s\"", method);
        return;
    }
    char up[64] = "";
    if (cJSON_IsString(algo))
        for (size_t i = 0; algo->valuestring[i] && i + 1 < sizeof up; i++) {
            up[i] = (char)toupper((unsigned char)algo->valuestring[i]);
            up[i + 1] = '\0';
        }
    if (!in_list(algos, up))
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED, place,
            "vLLM refuses to start (ModelOptQuantConfigBase.from_config: "
            "ValueError \"ModelOpt currently only supports\" its "
            "QUANT_ALGOS)",
            "\"%.40s\" is none of FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, "
            "NVFP4, W4A16_NVFP4, MXFP8, MIXED_PRECISION",
            cJSON_IsString(algo) ? algo->valuestring : "(not a string)");
}

/* Finds the loader of config.json's quantization method; reports the
 * configurations whose scales vLLM never uses. */
static scheme check_scheme(const cJSON *config, kvcal_report_t *rep)
{
    char method[64];
    scheme sc = {
        loader_of(config, method, sizeof method), -1, 0, "", 0, KVCAL_KV_FORMAT_FP8_E4M3};
    /* Fp8Config's and QuarkConfig's get_cache_scale_mapper (fp8.py,
     * quark/quark.py) map .k_proj.output_scale to .attn.k_scale before the
     * model's loader sees the name; the others leave it to the stacked
     * q/k/v mapping, which renames k_proj to qkv_proj first. */
    sc.maps_output_scale = !strcmp(method, "fp8") || !strcmp(method, "quark");
    snprintf(sc.method, sizeof sc.method, "%s", method);
    const cJSON *qc = quant_config_of(config);
    if (sc.loader == KVCAL_LOADER_NONE)
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
            "config.json: quantization_config",
            "vLLM refuses to load the model: with no quantization method its weight "
            "loader has no parameter for the k_scale / v_scale tensors (ValueError: "
            "There is no module or parameter named 'layers.0.self_attn.k_scale')",
            cJSON_IsObject(qc) ? "has no quant_method (kvcal convert --to checkpoint "
                                 "writes \"compressed-tensors\")"
                               : "missing (kvcal convert --to checkpoint writes it)");
    else if (sc.loader == KVCAL_LOADER_IGNORED)
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
            "config.json: quantization_config.quant_method",
            "vLLM gives the attention layers no KV-cache method for it and skips the "
            "k_scale / v_scale tensors: every layer uses scale 1.0",
            "\"%.40s\" carries no KV-cache scales", method);
    else if (sc.loader == KVCAL_LOADER_COMPRESSED_TENSORS)
        sc.strategy = check_ct_scheme(qc, rep, &sc.ct);
    else if (sc.loader == KVCAL_LOADER_UNKNOWN)
        kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK,
                         "config.json: quantization_config.quant_method",
                         "vLLM 0.33 does not know it (only a plugin can add it): its "
                         "KV-cache rules were not checked",
                         "\"%.40s\"", method);
    else if (sc.loader == KVCAL_LOADER_UNKNOWN_MODELOPT)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
                         "hf_quant_config.json: quantization.quant_algo",
                         "vLLM refuses to start (ValueError: Unknown ModelOpt quant "
                         "algo)",
                         "\"%.40s\" is no ModelOpt algorithm vLLM serves (FP8, "
                         "FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4)",
                         modelopt_algo(qc));
    else if (!strncmp(method, "modelopt", 8)) {
        check_modelopt_algo(qc, method, rep);
        sc.nvfp4 = check_modelopt_config(qc, rep);
    } else if (!strcmp(method, "quark"))
        check_quark_config(qc, rep);
    else if (!strcmp(method, "fp8"))
        check_fp8_config(qc, rep);
    else
        kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK,
                         "config.json: quantization_config.quant_method",
                         "kvcal checks vLLM's BaseKVCacheMethod rules, which its "
                         "KV-cache method inherits; its own config checks are not "
                         "modelled",
                         "\"%.40s\"", method);
    return sc;
}

/* The scale tensors of one layer. */
typedef struct layer_tensors {
    const kvcal_tensor_info *t[KIND_COUNT]; /* by KIND_ */
    int layout;                             /* their names' KVCAL_LM_* */
} layer_tensors;

/* Reads one tensor's values (1 or H) into dst; reports shape and dtype
 * problems as `sc`'s loader meets them. Returns the number of values (0 on
 * error). */
static int read_scale_tensor(const kvcal_tensor_info *t, int heads, scheme sc, int tp,
                             kvcal_report_t *rep, float *dst)
{
    int64_t n = t->numel;
    int ct = sc.loader != KVCAL_LOADER_BASE;
    char want[64];
    snprintf(want, sizeof want, "[1] or [%d, 1, 1]", heads);
    if (n != 1 && !(ct && sc.strategy == 1 && n > heads) && n != heads) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, t->name,
                         "vLLM fails to load the model (shape mismatch)",
                         "shape has %lld values, expected %s (num_key_value_heads %d)",
                         (long long)n, want, heads);
        return 0;
    }
    if (t->dtype != KVCAL_DTYPE_F32 && t->dtype != KVCAL_DTYPE_BF16 &&
        t->dtype != KVCAL_DTYPE_F16 && t->dtype != KVCAL_DTYPE_F64 &&
        t->dtype != KVCAL_DTYPE_F8_E4M3) {
        const char *dn = kvcal_dtype_name(t->dtype);
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
            "vLLM copies it into a float32 parameter and the value is garbage",
            "dtype %s, expected F32, BF16, F16 or F8_E4M3", dn ? dn : "?");
        return 0;
    }
    if (n > 1 && !ct) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                         "vLLM fails to load the model (ValueError: KV-cache scale "
                         "expects a scalar weight): its BaseKVCacheMethod reads one "
                         "scale per layer",
                         "per-head-shaped (%lld values)", (long long)n);
        return 0;
    }
    if (n > 1 && sc.strategy != 1 && sc.strategy != 2) {
        char c[200];
        snprintf(c, sizeof c,
                 "vLLM fails to load the model (AssertionError: Attempted to load "
                 "weight of %lld values into parameter ([1]))",
                 (long long)n);
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name, c,
                         "per-head-shaped but %s",
                         sc.strategy == 0 ? "kv_cache_scheme.strategy is \"tensor\""
                                          : "config.json has no kv_cache_scheme "
                                            "(strategy attn_head reads per-head scales)");
        return 0;
    }
    if (n > heads) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, t->name,
                         "vLLM (compressed-tensors, attn_head) takes the first heads' "
                         "values and ignores the rest",
                         "shape has %lld values, expected %s (num_key_value_heads %d)",
                         (long long)n, want, heads);
        return 0;
    }
    if (n == 1 && heads > 1 && ct && sc.strategy == 1)
        kvcal_report_add(rep, tp > 1 ? KVCAL_SEVERITY_ERROR : KVCAL_SEVERITY_WARNING,
                         tp > 1 ? KVCAL_ERR_FORMAT : KVCAL_OK, t->name,
                         tp > 1 ? "vLLM fails to load the model at tp > 1: ranks past "
                                  "the first get an empty head slice"
                                : "vLLM broadcasts it over the heads at tp 1 and fails "
                                  "to load the model at tp > 1 (empty head slice)",
                         "per-tensor-shaped but kv_cache_scheme.strategy is "
                         "\"attn_head\"");
    if (kvcal_tensor_to_f32(t, dst) != KVCAL_OK) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name, CK_IGNORED,
                         "cannot be read: %s", kvcal_last_error());
        return 0;
    }
    if (t->dtype == KVCAL_DTYPE_F8_E4M3)
        kvcal_report_add(
            rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, t->name,
            "vLLM converts it into its float32 parameter (copy_: "
            "KVCacheScaleParameter.weight_loader, default_weight_loader) and sglang "
            "0.5.23 fills its float32 parameter with its .item() "
            "(default_weight_loader): both use the e4m3 value, 3 mantissa bits",
            "dtype F8_E4M3: the engines use %.9g%s (F32 keeps a scale exact)",
            (double)dst[0], n > 1 ? " for the first head" : "");
    return (int)n;
}

/* Multimodal models whose vLLM 0.32.0 loader also maps a causal LM's
 * "model." to "language_model.model." (models/mistral3.py, qwen2_vl.py,
 * qwen2_5_vl.py hf_to_vllm_mapper; mllama4.py's
 * _rename_weight_for_modelopt_checkpoint); Gemma 3's and Qwen3-VL's map
 * only their two wrapped layouts. */
static const char *const maps_causal_names[] = {
    "Mistral3ForConditionalGeneration", "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration", "Llama4ForConditionalGeneration", NULL};

/* Multimodal models whose vLLM 0.32.0 loader does not map the layout
 * transformers 4.52 and later save, "model.language_model.": Llama 4's
 * (mllama4.py has no hf_to_vllm_mapper; its renaming of a leading "model."
 * gives "language_model.model.language_model.", no module's name). */
static const char *const refuses_wrapped_names[] = {"Llama4ForConditionalGeneration",
                                                    NULL};

/* An error for scale tensor t named in layout `layout` (KVCAL_LM_*) of a
 * model whose language model is wrapped in a multimodal one (architecture)
 * or not (`wrapped`; -1: not known): vLLM looks the name up in the model's
 * modules after its wrapper's name mapping (both wrapped layouts reach
 * language_model.model.layers; models/gemma3_mm.py, mistral3.py,
 * qwen3_vl.py hf_to_vllm_mapper) and fails on a module it lacks. */
static void check_layout(const kvcal_tensor_info *t, int layout, int wrapped,
                         const char *architecture, kvcal_report_t *rep)
{
    if (wrapped > 0 && layout == KVCAL_LM_WRAPPED &&
        in_list(refuses_wrapped_names, architecture)) {
        char c[320];
        snprintf(c, sizeof c,
                 "vLLM fails to load the model (KeyError): its %.128s loader renames a "
                 "leading 'model.' to 'language_model.model.', no parameter's name",
                 architecture);
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, t->name, c,
                         "transformers' model.language_model. name, which this "
                         "model's vLLM loader does not map (name it as its weights are "
                         "named, language_model.model.: kvcal convert --model)");
        return;
    }
    if (wrapped < 0 || (layout != KVCAL_LM_CAUSAL) == wrapped)
        return;
    if (wrapped && !in_list(maps_causal_names, architecture))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, t->name,
                         "vLLM refuses to load the model (ValueError: There is no module "
                         "or parameter named 'model' in the multimodal model)",
                         "a causal LM's name, but the model keeps its language model "
                         "in a multimodal one (name it as its weights are named: kvcal "
                         "convert --model)");
    else if (!wrapped)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, t->name,
                         layout == KVCAL_LM_RELEASED
                             ? "vLLM refuses to load the model (ValueError: There is no "
                               "module or parameter named 'language_model')"
                             : "vLLM refuses to load the model (ValueError: There is no "
                               "module or parameter named 'model.language_model')",
                         "a multimodal model's name, but the model is a causal LM whose "
                         "layers are model.layers.<i>");
}

/* Collects the scale tensors by layer; reports duplicates, extra layers
 * and names in another layout than the model's (`wrapped`, check_layout).
 * *num_layers is 0 on entry when unknown (then inferred). */
static kvcal_status collect(const kvcal_checkpoint_t *ck, int *num_layers, int known,
                            int wrapped, const char *architecture, kvcal_report_t *rep,
                            layer_tensors **out, kvcal_format *flavor)
{
    int seen[KVCAL_FORMAT_KV_SCALE + 1] = {0};
    int n = kvcal_checkpoint_count(ck);
    if (!known) {
        long max = -1;
        for (int i = 0; i < n; i++) {
            int kind;
            long l = parse_scale_name(kvcal_checkpoint_at(ck, i)->name, &kind);
            max = l < CK_MAX_LAYERS && l > max ? l : max;
        }
        *num_layers = (int)(max + 1);
    }
    *out = NULL;
    if (*num_layers <= 0)
        return KVCAL_OK;
    layer_tensors *lt = calloc((size_t)*num_layers, sizeof *lt);
    if (!lt)
        return kvcal_fail(KVCAL_ERR_NOMEM, "out of memory for %d layers", *num_layers);
    for (int i = 0; i < n; i++) {
        const kvcal_tensor_info *t = kvcal_checkpoint_at(ck, i);
        int kind, layout;
        kvcal_format f;
        long l = parse_scale_name_of(t->name, &kind, &f, &layout);
        if (l < 0)
            continue;
        check_layout(t, layout, wrapped, architecture, rep);
        if (kind <= KIND_KV)
            seen[f]++;
        if (l >= *num_layers) {
            kvcal_report_add(
                rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, t->name,
                "vLLM refuses to load the model (ValueError: There is no module or "
                "parameter named 'layers.<i>')",
                "layer %ld beyond the model's %d layers", l, *num_layers);
            continue;
        }
        if (lt[l].t[kind]) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                             "vLLM loads both and the last one read wins",
                             "duplicates %s", lt[l].t[kind]->name);
            continue;
        }
        lt[l].t[kind] = t;
        lt[l].layout = layout;
    }
    *out = lt;
    *flavor = seen[KVCAL_FORMAT_MODELOPT] ? KVCAL_FORMAT_MODELOPT
              : seen[KVCAL_FORMAT_QUARK]  ? KVCAL_FORMAT_QUARK
              : seen[KVCAL_FORMAT_KV_SCALE] && !seen[KVCAL_FORMAT_CHECKPOINT]
                  ? KVCAL_FORMAT_KV_SCALE
                  : KVCAL_FORMAT_CHECKPOINT;
    return KVCAL_OK;
}

/* What BaseKVCacheMethod (start -1.0; both > 0 used; both < 0 give 1.0;
 * else k must be > 0 and max(k, v) serves both) does with a bad value of
 * the pair (k, v); NULL for the checker's own text. */
static const char *base_bad_value(float k, float v, int is_k)
{
    if (k < 0.0f && v < 0.0f)
        return "vLLM takes negative k_scale and v_scale for 'not in the checkpoint' "
               "and uses 1.0 for both";
    if (!(k > 0.0f))
        return is_k ? "vLLM fails an assertion while loading the model "
                      "(BaseKVCacheMethod needs k_scale > 0 unless both scales are "
                      "missing or negative)"
                    : NULL;
    if (!is_k && !(v > 0.0f))
        return "vLLM ignores it and uses k_scale for both K and V";
    return "vLLM uses it and the layer's cache becomes NaN";
}

/* Reads and checks every layer into s (allocated here when out != NULL). */
/* Reads one layer's q or softmax-output scale (one value: BaseKVCacheMethod
 * loads it as KVCacheScaleParameter); 0 when absent or invalid. */
static float read_single(const kvcal_tensor_info *t, kvcal_report_t *rep,
                         kvcal_value_tally *tally)
{
    float v = 0.0f;
    if (!t)
        return 0.0f;
    if (t->numel != 1) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                         "vLLM fails to load the model (ValueError: KV-cache scale "
                         "expects a scalar weight)",
                         "has %lld values, expected 1", (long long)t->numel);
        return 0.0f;
    }
    if (kvcal_tensor_to_f32(t, &v) != KVCAL_OK) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name, CK_IGNORED,
                         "cannot be read: %s", kvcal_last_error());
        return 0.0f;
    }
    return kvcal_report_check_value(rep, KVCAL_FORMAT_CHECKPOINT, (double)v, t->name,
                                    tally)
               ? v
               : 0.0f;
}

/* The query's scale of one layer: one value, or under compressed-tensors'
 * attn_head one per query head (q_heads; into per_head, *n set), which
 * vLLM's _tp_aware_loader reduces to one per kv-head group by max
 * (compressed_tensors.py, CompressedTensorsKVCacheMethod.create_weights).
 * Returns the layer's (the max), 0 when absent or wrong. */
static float read_q(const kvcal_tensor_info *t, scheme sc, int q_heads, int kv_heads,
                    kvcal_report_t *rep, kvcal_value_tally *tally, float *per_head,
                    int *n)
{
    *n = 0;
    if (!t || sc.loader == KVCAL_LOADER_BASE || sc.strategy != 1)
        return read_single(t, rep, tally);
    const int group = q_heads > 0 ? q_heads / kv_heads : 0;
    if (t->numel == 1 && group > 1) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                         "vLLM fails to load the model: compressed-tensors' attn_head "
                         "loader views q_scale as (-1, num_attention_heads / "
                         "num_key_value_heads) to take each group's max",
                         "has 1 value, expected num_attention_heads (%d)", q_heads);
        return 0.0f;
    }
    if (t->numel == 1)
        return read_single(t, rep, tally);
    if (t->numel != q_heads) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, t->name,
                         "vLLM fails to load the model (its group view or head slice "
                         "does not fit)",
                         "has %lld values, expected num_attention_heads (%d)",
                         (long long)t->numel, q_heads);
        return 0.0f;
    }
    if (kvcal_tensor_to_f32(t, per_head) != KVCAL_OK) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name, CK_IGNORED,
                         "cannot be read: %s", kvcal_last_error());
        return 0.0f;
    }
    float m = 0.0f;
    for (int h = 0; h < q_heads; h++) {
        char at[160];
        snprintf(at, sizeof at, "%s[%d]", t->name, h);
        if (!kvcal_report_check_value(rep, KVCAL_FORMAT_CHECKPOINT, (double)per_head[h],
                                      at, tally))
            return 0.0f;
        m = per_head[h] > m ? per_head[h] : m;
    }
    *n = q_heads;
    return m;
}

/* The scales of exactly 1.0 that ModelOpt writes without calibration:
 * hf_ptq.py's default --kv_cache_qformat fp8_cast sets the amax to the FP8
 * range (every scale 1.0), and its export clamps every FP8 KV scale to
 * >= 1.0 (modelopt/torch/export/quant_utils.py, get_kv_cache_scaling_factor).
 * vals: n values. */
static void check_modelopt_units(const float *vals, size_t n, kvcal_report_t *rep)
{
    size_t unit = 0, below = 0;
    for (size_t i = 0; i < n; i++) {
        unit += vals[i] == 1.0f;
        below += vals[i] < 1.0f;
    }
    if (unit == n)
        kvcal_report_add(
            rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, "",
            "vLLM uses them, but they were never calibrated: ModelOpt's default "
            "--kv_cache_qformat fp8_cast (examples/llm_ptq/hf_ptq.py) sets the amax to "
            "the FP8 range instead of measuring it; calibrate (kvcal calibrate "
            "--format modelopt) or export with --kv_cache_qformat fp8",
            "every K/V scale is exactly 1.0 (ModelOpt fp8_cast)");
    else if (unit > 0 && below == 0)
        kvcal_report_add(
            rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, "",
            "vLLM uses them: the layers whose absmax is under 448 keep scale 1.0 and "
            "lose the low end of e4m3 (values under 2^-9 flush to zero); ModelOpt's "
            "export clamps FP8 KV scales to >= 1.0 (quant_utils.py "
            "get_kv_cache_scaling_factor); kvcal writes the calibrated scales",
            "%zu of %zu K/V scales are exactly 1.0 and none is below it (ModelOpt's "
            "clamp to >= 1.0)",
            unit, n);
}

/* The scale names the scheme does not use: k_scale / v_scale / kv_scale
 * under compressed-tensors' NVFP4 (global != 0), the global scales under
 * any other scheme. */
static void report_other_names(const layer_tensors *lt, int global, kvcal_report_t *rep)
{
    static const int plain[] = {KIND_K, KIND_V, KIND_KV}, globals[] = {KIND_KG, KIND_VG};
    const int *kinds = global ? plain : globals;
    const int n = global ? 3 : 2;
    for (int i = 0; i < n; i++) {
        const kvcal_tensor_info *t = lt->t[kinds[i]];
        if (!t)
            continue;
        if (global)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                             "compressed-tensors registers only k_global_scale / "
                             "v_global_scale for an NVFP4 cache (initialize_qparams, "
                             "dynamic \"local\"): no parameter takes this tensor",
                             "beside kv_cache_scheme NVFP4 (write the global scales, "
                             "448 x 6 / amax: kvcal convert --to checkpoint)");
        else
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                             "no loader reads it under this scheme: global scales "
                             "belong to compressed-tensors' NVFP4 (num_bits 4, "
                             "tensor_group)",
                             "an NVFP4 global scale beside a kv_cache_scheme that is "
                             "not NVFP4");
    }
}

/* What sglang's loader of the model's architecture does with the file's
 * K, V and Q names (io/scales/sglang_loaders.h): one warning, for the first
 * name it skips or fails on, or for an attention holding no scale at all;
 * nothing where it loads them or the table does not know the model. */
static void check_sglang_names(const kvcal_scales_ctx *ctx, const layer_tensors *lt,
                               int num_layers, kvcal_report_t *rep)
{
    if (!ctx->model)
        return;
    const char *arch = ctx->model->architecture;
    for (int l = 0; l < num_layers; l++)
        for (int k = KIND_K; k <= KIND_Q; k++) {
            const char *suffix = NULL, *why = NULL;
            if (k == KIND_KV || !lt[l].t[k] ||
                kvcal_scales_parse_attn_name(lt[l].t[k]->name, &suffix, NULL) < 0)
                continue;
            const kvcal_sglang_outcome o =
                kvcal_sglang_checkpoint_scale(arch, suffix, &why);
            if (o == KVCAL_SGLANG_LOADS || o == KVCAL_SGLANG_UNKNOWN)
                continue;
            char why_line[640];
            if (o == KVCAL_SGLANG_NO_SCALES) {
                snprintf(
                    why_line, sizeof why_line,
                    "sglang 0.5.23 skips every K/V scale of this architecture: its "
                    "%s builds the RadixAttention without quant_config, so the layer "
                    "holds no k_scale / v_scale and the fp8 cache runs at scale 1.0 "
                    "(vLLM loads them)%s",
                    why,
                    kvcal_sglang_legacy_of(arch) == KVCAL_SGLANG_LEGACY_READS
                        ? "; sglang reads this model's scales from a legacy JSON "
                          "instead (--quantization-param-path; kvcal convert --to "
                          "legacy)"
                        : "");
                kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, lt[l].t[k]->name,
                                 why_line, "%s's scales in sglang", arch);
                return;
            }
            const char *kn = kvcal_sglang_k_name(arch);
            char vn[32];
            snprintf(vn, sizeof vn, "%s", kn);
            for (char *c = vn; (c = strstr(c, "k_")) != NULL; c += 2)
                *c = 'v';
            const int assert_one = !strcmp(arch, "Qwen3NextForCausalLM");
            snprintf(
                why_line, sizeof why_line,
                o == KVCAL_SGLANG_SKIPS
                    ? "sglang 0.5.23 skips it: %s holds no parameter of that name, "
                      "logs \"Parameter ... not found in params_dict\" and goes on, "
                      "so the fp8 cache runs at scale 1.0; vLLM loads it. For sglang "
                      "name K and V self_attn.%s / %s (kvcal calibrate does)%s"
                : assert_one
                    ? "sglang 0.5.23 does not load the model: %s drops "
                      "\".self_attn\", finds no parameter and asserts the value is "
                      "1.0 (AssertionError); vLLM loads it. For sglang name K and V "
                      "self_attn.%s / %s (kvcal calibrate does)%s"
                    : "sglang 0.5.23 does not load the model: %s looks the name up "
                      "as it is and finds no parameter (KeyError); vLLM loads it. "
                      "For sglang name K and V self_attn.%s / %s (kvcal calibrate "
                      "does)%s",
                why, kn, vn, strcmp(kn, "k_scale") ? " and leave out q_scale" : "");
            /* a fused-QKV name, qkv_proj or qkqkv_proj */
            const int qkqkv = !strncmp(suffix, "qkqkv_proj.", 11);
            const int qkv = qkqkv || !strncmp(suffix, "qkv_proj.", 9);
            const char *proj = qkqkv ? "qkqkv_proj" : "qkv_proj";
            if (qkv && o == KVCAL_SGLANG_FAILS && !assert_one)
                snprintf(why_line, sizeof why_line,
                         "sglang 0.5.23 does not load the model: %s renames %s (its "
                         "stacked q/k/v mapping's v_proj: %s) or looks the name up as "
                         "it is and finds no parameter (KeyError); vLLM loads it "
                         "(get_cache_scale_mapper). For sglang name K and V self_attn.%s "
                         "/ %s (kvcal calibrate does)%s",
                         why, proj, qkqkv ? "qkqkqkv_proj" : "qkqkv_proj", kn, vn,
                         strcmp(kn, "k_scale") ? " and leave out q_scale" : "");
            else if (qkv && o == KVCAL_SGLANG_SKIPS)
                snprintf(why_line, sizeof why_line,
                         "sglang 0.5.23 skips it: %s finds no parameter for it "
                         "(maybe_remap_kv_scale_name's %s.attn.k_scale, or the name as "
                         "it is), logs it and goes on, so the fp8 cache runs at scale "
                         "1.0; vLLM loads it (get_cache_scale_mapper). For sglang name K "
                         "and V self_attn.%s / %s (kvcal calibrate does)%s",
                         why, proj, kn, vn,
                         strcmp(kn, "k_scale") ? " and leave out q_scale" : "");
            /* HunYuan's load_weights splits a ".qkv_proj" tensor, which
               ".qkqkv_proj" is not */
            if (qkv && !qkqkv && o == KVCAL_SGLANG_FAILS &&
                kvcal_sglang_checkpoint_scale(arch, "k_scale", NULL) ==
                    KVCAL_SGLANG_NO_SCALES)
                snprintf(why_line, sizeof why_line,
                         "sglang 0.5.23 does not load the model: %s splits a qkv_proj "
                         "tensor as a fused q/k/v weight (AssertionError), and its "
                         "attention holds no k_scale / v_scale under any name (scale "
                         "1.0); vLLM loads it (get_cache_scale_mapper)",
                         why);
            kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, lt[l].t[k]->name,
                             why_line, "a %s name of %s",
                             k == KIND_Q ? "q_scale" : "self_attn", arch);
            return;
        }
}

static kvcal_status check_layers(const layer_tensors *lt, int num_layers, int heads,
                                 scheme sc, kvcal_format flavor,
                                 const kvcal_scales_ctx *ctx, kvcal_report_t *rep,
                                 kvcal_scales_t **out)
{
    float *q = NULL;
    kvcal_status st = KVCAL_OK;
    const int q_heads = ctx->model ? ctx->model->num_attention_heads : 0;
    float *qh = malloc(sizeof(float) * ((size_t)num_layers * q_heads + 1)); /* (L, Hq) */
    int q_per_head = 1;
    float *vals = malloc(sizeof(float) * 2 * (size_t)num_layers * heads); /* (L, 2, H) */
    float *vals_out =
        malloc(sizeof(float) * 2 * (size_t)num_layers * heads); /* (L, H, 2) */
    int *counts = calloc(2 * (size_t)num_layers, sizeof *counts);
    q = calloc((size_t)num_layers, sizeof *q);
    if (!vals || !vals_out || !counts || !q || !qh) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "out of memory reading %d layers", num_layers);
        goto fail;
    }
    int base = sc.loader == KVCAL_LOADER_BASE;
    kvcal_value_tally tally = {0};
    int per_head = 0;
    const int global =
        sc.loader == KVCAL_LOADER_COMPRESSED_TENSORS && sc.ct == KVCAL_KV_FORMAT_NVFP4;
    for (int l = 0; l < num_layers; l++) {
        report_other_names(lt + l, global, rep);
        const kvcal_tensor_info *kt = lt[l].t[global ? KIND_KG : KIND_K];
        const kvcal_tensor_info *vt = lt[l].t[global ? KIND_VG : KIND_V];
        const kvcal_tensor_info *kv = global ? NULL : lt[l].t[KIND_KV];
        char place[96];
        snprintf(place, sizeof place, "%slayers.%d.self_attn",
                 kvcal_lm_prefix(lt[l].layout), l);
        if (ctx->model && !kvcal_model_config_layer_caches(ctx->model, l)) {
            /* a hybrid model's linear-attention layer: no cache to scale;
               the set holds the engine's 1.0 there, marked uncached */
            if (kt || vt || kv)
                kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, place,
                                 "the engine has no K/V cache in this layer and does "
                                 "not read them",
                                 "scales for a linear-attention layer");
            for (int i = 0; i < 2; i++) {
                counts[l * 2 + i] = 1;
                vals[((size_t)l * 2 + i) * heads] = 1.0f;
            }
            continue;
        }
        if (kt && kv)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, kv->name,
                             "vLLM renames it to k_scale, loads both and the last one "
                             "read wins",
                             "beside %s", kt->name);
        if (!kt)
            kt = kv;
        if (!kt && !vt) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, place,
                             CK_IGNORED, "no k_scale / v_scale tensor");
            continue;
        }
        if (!kt)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, place,
                             base ? "vLLM fails an assertion while loading the model "
                                    "(BaseKVCacheMethod: k_scale still -1 while v_scale "
                                    "was loaded)"
                                  : "vLLM (compressed-tensors) keeps K at scale 1.0",
                             "k_scale missing");
        else if (!vt && kt == kv && !base)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, kv->name,
                             "vLLM (compressed-tensors) reads it as k_scale only: V "
                             "keeps scale 1.0; write k_scale and v_scale",
                             "deprecated single kv_scale");
        else if (!vt && kt != kv)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, place,
                             base ? "vLLM uses k_scale for both K and V"
                                  : "vLLM (compressed-tensors) keeps V at scale 1.0",
                             "v_scale missing");
        if (!vt && kt == kv && base)
            vt = kv;
        const kvcal_tensor_info *pair[2] = {kt, vt};
        for (int i = 0; i < 2; i++) {
            float *dst = vals + ((size_t)l * 2 + i) * heads;
            int n =
                pair[i] ? read_scale_tensor(pair[i], heads, sc, ctx->tp, rep, dst) : 0;
            counts[l * 2 + i] = n;
            per_head |= n == heads && heads > 1;
            for (int h = 0; global && h < n; h++) /* 448 x 6 / amax to amax / 2688 */
                dst[h] = (float)(1.0 / (double)dst[h]);
        }
        float k0 = counts[l * 2] ? vals[(size_t)l * 2 * heads] : -1.0f;
        float v0 = counts[l * 2 + 1] ? vals[((size_t)l * 2 + 1) * heads] : -1.0f;
        for (int i = 0; i < 2; i++)
            for (int h = 0; h < counts[l * 2 + i]; h++) {
                char at[160];
                if (counts[l * 2 + i] > 1)
                    snprintf(at, sizeof at, "%s[%d]", pair[i]->name, h);
                else
                    snprintf(at, sizeof at, "%s", pair[i]->name);
                float x = vals[((size_t)l * 2 + i) * heads + h];
                kvcal_report_check_value_as(rep, KVCAL_FORMAT_CHECKPOINT,
                                            base ? base_bad_value(k0, v0, i == 0) : NULL,
                                            (double)x, at, &tally);
            }
    }
    check_sglang_names(ctx, lt, num_layers, rep);
    int all_q = 1;
    for (int l = 0; l < num_layers; l++) {
        int n = 0;
        q[l] = read_q(lt[l].t[KIND_Q], sc, q_heads, heads, rep, &tally,
                      qh + (size_t)l * q_heads, &n);
        all_q &= q[l] > 0.0f;
        q_per_head &= n > 0;
        read_single(lt[l].t[KIND_PROB], rep, &tally);
    }
    if (per_head)
        kvcal_report_check_tp_split(rep, "config.json: num_key_value_heads", heads,
                                    ctx->tp);
    if (flavor == KVCAL_FORMAT_MODELOPT && !sc.nvfp4) { /* FP8's clamp to >= 1.0 */
        size_t n = 0;
        for (int l = 0; l < num_layers; l++)
            for (int i = 0; i < 2; i++)
                for (int h = 0; h < counts[l * 2 + i]; h++)
                    vals_out[n++] = vals[((size_t)l * 2 + i) * heads + h];
        if (n)
            check_modelopt_units(vals_out, n, rep);
    }
    kvcal_report_flush_tally(rep, KVCAL_FORMAT_CHECKPOINT, &tally);
    if (kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR) > 0)
        goto fail;
    int equal = 1, shared = 1;
    for (int l = 0; l < num_layers; l++) {
        shared &= !global && !lt[l].t[KIND_K] && !lt[l].t[KIND_V];
        for (int h = 0; h < heads; h++) {
            const float *kv = vals + (size_t)l * 2 * heads;
            float kk = kv[counts[l * 2] == 1 ? 0 : h];
            float vv = kv[heads + (counts[l * 2 + 1] == 1 ? 0 : h)];
            equal &= kk == vv;
            vals_out[((size_t)l * heads + h) * 2] = kk;
            vals_out[((size_t)l * heads + h) * 2 + 1] = vv;
        }
    }
    if (equal)
        kvcal_report_add(
            rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, "",
            "the larger of K and V sets both scales: the other tensor is quantized "
            "more coarsely than needed (typical of a conversion from the legacy "
            "format or a single kv_scale)",
            "k_scale equals v_scale in every layer");
    st = kvcal_report_status(rep);
    if (st || !out)
        goto fail;
    kvcal_scales_t *s = NULL;
    if ((st = kvcal_scales_create(num_layers, heads, &s)))
        goto fail;
    for (int l = 0; l < num_layers; l++)
        for (int h = 0; h < heads; h++) {
            const float *p = vals_out + ((size_t)l * heads + h) * 2;
            kvcal_scales_set_head(s, l, h, p[0], p[1]);
        }
    for (int l = 0; ctx->model && l < num_layers; l++)
        if (!kvcal_model_config_layer_caches(ctx->model, l) &&
            (st = kvcal_scales_set_uncached(s, l))) {
            kvcal_scales_destroy(s);
            goto fail;
        }
    for (int l = 0; all_q && l < num_layers; l++)
        kvcal_scales_set_q(s, l, q[l]);
    if (all_q && q_per_head && (st = kvcal_scales_set_q_heads(s, q_heads))) {
        kvcal_scales_destroy(s);
        goto fail;
    }
    if (all_q && q_per_head)
        memcpy(s->q_head, qh, sizeof(float) * (size_t)num_layers * q_heads);
    s->granularity = per_head ? KVCAL_GRANULARITY_HEAD : KVCAL_GRANULARITY_TENSOR;
    s->kv_shared = shared;
    s->format = sc.nvfp4                                       ? KVCAL_KV_FORMAT_NVFP4
                : sc.loader == KVCAL_LOADER_COMPRESSED_TENSORS ? sc.ct
                                                               : KVCAL_KV_FORMAT_FP8_E4M3;
    if (ctx->model) {
        snprintf(s->model.architecture, sizeof s->model.architecture, "%s",
                 ctx->model->architecture);
        snprintf(s->model.model_type, sizeof s->model.model_type, "%s",
                 ctx->model->model_type);
        s->model.num_attention_heads = ctx->model->num_attention_heads;
        s->model.head_dim = kvcal_model_config_cache_head_dim(ctx->model);
    }
    *out = s;
fail:
    free(vals);
    free(vals_out);
    free(counts);
    free(q);
    free(qh);
    return st;
}

/* The head counts vLLM's attn_head loader slices with
 * (compressed_tensors.py, CompressedTensorsKVCacheMethod.create_weights,
 * _tp_aware_loader): quantization_config.total_num_kv_heads (a rank takes
 * its heads when layer.num_kv_heads x tp equals it, else asserts it holds
 * one head and takes head rank / (tp / total)) and, for q_scale,
 * total_num_heads // total_num_kv_heads, the group its max is taken over.
 * get_quant_config (model_loader/weight_utils.py) writes both from the
 * model only when config_groups is present; otherwise they are read as
 * written. heads: the model's kv heads; q_heads: its attention heads. */
static void check_ct_head_counts(const cJSON *qc, const layer_tensors *lt, int num_layers,
                                 int heads, int q_heads, kvcal_report_t *rep)
{
    if (cJSON_HasObjectItem(qc, "config_groups"))
        return;
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(qc, "total_num_kv_heads");
    if (!cJSON_IsNumber(kv)) /* reported by check_ct_scheme */
        return;
    if (kv->valuedouble != (double)heads) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH,
                         "config.json: quantization_config.total_num_kv_heads",
                         "vLLM's attn_head loader slices each rank's heads with it: "
                         "with another count than the model's it fails an assertion "
                         "(AssertionError in _tp_aware_loader) or gives a rank another "
                         "head's scale",
                         "%g, but the model has %d kv heads (num_key_value_heads)",
                         kv->valuedouble, heads);
        return;
    }
    const kvcal_tensor_info *q = NULL;
    for (int l = 0; !q && l < num_layers; l++)
        q = lt[l].t[KIND_Q];
    if (!q || q_heads <= 0)
        return;
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(qc, "total_num_heads");
    if (!cJSON_IsNumber(all))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "config.json: quantization_config.total_num_heads",
                         "vLLM fails to load the model: its attn_head loader divides "
                         "it by total_num_kv_heads to group q_scale (TypeError on "
                         "None; vLLM adds it itself only when config_groups is present)",
                         "missing for strategy attn_head with %s in the checkpoint",
                         q->name);
    else if ((long)all->valuedouble / heads != q_heads / heads)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH,
                         "config.json: quantization_config.total_num_heads",
                         "vLLM's attn_head loader takes q_scale's max over groups of "
                         "total_num_heads // total_num_kv_heads values: another group "
                         "size fails to load or mixes the groups",
                         "%g, but the model has %d attention heads "
                         "(num_attention_heads)",
                         all->valuedouble, q_heads);
}

/* When dir has an index, vLLM loads only the shards its weight_map names:
 * reports a scales shard `base` that it does not name. */
static void check_listed_in_index(const char *dir, const char *base, kvcal_report_t *rep)
{
    char p[4096];
    cJSON *index = NULL;
    if (join(p, sizeof p, dir, KVCAL_CHECKPOINT_INDEX) || !is_file(p))
        return;
    if (kvcal_json_load(p, &index) != KVCAL_OK) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_PARSE,
                         KVCAL_CHECKPOINT_INDEX, "vLLM cannot load the checkpoint", "%s",
                         kvcal_last_error());
        return;
    }
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    int listed = 0;
    for (const cJSON *e = cJSON_IsObject(map) ? map->child : NULL; e && !listed;
         e = e->next)
        listed = cJSON_IsString(e) && !strcmp(e->valuestring, base);
    if (!listed)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, base,
                         "vLLM loads only the shards the index names: it never reads "
                         "these scales and uses scale 1.0 for every layer",
                         "%.200s is not listed in " KVCAL_CHECKPOINT_INDEX
                         " (add its tensors to weight_map; kvcal convert --to checkpoint "
                         "does)",
                         base);
    cJSON_Delete(index);
}

/* vLLM's order of the shards it reads (model_loader/weight_utils.py,
 * safetensors_weights_iterator: sorted by _natural_sort_key, runs of digits
 * compared as numbers): < 0 when a is read before b. */
static int natural_cmp(const char *a, const char *b)
{
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            char *ea, *eb;
            unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
            if (x != y)
                return x < y ? -1 : 1;
            a = ea, b = eb;
            continue;
        }
        if (*a != *b)
            return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        a++, b++;
    }
    return *a ? 1 : *b ? -1 : 0;
}

/* vLLM reads every *.safetensors file of the model directory (those the
 * index names, when it has one: default_loader.py _prepare_weights,
 * weight_utils.py filter_duplicate_safetensors_files), in natural name
 * order, and each scale's last value read wins (default_weight_loader and
 * KVCacheScaleParameter.weight_loader copy over the previous one). When
 * kvcal read one file of dir (`read`, its base name), reports the K/V/Q
 * scale tensors of the other files vLLM reads: those replace or join the
 * scales checked here. */
static void check_other_shards(const char *dir, const char *read, kvcal_report_t *rep)
{
    char p[4096];
    cJSON *index = NULL;
    if (!join(p, sizeof p, dir, KVCAL_CHECKPOINT_INDEX) && is_file(p) &&
        kvcal_json_load(p, &index) != KVCAL_OK)
        kvcal_clear_error(); /* reported by check_listed_in_index */
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        const size_t n = strlen(e->d_name);
        if (n <= 12 || strcmp(e->d_name + n - 12, ".safetensors") ||
            !strcmp(e->d_name, read))
            continue;
        int listed = !index;
        for (const cJSON *m = cJSON_IsObject(map) ? map->child : NULL; m && !listed;
             m = m->next)
            listed = cJSON_IsString(m) && !strcmp(m->valuestring, e->d_name);
        kvcal_safetensors_t *st = NULL;
        if (!listed || join(p, sizeof p, dir, e->d_name) || !is_file(p) ||
            kvcal_safetensors_open(p, &st) != KVCAL_OK) {
            kvcal_clear_error();
            continue;
        }
        const kvcal_tensor_info *first = NULL;
        int count = 0, kind;
        for (int i = 0; i < kvcal_safetensors_count(st); i++) {
            const kvcal_tensor_info *t = kvcal_safetensors_at(st, i);
            if (parse_scale_name(t->name, &kind) >= 0 && count++ == 0)
                first = t;
        }
        if (count) {
            const int later = natural_cmp(e->d_name, read) > 0;
            char c[512];
            snprintf(c, sizeof c,
                     "vLLM reads every shard in the directory%s in natural name order "
                     "and keeps the last value read for each scale: %.100s is read %s "
                     "%.100s, so %s",
                     index ? " that the index names" : "", e->d_name,
                     later ? "after" : "before", read,
                     later ? "its scales replace the ones checked here"
                           : "the scales checked here replace its own, and any of "
                             "its names they lack load as they are");
            /* read before: the values checked here are the ones vLLM keeps */
            kvcal_report_add(rep, later ? KVCAL_SEVERITY_ERROR : KVCAL_SEVERITY_WARNING,
                             later ? KVCAL_ERR_FORMAT : KVCAL_OK, first->name, c,
                             "%d scale tensor%s in %.100s beside %.100s (keep the "
                             "scales in one file: remove them from the model's shards)",
                             count, count == 1 ? "" : "s", e->d_name, read);
        }
        kvcal_safetensors_close(st);
    }
    if (d)
        closedir(d);
    cJSON_Delete(index);
}

/* Checkpoint scales of an MLA model (DeepSeek-V2/V3, Kimi K2): what the
 * engines load into its one entry a token (schemas/README.md, "MLA caches").
 * vLLM 0.32.0 loads none: compressed-tensors and fp8 give MLAAttention no
 * KV-cache method (their get_quant_method takes Attention layers alone),
 * and under modelopt AutoWeightsLoader's cache scale mapper renames every
 * name to self_attn.attn.k_scale, which maybe_remap_kv_scale_name then
 * renames again (self_attn.attn.attn.k_scale, no parameter): k_scale stays
 * 1.0. sglang 0.5.23 loads ModelOpt's self_attn.k_proj.k_scale into the
 * absorbed attention's attn_mqa.k_scale and drops self_attn.k_scale. */
static void check_mla(const layer_tensors *lt, int num_layers, kvcal_format flavor,
                      const kvcal_model_config *m, kvcal_report_t *rep)
{
    int per_head = 0;
    for (int l = 0; l < num_layers; l++)
        for (int k = 0; k < KIND_KV + 1; k++)
            per_head |= lt[l].t[k] && lt[l].t[k]->numel > 1;
    const char *modelopt = flavor == KVCAL_FORMAT_MODELOPT ? " (sglang 0.5.23 loads "
                                                             "self_attn.k_proj.k_scale "
                                                             "into attn_mqa.k_scale)"
                                                           : "";
    kvcal_report_add(
        rep,
        flavor == KVCAL_FORMAT_MODELOPT && !per_head ? KVCAL_SEVERITY_WARNING
                                                     : KVCAL_SEVERITY_ERROR,
        KVCAL_ERR_UNSUPPORTED, "",
        "vLLM 0.32.0 loads no checkpoint KV scale into an MLA layer (compressed-tensors "
        "and fp8 give MLAAttention no KV-cache method; under modelopt the name becomes "
        "self_attn.attn.attn.k_scale, which no parameter has): its cache runs with "
        "k_scale 1.0",
        "%s caches one latent entry of %d values per token and layer under one "
        "k_scale%s%s",
        m->architecture, kvcal_model_config_cache_head_dim(m),
        per_head ? "; these scales are per head, which no MLA layer has" : "", modelopt);
}

/* The layout (KVCAL_LM_*) of the model's own layer tensors: in dir's index
 * (which kvcal's output copies from the model), else among ck's tensors;
 * scale names skipped. -1 when neither lists a layer weight. */
static int weights_layout(const char *dir, const kvcal_checkpoint_t *ck)
{
    char p[4096];
    int kind, found = -1;
    cJSON *index = NULL;
    if (!join(p, sizeof p, dir, KVCAL_CHECKPOINT_INDEX) && is_file(p) &&
        kvcal_json_load(p, &index) == KVCAL_OK) {
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
        for (const cJSON *at = cJSON_IsObject(map) ? map->child : NULL; at && found < 0;
             at = at->next)
            if (parse_scale_name(at->string, &kind) < 0)
                found = kvcal_lm_prefix_of(at->string);
    }
    cJSON_Delete(index);
    kvcal_clear_error();
    for (int i = 0; ck && found < 0 && i < kvcal_checkpoint_count(ck); i++) {
        const char *name = kvcal_checkpoint_at(ck, i)->name;
        if (parse_scale_name(name, &kind) < 0)
            found = kvcal_lm_prefix_of(name);
    }
    return found;
}

kvcal_status kvcal_scales_check_checkpoint(const char *path, const kvcal_scales_ctx *ctx,
                                           kvcal_report_t *rep, kvcal_scales_t **out)
{
    kvcal_report_set_format(rep, KVCAL_FORMAT_CHECKPOINT);
    if (out)
        *out = NULL;
    char dir[4096], file[4096];
    int path_is_dir = is_dir(path);
    if (path_is_dir)
        snprintf(dir, sizeof dir, "%s", path);
    else
        dir_of(path, dir, sizeof dir);
    const char *open_path = path;
    if (path_is_dir && join(file, sizeof file, dir, KVCAL_CHECKPOINT_SHARD) == 0 &&
        is_file(file))
        open_path = file;

    kvcal_model_config own;
    kvcal_scales_ctx c = *ctx;
    cJSON *config = NULL;
    kvcal_checkpoint_t *ck = NULL;
    layer_tensors *lt = NULL;
    kvcal_status st = KVCAL_OK;
    char cfg_path[4096];
    int have_cfg =
        join(cfg_path, sizeof cfg_path, dir, "config.json") == 0 && is_file(cfg_path);
    if (have_cfg && kvcal_json_load(cfg_path, &config) != KVCAL_OK) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_PARSE, "config.json",
                         "vLLM cannot load the model", "%s", kvcal_last_error());
        goto fail;
    }
    if (have_cfg && !c.model) {
        if (kvcal_model_config_load(cfg_path, &own) != KVCAL_OK) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "config.json",
                             "vLLM cannot load the model", "%s", kvcal_last_error());
            goto fail;
        }
        c.model = &own;
    }
    char hq_path[4096];
    cJSON *hq = NULL;
    if (config && !quant_config_of(config) &&
        join(hq_path, sizeof hq_path, dir, KVCAL_MODELOPT_QUANT_CONFIG) == 0 &&
        is_file(hq_path)) {
        /* ModelOpt 0.29 and before: vLLM reads the quantization config from
         * hf_quant_config.json when config.json has none
         * (transformers_utils/config.py). */
        if (kvcal_json_load(hq_path, &hq) != KVCAL_OK) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_PARSE,
                             KVCAL_MODELOPT_QUANT_CONFIG, "vLLM cannot load the model",
                             "%s", kvcal_last_error());
            goto fail;
        }
        cJSON_AddItemToObject(config, "quantization_config", hq);
    }
    scheme sc = {KVCAL_LOADER_COMPRESSED_TENSORS, 2, 0, "", 0, KVCAL_KV_FORMAT_FP8_E4M3};
    if (config)
        sc = check_scheme(config, rep);
    else
        kvcal_report_add(
            rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, "config.json",
            "quantization_config, which tells vLLM how to read the scales, was not "
            "checked",
            "not found next to the scales");
    if (kvcal_checkpoint_open(open_path, &ck) != KVCAL_OK) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_PARSE, "",
                         "vLLM cannot load the checkpoint", "%s", kvcal_last_error());
        goto fail;
    }
    if (!is_dir(open_path)) {
        const char *slash = strrchr(open_path, '/');
        check_listed_in_index(dir, slash ? slash + 1 : open_path, rep);
        check_other_shards(dir, slash ? slash + 1 : open_path, rep);
    } else if (join(file, sizeof file, dir, KVCAL_CHECKPOINT_INDEX) == 0 &&
               !is_file(file)) {
        /* without an index kvcal reads model.safetensors (or the one file) */
        if (join(file, sizeof file, dir, "model.safetensors") == 0 && is_file(file))
            check_other_shards(dir, "model.safetensors", rep);
    }
    int num_layers = c.model ? c.model->num_layers : 0;
    kvcal_format flavor = KVCAL_FORMAT_CHECKPOINT;
    const int weights = weights_layout(dir, ck);
    const int wrapped = c.model        ? c.model->multimodal
                        : weights >= 0 ? weights != KVCAL_LM_CAUSAL
                                       : -1;
    if ((st = collect(ck, &num_layers, c.model != NULL, wrapped,
                      c.model ? c.model->architecture : "", rep, &lt, &flavor)))
        goto fail;
    /* ModelOpt's names under a compressed-tensors scheme (Qwen3-Next's, as
     * kvcal writes them for sglang too): the checkpoint format still */
    if (config && flavor == KVCAL_FORMAT_MODELOPT &&
        sc.loader == KVCAL_LOADER_COMPRESSED_TENSORS)
        flavor = KVCAL_FORMAT_CHECKPOINT;
    kvcal_report_set_format(rep, flavor);
    if (lt && c.model && c.model->kv_layout == KVCAL_KV_MLA)
        check_mla(lt, num_layers, flavor, c.model, rep);
    /* Quark's names of Q (q_proj.output_scale, renamed qkv_proj by the same
     * stacked mapping) and of the softmax output (prob_output_scale, which
     * only the fp8 and quark mappers rename to attn.prob_scale: no other
     * config's attention has a parameter of that name) fail alike. */
    for (int l = 0; lt && config && !sc.maps_output_scale && l < num_layers; l++) {
        const kvcal_tensor_info *t = NULL;
        for (int k = 0; !t && k < KIND_COUNT; k++)
            if (lt[l].t[k] && (strstr(lt[l].t[k]->name, "_proj.output_scale") ||
                               strstr(lt[l].t[k]->name, ".prob_output_scale")))
                t = lt[l].t[k];
        if (t && strstr(t->name, ".prob_output_scale")) {
            kvcal_report_add(
                rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                "vLLM refuses to load the model (ValueError: There is no module or "
                "parameter named '...self_attn.prob_output_scale'): only the fp8 and "
                "quark configs' get_cache_scale_mapper map it to the attention's "
                "prob_scale",
                "Quark's softmax-output scale under quant_method \"%.40s\" (leave it "
                "out: kvcal convert --to checkpoint)",
                sc.method);
            break;
        }
        if (t) {
            kvcal_report_add(
                rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                "vLLM refuses to load the model (ValueError: There is no module or "
                "parameter named '...qkv_proj.output_scale'): only the fp8 and quark "
                "configs map q/k/v_proj.output_scale to the attention's q/k/v_scale, and "
                "the stacked q/k/v mapping of Llama, Qwen2 and Qwen3 renames the "
                "projection first",
                "Quark's name under quant_method \"%.40s\" (name them "
                "self_attn.k_scale / v_scale / q_scale: kvcal convert --to checkpoint)",
                sc.method);
            break;
        }
    }
    if (num_layers <= 0 || !lt) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "",
                         "vLLM uses scale 1.0 for every layer",
                         "no model.layers.<i>.self_attn.k_scale / v_scale tensors "
                         "(model.language_model.layers.<i> or language_model.model."
                         "layers.<i> in a multimodal model)");
        goto fail;
    }
    if (sc.loader == KVCAL_LOADER_IGNORED)
        goto fail;
    int heads = c.model ? kvcal_model_config_cache_kv_heads(c.model) : 0;
    if (!heads)
        for (int l = 0; l < num_layers; l++)
            for (int k = 0; k < KIND_KV + 1; k++)
                if (lt[l].t[k] && lt[l].t[k]->numel > heads && lt[l].t[k]->numel <= 65536)
                    heads = (int)lt[l].t[k]->numel;
    if (heads < 1)
        heads = 1;
    if (config && c.model && sc.loader == KVCAL_LOADER_COMPRESSED_TENSORS &&
        sc.strategy == 1)
        check_ct_head_counts(quant_config_of(config), lt, num_layers, heads,
                             c.model->num_attention_heads, rep);
    st = check_layers(lt, num_layers, heads, sc, flavor, &c, rep, out);
fail:
    free(lt);
    kvcal_checkpoint_close(ck);
    cJSON_Delete(config);
    return st ? st : kvcal_report_status(rep);
}

/* --- writing ------------------------------------------------------------- */

/* The kv_cache_scheme object of DESIGN.md for the cache kvf: fp8 (8-bit
 * float) and int8 (8-bit int) static, symmetric, per tensor or head;
 * NVFP4 as compressed-tensors' NVFP4 preset describes its activations
 * (quant_scheme.py: 4-bit float, tensor_group of 16, e4m3 block scales
 * computed as the cache is written, dynamic "local"). */
static cJSON *make_scheme(int per_head, kvcal_kv_format kvf)
{
    const int nvfp4 = kvf == KVCAL_KV_FORMAT_NVFP4;
    cJSON *ks = cJSON_CreateObject();
    int ok = ks && cJSON_AddNumberToObject(ks, "num_bits", nvfp4 ? 4 : 8) &&
             cJSON_AddStringToObject(ks, "type",
                                     kvf == KVCAL_KV_FORMAT_INT8 ? "int" : "float") &&
             cJSON_AddStringToObject(ks, "strategy",
                                     nvfp4      ? "tensor_group"
                                     : per_head ? "attn_head"
                                                : "tensor") &&
             cJSON_AddTrueToObject(ks, "symmetric");
    if (ok && nvfp4)
        ok = cJSON_AddNumberToObject(ks, "group_size", 16) &&
             cJSON_AddStringToObject(ks, "dynamic", "local") &&
             cJSON_AddStringToObject(ks, "scale_dtype", "torch.float8_e4m3fn");
    else if (ok)
        ok = cJSON_AddFalseToObject(ks, "dynamic") != NULL;
    if (ok)
        return ks;
    cJSON_Delete(ks);
    return NULL;
}

static int set_item(cJSON *obj, const char *key, cJSON *item)
{
    if (!item)
        return 0;
    if (cJSON_HasObjectItem(obj, key))
        return cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item);
    return cJSON_AddItemToObject(obj, key, item);
}

/* Merges kv_cache_scheme into the model's config.json, keeping every other
 * field; a new quantization_config says quant_method compressed-tensors.
 * Refuses a quantization method whose vLLM loader would not use the scales
 * (io/scales/scales_checkpoint.c, "What ... vLLM 0.33.0 do"). */
/* What a ModelOpt, Quark or kv-scale output needs of the model's config:
 * the quantization method whose vLLM config reads those names (its weight
 * loader is the model's too, so kvcal cannot add it to an unquantized
 * model), and for modelopt the KV-cache algorithm set to FP8 (in qc and in
 * hq, the hf_quant_config.json beside it, where present). */
static kvcal_status merge_config_for(cJSON *qc, cJSON *hq, kvcal_format f, loader ld,
                                     const char *method, kvcal_kv_format kvf,
                                     const char *path)
{
    const char *want = f == KVCAL_FORMAT_MODELOPT ? "ModelOpt (quant_method modelopt)"
                       : f == KVCAL_FORMAT_QUARK  ? "Quark (quant_method quark)"
                                                  : "fp8, modelopt or quark";
    const char *names = f == KVCAL_FORMAT_MODELOPT ? "ModelOpt"
                        : f == KVCAL_FORMAT_QUARK  ? "Quark"
                                                   : "kv_scale";
    int ok = f == KVCAL_FORMAT_MODELOPT ? !strncmp(method, "modelopt", 8)
             : f == KVCAL_FORMAT_QUARK  ? !strcmp(method, "quark")
                                        : ld == KVCAL_LOADER_BASE;
    if (!ok)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: the model is %s%s%s, but vLLM reads %s scale names only "
            "through a %s quantization config, whose weight loader the "
            "model must match; write the checkpoint format (compressed-tensors, "
            "read by vLLM for any model) or quantize the model with that "
            "tool first",
            path, method[0] ? "quantized with \"" : "not quantized", method,
            method[0] ? "\"" : "", names, want);
    if (f == KVCAL_FORMAT_QUARK) {
        kvcal_report_t *rep = NULL;
        if (kvcal_report_create(&rep))
            return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
        check_quark_config(qc, rep);
        int bad = kvcal_report_count(rep) > 0;
        kvcal_finding fd;
        char line[512] = "";
        if (bad && !kvcal_report_get(rep, 0, &fd))
            snprintf(line, sizeof line, "%s: %s", fd.place, fd.message);
        kvcal_report_destroy(rep);
        if (bad)
            return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                              "%s: %s: the model's Quark config declares no FP8 "
                              "per-tensor KV cache that vLLM applies the scales to; "
                              "export it from Quark with an FP8 KV cache first",
                              path, line);
        return KVCAL_OK;
    }
    if (f != KVCAL_FORMAT_MODELOPT)
        return KVCAL_OK;
    /* the cache dtype vLLM takes with --kv-cache-dtype auto
     * (get_kv_cache_quant_algo_string): FP8, or NVFP4 for NVFP4 sets */
    const int nvfp4 = kvf == KVCAL_KV_FORMAT_NVFP4;
    cJSON *targets[2] = {qc, hq};
    for (int i = 0; i < 2; i++) {
        if (!targets[i])
            continue;
        cJSON *inner = cJSON_GetObjectItemCaseSensitive(targets[i], "quantization");
        int ok2;
        if (cJSON_IsObject(inner)) {
            ok2 = set_item(inner, "kv_cache_quant_algo",
                           cJSON_CreateString(nvfp4 ? "NVFP4" : "FP8"));
        } else {
            cJSON *ks = cJSON_CreateObject();
            ok2 = ks && cJSON_AddFalseToObject(ks, "dynamic") &&
                  cJSON_AddNumberToObject(ks, "num_bits", nvfp4 ? 4 : 8) &&
                  cJSON_AddStringToObject(ks, "type", "float");
            if (!ok2)
                cJSON_Delete(ks);
            ok2 = ok2 && set_item(targets[i], "kv_cache_scheme", ks);
        }
        if (!ok2)
            return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory merging config", path);
    }
    return KVCAL_OK;
}

static kvcal_status merge_config(cJSON *config, cJSON *hq, const kvcal_scales_t *s,
                                 int per_head, kvcal_format f, const char *path)
{
    cJSON *qc = quant_config_of(config);
    if (qc && !cJSON_IsObject(qc))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config is not an object; fix "
                          "config.json first",
                          path);
    char method[64];
    cJSON *wrap = !qc && hq ? cJSON_CreateObject() : NULL;
    if (wrap)
        cJSON_AddItemReferenceToObject(wrap, "quantization_config", hq);
    loader ld = loader_of(wrap ? wrap : config, method, sizeof method);
    cJSON_Delete(wrap);
    if (qc && ld == KVCAL_LOADER_NONE)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config has no quant_method, so vLLM would "
                          "not read the scales; fix config.json first",
                          path);
    if (ld == KVCAL_LOADER_IGNORED)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: quantization_config.quant_method is \"%s\": vLLM gives "
                          "its attention layers no KV-cache method and skips k_scale / "
                          "v_scale, so the scales would never be used",
                          path, method);
    if (f != KVCAL_FORMAT_CHECKPOINT)
        return merge_config_for(qc ? qc : hq, hq, f, ld, method, s->format, path);
    if (s->format != KVCAL_KV_FORMAT_FP8_E4M3 && qc &&
        ld != KVCAL_LOADER_COMPRESSED_TENSORS)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: quantization_config.quant_method is \"%s\": a "
            "compressed-tensors kv_cache_scheme for an %s cache goes into "
            "an unquantized or compressed-tensors model only; write the "
            "kvcal format%s (" KVCAL_FORMAT_OPTIONS ")",
            path, method, s->format == KVCAL_KV_FORMAT_NVFP4 ? "NVFP4" : "int8",
            s->format == KVCAL_KV_FORMAT_NVFP4 ? " or modelopt for a ModelOpt model"
                                               : "");
    if (ld == KVCAL_LOADER_BASE && per_head)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: quantization_config.quant_method is \"%s\", whose vLLM "
                          "KV-cache method (BaseKVCacheMethod) reads one scale per "
                          "layer: per-head scales would fail to load; calibrate with "
                          "--granularity tensor",
                          path, method);
    int ok = 1;
    if (!qc) {
        qc = cJSON_AddObjectToObject(config, "quantization_config");
        ok = qc && cJSON_AddStringToObject(qc, "quant_method", "compressed-tensors") &&
             cJSON_AddStringToObject(qc, "format", "dense") &&
             cJSON_AddObjectToObject(qc, "config_groups") &&
             cJSON_AddArrayToObject(qc, "ignore") &&
             cJSON_AddStringToObject(qc, "quantization_status", "compressed");
    }
    ok = ok && set_item(qc, "kv_cache_scheme", make_scheme(per_head, s->format));
    if (ok && per_head)
        ok = set_item(qc, "total_num_kv_heads", cJSON_CreateNumber(s->num_kv_heads)) &&
             (s->model.num_attention_heads <= 0 ||
              set_item(qc, "total_num_heads",
                       cJSON_CreateNumber(s->model.num_attention_heads)));
    return ok ? KVCAL_OK
              : kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory merging config", path);
}

/* Builds the index: the model's own index with the scale tensors added, or
 * a new one listing model.safetensors (when present) and the new shard. */
static kvcal_status build_index(const char *model_dir, const kvcal_tensor_out *tensors,
                                int count, size_t shard_bytes, cJSON **out)
{
    char p[4096];
    cJSON *index = NULL;
    kvcal_checkpoint_t *ck = NULL;
    kvcal_status st = KVCAL_OK;
    *out = NULL;
    if (join(p, sizeof p, model_dir, KVCAL_CHECKPOINT_INDEX) == 0 && is_file(p)) {
        if ((st = kvcal_json_load(p, &index)))
            return st;
    } else {
        index = cJSON_CreateObject();
        cJSON *meta = index ? cJSON_AddObjectToObject(index, "metadata") : NULL;
        cJSON *map = index ? cJSON_AddObjectToObject(index, "weight_map") : NULL;
        double total = 0;
        if (!meta || !map) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "out of memory building the index");
            goto fail;
        }
        if (join(p, sizeof p, model_dir, "model.safetensors") == 0 && is_file(p)) {
            if ((st = kvcal_checkpoint_open(p, &ck)))
                goto fail;
            for (int i = 0; i < kvcal_checkpoint_count(ck); i++) {
                const kvcal_tensor_info *t = kvcal_checkpoint_at(ck, i);
                total += (double)t->nbytes;
                if (!cJSON_AddStringToObject(map, t->name, "model.safetensors")) {
                    st = kvcal_fail(KVCAL_ERR_NOMEM, "out of memory building the index");
                    goto fail;
                }
            }
        }
        cJSON_AddNumberToObject(meta, "total_size", total);
    }
    cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    if (!cJSON_IsObject(map)) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s/%s: weight_map is not an object; fix the index "
                        "first",
                        model_dir, KVCAL_CHECKPOINT_INDEX);
        goto fail;
    }
    for (const cJSON *at = map->child; at; at = at->next) {
        int kind;
        if (parse_scale_name(at->string, &kind) < 0 ||
            (cJSON_IsString(at) && !strcmp(at->valuestring, KVCAL_CHECKPOINT_SHARD)))
            continue;
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: %s is already stored in %.200s; vLLM would load it besides "
                        "the new " KVCAL_CHECKPOINT_SHARD " (the last one read wins): "
                        "remove the old KV scales from that shard first",
                        model_dir, at->string,
                        cJSON_IsString(at) ? at->valuestring : "another shard");
        goto fail;
    }
    for (int i = 0; i < count; i++)
        if (!set_item(map, tensors[i].name, cJSON_CreateString(KVCAL_CHECKPOINT_SHARD))) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "out of memory building the index");
            goto fail;
        }
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(index, "metadata");
    cJSON *total = cJSON_GetObjectItemCaseSensitive(meta, "total_size");
    if (cJSON_IsNumber(total))
        cJSON_SetNumberValue(total, total->valuedouble + (double)shard_bytes);
    *out = index;
    index = NULL;
fail:
    kvcal_checkpoint_close(ck);
    cJSON_Delete(index);
    return st;
}

int kvcal_scales_checkpoint_files(kvcal_format format, const char *model_dir,
                                  const char **names, int max)
{
    int n = 0;
    const char *all[4] = {KVCAL_CHECKPOINT_SHARD, KVCAL_CHECKPOINT_INDEX, "config.json",
                          KVCAL_MODELOPT_QUANT_CONFIG};
    char p[4096];
    int with_hq = format == KVCAL_FORMAT_MODELOPT && model_dir &&
                  !join(p, sizeof p, model_dir, KVCAL_MODELOPT_QUANT_CONFIG) &&
                  is_file(p);
    for (int i = 0; i < 3 + with_hq && n < max; i++)
        names[n++] = all[i];
    return n;
}

kvcal_status kvcal_scales_write_checkpoint(const kvcal_scales_t *s, kvcal_format format,
                                           const char *dir, const char *model_dir)
{
    if (!s || !dir || !model_dir)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "checkpoint export needs the model directory "
                          "(its config.json is copied with the scheme)");
    kvcal_status st = kvcal_scales_check_finite(s, dir);
    if (st)
        return st;
    kvcal_model_config mc;
    if ((st = kvcal_model_config_load(model_dir, &mc)))
        return st;
    if (mc.num_layers != s->num_layers ||
        (s->granularity == KVCAL_GRANULARITY_HEAD &&
         kvcal_model_config_cache_kv_heads(&mc) != s->num_kv_heads))
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "%s: the scales have %d layers x %d kv heads but "
                          "%s/config.json has %d x %d; pass the model the "
                          "scales were made for",
                          dir, s->num_layers, s->num_kv_heads, model_dir, mc.num_layers,
                          kvcal_model_config_cache_kv_heads(&mc));
    if (strlen(dir) + 64 >= 4096 || strlen(model_dir) + 64 >= 4096)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: path too long", dir);
    if ((st = kvcal_atomic_mkdir(dir)))
        return st;

    /* compressed-tensors' NVFP4: one global scale per layer and K/V, named
     * k_global_scale and holding 448 x 6 / amax (kvcal's reciprocal) */
    const int global =
        format == KVCAL_FORMAT_CHECKPOINT && s->format == KVCAL_KV_FORMAT_NVFP4;
    /* Only compressed-tensors' attn_head holds per-head scales; the formats
     * BaseKVCacheMethod reads get the max over heads. */
    int per_head = format == KVCAL_FORMAT_CHECKPOINT && !global &&
                   s->granularity == KVCAL_GRANULARITY_HEAD;
    /* the query's: Quark's q_proj.output_scale, compressed-tensors' q_scale
     * (per query head under attn_head, which vLLM reduces per kv-head group);
     * e4m3 scales, written beside an fp8 cache's alone */
    int with_q = (format == KVCAL_FORMAT_QUARK || format == KVCAL_FORMAT_CHECKPOINT) &&
                 s->has_q && s->format == KVCAL_KV_FORMAT_FP8_E4M3;
    for (int l = 0; with_q && l < s->num_layers; l++)
        with_q = s->q_scale[l] > 0.0f;
    const int q_heads = per_head ? mc.num_attention_heads : 1;
    const int own_q = per_head && s->q_head && s->num_q_heads == q_heads;
    int kinds[3], nk = 0;
    for (int k = 0; k <= KIND_Q; k++)
        if (write_name(format, k) && (k != KIND_Q || with_q))
            kinds[nk++] = global && k == KIND_K   ? KIND_KG
                          : global && k == KIND_V ? KIND_VG
                                                  : k;
    /* K and V under the names both engines load where sglang's loader takes
     * no other (kvcal_sglang_k_name): Qwen3-Next's per tensor under
     * ModelOpt's, Qwen2's, Mixtral's, ERNIE 4.5's, ... under the attention's
     * own */
    const char *sg = kvcal_sglang_k_name(mc.architecture);
    const int k_proj_names = format == KVCAL_FORMAT_CHECKPOINT && !global && !per_head &&
                             !strcmp(sg, "k_proj.k_scale");
    const int attn_names =
        format == KVCAL_FORMAT_CHECKPOINT && !global && !strcmp(sg, "attn.k_scale");
    int heads = per_head ? s->num_kv_heads : 1, n = nk * s->num_layers;
    if (with_q && q_heads > heads)
        heads = q_heads; /* values a tensor may hold */
    char p[4096], *names = NULL;
    float *data = NULL;
    kvcal_tensor_out *tensors = NULL;
    cJSON *config = NULL, *index = NULL, *hq = NULL;
    /* the scales beside the layers, named as the model's weights are (a
     * multimodal model's without weights: as transformers saves one) */
    const char *prefix = kvcal_lm_prefix(kvcal_lm_prefix_of_model_dir(
        model_dir, mc.multimodal ? KVCAL_LM_WRAPPED : KVCAL_LM_CAUSAL));
    names = malloc((size_t)n * 128);
    data = malloc(sizeof(float) * (size_t)n * heads);
    tensors = calloc((size_t)n, sizeof *tensors);
    if (!names || !data || !tensors) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    /* the layers that cache (not a hybrid model's linear-attention ones),
     * packed */
    int written = 0;
    for (int l = 0; l < s->num_layers; l++)
        for (int i = 0; i < nk && kvcal_model_config_layer_caches(&mc, l); i++) {
            const int at = written++;
            kvcal_tensor_out *t = &tensors[at];
            char *name = names + (size_t)at * 128;
            float *d = data + (size_t)at * heads, k, v;
            snprintf(name, 128, "%slayers.%d.self_attn.%s%s", prefix, l,
                     attn_names && kinds[i] != KIND_Q ? "attn." : "",
                     write_name(k_proj_names && kinds[i] != KIND_Q ? KVCAL_FORMAT_MODELOPT
                                                                   : format,
                                kinds[i]));
            kvcal_scales_get_tensor(s, l, &k, &v);
            const int nh = !per_head ? 1 : kinds[i] == KIND_Q ? q_heads : s->num_kv_heads;
            if (per_head && kinds[i] == KIND_Q)
                for (int h = 0; h < nh; h++)
                    d[h] = own_q ? s->q_head[(size_t)l * q_heads + h] : s->q_scale[l];
            else if (per_head)
                for (int h = 0; h < nh; h++)
                    d[h] = (kinds[i] == KIND_V ? s->v_head
                                               : s->k_head)[kvcal_scales_index(s, l, h)];
            else
                d[0] = kinds[i] == KIND_K    ? k
                       : kinds[i] == KIND_V  ? v
                       : kinds[i] == KIND_KG ? (float)(1.0 / (double)k)
                       : kinds[i] == KIND_VG ? (float)(1.0 / (double)v)
                       : kinds[i] == KIND_Q  ? s->q_scale[l]
                                             : (k > v ? k : v);
            t->name = name;
            t->dtype = KVCAL_DTYPE_F32;
            t->ndim = per_head ? 3 : 1;
            t->shape[0] = nh;
            t->shape[1] = 1;
            t->shape[2] = 1;
            t->data = d;
        }
    n = written;
    join(p, sizeof p, model_dir, "config.json");
    if ((st = kvcal_json_load(p, &config)))
        goto fail;
    char hq_path[4096];
    if (format == KVCAL_FORMAT_MODELOPT &&
        !join(hq_path, sizeof hq_path, model_dir, KVCAL_MODELOPT_QUANT_CONFIG) &&
        is_file(hq_path) && (st = kvcal_json_load(hq_path, &hq)))
        goto fail;
    if ((st = merge_config(config, hq, s, per_head, format, p)))
        goto fail;
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += sizeof(float) * (size_t)tensors[i].shape[0];
    if ((st = build_index(model_dir, tensors, n, bytes, &index)))
        goto fail;
    char meta[128];
    snprintf(meta, sizeof meta, "{\"format\": \"pt\", \"producer\": \"kvcal %s\"}",
             KVCAL_VERSION_STRING);
    join(p, sizeof p, dir, KVCAL_CHECKPOINT_SHARD);
    if ((st = kvcal_safetensors_write(p, tensors, n, meta)))
        goto fail;
    join(p, sizeof p, dir, KVCAL_CHECKPOINT_INDEX);
    if ((st = kvcal_json_write(p, index)))
        goto fail;
    join(p, sizeof p, dir, "config.json");
    if ((st = kvcal_json_write(p, config)))
        goto fail;
    if (hq) {
        join(p, sizeof p, dir, KVCAL_MODELOPT_QUANT_CONFIG);
        st = kvcal_json_write(p, hq);
    }
fail:
    free(names);
    free(data);
    free(tensors);
    cJSON_Delete(config);
    cJSON_Delete(index);
    cJSON_Delete(hq);
    return st;
}
