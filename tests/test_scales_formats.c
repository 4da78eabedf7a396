/* tests/test_scales_formats.c: the formats engines read besides
 * compressed-tensors (ModelOpt, Quark, the single kv_scale, TensorRT-LLM):
 * each written, read back to the same floats, validated as its engine
 * reads it, and refused for a model whose loader would not use it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/scales.h"
#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"
#include "io/scales/scales_io.h"
#include "tests/test_util.h"

// --- helpers ----------------------------------------------------------------------

/* A tiny model directory (2 layers, 8 heads, 4 kv heads) whose config.json
 * carries `extra` (a JSON member list or NULL); `hq`, when not NULL, is
 * written as its hf_quant_config.json. */
static const char *model_dir(const char *name, const char *extra, const char *hq)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path(name));
    mkdir(dir, 0755);
    char path[600], text[1400];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(text, sizeof text,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
             "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
             "\"num_key_value_heads\": 4, \"vocab_size\": 512%s%s}",
             extra ? ", " : "", extra ? extra : "");
    kvcal_test_write_file(path, text, strlen(text));
    if (hq) {
        snprintf(path, sizeof path, "%s/hf_quant_config.json", dir);
        kvcal_test_write_file(path, hq, strlen(hq));
    }
    return dir;
}

/* Per-head K and V that differ by head, layer and tensor. */
static kvcal_scales_t *make_set(void)
{
    kvcal_scales_t *s = NULL;
    if (kvcal_scales_create(2, 4, &s))
        return NULL;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 4; h++)
            kvcal_scales_set_head(s, l, h, 0.011f * (h + 1) + 0.003f * l,
                                  0.007f * (4 - h) + 0.002f * l);
    kvcal_scales_set_model(s, "LlamaForCausalLM", "llama", 8, 8);
    return s;
}

/* The value of tensor `name` in dir/file (1 value), -1 when absent. */
static float tensor_value(const char *dir, const char *file, const char *name)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    kvcal_checkpoint_t *ck = NULL;
    float v = -1.0f;
    if (kvcal_checkpoint_open(p, &ck))
        return -1.0f;
    const kvcal_tensor_info *t = kvcal_checkpoint_find(ck, name);
    if (t && t->numel == 1)
        kvcal_tensor_to_f32(t, &v);
    kvcal_checkpoint_close(ck);
    return v;
}

static kvcal_report_t *validate(const char *path)
{
    kvcal_report_t *rep = NULL;
    CU_ASSERT_EQUAL(kvcal_scales_validate_file(path, NULL, 0, &rep), KVCAL_OK);
    return rep;
}

/* 1 when some finding's message or consequence contains text. */
static int has_finding(const kvcal_report_t *rep, const char *text)
{
    for (int i = 0; i < kvcal_report_count(rep); i++) {
        kvcal_finding f;
        kvcal_report_get(rep, i, &f);
        if (strstr(f.message, text) || strstr(f.consequence, text))
            return 1;
    }
    return 0;
}

#define MODELOPT_QC                                                                      \
    "\"quantization_config\": {\"quant_method\": \"modelopt\", \"quant_algo\": "         \
    "\"FP8\", "                                                                          \
    "\"ignore\": [\"lm_head\"]}"

// --- ModelOpt ---------------------------------------------------------------------

static void modelopt_export_writes_proj_names_and_fp8_kv_and_reads_back(void)
{
    const char *model = model_dir("mo_model", MODELOPT_QC, NULL);
    char m[512], out[600];
    snprintf(m, sizeof m, "%s", model);
    snprintf(out, sizeof out, "%s", kvcal_test_path("mo_out"));
    kvcal_scales_t *s = make_set(), *r = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_MODELOPT, out, m, 0),
                          KVCAL_OK);
    float k, v;
    kvcal_scales_get_tensor(s, 1, &k, &v);
    CU_ASSERT_EQUAL(tensor_value(out, KVCAL_CHECKPOINT_SHARD,
                                 "model.layers.1.self_attn.k_proj.k_scale"),
                    k);
    CU_ASSERT_EQUAL(tensor_value(out, KVCAL_CHECKPOINT_SHARD,
                                 "model.layers.1.self_attn.v_proj.v_scale"),
                    v);
    CU_ASSERT_EQUAL(
        tensor_value(out, KVCAL_CHECKPOINT_SHARD, "model.layers.1.self_attn.k_scale"),
        -1.0f);
    char p[700];
    cJSON *root = NULL;
    snprintf(p, sizeof p, "%s/config.json", out);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(p, &root), KVCAL_OK);
    cJSON *qc = cJSON_GetObjectItem(root, "quantization_config");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(qc, "quant_method")->valuestring,
                           "modelopt");
    cJSON *ks = cJSON_GetObjectItem(qc, "kv_cache_scheme");
    CU_ASSERT(cJSON_IsFalse(cJSON_GetObjectItem(ks, "dynamic")));
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(ks, "num_bits")->valuedouble, 8);
    cJSON_Delete(root);
    kvcal_report_t *rep = validate(out);
    CU_ASSERT_EQUAL(kvcal_report_format(rep), KVCAL_FORMAT_MODELOPT);
    CU_ASSERT_EQUAL(kvcal_report_count(rep), 0);
    kvcal_report_destroy(rep);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(out, NULL, 0, &r), KVCAL_OK);
    float rk, rv;
    kvcal_scales_get_head(r, 1, 3, &rk, &rv);
    CU_ASSERT_EQUAL(rk, k);
    CU_ASSERT_EQUAL(rv, v);
    CU_ASSERT_EQUAL(kvcal_scales_granularity(r), KVCAL_GRANULARITY_TENSOR);
    kvcal_scales_destroy(r);
    kvcal_scales_destroy(s);
}

