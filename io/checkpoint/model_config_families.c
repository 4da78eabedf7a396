/* io/checkpoint/model_config_families.c: what config.json means for each
 * family, where its fields or its class's defaults are its own (see
 * model_config_families.h); model_config.c reads the fields every family
 * shares and calls these for the rest. */
#include "io/checkpoint/model_config_families.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"

/* The family whose fields config model_type `t` has: a multimodal model's
 * language model reads as its text family (Qwen3-VL's qwen3_vl_text as
 * qwen3, qwen3_vl_moe_text as qwen3_moe; Qwen2-VL's and Qwen2.5-VL's
 * qwen2_vl, qwen2_5_vl and their _text as qwen2; GLM-4.5V's and 4.6V's
 * glm4v_moe_text as glm4_moe), any other as itself. */
const char *family_type(const char *t)
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
int gated_delta_type(const char *t)
{
    return !strcmp(t, "qwen3_next") || !strcmp(t, "qwen3_5_text") ||
           !strcmp(t, "qwen3_5_moe_text");
}

/* The sliding layers of Qwen's MoE models with use_sliding_window, as
 * transformers 5 applies the window: Qwen3-MoE to every layer (its config
 * has no max_window_layers; layer_types, if any, are not read); Qwen2-MoE
 * to the layers of layer_types, which default to the even layers below
 * max_window_layers (28). A hybrid config (layers that cache nothing) keeps
 * the pattern it states. */
kvcal_status cfg_qwen_moe_windows(const cfg_obj *top, kvcal_model_config *c)
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
kvcal_status cfg_read_deepseek(const cfg_obj *top, kvcal_model_config *c)
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
    /* the indexer's heads: read to be checked alone (kvcal runs no indexer) */
    int index_heads = 0;
    if (dsa &&
        ((s = cfg_int(top, "index_topk", 1, INT_MAX, &c->index_topk, NULL)) != KVCAL_OK ||
         (s = cfg_int(top, "index_n_heads", 1, KVCAL_CONFIG_MAX_HEADS, &index_heads,
                      NULL)) != KVCAL_OK))
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
kvcal_status cfg_read_minimax_routing(const cfg_obj *top, kvcal_model_config *c)
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

/* Gemma 2 and 3's fields and their defaults (transformers' Gemma2Config,
 * Gemma3TextConfig): query_pre_attn_scalar 256, sliding_window 4096, the
 * sliding layers of layer_types or, in older files, every layer but each
 * sliding_window_pattern-th (Gemma 2: every other layer; Gemma 3: 6), Gemma
 * 3's sliding layers' RoPE base (rope_parameters.sliding_attention.rope_theta,
 * rope_local_base_freq, 10000), the soft caps (Gemma 2: 50 and 30 unless
 * null). */
kvcal_status cfg_read_gemma(const cfg_obj *top, kvcal_model_config *c)
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
            cJSON_GetObjectItemCaseSensitive(top->obj, "attn_logit_softcapping") ? 0.0
                                                                                 : 50.0;
        c->final_logit_softcapping =
            cJSON_GetObjectItemCaseSensitive(top->obj, "final_logit_softcapping") ? 0.0
                                                                                  : 30.0;
    }
    if (!cJSON_GetObjectItemCaseSensitive(top->obj, "sliding_window"))
        c->sliding_window = 4096;
    if ((s = cfg_double(top, "query_pre_attn_scalar", 0.0, INFINITY,
                        &c->query_pre_attn_scalar, NULL)) != KVCAL_OK ||
        (s = cfg_double(top, "rope_local_base_freq", 0.0, INFINITY,
                        &c->rope_sliding_theta, NULL)) != KVCAL_OK ||
        (s = cfg_double(top, "final_logit_softcapping", 0.0, INFINITY,
                        &c->final_logit_softcapping, NULL)) != KVCAL_OK ||
        (s = cfg_double(top, "attn_logit_softcapping", 0.0, INFINITY,
                        &c->attn_logit_softcapping, NULL)) != KVCAL_OK ||
        (s = cfg_int(top, "sliding_window_pattern", 1, KVCAL_CONFIG_MAX_LAYERS, &pattern,
                     NULL)) != KVCAL_OK)
        return s;
    const cJSON *params = cfg_item(top, "rope_parameters");
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%srope_parameters.sliding_attention.", top->prefix);
    cfg_obj sl = {cJSON_IsObject(params)
                      ? cJSON_GetObjectItemCaseSensitive(params, "sliding_attention")
                      : NULL,
                  prefix, top->name};
    if (cJSON_IsObject(sl.obj) &&
        (s = cfg_double(&sl, "rope_theta", 0.0, INFINITY, &c->rope_sliding_theta,
                        NULL)) != KVCAL_OK)
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

