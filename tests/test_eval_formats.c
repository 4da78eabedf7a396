/* tests/test_eval_formats.c: `kvcal eval`'s cache modes beyond e4m3
 * (calib/kv_sim.h: fp8 e5m2, int8 static and dynamic, int8 with zero
 * points, static and dynamic, NVFP4, FP8 attention) end to end through
 * kvcal_test_run_kvcal: which modes run, the bytes per token of each
 * (computed here from the model's shape), the order of their errors that
 * the formats' precision dictates, the recommendation under --tolerance,
 * the query's scale as vLLM reads it, and the refusals. */
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
    CU_ASSERT_PTR_NULL(mode_of(root, "int8-asym-static")); /* an e4m3 set: no offsets */
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
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_ids(data, 4, 64, 128, 7u), 0);
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

static void eval_fp8_attention_quantizes_the_query_with_q_scale_or_unit(void)
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
     * the query in e4m3 (under 1.0: the set has no q_scale) adds error */
    CU_ASSERT_EQUAL(k0[0][0], k0[0][1]);
    CU_ASSERT(att[0][1] > att[0][0]);
    /* a q_scale of 1e6 flushes every query to zero: attention turns uniform */
    CU_ASSERT(att[1][1] > 0.5 && att[1][1] > 2.0 * att[0][1]);
    CU_ASSERT(ppl[1] > 1.05 * ppl[0]);
    CU_ASSERT_EQUAL(att[1][0], att[0][0]); /* static-tensor ignores q_scale */
    /* without a q_scale the query goes through e4m3 under 1.0, as vLLM
     * 0.32.0 quantizes it then, and the run says so */
    const char *unit_q = kvcal_test_path("fa3_q1.json");
    with_q_scale(scales, 1.0, unit_q);
    char *out[2];
    for (int f = 0; f < 2; f++) {
        snprintf(args, sizeof args,
                 "eval --model " MODEL " --dataset " DATA
                 " --scales '%s' --num-samples 4 "
                 "--seq-len 64 --batch 2 --modes fp8-attention --json",
                 f ? unit_q : scales);
        CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out[f]), 0);
        if (!f)
            CU_ASSERT(kvcal_test_kvcal_stderr_has("the query in e4m3 under 1.0: the set "
                                                  "has no q_scale, and vLLM 0.32.0"));
    }
    cJSON *r[2] = {cJSON_Parse(out[0]), cJSON_Parse(out[1])};
    CU_ASSERT_FATAL(r[0] && r[1]);
    const cJSON *m0 = mode_of(r[0], "fp8-attention"),
                *m1 = mode_of(r[1], "fp8-attention");
    CU_ASSERT_EQUAL(number(m0, "perplexity"), number(m1, "perplexity"));
    for (int l = 0; l < 5; l++)
        CU_ASSERT_EQUAL(number(cJSON_GetArrayItem(cJSON_GetObjectItem(m0, "layers"), l),
                               "attention_rel_error"),
                        number(cJSON_GetArrayItem(cJSON_GetObjectItem(m1, "layers"), l),
                               "attention_rel_error"));
    for (int f = 0; f < 2; f++) {
        cJSON_Delete(r[f]);
        free(out[f]);
    }
}

/* The fp8-attention run of scales: its per-layer attention errors into
 * att (5 layers). */
static void fa3_attention(const char *scales, double *att)
{
    char args[2048];
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA " --scales '%s' " SMALL
             " --modes fp8-attention --json",
             scales);
    cJSON *root = run_json(args);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const cJSON *layers = cJSON_GetObjectItem(mode_of(root, "fp8-attention"), "layers");
    for (int l = 0; l < 5; l++)
        att[l] = number(cJSON_GetArrayItem(layers, l), "attention_rel_error");
    cJSON_Delete(root);
}

/* vLLM reads per query head q scales as one per kv-head group, their max
 * (compressed-tensors' attn_head loader): only the group's max matters, and
 * it differs from one scale per layer. */
static void eval_fp8_attention_takes_each_kv_head_groups_max_q_scale(void)
{
    char heads[512], group_max[512], layer[512], args[2048];
    snprintf(heads, sizeof heads, "%s", kvcal_test_path("fa3_qheads.json"));
    snprintf(group_max, sizeof group_max, "%s", kvcal_test_path("fa3_qgroup.json"));
    snprintf(layer, sizeof layer, "%s", kvcal_test_path("fa3_qlayer.json"));
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --granularity head --q-scale " SMALL
             " --out '%s'",
             heads);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    char *text = kvcal_test_read_file(heads, NULL);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    /* stories260K: 8 query heads, 4 kv heads: groups of 2; every head
     * raised to its group's max, then the very first lowered to half of
     * it: the groups' maxima, all vLLM reads, stay the calibrated ones */
    int groups_differ = 0;
    cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(root, "layers"))
    {
        cJSON *q = cJSON_GetObjectItem(l, "q_scale_per_head");
        CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(q), 8);
        double g0 = 0.0;
        for (int g = 0; g < 4; g++) {
            cJSON *a = cJSON_GetArrayItem(q, 2 * g),
                  *b = cJSON_GetArrayItem(q, 2 * g + 1);
            const double m = fmax(a->valuedouble, b->valuedouble);
            groups_differ += g > 0 && m != g0;
            g0 = g ? g0 : m;
            cJSON_SetNumberValue(a, (float)m);
            cJSON_SetNumberValue(b, (float)m);
        }
        cJSON_SetNumberValue(cJSON_GetArrayItem(q, 0),
                             (float)(0.5 * cJSON_GetArrayItem(q, 1)->valuedouble));
    }
    CU_ASSERT(groups_differ > 0);
    char *o = cJSON_Print(root);
    CU_ASSERT_EQUAL(kvcal_test_write_file(group_max, o, strlen(o)), 0);
    free(o);
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(root, "layers"))
        cJSON_DeleteItemFromObject(l, "q_scale_per_head");
    o = cJSON_Print(root);
    CU_ASSERT_EQUAL(kvcal_test_write_file(layer, o, strlen(o)), 0);
    free(o);
    cJSON_Delete(root);
    double a_heads[5], a_group[5], a_layer[5];
    fa3_attention(heads, a_heads);
    fa3_attention(group_max, a_group);
    fa3_attention(layer, a_layer);
    int differs = 0;
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(a_group[i], a_heads[i]);
        differs += a_layer[i] != a_heads[i];
    }
    CU_ASSERT(differs > 0);
}