static void modelopt_export_sets_fp8_kv_in_hf_quant_config(void)
{
    const char *hq =
        "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.29.0\"}, "
        "\"quantization\": {\"quant_algo\": \"FP8\", \"kv_cache_quant_algo\": "
        "null, \"exclude_modules\": [\"lm_head\"]}}";
    const char *model = model_dir("mo_hq_model", NULL, hq);
    char m[512], out[600], p[700];
    snprintf(m, sizeof m, "%s", model);
    snprintf(out, sizeof out, "%s", kvcal_test_path("mo_hq_out"));
    kvcal_scales_t *s = make_set();
    const char *names[4];
    CU_ASSERT_EQUAL(kvcal_scales_checkpoint_files(KVCAL_FORMAT_MODELOPT, m, names, 4), 4);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_MODELOPT, out, m, 0),
                          KVCAL_OK);
    cJSON *root = NULL;
    snprintf(p, sizeof p, "%s/hf_quant_config.json", out);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(p, &root), KVCAL_OK);
    cJSON *q = cJSON_GetObjectItem(root, "quantization");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(q, "kv_cache_quant_algo")->valuestring,
                           "FP8");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(q, "exclude_modules")), 1);
    cJSON_Delete(root);
    snprintf(p, sizeof p, "%s/config.json", out);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(p, &root), KVCAL_OK);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(root, "quantization_config"));
    cJSON_Delete(root);
    kvcal_report_t *rep = validate(out);
    CU_ASSERT_EQUAL(kvcal_report_format(rep), KVCAL_FORMAT_MODELOPT);
    CU_ASSERT_EQUAL(kvcal_report_count(rep), 0);
    kvcal_report_destroy(rep);
    kvcal_scales_destroy(s);
}

static void modelopt_flags_fp8_cast_and_the_clamp_to_one(void)
{
    const char *model = model_dir("mo_unit_model", MODELOPT_QC, NULL);
    char m[512], out[600];
    snprintf(m, sizeof m, "%s", model);
    kvcal_scales_t *s = make_set();
    for (int l = 0; l < 2; l++)
        kvcal_scales_set_layer(s, l, 1.0f, 1.0f);
    snprintf(out, sizeof out, "%s", kvcal_test_path("mo_cast"));
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_MODELOPT, out, m, 0),
                          KVCAL_OK);
    kvcal_report_t *rep = validate(out);
    CU_ASSERT(has_finding(rep, "ModelOpt fp8_cast"));
    CU_ASSERT(!has_finding(rep, "clamp"));
    CU_ASSERT(kvcal_report_passes(rep, 0) && !kvcal_report_passes(rep, 1));
    kvcal_report_destroy(rep);
    kvcal_scales_set_layer(s, 1, 1.5f, 1.0f);
    snprintf(out, sizeof out, "%s", kvcal_test_path("mo_clamp"));
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_MODELOPT, out, m, 0),
                          KVCAL_OK);
    rep = validate(out);
    CU_ASSERT(has_finding(rep, "ModelOpt's clamp to >= 1.0"));
    CU_ASSERT(!has_finding(rep, "fp8_cast"));
    kvcal_report_destroy(rep);
    /* one scale below 1.0: neither */
    kvcal_scales_set_layer(s, 0, 0.5f, 1.0f);
    snprintf(out, sizeof out, "%s", kvcal_test_path("mo_none"));
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_MODELOPT, out, m, 0),
                          KVCAL_OK);
    rep = validate(out);
    CU_ASSERT(!has_finding(rep, "clamp") && !has_finding(rep, "fp8_cast"));
    kvcal_report_destroy(rep);
    kvcal_scales_destroy(s);
}

static void formats_refuse_a_model_whose_loader_would_not_read_them(void)
{
    const char *model = model_dir("plain_model", NULL, NULL);
    char m[512], out[600];
    snprintf(m, sizeof m, "%s", model);
    kvcal_scales_t *s = make_set();
    const kvcal_format f[] = {KVCAL_FORMAT_MODELOPT, KVCAL_FORMAT_QUARK,
                              KVCAL_FORMAT_KV_SCALE};
    for (int i = 0; i < 3; i++) {
        snprintf(out, sizeof out, "%s", kvcal_test_path("refused"));
        CU_ASSERT_EQUAL(kvcal_scales_write(s, f[i], out, m, 0), KVCAL_ERR_UNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "write the checkpoint format"));
        char p[700];
        snprintf(p, sizeof p, "%s/" KVCAL_CHECKPOINT_SHARD, out);
        CU_ASSERT_EQUAL(access(p, F_OK), -1);
    }
    /* a Quark model with no FP8 KV cache declared */
    model = model_dir("quark_nokv",
                      "\"quantization_config\": {\"quant_method\": "
                      "\"quark\", \"export\": {\"kv_cache_group\": []}}",
                      NULL);
    snprintf(m, sizeof m, "%s", model);
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_QUARK, out, m, 0),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "kv_cache_group"));
    kvcal_scales_destroy(s);
}

