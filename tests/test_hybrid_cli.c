/* tests/test_hybrid_cli.c: hybrid models (Qwen3-Next, Qwen3.5 dense and
 * MoE) through the commands, as a user runs them: calibrate writes scales
 * for the attention layers alone (the linear-attention layers cache
 * nothing), validate-scales accepts them and flags a scale of a layer
 * that caches nothing, eval reports the attention layers and counts their
 * cache alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/scales.h"
#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"
#include "tests/test_util.h"

#define GOLDEN "tests/fixtures/golden/"
#define SMALL "--num-samples 2 --seq-len 24 --quiet"

/* Layer l's index in the golden fixture's kv_layers, -1 when it caches
 * nothing; *n the number of such layers. */
static int kv_layer_at(const cJSON *fixture, int l, int *n)
{
    const cJSON *kv = cJSON_GetObjectItem(fixture, "kv_layers");
    *n = cJSON_GetArraySize(kv);
    for (int i = 0; i < *n; i++)
        if (cJSON_GetArrayItem(kv, i)->valueint == l)
            return i;
    return -1;
}

static void calibrate_writes_the_attention_layers_scales_alone(void)
{
    /* Qwen3-Next's K and V under ModelOpt's names, which sglang's loader
     * of it takes (and vLLM's), compressed-tensors' attention names
     * elsewhere */
    static const struct {
        const char *name, *prefix, *k;
    } cases[] = {
        {"qwen3_5_text_gdn_hybrid_bf16", "model.", "self_attn.k_scale"},
        {"qwen3_next_gdn_moe_e8_top3_bf16", "model.", "self_attn.k_proj.k_scale"},
        {"qwen3_5_moe_mm_gdn_e8_top3_bf16", "model.language_model.", "self_attn.k_scale"},
        {"qwen3_5_mm_gdn_hybrid_bf16", "model.language_model.", "self_attn.k_scale"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[700];
        cJSON *fixture = NULL;
        snprintf(path, sizeof path, GOLDEN "%s.json", cases[c].name);
        CU_ASSERT_EQUAL_FATAL(kvcal_json_load(path, &fixture), KVCAL_OK);
        const char *out = kvcal_test_golden_checkpoint_scales(cases[c].name);
        snprintf(path, sizeof path, "%s/kv_scales.safetensors", out);
        kvcal_safetensors_t *st = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(path, &st), KVCAL_OK);
        int kv_layers = 0;
        kv_layer_at(fixture, 0, &kv_layers);
        /* a k_scale and a v_scale of each attention layer, nothing else */
        CU_ASSERT_EQUAL(kvcal_safetensors_count(st), 2 * kv_layers);
        for (int i = 0; i < kvcal_safetensors_count(st); i++) {
            const char *n = kvcal_safetensors_at(st, i)->name;
            const size_t len = strlen(cases[c].prefix);
            int l = -1, at = -1;
            CU_ASSERT_EQUAL(strncmp(n, cases[c].prefix, len), 0);
            CU_ASSERT_EQUAL(sscanf(n + len, "layers.%d.self_attn.", &l), 1);
            CU_ASSERT(strstr(n, cases[c].k) != NULL || strstr(n, "v_") != NULL);
            CU_ASSERT((at = kv_layer_at(fixture, l, &kv_layers)) >= 0);
            if (at < 0)
                fprintf(stderr, "\n%s: %s names a linear-attention layer", cases[c].name,
                        n);
        }
        kvcal_safetensors_close(st);
        cJSON_Delete(fixture);
        char args[800], *text = NULL;
        snprintf(args, sizeof args, "validate-scales '%s'", out);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &text), 0);
        CU_ASSERT(text && strstr(text, "valid (0 errors, 0 warnings)"));
        free(text);
    }
}

