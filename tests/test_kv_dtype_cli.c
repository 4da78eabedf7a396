/* tests/test_kv_dtype_cli.c: `kvcal calibrate --kv-dtype` end to end: int8
 * and NVFP4 scale sets are e4m3's rescaled (absmax / 127, absmax / (6 x
 * 448)) and recorded as such in the kvcal format; the formats that hold e4m3
 * scales alone refuse them (calibrate, convert) and write nothing; a
 * tampered maximum is refused; eval reads such a set through its absmax. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvcal.h"
#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"
#define DATA "datasets/default_calibration.txt"
#define SMALL "--num-samples 4 --seq-len 64 --batch 2 --quiet"

static cJSON *load_json(const char *path)
{
    char *text = kvcal_test_read_file(path, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

/* `calibrate` of MODEL at `granularity` with the options `extra` into the
 * test tmpdir's `name`; its path. */
static const char *calibrate_at(const char *name, const char *granularity,
                                const char *extra)
{
    const char *out = kvcal_test_path(name);
    char args[1024];
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --granularity %s " SMALL " %s --out '%s'",
             granularity, extra, out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    return out;
}

static const char *calibrate(const char *name, const char *extra)
{
    return calibrate_at(name, "head", extra);
}

static void kv_dtype_int8_and_nvfp4_rescale_the_e4m3_scales_in_the_kvcal_format(void)
{
    cJSON *e4 = load_json(calibrate("dt_e4m3.json", ""));
    cJSON *i8 = load_json(calibrate("dt_int8.json", "--kv-dtype int8"));
    cJSON *nv = load_json(calibrate("dt_nvfp4.json", "--kv-dtype nvfp4"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(e4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(i8);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nv);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(e4, "dtype")->valuestring,
                           "float8_e4m3fn");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(i8, "dtype")->valuestring, "int8");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(nv, "dtype")->valuestring, "nvfp4");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(i8, "qmax")->valuedouble, 127);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(nv, "qmax")->valuedouble, 2688);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(i8, "fp8_max"));
    const cJSON *le = cJSON_GetObjectItem(e4, "layers"),
                *li = cJSON_GetObjectItem(i8, "layers");
    const cJSON *ln = cJSON_GetObjectItem(nv, "layers");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(le), 5);
    int bad = 0;
    for (int l = 0; l < 5; l++) {
        const cJSON *a = cJSON_GetArrayItem(le, l), *b = cJSON_GetArrayItem(li, l);
        const cJSON *c = cJSON_GetArrayItem(ln, l);
        CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(b, "k_clip")); /* e4m3's clipping */
        CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItem(a, "k_clip"));
        for (int kv = 0; kv < 2; kv++) {
            const char *key = kv ? "v_scale_per_head" : "k_scale_per_head";
            const char *amax = kv ? "v_absmax" : "k_absmax";
            for (int h = 0; h < 4; h++) {
                float s = (float)cJSON_GetArrayItem(cJSON_GetObjectItem(a, key), h)
                              ->valuedouble;
                float si = (float)cJSON_GetArrayItem(cJSON_GetObjectItem(b, key), h)
                               ->valuedouble;
                float sn = (float)cJSON_GetArrayItem(cJSON_GetObjectItem(c, key), h)
                               ->valuedouble;
                bad += si != (float)((double)s * 448.0 / 127.0);
                bad += sn != (float)((double)s / 6.0);
                bad += cJSON_GetArrayItem(cJSON_GetObjectItem(a, amax), h)->valuedouble !=
                       cJSON_GetArrayItem(cJSON_GetObjectItem(b, amax), h)->valuedouble;
            }
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* validate-scales reads them, with the warnings of their own convention */
    char args[1024];
    snprintf(args, sizeof args, "validate-scales '%s' --strict",
             kvcal_test_path("dt_int8.json"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    char *out = NULL;
    snprintf(args, sizeof args, "inspect '%s'", kvcal_test_path("dt_nvfp4.json"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "per-head, for a cache of nvfp4"));
    free(out);
    cJSON_Delete(e4), cJSON_Delete(i8), cJSON_Delete(nv);
}

static void kv_dtype_sets_are_refused_where_only_e4m3_fits(void)
{
    const char *legacy = kvcal_test_path("dt_legacy.json");
    char args[1024];
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL
             " --kv-dtype int8 --format legacy --out '%s'",
             legacy);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    char *err = kvcal_test_kvcal_stderr();
    CU_ASSERT_PTR_NOT_NULL(err && strstr(err, "writes --format kvcal, ascend or checkpoint"));
    free(err);
    struct stat sb;
    CU_ASSERT_NOT_EQUAL(stat(legacy, &sb), 0);
    CU_ASSERT_EQUAL(
        kvcal_test_run_kvcal("calibrate --model " MODEL " --kv-dtype fp8_e5m2", NULL), 2);
    err = kvcal_test_kvcal_stderr();
    CU_ASSERT_PTR_NOT_NULL(err && strstr(err, "needs no scale"));
    free(err);
    const char *i8 = calibrate("dt_int8b.json", "--kv-dtype int8");
    snprintf(args, sizeof args, "convert '%s' --to legacy --out '%s'", i8, legacy);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    err = kvcal_test_kvcal_stderr();
    CU_ASSERT_PTR_NOT_NULL(err &&
                           strstr(err, "no vLLM loader gives a static int8 cache"));
    free(err);
    CU_ASSERT_NOT_EQUAL(stat(legacy, &sb), 0);
    /* the kvcal format carries it through convert */
    const char *copy = kvcal_test_path("dt_int8_copy.json");
    snprintf(args, sizeof args, "convert '%s' --to kvcal --out '%s'", i8, copy);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    cJSON *j = load_json(copy);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "dtype")->valuestring, "int8");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "qmax")->valuedouble, 127);
    cJSON_Delete(j);
    /* a maximum that is not the dtype's: refused */
    char *text = kvcal_test_read_file(i8, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    char *q = strstr(text, "127");
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    q[2] = '8';
    const char *bad = kvcal_test_path("dt_bad_qmax.json");
    CU_ASSERT_EQUAL(kvcal_test_write_file(bad, text, strlen(text)), 0);
    free(text);
    snprintf(args, sizeof args, "validate-scales '%s'", bad);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
}