// --- Quark, kv_scale --------------------------------------------------------------

#define QUARK_QC                                                                         \
    "\"quantization_config\": {\"quant_method\": \"quark\", \"export\": "                \
    "{\"kv_cache_group\": [\"*k_proj\", \"*v_proj\"]}, \"layer_quant_config\": "         \
    "{\"*k_proj\": {\"output_tensors\": {\"dtype\": \"fp8_e4m3\", \"qscheme\": "         \
    "\"per_tensor\"}}, \"*v_proj\": {\"output_tensors\": {\"dtype\": \"fp8_e4m3\", "     \
    "\"qscheme\": \"per_tensor\"}}}}"

static void quark_export_writes_output_scales_with_q_and_reads_back(void)
{
    const char *model = model_dir("quark_model", QUARK_QC, NULL);
    char m[512], out[600];
    snprintf(m, sizeof m, "%s", model);
    snprintf(out, sizeof out, "%s", kvcal_test_path("quark_out"));
    kvcal_scales_t *s = make_set(), *r = NULL;
    kvcal_scales_set_q(s, 0, 0.125f);
    kvcal_scales_set_q(s, 1, 0.25f);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_QUARK, out, m, 0), KVCAL_OK);
    float k, v;
    kvcal_scales_get_tensor(s, 0, &k, &v);
    CU_ASSERT_EQUAL(tensor_value(out, KVCAL_CHECKPOINT_SHARD,
                                 "model.layers.0.self_attn.k_proj.output_scale"),
                    k);
    CU_ASSERT_EQUAL(tensor_value(out, KVCAL_CHECKPOINT_SHARD,
                                 "model.layers.1.self_attn.q_proj.output_scale"),
                    0.25f);
    kvcal_report_t *rep = validate(out);
    CU_ASSERT_EQUAL(kvcal_report_format(rep), KVCAL_FORMAT_QUARK);
    CU_ASSERT_EQUAL(kvcal_report_count(rep), 0);
    kvcal_report_destroy(rep);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(out, NULL, 0, &r), KVCAL_OK);
    float q;
    kvcal_scales_get_q(r, 1, &q);
    CU_ASSERT_EQUAL(q, 0.25f);
    float rk, rv;
    kvcal_scales_get_head(r, 0, 2, &rk, &rv);
    CU_ASSERT(rk == k && rv == v);
    kvcal_scales_destroy(r);
    kvcal_scales_destroy(s);
}

static void kv_scale_export_holds_max_of_k_and_v(void)
{
    const char *model = model_dir("fp8_model",
                                  "\"quantization_config\": {\"quant_method\": \"fp8\", "
                                  "\"activation_scheme\": \"static\"}",
                                  NULL);
    char m[512], out[600];
    snprintf(m, sizeof m, "%s", model);
    snprintf(out, sizeof out, "%s", kvcal_test_path("kvs_out"));
    kvcal_scales_t *s = make_set(), *r = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_KV_SCALE, out, m, 0),
                          KVCAL_OK);
    for (int l = 0; l < 2; l++) {
        float k, v;
        char name[64];
        kvcal_scales_get_tensor(s, l, &k, &v);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.kv_scale", l);
        CU_ASSERT_EQUAL(tensor_value(out, KVCAL_CHECKPOINT_SHARD, name), k > v ? k : v);
    }
    kvcal_report_t *rep = validate(out);
    CU_ASSERT_EQUAL(kvcal_report_format(rep), KVCAL_FORMAT_KV_SCALE);
    CU_ASSERT_EQUAL(kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR), 0);
    kvcal_report_destroy(rep);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(out, NULL, 0, &r), KVCAL_OK);
    float k, v;
    kvcal_scales_get_tensor(r, 1, &k, &v);
    CU_ASSERT_EQUAL(k, v);
    kvcal_scales_destroy(r);
    kvcal_scales_destroy(s);
}

// --- TensorRT-LLM -----------------------------------------------------------------

static void trtllm_export_writes_every_rank_and_reads_back(void)
{
    char out[600];
    snprintf(out, sizeof out, "%s", kvcal_test_path("trt_out"));
    kvcal_scales_t *s = make_set(), *r = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_TRTLLM, out, NULL, 2),
                          KVCAL_OK);
    float k, v;
    kvcal_scales_get_tensor(s, 1, &k, &v);
    for (int rank = 0; rank < 2; rank++) {
        char file[32];
        snprintf(file, sizeof file, "rank%d.safetensors", rank);
        CU_ASSERT_EQUAL(
            tensor_value(out, file,
                         "transformer.layers.1.attention.kv_cache_scaling_factor"),
            k > v ? k : v);
    }
    kvcal_report_t *rep = validate(out);
    CU_ASSERT_EQUAL(kvcal_report_format(rep), KVCAL_FORMAT_TRTLLM);
    CU_ASSERT_EQUAL(kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR), 0);
    kvcal_report_destroy(rep);
    CU_ASSERT_EQUAL(kvcal_scales_validate_file(out, NULL, 4, &rep), KVCAL_OK);
    CU_ASSERT(has_finding(rep, "2 ranks but tp 4"));
    kvcal_report_destroy(rep);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(out, NULL, 0, &r), KVCAL_OK);
    float rk, rv;
    kvcal_scales_get_tensor(r, 1, &rk, &rv);
    CU_ASSERT(rk == (k > v ? k : v) && rv == rk);
    kvcal_scales_destroy(r);
    kvcal_scales_destroy(s);
}