/* Qwen3-Next's and Qwen3.5's layer_types: transformers' and vLLM's decoder
 * layers build a delta-net for "linear_attention" and attention for
 * "full_attention" alone, so another attending kind (a sliding, chunked or
 * legacy "attention" layer, which kvcal would otherwise run) is refused;
 * kinds that cache nothing and unknown ones are refused when the model is
 * opened. */
static kvcal_status cfg_gated_delta_layer_types(const cfg_obj *top,
                                                const kvcal_model_config *c)
{
    static const char *const refused[] = {"sliding_attention", "chunked_attention",
                                          "attention"};
    const cJSON *types = cfg_item(top, "layer_types");
    int i = 0;
    for (const cJSON *t = cJSON_IsArray(types) ? types->child : NULL; t; t = t->next, i++)
        if (cJSON_IsString(t) &&
            cfg_in_list(t->valuestring, refused, sizeof refused / sizeof *refused))
            return kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: field \"%slayer_types[%d]\" is \"%s\", but transformers' and "
                "vLLM's %s build only \"linear_attention\" and \"full_attention\" "
                "layers; fix the entry (\"full_attention\" for an attention layer)",
                top->name, top->prefix, i, t->valuestring, c->model_type);
    return KVCAL_OK;
}

/* Qwen3-Next's and Qwen3.5's gated delta-net sizes and their transformers
 * defaults (16 key heads and 32 value heads of 128, kernel 4); their
 * attention output always gated (transformers has no switch: a config
 * that turns attn_output_gate off, which vLLM follows, is refused), its
 * RoPE on a quarter of each head by default, no attention bias (vLLM's
 * reads qkv_bias for q, k and v and none for o_proj, transformers'
 * attention_bias for all four: refused). */
kvcal_status cfg_read_gated_delta(const cfg_obj *top, kvcal_model_config *c)
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
        (s = cfg_bool(top, "qkv_bias", &qkv_bias)) != KVCAL_OK ||
        (s = cfg_gated_delta_layer_types(top, c)) != KVCAL_OK)
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
kvcal_status cfg_read_gpt_oss(const cfg_obj *top, kvcal_model_config *c)
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
kvcal_status cfg_read_llama4(const cfg_obj *top, kvcal_model_config *c)
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

/* One of Hunyuan's per-layer fields (num_experts, moe_topk: an integer, or
 * a list of one per layer, which kvcal runs when every entry is the same)
 * into *out. */
static kvcal_status cfg_hunyuan_uniform(const cfg_obj *top, const char *key, int *out)
{
    const cJSON *it = cfg_item(top, key), *e;
    if (!cJSON_IsArray(it))
        return cfg_int(top, key, 1, KVCAL_CONFIG_MAX_HEADS, out, NULL);
    int first = 1;
    cJSON_ArrayForEach(e, it)
    {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
            e->valuedouble < 1 || e->valuedouble > KVCAL_CONFIG_MAX_HEADS)
            return cfg_bad(top, key, it, "an integer >= 1 or a list of them");
        if (!first && (int)e->valuedouble != *out)
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: field \"%s%s\" differs from layer to layer: kvcal runs "
                "one value in every layer",
                top->name, top->prefix, key);
        *out = (int)e->valuedouble;
        first = 0;
    }
    return KVCAL_OK;
}

/* Hunyuan (hunyuan_v1_moe, hunyuan_v1_dense; the transformers classes'
 * defaults, which vLLM 0.32.0's Transformers backend runs as they are): a
 * "dynamic" RoPE with an alpha is the NTK-alpha base rope_theta *
 * alpha^(head_dim / (head_dim - 2)) (their rotary embeddings'
 * ntk_alpha); the MoE model's experts and shared MLP of intermediate_size,
 * every layer a MoE layer, softmax top-k renormalized. */
