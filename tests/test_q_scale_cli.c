/* tests/test_q_scale_cli.c: `kvcal calibrate --q-scale` end to end: the
 * query's scales per layer (max over heads) and per query head in the kvcal
 * format, per query head in a compressed-tensors checkpoint (what vLLM's
 * attn_head loader reduces per kv-head group), read back unchanged, and
 * absent without the option. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/scale_rule.h"
#include "io/checkpoint/safetensors.h"
#include "kvcal.h"
#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"
#define SMALL "--num-samples 4 --seq-len 64 --batch 2 --quiet --granularity head"

static cJSON *load_json(const char *path)
{
    char *text = kvcal_test_read_file(path, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

/* The q scales of every layer of a kvcal JSON: per head (8 a layer) into
 * heads, the layer's into layer; the count of layers that have them. */
static int q_scales(const cJSON *root, float heads[5][8], float layer[5])
{
    int have = 0, l = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "layers"))
    {
        const cJSON *q = cJSON_GetObjectItem(e, "q_scale");
        const cJSON *qh = cJSON_GetObjectItem(e, "q_scale_per_head");
        if (l >= 5 || !cJSON_IsNumber(q) || cJSON_GetArraySize(qh) != 8)
            continue;
        layer[l] = (float)q->valuedouble;
        for (int h = 0; h < 8; h++)
            heads[l][h] = (float)cJSON_GetArrayItem(qh, h)->valuedouble;
        have++, l++;
    }
    return have;
}

static void calibrate_q_scale_writes_each_query_heads_scale_and_their_max(void)
{
    const char *with = kvcal_test_path("q.json"), *without = kvcal_test_path("noq.json");
    char args[1024];
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --q-scale --out '%s'", with);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "calibrate --model " MODEL " " SMALL " --out '%s'",
             without);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    cJSON *a = load_json(with), *b = load_json(without);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    float heads[5][8], layer[5];
    CU_ASSERT_EQUAL(q_scales(a, heads, layer), 5);
    CU_ASSERT_EQUAL(q_scales(b, heads, layer), 0);
    CU_ASSERT_EQUAL(q_scales(a, heads, layer), 5);
    int distinct = 0;
    for (int l = 0; l < 5; l++) {
        float m = 0.0f;
        for (int h = 0; h < 8; h++) {
            m = fmaxf(m, heads[l][h]);
            distinct += heads[l][h] != heads[l][0];
            CU_ASSERT(heads[l][h] > kvcal_scale_from_absmax(0.0f));
        }
        CU_ASSERT_EQUAL(layer[l], m);
    }
    CU_ASSERT(distinct > 0); /* per head, not one value repeated */
    /* the K/V scales do not depend on observing the queries */
    const cJSON *la = cJSON_GetObjectItem(a, "layers"),
                *lb = cJSON_GetObjectItem(b, "layers");
    for (int l = 0; l < 5; l++)
        CU_ASSERT_EQUAL(
            cJSON_GetObjectItem(cJSON_GetArrayItem(la, l), "k_scale")->valuedouble,
            cJSON_GetObjectItem(cJSON_GetArrayItem(lb, l), "k_scale")->valuedouble);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* A per-head compressed-tensors checkpoint holds self_attn.q_scale of one
 * value per query head; validate-scales takes it; convert reads the same
 * values back. */