// --- architectures an engine reads no scales for ----------------------------------

/* sglang 0.5.23 refuses a legacy file at start for a model class without
 * load_kv_cache_scales (Qwen3.5 here), fails or ignores it where the class
 * hands it to a model class without one (Llama 4, GLM-5 Next); make
 * test-engines checks the lists against every architecture of the
 * installed sglang. */
static void legacy_file_is_refused_for_an_architecture_sglang_cannot_load_it_for(void)
{
    const char *json = "{\"model_type\": \"llama\", \"kv_cache\": {\"dtype\": "
                       "\"float8_e4m3fn\", \"scaling_factor\": {\"0\": {\"0\": 0.02, "
                       "\"1\": 0.03}}}}";
    const char *path = kvcal_test_path("arch_legacy.json");
    char file[600];
    snprintf(file, sizeof file, "%s", path);
    kvcal_test_write_file(file, json, strlen(json));
    const char *model = model_dir("arch_llama", NULL, NULL);
    kvcal_report_t *rep = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_validate_file(file, model, 1, &rep), KVCAL_OK);
    CU_ASSERT_TRUE(kvcal_report_passes(rep, 1));
    kvcal_report_destroy(rep);
    char dir[512], p[600];
    snprintf(dir, sizeof dir, "%s", model_dir("arch_qwen35", NULL, NULL));
    snprintf(p, sizeof p, "%s/config.json", dir);
    const char *cfg = "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"model_type\": "
                      "\"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
                      "\"vocab_size\": 512}";
    kvcal_test_write_file(p, cfg, strlen(cfg));
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_validate_file(file, dir, 1, &rep), KVCAL_OK);
    CU_ASSERT_FALSE(kvcal_report_passes(rep, 0));
    CU_ASSERT(has_finding(rep, "no load_kv_cache_scales"));
    kvcal_report_destroy(rep);
    /* Llama 4's class has the method but hands the file to its model,
     * whose class has none: sglang fails at start too; GLM-5 Next's asks
     * first and keeps every scale at 1.0 */
    static const struct {
        const char *arch, *finding;
    } handed[] = {{"Llama4ForCausalLM", "AttributeError"},
                  {"Glm5NextForConditionalGeneration", "every scale stays 1.0"}};
    for (size_t i = 0; i < sizeof handed / sizeof handed[0]; i++) {
        char c[512];
        snprintf(c, sizeof c,
                 "{\"architectures\": [\"%s\"], \"model_type\": \"llama\", "
                 "\"hidden_size\": 64, \"num_hidden_layers\": 2, "
                 "\"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
                 "\"vocab_size\": 512}",
                 handed[i].arch);
        kvcal_test_write_file(p, c, strlen(c));
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_validate_file(file, dir, 1, &rep), KVCAL_OK);
        CU_ASSERT_FALSE(kvcal_report_passes(rep, 0));
        CU_ASSERT(has_finding(rep, handed[i].finding));
        kvcal_report_destroy(rep);
    }
}

// --- configs and files vLLM refuses or reads otherwise ------------------------------

/* Writes dir/file holding, for layers 0 and 1, "model.layers.<l>.self_attn.<suffix>"
 * of each suffix (NULL-terminated), f32 of `numel` values equal to value + l / 1000,
 * shape [1] or [numel, 1, 1]. */
static void write_scales(const char *dir, const char *file, const char *const *suffixes,
                         int numel, float value)
{
    kvcal_tensor_out t[16];
    char names[16][128];
    float data[2][64];
    int n = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < numel; i++)
            data[l][i] = value + 0.001f * l;
    for (int l = 0; l < 2; l++)
        for (const char *const *x = suffixes; *x && n < 16; x++, n++) {
            snprintf(names[n], sizeof names[n], "model.layers.%d.self_attn.%s", l, *x);
            t[n] = (kvcal_tensor_out){
                names[n], KVCAL_DTYPE_F32, numel == 1 ? 1 : 3, {numel, 1, 1}, data[l]};
        }
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(p, t, n, NULL), KVCAL_OK);
}

static const char *const kv_names[] = {"k_scale", "v_scale", NULL};

/* 1 when validating dir finds an error whose message or consequence has text. */
static int refused_with(const char *dir, const char *text)
{
    kvcal_report_t *rep = validate(dir);
    int hit = rep && !kvcal_report_passes(rep, 0) && has_finding(rep, text);
    kvcal_report_destroy(rep);
    return hit;
}