/* calibrate --json marks the layers that cache nothing */
static void calibrate_json_marks_the_layers_without_cache(void)
{
    char args[1024], *text = NULL;
    snprintf(args, sizeof args,
             "calibrate --model " GOLDEN
             "qwen3_next_gdn_moe_e8_top3_bf16 --dataset '%s' " SMALL
             " --format kvcal --out '%s' --json",
             kvcal_test_golden_ids(), kvcal_test_path("hybrid_json.json"));
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &text), 0);
    cJSON *report = text ? cJSON_Parse(text) : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(report);
    const cJSON *layers = cJSON_GetObjectItem(report, "layers");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(layers), 4);
    for (int l = 0; l < 4; l++) {
        const cJSON *mark =
            cJSON_GetObjectItem(cJSON_GetArrayItem(layers, l), "kv_cache");
        CU_ASSERT(l == 1 ? mark == NULL : cJSON_IsFalse(mark));
    }
    cJSON_Delete(report);
    free(text);
}

/* The scales of an attention layer that the config then makes a
 * linear-attention one: read by no engine, which validate-scales says. */
static void validate_scales_flags_a_scale_of_a_layer_without_cache(void)
{
    const char *out = kvcal_test_golden_checkpoint_scales("qwen3_5_text_gdn_hybrid_bf16");
    char path[700], args[800], *text = NULL;
    snprintf(path, sizeof path, "%s/config.json", out);
    cJSON *cfg = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(path, &cfg), KVCAL_OK);
    cJSON *types = cJSON_GetObjectItem(cfg, "layer_types");
    cJSON_ReplaceItemInArray(types, 1, cJSON_CreateString("linear_attention"));
    CU_ASSERT_EQUAL_FATAL(kvcal_json_write(path, cfg), KVCAL_OK);
    cJSON_Delete(cfg);
    snprintf(args, sizeof args, "validate-scales '%s'", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &text), 0);
    CU_ASSERT(text && strstr(text, "scales for a linear-attention layer"));
    CU_ASSERT(text && strstr(text, "model.layers.1.self_attn"));
    free(text);
}

/* eval's per-layer report holds the attention layers (--attribute runs
 * them alone, not the others), and the cache's bytes per token count them
 * alone: bf16 K and V of 2 layers x 2 kv heads x 32 = 512 bytes (of 4
 * layers). */
static void eval_reports_the_attention_layers_alone(void)
{
    char args[1024], *text = NULL;
    snprintf(args, sizeof args,
             "eval --model " GOLDEN "qwen3_5_text_gdn_hybrid_bf16 --dataset '%s' " SMALL
             " --attribute --json",
             kvcal_test_golden_ids());
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &text), 0);
    cJSON *report = text ? cJSON_Parse(text) : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(report);
    const cJSON *modes = cJSON_GetObjectItem(report, "modes"), *m;
    int seen = 0;
    cJSON_ArrayForEach(m, modes)
    {
        const cJSON *layers = cJSON_GetObjectItem(m, "layers"), *l;
        if (!strcmp(cJSON_GetObjectItem(m, "mode")->valuestring, "baseline"))
            CU_ASSERT_EQUAL(cJSON_GetObjectItem(m, "kv_bytes_per_token")->valuedouble,
                            512.0);
        cJSON_ArrayForEach(l, layers)
        {
            const int at = cJSON_GetObjectItem(l, "layer")->valueint;
            CU_ASSERT(at == 1 || at == 3);
            /* --attribute: a run with this layer's cache alone */
            if (strcmp(cJSON_GetObjectItem(m, "mode")->valuestring, "baseline"))
                CU_ASSERT(cJSON_IsNumber(cJSON_GetObjectItem(l, "kld_alone")));
            seen++;
        }
    }
    CU_ASSERT(seen > 0);
    cJSON_Delete(report);
    free(text);
}

/* The formats with a scale for every layer are refused, before the run
 * and without an output. */
static void formats_of_every_layer_are_refused(void)
{
    static const char *const formats[] = {"legacy", "all", "trtllm",
                                          "ascend --kv-dtype int8"};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        char args[1024], out[600];
        snprintf(out, sizeof out, "%s", kvcal_test_path("hybrid_refused"));
        snprintf(args, sizeof args,
                 "calibrate --model " GOLDEN "qwen3_next_gdn_moe_e8_top3_bf16 --dataset "
                 "'%s' " SMALL " --format %s --out '%s'",
                 kvcal_test_golden_ids(), formats[i], out);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
        CU_ASSERT(
            kvcal_test_kvcal_stderr_has("is a hybrid model whose 3 linear-attention "
                                        "layers cache nothing"));
        FILE *f = fopen(out, "r");
        CU_ASSERT_PTR_NULL(f);
        if (f)
            fclose(f);
    }
}

