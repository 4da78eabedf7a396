/* io/checkpoint/model_config.c: the fields of config.json the toolkit needs.
 *
 * Defaults follow the transformers config classes where a field is absent or
 * null: rope_theta 10000, rms_norm_eps 1e-6, head_dim hidden_size /
 * num_attention_heads (qwen3: 128), num_key_value_heads = num_attention_heads
 * when null, and when absent the class default (mistral 8, qwen2 and qwen3 32,
 * llama num_attention_heads), mistral sliding_window 4096; qwen2/qwen3 use
 * sliding_window only when use_sliding_window is true; max_position_embeddings,
 * vocab_size and intermediate_size the class defaults of those four types.
 * Qwen2 always has q/k/v biases, Qwen3 always a per-head q/k RMSNorm. */
#include "io/checkpoint/model_config.h"

#include <dirent.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"
#include "io/json_file.h"

/* --- typed field access -------------------------------------------------- */

/* One object being read: its items and the prefix of its fields in messages
 * ("" at the top, "rope_scaling." below). */
typedef struct cfg_obj {
    const cJSON *obj;
    const char *prefix;
    const char *name;
} cfg_obj;

/* The item of `key`, or NULL when absent or null. */
static const cJSON *cfg_item(const cfg_obj *o, const char *key)
{
    const cJSON *it = o->obj ? cJSON_GetObjectItemCaseSensitive(o->obj, key) : NULL;
    return cJSON_IsNull(it) ? NULL : it;
}

/* "a string \"32\"", "true", "an object" ... for messages. */
static const char *cfg_describe(const cJSON *it, char *buf, size_t cap)
{
    if (cJSON_IsString(it))
        snprintf(buf, cap, "a string \"%.40s\"", it->valuestring);
    else if (cJSON_IsBool(it))
        snprintf(buf, cap, "%s", cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsNumber(it))
        snprintf(buf, cap, "%.17g", it->valuedouble);
    else if (cJSON_IsNull(it))
        snprintf(buf, cap, "null");
    else
        snprintf(buf, cap, "%s", cJSON_IsArray(it) ? "an array" : "an object");
    return buf;
}

static kvcal_status cfg_bad(const cfg_obj *o, const char *key, const cJSON *it,
                            const char *want)
{
    char buf[64];
    return kvcal_fail(KVCAL_ERR_FORMAT,
                      "%s: field \"%s%s\": expected %s, found %s; fix the value", o->name,
                      o->prefix, key, want, cfg_describe(it, buf, sizeof buf));
}

static kvcal_status cfg_missing(const cfg_obj *o, const char *key, const char *why)
{
    return kvcal_fail(
        KVCAL_ERR_FORMAT,
        "%s: field \"%s%s\" is missing%s; add it (see the model's transformers config)",
        o->name, o->prefix, key, why);
}

/* Integer in [min, max] (max INT_MAX: no bound of kvcal's own). Absent:
 * *out untouched, *found = 0 (found may be NULL). */
static kvcal_status cfg_int(const cfg_obj *o, const char *key, int min, int max,
                            int *out, int *found)
{
    const cJSON *it = cfg_item(o, key);
    if (found)
        *found = it != NULL;
    if (!it)
        return KVCAL_OK;
    char want[96];
    if (max == INT_MAX)
        snprintf(want, sizeof want, "an integer >= %d", min);
    else
        snprintf(want, sizeof want, "an integer in [%d, %d]%s", min, max,
                 cJSON_IsNumber(it) && it->valuedouble > max
                     ? " (kvcal's bound, far above any real model)"
                     : "");
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
        it->valuedouble < min || it->valuedouble > max)
        return cfg_bad(o, key, it, want);
    *out = (int)it->valuedouble;
    return KVCAL_OK;
}

static kvcal_status cfg_required_int(const cfg_obj *o, const char *key, int min, int max,
                                     int *out)
{
    int found;
    kvcal_status s = cfg_int(o, key, min, max, out, &found);
    if (s == KVCAL_OK && !found)
        return cfg_missing(o, key, "");
    return s;
}

/* Finite number in (lo, hi]. Absent: *out untouched. */
static kvcal_status cfg_double(const cfg_obj *o, const char *key, double lo, double hi,
                               double *out, int *found)
{
    const cJSON *it = cfg_item(o, key);
    if (found)
        *found = it != NULL;
    if (!it)
        return KVCAL_OK;
    if (!cJSON_IsNumber(it) || !(it->valuedouble > lo) || !(it->valuedouble <= hi)) {
        char want[64];
        if (hi < INFINITY)
            snprintf(want, sizeof want, "a number in (%g, %g]", lo, hi);
        else
            snprintf(want, sizeof want, "a number > %g", lo);
        return cfg_bad(o, key, it, want);
    }
    *out = it->valuedouble;
    return KVCAL_OK;
}

static kvcal_status cfg_bool(const cfg_obj *o, const char *key, int *out)
{
    const cJSON *it = cfg_item(o, key);
    if (!it)
        return KVCAL_OK;
    if (!cJSON_IsBool(it))
        return cfg_bad(o, key, it, "true or false");
    *out = cJSON_IsTrue(it);
    return KVCAL_OK;
}

/* String shorter than cap. Absent: dst untouched, *found = 0. */
static kvcal_status cfg_string(const cfg_obj *o, const char *key, char *dst, size_t cap,
                               int *found)
{
    const cJSON *it = cfg_item(o, key);
    if (found)
        *found = it != NULL;
    if (!it)
        return KVCAL_OK;
    char want[48];
    snprintf(want, sizeof want, "a string of 1 to %zu characters", cap - 1);
    if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) >= cap)
        return cfg_bad(o, key, it, want);
    memcpy(dst, it->valuestring, strlen(it->valuestring) + 1);
    return KVCAL_OK;
}

/* An object or absent; anything else is an error. */
static kvcal_status cfg_object(const cfg_obj *o, const char *key, const cJSON **out)
{
    const cJSON *it = cfg_item(o, key);
    *out = NULL;
    if (it && !cJSON_IsObject(it))
        return cfg_bad(o, key, it, "an object or null");
    *out = it;
    return KVCAL_OK;
}

/* --- sections ------------------------------------------------------------- */

/* The family whose fields config model_type `t` has: a multimodal model's
 * language model reads as its text family (Qwen3-VL's qwen3_vl_text as
 * qwen3, qwen3_vl_moe_text as qwen3_moe; Qwen2-VL's and Qwen2.5-VL's
 * qwen2_vl, qwen2_5_vl and their _text as qwen2; GLM-4.5V's and 4.6V's
 * glm4v_moe_text as glm4_moe), any other as itself. */
static const char *family_type(const char *t)
{
    static const char *const alias[][2] = {
        {"qwen3_vl_text", "qwen3"},     {"qwen3_vl_moe_text", "qwen3_moe"},
        {"glm4v_moe_text", "glm4_moe"}, {"qwen2_5_vl", "qwen2"},
        {"qwen2_5_vl_text", "qwen2"},   {"qwen2_vl", "qwen2"},
        {"qwen2_vl_text", "qwen2"}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(t, alias[i][0]))
            return alias[i][1];
    return t;
}

/* Qwen3-Next's and Qwen3.5's model types: gated delta-net layers among
 * gated attention layers. */
static int gated_delta_type(const char *t)
{
    return !strcmp(t, "qwen3_next") || !strcmp(t, "qwen3_5_text") ||
           !strcmp(t, "qwen3_5_moe_text");
}

/* The transformers config class defaults of the sizes a config.json may
 * omit; other model types keep 0 (unknown). */
static void cfg_default_sizes(kvcal_model_config *c)
{
    static const struct {
        const char *model_type;
        int context, vocab, intermediate;
    } defaults[] = {{"llama", 2048, 32000, 11008},
                    {"mistral", 131072, 32000, 14336},
                    {"qwen2", 32768, 151936, 22016},
                    {"qwen3", 32768, 151936, 22016},
                    {"qwen3_vl_text", 128000, 151936, 22016},
                    {"qwen3_vl_moe_text", 128000, 151936, 5632},
                    {"qwen2_5_vl", 32768, 152064, 29568},
                    {"qwen2_5_vl_text", 32768, 152064, 29568},
                    {"qwen2_vl", 32768, 152064, 29568},
                    {"qwen2_vl_text", 32768, 152064, 29568},
                    {"qwen2_moe", 32768, 151936, 5632},
                    {"qwen3_moe", 32768, 151936, 6144},
                    {"qwen3_next", 32768, 151936, 5632},
                    {"qwen3_5_text", 32768, 248320, 12288},
                    {"qwen3_5_moe_text", 32768, 248320, 0},
                    {"mixtral", 131072, 32000, 14336},
                    {"phi3", 4096, 32064, 8192},
                    {"gemma3_text", 131072, 262208, 9216},
                    {"gemma2", 8192, 256000, 9216},
                    {"glm4_moe", 131072, 151552, 10944},
                    {"glm4v_moe_text", 65536, 151424, 10944},
                    {"glm4", 131072, 151552, 13696},
                    {"glm4v_text", 32768, 151552, 13696},
                    /* ERNIE 4.5's dense layers' (its experts': cfg_read_ernie45) */
                    {"ernie4_5_moe", 131072, 103424, 12288},
                    {"exaone4", 2048, 102400, 16384},
                    {"seed_oss", 524288, 155136, 27648},
                    {"smollm3", 32768, 128256, 11008},
                    {"olmo2", 2048, 50304, 11008},
                    {"olmo3", 2048, 50304, 11008},
                    {"deepseek_v2", 2048, 102400, 11008},
                    {"deepseek_v3", 4096, 129280, 18432},
                    {"kimi_k2", 4096, 129280, 18432},
                    {"glm4_moe_lite", 202752, 154880, 10240},
                    {"deepseek_v32", 163840, 129280, 18432},
                    {"glm_moe_dsa", 202752, 154880, 12288},
                    {"gpt_oss", 131072, 201088, 2880},
                    {"minimax_m2", 196608, 200064, 1536},
                    {"ministral3", 262144, 131072, 14336},
                    /* Llama 4's experts' size; its dense MLP's is
                       intermediate_size_mlp (cfg_read_llama4) */
                    {"llama4_text", 131072, 202048, 8192}};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        if (!strcmp(c->model_type, defaults[i].model_type)) {
            c->max_position_embeddings = defaults[i].context;
            c->vocab_size = defaults[i].vocab;
            c->intermediate_size = defaults[i].intermediate;
        }
}

static kvcal_status cfg_read_architecture(const cfg_obj *top, kvcal_model_config *c)
{
    const cJSON *arch = cfg_item(top, "architectures");
    if (!arch)
        return KVCAL_OK;
    if (!cJSON_IsArray(arch))
        return cfg_bad(top, "architectures", arch, "an array of strings");
    const cJSON *first = cJSON_GetArrayItem(arch, 0);
    if (!first)
        return KVCAL_OK;
    if (!cJSON_IsString(first) || strlen(first->valuestring) >= sizeof c->architecture)
        return cfg_bad(top, "architectures[0]", first, "a class name string");
    strcpy(c->architecture, first->valuestring);
    return KVCAL_OK;
}

static const struct {
    const char *name;
    kvcal_rope_type type;
} rope_types[] = {
    {"default", KVCAL_ROPE_DEFAULT},
    {"linear", KVCAL_ROPE_LINEAR},
    {"llama3", KVCAL_ROPE_LLAMA3},
    {"dynamic", KVCAL_ROPE_DYNAMIC},
    {"yarn", KVCAL_ROPE_YARN},
    {"longrope", KVCAL_ROPE_LONGROPE},
    /* Qwen2-VL's and Qwen2.5-VL's "mrope": transformers reads it as default
     * (its sections rotate the same angles on text, whose 3 axes agree) */
    {"mrope", KVCAL_ROPE_DEFAULT},
};