/* int8-asym-static takes the set's scales and offsets; on the very tokens
 * they were calibrated on nothing clips, and a range's 255 steps are no
 * coarser than a symmetric scale's (the largest |x| of the range / 127):
 * every layer's K and V at least as exact as int8-static-head's of the
 * same set, K of stories260K (whose ranges are one-sided) by 2 dB. */
static void eval_int8_asym_static_takes_the_sets_scales_and_offsets(void)
{
    const char *ids = kvcal_test_path("asym_eval_ids.jsonl");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_ids(ids, 4, 64, 128, 5u), 0);
    const struct {
        const char *model, *data;
        double k_gain;
    } runs[] = {{MODEL, DATA, 2.0},
                {"tests/fixtures/golden/llama_gqa_mlp256_bf16", ids, 0.0}};
    for (int r = 0; r < 2; r++) {
        const char *scales = kvcal_test_path("asym_eval.json");
        char args[2048];
        snprintf(args, sizeof args,
                 "calibrate --model %s --dataset '%s' --kv-dtype int8_asym --granularity "
                 "head " SMALL " --out '%s'",
                 runs[r].model, runs[r].data, scales);
        CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
        snprintf(args, sizeof args,
                 "eval --model %s --dataset '%s' --scales '%s' " SMALL
                 " --seed 0 --modes int8-static-head,int8-asym-static --json",
                 runs[r].model, runs[r].data, scales);
        cJSON *root = run_json(args);
        CU_ASSERT_PTR_NOT_NULL_FATAL(root);
        const cJSON *sym = mode_of(root, "int8-static-head"),
                    *asym = mode_of(root, "int8-asym-static");
        CU_ASSERT_PTR_NOT_NULL_FATAL(sym);
        CU_ASSERT_PTR_NOT_NULL_FATAL(asym);
        CU_ASSERT_EQUAL(number(asym, "kv_bytes_per_token"),
                        number(sym, "kv_bytes_per_token"));
        CU_ASSERT(isfinite(number(asym, "perplexity")));
        const cJSON *ls = cJSON_GetObjectItem(sym, "layers"),
                    *la = cJSON_GetObjectItem(asym, "layers");
        CU_ASSERT_FATAL(cJSON_GetArraySize(la) == cJSON_GetArraySize(ls));
        for (int l = 0; l < cJSON_GetArraySize(la); l++) {
            const cJSON *a = cJSON_GetArrayItem(la, l), *b = cJSON_GetArrayItem(ls, l);
            CU_ASSERT(number(a, "k_sqnr_db") >= number(b, "k_sqnr_db") + runs[r].k_gain);
            CU_ASSERT(number(a, "v_sqnr_db") >= number(b, "v_sqnr_db"));
            CU_ASSERT(number(a, "k_sqnr_db") > 35.0 && number(a, "v_sqnr_db") > 35.0);
        }
        cJSON_Delete(root);
    }
    /* a set without offsets has none to give */
    const char *e4 = kvcal_test_path("asym_eval_e4m3.json");
    char args[2048];
    snprintf(args, sizeof args, "calibrate --model " MODEL " " SMALL " --out '%s'", e4);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA " --scales '%s' " SMALL
             " --modes int8-asym-static",
             e4);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("hold no offsets"));
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(eval_modes_all_reports_every_format_its_bytes_and_the_recommendation),
    KVCAL_TEST(eval_nvfp4_on_head_dim_48_costs_less_than_int8_and_errs_more),
    KVCAL_TEST(eval_format_modes_refuse_what_does_not_apply),
    KVCAL_TEST(fp8_roundtrip_ref_quantizes_the_query_under_its_scale),
    KVCAL_TEST(eval_fp8_attention_quantizes_the_query_with_q_scale_or_unit),
    KVCAL_TEST(eval_fp8_attention_takes_each_kv_head_groups_max_q_scale),
    KVCAL_TEST(eval_int8_asym_static_takes_the_sets_scales_and_offsets),
    CU_TEST_INFO_NULL};
KVCAL_SUITE(eval_formats, KVCAL_NEEDS_NOTHING, tests)
