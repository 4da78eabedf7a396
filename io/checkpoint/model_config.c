/* io/checkpoint/model_config.c: the fields of config.json the toolkit needs.
 *
 * Defaults follow the transformers config classes where a field is absent or
 * null: rope_theta 10000, rms_norm_eps 1e-6, head_dim hidden_size /
 * num_attention_heads (qwen3: 128), num_key_value_heads = num_attention_heads
 * when null, and when absent the class default (mistral 8, qwen2 and qwen3 32,
 * llama num_attention_heads), mistral sliding_window 4096; qwen2/qwen3 use
 * sliding_window only when use_sliding_window is true; max_position_embeddings,
 * vocab_size and intermediate_size the class defaults of those four types.
 * Qwen2 always has q/k/v biases, Qwen3 always a per-head q/k RMSNorm. The
 * fields and defaults one family alone has are read by
 * io/checkpoint/model_config_families.c, each field through
 * io/checkpoint/config_fields.h. */
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
#include "io/checkpoint/config_fields.h"
#include "io/checkpoint/model_config_families.h"
#include "io/json_file.h"

/* --- sections ------------------------------------------------------------- */

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
                    {"hunyuan_v1_moe", 2048, 290943, 11008},
                    {"hunyuan_v1_dense", 2048, 290943, 11008},
                    {"granite", 2048, 32000, 11008},
                    {"granitemoe", 2048, 32000, 11008},
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
            KVCAL_OK ||
        (s = cfg_double(sc, "alpha", 0.0, INFINITY, &c->rope_alpha, NULL)) != KVCAL_OK)
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
    char prefix[64]; /* the fields' place in messages, below text_config too */
    if (params) {
        snprintf(prefix, sizeof prefix, "%srope_parameters.", top->prefix);
        cfg_obj p = {params, prefix, top->name};
        const cJSON *full = cfg_item(&p, "full_attention");
        if (!cfg_item(&p, "rope_type") && !cfg_item(&p, "rope_theta") &&
            cJSON_IsObject(full)) {
            p.obj = full;
            snprintf(prefix, sizeof prefix, "%srope_parameters.full_attention.",
                     top->prefix);
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
        snprintf(prefix, sizeof prefix, "%srope_scaling.", top->prefix);
        cfg_obj sc = {scaling, prefix, top->name};
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
                          "%s: field \"%snum_attention_heads\" (%d) is not a multiple "
                          "of \"%snum_key_value_heads\" (%d); fix one of them",
                          top->name, top->prefix, c->num_attention_heads, top->prefix,
                          c->num_kv_heads);
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
                          "%s: field \"%shead_dim\" is missing and \"%shidden_size\" "
                          "(%d) is not a multiple of \"%snum_attention_heads\" (%d); add "
                          "head_dim",
                          top->name, top->prefix, top->prefix, c->hidden_size,
                          top->prefix, c->num_attention_heads);
    if (c->hidden_size / c->num_attention_heads > KVCAL_CONFIG_MAX_HEAD_DIM)
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: field \"%shead_dim\" is missing and \"%shidden_size\" (%d) / "
            "\"%snum_attention_heads\" (%d) is above kvcal's bound of %d, far "
            "above any real model; fix one of them",
            top->name, top->prefix, top->prefix, c->hidden_size, top->prefix,
            c->num_attention_heads, KVCAL_CONFIG_MAX_HEAD_DIM);
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
                    {"minimax_m2", 256, 8, 0, 0, 1},
                    /* GraniteMoe's: a softmax over the top-k logits */
                    {"granitemoe", 8, 2, 0, 0, 1}};
    size_t i = 0;
    while (i < sizeof defaults / sizeof defaults[0] &&
           strcmp(defaults[i].model_type, c->model_type))
        i++;
    if (i == sizeof defaults / sizeof defaults[0])
        return KVCAL_OK;
    /* Mixtral's, gpt-oss's, MiniMax-M2's and GraniteMoe's experts are
     * intermediate_size wide, their top-k weights always renormalized
     * (gpt-oss, GraniteMoe: a softmax over the chosen) */
    const int minimax = !strcmp(c->model_type, "minimax_m2");
    const int mixtral = !strcmp(c->model_type, "mixtral") ||
                        !strcmp(c->model_type, "gpt_oss") || minimax ||
                        !strcmp(c->model_type, "granitemoe");
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

/* Kinds of layer_types entries (transformers' names, legacy ones included):
 * those that cache an entry per token, those that cache nothing per token (a
 * fixed-size recurrent or convolution state, or no attention at all). */
static const char *const kv_layer_kinds[] = {"full_attention", "sliding_attention",
                                             "chunked_attention", "attention"};
static const char *const no_kv_layer_kinds[] = {"linear_attention", "mamba", "conv",
                                                "moe", "mlp"};

/* Model types whose cache kvcal knows: per-head K/V in every layer, in the
 * attention layers of layer_types / full_attention_interval (qwen3_next,
 * qwen3_5_text, qwen3_5_moe_text), or
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
                                                "olmo3",
                                                "hunyuan_v1_moe",
                                                "hunyuan_v1_dense",
                                                "granite",
                                                "granitemoe"};

/* Which layers cache an entry per token: layer_types (an array of
 * num_hidden_layers kinds), else full_attention_interval (every interval-th
 * layer attends, the others are linear attention, as transformers'
 * Qwen3-Next and Qwen3.5 configs derive; their default interval is 4), else
 * all layers. */
static kvcal_status cfg_read_kv_layers(const cfg_obj *top, kvcal_model_config *c)
{
    kvcal_status s;
    int interval = 0, found = 0;
    const cJSON *types = cfg_item(top, "layer_types");
    c->kv_layers = c->num_layers;
    c->kv_layout_known =
        cfg_in_list(c->model_type, known_kv_families,
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
            if (mla_indexed ||
                cfg_in_list(k, kv_layer_kinds,
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
    if (!found && gated_delta_type(c->model_type))
        interval = 4;
    if (interval > c->num_layers)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"%sfull_attention_interval\" (%d%s) leaves no "
                          "attention layer among num_hidden_layers (%d); fix one of them "
                          "or give layer_types",
                          top->name, top->prefix, interval,
                          found ? ""
                                : ", the default where it and layer_types are absent",
                          c->num_layers);
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
        (s = cfg_read_hunyuan(f, c)) != KVCAL_OK ||
        (s = cfg_read_granite(f, c)) != KVCAL_OK ||
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