/* Reads the scaling fields of `sc` (rope_parameters or rope_scaling). */
static kvcal_status cfg_read_rope_scaling(const cfg_obj *sc, int type_optional,
                                          kvcal_model_config *c)
{
    kvcal_status s;
    int found = 0;
    s = cfg_string(sc, "rope_type", c->rope_type_name, sizeof c->rope_type_name, &found);
    if (s == KVCAL_OK && !found)
        s = cfg_string(sc, "type", c->rope_type_name, sizeof c->rope_type_name, &found);
    if (s != KVCAL_OK)
        return s;
    if (!found && !type_optional)
        return cfg_missing(sc, "rope_type", " (legacy files call it \"type\")");
    c->rope_type = KVCAL_ROPE_OTHER;
    for (size_t i = 0; i < sizeof rope_types / sizeof rope_types[0]; i++)
        if (!strcmp(c->rope_type_name, rope_types[i].name))
            c->rope_type = rope_types[i].type;
    if ((s = cfg_double(sc, "factor", 0.0, INFINITY, &c->rope_factor, &found)) !=
        KVCAL_OK)
        return s;
    /* yarn: an explicit null factor is derived from the context lengths */
    int null_factor = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(sc->obj, "factor"));
    if (!found && c->rope_type != KVCAL_ROPE_DEFAULT &&
        c->rope_type != KVCAL_ROPE_OTHER && c->rope_type != KVCAL_ROPE_LONGROPE &&
        !(c->rope_type == KVCAL_ROPE_YARN && null_factor))
        return cfg_missing(sc, "factor", " for this rope_type");
    int low = 0, high = 0, orig = 0;
    if ((s = cfg_double(sc, "low_freq_factor", 0.0, INFINITY, &c->rope_low_freq_factor,
                        &low)) != KVCAL_OK ||
        (s = cfg_double(sc, "high_freq_factor", 0.0, INFINITY, &c->rope_high_freq_factor,
                        &high)) != KVCAL_OK ||
        (s = cfg_int(sc, "original_max_position_embeddings", 1, INT_MAX,
                     &c->rope_original_max_position, &orig)) != KVCAL_OK ||
        (s = cfg_double(sc, "partial_rotary_factor", 0.0, 1.0, &c->partial_rotary_factor,
                        NULL)) != KVCAL_OK)
        return s;
    if (c->rope_type == KVCAL_ROPE_LLAMA3) {
        if (!low)
            return cfg_missing(sc, "low_freq_factor", " for rope_type llama3");
        if (!high)
            return cfg_missing(sc, "high_freq_factor", " for rope_type llama3");
        if (!orig)
            return cfg_missing(sc, "original_max_position_embeddings",
                               " for rope_type llama3");
        /* equal: no band between the kept and the divided frequencies
         * (Llama 4 Scout's 1 and 1) */
        if (!(c->rope_high_freq_factor >= c->rope_low_freq_factor))
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: field \"%shigh_freq_factor\" (%g) is below "
                              "low_freq_factor (%g); fix the values",
                              sc->name, sc->prefix, c->rope_high_freq_factor,
                              c->rope_low_freq_factor);
    }
    return KVCAL_OK;
}

/* A yarn beta: a number >= 0; absent, null or 0 is the default (as
 * transformers' `beta or default`). */
static kvcal_status cfg_yarn_beta(const cfg_obj *sc, const char *key, double dflt,
                                  double *out)
{
    const cJSON *it = cfg_item(sc, key);
    *out = dflt;
    if (!it)
        return KVCAL_OK;
    if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0))
        return cfg_bad(sc, key, it, "a number >= 0 (0 or null: the default)");
    if (it->valuedouble > 0)
        *out = it->valuedouble;
    return KVCAL_OK;
}

/* A number of any sign. Absent: *out untouched. */
static kvcal_status cfg_number(const cfg_obj *o, const char *key, double *out)
{
    const cJSON *it = cfg_item(o, key);
    if (!it)
        return KVCAL_OK;
    if (!cJSON_IsNumber(it))
        return cfg_bad(o, key, it, "a number");
    *out = it->valuedouble;
    return KVCAL_OK;
}

/* yarn's get_mscale: 0.1 * mscale * ln(factor) + 1, 1 for factor <= 1. */
static double yarn_mscale(double factor, double mscale)
{
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* The yarn parameters as transformers 5 computes them
 * (_compute_yarn_parameters after standardize_rope_params):
 * original_max_position_embeddings from the config's top level when there
 * (it takes precedence), else from the rope parameters, else
 * max_position_embeddings; a null factor is max_position_embeddings /
 * original_max_position_embeddings; the attention factor as given, else
 * mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are
 * non-zero, else 0.1 ln(factor) + 1. A factor below 1 (transformers warns
 * that it must be >= 1) and a negative beta (transformers fails on its
 * logarithm) are errors. */
static kvcal_status cfg_read_yarn(const cfg_obj *top, const cfg_obj *sc,
                                  kvcal_model_config *c)
{
    kvcal_status s;
    int found = 0;
    double mscale = 0.0, mscale_all_dim = 0.0;
    if ((s = cfg_int(top, "original_max_position_embeddings", 1, INT_MAX,
                     &c->rope_original_max_position, NULL)) != KVCAL_OK)
        return s;
    if (!c->rope_original_max_position)
        c->rope_original_max_position = c->max_position_embeddings;
    if (!c->rope_original_max_position)
        return cfg_missing(sc, "original_max_position_embeddings",
                           " for rope_type yarn (and so is max_position_embeddings)");
    int null_factor = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(sc->obj, "factor"));
    if (null_factor) {
        if (!c->max_position_embeddings)
            return cfg_missing(top, "max_position_embeddings",
                               " (a null yarn factor is derived from it)");
        c->rope_factor =
            (double)c->max_position_embeddings / c->rope_original_max_position;
    }
    if (!(c->rope_factor >= 1.0))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"%sfactor\" is %g%s; rope_type yarn needs a "
                          "factor >= 1 (extended context / original context); fix the "
                          "value",
                          sc->name, sc->prefix, c->rope_factor,
                          null_factor ? " (null: max_position_embeddings / "
                                        "original_max_position_embeddings)"
                                      : "");
    c->rope_truncate = 1;
    if ((s = cfg_yarn_beta(sc, "beta_fast", 32.0, &c->rope_beta_fast)) != KVCAL_OK ||
        (s = cfg_yarn_beta(sc, "beta_slow", 1.0, &c->rope_beta_slow)) != KVCAL_OK ||
        (s = cfg_bool(sc, "truncate", &c->rope_truncate)) != KVCAL_OK ||
        (s = cfg_number(sc, "mscale", &mscale)) != KVCAL_OK ||
        (s = cfg_number(sc, "mscale_all_dim", &mscale_all_dim)) != KVCAL_OK ||
        (s = cfg_double(sc, "attention_factor", 0.0, INFINITY, &c->rope_attention_factor,
                        &found)) != KVCAL_OK)
        return s;
    c->rope_mscale_all_dim = mscale_all_dim;
    if (found)
        return KVCAL_OK;
    if (mscale != 0.0 && mscale_all_dim != 0.0)
        c->rope_attention_factor = yarn_mscale(c->rope_factor, mscale) /
                                   yarn_mscale(c->rope_factor, mscale_all_dim);
    else
        c->rope_attention_factor = yarn_mscale(c->rope_factor, 1.0);
    if (!(c->rope_attention_factor > 0) || !isfinite(c->rope_attention_factor))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: fields \"%smscale\" (%g) and \"%smscale_all_dim\" (%g) "
                          "give the yarn attention factor %g; it must be a finite number "
                          "> 0; fix the values or set attention_factor",
                          sc->name, sc->prefix, mscale, sc->prefix, mscale_all_dim,
                          c->rope_attention_factor);
    return KVCAL_OK;
}

/* rope_theta and scaling, from rope_parameters (transformers 5) or from the
 * top-level rope_theta / rope_scaling (older files). */
/* LongRoPE (transformers' _compute_longrope_parameters, vLLM's
 * Phi3LongRoPEScaledRotaryEmbedding): original_max_position_embeddings from
 * the rope parameters or the top level, the factor list vLLM applies (see
 * kvcal_model_config), the attention factor. The lists' lengths are checked
 * against the rotated channels when the model is opened. */
static kvcal_status cfg_read_longrope(const cfg_obj *top, const cfg_obj *sc,
                                      kvcal_model_config *c)
{
    kvcal_status s;
    int found = 0;
    if (!c->rope_original_max_position &&
        (s = cfg_int(top, "original_max_position_embeddings", 1, INT_MAX,
                     &c->rope_original_max_position, &found)) != KVCAL_OK)
        return s;
    if (!c->rope_original_max_position)
        return cfg_missing(sc, "original_max_position_embeddings", " for rope_type longrope");
    if (c->rope_original_max_position < 2)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: original_max_position_embeddings %d for rope_type "
                          "longrope: its attention factor divides by the value's "
                          "logarithm, 0 at 1 (transformers fails there too); give the "
                          "context the model was trained on",
                          sc->name, c->rope_original_max_position);
    c->rope_ext_long = c->max_position_embeddings > c->rope_original_max_position;
    const char *key = c->rope_ext_long ? "long_factor" : "short_factor";
    const cJSON *list = cfg_item(sc, key), *it;
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) > KVCAL_ROPE_EXT_MAX)
        return list ? cfg_bad(sc, key, list, "an array of up to 512 positive numbers")
                    : cfg_missing(sc, key, " for rope_type longrope");
    c->rope_ext_factors = 0;
    cJSON_ArrayForEach(it, list)
    {
        if (!cJSON_IsNumber(it) || !(it->valuedouble > 0) || it->valuedouble > FLT_MAX) {
            char at[32];
            snprintf(at, sizeof at, "%s[%d]", key, c->rope_ext_factors);
            return cfg_bad(sc, at, it, "a number > 0 that a float holds");
        }
        c->rope_ext_factor[c->rope_ext_factors++] = (float)it->valuedouble;
    }
    double factor = (double)c->max_position_embeddings / c->rope_original_max_position;
    if ((s = cfg_double(sc, "factor", 0.0, INFINITY, &factor, NULL)) != KVCAL_OK)
        return s;
    c->rope_factor = factor;
    c->rope_attention_factor =
        factor <= 1.0 ? 1.0 : sqrt(1.0 + log(factor) / log(c->rope_original_max_position));
    return cfg_double(sc, "attention_factor", 0.0, INFINITY, &c->rope_attention_factor, NULL);
}

/* GptOssConfig's RoPE where a config.json states none: yarn, 32 x 4096
 * positions, betas 32 and 1, not truncated (its rope_theta default is
 * 150000). */
static kvcal_status cfg_gpt_oss_rope(const cfg_obj *top, kvcal_model_config *c)
{
    cJSON *dflt =
        cJSON_Parse("{\"rope_type\": \"yarn\", \"factor\": 32.0, "
                    "\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"truncate\": false, "
                    "\"original_max_position_embeddings\": 4096}");
    if (!dflt)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", top->name);
    cfg_obj sc = {dflt, "rope_parameters (GptOssConfig's default).", top->name};
    kvcal_status s = cfg_read_rope_scaling(&sc, 0, c);
    if (s == KVCAL_OK)
        s = cfg_read_yarn(top, &sc, c);
    cJSON_Delete(dflt);
    return s;
}

static kvcal_status cfg_read_rope(const cfg_obj *top, kvcal_model_config *c)
{
    const cJSON *params, *scaling;
    kvcal_status s;
    strcpy(c->rope_type_name, "default");
    /* the classes' defaults where a config leaves rope_theta out (Gemma 3's
     * and Qwen3-VL's multimodal configs do) */
    if (!strcmp(c->model_type, "gpt_oss"))
        c->rope_theta = 150000.0;
    else if (!strcmp(c->model_type, "gemma3_text"))
        c->rope_theta = 1000000.0;
    else if (!strcmp(c->model_type, "minimax_m2"))
        c->rope_theta = 5000000.0;
    else if (!strcmp(c->model_type, "smollm3"))
        c->rope_theta = 2000000.0;
    else if (!strcmp(c->model_type, "olmo3"))
        c->rope_theta = 500000.0;
    else if (!strcmp(c->model_type, "qwen3_vl_text") ||
             !strcmp(c->model_type, "llama4_text") ||
             !strcmp(c->model_type, "ernie4_5_moe") ||
             !strcmp(c->model_type, "qwen3_vl_moe_text"))
        c->rope_theta = 500000.0;
    else if (!strcmp(family_type(c->model_type), "qwen2") &&
             strcmp(c->model_type, "qwen2"))
        c->rope_theta = 1000000.0; /* Qwen2-VL's and Qwen2.5-VL's */
    if ((s = cfg_object(top, "rope_parameters", &params)) != KVCAL_OK ||
        (s = cfg_object(top, "rope_scaling", &scaling)) != KVCAL_OK ||
        (s = cfg_double(top, "rope_theta", 0.0, INFINITY, &c->rope_theta, NULL)) !=
            KVCAL_OK)
        return s;
    if (!params && !scaling && !strcmp(c->model_type, "ministral3"))
        return cfg_missing(
            top, "rope_parameters",
            " (Ministral3Config's default RoPE is yarn, whose fields kvcal "
            "does not assume)");
    if (params) {
        cfg_obj p = {params, "rope_parameters.", top->name};
        const cJSON *full = cfg_item(&p, "full_attention");
        if (!cfg_item(&p, "rope_type") && !cfg_item(&p, "rope_theta") &&
            cJSON_IsObject(full)) {
            p.obj = full;
            p.prefix = "rope_parameters.full_attention.";
        }
        if ((s = cfg_double(&p, "rope_theta", 0.0, INFINITY, &c->rope_theta, NULL)) !=
                KVCAL_OK ||
            (s = cfg_read_rope_scaling(&p, 1, c)) != KVCAL_OK ||
            /* Ministral 3's (0 in Devstral 2's: none) */
            (s = cfg_yarn_beta(&p, "llama_4_scaling_beta", 0.0, &c->rope_llama4_beta)) !=
                KVCAL_OK)
            return s;
        if (c->rope_type == KVCAL_ROPE_LONGROPE)
            return cfg_read_longrope(top, &p, c);
        return c->rope_type == KVCAL_ROPE_YARN ? cfg_read_yarn(top, &p, c) : KVCAL_OK;
    }
    if (scaling) {
        cfg_obj sc = {scaling, "rope_scaling.", top->name};
        if ((s = cfg_read_rope_scaling(&sc, 0, c)) != KVCAL_OK)
            return s;
        if (c->rope_type == KVCAL_ROPE_LONGROPE)
            return cfg_read_longrope(top, &sc, c);
        return c->rope_type == KVCAL_ROPE_YARN ? cfg_read_yarn(top, &sc, c) : KVCAL_OK;
    }
    return !strcmp(c->model_type, "gpt_oss") ? cfg_gpt_oss_rope(top, c) : KVCAL_OK;
}

