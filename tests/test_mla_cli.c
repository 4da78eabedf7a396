/* tests/test_mla_cli.c: the commands on the tiny DeepSeek-V2 and V3
 * checkpoints of tests/make_golden.py (multi-head latent attention): what
 * calibrate writes for the cached entry, what validate-scales says of MLA
 * files, which eval modes apply and what the fp8_ds_mla one costs. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"
#include "tests/test_util.h"

#define V2 "tests/fixtures/golden/deepseek_v2_mla_grouped_softmax_bf16"
#define V3 "tests/fixtures/golden/deepseek_v3_mla_qlora_grouped_sigmoid_bf16"
#define FP8_V3 "tests/fixtures/golden/fp8_deepseek_v3_fp8_block"
#define V32 "tests/fixtures/golden/deepseek_v32_dsa_topk64_grouped_sigmoid_bf16"
#define GLM5 "tests/fixtures/golden/glm_moe_dsa_topk64_sigmoid_bf16"
#define RUN " --num-samples 6 --seq-len 40 --quiet"

/* 6 documents of 48 token ids below the models' vocabulary of 128 */
static const char *ids_file(void)
{
    const char *path = kvcal_test_path("mla_ids.jsonl");
    char text[6 * 48 * 4 + 6 * 32], *p = text;
    for (int s = 0; s < 6; s++) {
        p += sprintf(p, "{\"input_ids\": [");
        for (int t = 0; t < 48; t++)
            p += sprintf(p, "%s%d", t ? ", " : "", (s * 53 + t * 29 + t * t) % 128);
        p += sprintf(p, "]}\n");
    }
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, text, (size_t)(p - text)), 0);
    return path;
}

static cJSON *load_json(const char *path)
{
    cJSON *root = NULL;
    return kvcal_json_load(path, &root) == KVCAL_OK ? root : NULL;
}

static double number(const cJSON *o, const char *key)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(n) ? n->valuedouble : NAN;
}

/* calibrates `model` into `out` (kvcal JSON); returns the exit code */
static int calibrate(const char *model, const char *out, const char *extra)
{
    char args[2048];
    snprintf(args, sizeof args,
             "calibrate --model %s --dataset '%s'" RUN " %s --out '%s'", model,
             ids_file(), extra, out);
    return kvcal_test_run_kvcal(args, NULL);
}

/* A layer of the kvcal JSON of an MLA model: one scale for K and V, set by
 * the larger of the entry's two parts' absmax, both reported. */
static void check_entry_scale(const cJSON *l)
{
    const double lat = number(l, "latent_absmax"), rope = number(l, "rope_absmax");
    const double k = number(l, "k_scale");
    CU_ASSERT(lat > 0.0 && rope > 0.0);
    CU_ASSERT_EQUAL(k, number(l, "v_scale"));
    CU_ASSERT(fabs(k * 448.0 - fmax(lat, rope)) <= 1e-6 * fmax(lat, rope));
}

/* One kv head of the entry (32 latent + 16 RoPE values); per layer one
 * scale for K and V, set by the larger of the two parts' absmax, both
 * reported; --granularity head gives the same (one head). */
static void calibrate_mla_writes_one_scale_per_entry_and_its_parts_absmax(void)
{
    const char *out = kvcal_test_path("mla_v3.json");
    CU_ASSERT_EQUAL_FATAL(calibrate(V3, out, "--granularity head"), 0);
    cJSON *root = load_json(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const cJSON *model = cJSON_GetObjectItem(root, "model");
    CU_ASSERT_EQUAL(number(model, "num_kv_heads"), 1);
    CU_ASSERT_EQUAL(number(model, "head_dim"), 48);
    const cJSON *mla = cJSON_GetObjectItem(root, "mla");
    CU_ASSERT_EQUAL(number(mla, "kv_lora_rank"), 32);
    CU_ASSERT_EQUAL(number(mla, "qk_rope_head_dim"), 16);
    const cJSON *layers = cJSON_GetObjectItem(root, "layers"), *l;
    CU_ASSERT_EQUAL(cJSON_GetArraySize(layers), 3);
    cJSON_ArrayForEach(l, layers)
    {
        check_entry_scale(l);
        CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(l, "k_scale_per_head")),
                        1);
        CU_ASSERT_EQUAL(
            cJSON_GetArrayItem(cJSON_GetObjectItem(l, "k_absmax"), 0)->valuedouble,
            fmax(number(l, "latent_absmax"), number(l, "rope_absmax")));
    }
    cJSON_Delete(root);
    char args[1024];
    snprintf(args, sizeof args, "validate-scales '%s' --model " V3 " --strict", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    /* the attention observer scores per-head K and V, which MLA caches not */
    CU_ASSERT_EQUAL(calibrate(V3, kvcal_test_path("never.json"), "--observer attention"),
                    1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("caches MLA latent entries"));
}

