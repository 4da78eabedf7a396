/* io/checkpoint/weight_quant.c: the weight quantization of a checkpoint's
 * config (see weight_quant.h; the rules and their vLLM sources are in
 * schemas/README.md, "FP8 weights"). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/checkpoint/weight_quant.h"

#include <ctype.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/status.h"
#include "io/json_file.h"

#define MAX_GROUPS 16

/* How an ignore entry matches a module name. */
typedef enum {
    IGNORE_EXACT,   /* fp8: ignored_layers / modules_to_not_convert (is_layer_skipped) */
    IGNORE_CT,      /* compressed-tensors: the name, or "re:" + a regex (re.match) */
    IGNORE_MODELOPT /* ModelOpt: the name, a part of it, or an fnmatch wildcard */
} ignore_kind;

typedef struct {
    char key[64]; /* the config group's key, for messages */
    kvcal_wq_scheme scheme;
    cJSON *targets; /* compressed-tensors: names, "re:" regexes, "Linear"; else NULL
                       (every linear layer) */
} wq_group;

struct kvcal_weight_quant {
    kvcal_wq_method method;
    kvcal_wq_requant requant;
    char name[96];
    char source[4200]; /* the file the config was read from, "" for none */
    wq_group group[MAX_GROUPS];
    int groups;
    cJSON *ignore; /* array of strings, or NULL */
    ignore_kind ignore_kind;
};

/* Methods whose weights are never float 8-bit: refused before any tensor is
 * read (their tensors are not named weight) */
static const char *const int_methods[] = {
    "awq",          "awq_marlin",   "gptq",    "gptq_marlin",  "gptq_marlin_24",
    "marlin",       "bitsandbytes", "aqlm",    "hqq",          "gguf",
    "exl2",         "eetq",         "bitblas", "gptq_bitblas", "experts_int8",
    "moe_wna16",    "auto-round",   "mxfp4",   "torchao",      "bitnet",
    "tpu_int8",     "ipex",         "inc",     "fbgemm_fp8",   "ptpc_fp8",
    "modelopt_fp4", "petit_nvfp4",  NULL};

static int in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (!strcmp(*list, s))
            return 1;
    return 0;
}

static const cJSON *item(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsNull(it) ? NULL : it;
}

static const char *str_item(const cJSON *o, const char *key)
{
    const cJSON *it = item(o, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

static int bool_item(const cJSON *o, const char *key, int dflt)
{
    const cJSON *it = item(o, key);
    return cJSON_IsBool(it) ? cJSON_IsTrue(it) : dflt;
}

/* Key `key` of o (quantization_config.<where>) a string or absent; else an
 * error naming it. */
static kvcal_status check_string(const cJSON *o, const char *key, const char *name,
                                 const char *where)
{
    const cJSON *it = item(o, key);
    if (!it || cJSON_IsString(it))
        return KVCAL_OK;
    return kvcal_fail(KVCAL_ERR_FORMAT,
                      "%s: quantization_config.%s%s%s is not a string; fix the config",
                      name, where, where[0] ? "." : "", key);
}

/* The QuantizationArgs object a (quantization_config.<where>) with the
 * types compressed-tensors gives its fields: num_bits an integer, type and
 * strategy strings, symmetric true or false, dynamic true, false or
 * "local"; anything else is an error naming the field (read otherwise, it
 * would fall back to a default silently). */
static kvcal_status check_args(const cJSON *a, const char *name, const char *where)
{
    static const char *const strings[] = {"type", "strategy"};
    const cJSON *bits = item(a, "num_bits"), *sym = item(a, "symmetric"),
                *dyn = item(a, "dynamic");
    if (!cJSON_IsObject(a))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config.%s is not an object of quantization "
                          "arguments (num_bits, type, strategy, ...); fix the config",
                          name, where);
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        kvcal_status s = check_string(a, strings[i], name, where);
        if (s)
            return s;
    }
    if (bits && (!cJSON_IsNumber(bits) || bits->valuedouble != floor(bits->valuedouble) ||
                 fabs(bits->valuedouble) > INT_MAX))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config.%s.num_bits is not an integer; fix "
                          "the config",
                          name, where);
    if (sym && !cJSON_IsBool(sym))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config.%s.symmetric is not true or false; "
                          "fix the config",
                          name, where);
    if (dyn && !cJSON_IsBool(dyn) &&
        !(cJSON_IsString(dyn) && !strcmp(dyn->valuestring, "local")))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config.%s.dynamic is not true, false or "
                          "\"local\"; fix the config",
                          name, where);
    return KVCAL_OK;
}