/* MLA (multi-head latent attention): a config with kv_lora_rank caches one
 * latent entry per token and layer instead of per-head K and V. */
static kvcal_status cfg_read_mla(const cfg_obj *top, kvcal_model_config *c)
{
    kvcal_status s;
    int found;
    if ((s = cfg_int(top, "kv_lora_rank", 1, KVCAL_CONFIG_MAX_HEAD_DIM, &c->kv_lora_rank,
                     &found)) != KVCAL_OK ||
        !found)
        return s;
    c->kv_layout = KVCAL_KV_MLA;
    if ((s = cfg_int(top, "qk_rope_head_dim", 1, KVCAL_CONFIG_MAX_HEAD_DIM,
                     &c->qk_rope_head_dim, &found)) != KVCAL_OK)
        return s;
    if (!found)
        return cfg_missing(top, "qk_rope_head_dim",
                           " (kv_lora_rank makes this an MLA config, whose cache holds "
                           "the latent and the RoPE channels)");
    if ((s = cfg_int(top, "qk_nope_head_dim", 1, KVCAL_CONFIG_MAX_HEAD_DIM,
                     &c->qk_nope_head_dim, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "v_head_dim", 1, KVCAL_CONFIG_MAX_HEAD_DIM, &c->v_head_dim,
                     NULL)) != KVCAL_OK)
        return s;
    return cfg_int(top, "index_head_dim", 1, KVCAL_CONFIG_MAX_HEAD_DIM,
                   &c->index_head_dim, NULL);
}

static kvcal_status cfg_read_heads(const cfg_obj *top, kvcal_model_config *c)
{
    kvcal_status s;
    int found;
    if ((s = cfg_required_int(top, "num_attention_heads", 1, KVCAL_CONFIG_MAX_HEADS,
                              &c->num_attention_heads)) != KVCAL_OK)
        return s;
    c->num_kv_heads = c->num_attention_heads;
    if (!cJSON_GetObjectItemCaseSensitive(top->obj, "num_key_value_heads")) {
        if (!strcmp(c->model_type, "mistral") || !strcmp(c->model_type, "llama4_text") ||
            !strcmp(c->model_type, "seed_oss"))
            c->num_kv_heads = 8;
        else if (!strcmp(c->model_type, "glm4") || !strcmp(c->model_type, "glm4v_text"))
            c->num_kv_heads = 2;
        else if (!strcmp(c->model_type, "ernie4_5_moe") ||
                 !strcmp(c->model_type, "smollm3"))
            c->num_kv_heads = 4;
        else if (!strcmp(family_type(c->model_type), "qwen2") ||
                 !strcmp(family_type(c->model_type), "qwen3"))
            c->num_kv_heads = 32;
        else if (!strcmp(c->model_type, "gemma2") ||
                 !strcmp(c->model_type, "gemma3_text"))
            c->num_kv_heads = 4;
    }
    if ((s = cfg_int(top, "num_key_value_heads", 1, KVCAL_CONFIG_MAX_HEADS,
                     &c->num_kv_heads, NULL)) != KVCAL_OK)
        return s;
    if (c->num_attention_heads % c->num_kv_heads != 0)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"num_attention_heads\" (%d) is not a multiple of "
                          "\"num_key_value_heads\" (%d); fix one of them",
                          top->name, c->num_attention_heads, c->num_kv_heads);
    if ((s = cfg_int(top, "head_dim", 1, KVCAL_CONFIG_MAX_HEAD_DIM, &c->head_dim,
                     &found)) != KVCAL_OK ||
        (s = cfg_read_mla(top, c)) != KVCAL_OK)
        return s;
    if (found)
        return KVCAL_OK;
    if (c->kv_layout == KVCAL_KV_MLA) {
        c->head_dim = c->qk_rope_head_dim;
        return KVCAL_OK;
    }
    const int qwen3 = !strcmp(family_type(c->model_type), "qwen3");
    const int minimax =
        !strcmp(c->model_type, "minimax_m2") || !strcmp(c->model_type, "ministral3") ||
        !strcmp(c->model_type, "llama4_text") || !strcmp(c->model_type, "glm4") ||
        !strcmp(c->model_type, "seed_oss"); /* head_dim 128 */
    if (qwen3 || minimax || !strcmp(c->model_type, "gemma3_text") ||
        !strcmp(c->model_type, "gemma2") || gated_delta_type(c->model_type)) {
        c->head_dim = qwen3 || minimax ? 128 : 256;
        return KVCAL_OK;
    }
    if (c->hidden_size % c->num_attention_heads != 0)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"head_dim\" is missing and \"hidden_size\" (%d) is "
                          "not a multiple of \"num_attention_heads\" (%d); add head_dim",
                          top->name, c->hidden_size, c->num_attention_heads);
    if (c->hidden_size / c->num_attention_heads > KVCAL_CONFIG_MAX_HEAD_DIM)
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: field \"head_dim\" is missing and \"hidden_size\" (%d) / "
            "\"num_attention_heads\" (%d) is above kvcal's bound of %d, far "
            "above any real model; fix one of them",
            top->name, c->hidden_size, c->num_attention_heads, KVCAL_CONFIG_MAX_HEAD_DIM);
    c->head_dim = c->hidden_size / c->num_attention_heads;
    return KVCAL_OK;
}

/* Per-architecture attention features and sliding window. */
static kvcal_status cfg_read_attention(const cfg_obj *top, kvcal_model_config *c)
{
    kvcal_status s;
    int is_qwen2 = !strcmp(family_type(c->model_type), "qwen2");
    int is_qwen3 = !strcmp(family_type(c->model_type), "qwen3");
    int qwen_moe = !strcmp(c->model_type, "qwen2_moe") ||
                   !strcmp(family_type(c->model_type), "qwen3_moe");
    /* Seed-OSS's class defaults: q/k/v biases, none on o_proj */
    if (!strcmp(c->model_type, "seed_oss"))
        c->attention_bias = 1;
    if ((s = cfg_bool(top, "attention_bias", &c->attention_bias)) != KVCAL_OK ||
        (s = cfg_bool(top, "attention_out_bias", &c->attention_out_bias)) != KVCAL_OK)
        return s;
    if (is_qwen2 || !strcmp(c->model_type, "qwen2_moe"))
        c->attention_bias = 1;
    /* Glm4vMoeTextConfig's and Glm4Config's default, where Glm4MoeConfig's
     * is false */
    if ((!strcmp(c->model_type, "glm4v_moe_text") || !strcmp(c->model_type, "glm4")) &&
        !cJSON_GetObjectItemCaseSensitive(top->obj, "attention_bias"))
        c->attention_bias = 1;
    c->qk_norm =
        is_qwen3 || !strcmp(family_type(c->model_type), "qwen3_moe") ||
        !strcmp(c->model_type, "gemma3_text") || gated_delta_type(c->model_type) ||
        !strcmp(c->model_type, "minimax_m2") || !strcmp(c->model_type, "exaone4") ||
        !strcmp(c->model_type, "olmo2") || !strcmp(c->model_type, "olmo3");
    if (!strcmp(c->model_type, "mistral") &&
        !cJSON_GetObjectItemCaseSensitive(top->obj, "sliding_window"))
        c->sliding_window = 4096;
    if ((s = cfg_int(top, "sliding_window", 0, INT_MAX, &c->sliding_window, NULL)) !=
        KVCAL_OK)
        return s;
    c->max_window_layers = -1;
    if (is_qwen2 || is_qwen3 || qwen_moe) {
        int use = 0;
        if ((s = cfg_bool(top, "use_sliding_window", &use)) != KVCAL_OK)
            return s;
        if (!use)
            c->sliding_window = 0;
        if (use && !qwen_moe) {
            c->max_window_layers = 28;
            if ((s = cfg_int(top, "max_window_layers", 0, INT_MAX, &c->max_window_layers,
                             NULL)) != KVCAL_OK)
                return s;
        }
    }
    return KVCAL_OK;
}

/* The sliding layers of Qwen's MoE models with use_sliding_window, as
 * transformers 5 applies the window: Qwen3-MoE to every layer (its config
 * has no max_window_layers; layer_types, if any, are not read); Qwen2-MoE
 * to the layers of layer_types, which default to the even layers below
 * max_window_layers (28). A hybrid config (layers that cache nothing) keeps
 * the pattern it states. */
static kvcal_status cfg_qwen_moe_windows(const cfg_obj *top, kvcal_model_config *c)
{
    const int qwen2 = !strcmp(c->model_type, "qwen2_moe");
    if (c->sliding_window <= 0 || (!qwen2 && strcmp(c->model_type, "qwen3_moe")) ||
        (qwen2 && c->layer_types_given) || c->no_kv_layer_types[0])
        return KVCAL_OK;
    int below = c->num_layers;
    kvcal_status s = KVCAL_OK;
    if (qwen2) {
        below = 28;
        s = cfg_int(top, "max_window_layers", 0, INT_MAX, &below, NULL);
    }
    c->layer_types_given = 1;
    c->sliding_layers = 0;
    memset(c->layer_sliding, 0, sizeof c->layer_sliding);
    for (int i = 0; i < c->num_layers && i < below; i += qwen2 ? 2 : 1) {
        c->sliding_layers++;
        c->layer_sliding[i / 8] |= (unsigned char)(1u << (i % 8));
    }
    return s;
}

/* Marks layer l dense when it is not a MoE layer of DeepSeek's rule: l >=
 * first_k_dense_replace and l % moe_layer_freq == 0 (vLLM's
 * DeepseekV2DecoderLayer; transformers reads no moe_layer_freq, 1 in every
 * released config). */
static void cfg_deepseek_dense_layers(kvcal_model_config *c, int freq)
{
    for (int l = 0; l < c->num_layers; l++)
        if (!(l >= c->first_dense_layers && l % freq == 0)) {
            c->layer_dense[l / 8] |= (unsigned char)(1u << (l % 8));
            c->dense_layers++;
        }
}

/* The layer plan of GLM-4.7-Flash, DeepSeek-V3.2 and GLM-5. transformers
 * reads mlp_layer_types ("dense" or "sparse" a layer), by default the first
 * layer dense for Glm4MoeLiteConfig (whatever first_k_dense_replace says),
 * the first first_k_dense_replace layers for DeepseekV32Config and
 * GlmMoeDsaConfig; vLLM's and sglang's layers read DeepSeek's rule,
 * first_k_dense_replace (moe_layer_freq: vLLM reads it, sglang's
 * Glm4MoeLite sets it to 1, transformers has none: refused unless 1). kvcal
 * runs the plan they agree on and refuses a config where they do not. */
