/* io/scales/scales_checkpoint.c: K/V scales stored in a Hugging Face checkpoint,
 * the compressed-tensors convention vLLM reads today.
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
 * them into float32 parameters), shape [1] or [H, 1, 1]. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"
#include "io/json_file.h"
#include "io/checkpoint/safetensors.h"
#include "io/scales/scales_io.h"

#define CK_MAX_LAYERS 65536
#define CK_IGNORED "vLLM uses scale 1.0 for the layer"

enum { KIND_K = 0, KIND_V = 1, KIND_KV = 2 };

/* Name suffixes after "model.layers.<i>.self_attn.", by kind. */
static const struct {
    const char *suffix;
    int kind;
} scale_names[] = {
    {"k_scale", KIND_K},
    {"v_scale", KIND_V},
    {"k_proj.output_scale", KIND_K},
    {"v_proj.output_scale", KIND_V},
    {"k_proj.k_scale", KIND_K},
    {"v_proj.v_scale", KIND_V},
    {"kv_scale", KIND_KV},
};

/* Parses a K/V scale tensor name; returns the layer or -1. */
static long parse_scale_name(const char *name, int *kind)
{
    static const char prefix[] = "model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1))
        return -1;
    const char *p = name + sizeof prefix - 1;
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
    p += 11;
    for (size_t i = 0; i < sizeof scale_names / sizeof scale_names[0]; i++)
        if (!strcmp(p, scale_names[i].suffix)) {
            *kind = scale_names[i].kind;
            return layer;
        }
    return -1;
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
} loader;

static loader loader_of(const cJSON *config, char *method, size_t size)
{
    const cJSON *qc = quant_config_of(config);
    snprintf(method, size, "%s", "");
    if (!cJSON_IsObject(qc))
        return KVCAL_LOADER_NONE;
    const cJSON *qm = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
    if (!cJSON_IsString(qm) || !qm->valuestring[0])
        return KVCAL_LOADER_NONE;
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
} scheme;

/* Checks kv_cache_scheme of a compressed-tensors config. */
static int check_ct_scheme(const cJSON *qc, kvcal_report_t *rep)
{
    const char *startup = "vLLM refuses to start (NotImplementedError)";
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
    if (!cJSON_IsNumber(bits) || bits->valuedouble != 8.0 || !cJSON_IsString(type) ||
        strcmp(type->valuestring, "float"))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
                         "config.json: quantization_config.kv_cache_scheme", startup,
                         "num_bits must be 8 and type \"float\" (fp8)");
    const cJSON *sym = cJSON_GetObjectItemCaseSensitive(ks, "symmetric");
    if (!cJSON_IsTrue(sym))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
                         "config.json: quantization_config.kv_cache_scheme.symmetric",
                         startup, "must be true");
    const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(ks, "dynamic");
    if (cJSON_IsTrue(dyn))
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
            "config.json: quantization_config.kv_cache_scheme.dynamic",
            "compressed-tensors creates no static scales for a dynamic scheme: "
            "the stored scales are not the ones used",
            "true, but the checkpoint stores static scales");
    const cJSON *strat = cJSON_GetObjectItemCaseSensitive(ks, "strategy");
    int head = cJSON_IsString(strat) && !strcmp(strat->valuestring, "attn_head");
    if (!head && !(cJSON_IsString(strat) && !strcmp(strat->valuestring, "tensor"))) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
                         "config.json: quantization_config.kv_cache_scheme.strategy",
                         startup, "must be \"tensor\" or \"attn_head\"");
        return -1;
    }
    if (head &&
        !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(qc, "total_num_kv_heads")))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "config.json: quantization_config.total_num_kv_heads",
                         "vLLM's attn_head scale loader reads it to slice each rank's "
                         "heads and fails to load the model without it",
                         "missing for strategy attn_head");
    return head;
}

/* Finds the loader of config.json's quantization method; reports the
 * configurations whose scales vLLM never uses. */
static scheme check_scheme(const cJSON *config, kvcal_report_t *rep)
{
    char method[64];
    scheme sc = {loader_of(config, method, sizeof method), -1};
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
        sc.strategy = check_ct_scheme(qc, rep);
    else if (sc.loader == KVCAL_LOADER_UNKNOWN)
        kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK,
                         "config.json: quantization_config.quant_method",
                         "vLLM 0.33 does not know it (only a plugin can add it): its "
                         "KV-cache rules were not checked",
                         "\"%.40s\"", method);
    else if (strcmp(method, "fp8"))
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
    const kvcal_tensor_info *t[3]; /* by KIND_ */
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
        t->dtype != KVCAL_DTYPE_F16 && t->dtype != KVCAL_DTYPE_F64) {
        const char *dn = kvcal_dtype_name(t->dtype);
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
            "vLLM copies it into a float32 parameter and the value is garbage",
            "dtype %s, expected F32, BF16 or F16", dn ? dn : "?");
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
    return (int)n;
}