/* Whether quantization arguments a are dynamic (true, or "local"). */
static int is_dynamic(const cJSON *a)
{
    const cJSON *it = item(a, "dynamic");
    return cJSON_IsTrue(it) || cJSON_IsString(it);
}

/* Each "re:" entry of a list of module names (quantization_config.<where>)
 * a regular expression; else an error naming it (Python's re.match would
 * raise where vLLM reads it; a pattern that never compiled would never
 * match here). */
static kvcal_status check_regexes(const cJSON *list, const char *name, const char *where)
{
    for (const cJSON *e = list ? list->child : NULL; e; e = e->next) {
        int err;
        PCRE2_SIZE off;
        pcre2_code *re;
        if (strncmp(e->valuestring, "re:", 3))
            continue;
        if ((re = pcre2_compile((PCRE2_SPTR)e->valuestring + 3, PCRE2_ZERO_TERMINATED,
                                PCRE2_ANCHORED, &err, &off, NULL))) {
            pcre2_code_free(re);
            continue;
        }
        PCRE2_UCHAR why[120];
        if (pcre2_get_error_message(err, why, sizeof why) < 0)
            snprintf((char *)why, sizeof why, "error %d", err);
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config.%s entry \"%.200s\" is not a valid "
                          "regular expression (%s at offset %zu); fix the config",
                          name, where, e->valuestring, (const char *)why, (size_t)off);
    }
    return KVCAL_OK;
}

/* An array of strings or absent; anything else is an error naming `where`. */
static kvcal_status string_list(const cJSON *it, const char *name, const char *where,
                                cJSON **out)
{
    *out = NULL;
    if (!it || cJSON_IsNull(it))
        return KVCAL_OK;
    int ok = cJSON_IsArray(it);
    for (const cJSON *e = ok ? it->child : NULL; e; e = e->next)
        ok &= cJSON_IsString(e);
    if (!ok)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config.%s is not a list of module names; fix "
                          "the config",
                          name, where);
    if (!(*out = cJSON_Duplicate(it, 1)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", name);
    return KVCAL_OK;
}

/* A block size [n, k] of positive integers into *bn, *bk. */
static kvcal_status block_size(const cJSON *it, const char *name, const char *where,
                               int *bn, int *bk)
{
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2 || !cJSON_IsNumber(it->child) ||
        !cJSON_IsNumber(it->child->next) || it->child->valuedouble < 1 ||
        it->child->next->valuedouble < 1 || it->child->valuedouble > 65536 ||
        it->child->next->valuedouble > 65536 ||
        it->child->valuedouble != (int)it->child->valuedouble ||
        it->child->next->valuedouble != (int)it->child->next->valuedouble)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config.%s is not [block_n, block_k] of "
                          "positive integers; fix the config",
                          name, where);
    *bn = (int)it->child->valuedouble;
    *bk = (int)it->child->next->valuedouble;
    return KVCAL_OK;
}

// --- compressed-tensors ----------------------------------------------------