static kvcal_status cfg_mlp_layer_types(const cfg_obj *top, kvcal_model_config *c,
                                        int freq, int first_given, int lite)
{
    const cJSON *types = cfg_item(top, "mlp_layer_types"), *it;
    if (freq != 1)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: %s with moe_layer_freq %d is not supported: transformers has no "
            "such field and sglang's GLM-4.7-Flash sets it to 1, so the engines' "
            "layer plans and transformers' differ; remove it (the released "
            "configs have none)",
            top->name, c->architecture, freq);
    if (types && !cJSON_IsArray(types))
        return cfg_bad(top, "mlp_layer_types", types,
                       "an array of \"dense\" or \"sparse\"");
    if (types && cJSON_GetArraySize(types) != c->num_layers)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"%smlp_layer_types\" has %d entries but "
                          "num_hidden_layers is %d; they must match (fix one)",
                          top->name, top->prefix, cJSON_GetArraySize(types),
                          c->num_layers);
    int l = 0;
    cJSON_ArrayForEach(it, types)
    {
        char at[40];
        snprintf(at, sizeof at, "mlp_layer_types[%d]", l);
        if (!cJSON_IsString(it) ||
            (strcmp(it->valuestring, "dense") && strcmp(it->valuestring, "sparse")))
            return cfg_bad(top, at, it, "\"dense\" or \"sparse\"");
        l++;
    }
    for (l = 0; l < c->num_layers; l++) {
        const cJSON *t = types ? cJSON_GetArrayItem(types, l) : NULL;
        const int engines_dense = l < c->first_dense_layers;
        const int dense = t      ? !strcmp(t->valuestring, "dense")
                          : lite ? l == 0
                                 : engines_dense;
        if ((first_given || !lite) && dense != engines_dense)
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: layer %d is %s in transformers' plan (%s) but %s in vLLM's and "
                "sglang's (first_k_dense_replace %d); make mlp_layer_types and "
                "first_k_dense_replace agree",
                top->name, l, dense ? "dense" : "sparse",
                types  ? "mlp_layer_types"
                : lite ? "no mlp_layer_types: the first layer dense"
                       : "first_k_dense_replace",
                engines_dense ? "dense" : "sparse", c->first_dense_layers);
        if (dense) {
            c->layer_dense[l / 8] |= (unsigned char)(1u << (l % 8));
            c->dense_layers++;
        }
    }
    return KVCAL_OK;
}

/* DeepSeek-V2 (deepseek_v2), V3 / Kimi K2 (deepseek_v3, kimi_k2) and
 * GLM-4.7-Flash (glm4_moe_lite, V3's attention and experts): the query's
 * LoRA and the experts, with DeepseekV2Config's, DeepseekV3Config's and
 * Glm4MoeLiteConfig's defaults. V2 scores with a softmax and groups experts
 * only under topk_method group_limited_greedy (a group's score its best
 * expert's); V3 with sigmoids chosen by score plus e_score_correction_bias,
 * in n_group groups scored by their two best experts (noaux_tc). */
static kvcal_status cfg_read_deepseek(const cfg_obj *top, kvcal_model_config *c)
{
    const int v2 = !strcmp(c->model_type, "deepseek_v2");
    const int lite = !strcmp(c->model_type, "glm4_moe_lite");
    const int glm5 = !strcmp(c->model_type, "glm_moe_dsa");
    const int dsa = glm5 || !strcmp(c->model_type, "deepseek_v32");
    char method[32] = "";
    int shared = v2 ? 2 : 1, freq = 1, found = 0, first_given = 0;
    kvcal_status s;
    c->q_lora_rank = lite ? 768 : glm5 ? 2048 : 1536;
    c->num_experts = v2 || lite ? 64 : 256;
    c->num_experts_per_tok = v2 ? 0 : lite ? 4 : 8;
    c->moe_intermediate_size = v2 ? 1407 : lite ? 1536 : 2048;
    c->first_dense_layers = v2 ? 0 : lite ? 1 : 3;
    c->routed_scaling_factor = v2 ? 1.0 : lite ? 1.8 : 2.5;
    c->norm_topk_prob = !v2;
    c->moe_groups = v2 || lite || glm5 ? 1 : 8;
    c->moe_topk_groups = v2 || lite || glm5 ? 1 : 4;
    c->moe_sigmoid = !v2;
    c->index_topk = dsa ? 2048 : 0;
    if (dsa &&
        (s = cfg_int(top, "index_topk", 1, INT_MAX, &c->index_topk, NULL)) != KVCAL_OK)
        return s;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(top->obj, "q_lora_rank");
    if (cJSON_IsNull(q))
        c->q_lora_rank = 0;
    else if ((s = cfg_int(top, "q_lora_rank", 1, KVCAL_CONFIG_MAX_HIDDEN, &c->q_lora_rank,
                          NULL)) != KVCAL_OK)
        return s;
    if ((s = cfg_int(top, "n_routed_experts", 1, KVCAL_CONFIG_MAX_HEADS, &c->num_experts,
                     &found)) != KVCAL_OK)
        return s;
    if (!found &&
        cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(top->obj, "n_routed_experts")))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: %s with n_routed_experts null (every layer dense) is not "
                          "supported; the released DeepSeek-V2/V3, Kimi K2 and "
                          "GLM-4.7-Flash configs have routed experts",
                          top->name, c->architecture);
    if ((s = cfg_int(top, "num_experts_per_tok", 1, KVCAL_CONFIG_MAX_HEADS,
                     &c->num_experts_per_tok, &found)) != KVCAL_OK ||
        (s = cfg_int(top, "n_shared_experts", 0, 64, &shared, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "moe_intermediate_size", 1, INT_MAX, &c->moe_intermediate_size,
                     NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "first_k_dense_replace", 0, KVCAL_CONFIG_MAX_LAYERS,
                     &c->first_dense_layers, &first_given)) != KVCAL_OK ||
        (s = cfg_int(top, "moe_layer_freq", 1, KVCAL_CONFIG_MAX_LAYERS, &freq, NULL)) !=
            KVCAL_OK ||
        (s = cfg_double(top, "routed_scaling_factor", 0.0, INFINITY,
                        &c->routed_scaling_factor, NULL)) != KVCAL_OK ||
        (s = cfg_bool(top, "norm_topk_prob", &c->norm_topk_prob)) != KVCAL_OK ||
        (s = cfg_int(top, "n_group", 1, KVCAL_CONFIG_MAX_HEADS, &c->moe_groups, NULL)) !=
            KVCAL_OK ||
        (s = cfg_int(top, "topk_group", 1, KVCAL_CONFIG_MAX_HEADS, &c->moe_topk_groups,
                     NULL)) != KVCAL_OK ||
        (s = cfg_string(top, "topk_method", method, sizeof method, NULL)) != KVCAL_OK ||
        (s = cfg_string(top, "scoring_func", c->moe_scoring, sizeof c->moe_scoring,
                        NULL)) != KVCAL_OK)
        return s;
    if (!c->num_experts_per_tok)
        return cfg_missing(top, "num_experts_per_tok",
                           " (DeepseekV2Config has no default)");
    if (v2 && strcmp(method, "group_limited_greedy"))
        c->moe_groups = c->moe_topk_groups = 1; /* greedy: transformers ignores groups */
    c->moe_group_max = v2;
    if (v2 ? method[0] && strcmp(method, "greedy") &&
                 strcmp(method, "group_limited_greedy")
           : method[0] && strcmp(method, "noaux_tc"))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: %s with topk_method \"%s\" is not supported; transformers "
                          "routes %s",
                          top->name, c->architecture, method,
                          v2     ? "DeepSeek-V2 with greedy or group_limited_greedy"
                          : lite ? "GLM-4.7-Flash with noaux_tc"
                          : glm5 ? "GLM-5 with noaux_tc"
                                 : "DeepSeek-V3 with noaux_tc");
    c->shared_expert_intermediate_size = shared * c->moe_intermediate_size;
    if (lite || dsa)
        return cfg_mlp_layer_types(top, c, freq, first_given, lite);
    cfg_deepseek_dense_layers(c, freq);
    return KVCAL_OK;
}

/* MiniMax-M2's router: transformers' MiniMaxM2TopKRouter always chooses by
 * sigmoid plus e_score_correction_bias, while vLLM's minimax_m2.py follows
 * scoring_func and use_routing_bias: a config whose fields say otherwise
 * would make the two differ. A config without use_routing_bias (the
 * released ones have it) runs transformers' router here, while vLLM and
 * sglang then leave the bias out (schemas/README.md). */
static kvcal_status cfg_read_minimax_routing(const cfg_obj *top, kvcal_model_config *c)
{
    kvcal_status s;
    int bias = 1;
    c->moe_sigmoid = 1;
    if ((s = cfg_string(top, "scoring_func", c->moe_scoring, sizeof c->moe_scoring,
                        NULL)) != KVCAL_OK ||
        (s = cfg_bool(top, "use_routing_bias", &bias)) != KVCAL_OK)
        return s;
    if (c->moe_scoring[0] && strcmp(c->moe_scoring, "sigmoid"))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: field \"%sscoring_func\" is \"%s\", but transformers' "
            "MiniMax-M2 router scores by sigmoid whatever it says while vLLM "
            "follows it; fix the field (\"sigmoid\")",
            top->name, top->prefix, c->moe_scoring);
    if (cJSON_GetObjectItemCaseSensitive(top->obj, "use_routing_bias") && !bias)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: field \"%suse_routing_bias\" is false, but transformers' "
            "MiniMax-M2 router adds e_score_correction_bias whatever it says "
            "while vLLM follows it; fix the field (true)",
            top->name, top->prefix);
    return KVCAL_OK;
}

