/* tests/test_scales_ct_dtypes.c: compressed-tensors checkpoints of the cache
 * dtypes beyond e4m3 (io/scales/scales_checkpoint.c): int8 as kv_cache_scheme
 * type int (k_scale / v_scale = absmax / 127, per tensor or head), NVFP4 as
 * compressed-tensors' own NVFP4 (num_bits 4, tensor_group of 16, dynamic
 * "local", k_global_scale / v_global_scale = 448 x 6 / amax, kvcal's
 * reciprocal); each written, read back, validated with one line per engine,
 * and the schemes and names compressed-tensors does not describe refused. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/scales.h"
#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"
#include "io/scales/scales_io.h"
#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"
#define SMALL "--num-samples 4 --seq-len 64 --batch 2 --quiet"

// --- helpers ----------------------------------------------------------------------

/* A tiny unquantized model directory: 2 layers, 8 heads, 4 kv heads. */
static const char *model_dir(void)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("ctd_model"));
    mkdir(dir, 0755);
    char path[600];
    const char *text =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
        "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
        "\"num_key_value_heads\": 4, \"vocab_size\": 512}";
    snprintf(path, sizeof path, "%s/config.json", dir);
    kvcal_test_write_file(path, text, strlen(text));
    return dir;
}

/* Per-head K and V scales of cache `format` that differ by head, layer and
 * tensor. */
static kvcal_scales_t *make_set(kvcal_kv_format format, kvcal_granularity g)
{
    kvcal_scales_t *s = NULL;
    if (kvcal_scales_create(2, 4, &s))
        return NULL;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 4; h++)
            kvcal_scales_set_head(s, l, h, 0.013f * (h + 1) + 0.003f * l,
                                  0.009f * (4 - h) + 0.002f * l);
    kvcal_scales_set_model(s, "LlamaForCausalLM", "llama", 8, 8);
    s->format = format;
    s->granularity = g;
    return s;
}

/* out's quantization_config.kv_cache_scheme (caller deletes the root *cfg). */
static const cJSON *scheme_of(const char *out, cJSON **cfg)
{
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", out);
    *cfg = NULL;
    if (kvcal_json_load(p, cfg))
        return NULL;
    return cJSON_GetObjectItem(cJSON_GetObjectItem(*cfg, "quantization_config"),
                               "kv_cache_scheme");
}

/* Replaces out's kv_cache_scheme by the JSON text `scheme`. */
static void set_scheme(const char *out, const char *scheme)
{
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", out);
    cJSON *cfg = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(p, &cfg), KVCAL_OK);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cfg, "quantization_config"),
                              "kv_cache_scheme", cJSON_Parse(scheme));
    CU_ASSERT_EQUAL(kvcal_json_write(p, cfg), KVCAL_OK);
    cJSON_Delete(cfg);
}

/* The shape's values count of tensor `name` in out's shard, -1 when absent;
 * *v its first value. */
static long long tensor_numel(const char *out, const char *name, float *v)
{
    char p[700];
    snprintf(p, sizeof p, "%s/" KVCAL_CHECKPOINT_SHARD, out);
    kvcal_checkpoint_t *ck = NULL;
    long long n = -1;
    if (kvcal_checkpoint_open(p, &ck))
        return -1;
    const kvcal_tensor_info *t = kvcal_checkpoint_find(ck, name);
    float buf[16];
    if (t && t->numel <= 16 && kvcal_tensor_to_f32(t, buf) == KVCAL_OK) {
        n = t->numel;
        *v = buf[0];
    }
    kvcal_checkpoint_close(ck);
    return n;
}

static int has_finding(const kvcal_report_t *rep, kvcal_severity sev, const char *text)
{
    for (int i = 0; i < kvcal_report_count(rep); i++) {
        kvcal_finding f;
        kvcal_report_get(rep, i, &f);
        if (f.severity == sev && (strstr(f.message, text) || strstr(f.consequence, text)))
            return 1;
    }
    return 0;
}

/* The report of dir validated against its own config.json. */
static kvcal_report_t *validate(const char *dir)
{
    kvcal_report_t *rep = NULL;
    CU_ASSERT_EQUAL(kvcal_scales_validate_file(dir, NULL, 1, &rep), KVCAL_OK);
    return rep;
}