/* "int 4-bit", "float 8-bit" ... of a QuantizationArgs object. */
static void args_text(const cJSON *a, char *buf, size_t n)
{
    const cJSON *bits = item(a, "num_bits");
    const char *type = str_item(a, "type"), *strategy = str_item(a, "strategy");
    snprintf(buf, n, "%s %d-bit%s%s%s", type ? type : "int",
             cJSON_IsNumber(bits) ? (int)bits->valuedouble : 8,
             strategy ? " (strategy " : "", strategy ? strategy : "",
             strategy ? ")" : "");
}

static int is_float8(const cJSON *a)
{
    const cJSON *bits = item(a, "num_bits");
    const char *type = str_item(a, "type");
    return type && !strcmp(type, "float") && cJSON_IsNumber(bits) &&
           bits->valuedouble == 8;
}

/* One config group of float 8-bit weights into g (vLLM's _is_fp8_w8a8 and
 * _is_fp8_w8a16, CompressedTensorsW8A8Fp8). */
static kvcal_status ct_group(const cJSON *grp, const char *name, wq_group *g)
{
    const cJSON *w = item(grp, "weights"), *a = item(grp, "input_activations");
    char what[96], where[160];
    kvcal_status s;
    if (!cJSON_IsObject(grp))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config.config_groups.%s is not an object "
                          "(targets, weights, input_activations); fix the config",
                          name, g->key);
    if (!w)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: quantization_config.config_groups.%s quantizes no weights "
                          "(activations only); kvcal runs FP8 weights",
                          name, g->key);
    snprintf(where, sizeof where, "config_groups.%s.weights", g->key);
    if ((s = check_args(w, name, where)))
        return s;
    snprintf(where, sizeof where, "config_groups.%s.input_activations", g->key);
    if (a && (s = check_args(a, name, where)))
        return s;
    args_text(w, what, sizeof what);
    const char *ws = str_item(w, "strategy");
    if (!is_float8(w))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: quantization_config.config_groups.%s: weights %s are not "
                          "supported; kvcal runs FP8 (float 8-bit) weights",
                          name, g->key, what);
    if (is_dynamic(w) || !bool_item(w, "symmetric", 1) || !ws ||
        (strcmp(ws, "tensor") && strcmp(ws, "channel") && strcmp(ws, "block")))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: quantization_config.config_groups.%s: weights %s%s%s are not "
            "an FP8 scheme vLLM serves (static symmetric tensor, channel or "
            "block strategy)",
            name, g->key, what, is_dynamic(w) ? ", dynamic" : "",
            bool_item(w, "symmetric", 1) ? "" : ", asymmetric");
    kvcal_fp8_linear *f = &g->scheme.fp8;
    f->w = !strcmp(ws, "tensor")    ? KVCAL_FP8W_TENSOR
           : !strcmp(ws, "channel") ? KVCAL_FP8W_CHANNEL
                                    : KVCAL_FP8W_BLOCK;
    if (f->w == KVCAL_FP8W_BLOCK) {
        snprintf(where, sizeof where, "config_groups.%s.weights.block_structure", g->key);
        if ((s = block_size(item(w, "block_structure"), name, where, &f->block_n,
                            &f->block_k)))
            return s;
    }
    g->scheme.scale_name = "weight_scale";
    if (!a) { /* weight-only: CompressedTensorsW8A16Fp8 */
        f->a = KVCAL_FP8A_NONE;
        return KVCAL_OK;
    }
    args_text(a, what, sizeof what);
    if (!is_float8(a) || !bool_item(a, "symmetric", 1))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: quantization_config.config_groups.%s: input activations %s "
            "are not supported; kvcal runs FP8 (float 8-bit, symmetric) "
            "activations",
            name, g->key, what);
    const char *as = str_item(a, "strategy");
    if (is_dynamic(a)) {
        /* dynamic: per token, per group of block_structure[0] for block weights */
        f->a = f->w == KVCAL_FP8W_BLOCK ? KVCAL_FP8A_GROUP : KVCAL_FP8A_TOKEN;
        f->group = f->w == KVCAL_FP8W_BLOCK ? f->block_n : 0;
        return KVCAL_OK;
    }
    if (!as || strcmp(as, "tensor") || f->w == KVCAL_FP8W_BLOCK)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: quantization_config.config_groups.%s: static input "
            "activations %s%s: vLLM serves static FP8 activations per tensor "
            "only, and block weights with dynamic activations only",
            name, g->key, what, f->w == KVCAL_FP8W_BLOCK ? " with block weights" : "");
    f->a = KVCAL_FP8A_STATIC;
    g->scheme.input_scale = 1;
    return KVCAL_OK;
}

