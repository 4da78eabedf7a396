/* tests/test_eval_formats.c: `kvcal eval`'s cache modes beyond e4m3
 * (calib/kv_sim.h: fp8 e5m2, int8 static and dynamic, int8 with zero
 * points, NVFP4) end to end through kvcal_test_run_kvcal: which modes run,
 * the bytes per token of each (computed here from the model's shape), the
 * order of their errors that the formats' precision dictates, the
 * recommendation under --tolerance, and the refusals. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/eval_ref.h"
#include "kvcal.h"
#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"
#define DATA "datasets/default_calibration.txt"
#define SMALL "--num-samples 4 --seq-len 64 --batch 2 --quiet"
#define HD48 "tests/fixtures/golden/llama3_gqa_hd48_bf16"

static double number(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const cJSON *mode_of(const cJSON *root, const char *name)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(root, "modes"))
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(m, "mode");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
            return m;
    }
    return NULL;
}

/* min over layers of a mode's K (which 0) or V (1) SQNR */
static double min_sqnr(const cJSON *m, int which)
{
    double v = INFINITY;
    const cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(m, "layers")) v =
        fmin(v, number(l, which ? "v_sqnr_db" : "k_sqnr_db"));
    return v;
}

static cJSON *run_json(const char *args)
{
    char *out = NULL;
    int rc = kvcal_test_run_kvcal(args, &out);
    CU_ASSERT_EQUAL(rc, 0);
    cJSON *root = rc == 0 && out ? cJSON_Parse(out) : NULL;
    free(out);
    return root;
}

static void eval_modes_all_reports_every_format_its_bytes_and_the_recommendation(void)
{
    const char *scales = kvcal_test_path("fmt_scales.json");
    char args[2048];
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --granularity head " SMALL " --out '%s'",
             scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA " --scales '%s' " SMALL
             " --modes all --tolerance 1.5 --json",
             scales);
    cJSON *root = run_json(args);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    /* stories260K: 5 layers x 4 kv heads x 8; NVFP4 (head_dim % 16) left out */
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(root, "modes")), 12);
    CU_ASSERT_PTR_NULL(mode_of(root, "nvfp4-static-head"));
    const double values = 2.0 * 5 * 4 * 8, rows = 2.0 * 5 * 4;
    const struct {
        const char *name;
        double bytes;
    } want[] = {{"baseline", 2 * values},
                {"static-head", values},
                {"dynamic", values + 4 * rows},
                {"first-batch", values},
                {"fp8-e5m2", values},
                {"int8-static-tensor", values},
                {"int8-static-head", values},
                {"int8-dynamic", values + 4 * rows},
                {"int8-asym-dynamic", values + 8 * rows},
                {"fp8-attention", values}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const cJSON *m = mode_of(root, want[i].name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_EQUAL(number(m, "kv_bytes_per_token"), want[i].bytes);
        CU_ASSERT(isfinite(number(m, "perplexity")));
    }
    /* precision orders the errors: int8's 8 bits beat e4m3's 3 mantissa
     * bits under the same per-head scales, e4m3 beats e5m2's 2, and a
     * zero point per (token, head) beats a symmetric scale per (token, head) */
    const cJSON *e4 = mode_of(root, "static-head"),
                *i8 = mode_of(root, "int8-static-head");
    const cJSON *e5 = mode_of(root, "fp8-e5m2"), *i8d = mode_of(root, "int8-dynamic");
    const cJSON *asym = mode_of(root, "int8-asym-dynamic");
    for (int kv = 0; kv < 2; kv++) {
        CU_ASSERT(min_sqnr(i8, kv) > min_sqnr(e4, kv) + 3.0);
        CU_ASSERT(min_sqnr(e4, kv) > min_sqnr(e5, kv) + 3.0);
        CU_ASSERT(min_sqnr(asym, kv) > min_sqnr(i8d, kv));
    }
    /* the recommendation: the fewest bytes within the tolerance, computed
     * here from the JSON's own perplexities */
    const double base = number(mode_of(root, "baseline"), "perplexity");
    const char *best = NULL;
    double best_bytes = INFINITY, best_ppl = INFINITY;
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(root, "modes"))
    {
        const char *name = cJSON_GetObjectItem(m, "mode")->valuestring;
        double ppl = number(m, "perplexity"), b = number(m, "kv_bytes_per_token");
        if (!strcmp(name, "baseline") || 100.0 * (ppl - base) / base > 1.5)
            continue;
        if (b < best_bytes || (b == best_bytes && ppl < best_ppl))
            best = name, best_bytes = b, best_ppl = ppl;
    }
    const cJSON *rec = cJSON_GetObjectItem(root, "recommendation");
    CU_ASSERT_EQUAL(number(root, "tolerance_pct"), 1.5);
    if (best) {
        CU_ASSERT_FATAL(cJSON_IsString(rec));
        CU_ASSERT_STRING_EQUAL(rec->valuestring, best);
    } else {
        CU_ASSERT(cJSON_IsNull(rec));
    }
    cJSON_Delete(root);
    /* the table says the same */
    char *out = NULL;
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA " --scales '%s' " SMALL
             " --modes int8-static-head,int8-dynamic --tolerance 100",
             scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(out, "recommendation: int8-static-head, the smallest cache"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "KV B/tok"));
    free(out);
}