/* The one line per engine of an int8 / NVFP4 scheme, as warnings. */
static int states_every_engine(const kvcal_report_t *rep)
{
    return has_finding(rep, KVCAL_SEVERITY_WARNING,
                       "vLLM 0.32.0 refuses to start (NotImplementedError in "
                       "CompressedTensorsKVCacheMethod.validate_kv_cache_scheme") &&
           has_finding(rep, KVCAL_SEVERITY_WARNING, "sglang 0.5.23 starts but ignores") &&
           has_finding(rep, KVCAL_SEVERITY_WARNING,
                       "compressed-tensors 0.17.0 parses it");
}

// --- int8 -------------------------------------------------------------------------

static void ct_int8_checkpoint_is_type_int_and_reads_back_per_tensor_and_per_head(void)
{
    const char *model = model_dir();
    for (int head = 0; head < 2; head++) {
        kvcal_scales_t *s =
            make_set(KVCAL_KV_FORMAT_INT8,
                     head ? KVCAL_GRANULARITY_HEAD : KVCAL_GRANULARITY_TENSOR);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        const char *out = kvcal_test_path(head ? "ctd_int8_head" : "ctd_int8_tensor");
        CU_ASSERT_EQUAL_FATAL(
            kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, out, model, 1), KVCAL_OK);
        cJSON *cfg = NULL;
        const cJSON *ks = scheme_of(out, &cfg);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ks);
        CU_ASSERT_EQUAL(cJSON_GetObjectItem(ks, "num_bits")->valuedouble, 8);
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(ks, "type")->valuestring, "int");
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(ks, "strategy")->valuestring,
                               head ? "attn_head" : "tensor");
        CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(ks, "symmetric")));
        CU_ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(ks, "dynamic")));
        cJSON_Delete(cfg);
        float v = 0.0f, k0, v0;
        CU_ASSERT_EQUAL(tensor_numel(out, "model.layers.1.self_attn.k_scale", &v),
                        head ? 4 : 1);
        kvcal_scales_get_head(s, 1, 0, &k0, &v0);
        if (head)
            CU_ASSERT_EQUAL(v, k0);
        CU_ASSERT_EQUAL(tensor_numel(out, "model.layers.0.self_attn.k_global_scale", &v),
                        -1);
        kvcal_report_t *rep = validate(out);
        CU_ASSERT_TRUE(kvcal_report_passes(rep, 0));
        CU_ASSERT_TRUE(states_every_engine(rep));
        kvcal_report_destroy(rep);
        kvcal_scales_t *back = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(out, NULL, 1, &back), KVCAL_OK);
        CU_ASSERT_EQUAL(back->format, KVCAL_KV_FORMAT_INT8);
        CU_ASSERT_EQUAL(back->granularity, s->granularity);
        int bad = 0;
        for (int l = 0; l < 2; l++)
            for (int h = 0; h < 4; h++) {
                float a, b, c, d;
                kvcal_scales_get_head(back, l, h, &a, &b);
                if (head)
                    kvcal_scales_get_head(s, l, h, &c, &d);
                else
                    kvcal_scales_get_tensor(s, l, &c, &d);
                bad += a != c || b != d;
            }
        CU_ASSERT_EQUAL(bad, 0);
        kvcal_scales_destroy(back);
        kvcal_scales_destroy(s);
    }
}

// --- NVFP4 ------------------------------------------------------------------------