static void validate_refuses_fp8_and_modelopt_configs_vllm_cannot_start_with(void)
{
    /* Fp8Config.from_config: activation_scheme required, static or dynamic */
    const char *d = model_dir("fp8_no_act",
                              "\"quantization_config\": {\"quant_method\": "
                              "\"fp8\"}",
                              NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, kv_names, 1, 0.01f);
    CU_ASSERT(refused_with(d, "Cannot find any of ['activation_scheme']"));
    d = model_dir("fp8_act_bad",
                  "\"quantization_config\": {\"quant_method\": \"fp8\", "
                  "\"activation_scheme\": \"per_token\"}",
                  NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, kv_names, 1, 0.01f);
    CU_ASSERT(refused_with(d, "Unsupported activation scheme"));
    d = model_dir("fp8_act_ok",
                  "\"quantization_config\": {\"quant_method\": \"fp8\", "
                  "\"activation_scheme\": \"dynamic\"}",
                  NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, kv_names, 1, 0.01f);
    kvcal_report_t *rep = validate(d);
    CU_ASSERT(kvcal_report_passes(rep, 0));
    kvcal_report_destroy(rep);
    /* ModelOptQuantConfigBase.from_config: quant_algo required, one of QUANT_ALGOS */
    static const char *const mo[] = {"k_proj.k_scale", "v_proj.v_scale", NULL};
    d = model_dir("mo_no_algo",
                  "\"quantization_config\": {\"quant_method\": "
                  "\"modelopt\", \"kv_cache_quant_algo\": \"FP8\"}",
                  NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, mo, 1, 0.01f);
    CU_ASSERT(refused_with(d, "Missing 'quant_algo'"));
    d = model_dir("mo_nested_no_algo",
                  "\"quantization_config\": {\"quant_method\": \"modelopt\", "
                  "\"quantization\": {\"kv_cache_quant_algo\": \"FP8\"}}",
                  NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, mo, 1, 0.01f);
    CU_ASSERT(refused_with(d, "Missing 'quant_algo'"));
    d = model_dir("mo_algo_awq",
                  "\"quantization_config\": {\"quant_method\": "
                  "\"modelopt\", \"quant_algo\": \"W4A8_AWQ\", "
                  "\"kv_cache_quant_algo\": \"FP8\"}",
                  NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, mo, 1, 0.01f);
    CU_ASSERT(refused_with(d, "QUANT_ALGOS"));
    d = model_dir("mo_algo_lower",
                  "\"quantization_config\": {\"quant_method\": "
                  "\"modelopt\", \"quant_algo\": \"fp8_pb_wo\", "
                  "\"kv_cache_quant_algo\": \"FP8\"}",
                  NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, mo, 1, 0.01f);
    rep = validate(d);
    CU_ASSERT(kvcal_report_passes(rep, 0));
    kvcal_report_destroy(rep);
}

#define CT_TENSOR                                                                        \
    "\"quantization_config\": {\"quant_method\": \"compressed-tensors\", "               \
    "\"config_groups\": {}, \"kv_cache_scheme\": {\"num_bits\": 8, \"type\": "           \
    "\"float\", \"strategy\": \"tensor\", \"dynamic\": false, \"symmetric\": true}}"

static void validate_refuses_quark_q_and_softmax_names_other_configs_do_not_map(void)
{
    static const char *const q[] = {"k_scale", "v_scale", "q_proj.output_scale", NULL};
    static const char *const prob[] = {"k_scale", "v_scale", "prob_output_scale", NULL};
    const char *d = model_dir("ct_q_output", CT_TENSOR, NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, q, 1, 0.01f);
    CU_ASSERT(refused_with(d, "qkv_proj.output_scale"));
    d = model_dir("ct_prob_output", CT_TENSOR, NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, prob, 1, 0.01f);
    CU_ASSERT(refused_with(d, "prob_output_scale"));
    /* fp8 maps both (Fp8Config.get_cache_scale_mapper) */
    d = model_dir("fp8_prob_output",
                  "\"quantization_config\": {\"quant_method\": "
                  "\"fp8\", \"activation_scheme\": \"static\"}",
                  NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, prob, 1, 0.01f);
    kvcal_report_t *rep = validate(d);
    CU_ASSERT(kvcal_report_passes(rep, 0));
    kvcal_report_destroy(rep);
}

/* vLLM's base get_cache_scale_mapper (quantization/base_config.py) renames a
 * fused-QKV model's self_attn.qkv_proj.k_scale / v_scale (ModelOpt's export
 * of Phi-3) to the attention's, under compressed-tensors and fp8 alike;
 * sglang's LlamaForCausalLM (maybe_remap_kv_scale_name) finds no
 * qkv_proj.attn.k_scale and skips them: a warning naming sglang. */
static void validate_reads_fused_qkv_proj_names_vllm_maps(void)
{
    static const char *const qkv[] = {"qkv_proj.k_scale", "qkv_proj.v_scale", NULL};
    const char *const configs[] = {CT_TENSOR,
                                   "\"quantization_config\": {\"quant_method\": \"fp8\", "
                                   "\"activation_scheme\": \"static\"}"};
    for (int c = 0; c < 2; c++) {
        const char *d = model_dir(c ? "fp8_qkv_names" : "ct_qkv_names", configs[c], NULL);
        write_scales(d, KVCAL_CHECKPOINT_SHARD, qkv, 1, 0.01f);
        kvcal_report_t *rep = validate(d);
        CU_ASSERT(kvcal_report_passes(rep, 0));
        CU_ASSERT(!has_finding(rep, "no k_scale / v_scale tensor"));
        CU_ASSERT(has_finding(rep, "sglang 0.5.23 skips it"));
        kvcal_report_destroy(rep);
        kvcal_scales_t *r = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(d, NULL, 0, &r), KVCAL_OK);
        float k, v;
        kvcal_scales_get_tensor(r, 1, &k, &v);
        CU_ASSERT_EQUAL(k, 0.011f);
        CU_ASSERT_EQUAL(v, 0.011f);
        kvcal_scales_destroy(r);
    }
}

