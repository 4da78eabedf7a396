/* tests/test_model_config.c: config.json fields against what transformers
 * derives (tests/fixtures/configs/expected.json, written by
 * tests/make_config_fixtures.py), in the published (4.x) and the
 * transformers 5 layout; and the error of every malformed config. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json_file.h"
#include "io/checkpoint/model_config.h"
#include "tests/test_util.h"

#define CONFIGS "tests/fixtures/configs/"

static kvcal_status parse_text(const char *text, kvcal_model_config *c)
{
    return kvcal_model_config_parse(text, strlen(text), "config.json", c);
}

static const char *rope_name(kvcal_rope_type t)
{
    static const char *const names[] = {"default", "linear", "llama3", "dynamic", "yarn"};
    return (unsigned)t < 5 ? names[t] : "other";
}

static int expect_int(const cJSON *e, const char *key, int got)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(e, key);
    int ok = cJSON_IsNumber(it) && it->valuedouble == got;
    if (!ok)
        fprintf(stderr, "\n  %s: got %d, transformers says %g\n", key, got,
                it ? it->valuedouble : -1.0);
    return ok;
}

static int expect_double(const cJSON *e, const char *key, double got)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(e, key);
    int ok = cJSON_IsNumber(it) && it->valuedouble == got;
    if (!ok)
        fprintf(stderr, "\n  %s: got %.17g\n", key, got);
    return ok;
}

static void check_against_transformers(const char *file, const cJSON *e)
{
    kvcal_model_config c;
    kvcal_status s = kvcal_model_config_load(file, &c);
    if (s != KVCAL_OK)
        fprintf(stderr, "\n  %s\n", kvcal_last_error());
    CU_ASSERT_EQUAL_FATAL(s, KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(
        c.model_type, cJSON_GetObjectItemCaseSensitive(e, "model_type")->valuestring);
    CU_ASSERT(expect_int(e, "num_layers", c.num_layers));
    CU_ASSERT(expect_int(e, "hidden_size", c.hidden_size));
    CU_ASSERT(expect_int(e, "num_attention_heads", c.num_attention_heads));
    CU_ASSERT(expect_int(e, "num_kv_heads", c.num_kv_heads));
    CU_ASSERT(expect_int(e, "head_dim", c.head_dim));
    CU_ASSERT(expect_int(e, "intermediate_size", c.intermediate_size));
    CU_ASSERT(expect_int(e, "vocab_size", c.vocab_size));
    CU_ASSERT(expect_int(e, "max_position_embeddings", c.max_position_embeddings));
    CU_ASSERT(expect_int(e, "sliding_window", c.sliding_window));
    CU_ASSERT(expect_int(e, "tie_word_embeddings", c.tie_word_embeddings));
    CU_ASSERT(expect_int(e, "rope_original_max_position", c.rope_original_max_position));
    CU_ASSERT(expect_double(e, "rms_norm_eps", c.rms_norm_eps));
    CU_ASSERT(expect_double(e, "rope_theta", c.rope_theta));
    CU_ASSERT(expect_double(e, "rope_factor", c.rope_factor));
    CU_ASSERT(expect_double(e, "rope_low_freq_factor", c.rope_low_freq_factor));
    CU_ASSERT(expect_double(e, "rope_high_freq_factor", c.rope_high_freq_factor));
    const char *rope = cJSON_GetObjectItemCaseSensitive(e, "rope_type")->valuestring;
    CU_ASSERT_STRING_EQUAL(rope_name(c.rope_type), rope);
    CU_ASSERT_STRING_EQUAL(c.rope_type_name, rope);
    CU_ASSERT_EQUAL(c.partial_rotary_factor, 1.0);
    CU_ASSERT_STRING_EQUAL(c.torch_dtype,
                           strstr(file, "llama2") ? "float16" : "bfloat16");
}

static void model_config_matches_transformers_in_both_layouts(void)
{
    cJSON *expected = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(CONFIGS "expected.json", &expected), KVCAL_OK);
    int n = 0;
    for (const cJSON *e = expected->child; e; e = e->next, n++) {
        char path[256];
        snprintf(path, sizeof path, CONFIGS "%s.json", e->string);
        check_against_transformers(path, e);
        snprintf(path, sizeof path, CONFIGS "%s.v5.json", e->string);
        check_against_transformers(path, e);
    }
    CU_ASSERT(n >= 8);
    cJSON_Delete(expected);
}

static void model_config_sets_architecture_features(void)
{
    static const char *const files[] = {"llama3.1-8b", "mistral-7b-v0.3", "qwen2-7b",
                                        "qwen3-0.6b"};
    static const int bias[] = {0, 0, 1, 0}, qk_norm[] = {0, 0, 0, 1};
    static const char *const arch[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                       "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
    for (int i = 0; i < 4; i++) {
        for (int v5 = 0; v5 < 2; v5++) {
            char path[256];
            kvcal_model_config c;
            snprintf(path, sizeof path, CONFIGS "%s%s.json", files[i], v5 ? ".v5" : "");
            CU_ASSERT_EQUAL_FATAL(kvcal_model_config_load(path, &c), KVCAL_OK);
            CU_ASSERT_EQUAL(c.attention_bias, bias[i]);
            CU_ASSERT_EQUAL(c.qk_norm, qk_norm[i]);
            CU_ASSERT_STRING_EQUAL(c.architecture, arch[i]);
            CU_ASSERT_EQUAL(c.has_quantization_config, 0);
        }
    }
    kvcal_model_config c;
    CU_ASSERT_EQUAL(
        parse_text(
            "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
            " \"num_attention_heads\": 4, \"attention_bias\": true}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.attention_bias, 1);
    CU_ASSERT_EQUAL(
        parse_text(
            "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
            " \"num_attention_heads\": 4, \"num_key_value_heads\": 4,"
            " \"attention_bias\": true}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.attention_bias, 1);
    CU_ASSERT_EQUAL(c.qk_norm, 1);
    CU_ASSERT_EQUAL(
        parse_text(
            "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
            " \"num_attention_heads\": 4, \"num_key_value_heads\": 4,"
            " \"sliding_window\": 16, \"use_sliding_window\": true}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.attention_bias, 1);
    CU_ASSERT_EQUAL(c.sliding_window, 16);
}

/* DeepSeek-V2-Lite, V3, Kimi K2 and GLM-4.7-Flash as published (GLM-4.7-Flash
 * also as transformers 5 saves it, with mlp_layer_types): the query's LoRA (null in
 * V2-Lite), the experts with DeepseekV2Config's and DeepseekV3Config's
 * defaults where the file leaves them out, the cache's shape (one entry of
 * kv_lora_rank + qk_rope_head_dim), yarn's mscale_all_dim; moe_layer_freq's
 * dense layers and the routing methods transformers does not run. */
static void model_config_reads_deepseek_mla_and_grouped_experts(void)
{
    static const struct {
        const char *file;
        int q_lora, experts, top_k, groups, open, group_max, sigmoid, dense, shared;
        double scale, mscale_all_dim;
    } cases[] = {{"deepseek-v2-lite", 0, 64, 6, 1, 1, 1, 0, 1, 2 * 1408, 1.0, 0.707},
                 {"deepseek-v3", 1536, 256, 8, 8, 4, 0, 1, 3, 2048, 2.5, 1.0},
                 {"kimi-k2", 1536, 384, 8, 1, 1, 0, 1, 1, 2048, 2.5, 1.0},
                 {"glm-4.7-flash", 768, 64, 4, 1, 1, 0, 1, 1, 1536, 1.8, 0.0},
                 {"glm-4.7-flash.v5", 768, 64, 4, 1, 1, 0, 1, 1, 1536, 1.8, 0.0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256];
        kvcal_model_config c;
        snprintf(path, sizeof path, CONFIGS "kv_cache/%s.json", cases[i].file);
        CU_ASSERT_EQUAL_FATAL(kvcal_model_config_load(path, &c), KVCAL_OK);
        CU_ASSERT_EQUAL(c.kv_layout, KVCAL_KV_MLA);
        CU_ASSERT_EQUAL(c.q_lora_rank, cases[i].q_lora);
        CU_ASSERT_EQUAL(c.num_experts, cases[i].experts);
        CU_ASSERT_EQUAL(c.num_experts_per_tok, cases[i].top_k);
        CU_ASSERT_EQUAL(c.moe_groups, cases[i].groups);
        CU_ASSERT_EQUAL(c.moe_topk_groups, cases[i].open);
        CU_ASSERT_EQUAL(c.moe_group_max, cases[i].group_max);
        CU_ASSERT_EQUAL(c.moe_sigmoid, cases[i].sigmoid);
        CU_ASSERT_EQUAL(c.dense_layers, cases[i].dense);
        CU_ASSERT_EQUAL(c.shared_expert_intermediate_size, cases[i].shared);
        CU_ASSERT_DOUBLE_EQUAL(c.routed_scaling_factor, cases[i].scale, 0.0);
        CU_ASSERT_DOUBLE_EQUAL(c.rope_mscale_all_dim, cases[i].mscale_all_dim, 0.0);
        CU_ASSERT_EQUAL(kvcal_model_config_cache_kv_heads(&c), 1);
        CU_ASSERT_EQUAL(kvcal_model_config_cache_head_dim(&c), 576);
        for (int l = 0; l < c.num_layers; l++)
            CU_ASSERT_EQUAL((c.layer_dense[l / 8] >> (l % 8)) & 1, l < cases[i].dense);
    }
    const char *ds = "{\"model_type\": \"deepseek_v2\", \"num_hidden_layers\": 6, "
                     "\"hidden_size\": 64, \"num_attention_heads\": 4, \"kv_lora_rank\": "
                     "32, \"qk_rope_head_dim\": 16, \"num_experts_per_tok\": 2, %s}";
    char text[512];
    kvcal_model_config c;
    /* vLLM's rule: MoE where l >= first_k_dense_replace and l % freq == 0 */
    snprintf(text, sizeof text, ds,
             "\"first_k_dense_replace\": 1, \"moe_layer_freq\": 2");
    CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
    for (int l = 0; l < 6; l++)
        CU_ASSERT_EQUAL((c.layer_dense[0] >> l) & 1, !(l >= 1 && l % 2 == 0));
    snprintf(
        text, sizeof text, ds,
        "\"topk_method\": \"group_limited_greedy\", \"n_group\": 4, \"topk_group\": 2");
    CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
    CU_ASSERT(c.moe_groups == 4 && c.moe_topk_groups == 2 && c.moe_group_max);
    snprintf(text, sizeof text, ds, "\"n_group\": 4, \"topk_group\": 2");
    CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
    CU_ASSERT(c.moe_groups == 1 && c.moe_topk_groups == 1); /* greedy: no groups */
    snprintf(text, sizeof text, ds, "\"topk_method\": \"noaux_tc\"");
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "topk_method \"noaux_tc\""));
    snprintf(text, sizeof text, ds, "\"n_routed_experts\": null");
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "n_routed_experts null"));
}