/* convert of a hybrid model's scales (read back from a checkpoint, whose
 * config.json names the model) into a format of every layer: refused
 * without an output; into a checkpoint: the attention layers' alone. */
static void convert_keeps_the_attention_layers_alone(void)
{
    const char *ck =
        kvcal_test_golden_checkpoint_scales("qwen3_next_gdn_moe_e8_top3_bf16");
    char args[1600], out[600];
    snprintf(out, sizeof out, "%s", kvcal_test_path("hybrid_legacy.json"));
    snprintf(args, sizeof args, "convert '%s' --to legacy --out '%s'", ck, out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("3 of the 4 layers cache nothing (a hybrid "
                                          "model's linear attention)"));
    FILE *f = fopen(out, "r");
    CU_ASSERT_PTR_NULL(f);
    if (f)
        fclose(f);
    snprintf(out, sizeof out, "%s", kvcal_test_path("hybrid_converted"));
    snprintf(args, sizeof args,
             "convert '%s' --to checkpoint --model " GOLDEN
             "qwen3_next_gdn_moe_e8_top3_bf16 --out '%s'",
             ck, out);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    char path[700];
    snprintf(path, sizeof path, "%s/kv_scales.safetensors", out);
    kvcal_safetensors_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(path, &st), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_safetensors_count(st), 2); /* layer 1's k and v */
    for (int i = 0; i < kvcal_safetensors_count(st); i++)
        CU_ASSERT(strstr(kvcal_safetensors_at(st, i)->name, "model.layers.1.") != NULL);
    kvcal_safetensors_close(st);
}

/* Qwen3-Next's scales under compressed-tensors' attention names (the
 * per-head ones, which keep them): sglang 0.5.23's loader of the model
 * fails on them, which validate-scales says */
static void validate_scales_says_sglang_fails_on_qwen3_next_attention_names(void)
{
    char args[1600], out[600], *text = NULL;
    snprintf(out, sizeof out, "%s", kvcal_test_path("hybrid_next_heads"));
    snprintf(args, sizeof args,
             "calibrate --model " GOLDEN
             "qwen3_next_gdn_moe_e8_top3_bf16 --dataset '%s' " SMALL
             " --granularity head --format checkpoint --out '%s'",
             kvcal_test_golden_ids(), out);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "validate-scales '%s'", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &text), 0);
    CU_ASSERT(text &&
              strstr(text, "model.layers.1.self_attn.k_scale: a self_attn name of "
                           "Qwen3NextForCausalLM: sglang 0.5.23 does not load the "
                           "model"));
    free(text);
}

/* The kvcal JSON marks the layers that cache nothing ("kv_cache": false),
 * reads them back, and the formats of every layer refuse the set; the HTML
 * report names those layers and warns of none of them */
static void kvcal_json_keeps_the_layers_without_cache(void)
{
    char args[1600], path[600], out[600], report[600];
    snprintf(path, sizeof path, "%s", kvcal_test_path("hybrid_scales.json"));
    snprintf(report, sizeof report, "%s", kvcal_test_path("hybrid_report.html"));
    snprintf(args, sizeof args,
             "calibrate --model " GOLDEN
             "qwen3_5_text_gdn_hybrid_bf16 --dataset '%s' " SMALL
             " --format kvcal --out '%s' --report '%s'",
             kvcal_test_golden_ids(), path, report);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    /* the report names the layers without cache and warns of none of them */
    char *html = kvcal_test_read_file(report, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(html);
    CU_ASSERT(strstr(html, "Layers 0, 2 cache nothing (a hybrid model's linear "
                           "attention)") != NULL);
    CU_ASSERT(strstr(html, "never saw a non-zero value; its scale") == NULL);
    free(html);
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(path, NULL, 0, &s), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_scales_uncached_layers(s), 2);
    for (int l = 0; l < 4; l++)
        CU_ASSERT_EQUAL(kvcal_scales_layer_cached(s, l), l == 1 || l == 3);
    kvcal_scales_destroy(s);
    snprintf(out, sizeof out, "%s", kvcal_test_path("hybrid_trtllm"));
    snprintf(args, sizeof args, "convert '%s' --to trtllm --out '%s'", path, out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("2 of the 4 layers cache nothing"));
}