/* The qkqkv_proj spelling (a stacked mapping's v_proj -> qkv_proj applied to
 * qkv_proj), which vLLM maps like qkv_proj: base_config.py
 * get_cache_scale_mapper (regex \.self_attn\.qk(?:qk)?v_proj\.([kv])_scale$)
 * and weight_utils.py maybe_remap_kv_scale_name ("Qwen3 MoE format"). Read
 * under compressed-tensors and fp8, with sglang's LlamaForCausalLM
 * skipping them (maybe_remap_kv_scale_name: qkqkv_proj.attn.k_scale); a
 * second name of the same scale is a duplicate (vLLM loads both, the last
 * read wins); convert writes its target format's own names. */
static void validate_reads_qkqkv_proj_names_vllm_maps(void)
{
    static const char *const qkqkv[] = {"qkqkv_proj.k_scale", "qkqkv_proj.v_scale", NULL};
    static const char *const twice[] = {"k_scale", "v_scale", "qkqkv_proj.k_scale", NULL};
    static const struct {
        const char *dir, *config, *out, *written;
        kvcal_format to;
    } cases[] = {
        {"ct_qkqkv_names", CT_TENSOR, "ct_qkqkv_ck", "model.layers.1.self_attn.k_scale",
         KVCAL_FORMAT_CHECKPOINT},
        {"fp8_qkqkv_names",
         "\"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": "
         "\"static\"}",
         "fp8_qkqkv_kv", "model.layers.1.self_attn.kv_scale", KVCAL_FORMAT_KV_SCALE},
        {"mo_qkqkv_names", MODELOPT_QC, "mo_qkqkv_mo",
         "model.layers.1.self_attn.k_proj.k_scale", KVCAL_FORMAT_MODELOPT},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char m[512], out[600];
        snprintf(m, sizeof m, "%s", model_dir(cases[c].dir, cases[c].config, NULL));
        write_scales(m, KVCAL_CHECKPOINT_SHARD, qkqkv, 1, 0.01f);
        kvcal_report_t *rep = validate(m);
        CU_ASSERT(kvcal_report_passes(rep, 0));
        CU_ASSERT(!has_finding(rep, "no k_scale / v_scale tensor"));
        CU_ASSERT(has_finding(rep, "sglang 0.5.23 skips it"));
        CU_ASSERT(
            has_finding(rep, "maybe_remap_kv_scale_name's qkqkv_proj.attn.k_scale"));
        kvcal_report_destroy(rep);
        kvcal_scales_t *r = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(m, NULL, 0, &r), KVCAL_OK);
        float k, v;
        kvcal_scales_get_tensor(r, 1, &k, &v);
        CU_ASSERT_EQUAL(k, 0.011f);
        CU_ASSERT_EQUAL(v, 0.011f);
        /* convert: the target format's own names */
        snprintf(out, sizeof out, "%s", kvcal_test_path(cases[c].out));
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(r, cases[c].to, out, m, 0), KVCAL_OK);
        CU_ASSERT_EQUAL(tensor_value(out, KVCAL_CHECKPOINT_SHARD, cases[c].written),
                        0.011f);
        CU_ASSERT_EQUAL(tensor_value(out, KVCAL_CHECKPOINT_SHARD,
                                     "model.layers.1.self_attn.qkqkv_proj.k_scale"),
                        -1.0f);
        kvcal_scales_destroy(r);
    }
    const char *d = model_dir("ct_qkqkv_twice", CT_TENSOR, NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, twice, 1, 0.01f);
    CU_ASSERT(refused_with(d, "duplicates model.layers.0.self_attn.k_scale"));
}

/* Scales stored as F8_E4M3: vLLM copies them into its float32 parameters
 * (copy_ converts: KVCacheScaleParameter.weight_loader, default_weight_loader)
 * and sglang's default_weight_loader fills its float32 parameter with
 * .item(): both use the e4m3 value (0.01 stored is 0.009765625), which
 * kvcal reads too; a warning names it. */
static void validate_warns_of_e4m3_scale_tensors_the_engines_convert(void)
{
    const char *d = model_dir("ct_e4m3_scales", CT_TENSOR, NULL);
    unsigned char bytes[2] = {0x05, 0x06}; /* 0.009765625, 0.01171875 */
    kvcal_tensor_out t[4];
    char names[4][96];
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.self_attn.%s", i / 2,
                 i % 2 ? "v_scale" : "k_scale");
        t[i] = (kvcal_tensor_out){names[i], KVCAL_DTYPE_F8_E4M3, 1, {1}, &bytes[i / 2]};
    }
    char p[700];
    snprintf(p, sizeof p, "%s/%s", d, KVCAL_CHECKPOINT_SHARD);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(p, t, 4, NULL), KVCAL_OK);
    kvcal_report_t *rep = validate(d);
    CU_ASSERT(kvcal_report_passes(rep, 0));
    CU_ASSERT(!has_finding(rep, "garbage"));
    CU_ASSERT(has_finding(rep, "0.009765625"));
    CU_ASSERT(has_finding(rep, "F8_E4M3"));
    kvcal_report_destroy(rep);
    kvcal_scales_t *r = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(d, NULL, 0, &r), KVCAL_OK);
    float k, v;
    kvcal_scales_get_tensor(r, 0, &k, &v);
    CU_ASSERT_EQUAL(k, 0.009765625f);
    kvcal_scales_get_tensor(r, 1, &k, &v);
    CU_ASSERT_EQUAL(v, 0.01171875f);
    kvcal_scales_destroy(r);
}