/* writes a copy of the kvcal JSON at src, edited by `edit`, to dst */
static void edited(const char *src, const char *dst, void (*edit)(cJSON *))
{
    cJSON *root = load_json(src);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    edit(root);
    char *text = cJSON_Print(root);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(dst, text, strlen(text)), 0);
    free(text);
    cJSON_Delete(root);
}

/* four kv heads, as a per-head file of the model's attention heads */
static void four_heads(cJSON *root)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "model"), "num_kv_heads",
                              cJSON_CreateNumber(4));
    cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(root, "layers"))
    {
        const char *keys[] = {"k_scale_per_head", "v_scale_per_head", "k_absmax",
                              "v_absmax"};
        for (int i = 0; i < 4; i++) {
            cJSON *a = cJSON_GetObjectItem(l, keys[i]);
            const double v = cJSON_GetArrayItem(a, 0)->valuedouble;
            for (int h = 1; h < 4; h++)
                cJSON_AddItemToArray(a, cJSON_CreateNumber(v));
        }
    }
}

static void other_rank(cJSON *root)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "mla"), "kv_lora_rank",
                              cJSON_CreateNumber(30));
}

static void no_mla(cJSON *root)
{
    cJSON_DeleteItemFromObject(root, "mla");
}

/* runs validate-scales FILE --model V2; 1 when it exits with rc and its
 * findings (stdout) hold `says` */
static int validate(const char *file, int rc, const char *says)
{
    char args[1024], *out = NULL;
    snprintf(args, sizeof args, "validate-scales '%s' --model " V2, file);
    const int got = kvcal_test_run_kvcal(args, &out);
    const int ok = got == rc && out && strstr(out, says);
    if (!ok)
        fprintf(stderr, "\nvalidate-scales %s: exit %d, wanted %d and \"%s\" in:\n%s",
                file, got, rc, says, out ? out : "");
    free(out);
    return ok;
}

/* validate-scales of MLA files: per-head scales and another model's entry
 * are errors, a file without its mla section a warning; checkpoint scales
 * are an error naming what vLLM does (k_scale 1.0); a legacy file is
 * sglang's RuntimeError. */
static void validate_scales_says_what_engines_do_with_mla_scales(void)
{
    const char *src = kvcal_test_path("mla_v2.json");
    CU_ASSERT_EQUAL_FATAL(calibrate(V2, src, ""), 0);
    char args[2048];
    const struct {
        void (*edit)(cJSON *);
        int rc;
        const char *says;
    } cases[] = {
        {four_heads, 1, "one kv head (MLAAttentionSpec num_kv_heads 1) and one k_scale"},
        {other_rank, 1, "kv_lora_rank 30, qk_rope_head_dim 16, but config.json has 32"},
        {no_mla, 0, "mla: missing for DeepseekV2ForCausalLM, an MLA model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *dst = kvcal_test_path("mla_edited.json");
        edited(src, dst, cases[i].edit);
        CU_ASSERT(validate(dst, cases[i].rc, cases[i].says));
    }
    const char *ck = kvcal_test_path("mla_ck");
    snprintf(args, sizeof args, "convert '%s' --to checkpoint --model " V2 " --out '%s'",
             src, ck);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("loads no checkpoint KV scale into an MLA"));
    CU_ASSERT(validate(ck, 1, "its cache runs with k_scale 1.0"));
    /* the same names with a scale per attention head ([4, 1, 1]) */
    static const float four[4] = {0.01f, 0.01f, 0.01f, 0.01f};
    char names[6][64];
    kvcal_tensor_out per_head[6];
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.self_attn.%c_scale", i / 2,
                 i % 2 ? 'v' : 'k');
        per_head[i] = (kvcal_tensor_out){names[i], KVCAL_DTYPE_F32, 3, {4, 1, 1}, four};
    }
    char path[700];
    snprintf(path, sizeof path, "%s/kv_scales.safetensors", ck);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(path, per_head, 6, NULL), KVCAL_OK);
    CU_ASSERT(validate(ck, 1, "these scales are per head, which no MLA layer has"));
    const char *legacy = kvcal_test_path("mla_legacy.json");
    snprintf(args, sizeof args, "convert '%s' --to legacy --model " V2 " --out '%s'", src,
             legacy);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT(validate(legacy, 1, "its class has no load_kv_cache_scales"));
}