/* DeepSeek-V3.2 and GLM-5 (DeepSeek Sparse Attention): index_topk (2048 by
 * default), DeepseekV32Config's and GlmMoeDsaConfig's defaults, and the
 * layer plan transformers derives from first_k_dense_replace, which an
 * mlp_layer_types of the file must repeat. */
static void model_config_reads_deepseek_sparse_attention(void)
{
    const char *dsa =
        "{\"model_type\": \"%s\", \"num_hidden_layers\": 5, "
        "\"hidden_size\": 64, \"num_attention_heads\": 4, \"kv_lora_rank\": "
        "32, \"qk_rope_head_dim\": 16 %s}";
    char text[512];
    kvcal_model_config c;
    snprintf(text, sizeof text, dsa, "deepseek_v32", "");
    CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
    CU_ASSERT(c.index_topk == 2048 && c.q_lora_rank == 1536 && c.moe_groups == 8 &&
              c.moe_topk_groups == 4 && c.num_experts == 256 && c.dense_layers == 3);
    CU_ASSERT_EQUAL(c.layer_dense[0], 0x7);
    snprintf(text, sizeof text, dsa, "glm_moe_dsa",
             ", \"index_topk\": 512, \"first_k_dense_replace\": 1");
    CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
    CU_ASSERT(c.index_topk == 512 && c.q_lora_rank == 2048 && c.moe_groups == 1 &&
              c.moe_sigmoid && c.dense_layers == 1 && c.layer_dense[0] == 0x1);
    snprintf(text, sizeof text, dsa, "glm_moe_dsa",
             ", \"mlp_layer_types\": [\"dense\", \"sparse\", \"sparse\", \"sparse\", "
             "\"sparse\"]");
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(),
                                  "layer 1 is sparse in transformers' plan "
                                  "(mlp_layer_types) but dense in vLLM's and sglang's "
                                  "(first_k_dense_replace 3)"));
    snprintf(text, sizeof text, dsa, "deepseek_v32", ", \"index_topk\": 0");
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "\"index_topk\""));
    /* the indexer's heads, which kvcal does not run, are checked all the same */
    snprintf(text, sizeof text, dsa, "deepseek_v32", ", \"index_n_heads\": 64");
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_OK);
    snprintf(text, sizeof text, dsa, "glm_moe_dsa", ", \"index_n_heads\": \"32\"");
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("config.json: field \"index_n_heads\": expected an "
                                   "integer in [1, 65536], found a string \"32\""));
    snprintf(text, sizeof text, dsa, "deepseek_v32", ", \"index_n_heads\": 0");
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("field \"index_n_heads\": expected an integer in "
                                   "[1, 65536], found 0"));
}

/* GLM-4.7-Flash's layer plan: transformers' mlp_layer_types (by default the
 * first layer dense), which vLLM's and sglang's first_k_dense_replace (and
 * vLLM's moe_layer_freq) must repeat; a config where they differ is refused
 * naming the first layer they differ on. */
static void model_config_reads_glm4_moe_lite_layer_plan(void)
{
    const char *lite =
        "{\"model_type\": \"glm4_moe_lite\", \"num_hidden_layers\": 4, "
        "\"hidden_size\": 64, \"num_attention_heads\": 4, \"kv_lora_rank\": "
        "32, \"qk_rope_head_dim\": 16 %s}";
    static const struct {
        const char *fields;
        unsigned dense; /* bit l: layer l dense; ~0u: refused */
        const char *error;
    } cases[] = {
        {"", 0x1, NULL},
        {", \"first_k_dense_replace\": 1", 0x1, NULL},
        {", \"mlp_layer_types\": [\"dense\", \"dense\", \"sparse\", \"sparse\"]", 0x3,
         NULL},
        {", \"mlp_layer_types\": [\"dense\", \"dense\", \"sparse\", \"sparse\"], "
         "\"first_k_dense_replace\": 2",
         0x3, NULL},
        {", \"mlp_layer_types\": [\"dense\", \"dense\", \"sparse\", \"sparse\"], "
         "\"first_k_dense_replace\": 1",
         ~0u,
         "layer 1 is dense in transformers' plan (mlp_layer_types) but sparse in "
         "vLLM's and sglang's (first_k_dense_replace 1)"},
        {", \"first_k_dense_replace\": 3", ~0u,
         "layer 1 is sparse in transformers' plan (no mlp_layer_types: the first layer "
         "dense) but dense in vLLM's"},
        {", \"moe_layer_freq\": 2", ~0u, "with moe_layer_freq 2 is not supported"},
        {", \"mlp_layer_types\": [\"dense\", \"moe\", \"sparse\", \"sparse\"]", ~0u,
         "field \"mlp_layer_types[1]\""},
        {", \"mlp_layer_types\": [\"dense\", \"sparse\"]", ~0u,
         "\"mlp_layer_types\" has 2 entries but num_hidden_layers is 4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        kvcal_model_config c;
        snprintf(text, sizeof text, lite, cases[i].fields);
        const kvcal_status st = parse_text(text, &c);
        if (cases[i].error) {
            CU_ASSERT_NOT_EQUAL(st, KVCAL_OK);
            CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), cases[i].error));
            if (!strstr(kvcal_last_error(), cases[i].error))
                fprintf(stderr, "\n%s\n", kvcal_last_error());
            continue;
        }
        CU_ASSERT_EQUAL_FATAL(st, KVCAL_OK);
        CU_ASSERT(c.moe_sigmoid && c.num_experts == 64 && c.num_experts_per_tok == 4);
        CU_ASSERT_EQUAL(c.layer_dense[0], cases[i].dense);
        CU_ASSERT_EQUAL(c.dense_layers,
                        (int)(cases[i].dense & 1) + (int)(cases[i].dense >> 1));
    }
}

static void model_config_reads_quantization_and_kv_cache_scheme(void)
{
    kvcal_model_config c;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_config_load(CONFIGS "llama3.1-8b-fp8kv.json", &c),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(c.has_quantization_config, 1);
    CU_ASSERT_EQUAL(c.has_kv_cache_scheme, 1);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_config_load(CONFIGS "llama3.1-8b-fp8kv.v5.json", &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.has_kv_cache_scheme, 1);
    CU_ASSERT_EQUAL(
        parse_text(
            "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
            " \"num_attention_heads\": 4, \"quantization_config\": {\"quant_method\": "
            "\"fp8\","
            " \"kv_cache_scheme\": null}}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.has_quantization_config, 1);
    CU_ASSERT_EQUAL(c.has_kv_cache_scheme, 0);
}

/* A config.json in the layout of the released gpt-oss-20b (transformers
 * 4.55's, top-level rope_scaling), and one with the fields GptOssConfig
 * defaults left out. */
static void model_config_reads_gpt_oss_with_transformers_defaults(void)
{
    char text[4096], types[1024] = "";
    for (int i = 0; i < 24; i++)
        snprintf(types + strlen(types), sizeof types - strlen(types), "%s\"%s\"",
                 i ? ", " : "", i % 2 ? "full_attention" : "sliding_attention");
    snprintf(text, sizeof text,
             "{\"architectures\": [\"GptOssForCausalLM\"], \"attention_bias\": true, "
             "\"experts_per_token\": 4, \"head_dim\": 64, \"hidden_size\": 2880, "
             "\"initial_context_length\": 4096, \"intermediate_size\": 2880, "
             "\"layer_types\": [%s], \"max_position_embeddings\": 131072, "
             "\"model_type\": \"gpt_oss\", \"num_attention_heads\": 64, "
             "\"num_experts_per_tok\": 4, \"num_hidden_layers\": 24, "
             "\"num_key_value_heads\": 8, \"num_local_experts\": 32, "
             "\"quantization_config\": {\"modules_to_not_convert\": "
             "[\"model.layers.*.self_attn\", \"model.layers.*.mlp.router\", "
             "\"model.embed_tokens\", \"lm_head\"], \"quant_method\": \"mxfp4\"}, "
             "\"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"beta_fast\": 32.0, "
             "\"beta_slow\": 1.0, \"factor\": 32.0, "
             "\"original_max_position_embeddings\": 4096, \"rope_type\": \"yarn\", "
             "\"truncate\": false}, \"rope_theta\": 150000, \"sliding_window\": 128, "
             "\"swiglu_limit\": 7.0, \"tie_word_embeddings\": false, "
             "\"vocab_size\": 201088}",
             types);
    kvcal_model_config c;
    CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.num_experts, 32);
    CU_ASSERT_EQUAL(c.num_experts_per_tok, 4);
    CU_ASSERT_EQUAL(c.moe_intermediate_size, 2880);
    CU_ASSERT_EQUAL(c.norm_topk_prob, 1);
    CU_ASSERT_EQUAL(c.shared_expert_intermediate_size, 0);
    CU_ASSERT_EQUAL(c.dense_layers, 0);
    CU_ASSERT_EQUAL(c.sliding_window, 128);
    CU_ASSERT_EQUAL(c.sliding_layers, 12);
    CU_ASSERT_EQUAL(c.kv_layers, 24);
    CU_ASSERT_EQUAL(c.kv_layout_known, 1);
    CU_ASSERT_EQUAL((c.layer_sliding[0] >> 0) & 1, 1);
    CU_ASSERT_EQUAL((c.layer_sliding[0] >> 1) & 1, 0);
    CU_ASSERT_EQUAL(c.head_dim, 64);
    CU_ASSERT_EQUAL(c.attention_bias, 1);
    CU_ASSERT_EQUAL(c.rope_type, KVCAL_ROPE_YARN);
    CU_ASSERT_EQUAL(c.rope_truncate, 0);
    CU_ASSERT_EQUAL(c.rope_original_max_position, 4096);
    CU_ASSERT_EQUAL(c.rope_factor, 32.0);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_attention_factor, 0.1 * log(32.0) + 1.0, 1e-12);
    CU_ASSERT_EQUAL(c.rope_theta, 150000.0);
    CU_ASSERT_EQUAL(c.swiglu_limit, 7.0);
    CU_ASSERT_EQUAL(c.swiglu_alpha, 1.702);
    CU_ASSERT_STRING_EQUAL(c.quant_method, "mxfp4");
    /* GptOssConfig's defaults: every other layer slides from layer 0, over 128
     * tokens; the clamp 7 and 1.702; 128 experts, top-4; yarn, 32 x 4096,
     * not truncated, from base 150000 */
    CU_ASSERT_EQUAL_FATAL(parse_text("{\"model_type\": \"gpt_oss\", "
                                     "\"num_hidden_layers\": 3, \"hidden_size\": 64, "
                                     "\"num_attention_heads\": 4, \"head_dim\": 16}",
                                     &c),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(c.sliding_window, 128);
    CU_ASSERT_EQUAL(c.sliding_layers, 2);
    CU_ASSERT_EQUAL(c.layer_sliding[0], 5);
    CU_ASSERT_EQUAL(c.swiglu_limit, 7.0);
    CU_ASSERT_EQUAL(c.num_experts, 128);
    CU_ASSERT_EQUAL(c.num_experts_per_tok, 4);
    CU_ASSERT_EQUAL(c.swiglu_alpha, 1.702);
    CU_ASSERT_EQUAL(c.rope_type, KVCAL_ROPE_YARN);
    CU_ASSERT_EQUAL(c.rope_factor, 32.0);
    CU_ASSERT_EQUAL(c.rope_original_max_position, 4096);
    CU_ASSERT_EQUAL(c.rope_truncate, 0);
    CU_ASSERT_EQUAL(c.rope_beta_fast, 32.0);
    CU_ASSERT_EQUAL(c.rope_theta, 150000.0);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_attention_factor, 0.1 * log(32.0) + 1.0, 1e-12);
    CU_ASSERT_STRING_EQUAL(c.quant_method, "");
}