/* kv_cache_scheme.dynamic true: vLLM 0.32.0 never reads it
 * (CompressedTensorsKVCacheMethod) and uses the stored scales as static;
 * sglang 0.5.23's is_supported_scheme refuses a dynamic scheme and gives
 * the attention no KV-cache method (scale 1.0): an error naming sglang. */
static void validate_refuses_a_dynamic_scheme_sglang_ignores(void)
{
    const char *d = model_dir(
        "ct_dynamic_true",
        "\"quantization_config\": {\"quant_method\": \"compressed-tensors\", "
        "\"config_groups\": {}, \"kv_cache_scheme\": {\"num_bits\": 8, \"type\": "
        "\"float\", \"strategy\": \"tensor\", \"dynamic\": true, \"symmetric\": true}}",
        NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, kv_names, 1, 0.01f);
    CU_ASSERT(refused_with(d, "sglang 0.5.23 ignores the scheme"));
    CU_ASSERT(refused_with(d, "vLLM 0.32.0 never reads it"));
}

#define CT_HEAD(counts)                                                                  \
    "\"quantization_config\": {\"quant_method\": \"compressed-tensors\", " counts        \
    "\"kv_cache_scheme\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "         \
    "\"attn_head\", \"dynamic\": false, \"symmetric\": true}}"

static void validate_checks_the_head_counts_vllm_slices_attn_head_scales_with(void)
{
    /* 4 kv heads; total_num_kv_heads 8 (no config_groups: read as written) */
    const char *d =
        model_dir("ct_total_kv_wrong", CT_HEAD("\"total_num_kv_heads\": 8, "), NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, kv_names, 4, 0.01f);
    CU_ASSERT(refused_with(d, "but the model has 4 kv heads"));
    /* with config_groups vLLM writes the model's counts itself */
    d = model_dir("ct_total_kv_groups",
                  CT_HEAD("\"config_groups\": {}, \"total_num_kv_heads\": 8, "), NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, kv_names, 4, 0.01f);
    kvcal_report_t *rep = validate(d);
    CU_ASSERT(kvcal_report_passes(rep, 0));
    kvcal_report_destroy(rep);
    /* a per-head q_scale (one per query head) needs total_num_heads for its
       groups: K/V [4, 1, 1], Q [8, 1, 1] */
    char p[700];
    d = model_dir("ct_q_no_total_heads", CT_HEAD("\"total_num_kv_heads\": 4, "), NULL);
    {
        kvcal_tensor_out t[6];
        char names[6][96];
        static const float v4[4] = {0.01f, 0.02f, 0.03f, 0.04f};
        static const float v8[8] = {0.1f, 0.2f, 0.1f, 0.2f, 0.1f, 0.2f, 0.1f, 0.2f};
        static const char *const sfx[] = {"k_scale", "v_scale", "q_scale"};
        for (int l = 0, n = 0; l < 2; l++)
            for (int i = 0; i < 3; i++, n++) {
                snprintf(names[n], sizeof names[n], "model.layers.%d.self_attn.%s", l,
                         sfx[i]);
                t[n] = (kvcal_tensor_out){names[n],
                                          KVCAL_DTYPE_F32,
                                          3,
                                          {i == 2 ? 8 : 4, 1, 1},
                                          i == 2 ? v8 : v4};
            }
        snprintf(p, sizeof p, "%s/" KVCAL_CHECKPOINT_SHARD, d);
        CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(p, t, 6, NULL), KVCAL_OK);
    }
    CU_ASSERT(refused_with(d, "TypeError on None"));
    d = model_dir("ct_q_total_heads_wrong",
                  CT_HEAD("\"total_num_kv_heads\": 4, \"total_num_heads\": 16, "), NULL);
    {
        char src[700];
        snprintf(src, sizeof src, "%s/" KVCAL_CHECKPOINT_SHARD,
                 kvcal_test_path("ct_q_no_total_heads"));
        snprintf(p, sizeof p, "%s/" KVCAL_CHECKPOINT_SHARD, d);
        CU_ASSERT_EQUAL(link(src, p) == 0 || access(p, F_OK) == 0, 1);
    }
    CU_ASSERT(refused_with(d, "but the model has 8 attention heads"));
    d = model_dir("ct_q_total_heads_ok",
                  CT_HEAD("\"total_num_kv_heads\": 4, \"total_num_heads\": 8, "), NULL);
    {
        char src[700];
        snprintf(src, sizeof src, "%s/" KVCAL_CHECKPOINT_SHARD,
                 kvcal_test_path("ct_q_no_total_heads"));
        snprintf(p, sizeof p, "%s/" KVCAL_CHECKPOINT_SHARD, d);
        CU_ASSERT_EQUAL(link(src, p) == 0 || access(p, F_OK) == 0, 1);
    }
    rep = validate(d);
    CU_ASSERT(kvcal_report_passes(rep, 0));
    kvcal_report_destroy(rep);
}