static const cJSON *mode_of(const cJSON *root, const char *name)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(root, "modes"))
    {
        if (!strcmp(cJSON_GetObjectItem(m, "mode")->valuestring, name))
            return m;
    }
    return NULL;
}

/* --modes all on an MLA model: the e4m3 modes on the entry and fp8-ds-mla;
 * the formats no MLA backend caches and the FP8 query left out. The entry
 * is 48 values (96 bytes in bf16) in each of 3 layers; fp8_ds_mla stores 32
 * e4m3 latent values, one fp32 tile scale, 16 bf16 RoPE values, and errs
 * less than one static e4m3 scale over the whole entry. */
static void eval_modes_all_on_mla_are_its_caches_and_fp8_ds_mla_is_656_bytes_shaped(void)
{
    const char *scales = kvcal_test_path("mla_eval_scales.json");
    CU_ASSERT_EQUAL_FATAL(calibrate(V2, scales, ""), 0);
    char args[2048], *out = NULL;
    snprintf(args, sizeof args,
             "eval --model " V2 " --dataset '%s' --scales '%s' --num-samples 6 "
             "--seq-len 40 --modes all --json",
             ids_file(), scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    cJSON *root = out ? cJSON_Parse(out) : NULL;
    free(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const struct {
        const char *name;
        double bytes;
    } want[] = {{"baseline", 3 * 96},
                {"static-tensor", 3 * 48},
                {"static-head", 3 * 48},
                {"unit", 3 * 48},
                {"dynamic", 3 * 52},
                {"first-batch", 3 * 48},
                {"fp8-ds-mla", 3 * (32 + 4 + 32)}};
    const int n = (int)(sizeof want / sizeof *want);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(root, "modes")), n);
    for (int i = 0; i < n; i++) {
        const cJSON *m = mode_of(root, want[i].name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_EQUAL(number(m, "kv_bytes_per_token"), want[i].bytes);
        CU_ASSERT(isfinite(number(m, "perplexity")));
    }
    const cJSON *ds = cJSON_GetObjectItem(mode_of(root, "fp8-ds-mla"), "layers");
    const cJSON *st = cJSON_GetObjectItem(mode_of(root, "static-tensor"), "layers");
    for (int l = 0; l < 3; l++) {
        const cJSON *a = cJSON_GetArrayItem(ds, l), *b = cJSON_GetArrayItem(st, l);
        CU_ASSERT(number(a, "k_sqnr_db") > number(b, "k_sqnr_db") + 1.0);
        CU_ASSERT_EQUAL(number(a, "k_sqnr_db"), number(a, "v_sqnr_db"));
    }
    cJSON_Delete(root);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("int8-static-tensor left out: no MLA backend"));
    CU_ASSERT(
        kvcal_test_kvcal_stderr_has("fp8-attention left out: an MLA model's query"));
}

/* named, the modes that do not apply are refused: fp8-ds-mla elsewhere, the
 * FP8 query and int8 on MLA */