/* Multimodal configs: the language model's fields in text_config, those a
 * released config leaves out taken from its class as transformers 5.25
 * builds it (Gemma3TextConfig: rope_theta 1e6 for the global layers and
 * 1e4 for the sliding ones, every 6th layer global, vocabulary 262208,
 * context 131072, the head tied; Qwen3VLTextConfig: rope_theta 5e5, 32 kv
 * heads of 128, context 128000); the wrapper's tie_word_embeddings wins
 * over text_config's. */
static void model_config_reads_a_multimodal_models_language_model(void)
{
    kvcal_model_config c;
    CU_ASSERT_EQUAL_FATAL(
        parse_text("{\"architectures\": [\"Gemma3ForConditionalGeneration\"], "
                   "\"model_type\": \"gemma3\", \"mm_tokens_per_image\": 256, "
                   "\"text_config\": {\"head_dim\": 128, \"hidden_size\": 5376, "
                   "\"intermediate_size\": 21504, \"model_type\": \"gemma3_text\", "
                   "\"num_attention_heads\": 32, \"num_hidden_layers\": 62, "
                   "\"num_key_value_heads\": 16, \"query_pre_attn_scalar\": 168, "
                   "\"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}, "
                   "\"sliding_window\": 1024}, \"torch_dtype\": \"bfloat16\", "
                   "\"vision_config\": {\"model_type\": \"siglip_vision_model\"}}",
                   &c),
        KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(c.architecture, "Gemma3ForConditionalGeneration");
    CU_ASSERT_STRING_EQUAL(c.model_type, "gemma3_text");
    CU_ASSERT_EQUAL(c.text_config, 1);
    CU_ASSERT_EQUAL(c.num_layers, 62);
    CU_ASSERT_EQUAL(c.head_dim, 128);
    CU_ASSERT_EQUAL(c.vocab_size, 262208);
    CU_ASSERT_EQUAL(c.max_position_embeddings, 131072);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 1000000.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_sliding_theta, 10000.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(c.query_pre_attn_scalar, 168.0, 0);
    CU_ASSERT_EQUAL(c.tie_word_embeddings, 1);
    CU_ASSERT_EQUAL(c.sliding_layers, 52);
    CU_ASSERT_EQUAL(c.sliding_window, 1024);
    CU_ASSERT_STRING_EQUAL(c.torch_dtype, "bfloat16");
    CU_ASSERT_EQUAL_FATAL(
        parse_text("{\"architectures\": [\"Qwen3VLForConditionalGeneration\"], "
                   "\"model_type\": \"qwen3_vl\", \"tie_word_embeddings\": false, "
                   "\"text_config\": {\"hidden_size\": 4096, \"intermediate_size\": "
                   "12288, \"model_type\": \"qwen3_vl_text\", \"num_attention_heads\": "
                   "32, \"num_hidden_layers\": 36, \"tie_word_embeddings\": true}, "
                   "\"vision_config\": {\"depth\": 27}}",
                   &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.num_kv_heads, 32);
    CU_ASSERT_EQUAL(c.head_dim, 128);
    CU_ASSERT_EQUAL(c.qk_norm, 1);
    CU_ASSERT_EQUAL(c.max_position_embeddings, 128000);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 500000.0, 0);
    CU_ASSERT_EQUAL(c.tie_word_embeddings, 0);
    /* Qwen3-VL-MoE: transformers renormalizes the top-k whatever
     * norm_topk_prob says, vLLM follows it: a false one is refused */
    static const char moe[] =
        "{\"architectures\": [\"Qwen3VLMoeForConditionalGeneration\"], "
        "\"model_type\": \"qwen3_vl_moe\", \"text_config\": {\"hidden_size\": 2048, "
        "\"model_type\": \"qwen3_vl_moe_text\", \"num_attention_heads\": 32, "
        "\"num_hidden_layers\": 48, \"num_experts\": 128, \"num_experts_per_tok\": 8, "
        "\"moe_intermediate_size\": 768, \"norm_topk_prob\": %s}, "
        "\"vision_config\": {\"depth\": 27}}";
    char text[1024];
    snprintf(text, sizeof text, moe, "true");
    CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.num_experts, 128);
    CU_ASSERT_EQUAL(c.norm_topk_prob, 1);
    CU_ASSERT_EQUAL(c.qk_norm, 1);
    CU_ASSERT_EQUAL(c.num_kv_heads, 32);
    snprintf(text, sizeof text, moe, "false");
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("text_config.norm_topk_prob\" is false, but "
                                   "transformers' Qwen3-VL-MoE renormalizes"));
}

/* Qwen3.5-MoE and Qwen3-Next: their linear-attention layers (layer_types,
 * or Qwen3-Next's full_attention_interval, 4 when absent), the gated
 * delta-net's sizes and the class defaults (values transformers 5.25's
 * Qwen3_5MoeTextConfig and Qwen3NextConfig print); what vLLM and
 * transformers compute apart is refused. */
static void model_config_reads_a_hybrid_models_linear_attention_layers(void)
{
    kvcal_model_config c;
    static const char qwen3_5_moe[] =
        "{\"architectures\": [\"Qwen3_5MoeForConditionalGeneration\"], "
        "\"model_type\": \"qwen3_5_moe\", \"text_config\": {\"hidden_size\": 2048, "
        "\"model_type\": \"qwen3_5_moe_text\", \"num_attention_heads\": 16, "
        "\"num_key_value_heads\": 2, \"num_hidden_layers\": 8, \"layer_types\": "
        "[\"linear_attention\", \"linear_attention\", \"linear_attention\", "
        "\"full_attention\", \"linear_attention\", \"linear_attention\", "
        "\"linear_attention\", \"full_attention\"], \"rope_parameters\": "
        "{\"rope_type\": \"default\", \"rope_theta\": 10000000, "
        "\"mrope_section\": [11, 11, 10], \"mrope_interleaved\": true}%s}, "
        "\"vision_config\": {\"depth\": 27}}";
    char text[2048];
    snprintf(text, sizeof text, qwen3_5_moe, "");
    CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(c.model_type, "qwen3_5_moe_text");
    CU_ASSERT_EQUAL(c.kv_layers, 2);
    CU_ASSERT_STRING_EQUAL(c.no_kv_layer_types, "linear_attention");
    for (int l = 0; l < 8; l++)
        CU_ASSERT_EQUAL(kvcal_model_config_layer_caches(&c, l), l == 3 || l == 7);
    CU_ASSERT_EQUAL(c.linear_num_key_heads, 16);
    CU_ASSERT_EQUAL(c.linear_num_value_heads, 32);
    CU_ASSERT_EQUAL(c.linear_key_head_dim, 128);
    CU_ASSERT_EQUAL(c.linear_value_head_dim, 128);
    CU_ASSERT_EQUAL(c.linear_conv_kernel_dim, 4);
    CU_ASSERT_EQUAL(c.head_dim, 256);
    CU_ASSERT_EQUAL(c.qk_norm, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.partial_rotary_factor, 0.25, 0);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 10000000.0, 0);
    CU_ASSERT_EQUAL(c.vocab_size, 248320);
    CU_ASSERT_EQUAL(c.num_experts, 256);
    CU_ASSERT_EQUAL(c.num_experts_per_tok, 8);
    CU_ASSERT_EQUAL(c.moe_intermediate_size, 512);
    CU_ASSERT_EQUAL(c.intermediate_size, 512);
    CU_ASSERT_EQUAL(c.shared_expert_intermediate_size, 512);
    CU_ASSERT_EQUAL(c.norm_topk_prob, 1);
    CU_ASSERT_EQUAL(kvcal_model_config_kv_values_per_token(&c), 2 * 2 * 2 * 256);
    static const struct {
        const char *field, *error;
    } refused[] = {
        {", \"norm_topk_prob\": false", "transformers' Qwen3.5-MoE renormalizes"},
        {", \"attn_output_gate\": false", "text_config.attn_output_gate\" is false"},
        {", \"attention_bias\": true", "text_config.attention_bias\" is true"},
        {", \"linear_num_value_heads\": 24", "is not a multiple of"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(text, sizeof text, qwen3_5_moe, refused[i].field);
        CU_ASSERT_NOT_EQUAL(parse_text(text, &c), KVCAL_OK);
        CU_ASSERT(kvcal_test_error_has(refused[i].error));
    }
    /* Qwen3-Next without layer_types: every fourth layer attends */
    CU_ASSERT_EQUAL_FATAL(
        parse_text("{\"architectures\": [\"Qwen3NextForCausalLM\"], \"model_type\": "
                   "\"qwen3_next\", \"hidden_size\": 2048, \"num_attention_heads\": 16, "
                   "\"num_key_value_heads\": 2, \"num_hidden_layers\": 8, "
                   "\"mlp_only_layers\": [5]}",
                   &c),
        KVCAL_OK);
    for (int l = 0; l < 8; l++)
        CU_ASSERT_EQUAL(kvcal_model_config_layer_caches(&c, l), l == 3 || l == 7);
    CU_ASSERT_EQUAL(c.num_experts, 512);
    CU_ASSERT_EQUAL(c.num_experts_per_tok, 10);
    CU_ASSERT_EQUAL(c.dense_layers, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.partial_rotary_factor, 0.25, 0);
}