static void validate_refuses_scales_another_shard_vllm_reads_also_holds(void)
{
    /* kvcal's shard listed in the index, and the model's shard holding its
       own (uncalibrated) scales: vLLM reads model.safetensors last */
    const char *d = model_dir("dup_shards", CT_TENSOR, NULL);
    write_scales(d, KVCAL_CHECKPOINT_SHARD, kv_names, 1, 0.01f);
    write_scales(d, "model.safetensors", kv_names, 1, 1.0f);
    char p[700];
    snprintf(p, sizeof p, "%s/" KVCAL_CHECKPOINT_INDEX, d);
    const char *index =
        "{\"metadata\": {}, \"weight_map\": {"
        "\"model.layers.0.self_attn.k_scale\": \"kv_scales.safetensors\", "
        "\"model.layers.0.self_attn.v_scale\": \"kv_scales.safetensors\", "
        "\"model.layers.1.self_attn.k_scale\": \"kv_scales.safetensors\", "
        "\"model.layers.1.self_attn.v_scale\": \"kv_scales.safetensors\", "
        "\"model.embed_tokens.weight\": \"model.safetensors\"}}";
    kvcal_test_write_file(p, index, strlen(index));
    CU_ASSERT(refused_with(d, "its scales replace the ones checked here"));
    snprintf(p, sizeof p, "%s/" KVCAL_CHECKPOINT_SHARD, d);
    CU_ASSERT(refused_with(p, "its scales replace the ones checked here"));
    /* no index: vLLM reads every *.safetensors file */
    snprintf(p, sizeof p, "%s/" KVCAL_CHECKPOINT_INDEX, d);
    unlink(p);
    CU_ASSERT(refused_with(d, "model.safetensors is read after kv_scales.safetensors"));
    /* an index that does not name model.safetensors: vLLM skips it */
    const char *only =
        "{\"metadata\": {}, \"weight_map\": {"
        "\"model.layers.0.self_attn.k_scale\": \"kv_scales.safetensors\"}}";
    kvcal_test_write_file(p, only, strlen(only));
    kvcal_report_t *rep = validate(d);
    CU_ASSERT(kvcal_report_passes(rep, 0));
    kvcal_report_destroy(rep);
    /* no index, the other file read first: the scales checked here are the
       ones vLLM keeps (a warning, not an error) */
    unlink(p);
    snprintf(p, sizeof p, "%s/" KVCAL_CHECKPOINT_SHARD, d);
    unlink(p);
    write_scales(d, "model.safetensors", kv_names, 1, 0.01f);
    write_scales(d, "a.safetensors", kv_names, 1, 1.0f);
    rep = validate(d);
    CU_ASSERT(kvcal_report_passes(rep, 0));
    int before = 0;
    for (int i = 0; i < kvcal_report_count(rep); i++) {
        kvcal_finding f;
        before += kvcal_report_get(rep, i, &f) == KVCAL_OK &&
                  f.severity == KVCAL_SEVERITY_WARNING &&
                  strstr(f.consequence, "a.safetensors is read before model.safetensors");
    }
    CU_ASSERT_EQUAL(before, 1);
    kvcal_report_destroy(rep);
}

static void format_names_round_trip(void)
{
    CU_ASSERT_STRING_EQUAL(kvcal_format_name(KVCAL_FORMAT_MODELOPT), "modelopt");
    CU_ASSERT_STRING_EQUAL(kvcal_format_name(KVCAL_FORMAT_QUARK), "quark");
    CU_ASSERT_STRING_EQUAL(kvcal_format_name(KVCAL_FORMAT_KV_SCALE), "kv-scale");
    CU_ASSERT_STRING_EQUAL(kvcal_format_name(KVCAL_FORMAT_TRTLLM), "trtllm");
    CU_ASSERT_STRING_EQUAL(kvcal_format_name((kvcal_format)99), "unknown");
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(modelopt_export_writes_proj_names_and_fp8_kv_and_reads_back),
    KVCAL_TEST(modelopt_export_sets_fp8_kv_in_hf_quant_config),
    KVCAL_TEST(modelopt_flags_fp8_cast_and_the_clamp_to_one),
    KVCAL_TEST(formats_refuse_a_model_whose_loader_would_not_read_them),
    KVCAL_TEST(quark_export_writes_output_scales_with_q_and_reads_back),
    KVCAL_TEST(kv_scale_export_holds_max_of_k_and_v),
    KVCAL_TEST(trtllm_export_writes_every_rank_and_reads_back),
    KVCAL_TEST(legacy_file_is_refused_for_an_architecture_sglang_cannot_load_it_for),
    KVCAL_TEST(validate_refuses_fp8_and_modelopt_configs_vllm_cannot_start_with),
    KVCAL_TEST(validate_refuses_quark_q_and_softmax_names_other_configs_do_not_map),
    KVCAL_TEST(validate_reads_fused_qkv_proj_names_vllm_maps),
    KVCAL_TEST(validate_reads_qkqkv_proj_names_vllm_maps),
    KVCAL_TEST(validate_warns_of_e4m3_scale_tensors_the_engines_convert),
    KVCAL_TEST(validate_refuses_a_dynamic_scheme_sglang_ignores),
    KVCAL_TEST(validate_checks_the_head_counts_vllm_slices_attn_head_scales_with),
    KVCAL_TEST(validate_refuses_scales_another_shard_vllm_reads_also_holds),
    KVCAL_TEST(format_names_round_trip),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(scales_formats, KVCAL_NEEDS_NOTHING, tests)