/* The experts of a mixture-of-experts family (see kvcal_model_config). */
static kvcal_status cfg_read_moe(const cfg_obj *top, kvcal_model_config *c)
{
    if (!strcmp(c->model_type, "deepseek_v2") || !strcmp(c->model_type, "deepseek_v3") ||
        !strcmp(c->model_type, "kimi_k2") || !strcmp(c->model_type, "glm4_moe_lite") ||
        !strcmp(c->model_type, "deepseek_v32") || !strcmp(c->model_type, "glm_moe_dsa"))
        return cfg_read_deepseek(top, c);
    static const struct {
        const char *model_type;
        int experts, top_k, inter, shared, norm;
    } defaults[] = {{"qwen2_moe", 60, 4, 1408, 5632, 0},
                    {"qwen3_moe", 128, 8, 768, 0, 0},
                    /* Qwen3-VL-MoE's: its top-k weights always renormalized */
                    {"qwen3_vl_moe_text", 60, 4, 1408, 0, 1},
                    {"qwen3_next", 512, 10, 512, 512, 1},
                    /* Qwen3.5-MoE's: its top-k weights always renormalized */
                    {"qwen3_5_moe_text", 256, 8, 512, 512, 1},
                    {"mixtral", 8, 2, 0, 0, 1},
                    {"glm4_moe", 128, 8, 1408, 0, 1},
                    {"glm4v_moe_text", 128, 8, 1408, 0, 1},
                    {"gpt_oss", 128, 4, 0, 0, 1},
                    {"minimax_m2", 256, 8, 0, 0, 1}};
    size_t i = 0;
    while (i < sizeof defaults / sizeof defaults[0] &&
           strcmp(defaults[i].model_type, c->model_type))
        i++;
    if (i == sizeof defaults / sizeof defaults[0])
        return KVCAL_OK;
    /* Mixtral's, gpt-oss's and MiniMax-M2's experts are intermediate_size
     * wide, their top-k weights always renormalized (gpt-oss: a softmax over
     * the chosen) */
    const int minimax = !strcmp(c->model_type, "minimax_m2");
    const int mixtral =
        !strcmp(c->model_type, "mixtral") || !strcmp(c->model_type, "gpt_oss") || minimax;
    const int glm = !strcmp(family_type(c->model_type), "glm4_moe");
    c->routed_scaling_factor = 1.0;
    c->moe_groups = c->moe_topk_groups = 1;
    c->num_experts = defaults[i].experts;
    c->num_experts_per_tok = defaults[i].top_k;
    c->moe_intermediate_size = mixtral ? c->intermediate_size : defaults[i].inter;
    c->shared_expert_intermediate_size = defaults[i].shared;
    c->norm_topk_prob = defaults[i].norm;
    c->decoder_sparse_step = 1;
    kvcal_status s;
    int found = 0;
    if (glm) {
        int shared = 1;
        c->moe_sigmoid = 1;
        c->first_dense_layers = 1;
        if ((s = cfg_int(top, "n_routed_experts", 1, KVCAL_CONFIG_MAX_HEADS,
                         &c->num_experts, NULL)) != KVCAL_OK ||
            (s = cfg_int(top, "n_shared_experts", 0, 64, &shared, NULL)) != KVCAL_OK ||
            (s = cfg_int(top, "first_k_dense_replace", 0, KVCAL_CONFIG_MAX_LAYERS,
                         &c->first_dense_layers, NULL)) != KVCAL_OK ||
            (s = cfg_double(top, "routed_scaling_factor", 0.0, INFINITY,
                            &c->routed_scaling_factor, NULL)) != KVCAL_OK ||
            (s = cfg_int(top, "n_group", 1, KVCAL_CONFIG_MAX_HEADS, &c->moe_groups,
                         NULL)) != KVCAL_OK ||
            (s = cfg_int(top, "topk_group", 1, KVCAL_CONFIG_MAX_HEADS,
                         &c->moe_topk_groups, NULL)) != KVCAL_OK ||
            (s = cfg_int(top, "moe_intermediate_size", 1, INT_MAX,
                         &c->moe_intermediate_size, NULL)) != KVCAL_OK ||
            (s = cfg_int(top, "num_experts_per_tok", 1, KVCAL_CONFIG_MAX_HEADS,
                         &c->num_experts_per_tok, NULL)) != KVCAL_OK ||
            (s = cfg_bool(top, "norm_topk_prob", &c->norm_topk_prob)) != KVCAL_OK ||
            (s = cfg_bool(top, "use_qk_norm", &c->qk_norm)) != KVCAL_OK)
            return s;
        c->shared_expert_intermediate_size = shared * c->moe_intermediate_size;
        for (int l = 0; l < c->num_layers && l < c->first_dense_layers; l++) {
            c->layer_dense[l / 8] |= (unsigned char)(1u << (l % 8));
            c->dense_layers++;
        }
        return KVCAL_OK;
    }
    if (minimax && (s = cfg_read_minimax_routing(top, c)) != KVCAL_OK)
        return s;
    if ((s = cfg_int(top, "num_experts", 1, KVCAL_CONFIG_MAX_HEADS, &c->num_experts,
                     &found)) != KVCAL_OK ||
        (!found && (s = cfg_int(top, "num_local_experts", 1, KVCAL_CONFIG_MAX_HEADS,
                                &c->num_experts, NULL)) != KVCAL_OK) ||
        (s = cfg_int(top, "num_experts_per_tok", 1, KVCAL_CONFIG_MAX_HEADS,
                     &c->num_experts_per_tok, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "decoder_sparse_step", 1, KVCAL_CONFIG_MAX_LAYERS,
                     &c->decoder_sparse_step, NULL)) != KVCAL_OK)
        return s;
    if (!mixtral &&
        ((s = cfg_int(top, "moe_intermediate_size", 1, INT_MAX, &c->moe_intermediate_size,
                      NULL)) != KVCAL_OK ||
         (s = cfg_bool(top, "norm_topk_prob", &c->norm_topk_prob)) != KVCAL_OK))
        return s;
    if (c->shared_expert_intermediate_size &&
        (s = cfg_int(top, "shared_expert_intermediate_size", 0, INT_MAX,
                     &c->shared_expert_intermediate_size, NULL)) != KVCAL_OK)
        return s;
    const int always_renormalized = !strcmp(c->model_type, "qwen3_vl_moe_text") ||
                                    !strcmp(c->model_type, "qwen3_5_moe_text");
    if (always_renormalized && !c->norm_topk_prob)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: field \"%snorm_topk_prob\" is false, but transformers' "
                          "%s renormalizes the top-k weights whatever it says "
                          "while vLLM follows it: the engine's K/V would not be "
                          "transformers'; fix the field",
                          top->name, top->prefix,
                          strcmp(c->model_type, "qwen3_5_moe_text") ? "Qwen3-VL-MoE"
                                                                    : "Qwen3.5-MoE");
    /* Qwen3.5-MoE has no dense MLP: its experts' size stands for it */
    if (!c->intermediate_size)
        c->intermediate_size = c->moe_intermediate_size;
    if ((s = cfg_qwen_moe_windows(top, c)) != KVCAL_OK)
        return s;
    const cJSON *dense = cfg_item(top, "mlp_only_layers"), *it;
    if (dense && !cJSON_IsArray(dense))
        return cfg_bad(top, "mlp_only_layers", dense, "an array of layer indices");
    c->mlp_only_layers = dense ? cJSON_GetArraySize(dense) : 0;
    /* transformers (Qwen2-MoE, Qwen3-MoE): layer l is dense when listed in
     * mlp_only_layers or when (l + 1) is no multiple of decoder_sparse_step */
    for (int l = 0; l < c->num_layers; l++)
        if ((l + 1) % c->decoder_sparse_step)
            c->layer_dense[l / 8] |= (unsigned char)(1u << (l % 8));
    int at_index = 0;
    cJSON_ArrayForEach(it, dense)
    {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
            it->valuedouble < 0 || it->valuedouble >= c->num_layers) {
            char at[32], want[64];
            snprintf(at, sizeof at, "mlp_only_layers[%d]", at_index);
            snprintf(want, sizeof want, "a layer index in [0, %d)", c->num_layers);
            return cfg_bad(top, at, it, want);
        }
        at_index++;
        const int l = (int)it->valuedouble;
        c->layer_dense[l / 8] |= (unsigned char)(1u << (l % 8));
    }
    for (int l = 0; l < c->num_layers; l++)
        c->dense_layers += (c->layer_dense[l / 8] >> (l % 8)) & 1;
    return KVCAL_OK;
}

/* Gemma 2 and 3's fields and their defaults (transformers' Gemma2Config,
 * Gemma3TextConfig): query_pre_attn_scalar 256, sliding_window 4096, the
 * sliding layers of layer_types or, in older files, every layer but each
 * sliding_window_pattern-th (Gemma 2: every other layer; Gemma 3: 6), Gemma
 * 3's sliding layers' RoPE base (rope_parameters.sliding_attention.rope_theta,
 * rope_local_base_freq, 10000), the soft caps (Gemma 2: 50 and 30 unless
 * null). */
static kvcal_status cfg_read_gemma(const cfg_obj *top, kvcal_model_config *c)
{
    const int gemma2 = !strcmp(c->model_type, "gemma2");
    if (!gemma2 && strcmp(c->model_type, "gemma3_text"))
        return KVCAL_OK;
    kvcal_status s;
    int pattern = gemma2 ? 2 : 6;
    c->query_pre_attn_scalar = 256.0;
    c->rope_sliding_theta = gemma2 ? 0.0 : 10000.0;
    /* Gemma 2's soft caps: absent is the class default, null is none */
    if (gemma2) {
        c->attn_logit_softcapping =
            cJSON_GetObjectItemCaseSensitive(top->obj, "attn_logit_softcapping") ? 0.0 : 50.0;
        c->final_logit_softcapping =
            cJSON_GetObjectItemCaseSensitive(top->obj, "final_logit_softcapping") ? 0.0 : 30.0;
    }
    if (!cJSON_GetObjectItemCaseSensitive(top->obj, "sliding_window"))
        c->sliding_window = 4096;
    if ((s = cfg_double(top, "query_pre_attn_scalar", 0.0, INFINITY,
                        &c->query_pre_attn_scalar, NULL)) != KVCAL_OK ||
        (s = cfg_double(top, "rope_local_base_freq", 0.0, INFINITY, &c->rope_sliding_theta,
                        NULL)) != KVCAL_OK ||
        (s = cfg_double(top, "final_logit_softcapping", 0.0, INFINITY,
                        &c->final_logit_softcapping, NULL)) != KVCAL_OK ||
        (s = cfg_double(top, "attn_logit_softcapping", 0.0, INFINITY,
                        &c->attn_logit_softcapping, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "sliding_window_pattern", 1, KVCAL_CONFIG_MAX_LAYERS, &pattern,
                     NULL)) != KVCAL_OK)
        return s;
    const cJSON *params = cfg_item(top, "rope_parameters");
    cfg_obj sl = {cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params,
                                                                            "sliding_attention")
                                         : NULL,
                  "rope_parameters.sliding_attention.", top->name};
    if (cJSON_IsObject(sl.obj) &&
        (s = cfg_double(&sl, "rope_theta", 0.0, INFINITY, &c->rope_sliding_theta, NULL)) !=
            KVCAL_OK)
        return s;
    if (!c->layer_types_given) {
        c->layer_types_given = 1;
        for (int i = 0; i < c->num_layers; i++)
            if ((i + 1) % pattern) {
                c->sliding_layers++;
                c->layer_sliding[i / 8] |= (unsigned char)(1u << (i % 8));
            }
    }
    return KVCAL_OK;
}

/* Kinds of layer_types entries (transformers' names, legacy ones included):
 * those that cache an entry per token, those that cache nothing per token (a
 * fixed-size recurrent or convolution state, or no attention at all). */
static const char *const kv_layer_kinds[] = {"full_attention", "sliding_attention",
                                             "chunked_attention", "attention"};
static const char *const no_kv_layer_kinds[] = {"linear_attention", "mamba", "conv",
                                                "moe", "mlp"};

/* Model types whose cache kvcal knows: per-head K/V in every layer, in the
 * attention layers of layer_types / full_attention_interval (qwen3_next), or
 * MLA (deepseek_v2, deepseek_v3, kimi_k2, which is deepseek_v3's,
 * glm4_moe_lite, and the sparse-attention deepseek_v32 and glm_moe_dsa);
 * minimax_m2's attn_type_list, all full attention in its releases, is read
 * by neither transformers nor vLLM. */
static const char *const known_kv_families[] = {"llama",
                                                "mistral",
                                                "qwen2",
                                                "qwen3",
                                                "qwen2_moe",
                                                "qwen3_moe",
                                                "mixtral",
                                                "phi3",
                                                "gemma2",
                                                "gemma3_text",
                                                "glm4_moe",
                                                "glm4v_moe_text",
                                                "qwen3_next",
                                                "deepseek_v2",
                                                "deepseek_v3",
                                                "kimi_k2",
                                                "glm4_moe_lite",
                                                "deepseek_v32",
                                                "glm_moe_dsa",
                                                "gpt_oss",
                                                "qwen3_vl_text",
                                                "qwen2_5_vl",
                                                "qwen2_5_vl_text",
                                                "qwen3_vl_moe_text",
                                                "qwen2_vl",
                                                "qwen2_vl_text",
                                                "qwen3_5_text",
                                                "qwen3_5_moe_text",
                                                "minimax_m2",
                                                "ministral3",
                                                "llama4_text",
                                                "glm4",
                                                "glm4v_text",
                                                "ernie4_5_moe",
                                                "exaone4",
                                                "seed_oss",
                                                "smollm3",
                                                "olmo2",
                                                "olmo3"};

static int in_list(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, list[i]))
            return 1;
    return 0;
}

/* Which layers cache an entry per token: layer_types (an array of
 * num_hidden_layers kinds), else full_attention_interval (every interval-th
 * layer attends, the others are linear attention, as transformers' Qwen3-Next
 * config derives; qwen3_next's default interval is 4), else all layers. */
static kvcal_status cfg_read_kv_layers(const cfg_obj *top, kvcal_model_config *c)
{
    kvcal_status s;
    int interval = 0, found = 0;
    const cJSON *types = cfg_item(top, "layer_types");
    c->kv_layers = c->num_layers;
    c->kv_layout_known = in_list(c->model_type, known_kv_families,
                                 sizeof known_kv_families / sizeof *known_kv_families);
    if (types) {
        c->layer_types_given = 1;
        if (!cJSON_IsArray(types))
            return cfg_bad(top, "layer_types", types, "an array of layer kinds");
        if (cJSON_GetArraySize(types) != c->num_layers)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: field \"%slayer_types\" has %d entries but "
                              "num_hidden_layers is %d; they must match (fix one)",
                              top->name, top->prefix, cJSON_GetArraySize(types),
                              c->num_layers);
        c->kv_layers = 0;
        unsigned seen = 0; /* bit j: no_kv_layer_kinds[j] occurs */
        int i = 0;
        for (const cJSON *t = types->child; t; t = t->next, i++) {
            char key[32];
            snprintf(key, sizeof key, "layer_types[%d]", i);
            if (!cJSON_IsString(t) || !t->valuestring[0])
                return cfg_bad(top, key, t, "a layer kind string");
            const char *k = t->valuestring;
            int mla_indexed =
                c->kv_layout == KVCAL_KV_MLA && !strcmp(k, "indexed_attention");
            if (mla_indexed || in_list(k, kv_layer_kinds,
                                       sizeof kv_layer_kinds / sizeof *kv_layer_kinds)) {
                c->kv_layers++;
                if (!strcmp(k, "sliding_attention")) {
                    c->sliding_layers++;
                    c->layer_sliding[i / 8] |= (unsigned char)(1u << (i % 8));
                }
                continue;
            }
            int j = 0, n = sizeof no_kv_layer_kinds / sizeof *no_kv_layer_kinds;
            while (j < n && strcmp(k, no_kv_layer_kinds[j]))
                j++;
            if (j < n) {
                seen |= 1u << j;
                if (!strcmp(k, "linear_attention"))
                    c->layer_linear[i / 8] |= (unsigned char)(1u << (i % 8));
            } else if (c->kv_layout != KVCAL_KV_UNKNOWN) {
                c->kv_layout = KVCAL_KV_UNKNOWN;
                c->unknown_layer = i;
                snprintf(c->unknown_layer_type, sizeof c->unknown_layer_type, "%s", k);
            }
        }
        for (size_t j = 0; j < sizeof no_kv_layer_kinds / sizeof *no_kv_layer_kinds; j++)
            if (seen & 1u << j) {
                size_t at = strlen(c->no_kv_layer_types);
                snprintf(c->no_kv_layer_types + at, sizeof c->no_kv_layer_types - at,
                         "%s%s", at ? ", " : "", no_kv_layer_kinds[j]);
            }
        return KVCAL_OK;
    }
    if ((s = cfg_int(top, "full_attention_interval", 1, KVCAL_CONFIG_MAX_LAYERS,
                     &interval, &found)) != KVCAL_OK)
        return s;
    if (!found && !strcmp(c->model_type, "qwen3_next"))
        interval = 4;
    if (interval > c->num_layers)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"%sfull_attention_interval\" (%d) leaves no "
                          "attention layer among num_hidden_layers (%d); fix one of them",
                          top->name, top->prefix, interval, c->num_layers);
    if (interval > 1) {
        c->kv_layers = c->num_layers / interval;
        strcpy(c->no_kv_layer_types, "linear_attention");
        for (int i = 0; i < c->num_layers; i++)
            if ((i + 1) % interval)
                c->layer_linear[i / 8] |= (unsigned char)(1u << (i % 8));
        /* it stands for layer_types (transformers' Qwen3-Next: layer i
           attends, with full attention, when (i + 1) % interval == 0): no
           family's default pattern of sliding layers applies */
        c->layer_types_given = 1;
    }
    return KVCAL_OK;
}