static void model_config_defaults_absent_and_null_fields(void)
{
    kvcal_model_config c;
    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            "{\"model_type\": \"llama\", \"num_hidden_layers\": 3, \"hidden_size\": 96,"
            " \"num_attention_heads\": 6, \"head_dim\": null, \"num_key_value_heads\": "
            "null,"
            " \"rope_scaling\": null, \"torch_dtype\": \"float32\"}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.head_dim, 16);
    CU_ASSERT_EQUAL(c.num_kv_heads, 6);
    CU_ASSERT_EQUAL(c.rope_theta, 10000.0);
    CU_ASSERT_EQUAL(c.rope_type, KVCAL_ROPE_DEFAULT);
    CU_ASSERT_EQUAL(c.rms_norm_eps, 1e-6);
    CU_ASSERT_EQUAL(c.partial_rotary_factor, 1.0);
    CU_ASSERT_STRING_EQUAL(c.torch_dtype, "float32");
    CU_ASSERT_STRING_EQUAL(c.architecture, "");
    CU_ASSERT_EQUAL(c.sliding_window, 0);
    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 3, \"hidden_size\": 96,"
            " \"num_attention_heads\": 6, \"num_key_value_heads\": 2}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.head_dim, 128);
    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            "{\"model_type\": \"mistral\", \"num_hidden_layers\": 3, \"hidden_size\": 96,"
            " \"num_attention_heads\": 6, \"num_key_value_heads\": 2, \"head_dim\": 32}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.head_dim, 32);
    CU_ASSERT_EQUAL(c.sliding_window, 4096);
}

/* transformers fills an absent num_key_value_heads from the config class's
 * default: MistralConfig 8, Qwen2Config and Qwen3Config 32, LlamaConfig
 * num_attention_heads; null means num_attention_heads. */
static void model_config_defaults_absent_kv_heads_per_model_type(void)
{
    static const struct {
        const char *model_type;
        int heads;
        int kv_heads;
    } cases[] = {
        {"llama", 16, 16}, {"mistral", 16, 8}, {"qwen2", 64, 32}, {"qwen3", 64, 32}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        kvcal_model_config c;
        snprintf(text, sizeof text,
                 "{\"model_type\": \"%s\", \"num_hidden_layers\": 2, \"hidden_size\": "
                 "1024, \"num_attention_heads\": %d}",
                 cases[i].model_type, cases[i].heads);
        CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
        CU_ASSERT_EQUAL(c.num_kv_heads, cases[i].kv_heads);
        snprintf(text, sizeof text,
                 "{\"model_type\": \"%s\", \"num_hidden_layers\": 2, \"hidden_size\": "
                 "1024, \"num_attention_heads\": %d, \"num_key_value_heads\": null}",
                 cases[i].model_type, cases[i].heads);
        CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
        CU_ASSERT_EQUAL(c.num_kv_heads, cases[i].heads);
    }
}

/* Absent max_position_embeddings, vocab_size and intermediate_size take the
 * transformers class defaults (LlamaConfig, MistralConfig, Qwen2Config,
 * Qwen3Config); another model_type leaves them 0 (unknown). */
static void model_config_defaults_absent_sizes_per_model_type(void)
{
    static const struct {
        const char *model_type;
        int context, vocab, intermediate;
    } cases[] = {{"llama", 2048, 32000, 11008},
                 {"mistral", 131072, 32000, 14336},
                 {"qwen2", 32768, 151936, 22016},
                 {"qwen3", 32768, 151936, 22016},
                 {"gemma", 0, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        kvcal_model_config c;
        snprintf(text, sizeof text,
                 "{\"model_type\": \"%s\", \"num_hidden_layers\": 2, \"hidden_size\": "
                 "64, \"num_attention_heads\": 4, \"num_key_value_heads\": 4}",
                 cases[i].model_type);
        CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
        CU_ASSERT_EQUAL(c.max_position_embeddings, cases[i].context);
        CU_ASSERT_EQUAL(c.vocab_size, cases[i].vocab);
        CU_ASSERT_EQUAL(c.intermediate_size, cases[i].intermediate);
    }
}

static void model_config_reads_other_rope_types_and_layer_keyed_parameters(void)
{
    kvcal_model_config c;
    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            "{\"model_type\": \"phi3\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
            " \"num_attention_heads\": 4, \"partial_rotary_factor\": 0.5,"
            " \"rope_scaling\": {\"type\": \"su\", \"short_factor\": [1.0]}}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_type, KVCAL_ROPE_OTHER);
    CU_ASSERT_STRING_EQUAL(c.rope_type_name, "su");
    CU_ASSERT_EQUAL(c.partial_rotary_factor, 0.5);
    /* longrope: the long factors where the context exceeds the original one
     * (what vLLM applies at its default max_model_len), the short ones
     * otherwise; the attention factor derived from the two contexts */
    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            "{\"model_type\": \"phi3\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
            " \"num_attention_heads\": 4, \"max_position_embeddings\": 131072,"
            " \"original_max_position_embeddings\": 4096, \"rope_scaling\": {\"type\":"
            " \"longrope\", \"short_factor\": [1.0, 1.5], \"long_factor\": [2.0, 3.0]}}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_type, KVCAL_ROPE_LONGROPE);
    CU_ASSERT_EQUAL(c.rope_ext_long, 1);
    CU_ASSERT_EQUAL(c.rope_ext_factors, 2);
    CU_ASSERT_EQUAL(c.rope_ext_factor[1], 3.0f);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_attention_factor, sqrt(1 + log(32.0) / log(4096.0)), 1e-12);
    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            "{\"model_type\": \"phi3\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
            " \"num_attention_heads\": 4, \"max_position_embeddings\": 4096,"
            " \"rope_parameters\": {\"rope_type\": \"longrope\", \"short_factor\": [1.5],"
            " \"long_factor\": [2.0], \"original_max_position_embeddings\": 4096,"
            " \"attention_factor\": 1.25}}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_ext_long, 0);
    CU_ASSERT_EQUAL(c.rope_ext_factor[0], 1.5f);
    CU_ASSERT_EQUAL(c.rope_attention_factor, 1.25);
    /* an original context of 1 token: the attention factor's logarithm is
     * 0 (found by the fuzzer; it was inf) */
    CU_ASSERT_EQUAL(
        parse_text(
            "{\"model_type\": \"phi3\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
            " \"num_attention_heads\": 4, \"max_position_embeddings\": 4096,"
            " \"rope_parameters\": {\"rope_type\": \"longrope\", \"short_factor\": [1.5],"
            " \"long_factor\": [2.0], \"original_max_position_embeddings\": 1}}",
            &c),
        KVCAL_ERR_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(
        kvcal_last_error(), "original_max_position_embeddings 1 for rope_type longrope"));
    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            "{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 2, "
            "\"hidden_size\": 64,"
            " \"num_attention_heads\": 4, \"rope_parameters\": {"
            "\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0, "
            "\"rope_theta\": 1e6},"
            " \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1e4}}}",
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_type, KVCAL_ROPE_LINEAR);
    CU_ASSERT_EQUAL(c.rope_factor, 8.0);
    CU_ASSERT_EQUAL(c.rope_theta, 1e6);
    CU_ASSERT_EQUAL(
        parse_text(
            "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
            " \"num_attention_heads\": 4, \"rope_parameters\": {\"rope_type\": "
            "\"linear\"}}",
            &c),
        KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("\"rope_parameters.factor\" is missing"));
    CU_ASSERT_EQUAL(c.num_layers, 0);
}

/* A qwen2 config (max_position_embeddings 128, or as `top` sets it) whose
 * `key` object (rope_scaling or rope_parameters) holds `fields`. */
static kvcal_status parse_yarn(const char *key, const char *fields, const char *top,
                               kvcal_model_config *c)
{
    char text[768];
    snprintf(text, sizeof text,
             "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
             " \"num_attention_heads\": 4, \"num_key_value_heads\": 2%s, \"%s\": {%s}}",
             top ? top : ", \"max_position_embeddings\": 128", key, fields);
    return parse_text(text, c);
}

/* transformers' yarn attention factor for factor 4 (0.1 ln 4 + 1), as its
 * _compute_yarn_parameters returns it (a double). */
#define YARN_ATTENTION_FACTOR_4 1.138629436111989

static void model_config_reads_yarn_in_both_layouts_with_transformers_defaults(void)
{
    static const char *const layouts[][2] = {
        {"rope_scaling", "\"type\": \"yarn\", \"factor\": 4.0, "
                         "\"original_max_position_embeddings\": 32"},
        {"rope_scaling", "\"rope_type\": \"yarn\", \"factor\": 4, "
                         "\"original_max_position_embeddings\": 32"},
        {"rope_parameters",
         "\"rope_type\": \"yarn\", \"type\": \"yarn\", \"factor\": 4.0, "
         "\"original_max_position_embeddings\": 32, \"rope_theta\": 1e6"},
    };
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        kvcal_model_config c;
        CU_ASSERT_EQUAL_FATAL(parse_yarn(layouts[i][0], layouts[i][1], NULL, &c),
                              KVCAL_OK);
        CU_ASSERT_EQUAL(c.rope_type, KVCAL_ROPE_YARN);
        CU_ASSERT_STRING_EQUAL(c.rope_type_name, "yarn");
        CU_ASSERT_EQUAL(c.rope_factor, 4.0);
        CU_ASSERT_EQUAL(c.rope_original_max_position, 32);
        CU_ASSERT_EQUAL(c.rope_beta_fast, 32.0);
        CU_ASSERT_EQUAL(c.rope_beta_slow, 1.0);
        CU_ASSERT_EQUAL(c.rope_truncate, 1);
        CU_ASSERT_EQUAL(c.rope_attention_factor, 0.1 * log(4.0) + 1.0);
        KVCAL_ASSERT_CLOSE(c.rope_attention_factor, YARN_ATTENTION_FACTOR_4, 0, 1e-15);
    }
    /* a published Qwen2.5 yarn config, as written and as transformers 5 saves it */
    for (int v5 = 0; v5 < 2; v5++) {
        kvcal_model_config c;
        CU_ASSERT_EQUAL_FATAL(
            kvcal_model_config_load(v5 ? CONFIGS "qwen2.5-1.5b-yarn.v5.json"
                                       : CONFIGS "qwen2.5-1.5b-yarn.json",
                                    &c),
            KVCAL_OK);
        CU_ASSERT_EQUAL(c.rope_original_max_position, 32768);
        KVCAL_ASSERT_CLOSE(c.rope_attention_factor, YARN_ATTENTION_FACTOR_4, 0, 1e-15);
    }
    /* other rope types: no yarn parameters, cos and sin unscaled */
    kvcal_model_config c;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_config_load(CONFIGS "llama3.1-8b.json", &c),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_attention_factor, 1.0);
    CU_ASSERT_EQUAL(c.rope_beta_fast, 0.0);
    CU_ASSERT_EQUAL(c.rope_truncate, 0);
}