static void ct_nvfp4_checkpoint_holds_compressed_tensors_global_scales(void)
{
    const char *model = model_dir();
    kvcal_scales_t *s = make_set(KVCAL_KV_FORMAT_NVFP4, KVCAL_GRANULARITY_HEAD);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const char *out = kvcal_test_path("ctd_nvfp4");
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, out, model, 1),
                          KVCAL_OK);
    cJSON *cfg = NULL;
    const cJSON *ks = scheme_of(out, &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ks);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(ks, "num_bits")->valuedouble, 4);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(ks, "type")->valuestring, "float");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(ks, "strategy")->valuestring,
                           "tensor_group");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(ks, "group_size")->valuedouble, 16);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(ks, "dynamic")->valuestring, "local");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(ks, "scale_dtype")->valuestring,
                           "torch.float8_e4m3fn");
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(
        cJSON_GetObjectItem(cfg, "quantization_config"), "total_num_kv_heads"));
    cJSON_Delete(cfg);
    /* one global scale per layer and K / V: 1 / (the max over the heads) */
    int bad = 0;
    for (int l = 0; l < 2; l++) {
        char name[96];
        float k, v, g = 0.0f;
        kvcal_scales_get_tensor(s, l, &k, &v);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.k_global_scale", l);
        bad += tensor_numel(out, name, &g) != 1 || g != (float)(1.0 / (double)k);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.v_global_scale", l);
        bad += tensor_numel(out, name, &g) != 1 || g != (float)(1.0 / (double)v);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.k_scale", l);
        bad += tensor_numel(out, name, &g) != -1;
    }
    CU_ASSERT_EQUAL(bad, 0);
    kvcal_report_t *rep = validate(out);
    CU_ASSERT_TRUE(kvcal_report_passes(rep, 0));
    CU_ASSERT_TRUE(states_every_engine(rep));
    kvcal_report_destroy(rep);
    /* back to kvcal's amax / 2688, within one float32 step of the two
     * reciprocals (each correctly rounded) */
    kvcal_scales_t *back = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(out, NULL, 1, &back), KVCAL_OK);
    CU_ASSERT_EQUAL(back->format, KVCAL_KV_FORMAT_NVFP4);
    CU_ASSERT_EQUAL(back->granularity, KVCAL_GRANULARITY_TENSOR);
    for (int l = 0; l < 2; l++) {
        float k, v, a, b;
        kvcal_scales_get_tensor(s, l, &k, &v);
        kvcal_scales_get_tensor(back, l, &a, &b);
        CU_ASSERT(fabsf(a - k) <= nextafterf(k, 1.0f) - k);
        CU_ASSERT(fabsf(b - v) <= nextafterf(v, 1.0f) - v);
    }
    kvcal_scales_destroy(back);
    kvcal_scales_destroy(s);
}

// --- refused ----------------------------------------------------------------------

static void ct_schemes_and_names_compressed_tensors_does_not_describe_are_errors(void)
{
    const char *model = model_dir();
    kvcal_scales_t *e4 = make_set(KVCAL_KV_FORMAT_FP8_E4M3, KVCAL_GRANULARITY_TENSOR);
    kvcal_scales_t *nv = make_set(KVCAL_KV_FORMAT_NVFP4, KVCAL_GRANULARITY_TENSOR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nv);
    const char *fp8 = kvcal_test_path("ctd_bad_fp8"),
               *fp4 = kvcal_test_path("ctd_bad_fp4");
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(e4, KVCAL_FORMAT_CHECKPOINT, fp8, model, 1),
                          KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(nv, KVCAL_FORMAT_CHECKPOINT, fp4, model, 1),
                          KVCAL_OK);
    static const struct {
        int on_fp4; /* the NVFP4 checkpoint's tensors, else the fp8 one's */
        const char *scheme, *error;
    } cases[] = {
        /* k_scale beside an NVFP4 scheme: no parameter takes it */
        {0,
         "{\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"tensor_group\", "
         "\"group_size\": 16, \"dynamic\": \"local\", \"symmetric\": true}",
         "registers only k_global_scale"},
        /* a global scale beside an fp8 scheme */
        {1,
         "{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"tensor\", "
         "\"dynamic\": false, \"symmetric\": true}",
         "an NVFP4 global scale beside"},
        /* static NVFP4: compressed-tensors cannot create its block scales */
        {1,
         "{\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"tensor_group\", "
         "\"group_size\": 16, \"dynamic\": false, \"symmetric\": true}",
         "must be \"local\" for NVFP4"},
        /* not NVFP4's groups of 16 */
        {1,
         "{\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"tensor_group\", "
         "\"group_size\": 32, \"dynamic\": \"local\", \"symmetric\": true}",
         "group_size 16"},
        /* "local" on an 8-bit scheme: QuantizationArgs refuses it */
        {0,
         "{\"num_bits\": 8, \"type\": \"int\", \"strategy\": \"tensor\", "
         "\"dynamic\": \"local\", \"symmetric\": true}",
         "\"local\" goes with NVFP4 only"},
        /* int4 */
        {0,
         "{\"num_bits\": 4, \"type\": \"int\", \"strategy\": \"tensor\", "
         "\"dynamic\": false, \"symmetric\": true}",
         "num_bits must be 8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *dir = cases[i].on_fp4 ? fp4 : fp8;
        set_scheme(dir, cases[i].scheme);
        kvcal_report_t *rep = validate(dir);
        CU_ASSERT_FALSE(kvcal_report_passes(rep, 0));
        if (!has_finding(rep, KVCAL_SEVERITY_ERROR, cases[i].error))
            printf("\n  case %zu: no error \"%s\"", i, cases[i].error);
        CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_ERROR, cases[i].error));
        kvcal_report_destroy(rep);
        kvcal_scales_t *s = NULL;
        CU_ASSERT_NOT_EQUAL(kvcal_scales_load(dir, NULL, 1, &s), KVCAL_OK);
        CU_ASSERT_PTR_NULL(s);
        CU_ASSERT_PTR_NULL(strchr(kvcal_last_error(), '\n'));
    }
    kvcal_scales_destroy(e4);
    kvcal_scales_destroy(nv);
}