static void q_scale_round_trips_through_a_per_head_checkpoint(void)
{
    const char *json = kvcal_test_path("q_ck.json"), *dir = kvcal_test_path("q_ck");
    const char *back = kvcal_test_path("q_back.json");
    char args[2048], *out = NULL;
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --q-scale --out '%s'", json);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL
             " --q-scale --format checkpoint --out '%s'",
             dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "validate-scales '%s'", dir);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "valid (0 errors, 0 warnings)"));
    free(out);
    snprintf(args, sizeof args, "convert '%s' --to kvcal --out '%s'", dir, back);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "%s/kv_scales.safetensors", dir);
    size_t len = 0;
    char *shard = kvcal_test_read_file(args, &len); /* a u64 size, then the header */
    CU_ASSERT_PTR_NOT_NULL(shard && len > 8 &&
                           strstr(shard + 8,
                                  "\"model.layers.4.self_attn.q_scale\":{\"dtype\":"
                                  "\"F32\",\"shape\":[8,1,1]"));
    free(shard);
    cJSON *a = load_json(json), *b = load_json(back);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    float ha[5][8], hb[5][8], la[5], lb[5];
    CU_ASSERT_EQUAL(q_scales(a, ha, la), 5);
    CU_ASSERT_EQUAL(q_scales(b, hb, lb), 5);
    CU_ASSERT_EQUAL(memcmp(ha, hb, sizeof ha), 0);
    CU_ASSERT_EQUAL(memcmp(la, lb, sizeof la), 0);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* The checkpoint above with every layer's q_scale rewritten to `q_values`
 * values (K and V per head as written): validate-scales' verdict. */
static int verdict_with_q_values(const char *dir, int q_values, char **out)
{
    static float kv[4] = {0.01f, 0.02f, 0.03f, 0.04f},
                 q[8] = {0.05f, 0.05f, 0.05f, 0.05f, 0.06f, 0.06f, 0.06f, 0.06f};
    char names[15][64], path[1024], args[1200];
    kvcal_tensor_out t[15];
    for (int l = 0; l < 5; l++)
        for (int i = 0; i < 3; i++) {
            kvcal_tensor_out *o = &t[3 * l + i];
            snprintf(names[3 * l + i], 64, "model.layers.%d.self_attn.%c_scale", l,
                     "kvq"[i]);
            o->name = names[3 * l + i];
            o->dtype = KVCAL_DTYPE_F32;
            o->ndim = 3;
            o->shape[0] = i < 2 ? 4 : q_values;
            o->shape[1] = o->shape[2] = 1;
            o->data = i < 2 ? (const void *)kv : (const void *)q;
        }
    snprintf(path, sizeof path, "%s/kv_scales.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(path, t, 15, NULL), KVCAL_OK);
    snprintf(args, sizeof args, "validate-scales '%s'", dir);
    return kvcal_test_run_kvcal(args, out);
}

/* Under attn_head vLLM views q_scale as (-1, num_attention_heads /
 * num_key_value_heads) and takes each group's max: one value per query head
 * loads (q_scale their max), one value for a model with 2 query heads a kv
 * head fails to load, and so does any other count. */
static void validate_takes_one_q_scale_per_query_head_under_attn_head(void)
{
    const char *dir = kvcal_test_path("q_rule_ck");
    char args[1024], *out = NULL;
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL
             " --q-scale --format checkpoint --out '%s'",
             dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT_EQUAL(verdict_with_q_values(dir, 8, &out), 0);
    free(out);
    out = NULL;
    CU_ASSERT_EQUAL(verdict_with_q_values(dir, 1, &out), 1);
    CU_ASSERT_PTR_NOT_NULL(out &&
                           strstr(out, "has 1 value, expected num_attention_heads (8)"));
    CU_ASSERT_PTR_NOT_NULL(out &&
                           strstr(out, "views q_scale as (-1, num_attention_heads"));
    free(out);
    out = NULL;
    CU_ASSERT_EQUAL(verdict_with_q_values(dir, 4, &out), 1);
    CU_ASSERT_PTR_NOT_NULL(out &&
                           strstr(out, "has 4 values, expected num_attention_heads (8)"));
    free(out);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(calibrate_q_scale_writes_each_query_heads_scale_and_their_max),
    KVCAL_TEST(q_scale_round_trips_through_a_per_head_checkpoint),
    KVCAL_TEST(validate_takes_one_q_scale_per_query_head_under_attn_head),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(q_scale_cli, KVCAL_NEEDS_NOTHING, tests)