static void eval_nvfp4_on_head_dim_48_costs_less_than_int8_and_errs_more(void)
{
    /* a token set of ids below the fixture's vocabulary of 128 */
    const char *data = kvcal_test_path("hd48_ids.jsonl");
    FILE *f = fopen(data, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    unsigned r = 7u;
    for (int s = 0; s < 4; s++) {
        fputs("{\"input_ids\": [", f);
        for (int t = 0; t < 64; t++) {
            r = r * 1103515245u + 12345u;
            fprintf(f, "%s%u", t ? ", " : "", (r >> 16) % 128u);
        }
        fputs("]}\n", f);
    }
    fclose(f);
    const char *scales = kvcal_test_path("hd48_scales.json");
    char args[2048];
    snprintf(args, sizeof args,
             "calibrate --model " HD48 " --dataset '%s' --granularity head " SMALL
             " --out '%s'",
             data, scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args,
             "eval --model " HD48 " --dataset '%s' --scales '%s' " SMALL
             " --modes nvfp4-static-tensor,nvfp4-static-head,int8-static-head --json",
             data, scales);
    cJSON *root = run_json(args);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    /* 2 layers x 3 kv heads x 48: a row is 24 bytes of e2m1 and 3 scales */
    const cJSON *nt = mode_of(root, "nvfp4-static-tensor"),
                *nh = mode_of(root, "nvfp4-static-head");
    const cJSON *i8 = mode_of(root, "int8-static-head");
    CU_ASSERT_PTR_NOT_NULL_FATAL(nt);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nh);
    CU_ASSERT_PTR_NOT_NULL_FATAL(i8);
    CU_ASSERT_EQUAL(number(nt, "kv_bytes_per_token"), 2.0 * 2 * 3 * 27);
    CU_ASSERT_EQUAL(number(i8, "kv_bytes_per_token"), 2.0 * 2 * 3 * 48);
    for (int kv = 0; kv < 2; kv++) {
        /* e2m1 under a block scale: about 3 bits of precision, 15-25 dB */
        CU_ASSERT(min_sqnr(nt, kv) > 10.0 && min_sqnr(nt, kv) < 30.0);
        CU_ASSERT(min_sqnr(nh, kv) > 10.0);
        CU_ASSERT(min_sqnr(i8, kv) > min_sqnr(nt, kv) + 10.0);
    }
    CU_ASSERT(isfinite(number(nt, "perplexity")) && isfinite(number(nh, "perplexity")));
    cJSON_Delete(root);
}

static void eval_format_modes_refuse_what_does_not_apply(void)
{
    const char *scales = kvcal_test_path("fmt_scales2.json");
    char args[2048];
    snprintf(args, sizeof args, "calibrate --model " MODEL " " SMALL " --out '%s'",
             scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA " --scales '%s' " SMALL
             " --modes nvfp4-static-head",
             scales);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    char *err = kvcal_test_kvcal_stderr();
    CU_ASSERT_PTR_NOT_NULL(err && strstr(err, "multiple of 16"));
    free(err);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("eval --model " MODEL " --dataset " DATA
                                         " " SMALL " --modes int8-static-head",
                                         NULL),
                    2);
    err = kvcal_test_kvcal_stderr();
    CU_ASSERT_PTR_NOT_NULL(err && strstr(err, "int8-static-head needs --scales"));
    free(err);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("eval --model " MODEL " --dataset " DATA
                                         " " SMALL " --tolerance much",
                                         NULL),
                    2);
}