static kvcal_status parse_ct(kvcal_weight_quant_t *q, const cJSON *qc, const char *name)
{
    const cJSON *groups = item(qc, "config_groups");
    kvcal_status s;
    q->ignore_kind = IGNORE_CT;
    if ((s = string_list(item(qc, "ignore"), name, "ignore", &q->ignore)) ||
        (s = check_regexes(q->ignore, name, "ignore")))
        return s;
    if (groups && !cJSON_IsObject(groups))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config.config_groups is not an object of "
                          "named groups ({\"group_0\": {\"targets\", \"weights\", "
                          "...}}); fix the config",
                          name);
    if (!groups || !groups->child) /* sparsity or KV cache only */
        return KVCAL_OK;
    q->method = KVCAL_WQ_COMPRESSED_TENSORS;
    snprintf(q->name, sizeof q->name, "compressed-tensors");
    for (const cJSON *g = groups->child; g; g = g->next) {
        if (q->groups == MAX_GROUPS)
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: quantization_config.config_groups: more than %d groups", name,
                MAX_GROUPS);
        wq_group *dst = &q->group[q->groups++];
        snprintf(dst->key, sizeof dst->key, "%.60s", g->string);
        char where[128];
        snprintf(where, sizeof where, "config_groups.%.60s.targets", g->string);
        if ((s = ct_group(g, name, dst)) ||
            (s = string_list(item(g, "targets"), name, where, &dst->targets)) ||
            (s = check_regexes(dst->targets, name, where)))
            return s;
    }
    return KVCAL_OK;
}

// --- fp8 and ModelOpt --------------------------------------------------------

/* quant_method fp8 (vLLM's Fp8Config / Fp8LinearMethod). */
static kvcal_status parse_fp8(kvcal_weight_quant_t *q, const cJSON *qc, const char *name)
{
    const char *act = str_item(qc, "activation_scheme"), *fmt = str_item(qc, "fmt");
    wq_group *g = &q->group[0];
    kvcal_fp8_linear *f = &g->scheme.fp8;
    kvcal_status s;
    q->method = KVCAL_WQ_FP8;
    q->groups = 1;
    q->ignore_kind = IGNORE_EXACT;
    snprintf(q->name, sizeof q->name, "fp8");
    snprintf(g->key, sizeof g->key, "fp8");
    if ((s = check_string(qc, "activation_scheme", name, "")) ||
        (s = check_string(qc, "fmt", name, "")))
        return s;
    if (!act || (strcmp(act, "static") && strcmp(act, "dynamic")))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: quantization_config.activation_scheme is %s%s%s; the fp8 "
                          "method needs \"static\" or \"dynamic\"",
                          name, act ? "\"" : "missing", act ? act : "", act ? "\"" : "");
    if (fmt && strcmp(fmt, "e4m3"))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: quantization_config.fmt \"%s\": kvcal runs e4m3 FP8 weights", name, fmt);
    /* vLLM's Fp8Config: ignored_layers, else (absent or empty)
     * modules_to_not_convert; each checked under its own key */
    cJSON *other = NULL;
    if ((s = string_list(item(qc, "ignored_layers"), name, "ignored_layers",
                         &q->ignore)) ||
        (s = string_list(item(qc, "modules_to_not_convert"), name,
                         "modules_to_not_convert", &other)))
        return s;
    if (!q->ignore || !q->ignore->child) {
        cJSON_Delete(q->ignore);
        q->ignore = other;
        other = NULL;
    }
    cJSON_Delete(other);
    const cJSON *bs = item(qc, "weight_block_size");
    if (bs) {
        if ((s = block_size(bs, name, "weight_block_size", &f->block_n, &f->block_k)))
            return s;
        if (strcmp(act, "dynamic"))
            return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                              "%s: quantization_config: weight_block_size with static "
                              "activations; vLLM serves block-wise FP8 with dynamic "
                              "activations only",
                              name);
        f->w = KVCAL_FP8W_BLOCK;
        f->a = KVCAL_FP8A_GROUP;
        f->group = f->block_n;
        g->scheme.scale_name = "weight_scale_inv";
        return KVCAL_OK;
    }
    f->w = KVCAL_FP8W_TENSOR;
    g->scheme.scale_name = "weight_scale";
    /* dynamic: per token where vLLM's CUTLASS FP8 GEMMs run (sm_89 and up) */
    f->a = strcmp(act, "static") ? KVCAL_FP8A_TOKEN : KVCAL_FP8A_STATIC;
    g->scheme.input_scale = f->a == KVCAL_FP8A_STATIC;
    return KVCAL_OK;
}