static void eval_reads_an_int8_scale_set_through_its_absmax(void)
{
    const char *e4 = calibrate("dt_e4m3c.json", ""),
               *i8 = calibrate("dt_int8c.json", "--kv-dtype int8");
    double ppl[2];
    for (int i = 0; i < 2; i++) {
        char args[1024], *out = NULL;
        snprintf(args, sizeof args,
                 "eval --model " MODEL " --dataset " DATA " --scales '%s' " SMALL
                 " --modes int8-static-head,static-head --json",
                 i ? i8 : e4);
        CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
        cJSON *root = cJSON_Parse(out);
        free(out);
        CU_ASSERT_PTR_NOT_NULL_FATAL(root);
        const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "modes"), 2);
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(m, "mode")->valuestring,
                               "int8-static-head");
        ppl[i] = cJSON_GetObjectItem(m, "perplexity")->valuedouble;
        cJSON_Delete(root);
    }
    /* the same int8 scales up to the float rounding of a rescale and back */
    CU_ASSERT(fabs(ppl[0] - ppl[1]) <= 1e-4 * ppl[0]);
}

/* NVFP4 global scales go into a ModelOpt checkpoint (vLLM's
 * get_kv_cache_quant_algo_string maps kv_cache_scheme {num_bits 4, type
 * float} or kv_cache_quant_algo "NVFP4" to its nvfp4 cache, and
 * ModelOptKVCacheMethod loads k_scale / v_scale as the global scales);
 * they read back as an NVFP4 set, equal; int8 stays refused there. */
static void kv_dtype_nvfp4_scales_go_into_a_modelopt_checkpoint(void)
{
    const char *ck = kvcal_test_path("dt_ck"), *mo = kvcal_test_path("dt_modelopt");
    const char *back = kvcal_test_path("dt_nvfp4_back.json");
    char args[2048];
    /* a ModelOpt-quantized stand-in: the checkpoint's config, quant_method modelopt */
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --format checkpoint --out '%s'", ck);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "%s/config.json", ck);
    cJSON *cfg = load_json(args);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    cJSON *qc = cJSON_CreateObject();
    cJSON_AddStringToObject(qc, "quant_method", "modelopt");
    cJSON_AddStringToObject(qc, "quant_algo", "FP8");
    cJSON_ReplaceItemInObject(cfg, "quantization_config", qc);
    char *text = cJSON_Print(cfg);
    FILE *f = fopen(args, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
    free(text);
    cJSON_Delete(cfg);
    const char *nv = calibrate_at("dt_nvfp4_mo.json", "tensor", "--kv-dtype nvfp4");
    snprintf(args, sizeof args, "convert '%s' --to modelopt --model '%s' --out '%s'", nv,
             ck, mo);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "%s/config.json", mo);
    cJSON *out = load_json(args);
    const cJSON *ks = cJSON_GetObjectItem(cJSON_GetObjectItem(out, "quantization_config"),
                                          "kv_cache_scheme");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(ks, "num_bits")->valuedouble, 4);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(ks, "type")->valuestring, "float");
    cJSON_Delete(out);
    snprintf(args, sizeof args, "validate-scales '%s' --strict", mo);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "convert '%s' --to kvcal --out '%s'", mo, back);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    cJSON *a = load_json(nv), *b = load_json(back);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(b, "dtype")->valuestring, "nvfp4");
    const cJSON *la = cJSON_GetObjectItem(a, "layers"),
                *lb = cJSON_GetObjectItem(b, "layers");
    for (int l = 0; l < 5; l++)
        for (int i = 0; i < 2; i++) {
            const char *k = i ? "v_scale" : "k_scale";
            CU_ASSERT_EQUAL(
                cJSON_GetObjectItem(cJSON_GetArrayItem(la, l), k)->valuedouble,
                cJSON_GetObjectItem(cJSON_GetArrayItem(lb, l), k)->valuedouble);
        }
    cJSON_Delete(a);
    cJSON_Delete(b);
    /* int8: no engine reads it there */
    const char *i8 = calibrate_at("dt_int8_mo.json", "tensor", "--kv-dtype int8");
    snprintf(args, sizeof args, "convert '%s' --to modelopt --model '%s' --out '%s'", i8,
             ck, kvcal_test_path("dt_modelopt_int8"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(kv_dtype_int8_and_nvfp4_rescale_the_e4m3_scales_in_the_kvcal_format),
    KVCAL_TEST(kv_dtype_sets_are_refused_where_only_e4m3_fits),
    KVCAL_TEST(kv_dtype_nvfp4_scales_go_into_a_modelopt_checkpoint),
    KVCAL_TEST(eval_reads_an_int8_scale_set_through_its_absmax), CU_TEST_INFO_NULL};
KVCAL_SUITE(kv_dtype_cli, KVCAL_NEEDS_NOTHING, tests)