static void fp8_roundtrip_ref_quantizes_the_query_under_its_scale(void)
{
    /* rows of 3 with stride 4: the 4th column untouched */
    float x[8] = {1.0f, 0.3f, 300.0f, 7.0f, -0.0f, NAN, 1e-4f, 7.0f};
    kvcal_fp8_roundtrip_ref(x, 4, 2, 3, 0.5f);
    CU_ASSERT_EQUAL(x[0], 1.0f);    /* 2 in e4m3 */
    CU_ASSERT_EQUAL(x[1], 0.3125f); /* 0.6 -> 0.625 */
    CU_ASSERT_EQUAL(x[2], 224.0f);  /* 600 saturates at 448 */
    CU_ASSERT_EQUAL(x[3], 7.0f);
    CU_ASSERT(x[4] == 0.0f && signbit(x[4]));
    CU_ASSERT(isnan(x[5]));
    CU_ASSERT_EQUAL(x[6], 0.0f); /* 2e-4 is below e4m3's smallest subnormal / 2 */
    CU_ASSERT_EQUAL(x[7], 7.0f);
}

/* The kvcal JSON at path with "q_scale": q added to every layer, at out. */
static void with_q_scale(const char *path, double q, const char *out)
{
    char *text = kvcal_test_read_file(path, NULL);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(root, "layers"))
        cJSON_AddNumberToObject(l, "q_scale", q);
    char *o = cJSON_Print(root);
    CU_ASSERT_EQUAL(kvcal_test_write_file(out, o, strlen(o)), 0);
    free(o);
    cJSON_Delete(root);
}

static void eval_fp8_attention_quantizes_the_query_with_q_scale_or_k_scale(void)
{
    const char *scales = kvcal_test_path("fa3_scales.json");
    const char *bad_q = kvcal_test_path("fa3_q1e6.json");
    char args[2048];
    snprintf(args, sizeof args, "calibrate --model " MODEL " " SMALL " --out '%s'",
             scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    with_q_scale(scales, 1e6, bad_q);
    double att[2][2], ppl[2], k0[2][2];
    for (int f = 0; f < 2; f++) {
        snprintf(args, sizeof args,
                 "eval --model " MODEL " --dataset " DATA " --scales '%s' " SMALL
                 " --modes static-tensor,fp8-attention --json",
                 f ? bad_q : scales);
        cJSON *root = run_json(args);
        CU_ASSERT_PTR_NOT_NULL_FATAL(root);
        for (int m = 0; m < 2; m++) {
            const cJSON *mode = mode_of(root, m ? "fp8-attention" : "static-tensor");
            CU_ASSERT_PTR_NOT_NULL_FATAL(mode);
            const cJSON *l0 = cJSON_GetArrayItem(cJSON_GetObjectItem(mode, "layers"), 0);
            att[f][m] = number(l0, "attention_rel_error");
            k0[f][m] = number(l0, "k_sqnr_db");
            if (m)
                ppl[f] = number(mode, "perplexity");
        }
        cJSON_Delete(root);
    }
    /* layer 0's K and V are the same in both modes; its attention is not:
     * the query in e4m3 (under k_scale: the set has no q_scale) adds error */
    CU_ASSERT_EQUAL(k0[0][0], k0[0][1]);
    CU_ASSERT(att[0][1] > att[0][0]);
    /* a q_scale of 1e6 flushes every query to zero: attention turns uniform */
    CU_ASSERT(att[1][1] > 0.5 && att[1][1] > 2.0 * att[0][1]);
    CU_ASSERT(ppl[1] > 1.05 * ppl[0]);
    CU_ASSERT_EQUAL(att[1][0], att[0][0]); /* static-tensor ignores q_scale */
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(eval_modes_all_reports_every_format_its_bytes_and_the_recommendation),
    KVCAL_TEST(eval_nvfp4_on_head_dim_48_costs_less_than_int8_and_errs_more),
    KVCAL_TEST(eval_format_modes_refuse_what_does_not_apply),
    KVCAL_TEST(fp8_roundtrip_ref_quantizes_the_query_under_its_scale),
    KVCAL_TEST(eval_fp8_attention_quantizes_the_query_with_q_scale_or_k_scale),
    CU_TEST_INFO_NULL};
KVCAL_SUITE(eval_formats, KVCAL_NEEDS_NOTHING, tests)