static void ct_writer_refuses_offsets_and_models_of_another_method_writing_nothing(void)
{
    const char *model = model_dir();
    /* int8 with zero points: vllm-ascend's C8 or the kvcal format */
    kvcal_scales_t *a = make_set(KVCAL_KV_FORMAT_INT8, KVCAL_GRANULARITY_HEAD);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_set_offsets(a, 1), KVCAL_OK);
    const char *out = kvcal_test_path("ctd_refused");
    CU_ASSERT_EQUAL(kvcal_scales_write(a, KVCAL_FORMAT_CHECKPOINT, out, model, 1),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "int8_asym scales"));
    CU_ASSERT_PTR_NULL(strchr(kvcal_last_error(), '\n'));
    struct stat sb;
    CU_ASSERT_NOT_EQUAL(stat(out, &sb), 0);
    kvcal_scales_destroy(a);
    /* an fp8-quantized model: its quantization config is not compressed-tensors' */
    char fp8_model[600], p[700];
    snprintf(fp8_model, sizeof fp8_model, "%s", kvcal_test_path("ctd_fp8_model"));
    mkdir(fp8_model, 0755);
    snprintf(p, sizeof p, "%s/config.json", fp8_model);
    const char *cfg =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
        "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
        "\"num_key_value_heads\": 4, \"vocab_size\": 512, \"quantization_config\": "
        "{\"quant_method\": \"fp8\", \"activation_scheme\": \"static\"}}";
    kvcal_test_write_file(p, cfg, strlen(cfg));
    kvcal_scales_t *i8 = make_set(KVCAL_KV_FORMAT_INT8, KVCAL_GRANULARITY_TENSOR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(i8);
    CU_ASSERT_EQUAL(kvcal_scales_write(i8, KVCAL_FORMAT_CHECKPOINT, out, fp8_model, 1),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(kvcal_last_error(), "unquantized or compressed-tensors"));
    snprintf(p, sizeof p, "%s/config.json", out);
    CU_ASSERT_NOT_EQUAL(stat(p, &sb), 0);
    kvcal_scales_destroy(i8);
}

// --- the command line ---------------------------------------------------------------

/* calibrate --format compressed-tensors for int8 and NVFP4, validate-scales
 * (exit 0 with the engines' lines), convert back to the kvcal format and
 * from it again: the same scales. */