/* What transformers 5 (standardize_rope_params, _compute_yarn_parameters)
 * derives: original_max_position_embeddings from the top level first, then
 * the rope parameters, then max_position_embeddings; a null factor from the
 * two contexts; beta 0 is the default; the attention factor as given, from
 * mscale / mscale_all_dim when both are set, else 0.1 ln(factor) + 1. The
 * mscale value was printed by transformers 5.24 (tolerance 1e-15 relative). */
static void model_config_derives_yarn_parameters_as_transformers(void)
{
    kvcal_model_config c;
    CU_ASSERT_EQUAL_FATAL(
        parse_yarn("rope_scaling", "\"type\": \"yarn\", \"factor\": 2.0", NULL, &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_original_max_position, 128);
    CU_ASSERT_EQUAL_FATAL(parse_yarn("rope_scaling",
                                     "\"type\": \"yarn\", \"factor\": 2.0, "
                                     "\"original_max_position_embeddings\": 32",
                                     ", \"max_position_embeddings\": 128, "
                                     "\"original_max_position_embeddings\": 16",
                                     &c),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_original_max_position, 16);
    CU_ASSERT_EQUAL_FATAL(
        parse_yarn("rope_parameters",
                   "\"rope_type\": \"yarn\", \"factor\": null, "
                   "\"original_max_position_embeddings\": 32, \"beta_fast\": 0, "
                   "\"beta_slow\": null, \"truncate\": false",
                   NULL, &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_factor, 4.0);
    KVCAL_ASSERT_CLOSE(c.rope_attention_factor, YARN_ATTENTION_FACTOR_4, 0, 1e-15);
    CU_ASSERT_EQUAL(c.rope_beta_fast, 32.0);
    CU_ASSERT_EQUAL(c.rope_beta_slow, 1.0);
    CU_ASSERT_EQUAL(c.rope_truncate, 0);
    CU_ASSERT_EQUAL_FATAL(
        parse_yarn("rope_scaling",
                   "\"type\": \"yarn\", \"factor\": 8, \"beta_fast\": 4,"
                   " \"beta_slow\": 0.5, \"attention_factor\": 0.75",
                   NULL, &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_beta_fast, 4.0);
    CU_ASSERT_EQUAL(c.rope_beta_slow, 0.5);
    CU_ASSERT_EQUAL(c.rope_attention_factor, 0.75);
    CU_ASSERT_EQUAL_FATAL(
        parse_yarn("rope_scaling",
                   "\"type\": \"yarn\", \"factor\": 40, \"mscale\": 1.0,"
                   " \"mscale_all_dim\": 0.707",
                   NULL, &c),
        KVCAL_OK);
    KVCAL_ASSERT_CLOSE(c.rope_attention_factor, 1.0857263992561355, 0, 1e-15);
    CU_ASSERT_EQUAL_FATAL(
        parse_yarn("rope_scaling",
                   "\"type\": \"yarn\", \"factor\": 40, \"mscale\": 0.707", NULL, &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_attention_factor, 0.1 * log(40.0) + 1.0);
    CU_ASSERT_EQUAL_FATAL(
        parse_yarn("rope_scaling", "\"type\": \"yarn\", \"factor\": 1", NULL, &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_attention_factor, 1.0);
}

/* Ministral 3's and Devstral 2's released shapes (model_type ministral3):
 * yarn in rope_parameters under both type keys; mscale and mscale_all_dim
 * 1 (factor 1) or mscale_all_dim 0 (get_mscale(factor) alone); the
 * queries' scaling from original_max_position_embeddings where
 * llama_4_scaling_beta is above 0; the class's head_dim 128. */
static void model_config_reads_ministral3_yarn_and_query_scaling(void)
{
    kvcal_model_config c;
    CU_ASSERT_EQUAL_FATAL(
        parse_text("{\"architectures\": [\"Ministral3ForCausalLM\"], \"model_type\": "
                   "\"ministral3\", \"hidden_size\": 256, \"num_attention_heads\": 4, "
                   "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, "
                   "\"rope_parameters\": {\"rope_type\": \"yarn\", \"type\": \"yarn\", "
                   "\"factor\": 64.0, \"beta_fast\": 4.0, \"beta_slow\": 1.0, "
                   "\"mscale\": 1.0, \"mscale_all_dim\": 0.0, "
                   "\"original_max_position_embeddings\": 4096, "
                   "\"llama_4_scaling_beta\": 0.0, \"rope_theta\": 1000000.0}}",
                   &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.head_dim, 128);
    CU_ASSERT_EQUAL(c.rope_type, KVCAL_ROPE_YARN);
    CU_ASSERT_EQUAL(c.rope_attention_factor, 0.1 * log(64.0) + 1.0);
    CU_ASSERT_EQUAL(c.query_scaling_from, 0);
    CU_ASSERT_EQUAL_FATAL(
        parse_text("{\"architectures\": [\"Ministral3ForCausalLM\"], \"model_type\": "
                   "\"ministral3\", \"hidden_size\": 256, \"num_attention_heads\": 4, "
                   "\"num_hidden_layers\": 2, \"rope_parameters\": {\"type\": \"yarn\", "
                   "\"factor\": 16.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0, "
                   "\"original_max_position_embeddings\": 16384, "
                   "\"llama_4_scaling_beta\": 0.1, \"rope_theta\": 1000000.0}}",
                   &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rope_attention_factor, 1.0);
    CU_ASSERT_EQUAL(c.query_scaling_from, 16384);
    /* no rope_parameters: the class's default yarn is not assumed */
    CU_ASSERT_EQUAL(parse_text("{\"architectures\": [\"Ministral3ForCausalLM\"], "
                               "\"model_type\": \"ministral3\", \"hidden_size\": 256, "
                               "\"num_attention_heads\": 4, \"num_hidden_layers\": 2}",
                               &c),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("\"rope_parameters\" is missing"));
}

/* Llama 4 as Scout's and Maverick's configs give it: the language model in
 * text_config, attn_temperature_tuning as early releases wrote it (4),
 * no_rope_layers listed, the top level's rope_scaling of transformers 4;
 * Llama4TextConfig's defaults where fields are absent; and the fields
 * transformers reads apart from vLLM and sglang refused in one line. */
#define LLAMA4_TEXT(fields)                                                              \
    "{\"architectures\": [\"Llama4ForConditionalGeneration\"], \"vision_config\": {}, "  \
    "\"text_config\": {\"model_type\": \"llama4_text\", \"hidden_size\": 5120, "         \
    "\"num_attention_heads\": 40, \"num_hidden_layers\": 4" fields "}}"
static void model_config_reads_llama4_layers_and_defaults(void)
{
    kvcal_model_config c;
    CU_ASSERT_EQUAL_FATAL(
        parse_text(LLAMA4_TEXT(", \"attn_temperature_tuning\": 4, \"no_rope_layers\": "
                               "[1, 0, 1, 1], \"interleave_moe_layer_step\": 2, "
                               "\"moe_layers\": [1, 3], \"intermediate_size\": 8192, "
                               "\"intermediate_size_mlp\": 16384, \"rope_scaling\": "
                               "{\"rope_type\": \"llama3\", \"factor\": 16.0, "
                               "\"low_freq_factor\": 1.0, \"high_freq_factor\": 1.0, "
                               "\"original_max_position_embeddings\": 8192}"),
                   &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.head_dim, 128);
    CU_ASSERT_EQUAL(c.num_kv_heads, 8);
    CU_ASSERT_EQUAL(c.rope_theta, 500000.0);
    CU_ASSERT_EQUAL(c.rope_type, KVCAL_ROPE_LLAMA3);
    CU_ASSERT_EQUAL(c.rms_norm_eps, 1e-5);
    CU_ASSERT_EQUAL(c.qk_norm, 1);
    CU_ASSERT_EQUAL(c.nope_layers, 1);
    CU_ASSERT_EQUAL(c.layer_nope[0], 1u << 1);
    CU_ASSERT_EQUAL(c.layer_dense[0], (1u << 0) | (1u << 2));
    CU_ASSERT_EQUAL(c.num_experts, 16);
    CU_ASSERT_EQUAL(c.num_experts_per_tok, 1);
    CU_ASSERT_EQUAL(c.moe_intermediate_size, 8192);
    CU_ASSERT_EQUAL(c.shared_expert_intermediate_size, 8192);
    CU_ASSERT_EQUAL(c.intermediate_size, 16384);
    CU_ASSERT_EQUAL(c.attention_chunk_size, 8192);
    CU_ASSERT_EQUAL(c.attn_temperature_scale, 0.1);
    CU_ASSERT_EQUAL(c.attn_temperature_floor, 8192.0);
    /* the defaults: every fourth layer without RoPE, every layer MoE; a
     * null chunk size and tuning off */
    CU_ASSERT_EQUAL_FATAL(parse_text(LLAMA4_TEXT(", \"attention_chunk_size\": null, "
                                                 "\"attn_temperature_tuning\": false"),
                                     &c),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(c.layer_nope[0], 1u << 3);
    CU_ASSERT_EQUAL(c.layer_dense[0], 0);
    CU_ASSERT_EQUAL(c.attention_chunk_size, 0);
    CU_ASSERT_EQUAL(c.attn_temperature_scale, 0.0);
    /* moe_layers against the step, layer_types against no_rope_layers */
    CU_ASSERT_EQUAL(parse_text(LLAMA4_TEXT(", \"interleave_moe_layer_step\": 2, "
                                           "\"moe_layers\": [1, 2]"),
                               &c),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("\"text_config.moe_layers\" lists layer 2"));
    CU_ASSERT_EQUAL(
        parse_text(LLAMA4_TEXT(", \"layer_types\": [\"chunked_attention\", "
                               "\"chunked_attention\", \"chunked_attention\", "
                               "\"chunked_attention\"]"),
                   &c),
        KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("\"text_config.layer_types[3]\" is "
                                   "\"chunked_attention\", but layer 3 has no RoPE"));
    CU_ASSERT_EQUAL(parse_text(LLAMA4_TEXT(", \"no_rope_layers\": [1, 2, 1, 1]"), &c),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("\"text_config.no_rope_layers[1]\": expected 0 or 1"));
    CU_ASSERT_EQUAL(parse_text(LLAMA4_TEXT(", \"no_rope_layers\": [1, 1]"), &c),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("\"text_config.no_rope_layers\" has 2 entries but "
                                   "num_hidden_layers is 4"));
    CU_ASSERT_EQUAL(parse_text(LLAMA4_TEXT(", \"attn_temperature_tuning\": \"yes\""), &c),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("\"text_config.attn_temperature_tuning\""));
}

/* Where rms_norm_eps is absent, the transformers config class's default
 * (1e-5 for Mixtral, Phi-3, GLM, gpt-oss, Ministral 3, Llama 4,
 * Qwen2(.5)-VL; 1e-6 for Llama, Qwen2); GLM-4.5V's language model
 * (glm4v_moe_text) reads as GLM-4.5's with its own class's defaults (q/k/v
 * biases, half of each head rotated); GLM-4's and GLM-4V's (dense). */
static void model_config_defaults_follow_each_config_class(void)
{
    static const struct {
        const char *model_type;
        double eps;
    } eps[] = {{"llama", 1e-6}, {"qwen2", 1e-6},   {"mixtral", 1e-5},
               {"phi3", 1e-5},  {"gpt_oss", 1e-5}, {"glm4_moe", 1e-5}};
    kvcal_model_config c;
    for (size_t i = 0; i < sizeof eps / sizeof eps[0]; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "{\"model_type\": \"%s\", \"hidden_size\": 64, "
                 "\"num_attention_heads\": 4, \"num_key_value_heads\": 4, "
                 "\"num_hidden_layers\": 2}",
                 eps[i].model_type);
        CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
        CU_ASSERT_EQUAL(c.rms_norm_eps, eps[i].eps);
    }
    CU_ASSERT_EQUAL_FATAL(
        parse_text("{\"architectures\": [\"Glm4vMoeForConditionalGeneration\"], "
                   "\"vision_config\": {}, \"text_config\": {\"model_type\": "
                   "\"glm4v_moe_text\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                   "\"num_hidden_layers\": 2}}",
                   &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.rms_norm_eps, 1e-5);
    CU_ASSERT_EQUAL(c.attention_bias, 1);
    CU_ASSERT_EQUAL(c.partial_rotary_factor, 0.5);
    CU_ASSERT_EQUAL(c.num_experts, 128);
    CU_ASSERT_EQUAL(c.moe_sigmoid, 1);
    CU_ASSERT_EQUAL(c.dense_layers, 1);
    /* GLM-4's own (Glm4Config): eps 1.5625e-07, q/k/v biases, half a head
     * rotated, head_dim 128, 2 kv heads */
    CU_ASSERT_EQUAL_FATAL(parse_text("{\"model_type\": \"glm4\", \"hidden_size\": 64, "
                                     "\"num_attention_heads\": 4, "
                                     "\"num_hidden_layers\": 2}",
                                     &c),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(c.rms_norm_eps, 1.5625e-07);
    CU_ASSERT_EQUAL(c.attention_bias, 1);
    CU_ASSERT_EQUAL(c.partial_rotary_factor, 0.5);
    CU_ASSERT_EQUAL(c.head_dim, 128);
    CU_ASSERT_EQUAL(c.num_kv_heads, 2);
    /* GLM-4V's text model: what transformers and vLLM default apart is
     * refused */
#define GLM4V_TEXT(fields)                                                               \
    "{\"architectures\": [\"Glm4vForConditionalGeneration\"], \"vision_config\": {}, "   \
    "\"text_config\": {\"model_type\": \"glm4v_text\", \"hidden_size\": 64, "            \
    "\"num_attention_heads\": 4, \"num_hidden_layers\": 2" fields "}}"
    CU_ASSERT_EQUAL(parse_text(GLM4V_TEXT(", \"attention_bias\": true"), &c),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("\"text_config.partial_rotary_factor\" is missing"));
    CU_ASSERT_EQUAL(parse_text(GLM4V_TEXT(", \"partial_rotary_factor\": 0.5"), &c),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("\"text_config.attention_bias\" is missing"));
    CU_ASSERT_EQUAL_FATAL(
        parse_text(
            GLM4V_TEXT(", \"attention_bias\": true, \"rope_parameters\": "
                       "{\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}"),
            &c),
        KVCAL_OK);
    CU_ASSERT_EQUAL(c.partial_rotary_factor, 0.5);
    CU_ASSERT_EQUAL(c.rms_norm_eps, 1e-5);
}

/* Hunyuan: its "dynamic" RoPE with an alpha is the NTK-alpha base; the
 * per-layer lists of num_experts / moe_topk run when every entry is the
 * same, and are refused otherwise. */
static void model_config_reads_hunyuan_alpha_rope_and_layer_lists(void)
{
    kvcal_model_config c;
#define HUNYUAN(fields)                                                                  \
    "{\"architectures\": [\"HunYuanMoEV1ForCausalLM\"], \"model_type\": "                \
    "\"hunyuan_v1_moe\", \"hidden_size\": 512, \"num_attention_heads\": 4, "             \
    "\"head_dim\": 128, \"num_hidden_layers\": 2, \"rope_scaling\": {\"type\": "         \
    "\"dynamic\", \"alpha\": 1000.0, \"factor\": 1.0}, \"rope_theta\": 10000.0" fields   \
    "}"
    CU_ASSERT_EQUAL_FATAL(parse_text(HUNYUAN(", \"num_experts\": [8, 8], "
                                             "\"moe_topk\": [2, 2]"),
                                     &c),
                          KVCAL_OK);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 10000.0 * pow(1000.0, 128.0 / 126.0), 1e-6);
    CU_ASSERT_EQUAL(c.rope_type, KVCAL_ROPE_DEFAULT);
    CU_ASSERT_EQUAL(c.num_experts, 8);
    CU_ASSERT_EQUAL(c.num_experts_per_tok, 2);
    CU_ASSERT_EQUAL(c.shared_expert_intermediate_size, c.intermediate_size);
    CU_ASSERT_EQUAL(parse_text(HUNYUAN(", \"num_experts\": 8, \"moe_topk\": [2, 3]"), &c),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("\"moe_topk\" differs from layer to layer"));
}

/* IBM Granite: the four multipliers are 1 where absent (the transformers
 * classes' defaults), a negative one is named; GraniteMoe's experts default
 * to 8 of intermediate_size, top-2, renormalized. */
static void model_config_reads_granite_multipliers_and_defaults(void)
{
    kvcal_model_config c;
#define GRANITE(arch, type, fields)                                                      \
    "{\"architectures\": [\"" arch "\"], \"model_type\": \"" type "\", "                 \
    "\"hidden_size\": 64, \"num_attention_heads\": 4, \"num_hidden_layers\": 2" fields   \
    "}"
    CU_ASSERT_EQUAL_FATAL(parse_text(GRANITE("GraniteForCausalLM", "granite", ""), &c),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(c.embedding_multiplier, 1.0);
    CU_ASSERT_EQUAL(c.residual_multiplier, 1.0);
    CU_ASSERT_EQUAL(c.attention_multiplier, 1.0);
    CU_ASSERT_EQUAL(c.logits_scaling, 1.0);
    CU_ASSERT_EQUAL(c.intermediate_size, 11008);
    CU_ASSERT_EQUAL(c.num_experts, 0);
    CU_ASSERT_EQUAL_FATAL(parse_text(GRANITE("GraniteMoeForCausalLM", "granitemoe",
                                             ", \"embedding_multiplier\": 12.0, "
                                             "\"attention_multiplier\": 0.015625, "
                                             "\"residual_multiplier\": 0.22, "
                                             "\"logits_scaling\": 6.0, "
                                             "\"intermediate_size\": 512"),
                                     &c),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(c.embedding_multiplier, 12.0);
    CU_ASSERT_EQUAL(c.attention_multiplier, 0.015625);
    CU_ASSERT_EQUAL(c.residual_multiplier, 0.22);
    CU_ASSERT_EQUAL(c.logits_scaling, 6.0);
    CU_ASSERT_EQUAL(c.num_experts, 8);
    CU_ASSERT_EQUAL(c.num_experts_per_tok, 2);
    CU_ASSERT_EQUAL(c.moe_intermediate_size, 512);
    CU_ASSERT(c.norm_topk_prob);
    CU_ASSERT_EQUAL(parse_text(GRANITE("GraniteForCausalLM", "granite",
                                       ", \"residual_multiplier\": -0.5"),
                               &c),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("residual_multiplier"));
#undef GRANITE
}

/* A factor below 1 (transformers: "must be >= 1"), a negative beta (its
 * logarithm fails in transformers), a non-positive attention factor and
 * wrong types: one line naming the file and the key. */
static void model_config_rejects_bad_yarn_values_naming_file_and_key(void)
{
    static const struct {
        const char *key, *fields, *top, *needle;
    } cases[] = {
        {"rope_scaling", "\"type\": \"yarn\", \"factor\": 0.5", NULL,
         "field \"rope_scaling.factor\" is 0.5; rope_type yarn needs a factor >= 1"},
        {"rope_scaling", "\"type\": \"yarn\"", NULL,
         "field \"rope_scaling.factor\" is missing for this rope_type"},
        {"rope_parameters",
         "\"rope_type\": \"yarn\", \"factor\": null, "
         "\"original_max_position_embeddings\": 256",
         NULL,
         "field \"rope_parameters.factor\" is 0.5 (null: max_position_embeddings / "
         "original_max_position_embeddings)"},
        {"rope_parameters", "\"rope_type\": \"yarn\", \"factor\": 4, \"beta_fast\": -1",
         NULL,
         "field \"rope_parameters.beta_fast\": expected a number >= 0 (0 or null: the "
         "default), found -1"},
        {"rope_scaling", "\"type\": \"yarn\", \"factor\": 4, \"beta_slow\": \"1\"", NULL,
         "field \"rope_scaling.beta_slow\": expected a number >= 0"},
        {"rope_scaling", "\"type\": \"yarn\", \"factor\": 4, \"attention_factor\": 0",
         NULL, "field \"rope_scaling.attention_factor\": expected a number > 0, found 0"},
        {"rope_scaling", "\"type\": \"yarn\", \"factor\": 4, \"truncate\": \"false\"",
         NULL, "field \"rope_scaling.truncate\": expected true or false"},
        {"rope_scaling",
         "\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 0",
         NULL,
         "field \"rope_scaling.original_max_position_embeddings\": expected an integer "
         ">= 1, found 0"},
        {"rope_scaling", "\"type\": \"yarn\", \"factor\": 4",
         ", \"original_max_position_embeddings\": -5",
         "field \"original_max_position_embeddings\": expected an integer >= 1"},
        {"rope_scaling", "\"type\": \"yarn\", \"factor\": 4, \"mscale\": \"x\"", NULL,
         "field \"rope_scaling.mscale\": expected a number, found a string"},
        {"rope_scaling",
         "\"type\": \"yarn\", \"factor\": 4, \"mscale\": 1, \"mscale_all_dim\": -20",
         NULL, "\"rope_scaling.mscale_all_dim\" (-20) give the yarn attention factor"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvcal_model_config c;
        kvcal_status s = parse_yarn(cases[i].key, cases[i].fields, cases[i].top, &c);
        const char *msg = kvcal_last_error();
        int ok = s == KVCAL_ERR_FORMAT && strstr(msg, cases[i].needle) &&
                 !strchr(msg, '\n') && !strncmp(msg, "config.json: ", 13) &&
                 c.num_layers == 0;
        if (!ok)
            fprintf(stderr, "\n  case %zu: status %d, message \"%s\"\n", i, s, msg);
        CU_ASSERT(ok);
    }
    /* no original context anywhere (a model type without a default one) */
    kvcal_model_config c;
    CU_ASSERT_EQUAL(
        parse_text(
            "{\"model_type\": \"gemma\", \"num_hidden_layers\": 2, \"hidden_size\": "
            "64, \"num_attention_heads\": 4, \"rope_scaling\": {\"type\": "
            "\"yarn\", \"factor\": 4}}",
            &c),
        KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("config.json: field "
                                   "\"rope_scaling.original_max_position_embeddings\" is "
                                   "missing for rope_type yarn"));
}

static void model_config_load_accepts_directory_and_names_missing_file(void)
{
    kvcal_model_config c;
    const char *dir = kvcal_test_path("model_dir");
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    CU_ASSERT_EQUAL(kvcal_model_config_load(dir, &c), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("no config.json in this directory"));
    CU_ASSERT(!kvcal_test_error_has("llama2.c"));
    char path[600];
    /* a llama2.c checkpoint in the directory: the message names the file */
    snprintf(path, sizeof path, "%s/stories.bin", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, "x", 1), 0);
    CU_ASSERT_EQUAL(kvcal_model_config_load(dir, &c), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("stories.bin looks like a llama2.c checkpoint: pass "
                                   "that file"));
    CU_ASSERT_EQUAL_FATAL(unlink(path), 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t n = 0;
    char *text = kvcal_test_read_file(CONFIGS "qwen2-7b.json", &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, text, n), 0);
    free(text);
    CU_ASSERT_EQUAL(kvcal_model_config_load(dir, &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.num_kv_heads, 4);
    CU_ASSERT_EQUAL(kvcal_model_config_load(CONFIGS "absent.json", &c), KVCAL_ERR_IO);
    /* a model file that is not JSON (a llama2.c .bin) says what to pass */
    CU_ASSERT_EQUAL(kvcal_model_config_load("models/stories260K/stories260K.bin", &c),
                    KVCAL_ERR_PARSE);
    CU_ASSERT(kvcal_test_error_has(
        "stories260K.bin is not a config.json; give the model directory holding "
        "config.json, or config.json itself"));
}

/* --- malformed configs -------------------------------------------------- */

static const struct {
    const char *file;
    kvcal_status status;
    const char *needle;
} malformed[] = {
    {"empty.json", KVCAL_ERR_PARSE, ":1:1: empty file"},
    {"not_json.json", KVCAL_ERR_PARSE, ":1:1: unexpected 'm'"},
    {"array_top.json", KVCAL_ERR_FORMAT, "not a JSON object"},
    {"truncated.json", KVCAL_ERR_PARSE, "found end of file"},
    {"binary_garbage.json", KVCAL_ERR_PARSE, ":1:1: NUL byte"},
    {"missing_model_type.json", KVCAL_ERR_FORMAT, "field \"model_type\" is missing"},
    {"missing_num_hidden_layers.json", KVCAL_ERR_FORMAT,
     "field \"num_hidden_layers\" is missing"},
    {"layers_string.json", KVCAL_ERR_FORMAT,
     "field \"num_hidden_layers\": expected an integer in [1, 65536], found a string \"32\""},
    {"layers_too_big.json", KVCAL_ERR_FORMAT,
     "field \"num_hidden_layers\": expected an integer in [1, 65536] (kvcal's bound, far "
     "above any real model), found 3000000000"},
    {"layers_overflow.json", KVCAL_ERR_PARSE, "number out of the range of a double"},
    {"heads_zero.json", KVCAL_ERR_FORMAT,
     "field \"num_attention_heads\": expected an integer in [1, 65536], found 0"},
    {"kv_heads_negative.json", KVCAL_ERR_FORMAT,
     "field \"num_key_value_heads\": expected an integer in [1, 65536], found -8"},
    {"heads_not_multiple.json", KVCAL_ERR_FORMAT,
     "\"num_attention_heads\" (32) is not a multiple of \"num_key_value_heads\" (5)"},
    {"head_dim_fraction.json", KVCAL_ERR_FORMAT,
     "field \"head_dim\": expected an integer in [1, 65536], found 64.5"},
    {"hidden_not_divisible.json", KVCAL_ERR_FORMAT,
     "\"hidden_size\" (4100) is not a multiple of \"num_attention_heads\" (32)"},
    {"model_type_number.json", KVCAL_ERR_FORMAT,
     "field \"model_type\": expected a string"},
    {"rope_scaling_no_type.json", KVCAL_ERR_FORMAT,
     "field \"rope_scaling.rope_type\" is missing"},
    {"llama3_no_low_freq_factor.json", KVCAL_ERR_FORMAT,
     "field \"rope_scaling.low_freq_factor\" is missing"},
    {"rope_theta_negative.json", KVCAL_ERR_FORMAT,
     "field \"rope_theta\": expected a number > 0, found -1"},
    {"rope_scaling_string.json", KVCAL_ERR_FORMAT,
     "field \"rope_scaling\": expected an object or null"},
    {"attention_bias_string.json", KVCAL_ERR_FORMAT,
     "field \"attention_bias\": expected true or false"},
    {"quantization_config_list.json", KVCAL_ERR_FORMAT,
     "field \"quantization_config\": expected an object or null, found an array"},
    {"duplicate_key.json", KVCAL_ERR_PARSE, "duplicate key \"num_hidden_layers\""},
    {"nan_literal.json", KVCAL_ERR_PARSE, "NaN/Infinity literal"},
    {"deep_nesting.json", KVCAL_ERR_PARSE, "nesting deeper than 64 levels"},
    {"trailing_garbage.json", KVCAL_ERR_PARSE, "after the end of the JSON value"},
};

static void model_config_rejects_every_malformed_file_with_one_line(void)
{
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        char path[256];
        kvcal_model_config c;
        snprintf(path, sizeof path, "tests/malformed/config/%s", malformed[i].file);
        kvcal_status s = kvcal_model_config_load(path, &c);
        const char *msg = kvcal_last_error();
        int ok = s == malformed[i].status && strstr(msg, malformed[i].needle) &&
                 !strchr(msg, '\n') && strncmp(msg, path, strlen(path)) == 0 &&
                 c.num_layers == 0;
        if (!ok)
            fprintf(stderr, "\n  %s: status %d, message \"%s\"\n", malformed[i].file, s,
                    msg);
        CU_ASSERT(ok);
    }
}

/* Every size at its bound parses; one past it is refused naming the key
 * and the bound. */
static void model_config_refuses_sizes_past_the_bounds_naming_key_and_bound(void)
{
    static const struct {
        const char *key;
        long long bound;
    } keys[] = {
        {"num_hidden_layers", KVCAL_CONFIG_MAX_LAYERS},
        {"hidden_size", KVCAL_CONFIG_MAX_HIDDEN},
        {"num_attention_heads", KVCAL_CONFIG_MAX_HEADS},
        {"num_key_value_heads", KVCAL_CONFIG_MAX_HEADS},
        {"head_dim", KVCAL_CONFIG_MAX_HEAD_DIM},
        {"vocab_size", KVCAL_CONFIG_MAX_VOCAB},
    };
    enum { N = sizeof keys / sizeof keys[0] };
    for (int past = -1; past < N; past++) {
        char text[512], needle[160];
        int len = snprintf(text, sizeof text, "{\"model_type\": \"llama\"");
        for (int i = 0; i < N; i++)
            len += snprintf(text + len, sizeof text - (size_t)len, ", \"%s\": %lld",
                            keys[i].key, keys[i].bound + (i == past));
        snprintf(text + len, sizeof text - (size_t)len, "}");
        kvcal_model_config c;
        kvcal_status st = parse_text(text, &c);
        if (past < 0) {
            CU_ASSERT_EQUAL(st, KVCAL_OK);
            CU_ASSERT_EQUAL(c.num_layers, KVCAL_CONFIG_MAX_LAYERS);
            CU_ASSERT_EQUAL(c.hidden_size, KVCAL_CONFIG_MAX_HIDDEN);
            CU_ASSERT_EQUAL(c.num_kv_heads, KVCAL_CONFIG_MAX_HEADS);
            CU_ASSERT_EQUAL(c.head_dim, KVCAL_CONFIG_MAX_HEAD_DIM);
            CU_ASSERT_EQUAL(c.vocab_size, KVCAL_CONFIG_MAX_VOCAB);
            continue;
        }
        snprintf(needle, sizeof needle,
                 "config.json: field \"%s\": expected an integer in [1, %lld]",
                 keys[past].key, keys[past].bound);
        CU_ASSERT_EQUAL(st, KVCAL_ERR_FORMAT);
        CU_ASSERT(kvcal_test_error_has(needle));
        CU_ASSERT_EQUAL(c.num_layers, 0);
    }
}

/* A head_dim derived from hidden_size / num_attention_heads keeps the same
 * bound as one the config states (a fuzzer's find: 610000 / 2). */
static void model_config_refuses_a_derived_head_dim_past_the_bound(void)
{
    char text[256];
    snprintf(text, sizeof text,
             "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, "
             "\"num_attention_heads\": 2, \"hidden_size\": %d}",
             2 * (KVCAL_CONFIG_MAX_HEAD_DIM + 1));
    kvcal_model_config c;
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("\"hidden_size\" (131074) / "
                                   "\"num_attention_heads\" (2) is above kvcal's bound"));
    snprintf(text, sizeof text,
             "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, "
             "\"num_attention_heads\": 2, \"hidden_size\": %d}",
             2 * KVCAL_CONFIG_MAX_HEAD_DIM);
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.head_dim, KVCAL_CONFIG_MAX_HEAD_DIM);
}

/* full_attention_interval stands for layer_types: only every interval-th
 * layer attends (with full attention: no family's default sliding pattern
 * applies), and an interval past the layers leaves none (a fuzzer's find:
 * gpt-oss's default pattern counted 14 sliding layers of 0 attending). */
static void model_config_full_attention_interval_is_the_layer_pattern(void)
{
    static const char *base = "{\"model_type\": \"gpt_oss\", \"hidden_size\": 64, "
                              "\"num_attention_heads\": 4, \"num_hidden_layers\": 8, "
                              "\"full_attention_interval\": %d}";
    char text[256];
    kvcal_model_config c;
    snprintf(text, sizeof text, base, 4);
    CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.kv_layers, 2);
    CU_ASSERT_EQUAL(c.sliding_layers, 0);
    CU_ASSERT_STRING_EQUAL(c.no_kv_layer_types, "linear_attention");
    snprintf(text, sizeof text, base, 9);
    CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("field \"full_attention_interval\" (9) leaves no "
                                   "attention layer among num_hidden_layers (8)"));
}

/* Qwen3-Next's and Qwen3.5's decoder layers are a delta-net
 * ("linear_attention") or attention ("full_attention") alone: another
 * attending kind in layer_types, which kvcal would otherwise run while
 * transformers and vLLM build no such layer, is refused naming the entry,
 * in text_config too. */
static void model_config_refuses_attention_kinds_a_hybrid_model_does_not_build(void)
{
    static const char next[] =
        "{\"model_type\": \"qwen3_next\", \"hidden_size\": 64, "
        "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
        "\"num_hidden_layers\": 4, \"sliding_window\": 8, \"layer_types\": "
        "[\"linear_attention\", \"%s\", \"linear_attention\", \"full_attention\"]}";
    static const char *const refused[] = {"sliding_attention", "chunked_attention",
                                          "attention"};
    char text[512], needle[160];
    kvcal_model_config c;
    snprintf(text, sizeof text, next, "full_attention");
    CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.kv_layers, 2);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(text, sizeof text, next, refused[i]);
        CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_FORMAT);
        snprintf(needle, sizeof needle,
                 "config.json: field \"layer_types[1]\" is \"%s\", but transformers' "
                 "and vLLM's qwen3_next build only \"linear_attention\" and "
                 "\"full_attention\" layers",
                 refused[i]);
        CU_ASSERT(kvcal_test_error_has(needle));
        CU_ASSERT_EQUAL(c.num_layers, 0);
    }
    CU_ASSERT_EQUAL(
        parse_text("{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], "
                   "\"model_type\": \"qwen3_5\", \"text_config\": {\"model_type\": "
                   "\"qwen3_5_text\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                   "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, "
                   "\"layer_types\": [\"linear_attention\", \"sliding_attention\"]}}",
                   &c),
        KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("field \"text_config.layer_types[1]\" is "
                                   "\"sliding_attention\""));
}

/* Qwen3.5 without layer_types attends in every full_attention_interval-th
 * layer, 4 by default, as transformers' Qwen3_5TextConfig and
 * Qwen3_5MoeTextConfig derive (as Qwen3-Next's does); an interval past the
 * layers is refused saying it was the default. */
static void model_config_qwen3_5_without_layer_types_attends_every_fourth_layer(void)
{
    static const char *const types[] = {"qwen3_5_text", "qwen3_5_moe_text"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char text[512];
        kvcal_model_config c;
        snprintf(text, sizeof text,
                 "{\"model_type\": \"%s\", \"hidden_size\": 64, "
                 "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                 "\"num_hidden_layers\": 8}",
                 types[i]);
        CU_ASSERT_EQUAL_FATAL(parse_text(text, &c), KVCAL_OK);
        CU_ASSERT_EQUAL(c.kv_layers, 2);
        CU_ASSERT_STRING_EQUAL(c.no_kv_layer_types, "linear_attention");
        for (int l = 0; l < 8; l++)
            CU_ASSERT_EQUAL(kvcal_model_config_layer_caches(&c, l), l == 3 || l == 7);
        snprintf(text, sizeof text,
                 "{\"model_type\": \"%s\", \"hidden_size\": 64, "
                 "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                 "\"num_hidden_layers\": 3}",
                 types[i]);
        CU_ASSERT_EQUAL(parse_text(text, &c), KVCAL_ERR_FORMAT);
        CU_ASSERT(kvcal_test_error_has(
            "config.json: field \"full_attention_interval\" (4, the default where it "
            "and layer_types are absent) leaves no attention layer among "
            "num_hidden_layers (3)"));
    }
}

/* The heads' errors of a multimodal config name the fields where they are,
 * in text_config. */
static void model_config_heads_errors_name_the_text_config_fields(void)
{
    kvcal_model_config c;
    CU_ASSERT_EQUAL(
        parse_text("{\"model_type\": \"qwen3_5\", \"text_config\": {\"model_type\": "
                   "\"qwen3_5_text\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                   "\"num_key_value_heads\": 3, \"num_hidden_layers\": 4}}",
                   &c),
        KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("field \"text_config.num_attention_heads\" (4) is not "
                                   "a multiple of \"text_config.num_key_value_heads\" "
                                   "(3)"));
    CU_ASSERT_EQUAL(
        parse_text("{\"model_type\": \"llava\", \"text_config\": {\"model_type\": "
                   "\"llama\", \"hidden_size\": 66, \"num_attention_heads\": 4, "
                   "\"num_hidden_layers\": 4}}",
                   &c),
        KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("field \"text_config.head_dim\" is missing and "
                                   "\"text_config.hidden_size\" (66) is not a multiple "
                                   "of \"text_config.num_attention_heads\" (4)"));
}

/* A number the model's float arithmetic cannot hold (infinite there, or 0
 * where it divides) is refused naming the field, where it would otherwise
 * turn the activations to NaN (Llama 4's attn_scale and floor_scale,
 * GLM-4.7-Flash's routed_scaling_factor, a RoPE factor, yarn's
 * mscale_all_dim); the values released configs hold still parse. */
static void model_config_refuses_numbers_a_float_does_not_hold(void)
{
    static const struct {
        const char *text, *needle;
    } refused[] = {
        {LLAMA4_TEXT(", \"attn_scale\": 1e308"),
         "field \"text_config.attn_scale\": expected a number whose magnitude a float "
         "holds (1.2e-38 to 3.4e+38) or 0, found 1e+308"},
        {LLAMA4_TEXT(", \"floor_scale\": 1e-40"),
         "field \"text_config.floor_scale\": expected a number > 0 whose magnitude a "
         "float holds"},
        {LLAMA4_TEXT(", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": "
                     "1e-300, \"low_freq_factor\": 1, \"high_freq_factor\": 4, "
                     "\"original_max_position_embeddings\": 8192}"),
         "field \"text_config.rope_scaling.factor\": expected a number > 0 whose "
         "magnitude a float holds"},
        {"{\"model_type\": \"glm4_moe_lite\", \"num_hidden_layers\": 2, "
         "\"hidden_size\": 64, \"num_attention_heads\": 4, \"kv_lora_rank\": 32, "
         "\"qk_rope_head_dim\": 16, \"routed_scaling_factor\": 1e300}",
         "field \"routed_scaling_factor\": expected a number > 0 whose magnitude a "
         "float holds"},
        {"{\"model_type\": \"deepseek_v32\", \"num_hidden_layers\": 4, "
         "\"hidden_size\": 64, \"num_attention_heads\": 4, \"kv_lora_rank\": 32, "
         "\"qk_rope_head_dim\": 16, \"rope_parameters\": {\"rope_type\": \"yarn\", "
         "\"factor\": 4, \"original_max_position_embeddings\": 64, \"mscale\": 1, "
         "\"mscale_all_dim\": -1e300}}",
         "field \"rope_parameters.mscale_all_dim\": expected a number whose magnitude "
         "a float holds"},
    };
    kvcal_model_config c;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CU_ASSERT_EQUAL(parse_text(refused[i].text, &c), KVCAL_ERR_FORMAT);
        CU_ASSERT(kvcal_test_error_has(refused[i].needle));
    }
    CU_ASSERT_EQUAL_FATAL(
        parse_text(LLAMA4_TEXT(", \"attn_scale\": 0.1, \"floor_scale\": 8192"), &c),
        KVCAL_OK);
    CU_ASSERT_DOUBLE_EQUAL(c.attn_temperature_scale, 0.1, 0);
    CU_ASSERT_DOUBLE_EQUAL(c.attn_temperature_floor, 8192.0, 0);
    CU_ASSERT_EQUAL_FATAL(parse_text(LLAMA4_TEXT(", \"attn_scale\": 0"), &c), KVCAL_OK);
    CU_ASSERT_DOUBLE_EQUAL(c.attn_temperature_scale, 0.0, 0);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(model_config_matches_transformers_in_both_layouts),
    KVCAL_TEST(model_config_sets_architecture_features),
    KVCAL_TEST(model_config_reads_quantization_and_kv_cache_scheme),
    KVCAL_TEST(model_config_reads_gpt_oss_with_transformers_defaults),
    KVCAL_TEST(model_config_reads_deepseek_mla_and_grouped_experts),
    KVCAL_TEST(model_config_reads_glm4_moe_lite_layer_plan),
    KVCAL_TEST(model_config_reads_deepseek_sparse_attention),
    KVCAL_TEST(model_config_reads_a_hybrid_models_linear_attention_layers),
    KVCAL_TEST(model_config_defaults_absent_and_null_fields),
    KVCAL_TEST(model_config_defaults_absent_kv_heads_per_model_type),
    KVCAL_TEST(model_config_defaults_absent_sizes_per_model_type),
    KVCAL_TEST(model_config_reads_other_rope_types_and_layer_keyed_parameters),
    KVCAL_TEST(model_config_reads_yarn_in_both_layouts_with_transformers_defaults),
    KVCAL_TEST(model_config_derives_yarn_parameters_as_transformers),
    KVCAL_TEST(model_config_reads_ministral3_yarn_and_query_scaling),
    KVCAL_TEST(model_config_reads_llama4_layers_and_defaults),
    KVCAL_TEST(model_config_defaults_follow_each_config_class),
    KVCAL_TEST(model_config_reads_hunyuan_alpha_rope_and_layer_lists),
    KVCAL_TEST(model_config_reads_granite_multipliers_and_defaults),
    KVCAL_TEST(model_config_rejects_bad_yarn_values_naming_file_and_key),
    KVCAL_TEST(model_config_load_accepts_directory_and_names_missing_file),
    KVCAL_TEST(model_config_rejects_every_malformed_file_with_one_line),
    KVCAL_TEST(model_config_refuses_sizes_past_the_bounds_naming_key_and_bound),
    KVCAL_TEST(model_config_refuses_a_derived_head_dim_past_the_bound),
    KVCAL_TEST(model_config_reads_a_multimodal_models_language_model),
    KVCAL_TEST(model_config_full_attention_interval_is_the_layer_pattern),
    KVCAL_TEST(model_config_refuses_attention_kinds_a_hybrid_model_does_not_build),
    KVCAL_TEST(model_config_qwen3_5_without_layer_types_attends_every_fourth_layer),
    KVCAL_TEST(model_config_heads_errors_name_the_text_config_fields),
    KVCAL_TEST(model_config_refuses_numbers_a_float_does_not_hold),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(model_config, KVCAL_NEEDS_NOTHING, tests)