int64_t kvcal_model_config_kv_values_per_token(const kvcal_model_config *c)
{
    if (c->kv_layout == KVCAL_KV_MLA)
        return (int64_t)c->kv_layers * (c->kv_lora_rank + c->qk_rope_head_dim);
    if (c->kv_layout == KVCAL_KV_PER_HEAD)
        return 2 * (int64_t)c->kv_layers * c->num_kv_heads * c->head_dim;
    return 0;
}

int kvcal_model_config_layer_caches(const kvcal_model_config *c, int l)
{
    return !((c->layer_linear[l / 8] >> (l % 8)) & 1);
}

int kvcal_model_config_cache_kv_heads(const kvcal_model_config *c)
{
    return c->kv_layout == KVCAL_KV_MLA ? 1 : c->num_kv_heads;
}

int kvcal_model_config_cache_head_dim(const kvcal_model_config *c)
{
    return c->kv_layout == KVCAL_KV_MLA ? c->kv_lora_rank + c->qk_rope_head_dim
                                        : c->head_dim;
}

static kvcal_status cfg_read_quantization(const cfg_obj *top, kvcal_model_config *c)
{
    const cJSON *q, *scheme;
    kvcal_status s = cfg_object(top, "quantization_config", &q);
    if (s != KVCAL_OK || !q)
        return s;
    c->has_quantization_config = 1;
    cfg_obj qo = {q, "quantization_config.", top->name};
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
    if (cJSON_IsString(method)) /* read as it is: an unknown one is no error */
        snprintf(c->quant_method, sizeof c->quant_method, "%s", method->valuestring);
    const cJSON *block = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
    if (cJSON_IsArray(block) && cJSON_IsNumber(cJSON_GetArrayItem(block, 0)))
        c->weight_block_size = cJSON_GetArrayItem(block, 0)->valueint;
    if ((s = cfg_object(&qo, "kv_cache_scheme", &scheme)) != KVCAL_OK)
        return s;
    c->has_kv_cache_scheme = scheme != NULL;
    return KVCAL_OK;
}

/* Qwen3-Next's and Qwen3.5's gated delta-net sizes and their transformers
 * defaults (16 key heads and 32 value heads of 128, kernel 4); their
 * attention output always gated (transformers has no switch: a config
 * that turns attn_output_gate off, which vLLM follows, is refused), its
 * RoPE on a quarter of each head by default, no attention bias (vLLM's
 * reads qkv_bias for q, k and v and none for o_proj, transformers'
 * attention_bias for all four: refused). */
static kvcal_status cfg_read_gated_delta(const cfg_obj *top, kvcal_model_config *c)
{
    if (!gated_delta_type(c->model_type))
        return KVCAL_OK;
    int gate = 1, qkv_bias = 0;
    c->linear_num_key_heads = 16, c->linear_num_value_heads = 32;
    c->linear_key_head_dim = c->linear_value_head_dim = 128;
    c->linear_conv_kernel_dim = 4;
    kvcal_status s;
    if ((s = cfg_int(top, "linear_num_key_heads", 1, KVCAL_CONFIG_MAX_HEADS,
                     &c->linear_num_key_heads, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "linear_num_value_heads", 1, KVCAL_CONFIG_MAX_HEADS,
                     &c->linear_num_value_heads, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "linear_key_head_dim", 1, KVCAL_CONFIG_MAX_HEAD_DIM,
                     &c->linear_key_head_dim, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "linear_value_head_dim", 1, KVCAL_CONFIG_MAX_HEAD_DIM,
                     &c->linear_value_head_dim, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "linear_conv_kernel_dim", 1, 64, &c->linear_conv_kernel_dim,
                     NULL)) != KVCAL_OK ||
        (s = cfg_bool(top, "attn_output_gate", &gate)) != KVCAL_OK ||
        (s = cfg_bool(top, "qkv_bias", &qkv_bias)) != KVCAL_OK)
        return s;
    if (c->linear_num_value_heads % c->linear_num_key_heads)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"%slinear_num_value_heads\" (%d) is not a multiple "
                          "of \"%slinear_num_key_heads\" (%d); fix one of them",
                          top->name, top->prefix, c->linear_num_value_heads, top->prefix,
                          c->linear_num_key_heads);
    if (!gate || qkv_bias || c->attention_bias)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: field \"%s%s\" is %s: transformers' %s and vLLM's would "
                          "not compute the same K/V (transformers %s); remove the field",
                          top->name, top->prefix,
                          !gate      ? "attn_output_gate"
                          : qkv_bias ? "qkv_bias"
                                     : "attention_bias",
                          !gate ? "false" : "true", c->model_type,
                          !gate ? "always gates the attention output"
                                : "biases q, k, v and o by attention_bias, vLLM q, k "
                                  "and v by qkv_bias");
    return KVCAL_OK;
}

/* gpt-oss's fields and their transformers defaults (GptOssConfig):
 * sliding_window 128, layer_types alternating from a sliding layer 0 where
 * absent, swiglu_alpha 1.702, swiglu_limit 7. */
static kvcal_status cfg_read_gpt_oss(const cfg_obj *top, kvcal_model_config *c)
{
    if (strcmp(c->model_type, "gpt_oss"))
        return KVCAL_OK;
    c->swiglu_limit = 7.0;
    c->swiglu_alpha = 1.702;
    if (!cJSON_GetObjectItemCaseSensitive(top->obj, "sliding_window"))
        c->sliding_window = 128;
    if (!c->layer_types_given) {
        c->layer_types_given = 1;
        for (int i = 0; i < c->num_layers; i += 2) {
            c->sliding_layers++;
            c->layer_sliding[i / 8] |= (unsigned char)(1u << (i % 8));
        }
    }
    kvcal_status s =
        cfg_double(top, "swiglu_limit", 0.0, INFINITY, &c->swiglu_limit, NULL);
    return s ? s : cfg_number(top, "swiglu_alpha", &c->swiglu_alpha);
}

/* A list of num_layers 0 / 1 flags (Llama 4's no_rope_layers) into bits
 * (bit l set where entry l is 1); absent or empty: *given 0. */
static kvcal_status cfg_layer_flags(const cfg_obj *top, const char *key, int num_layers,
                                    unsigned char *bits, int *given)
{
    const cJSON *list = cfg_item(top, key), *it;
    *given = 0;
    if (!list || (cJSON_IsArray(list) && !cJSON_GetArraySize(list)))
        return KVCAL_OK;
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != num_layers) {
        char want[64];
        snprintf(want, sizeof want, "an array of num_hidden_layers (%d) 0 / 1 entries",
                 num_layers);
        return cfg_bad(top, key, list, want);
    }
    int i = 0;
    cJSON_ArrayForEach(it, list)
    {
        if (!cJSON_IsNumber(it) || (it->valuedouble != 0 && it->valuedouble != 1)) {
            char at[48];
            snprintf(at, sizeof at, "%s[%d]", key, i);
            return cfg_bad(top, at, it, "0 or 1");
        }
        if (it->valuedouble == 1)
            bits[i / 8] |= (unsigned char)(1u << (i % 8));
        i++;
    }
    *given = 1;
    return KVCAL_OK;
}

/* The NoPE layers of Llama 4 and SmolLM3 into c->layer_nope: no_rope_layers'
 * 0 entries (its 1 entries rotate), else every no_rope_layer_interval-th
 * layer (`interval` where the config has none). */
static kvcal_status cfg_read_no_rope_layers(const cfg_obj *top, kvcal_model_config *c,
                                            int interval)
{
    int given = 0;
    kvcal_status s;
    if ((s = cfg_int(top, "no_rope_layer_interval", 1, KVCAL_CONFIG_MAX_LAYERS, &interval,
                     NULL)) != KVCAL_OK ||
        (s = cfg_layer_flags(top, "no_rope_layers", c->num_layers, c->layer_nope,
                             &given)) != KVCAL_OK)
        return s;
    for (int l = 0; l < c->num_layers; l++) {
        const int rope =
            given ? (c->layer_nope[l / 8] >> (l % 8)) & 1 : (l + 1) % interval != 0;
        c->layer_nope[l / 8] &= (unsigned char)~(1u << (l % 8));
        if (!rope) {
            c->layer_nope[l / 8] |= (unsigned char)(1u << (l % 8));
            c->nope_layers++;
        }
    }
    return KVCAL_OK;
}

/* Llama 4's moe_layers, which transformers reads, against the MoE layers
 * vLLM and sglang build from interleave_moe_layer_step (layer l when (l +
 * 1) % step == 0): an error naming the first layer they part on. */
static kvcal_status cfg_llama4_moe_layers(const cfg_obj *top, kvcal_model_config *c)
{
    const cJSON *list = cfg_item(top, "moe_layers"), *it;
    if (!list)
        return KVCAL_OK;
    if (!cJSON_IsArray(list))
        return cfg_bad(top, "moe_layers", list, "an array of layer indices");
    unsigned char listed[KVCAL_LAYER_BITS / 8] = {0};
    int i = 0;
    cJSON_ArrayForEach(it, list)
    {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
            it->valuedouble < 0 || it->valuedouble >= c->num_layers) {
            char at[32], want[64];
            snprintf(at, sizeof at, "moe_layers[%d]", i);
            snprintf(want, sizeof want, "a layer index in [0, %d)", c->num_layers);
            return cfg_bad(top, at, it, want);
        }
        const int l = (int)it->valuedouble;
        listed[l / 8] |= (unsigned char)(1u << (l % 8));
        i++;
    }
    for (int l = 0; l < c->num_layers; l++) {
        const int moe = !((c->layer_dense[l / 8] >> (l % 8)) & 1);
        if (((listed[l / 8] >> (l % 8)) & 1) != moe)
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: field \"%smoe_layers\" %s layer %d, but "
                "interleave_moe_layer_step %d makes it %s: transformers builds "
                "its layers from moe_layers, vLLM and sglang from the step, so "
                "their K and V would differ; fix one of the fields",
                top->name, top->prefix, moe ? "leaves out" : "lists", l,
                c->decoder_sparse_step, moe ? "a MoE layer" : "dense");
    }
    return KVCAL_OK;
}

/* Llama 4's layer_types, which transformers' masks follow, against the
 * chunked layers vLLM and sglang build (those with RoPE, when
 * attention_chunk_size is set). */
static kvcal_status cfg_llama4_layer_types(const cfg_obj *top, kvcal_model_config *c)
{
    const cJSON *types = cfg_item(top, "layer_types");
    int i = 0;
    for (const cJSON *t = types ? types->child : NULL; t; t = t->next, i++) {
        const int rope = !((c->layer_nope[i / 8] >> (i % 8)) & 1);
        const char *want =
            rope && c->attention_chunk_size ? "chunked_attention" : "full_attention";
        if (strcmp(t->valuestring, want))
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: field \"%slayer_types[%d]\" is \"%s\", but layer %d %s: "
                "vLLM and sglang attend %s there, transformers as layer_types "
                "says; fix the entry (\"%s\")",
                top->name, top->prefix, i, t->valuestring, i,
                rope ? "has RoPE" : "has no RoPE (no_rope_layers)",
                !strcmp(want, "full_attention") ? "over the whole sequence"
                                                : "within attention_chunk_size tokens",
                want);
    }
    return KVCAL_OK;
}

/* Llama 4's language model (see kvcal_model_config), with
 * Llama4TextConfig's defaults. */