static void calibrate_and_convert_write_compressed_tensors_int8_and_nvfp4(void)
{
    static const char *const dtypes[] = {"int8", "nvfp4"};
    for (int i = 0; i < 2; i++) {
        char ck[512], js[600], js2[600], again[600], args[2400], *out = NULL;
        snprintf(ck, sizeof ck, "%s",
                 kvcal_test_path(i ? "ctd_cli_nvfp4" : "ctd_cli_int8"));
        snprintf(js, sizeof js, "%s.json", ck);
        snprintf(js2, sizeof js2, "%s_back.json", ck);
        snprintf(again, sizeof again, "%s_again", ck);
        snprintf(args, sizeof args,
                 "calibrate --model " MODEL " " SMALL
                 " --granularity head --kv-dtype %s --out '%s'",
                 dtypes[i], js);
        CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
        snprintf(
            args, sizeof args,
            "calibrate --model " MODEL " " SMALL
            " --granularity head --kv-dtype %s --format compressed-tensors --out '%s'",
            dtypes[i], ck);
        CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
        snprintf(args, sizeof args, "validate-scales '%s'", ck);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &out), 0);
        CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "vLLM 0.32.0 refuses to start"));
        CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "sglang 0.5.23 starts but ignores"));
        free(out);
        out = NULL;
        snprintf(args, sizeof args, "inspect '%s'", ck);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &out), 0);
        CU_ASSERT_PTR_NOT_NULL(
            out && strstr(out, i ? "for a cache of nvfp4" : "for a cache of int8"));
        free(out);
        snprintf(args, sizeof args, "convert '%s' --to kvcal --out '%s'", ck, js2);
        CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
        cJSON *a = NULL, *b = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_json_load(js, &a), KVCAL_OK);
        CU_ASSERT_EQUAL_FATAL(kvcal_json_load(js2, &b), KVCAL_OK);
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(b, "dtype")->valuestring, dtypes[i]);
        const cJSON *la = cJSON_GetObjectItem(a, "layers"),
                    *lb = cJSON_GetObjectItem(b, "layers");
        int bad = 0;
        for (int l = 0; l < cJSON_GetArraySize(la); l++)
            for (int kv = 0; kv < 2; kv++) {
                const char *key = kv ? "v_scale" : "k_scale";
                float x = (float)cJSON_GetObjectItem(cJSON_GetArrayItem(la, l), key)
                              ->valuedouble;
                float y = (float)cJSON_GetObjectItem(cJSON_GetArrayItem(lb, l), key)
                              ->valuedouble;
                bad += i ? fabsf(x - y) > nextafterf(x, 1.0f) - x : x != y;
            }
        CU_ASSERT_EQUAL(bad, 0);
        cJSON_Delete(a);
        cJSON_Delete(b);
        /* convert from the kvcal file writes the same tensors */
        snprintf(args, sizeof args,
                 "convert '%s' --to compressed-tensors --model '%s' --out '%s'", js, ck,
                 again);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
        char *err = kvcal_test_kvcal_stderr();
        CU_ASSERT_PTR_NOT_NULL(err && strstr(err, "refuses it at start"));
        if (i)
            CU_ASSERT_PTR_NOT_NULL(err && strstr(err, "one global scale per layer"));
        free(err);
        char p1[700], p2[700];
        snprintf(p1, sizeof p1, "%s/" KVCAL_CHECKPOINT_SHARD, ck);
        snprintf(p2, sizeof p2, "%s/" KVCAL_CHECKPOINT_SHARD, again);
        size_t n1 = 0, n2 = 0;
        char *t1 = kvcal_test_read_file(p1, &n1), *t2 = kvcal_test_read_file(p2, &n2);
        CU_ASSERT_TRUE(t1 && t2 && n1 == n2 && !memcmp(t1, t2, n1));
        free(t1);
        free(t2);
    }
    /* int8_asym: no compressed-tensors scheme kvcal writes */
    char args[1200];
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL
             " --kv-dtype int8_asym --format checkpoint --out '%s'",
             kvcal_test_path("ctd_cli_asym"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(ct_int8_checkpoint_is_type_int_and_reads_back_per_tensor_and_per_head),
    KVCAL_TEST(ct_nvfp4_checkpoint_holds_compressed_tensors_global_scales),
    KVCAL_TEST(ct_schemes_and_names_compressed_tensors_does_not_describe_are_errors),
    KVCAL_TEST(ct_writer_refuses_offsets_and_models_of_another_method_writing_nothing),
    KVCAL_TEST(calibrate_and_convert_write_compressed_tensors_int8_and_nvfp4),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(scales_ct_dtypes, KVCAL_NEEDS_NOTHING, tests)