/* ModelOpt: {"quant_algo", "ignore"} in config.json, or {"quantization":
 * {"quant_algo", "exclude_modules"}} in hf_quant_config.json
 * (ModelOptQuantConfigBase.from_config). */
static kvcal_status parse_modelopt(kvcal_weight_quant_t *q, const cJSON *qc,
                                   const char *name)
{
    const cJSON *nested = item(qc, "quantization");
    const cJSON *src = cJSON_IsObject(nested) ? nested : qc;
    const char *algo = str_item(src, "quant_algo");
    wq_group *g = &q->group[0];
    kvcal_fp8_linear *f = &g->scheme.fp8;
    kvcal_status s;
    if (nested && !cJSON_IsObject(nested))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: \"quantization\" is not an object (ModelOpt writes "
                          "{\"quant_algo\", \"kv_cache_quant_algo\", "
                          "\"exclude_modules\"}); fix the file",
                          name);
    if ((s = check_string(src, "quant_algo", name, src == nested ? "quantization" : "")))
        return s;
    q->ignore_kind = IGNORE_MODELOPT;
    if ((s = string_list(item(src, src == nested ? "exclude_modules" : "ignore"), name,
                         src == nested ? "quantization.exclude_modules" : "ignore",
                         &q->ignore)))
        return s;
    if (!algo) /* KV cache only */
        return KVCAL_OK;
    char up[32];
    size_t i = 0;
    for (; algo[i] && i + 1 < sizeof up; i++)
        up[i] = (char)toupper((unsigned char)algo[i]);
    up[i] = '\0';
    q->method = KVCAL_WQ_MODELOPT;
    q->groups = 1;
    snprintf(q->name, sizeof q->name, "modelopt %s", up);
    snprintf(g->key, sizeof g->key, "%s", up);
    g->scheme.scale_name = "weight_scale";
    if (!strcmp(up, "FP8")) {
        f->w = KVCAL_FP8W_TENSOR;
        f->a = KVCAL_FP8A_STATIC;
        g->scheme.input_scale = 1;
        q->requant = KVCAL_WQ_REQUANT_IF_DIFFERENT;
    } else if (!strcmp(up, "FP8_PER_CHANNEL_PER_TOKEN")) {
        f->w = KVCAL_FP8W_CHANNEL;
        f->a = KVCAL_FP8A_TOKEN;
    } else if (!strcmp(up, "FP8_PB_WO")) {
        f->w = KVCAL_FP8W_BLOCK;
        f->block_n = f->block_k = f->group = 128;
        f->a = KVCAL_FP8A_GROUP;
    } else {
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: ModelOpt quant_algo \"%s\" is not supported; kvcal runs "
                          "FP8, FP8_PER_CHANNEL_PER_TOKEN and FP8_PB_WO weights",
                          name, algo);
    }
    return KVCAL_OK;
}