static void eval_refuses_modes_that_do_not_apply_to_mla_or_to_other_models(void)
{
    const char *scales = kvcal_test_path("mla_v3_scales.json");
    CU_ASSERT_EQUAL_FATAL(calibrate(V3, scales, ""), 0);
    char args[2048];
    const struct {
        const char *model, *mode, *says;
    } cases[] = {
        {V3, "fp8-attention", "absorbed query"},
        {V3, "int8-static-tensor", "no MLA backend of vLLM 0.32.0 caches this format"},
        {"models/stories260K/stories260K.bin", "fp8-ds-mla",
         "it is the cache of MLA models"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(args, sizeof args,
                 "eval --model %s --dataset '%s' %s%s%s" RUN " --modes %s",
                 cases[i].model, ids_file(), i < 2 ? "--scales '" : "",
                 i < 2 ? scales : "", i < 2 ? "'" : "", cases[i].mode);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
        CU_ASSERT(kvcal_test_kvcal_stderr_has(cases[i].says));
    }
}

/* inspect names the cache: the latent entry and its sizes */
static void inspect_mla_model_describes_the_latent_entry_and_grouped_routing(void)
{
    char *out = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal("inspect " V2, &out), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT(strstr(out, "MLA (kv_lora_rank 32, rope 16), 4 heads, qk head_dim 40 "
                          "(nope 24 + rope 16), v head_dim 20") != NULL);
    CU_ASSERT(strstr(out, "softmax top-3 in 4 groups (the best 2 open) x1.5") != NULL);
    CU_ASSERT(strstr(out, "one latent entry per token per layer (32 + 16 values)") !=
              NULL);
    free(out);
}

/* DeepSeek's released FP8 format (the fp8 method's e4m3 blocks with
 * weight_scale_inv, kv_b_proj and the experts among them) calibrates: per
 * layer one scale for the entry, and the file validates against the
 * model. */
static void calibrate_runs_block_wise_fp8_deepseek_checkpoints(void)
{
    const char *out = kvcal_test_path("mla_fp8.json");
    remove(out);
    CU_ASSERT_EQUAL_FATAL(calibrate(FP8_V3, out, ""), 0);
    cJSON *root = load_json(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const cJSON *layers = cJSON_GetObjectItem(root, "layers"), *l;
    CU_ASSERT_EQUAL(cJSON_GetArraySize(layers), 2);
    cJSON_ArrayForEach(l, layers) check_entry_scale(l);
    cJSON_Delete(root);
    char args[1024];
    snprintf(args, sizeof args, "validate-scales '%s' --model " FP8_V3 " --strict", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
}

/* --q-scale and --signed-range have no meaning for MLA's one latent entry:
 * refused in one line, nothing written. */
static void calibrate_refuses_q_scale_and_signed_range_on_mla(void)
{
    const char *out = kvcal_test_path("mla_q.json");
    remove(out);
    CU_ASSERT_EQUAL(calibrate(V2, out, "--q-scale"), 1);
    CU_ASSERT(
        kvcal_test_kvcal_stderr_has("--q-scale (vLLM quantizes MLA's absorbed query"));
    CU_ASSERT_EQUAL(calibrate(V3, out, "--signed-range"), 1);
    CU_ASSERT(
        kvcal_test_kvcal_stderr_has("--signed-range (no engine caches MLA in int8)"));
    CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0);
}

/* DeepSeek-V3.2 and GLM-5 (index_topk 64 here): calibrate and eval run
 * samples up to index_topk tokens, say that the engines' fp8 cache of them
 * is fp8_ds_mla, and refuse a longer --seq-len in one line, writing nothing;
 * inspect names the sparse attention. */
static void sparse_attention_models_run_within_index_topk(void)
{
    const char *out = kvcal_test_path("mla_dsa.json");
    const char *const models[] = {V32, GLM5};
    for (int i = 0; i < 2; i++) {
        char args[2048], *text = NULL;
        remove(out);
        snprintf(
            args, sizeof args,
            "calibrate --model %s --dataset '%s' --num-samples 6 --seq-len 40 --out '%s'",
            models[i], ids_file(), out);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
        CU_ASSERT(kvcal_test_kvcal_stderr_has("keep its fp8 cache as fp8_ds_mla"));
        remove(out);
        snprintf(
            args, sizeof args,
            "calibrate --model %s --dataset '%s' --num-samples 6 --seq-len 65 --quiet "
            "--out '%s'",
            models[i], ids_file(), out);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
        CU_ASSERT(kvcal_test_kvcal_stderr_has("--seq-len 65: ") &&
                  kvcal_test_kvcal_stderr_has("keeps 64 keys a query "
                                              "(index_topk)"));
        CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0);
        snprintf(args, sizeof args,
                 "eval --model %s --dataset '%s' --num-samples 6 --seq-len 65 --quiet",
                 models[i], ids_file());
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
        CU_ASSERT(kvcal_test_kvcal_stderr_has("use --seq-len 64 or less"));
        snprintf(args, sizeof args, "inspect %s", models[i]);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &text), 0);
        CU_ASSERT(text && strstr(text, "sparse: 64 keys a query"));
        free(text);
    }
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(calibrate_mla_writes_one_scale_per_entry_and_its_parts_absmax),
    KVCAL_TEST(validate_scales_says_what_engines_do_with_mla_scales),
    KVCAL_TEST(eval_modes_all_on_mla_are_its_caches_and_fp8_ds_mla_is_656_bytes_shaped),
    KVCAL_TEST(eval_refuses_modes_that_do_not_apply_to_mla_or_to_other_models),
    KVCAL_TEST(inspect_mla_model_describes_the_latent_entry_and_grouped_routing),
    KVCAL_TEST(calibrate_runs_block_wise_fp8_deepseek_checkpoints),
    KVCAL_TEST(calibrate_refuses_q_scale_and_signed_range_on_mla),
    KVCAL_TEST(sparse_attention_models_run_within_index_topk),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(mla_cli, KVCAL_NEEDS_NOTHING, tests)