static kvcal_status cfg_read_llama4(const cfg_obj *top, kvcal_model_config *c)
{
    if (strcmp(c->model_type, "llama4_text"))
        return KVCAL_OK;
    kvcal_status s;
    int found = 0, tuning = 1;
    c->qk_norm = 1;
    c->num_experts = 16;
    c->num_experts_per_tok = 1;
    c->decoder_sparse_step = 1;
    c->routed_scaling_factor = 1.0;
    c->moe_groups = c->moe_topk_groups = 1;
    c->moe_sigmoid = 1; /* the sigmoid of the top-k logits, not renormalized */
    c->moe_intermediate_size = c->intermediate_size;
    c->intermediate_size = 16384;
    c->attention_chunk_size = 8192;
    c->attn_temperature_scale = 0.1;
    c->attn_temperature_floor = 8192.0;
    const cJSON *t = cfg_item(top, "attn_temperature_tuning");
    if (t && !cJSON_IsBool(t) && !cJSON_IsNumber(t)) /* early releases: 4 */
        return cfg_bad(top, "attn_temperature_tuning", t, "true, false or a number");
    if (t)
        tuning = cJSON_IsBool(t) ? cJSON_IsTrue(t) : t->valuedouble != 0;
    if ((s = cfg_bool(top, "use_qk_norm", &c->qk_norm)) != KVCAL_OK ||
        (s = cfg_int(top, "num_local_experts", 1, KVCAL_CONFIG_MAX_HEADS, &c->num_experts,
                     NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "num_experts_per_tok", 1, KVCAL_CONFIG_MAX_HEADS,
                     &c->num_experts_per_tok, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "intermediate_size_mlp", 1, INT_MAX, &c->intermediate_size,
                     NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "interleave_moe_layer_step", 1, KVCAL_CONFIG_MAX_LAYERS,
                     &c->decoder_sparse_step, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "attention_chunk_size", 1, INT_MAX, &c->attention_chunk_size,
                     &found)) != KVCAL_OK ||
        (s = cfg_double(top, "floor_scale", 0.0, INFINITY, &c->attn_temperature_floor,
                        NULL)) != KVCAL_OK ||
        (s = cfg_number(top, "attn_scale", &c->attn_temperature_scale)) != KVCAL_OK ||
        (s = cfg_read_no_rope_layers(top, c, 4)) != KVCAL_OK)
        return s;
    /* an explicit null: no chunks */
    if (!found && cJSON_GetObjectItemCaseSensitive(top->obj, "attention_chunk_size"))
        c->attention_chunk_size = 0;
    if (!tuning)
        c->attn_temperature_scale = 0.0;
    c->shared_expert_intermediate_size = c->moe_intermediate_size;
    for (int l = 0; l < c->num_layers; l++)
        if ((l + 1) % c->decoder_sparse_step) {
            c->layer_dense[l / 8] |= (unsigned char)(1u << (l % 8));
            c->dense_layers++;
        }
    if (c->num_experts_per_tok > c->num_experts)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"%snum_experts_per_tok\" (%d) is above "
                          "num_local_experts (%d); fix one of them",
                          top->name, top->prefix, c->num_experts_per_tok, c->num_experts);
    if ((s = cfg_llama4_moe_layers(top, c)) != KVCAL_OK)
        return s;
    return cfg_llama4_layer_types(top, c);
}

/* Olmo 3's layers (olmo3, Olmo3Config's defaults): sliding_window 4096 in
 * the sliding layers of layer_types (else every layer but each fourth); its
 * sliding layers' RoPE is rope_parameters.sliding_attention's (as saved by
 * transformers 5), else the default of rope_theta: the legacy rope_scaling
 * stretches the full-attention layers alone. kvcal runs a sliding layers'
 * RoPE of the default kind. */
static kvcal_status cfg_read_olmo3(const cfg_obj *top, kvcal_model_config *c)
{
    if (strcmp(c->model_type, "olmo3"))
        return KVCAL_OK;
    if (!cJSON_GetObjectItemCaseSensitive(top->obj, "sliding_window"))
        c->sliding_window = 4096;
    if (!c->layer_types_given) {
        c->layer_types_given = 1;
        for (int l = 0; l < c->num_layers; l++)
            if ((l + 1) % 4) {
                c->layer_sliding[l / 8] |= (unsigned char)(1u << (l % 8));
                c->sliding_layers++;
            }
    }
    double theta = c->rope_theta;
    char type[32] = "default";
    const cJSON *params = cfg_item(top, "rope_parameters");
    cfg_obj sl = {cJSON_IsObject(params)
                      ? cJSON_GetObjectItemCaseSensitive(params, "sliding_attention")
                      : NULL,
                  "rope_parameters.sliding_attention.", top->name};
    kvcal_status s;
    if (cJSON_IsObject(sl.obj) &&
        ((s = cfg_double(&sl, "rope_theta", 0.0, INFINITY, &theta, NULL)) != KVCAL_OK ||
         (s = cfg_string(&sl, "rope_type", type, sizeof type, NULL)) != KVCAL_OK))
        return s;
    if (strcmp(type, "default"))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: field \"%srope_parameters.sliding_attention.rope_type\" is "
            "\"%s\": kvcal runs Olmo 3's sliding layers with the default "
            "RoPE alone",
            top->name, top->prefix, type);
    /* the full layers' scaled RoPE, or another base: the sliding layers' own */
    if (c->sliding_window > 0 && c->sliding_layers &&
        (c->rope_type != KVCAL_ROPE_DEFAULT || theta != c->rope_theta))
        c->rope_sliding_theta = theta;
    return KVCAL_OK;
}

/* SmolLM3's layers (smollm3, SmolLM3Config's defaults): no_rope_layers'
 * 0 entries have no RoPE (by default every no_rope_layer_interval-th, 4);
 * sliding_window applies, in the layers layer_types names, only with
 * use_sliding_window (false as released). */
static kvcal_status cfg_read_smollm3(const cfg_obj *top, kvcal_model_config *c)
{
    if (strcmp(c->model_type, "smollm3"))
        return KVCAL_OK;
    int use = 0;
    kvcal_status s;
    if ((s = cfg_bool(top, "use_sliding_window", &use)) != KVCAL_OK ||
        (s = cfg_read_no_rope_layers(top, c, 4)) != KVCAL_OK)
        return s;
    if (!use)
        c->sliding_window = 0;
    return KVCAL_OK;
}

/* EXAONE 4's layers (exaone4): sliding_window (Exaone4Config's 4096) in the
 * sliding layers of layer_types, which the released configs list (else,
 * as transformers derives them, every layer but each
 * sliding_window_pattern-th, an integer; from a string pattern, "LLLG" as
 * released, transformers derives none); where some layers slide, the
 * full-attention layers have no RoPE (transformers and vLLM: RoPE where a
 * layer slides, or in every layer where none does). */
static kvcal_status cfg_read_exaone4(const cfg_obj *top, kvcal_model_config *c)
{
    if (strcmp(c->model_type, "exaone4"))
        return KVCAL_OK;
    if (!cJSON_GetObjectItemCaseSensitive(top->obj, "sliding_window"))
        c->sliding_window = 4096;
    if (!c->layer_types_given && c->sliding_window > 0) {
        int pattern = 4;
        const cJSON *p = cfg_item(top, "sliding_window_pattern");
        if (p && !cJSON_IsNumber(p))
            return cfg_missing(top, "layer_types",
                               " (with a sliding window and a sliding_window_pattern "
                               "that is no number, transformers' EXAONE 4 cannot derive "
                               "the sliding layers)");
        kvcal_status s = cfg_int(top, "sliding_window_pattern", 1,
                                 KVCAL_CONFIG_MAX_LAYERS, &pattern, NULL);
        if (s != KVCAL_OK)
            return s;
        c->layer_types_given = 1;
        for (int l = 0; l < c->num_layers; l++)
            if ((l + 1) % pattern) {
                c->layer_sliding[l / 8] |= (unsigned char)(1u << (l % 8));
                c->sliding_layers++;
            }
    }
    for (int l = 0; c->sliding_layers && c->sliding_window > 0 && l < c->num_layers; l++)
        if (!((c->layer_sliding[l / 8] >> (l % 8)) & 1)) {
            c->layer_nope[l / 8] |= (unsigned char)(1u << (l % 8));
            c->nope_layers++;
        }
    return KVCAL_OK;
}

/* ERNIE 4.5's mixture of experts (ernie4_5_moe, Ernie4_5_MoeConfig's
 * defaults): moe_num_experts experts of moe_intermediate_size, top moe_k
 * by softmax probability plus e_score_correction_bias, weighted by the
 * probabilities renormalized, moe_num_shared_experts ungated shared
 * experts; layer l a MoE layer when moe_layer_start_index <= l <=
 * moe_layer_end_index and (l + 1) % moe_layer_interval == 0. Refused: what
 * transformers and vLLM default apart (moe_layer_start_index absent:
 * transformers 1, vLLM 0; moe_layer_end_index absent in a model past 28
 * layers: transformers 27, vLLM the last) and use_bias (vLLM builds o_proj
 * without one). */
static kvcal_status cfg_read_ernie45(const cfg_obj *top, kvcal_model_config *c)
{
    if (strcmp(c->model_type, "ernie4_5_moe"))
        return KVCAL_OK;
    kvcal_status s;
    int start = 1, end = 27, interval = 1, shared = 2, found_start = 0, found_end = 0,
        bias = 0;
    const cJSON *n = cfg_item(top, "moe_num_experts");
    if (n && !cJSON_IsNumber(n))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: field \"%smoe_num_experts\" is not a number (ERNIE-4.5-VL's "
            "text and vision experts): kvcal runs ERNIE 4.5's text models; "
            "fix the field",
            top->name, top->prefix);
    c->num_experts = 64;
    c->num_experts_per_tok = 6;
    c->moe_intermediate_size = 1536;
    c->norm_topk_prob = 1;
    c->moe_softmax_bias = 1;
    c->routed_scaling_factor = 1.0;
    c->moe_groups = c->moe_topk_groups = 1;
    c->decoder_sparse_step = 1;
    if ((s = cfg_int(top, "moe_num_experts", 1, KVCAL_CONFIG_MAX_HEADS, &c->num_experts,
                     NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "moe_k", 1, KVCAL_CONFIG_MAX_HEADS, &c->num_experts_per_tok,
                     NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "moe_intermediate_size", 1, INT_MAX, &c->moe_intermediate_size,
                     NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "moe_num_shared_experts", 0, 64, &shared, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "moe_layer_start_index", 0, KVCAL_CONFIG_MAX_LAYERS, &start,
                     &found_start)) != KVCAL_OK ||
        (s = cfg_int(top, "moe_layer_end_index", -1, KVCAL_CONFIG_MAX_LAYERS, &end,
                     &found_end)) != KVCAL_OK ||
        (s = cfg_int(top, "moe_layer_interval", 1, KVCAL_CONFIG_MAX_LAYERS, &interval,
                     NULL)) != KVCAL_OK ||
        (s = cfg_bool(top, "use_bias", &bias)) != KVCAL_OK)
        return s;
    if (!found_start)
        return cfg_missing(top, "moe_layer_start_index",
                           " (transformers' ERNIE 4.5 then starts its experts at layer "
                           "1, vLLM's at layer 0)");
    if (!found_end && c->num_layers > 28)
        return cfg_missing(top, "moe_layer_end_index",
                           " (transformers' ERNIE 4.5 then ends its experts at layer 27, "
                           "vLLM's at the last layer)");
    if (bias)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: field \"%suse_bias\" is true: transformers' ERNIE 4.5 then "
            "adds biases to q/k/v and o_proj, vLLM to q/k/v alone; fix the "
            "field (false)",
            top->name, top->prefix);
    if (c->num_experts_per_tok > c->num_experts)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"%smoe_k\" (%d) is above moe_num_experts (%d); fix "
                          "one of them",
                          top->name, top->prefix, c->num_experts_per_tok, c->num_experts);
    c->shared_expert_intermediate_size = shared * c->moe_intermediate_size;
    for (int l = 0; l < c->num_layers; l++)
        if (!(l >= start && l <= end && (l + 1) % interval == 0)) {
            c->layer_dense[l / 8] |= (unsigned char)(1u << (l % 8));
            c->dense_layers++;
        }
    return KVCAL_OK;
}

/* GLM-4.1V's and GLM-4.6V-Flash's language model (glm4v_text): transformers'
 * Glm4vText always adds q/k/v biases and rotates a whole head where the
 * config names no partial_rotary_factor, while vLLM builds it as
 * Glm4ForCausalLM, which follows attention_bias (absent: none) and
 * rotates half a head by default: a config that leaves either to them is
 * refused. */