// --- public --------------------------------------------------------------------

kvcal_status kvcal_weight_quant_parse(const cJSON *qc, const char *name,
                                      kvcal_weight_quant_t **out)
{
    kvcal_weight_quant_t *q = calloc(1, sizeof *q);
    kvcal_status s = KVCAL_OK;
    *out = NULL;
    if (!q)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", name);
    if (qc && !cJSON_IsObject(qc)) {
        s = kvcal_fail(KVCAL_ERR_FORMAT, "%s: quantization_config is not an object",
                       name);
        goto done;
    }
    if (qc && (s = check_string(qc, "quant_method", name, "")))
        goto done;
    if (qc)
        snprintf(q->source, sizeof q->source, "%s", name);
    const char *qm = str_item(qc, "quant_method");
    char method[64] = "";
    for (size_t i = 0; qm && qm[i] && i + 1 < sizeof method; i++) {
        method[i] = (char)tolower((unsigned char)qm[i]);
        method[i + 1] = '\0';
    }
    if (!strcmp(method, "compressed_tensors"))
        snprintf(method, sizeof method, "compressed-tensors");
    if (!qc)
        goto done;
    if (!strcmp(method, "compressed-tensors"))
        s = parse_ct(q, qc, name);
    else if (!strcmp(method, "fp8"))
        s = parse_fp8(q, qc, name);
    else if (!strcmp(method, "modelopt") || (!method[0] && item(qc, "quantization")))
        s = parse_modelopt(q, qc, name); /* hf_quant_config.json names no method */
    else if (in_list(int_methods, method))
        s = kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: quantization_config.quant_method \"%s\" is not supported: kvcal "
            "runs FP8 weights of compressed-tensors, fp8 and modelopt "
            "checkpoints (or unquantized ones)",
            name, qm);
    else if (method[0]) {
        q->method = KVCAL_WQ_OTHER;
        snprintf(q->name, sizeof q->name, "%.60s", method);
    }
done:
    if (s) {
        kvcal_weight_quant_destroy(q);
        return s;
    }
    *out = q;
    return KVCAL_OK;
}

kvcal_status kvcal_weight_quant_load(const char *dir, kvcal_weight_quant_t **out)
{
    char path[4200];
    cJSON *cfg = NULL, *hq = NULL;
    struct stat sb;
    *out = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    kvcal_status s = kvcal_json_load(path, &cfg);
    if (s)
        return s;
    const cJSON *qc = item(cfg, "quantization_config");
    if (!qc) { /* ModelOpt 0.29 and before: hf_quant_config.json alone */
        snprintf(path, sizeof path, "%s/hf_quant_config.json", dir);
        if (stat(path, &sb) == 0 && (s = kvcal_json_load(path, &hq)))
            goto done;
        if (hq && cJSON_IsObject(hq) && !item(hq, "quantization")) {
            s = kvcal_fail(KVCAL_ERR_FORMAT,
                           "%s: no \"quantization\" object (ModelOpt writes "
                           "{\"quantization\": {\"quant_algo\", ...}}); fix the file, "
                           "or remove it if the model is not quantized",
                           path);
            goto done;
        }
        qc = hq;
    }
    s = kvcal_weight_quant_parse(qc, path, out);
done:
    cJSON_Delete(cfg);
    cJSON_Delete(hq);
    return s;
}

void kvcal_weight_quant_destroy(kvcal_weight_quant_t *q)
{
    if (!q)
        return;
    for (int i = 0; i < q->groups; i++)
        cJSON_Delete(q->group[i].targets);
    cJSON_Delete(q->ignore);
    free(q);
}