/* Collects the scale tensors by layer; reports duplicates and extra layers.
 * *num_layers is 0 on entry when unknown (then inferred). */
static kvcal_status collect(const kvcal_checkpoint_t *ck, int *num_layers, int known,
                            kvcal_report_t *rep, layer_tensors **out)
{
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
    int old_names = 0;
    for (int i = 0; i < n; i++) {
        const kvcal_tensor_info *t = kvcal_checkpoint_at(ck, i);
        int kind;
        long l = parse_scale_name(t->name, &kind);
        if (l < 0)
            continue;
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
        if (strstr(t->name, "_proj.output_scale") && old_names++ == 0)
            kvcal_report_add(
                rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, t->name,
                "in models whose weight mapper stacks q/k/v (Llama, Qwen2, Qwen3) vLLM "
                "0.33 renames k_proj to qkv_proj before it maps scale names, finds no "
                "parameter qkv_proj.output_scale and refuses to load the model; name "
                "them self_attn.k_scale / v_scale",
                "older name (compressed-tensors and quark)");
        lt[l].t[kind] = t;
    }
    *out = lt;
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
static kvcal_status check_layers(const layer_tensors *lt, int num_layers, int heads,
                                 scheme sc, const kvcal_scales_ctx *ctx,
                                 kvcal_report_t *rep, kvcal_scales_t **out)
{
    kvcal_status st = KVCAL_OK;
    float *vals = malloc(sizeof(float) * 2 * (size_t)num_layers * heads); /* (L, 2, H) */
    float *vals_out =
        malloc(sizeof(float) * 2 * (size_t)num_layers * heads); /* (L, H, 2) */
    int *counts = calloc(2 * (size_t)num_layers, sizeof *counts);
    if (!vals || !vals_out || !counts) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "out of memory reading %d layers", num_layers);
        goto fail;
    }
    int base = sc.loader == KVCAL_LOADER_BASE;
    kvcal_value_tally tally = {0};
    int per_head = 0;
    for (int l = 0; l < num_layers; l++) {
        const kvcal_tensor_info *kt = lt[l].t[KIND_K], *vt = lt[l].t[KIND_V];
        const kvcal_tensor_info *kv = lt[l].t[KIND_KV];
        char place[64];
        snprintf(place, sizeof place, "model.layers.%d.self_attn", l);
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
    if (per_head)
        kvcal_report_check_tp_split(rep, "config.json: num_key_value_heads", heads,
                                    ctx->tp);
    kvcal_report_flush_tally(rep, KVCAL_FORMAT_CHECKPOINT, &tally);
    if (kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR) > 0)
        goto fail;
    int equal = 1, shared = 1;
    for (int l = 0; l < num_layers; l++) {
        shared &= !lt[l].t[KIND_K] && !lt[l].t[KIND_V];
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
    s->granularity = per_head ? KVCAL_GRANULARITY_HEAD : KVCAL_GRANULARITY_TENSOR;
    s->kv_shared = shared;
    if (ctx->model) {
        snprintf(s->model.architecture, sizeof s->model.architecture, "%s",
                 ctx->model->architecture);
        snprintf(s->model.model_type, sizeof s->model.model_type, "%s",
                 ctx->model->model_type);
        s->model.num_attention_heads = ctx->model->num_attention_heads;
        s->model.head_dim = ctx->model->head_dim;
    }
    *out = s;
fail:
    free(vals);
    free(vals_out);
    free(counts);
    return st;
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
    scheme sc = {KVCAL_LOADER_COMPRESSED_TENSORS, 2};
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
    }
    int num_layers = c.model ? c.model->num_layers : 0;
    if ((st = collect(ck, &num_layers, c.model != NULL, rep, &lt)))
        goto fail;
    if (num_layers <= 0 || !lt) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "",
                         "vLLM uses scale 1.0 for every layer",
                         "no model.layers.<i>.self_attn.k_scale / v_scale tensors");
        goto fail;
    }
    if (sc.loader == KVCAL_LOADER_IGNORED)
        goto fail;
    int heads = c.model ? c.model->num_kv_heads : 0;
    if (!heads)
        for (int l = 0; l < num_layers; l++)
            for (int k = 0; k < 3; k++)
                if (lt[l].t[k] && lt[l].t[k]->numel > heads && lt[l].t[k]->numel <= 65536)
                    heads = (int)lt[l].t[k]->numel;
    if (heads < 1)
        heads = 1;
    st = check_layers(lt, num_layers, heads, sc, &c, rep, out);