static kvcal_status cfg_read_glm4v_text(const cfg_obj *top, kvcal_model_config *c)
{
    if (strcmp(c->model_type, "glm4v_text"))
        return KVCAL_OK;
    const cJSON *rp = cfg_item(top, "rope_parameters"),
                *rs = cfg_item(top, "rope_scaling");
    const int partial = cfg_item(top, "partial_rotary_factor") ||
                        (cJSON_IsObject(rp) &&
                         cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor")) ||
                        (cJSON_IsObject(rs) &&
                         cJSON_GetObjectItemCaseSensitive(rs, "partial_rotary_factor"));
    if (!partial)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: field \"%spartial_rotary_factor\" is missing: transformers' "
            "GLM-4V text model then rotates the whole head and vLLM's half "
            "of it; add the field (the released configs say 0.5)",
            top->name, top->prefix);
    if (!c->attention_bias)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: field \"%sattention_bias\" is %s: transformers' GLM-4V "
                          "text model adds q/k/v biases whatever it says while vLLM "
                          "follows it; fix the field (true)",
                          top->name, top->prefix,
                          cfg_item(top, "attention_bias") ? "false" : "missing");
    return KVCAL_OK;
}

/* MiniMax-M2's released configs give partial RoPE as rotary_dim, which
 * transformers' and vLLM's MiniMax-M2 turn into partial_rotary_factor
 * rotary_dim / head_dim where the config has no partial_rotary_factor (read
 * after this, which then wins). */
static kvcal_status cfg_read_rotary_dim(const cfg_obj *top, kvcal_model_config *c)
{
    int rotary_dim = 0, found = 0;
    if (strcmp(c->model_type, "minimax_m2"))
        return KVCAL_OK;
    const int head_dim = c->head_dim;
    kvcal_status s =
        cfg_int(top, "rotary_dim", 2, KVCAL_CONFIG_MAX_HEAD_DIM, &rotary_dim, &found);
    if (s != KVCAL_OK || !found)
        return s;
    if (head_dim < 1 || rotary_dim > head_dim || rotary_dim % 2)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"%srotary_dim\" is %d: it must be even and at most "
                          "head_dim (%d); fix the field",
                          top->name, top->prefix, rotary_dim, head_dim);
    c->partial_rotary_factor = (double)rotary_dim / head_dim;
    return KVCAL_OK;
}

/* Ministral 3's llama_4_scaling_beta: transformers scales its queries by
 * 1 + beta ln(1 + floor(pos / original_max_position_embeddings)) (other
 * families' configs carry no such field that transformers reads). */
static kvcal_status cfg_query_scaling(const cfg_obj *top, kvcal_model_config *c)
{
    if (strcmp(c->model_type, "ministral3") || !(c->rope_llama4_beta > 0.0))
        return KVCAL_OK;
    if (c->rope_original_max_position < 1)
        return cfg_missing(
            top, "rope_parameters.original_max_position_embeddings",
            " (where llama_4_scaling_beta's scaling of the queries starts)");
    c->query_scaling_from = c->rope_original_max_position;
    return KVCAL_OK;
}

/* The transformers config class's rms_norm_eps of model_type `t`: 1e-5
 * for these, GLM-4's 1.5625e-07, 1e-6 for the others. */
static double rms_norm_eps_default(const char *t)
{
    static const char *const eps_1e5[] = {
        "mixtral",         "phi3",        "glm4_moe",      "glm4v_moe_text",
        "glm4_moe_lite",   "glm_moe_dsa", "gpt_oss",       "ministral3",
        "llama4_text",     "qwen2_vl",    "qwen2_vl_text", "qwen2_5_vl",
        "qwen2_5_vl_text", "glm4v_text",  "ernie4_5_moe",  "exaone4",
        "olmo2",           "olmo3"};
    if (!strcmp(t, "glm4")) /* Glm4Config's */
        return 1.5625e-07;
    return in_list(t, eps_1e5, sizeof eps_1e5 / sizeof *eps_1e5) ? 1e-5 : 1e-6;
}

/* The language model's fields: at the top level, or in text_config for a
 * multimodal config without num_hidden_layers of its own (Gemma 3, Llama 4,
 * Qwen2.5-VL: transformers' get_text_config); architectures and
 * quantization_config stay at the top. */
static kvcal_status cfg_read(const cfg_obj *top, kvcal_model_config *c)
{
    kvcal_status s;
    int found;
    const cJSON *text = cfg_item(top, "text_config");
    cfg_obj sub = {text, "text_config.", top->name};
    const cfg_obj *f =
        cJSON_IsObject(text) && !cfg_item(top, "num_hidden_layers") ? &sub : top;
    c->rope_theta = 10000.0;
    c->partial_rotary_factor = 1.0;
    c->rope_factor = 1.0;
    c->rope_attention_factor = 1.0;
    if ((s = cfg_string(f, "model_type", c->model_type, sizeof c->model_type, &found)) !=
            KVCAL_OK ||
        (!found && f != top &&
         (s = cfg_string(top, "model_type", c->model_type, sizeof c->model_type,
                         &found)) != KVCAL_OK))
        return s;
    if (!found)
        return cfg_missing(top, "model_type", "");
    c->text_config = f != top;
    c->multimodal = c->text_config || cJSON_IsObject(cfg_item(top, "vision_config"));
    cfg_default_sizes(c);
    c->rms_norm_eps = rms_norm_eps_default(c->model_type);
    /* Gemma2Config's and Gemma3TextConfig's default, which Gemma 3's
     * multimodal configs leave to the class */
    c->tie_word_embeddings =
        !strcmp(c->model_type, "gemma2") || !strcmp(c->model_type, "gemma3_text") ||
        !strcmp(c->model_type, "ernie4_5_moe") || !strcmp(c->model_type, "smollm3");
    /* Glm4MoeConfig's, Glm4vMoeTextConfig's and Glm4Config's default */
    if (!strcmp(family_type(c->model_type), "glm4_moe") || !strcmp(c->model_type, "glm4"))
        c->partial_rotary_factor = 0.5;
    if (gated_delta_type(c->model_type)) /* Qwen3-Next's and Qwen3.5's */
        c->partial_rotary_factor = 0.25;
    if ((s = cfg_read_architecture(top, c)) != KVCAL_OK ||
        (s = cfg_required_int(f, "num_hidden_layers", 1, KVCAL_CONFIG_MAX_LAYERS,
                              &c->num_layers)) != KVCAL_OK ||
        (s = cfg_required_int(f, "hidden_size", 1, KVCAL_CONFIG_MAX_HIDDEN,
                              &c->hidden_size)) != KVCAL_OK ||
        (s = cfg_read_heads(f, c)) != KVCAL_OK ||
        (s = cfg_read_rotary_dim(f, c)) != KVCAL_OK ||
        (s = cfg_int(f, "intermediate_size", 1, INT_MAX, &c->intermediate_size, NULL)) !=
            KVCAL_OK ||
        (s = cfg_int(f, "vocab_size", 1, KVCAL_CONFIG_MAX_VOCAB, &c->vocab_size, NULL)) !=
            KVCAL_OK ||
        (s = cfg_int(f, "max_position_embeddings", 1, INT_MAX,
                     &c->max_position_embeddings, NULL)) != KVCAL_OK ||
        (s = cfg_double(f, "rms_norm_eps", 0.0, 1.0, &c->rms_norm_eps, NULL)) !=
            KVCAL_OK ||
        (s = cfg_double(f, "partial_rotary_factor", 0.0, 1.0, &c->partial_rotary_factor,
                        NULL)) != KVCAL_OK ||
        (s = cfg_read_rope(f, c)) != KVCAL_OK ||
        (s = cfg_bool(f, "tie_word_embeddings", &c->tie_word_embeddings)) != KVCAL_OK ||
        /* a wrapper's own field wins: transformers ties the head by the
         * config of the model it builds, the wrapper's */
        (f != top && (s = cfg_bool(top, "tie_word_embeddings",
                                   &c->tie_word_embeddings)) != KVCAL_OK) ||
        (s = cfg_read_attention(f, c)) != KVCAL_OK ||
        (s = cfg_read_kv_layers(f, c)) != KVCAL_OK ||
        (s = cfg_read_moe(f, c)) != KVCAL_OK || (s = cfg_read_gemma(f, c)) != KVCAL_OK ||
        (s = cfg_read_gpt_oss(f, c)) != KVCAL_OK ||
        (s = cfg_read_llama4(f, c)) != KVCAL_OK ||
        (s = cfg_read_glm4v_text(f, c)) != KVCAL_OK ||
        (s = cfg_read_ernie45(f, c)) != KVCAL_OK ||
        (s = cfg_read_exaone4(f, c)) != KVCAL_OK ||
        (s = cfg_read_smollm3(f, c)) != KVCAL_OK ||
        (s = cfg_read_olmo3(f, c)) != KVCAL_OK ||
        (s = cfg_read_gated_delta(f, c)) != KVCAL_OK ||
        (s = cfg_read_quantization(top, c)) != KVCAL_OK ||
        (s = cfg_query_scaling(f, c)) != KVCAL_OK)
        return s;
    c->rope_interleave = -1;
    if ((s = cfg_bool(f, "rope_interleave", &c->rope_interleave)) != KVCAL_OK)
        return s;
    for (const cfg_obj *o = f; o; o = o == top ? NULL : top) {
        if ((s = cfg_string(o, "dtype", c->torch_dtype, sizeof c->torch_dtype, &found)) !=
                KVCAL_OK ||
            (!found && (s = cfg_string(o, "torch_dtype", c->torch_dtype,
                                       sizeof c->torch_dtype, &found)) != KVCAL_OK))
            return s;
        if (found)
            break;
    }
    return KVCAL_OK;
}

/* --- public --------------------------------------------------------------- */

kvcal_status kvcal_model_config_from_json(const cJSON *root, const char *name,
                                          kvcal_model_config *out)
{
    memset(out, 0, sizeof *out);
    if (!name)
        name = "config.json";
    if (!cJSON_IsObject(root))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: the top level is not a JSON object; a config.json holds "
                          "one object of fields",
                          name);
    cfg_obj top = {root, "", name};
    kvcal_status s = cfg_read(&top, out);
    if (s != KVCAL_OK)
        memset(out, 0, sizeof *out);
    return s;
}

kvcal_status kvcal_model_config_parse(const char *json, size_t len, const char *name,
                                      kvcal_model_config *out)
{
    cJSON *root = NULL;
    memset(out, 0, sizeof *out);
    kvcal_status s = kvcal_json_parse(json, len, name ? name : "config.json", &root);
    if (s == KVCAL_OK)
        s = kvcal_model_config_from_json(root, name, out);
    cJSON_Delete(root);
    return s;
}

/* 1 with the name of a regular *.bin file of dir in name (the first in
 * name order), a llama2.c checkpoint a user meant to pass. */
static int find_llama2c_file(const char *dir, char *name, size_t size)
{
    struct dirent **list = NULL;
    const int n = scandir(dir, &list, NULL, alphasort);
    int found = 0;
    for (int i = 0; i < n; i++) {
        const char *e = list[i]->d_name;
        const size_t len = strlen(e);
        char full[4096];
        struct stat st;
        if (!found && len > 4 && len < size && !strcmp(e + len - 4, ".bin") &&
            (size_t)snprintf(full, sizeof full, "%s/%s", dir, e) < sizeof full &&
            stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            memcpy(name, e, len + 1);
            found = 1;
        }
        free(list[i]);
    }
    free(list);
    return found;
}

kvcal_status kvcal_model_config_load(const char *path, kvcal_model_config *out)
{
    char file[4096];
    struct stat st;
    memset(out, 0, sizeof *out);
    int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (is_dir) {
        if ((size_t)snprintf(file, sizeof file, "%s/config.json", path) >= sizeof file)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%.64s...: path too long", path);
        if (stat(file, &st) != 0) {
            char bin[256];
            if (find_llama2c_file(path, bin, sizeof bin))
                return kvcal_fail(KVCAL_ERR_IO,
                                  "%s: no config.json in this directory, but %s looks "
                                  "like a llama2.c checkpoint: pass that file "
                                  "(%s/%s)",
                                  path, bin, path, bin);
            return kvcal_fail(KVCAL_ERR_IO,
                              "%s: no config.json in this directory; pass the model "
                              "directory (the one with config.json)",
                              path);
        }
    } else {
        if ((size_t)snprintf(file, sizeof file, "%s", path) >= sizeof file)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%.64s...: path too long", path);
    }
    cJSON *root = NULL;
    kvcal_status s = kvcal_json_load(file, &root);
    if (s == KVCAL_ERR_PARSE && !is_dir)
        s = kvcal_fail_context(s,
                               "%.300s is not a config.json; give the model directory "
                               "holding config.json, or config.json itself: ",
                               path);
    if (s == KVCAL_OK)
        s = kvcal_model_config_from_json(root, file, out);
    cJSON_Delete(root);
    return s;
}