kvcal_wq_method kvcal_weight_quant_method(const kvcal_weight_quant_t *q)
{
    return q ? q->method : KVCAL_WQ_NONE;
}

kvcal_wq_requant kvcal_weight_quant_requant(const kvcal_weight_quant_t *q)
{
    return q ? q->requant : KVCAL_WQ_REQUANT_ALWAYS;
}

const char *kvcal_weight_quant_name(const kvcal_weight_quant_t *q)
{
    return q ? q->name : "";
}

const char *kvcal_weight_quant_source(const kvcal_weight_quant_t *q)
{
    return q ? q->source : "";
}

/* Python's re.match(regex, s): a match anchored at the start. */
static int regex_match(const char *regex, const char *s)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)regex, PCRE2_ZERO_TERMINATED,
                                   PCRE2_ANCHORED, &err, &off, NULL);
    if (!re)
        return 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int hit = md && pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL) >= 0;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return hit;
}

static int ignored(const kvcal_weight_quant_t *q, const char *module)
{
    for (const cJSON *e = q->ignore ? q->ignore->child : NULL; e; e = e->next) {
        const char *p = e->valuestring;
        if (!strcmp(p, module))
            return 1;
        if (q->ignore_kind == IGNORE_CT && !strncmp(p, "re:", 3) &&
            regex_match(p + 3, module))
            return 1;
        if (q->ignore_kind == IGNORE_MODELOPT &&
            (strstr(module, p) || fnmatch(p, module, 0) == 0))
            return 1;
    }
    return 0;
}

/* compressed-tensors' find_matched_target: a target naming the module, then a
 * regex matching it, then the class name "Linear". */
static const wq_group *target_of(const kvcal_weight_quant_t *q, const char *module)
{
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < q->groups; i++) {
            const wq_group *g = &q->group[i];
            if (!g->targets)
                return pass == 0 ? g : NULL;
            for (const cJSON *t = g->targets->child; t; t = t->next) {
                const char *p = t->valuestring;
                if ((pass == 0 && !strcmp(p, module)) ||
                    (pass == 1 && !strncmp(p, "re:", 3) && regex_match(p + 3, module)) ||
                    (pass == 2 && !strcmp(p, "Linear")))
                    return g;
            }
        }
    return NULL;
}

void kvcal_weight_quant_module(const kvcal_weight_quant_t *q, const char *module,
                               kvcal_wq_scheme *out)
{
    memset(out, 0, sizeof *out);
    if (!q || q->method == KVCAL_WQ_NONE || q->method == KVCAL_WQ_OTHER ||
        ignored(q, module))
        return;
    const wq_group *g = target_of(q, module);
    if (g)
        *out = g->scheme;
}

void kvcal_wq_scheme_describe(const kvcal_fp8_linear *s, char *buf, size_t n)
{
    char w[64], a[64];
    switch (s->w) {
    case KVCAL_FP8W_TENSOR:
        snprintf(w, sizeof w, "per-tensor");
        break;
    case KVCAL_FP8W_CHANNEL:
        snprintf(w, sizeof w, "per-channel");
        break;
    case KVCAL_FP8W_BLOCK:
        snprintf(w, sizeof w, "block %dx%d", s->block_n, s->block_k);
        break;
    default:
        snprintf(buf, n, "unquantized");
        return;
    }
    switch (s->a) {
    case KVCAL_FP8A_STATIC:
        snprintf(a, sizeof a, "static per-tensor");
        break;
    case KVCAL_FP8A_TOKEN:
        snprintf(a, sizeof a, "dynamic per-token");
        break;
    case KVCAL_FP8A_GROUP:
        snprintf(a, sizeof a, "dynamic per-token group of %d", s->group);
        break;
    default:
        snprintf(a, sizeof a, "unquantized (weight-only)");
        break;
    }
    snprintf(buf, n, "FP8 e4m3 weights %s, activations %s", w, a);
}