fail:
    free(lt);
    kvcal_checkpoint_close(ck);
    cJSON_Delete(config);
    return st ? st : kvcal_report_status(rep);
}

/* --- writing ------------------------------------------------------------- */

/* The kv_cache_scheme object of DESIGN.md. */
static cJSON *make_scheme(int per_head)
{
    cJSON *ks = cJSON_CreateObject();
    if (ks && cJSON_AddNumberToObject(ks, "num_bits", 8) &&
        cJSON_AddStringToObject(ks, "type", "float") &&
        cJSON_AddStringToObject(ks, "strategy", per_head ? "attn_head" : "tensor") &&
        cJSON_AddFalseToObject(ks, "dynamic") && cJSON_AddTrueToObject(ks, "symmetric"))
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
static kvcal_status merge_config(cJSON *config, const kvcal_scales_t *s, int per_head,
                                 const char *path)
{
    cJSON *qc = quant_config_of(config);
    if (qc && !cJSON_IsObject(qc))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config is not an object; fix "
                          "config.json first",
                          path);
    char method[64];
    loader ld = loader_of(config, method, sizeof method);
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
    ok = ok && set_item(qc, "kv_cache_scheme", make_scheme(per_head));
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

kvcal_status kvcal_scales_write_checkpoint(const kvcal_scales_t *s, const char *dir,
                                           const char *model_dir)
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
        (s->granularity == KVCAL_GRANULARITY_HEAD && mc.num_kv_heads != s->num_kv_heads))
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "%s: the scales have %d layers x %d kv heads but "
                          "%s/config.json has %d x %d; pass the model the "
                          "scales were made for",
                          dir, s->num_layers, s->num_kv_heads, model_dir, mc.num_layers,
                          mc.num_kv_heads);
    if (strlen(dir) + 64 >= 4096 || strlen(model_dir) + 64 >= 4096)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: path too long", dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot create the directory: %s", dir,
                          strerror(errno));

    int per_head = s->granularity == KVCAL_GRANULARITY_HEAD;
    int heads = per_head ? s->num_kv_heads : 1, n = 2 * s->num_layers;
    char p[4096], *names = NULL;
    float *data = NULL;
    kvcal_tensor_out *tensors = NULL;
    cJSON *config = NULL, *index = NULL;
    names = malloc((size_t)n * 64);
    data = malloc(sizeof(float) * (size_t)n * heads);
    tensors = calloc((size_t)n, sizeof *tensors);
    if (!names || !data || !tensors) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    for (int l = 0; l < s->num_layers; l++)
        for (int i = 0; i < 2; i++) {
            kvcal_tensor_out *t = &tensors[2 * l + i];
            char *name = names + (size_t)(2 * l + i) * 64;
            float *d = data + (size_t)(2 * l + i) * heads;
            snprintf(name, 64, "model.layers.%d.self_attn.%s", l,
                     i ? "v_scale" : "k_scale");
            if (per_head)
                for (int h = 0; h < heads; h++)
                    d[h] = (i ? s->v_head : s->k_head)[kvcal_scales_index(s, l, h)];
            else
                kvcal_scales_get_tensor(s, l, i ? NULL : &d[0], i ? &d[0] : NULL);
            t->name = name;
            t->dtype = KVCAL_DTYPE_F32;
            t->ndim = per_head ? 3 : 1;
            t->shape[0] = heads;
            t->shape[1] = 1;
            t->shape[2] = 1;
            t->data = d;
        }
    join(p, sizeof p, model_dir, "config.json");
    if ((st = kvcal_json_load(p, &config)))
        goto fail;
    if ((st = merge_config(config, s, per_head, p)))
        goto fail;
    if ((st = build_index(model_dir, tensors, n, sizeof(float) * (size_t)n * heads,
                          &index)))
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
    st = kvcal_json_write(p, config);
fail:
    free(names);
    free(data);
    free(tensors);
    cJSON_Delete(config);
    cJSON_Delete(index);
    return st;
}