/* inspect says what the layers are, and which hold no scale */
static void inspect_describes_the_linear_attention(void)
{
    char *text = NULL;
    CU_ASSERT_EQUAL(
        kvcal_test_run_kvcal("inspect " GOLDEN "qwen3_next_gdn_moe_e8_top3_bf16", &text),
        0);
    CU_ASSERT(text && strstr(text, "head_dim 32, output gated"));
    CU_ASSERT(text && strstr(text, "gated delta-net: 2 key heads of 16, 4 value heads of "
                                   "24, convolution of 4"));
    CU_ASSERT(text && strstr(text, "weights         BF16"));
    CU_ASSERT(text && strstr(text, "K and V in 1 of 4 layers; the other 3 "
                                   "(linear_attention) cache nothing"));
    free(text);
    /* its scales: the layers without cache named, no placeholder shown */
    char args[800];
    snprintf(args, sizeof args, "inspect '%s'",
             kvcal_test_golden_checkpoint_scales("qwen3_next_gdn_moe_e8_top3_bf16"));
    text = NULL;
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &text), 0);
    CU_ASSERT(text && strstr(text, "      0  linear attention: no K/V cache, no scales"));
    CU_ASSERT(text && strstr(text, "      3  linear attention: no K/V cache, no scales"));
    free(text);
}

/* A hybrid model's config.json with a layer kind its engines do not build
 * (a sliding layer between the delta-net ones): calibrate exits 1 naming
 * the file, the entry and the fix, and writes no output. */
static void calibrate_refuses_a_sliding_layer_in_a_hybrid_model_without_output(void)
{
    char dir[600], path[700], out[600], args[1600];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("hybrid_sliding"));
    snprintf(args, sizeof args, "cp -r " GOLDEN "qwen3_5_text_gdn_hybrid_bf16 '%s'", dir);
    CU_ASSERT_EQUAL_FATAL(system(args), 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *cfg = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(path, &cfg), KVCAL_OK);
    cJSON_AddNumberToObject(cfg, "sliding_window", 8);
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(cfg, "layer_types"), 1,
                             cJSON_CreateString("sliding_attention"));
    CU_ASSERT_EQUAL_FATAL(kvcal_json_write(path, cfg), KVCAL_OK);
    cJSON_Delete(cfg);
    snprintf(out, sizeof out, "%s", kvcal_test_path("hybrid_sliding.json"));
    snprintf(args, sizeof args,
             "calibrate --model '%s' --dataset '%s' " SMALL " --format kvcal --out '%s'",
             dir, kvcal_test_golden_ids(), out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    char needle[900];
    snprintf(needle, sizeof needle,
             "%s: field \"layer_types[1]\" is \"sliding_attention\", but transformers' "
             "and vLLM's qwen3_5_text build only \"linear_attention\" and "
             "\"full_attention\" layers; fix the entry",
             path);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(needle));
    FILE *f = fopen(out, "r");
    CU_ASSERT_PTR_NULL(f);
    if (f)
        fclose(f);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(convert_keeps_the_attention_layers_alone),
    KVCAL_TEST(kvcal_json_keeps_the_layers_without_cache),
    KVCAL_TEST(validate_scales_says_sglang_fails_on_qwen3_next_attention_names),
    KVCAL_TEST(calibrate_json_marks_the_layers_without_cache),
    KVCAL_TEST(inspect_describes_the_linear_attention),
    KVCAL_TEST(formats_of_every_layer_are_refused),
    KVCAL_TEST(calibrate_writes_the_attention_layers_scales_alone),
    KVCAL_TEST(validate_scales_flags_a_scale_of_a_layer_without_cache),
    KVCAL_TEST(eval_reports_the_attention_layers_alone),
    KVCAL_TEST(calibrate_refuses_a_sliding_layer_in_a_hybrid_model_without_output),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(hybrid_cli, KVCAL_NEEDS_NOTHING, tests)