kvcal_status cfg_read_hunyuan(const cfg_obj *top, kvcal_model_config *c)
{
    const int moe = !strcmp(c->model_type, "hunyuan_v1_moe");
    if (!moe && strcmp(c->model_type, "hunyuan_v1_dense"))
        return KVCAL_OK;
    if (c->rope_type == KVCAL_ROPE_DYNAMIC && c->rope_alpha > 0) {
        if (c->head_dim < 3)
            return kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: field \"%shead_dim\" (%d) leaves the NTK-alpha RoPE no "
                "base; fix the field",
                top->name, top->prefix, c->head_dim);
        c->rope_theta *= pow(c->rope_alpha, (double)c->head_dim / (c->head_dim - 2));
        c->rope_type = KVCAL_ROPE_DEFAULT;
        snprintf(c->rope_type_name, sizeof c->rope_type_name, "dynamic (alpha %g)",
                 c->rope_alpha);
    }
    if (!moe)
        return KVCAL_OK;
    kvcal_status s;
    c->num_experts = c->num_experts_per_tok = 1;
    if ((s = cfg_hunyuan_uniform(top, "num_experts", &c->num_experts)) != KVCAL_OK ||
        (s = cfg_hunyuan_uniform(top, "moe_topk", &c->num_experts_per_tok)) != KVCAL_OK)
        return s;
    if (c->num_experts_per_tok > c->num_experts)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"%smoe_topk\" (%d) is above num_experts (%d); fix "
                          "one of them",
                          top->name, top->prefix, c->num_experts_per_tok, c->num_experts);
    c->moe_intermediate_size = c->shared_expert_intermediate_size = c->intermediate_size;
    c->norm_topk_prob = 1;
    c->routed_scaling_factor = 1.0;
    c->moe_groups = c->moe_topk_groups = 1;
    c->decoder_sparse_step = 1;
    return KVCAL_OK;
}

/* IBM Granite's four multipliers (granite, granitemoe; 1 where absent, as
 * the transformers classes' defaults): of the embedding, of each block's
 * output before its residual add, of q k^T (instead of head_dim^-0.5), and
 * the logits' divisor. */
kvcal_status cfg_read_granite(const cfg_obj *top, kvcal_model_config *c)
{
    if (strcmp(c->model_type, "granite") && strcmp(c->model_type, "granitemoe"))
        return KVCAL_OK;
    kvcal_status s;
    c->embedding_multiplier = c->residual_multiplier = c->attention_multiplier = 1.0;
    c->logits_scaling = 1.0;
    if ((s = cfg_double(top, "embedding_multiplier", 0.0, INFINITY,
                        &c->embedding_multiplier, NULL)) != KVCAL_OK ||
        (s = cfg_double(top, "residual_multiplier", 0.0, INFINITY,
                        &c->residual_multiplier, NULL)) != KVCAL_OK ||
        (s = cfg_double(top, "attention_multiplier", 0.0, INFINITY,
                        &c->attention_multiplier, NULL)) != KVCAL_OK ||
        (s = cfg_double(top, "logits_scaling", 0.0, INFINITY, &c->logits_scaling,
                        NULL)) != KVCAL_OK)
        return s;
    return KVCAL_OK;
}

/* Olmo 3's layers (olmo3, Olmo3Config's defaults): sliding_window 4096 in
 * the sliding layers of layer_types (else every layer but each fourth); its
 * sliding layers' RoPE is rope_parameters.sliding_attention's (as saved by
 * transformers 5), else the default of rope_theta: the legacy rope_scaling
 * stretches the full-attention layers alone. kvcal runs a sliding layers'
 * RoPE of the default kind. */
kvcal_status cfg_read_olmo3(const cfg_obj *top, kvcal_model_config *c)
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
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%srope_parameters.sliding_attention.", top->prefix);
    cfg_obj sl = {cJSON_IsObject(params)
                      ? cJSON_GetObjectItemCaseSensitive(params, "sliding_attention")
                      : NULL,
                  prefix, top->name};
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
kvcal_status cfg_read_smollm3(const cfg_obj *top, kvcal_model_config *c)
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
kvcal_status cfg_read_exaone4(const cfg_obj *top, kvcal_model_config *c)
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
kvcal_status cfg_read_ernie45(const cfg_obj *top, kvcal_model_config *c)
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
kvcal_status cfg_read_glm4v_text(const cfg_obj *top, kvcal_model_config *c)
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
kvcal_status cfg_read_rotary_dim(const cfg_obj *top, kvcal_model_config *c)
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
kvcal_status cfg_query_scaling(const cfg_obj *top, kvcal_model_config *c)
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
double rms_norm_eps_default(const char *t)
{
    static const char *const eps_1e5[] = {
        "mixtral",         "phi3",        "glm4_moe",       "glm4v_moe_text",
        "glm4_moe_lite",   "glm_moe_dsa", "gpt_oss",        "ministral3",
        "llama4_text",     "qwen2_vl",    "qwen2_vl_text",  "qwen2_5_vl",
        "qwen2_5_vl_text", "glm4v_text",  "ernie4_5_moe",   "exaone4",
        "olmo2",           "olmo3",       "hunyuan_v1_moe", "hunyuan_v1_dense"};
    if (!strcmp(t, "glm4")) /* Glm4Config's */
        return 1.5625e-07;
    return cfg_in_list(t, eps_1e5, sizeof eps_1e5 / sizeof *eps_1e5) ? 1e-5 : 1e-6;
}
