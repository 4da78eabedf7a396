/* tests/test_scales_io.c: the three scales formats (write -> read gives the
 * same floats exactly), the validation rules, the vLLM fixture. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/scales.h"
#include "io/json_file.h"
#include "io/checkpoint/safetensors.h"
#include "io/scales/scales_validate.h"
#include "tests/test_util.h"

#define LLAMA2 "tests/fixtures/llama2-7b"
#define TINY "tests/malformed/scales/tiny" /* 2 layers, 8 heads, 4 kv heads */

/* --- helpers ------------------------------------------------------------- */

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A tiny-model scale set with distinct K and V per head. */
static kvcal_scales_t *make_tiny(kvcal_granularity g)
{
    kvcal_scales_t *s = NULL;
    if (kvcal_scales_create(2, 4, &s))
        return NULL;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 4; h++) {
            float k = g == KVCAL_GRANULARITY_HEAD ? 0.0123f * (h + 1) + 0.00071f * l
                                                  : 0.031f + l;
            float v = g == KVCAL_GRANULARITY_HEAD ? 0.0217f * (h + 1) / 3.0f + 0.001f * l
                                                  : 0.017f + 0.5f * l;
            kvcal_scales_set_head(s, l, h, k, v / 7.0f);
        }
    s->granularity = g;
    snprintf(s->model.model_type, sizeof s->model.model_type, "llama");
    return s;
}

static int same_scales(const kvcal_scales_t *a, const kvcal_scales_t *b)
{
    size_t n = (size_t)a->num_layers * a->num_kv_heads;
    return a->num_layers == b->num_layers && a->num_kv_heads == b->num_kv_heads &&
           !memcmp(a->k_head, b->k_head, n * sizeof(float)) &&
           !memcmp(a->v_head, b->v_head, n * sizeof(float));
}

/* Validates path (must succeed as a call) and returns the report. */
static kvcal_report_t *validate(const char *path, const char *model, int tp)
{
    kvcal_report_t *rep = NULL;
    CU_ASSERT_EQUAL(kvcal_scales_validate_file(path, model, tp, &rep), KVCAL_OK);
    return rep;
}

/* 1 when some finding of `severity` contains `text`. */
static int has_finding(const kvcal_report_t *rep, kvcal_severity severity,
                       const char *text)
{
    for (int i = 0; i < kvcal_report_count(rep); i++) {
        kvcal_finding f;
        kvcal_report_get(rep, i, &f);
        if (f.severity == severity && (strstr(f.message, text) || strstr(f.place, text) ||
                                       strstr(f.consequence, text)))
            return 1;
    }
    return 0;
}

/* A model directory under the test tmpdir with the tiny config.json (plus
 * `extra` members merged at the top level when not NULL). */
static const char *make_model_dir(const char *name, const char *extra)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path(name));
    mkdir(dir, 0755);
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char text[1024];
    snprintf(text, sizeof text,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
             "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
             "\"num_key_value_heads\": 4, \"vocab_size\": 512%s%s}",
             extra ? ", " : "", extra ? extra : "");
    kvcal_test_write_file(path, text, strlen(text));
    return dir;
}

/* --- the vLLM fixture ------------------------------------------------------ */

static void vllm_legacy_fixture_validates_at_tp1_and_fails_at_tp2(void)
{
    kvcal_report_t *rep = validate(LLAMA2 "/kv_cache_scales.json", LLAMA2, 1);
    CU_ASSERT_EQUAL(kvcal_report_format(rep), KVCAL_FORMAT_LEGACY_JSON);
    CU_ASSERT_TRUE(kvcal_report_passes(rep, 1));
    CU_ASSERT_EQUAL(kvcal_report_count(rep), 0);
    kvcal_report_destroy(rep);

    rep = validate(LLAMA2 "/kv_cache_scales.json", LLAMA2, 2);
    CU_ASSERT_FALSE(kvcal_report_passes(rep, 0));
    kvcal_finding f;
    CU_ASSERT_EQUAL(kvcal_report_get(rep, 0, &f), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(f.place, "kv_cache.scaling_factor");
    CU_ASSERT_STRING_EQUAL(f.message, "1 rank but tp 2");
    CU_ASSERT_PTR_NOT_NULL(strstr(f.consequence, "uses scale 1.0 for every layer"));
    kvcal_report_destroy(rep);
}

static void vllm_legacy_fixture_loads_its_values(void)
{
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_scales_load(LLAMA2 "/kv_cache_scales.json", LLAMA2, 1, &s), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_scales_num_layers(s), 32);
    CU_ASSERT_EQUAL(kvcal_scales_num_kv_heads(s), 32);
    CU_ASSERT_EQUAL(kvcal_scales_granularity(s), KVCAL_GRANULARITY_TENSOR);
    CU_ASSERT_EQUAL(s->kv_shared, 1);
    float k, v;
    kvcal_scales_get_head(s, 0, 17, &k, &v);
    CU_ASSERT_EQUAL(k, (float)0.0152239128947258);
    CU_ASSERT_EQUAL(v, k);
    kvcal_scales_get_tensor(s, 31, &k, &v);
    CU_ASSERT_EQUAL(k, (float)0.0482352152466774);
    kvcal_scales_destroy(s);
    CU_ASSERT_EQUAL(kvcal_scales_load(LLAMA2 "/kv_cache_scales.json", LLAMA2, 2, &s),
                    KVCAL_ERR_MISMATCH);
    CU_ASSERT(kvcal_test_error_has("1 rank but tp 2"));
}

static void shared_vllm_fixture_is_the_bundled_copy(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/fixtures/vllm/llama2-7b-kv_cache_scales.json",
             kvcal_test_shared_dir());
    size_t n1 = 0, n2 = 0;
    char *a = kvcal_test_read_file(path, &n1);
    char *b = kvcal_test_read_file(LLAMA2 "/kv_cache_scales.json", &n2);
    CU_ASSERT_FATAL(a && b);
    CU_ASSERT(n1 == n2 && !memcmp(a, b, n1));
    free(a);
    free(b);
    kvcal_report_t *rep = validate(path, LLAMA2, 1);
    CU_ASSERT_TRUE(kvcal_report_passes(rep, 1));
    kvcal_report_destroy(rep);
}

/* --- legacy JSON ----------------------------------------------------------- */

static void legacy_round_trip_is_exact(void)
{
    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_TENSOR), *r = NULL;
    for (int l = 0; l < 2; l++)
        kvcal_scales_set_layer(s, l, 0.0152239128947258f * (l + 1),
                               0.0152239128947258f * (l + 1));
    const char *p = kvcal_test_path("legacy_rt.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_LEGACY_JSON, p, NULL, 1),
                          KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(p, TINY, 1, &r), KVCAL_OK);
    CU_ASSERT_TRUE(same_scales(s, r));
    CU_ASSERT_STRING_EQUAL(r->model.model_type, "llama");
    kvcal_scales_destroy(s);
    kvcal_scales_destroy(r);
}

static void legacy_writer_takes_max_of_k_v_over_each_ranks_heads(void)
{
    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_HEAD), *r = NULL;
    const char *p = kvcal_test_path("legacy_tp2.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_LEGACY_JSON, p, NULL, 2),
                          KVCAL_OK);
    cJSON *root = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(p, &root), KVCAL_OK);
    cJSON *sf =
        cJSON_GetObjectItem(cJSON_GetObjectItem(root, "kv_cache"), "scaling_factor");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(sf), 2);
    for (int rank = 0; rank < 2; rank++)
        for (int l = 0; l < 2; l++) {
            float want = 0.0f;
            for (int h = 2 * rank; h < 2 * rank + 2; h++) {
                float k, v;
                kvcal_scales_get_head(s, l, h, &k, &v);
                want = fmaxf(want, fmaxf(k, v));
            }
            char rk[16], lk[16];
            snprintf(rk, sizeof rk, "%d", rank);
            snprintf(lk, sizeof lk, "%d", l);
            cJSON *x = cJSON_GetObjectItem(cJSON_GetObjectItem(sf, rk), lk);
            CU_ASSERT_EQUAL((float)x->valuedouble, want);
        }
    cJSON_Delete(root);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(p, TINY, 2, &r), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_scales_granularity(r), KVCAL_GRANULARITY_HEAD);
    float k0, k1, k2;
    kvcal_scales_get_head(r, 1, 0, &k0, NULL);
    kvcal_scales_get_head(r, 1, 1, &k1, NULL);
    kvcal_scales_get_head(r, 1, 2, &k2, NULL);
    CU_ASSERT_EQUAL(k0, k1);
    CU_ASSERT_NOT_EQUAL(k1, k2);
    kvcal_scales_destroy(s);
    kvcal_scales_destroy(r);
}

static void legacy_replicates_heads_when_tp_exceeds_kv_heads(void)
{
    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_HEAD), *r = NULL;
    const char *p = kvcal_test_path("legacy_tp8.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_LEGACY_JSON, p, NULL, 8),
                          KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(p, TINY, 8, &r), KVCAL_OK);
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 4; h++) {
            float k, v, rk;
            kvcal_scales_get_head(s, l, h, &k, &v);
            kvcal_scales_get_head(r, l, h, &rk, NULL);
            CU_ASSERT_EQUAL(rk, fmaxf(k, v));
        }
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_LEGACY_JSON, p, NULL, 3),
                    KVCAL_ERR_MISMATCH);
    kvcal_scales_destroy(s);
    kvcal_scales_destroy(r);
}

static void legacy_without_model_takes_the_files_rank_and_layer_count(void)
{
    kvcal_report_t *rep = validate(LLAMA2 "/kv_cache_scales.json", NULL, 0);
    CU_ASSERT_TRUE(kvcal_report_passes(rep, 1));
    kvcal_report_destroy(rep);
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(LLAMA2 "/kv_cache_scales.json", NULL, 0, &s),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_scales_num_layers(s), 32);
    CU_ASSERT_EQUAL(kvcal_scales_num_kv_heads(s), 1);
    kvcal_scales_destroy(s);
}

/* A file of more ranks than the tp it is read at names the --tp that reads
 * it (eval's default is 1: "2 ranks but tp 1" alone left the user to guess)
 * and the convert that rewrites it for that tp. */
static void legacy_rank_count_mismatch_names_the_tp_to_pass(void)
{
    const char *text = "{\"model_type\": \"llama\", \"kv_cache\": {\"dtype\": "
                       "\"float8_e4m3fn\", \"scaling_factor\": {\"0\": {\"0\": 0.05, "
                       "\"1\": 0.05}, \"1\": {\"0\": 0.05, \"1\": 0.05}}}}";
    const char *p = kvcal_test_path("two_ranks.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(p, text, strlen(text)), 0);
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL(kvcal_scales_load(p, NULL, 1, &s), KVCAL_ERR_MISMATCH);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT(kvcal_test_error_has("2 ranks but tp 1"));
    CU_ASSERT(kvcal_test_error_has("it is for tp 2 (--tp 2)"));
    CU_ASSERT(kvcal_test_error_has("--to legacy --tp 1"));
    CU_ASSERT(kvcal_test_error_has(p));
    kvcal_report_t *rep = validate(p, NULL, 3);
    kvcal_finding f;
    CU_ASSERT_EQUAL_FATAL(kvcal_report_get(rep, 0, &f), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(f.message, "2 ranks but tp 3");
    CU_ASSERT_PTR_NOT_NULL(strstr(f.consequence, "it is for tp 2 (--tp 2)"));
    kvcal_report_destroy(rep);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(p, NULL, 2, &s), KVCAL_OK);
    kvcal_scales_destroy(s);
}

/* --- kvcal JSON ------------------------------------------------------------ */

static void kvcal_json_round_trip_keeps_every_field(void)
{
    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_HEAD), *r = NULL;
    s->has_absmax = s->has_clip = 1;
    for (int i = 0; i < 8; i++) {
        s->k_absmax[i] = 448.0f * s->k_head[i] * 0.999f;
        s->v_absmax[i] = (float)i / 3.0f;
    }
    s->k_clip[0] = 1e-5f;
    s->v_clip[1] = 0.25f / 3.0f;
    snprintf(s->model.architecture, sizeof s->model.architecture, "LlamaForCausalLM");
    s->model.num_attention_heads = 8;
    s->model.head_dim = 8;
    snprintf(s->provenance.observer, sizeof s->provenance.observer, "percentile");
    snprintf(s->provenance.observer_params, sizeof s->provenance.observer_params,
             "{\"q\":99.99}");
    snprintf(s->provenance.dataset, sizeof s->provenance.dataset, "wikitext");
    s->provenance.num_samples = 512;
    s->provenance.num_tokens = 1048576;
    s->provenance.seed = 1234;
    const char *p = kvcal_test_path("kvcal_rt.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_KVCAL_JSON, p, NULL, 0),
                          KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(p, TINY, 4, &r), KVCAL_OK);
    CU_ASSERT_TRUE(same_scales(s, r));
    CU_ASSERT_EQUAL(r->granularity, KVCAL_GRANULARITY_HEAD);
    CU_ASSERT_EQUAL(r->has_absmax, 1);
    CU_ASSERT_EQUAL(r->has_clip, 1);
    CU_ASSERT(!memcmp(s->k_absmax, r->k_absmax, 8 * sizeof(float)));
    CU_ASSERT(!memcmp(s->v_absmax, r->v_absmax, 8 * sizeof(float)));
    CU_ASSERT(!memcmp(s->k_clip, r->k_clip, 2 * sizeof(float)));
    CU_ASSERT(!memcmp(s->v_clip, r->v_clip, 2 * sizeof(float)));
    CU_ASSERT(!memcmp(&s->model, &r->model, sizeof s->model));
    CU_ASSERT_STRING_EQUAL(r->provenance.observer, "percentile");
    CU_ASSERT_STRING_EQUAL(r->provenance.observer_params, "{\"q\":99.99}");
    CU_ASSERT_STRING_EQUAL(r->provenance.dataset, "wikitext");
    CU_ASSERT_EQUAL(r->provenance.num_tokens, 1048576);
    CU_ASSERT_EQUAL(r->provenance.seed, 1234);
    kvcal_scales_destroy(s);
    kvcal_scales_destroy(r);
}

static void kvcal_json_tensor_granularity_without_per_head_arrays_loads(void)
{
    const char *text =
        "{\"format\": \"kvcal-kv-scales\", \"version\": 1, \"model\": {\"num_layers\": "
        "2, "
        "\"num_kv_heads\": 4}, \"dtype\": \"float8_e4m3fn\", \"fp8_max\": 448, "
        "\"granularity\": \"tensor\", \"layers\": [{\"layer\": 0, \"k_scale\": 0.25, "
        "\"v_scale\": 0.125}, {\"layer\": 1, \"k_scale\": 0.0625, \"v_scale\": "
        "0.03125}]}";
    const char *p = kvcal_test_path("kvcal_tensor.json");
    kvcal_test_write_file(p, text, strlen(text));
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(p, NULL, 0, &s), KVCAL_OK);
    float k, v;
    kvcal_scales_get_head(s, 1, 3, &k, &v);
    CU_ASSERT_EQUAL(k, 0.0625f);
    CU_ASSERT_EQUAL(v, 0.03125f);
    CU_ASSERT_EQUAL(kvcal_scales_granularity(s), KVCAL_GRANULARITY_TENSOR);
    kvcal_scales_destroy(s);
}

/* --- checkpoint ------------------------------------------------------------ */

static void checkpoint_round_trip_per_tensor_and_per_head(void)
{
    const char *model = make_model_dir("ck_model", NULL);
    for (int g = 0; g < 2; g++) {
        kvcal_scales_t *s = make_tiny((kvcal_granularity)g), *r = NULL;
        char out[600];
        snprintf(out, sizeof out, "%s", kvcal_test_path(g ? "ck_head" : "ck_tensor"));
        CU_ASSERT_EQUAL_FATAL(
            kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, out, model, 0), KVCAL_OK);
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(out, NULL, 0, &r), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_scales_granularity(r), (kvcal_granularity)g);
        CU_ASSERT_EQUAL(r->kv_shared, 0);
        if (g) {
            CU_ASSERT_TRUE(same_scales(s, r));
        } else {
            for (int l = 0; l < 2; l++) {
                float k, v, rk, rv;
                kvcal_scales_get_tensor(s, l, &k, &v);
                kvcal_scales_get_head(r, l, 3, &rk, &rv);
                CU_ASSERT(k == rk && v == rv);
            }
        }
        kvcal_scales_destroy(r);
        /* the single shard reads back too (config.json beside it) */
        char shard[700];
        snprintf(shard, sizeof shard, "%s/kv_scales.safetensors", out);
        CU_ASSERT_EQUAL(kvcal_scales_load(shard, NULL, 0, &r), KVCAL_OK);
        CU_ASSERT_TRUE(r && r->k_head[0] == s->k_head[0]);
        kvcal_scales_destroy(r);

        kvcal_safetensors_t *st = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(shard, &st), KVCAL_OK);
        const kvcal_tensor_info *t =
            kvcal_safetensors_find(st, "model.layers.1.self_attn.v_scale");
        CU_ASSERT_FATAL(t != NULL);
        CU_ASSERT_EQUAL(t->dtype, KVCAL_DTYPE_F32);
        CU_ASSERT_EQUAL(t->ndim, g ? 3 : 1);
        CU_ASSERT_EQUAL(t->shape[0], g ? 4 : 1);
        kvcal_safetensors_close(st);

        char cfg[700];
        snprintf(cfg, sizeof cfg, "%s/config.json", out);
        cJSON *root = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_json_load(cfg, &root), KVCAL_OK);
        cJSON *qc = cJSON_GetObjectItem(root, "quantization_config");
        cJSON *ks = cJSON_GetObjectItem(qc, "kv_cache_scheme");
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(qc, "quant_method")->valuestring,
                               "compressed-tensors");
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(ks, "strategy")->valuestring,
                               g ? "attn_head" : "tensor");
        CU_ASSERT_EQUAL(cJSON_GetObjectItem(ks, "num_bits")->valuedouble, 8);
        CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(ks, "symmetric")));
        CU_ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(ks, "dynamic")));
        CU_ASSERT_EQUAL(cJSON_GetObjectItem(root, "vocab_size")->valuedouble, 512);
        if (g)
            CU_ASSERT_EQUAL(cJSON_GetObjectItem(qc, "total_num_kv_heads")->valuedouble,
                            4);
        cJSON_Delete(root);
        kvcal_scales_destroy(s);
    }
}

static void checkpoint_export_keeps_quantization_config_and_extends_index(void)
{
    const char *model =
        make_model_dir("ck_model_q", "\"quantization_config\": {\"quant_method\": "
                                     "\"compressed-tensors\", \"format\": "
                                     "\"float-quantized\", \"ignore\": "
                                     "[\"lm_head\"]}");
    /* the model's own weights: one tensor in model.safetensors */
    char p[700];
    float w[6] = {1, 2, 3, 4, 5, 6};
    kvcal_tensor_out t = {"model.embed_tokens.weight", KVCAL_DTYPE_F32, 2, {2, 3}, w};
    snprintf(p, sizeof p, "%s/model.safetensors", model);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(p, &t, 1, NULL), KVCAL_OK);
    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_TENSOR);
    const char *out = kvcal_test_path("ck_q_out");
    char outdir[600];
    snprintf(outdir, sizeof outdir, "%s", out);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, outdir, model, 0), KVCAL_OK);
    cJSON *root = NULL;
    snprintf(p, sizeof p, "%s/config.json", outdir);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(p, &root), KVCAL_OK);
    cJSON *qc = cJSON_GetObjectItem(root, "quantization_config");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(qc, "format")->valuestring,
                           "float-quantized");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(qc, "ignore")), 1);
    CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItem(qc, "kv_cache_scheme"));
    cJSON_Delete(root);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", outdir);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(p, &root), KVCAL_OK);
    cJSON *map = cJSON_GetObjectItem(root, "weight_map");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(map), 1 + 4);
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetObjectItem(map, "model.embed_tokens.weight")->valuestring,
        "model.safetensors");
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetObjectItem(map, "model.layers.1.self_attn.k_scale")->valuestring,
        "kv_scales.safetensors");
    CU_ASSERT_EQUAL(
        cJSON_GetObjectItem(cJSON_GetObjectItem(root, "metadata"), "total_size")
            ->valuedouble,
        6 * 4 + 4 * 4);
    cJSON_Delete(root);

    /* exporting into the model directory itself extends its own index */
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, outdir, outdir, 0),
                    KVCAL_OK);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", outdir);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(p, &root), KVCAL_OK);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(root, "weight_map")), 5);
    cJSON_Delete(root);
    kvcal_scales_destroy(s);
}

/* A model whose own shard already holds k_scale (an FP8 checkpoint being
 * recalibrated): adding kv_scales.safetensors beside it would leave two
 * copies, of which vLLM keeps the last one read. The export refuses and
 * writes nothing. */
static void checkpoint_export_refuses_scales_the_model_shards_already_hold(void)
{
    const char *model = make_model_dir("ck_model_stale", NULL);
    char p[700];
    float w[6] = {1, 2, 3, 4, 5, 6}, old_scale[1] = {1.0f};
    kvcal_tensor_out t[2] = {
        {"model.embed_tokens.weight", KVCAL_DTYPE_F32, 2, {2, 3}, w},
        {"model.layers.0.self_attn.k_scale", KVCAL_DTYPE_F32, 1, {1}, old_scale}};
    snprintf(p, sizeof p, "%s/model.safetensors", model);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(p, t, 2, NULL), KVCAL_OK);
    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_TENSOR);
    const char *out = kvcal_test_path("ck_stale_out");
    char outdir[600];
    snprintf(outdir, sizeof outdir, "%s", out);
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, outdir, model, 0),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has(
        "model.layers.0.self_attn.k_scale is already stored in model.safetensors"));
    snprintf(p, sizeof p, "%s/kv_scales.safetensors", outdir);
    struct stat sb;
    CU_ASSERT_NOT_EQUAL(stat(p, &sb), 0);
    kvcal_scales_destroy(s);
}

/* The same for the qkqkv_proj spelling of a fused-QKV model's names, which
 * vLLM loads as the attention's k_scale (base_config.py
 * get_cache_scale_mapper, regex \.self_attn\.qk(?:qk)?v_proj\.([kv])_scale$):
 * a model shard holding it would be loaded beside the new shard. */
static void checkpoint_export_refuses_qkqkv_proj_scales_the_model_shards_hold(void)
{
    const char *model = make_model_dir("ck_model_stale_qkqkv", NULL);
    char p[700];
    const char *v = "model.layers.1.self_attn.qkqkv_proj.v_scale";
    float w[6] = {1, 2, 3, 4, 5, 6}, old_scale[1] = {0.5f};
    kvcal_tensor_out t[2] = {{"model.embed_tokens.weight", KVCAL_DTYPE_F32, 2, {2, 3}, w},
                             {v, KVCAL_DTYPE_F32, 1, {1}, old_scale}};
    snprintf(p, sizeof p, "%s/model.safetensors", model);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(p, t, 2, NULL), KVCAL_OK);
    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_TENSOR);
    char outdir[600];
    snprintf(outdir, sizeof outdir, "%s", kvcal_test_path("ck_stale_qkqkv_out"));
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, outdir, model, 0),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("model.layers.1.self_attn.qkqkv_proj.v_scale is "
                                   "already stored in model.safetensors"));
    snprintf(p, sizeof p, "%s/kv_scales.safetensors", outdir);
    struct stat sb;
    CU_ASSERT_NOT_EQUAL(stat(p, &sb), 0);
    kvcal_scales_destroy(s);
}

/* vLLM reads only the shards model.safetensors.index.json names: a
 * kv_scales.safetensors the index does not list is never loaded. */
static void checkpoint_validation_requires_the_scales_shard_in_the_index(void)
{
    const char *model = make_model_dir("ck_model_index", NULL);
    char p[700];
    float w[6] = {1, 2, 3, 4, 5, 6};
    kvcal_tensor_out t = {"model.embed_tokens.weight", KVCAL_DTYPE_F32, 2, {2, 3}, w};
    snprintf(p, sizeof p, "%s/model.safetensors", model);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(p, &t, 1, NULL), KVCAL_OK);
    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_TENSOR);
    char outdir[600];
    snprintf(outdir, sizeof outdir, "%s", kvcal_test_path("ck_index_out"));
    CU_ASSERT_EQUAL_FATAL(
        kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, outdir, model, 0), KVCAL_OK);
    kvcal_scales_destroy(s);
    kvcal_report_t *rep = validate(outdir, NULL, 0);
    CU_ASSERT(kvcal_report_passes(rep, 0));
    kvcal_report_destroy(rep);
    const char *index = "{\"metadata\": {\"total_size\": 24}, \"weight_map\": "
                        "{\"model.embed_tokens.weight\": \"model.safetensors\"}}";
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", outdir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(p, index, strlen(index)), 0);
    rep = validate(outdir, NULL, 0);
    CU_ASSERT_FALSE(kvcal_report_passes(rep, 0));
    CU_ASSERT(has_finding(rep, KVCAL_SEVERITY_ERROR,
                          "kv_scales.safetensors is not listed in "
                          "model.safetensors.index.json"));
    kvcal_report_destroy(rep);
}

/* Writes a checkpoint dir with the given tensors and config extra. */
static const char *make_checkpoint(const char *name, const char *config_extra,
                                   const kvcal_tensor_out *t, int n)
{
    const char *dir = make_model_dir(name, config_extra);
    char p[600];
    snprintf(p, sizeof p, "%s/kv_scales.safetensors", dir);
    CU_ASSERT_EQUAL(kvcal_safetensors_write(p, t, n, NULL), KVCAL_OK);
    return dir;
}

#define SCHEME_TENSOR                                                                    \
    "\"quantization_config\": {\"quant_method\": \"compressed-tensors\", "               \
    "\"kv_cache_scheme\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "         \
    "\"tensor\", "                                                                       \
    "\"dynamic\": false, \"symmetric\": true}}"

#define QUANT_FP8                                                                        \
    "\"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": "       \
    "\"static\"}"

/* vLLM renames the deprecated single kv_scale to k_scale. Its fp8 method
 * (BaseKVCacheMethod) then uses it for K and V; compressed-tensors keeps V
 * at the 1.0 it starts with, so that checkpoint is refused. The
 * k_proj.output_scale names load under fp8 (its cache scale mapper renames
 * them) and are refused under compressed-tensors, whose mapper leaves them
 * to the stacked q/k/v rename (tests/engines/run.py shows both). */
static void checkpoint_reader_accepts_older_names_and_single_kv_scale(void)
{
    float a = 0.125f, b = 0.25f, c = 0.5f;
    kvcal_tensor_out t[3] = {
        {"model.layers.0.self_attn.k_proj.output_scale", KVCAL_DTYPE_F32, 1, {1}, &a},
        {"model.layers.0.self_attn.v_proj.output_scale", KVCAL_DTYPE_F32, 0, {0}, &b},
        {"model.layers.1.self_attn.kv_scale", KVCAL_DTYPE_F32, 1, {1}, &c},
    };
    const char *dir = make_checkpoint("ck_old_names", QUANT_FP8, t, 3);
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(dir, NULL, 0, &s), KVCAL_OK);
    float k, v;
    kvcal_scales_get_head(s, 0, 2, &k, &v);
    CU_ASSERT(k == a && v == b);
    kvcal_scales_get_head(s, 1, 0, &k, &v);
    CU_ASSERT(k == c && v == c);
    kvcal_scales_destroy(s);
    kvcal_report_t *rep = validate(dir, NULL, 0);
    CU_ASSERT_TRUE(kvcal_report_passes(rep, 0));
    CU_ASSERT_FALSE(has_finding(rep, KVCAL_SEVERITY_ERROR, "qkv_proj.output_scale"));
    kvcal_report_destroy(rep);

    dir = make_checkpoint("ck_old_names_ct", SCHEME_TENSOR, t, 3);
    rep = validate(dir, NULL, 0);
    CU_ASSERT_FALSE(kvcal_report_passes(rep, 0));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_ERROR, "V keeps scale 1.0"));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_ERROR, "qkv_proj.output_scale"));
    kvcal_report_destroy(rep);
}

static void checkpoint_validation_names_missing_tensors_shapes_and_scheme(void)
{
    float one[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    kvcal_tensor_out t[4] = {
        {"model.layers.0.self_attn.k_scale", KVCAL_DTYPE_F32, 3, {4, 1, 1}, one},
        {"model.layers.0.self_attn.v_scale", KVCAL_DTYPE_F32, 1, {3}, one},
        {"model.layers.1.self_attn.k_scale", KVCAL_DTYPE_F32, 1, {1}, one},
        {"model.layers.2.self_attn.k_scale", KVCAL_DTYPE_F32, 1, {1}, one},
    };
    const char *dir = make_checkpoint("ck_bad", SCHEME_TENSOR, t, 4);
    kvcal_report_t *rep = validate(dir, NULL, 0);
    CU_ASSERT_FALSE(kvcal_report_passes(rep, 0));
    CU_ASSERT_TRUE(
        has_finding(rep, KVCAL_SEVERITY_ERROR, "per-head-shaped but kv_cache_scheme"));
    CU_ASSERT_TRUE(
        has_finding(rep, KVCAL_SEVERITY_ERROR, "shape has 3 values, expected"));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_ERROR, "v_scale missing"));
    CU_ASSERT_TRUE(
        has_finding(rep, KVCAL_SEVERITY_ERROR, "layer 2 beyond the model's 2 layers"));
    kvcal_report_destroy(rep);

    kvcal_tensor_out ok[2] = {
        {"model.layers.0.self_attn.k_scale", KVCAL_DTYPE_F32, 1, {1}, &one[0]},
        {"model.layers.0.self_attn.v_scale", KVCAL_DTYPE_F32, 1, {1}, &one[1]},
    };
    dir = make_checkpoint("ck_noscheme", NULL, ok, 2);
    rep = validate(dir, NULL, 0);
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_ERROR, "quantization_config"));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_ERROR, "model.layers.1.self_attn"));
    kvcal_report_destroy(rep);

    dir = make_checkpoint("ck_e5m2",
                          "\"quantization_config\": {\"quant_method\": "
                          "\"compressed-tensors\", \"kv_cache_scheme\": "
                          "{\"num_bits\": 4, \"type\": \"int\", \"strategy\": "
                          "\"channel\", \"symmetric\": false}}",
                          ok, 2);
    rep = validate(dir, NULL, 0);
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_ERROR, "type \"float\""));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_ERROR, "symmetric"));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_ERROR, "\"tensor\" or \"attn_head\""));
    kvcal_report_destroy(rep);
}

/* kvcal convert --to checkpoint onto a model whose quantization method
 * vLLM reads no KV-cache scales for (awq, gptq: they are skipped) or reads
 * one per layer for (fp8: per-head tensors fail to load) writes nothing. */
static void checkpoint_export_refuses_methods_that_would_not_use_the_scales(void)
{
    static const struct {
        const char *quant, *error;
        kvcal_granularity g;
    } cases[] = {
        {"\"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4}",
         "quant_method is \"awq\": vLLM gives its attention layers no KV-cache method",
         KVCAL_GRANULARITY_TENSOR},
        {"\"quantization_config\": {\"quant_method\": \"GPTQ\", \"bits\": 4}",
         "quant_method is \"gptq\"", KVCAL_GRANULARITY_TENSOR},
        {QUANT_FP8, "reads one scale per layer: per-head scales would fail to load",
         KVCAL_GRANULARITY_HEAD},
        {"\"quantization_config\": {\"bits\": 4}", "has no quant_method",
         KVCAL_GRANULARITY_TENSOR},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "ck_refuse_model_%zu", i);
        const char *model = make_model_dir(name, cases[i].quant);
        kvcal_scales_t *s = make_tiny(cases[i].g);
        char out[600];
        snprintf(name, sizeof name, "ck_refuse_out_%zu", i);
        snprintf(out, sizeof out, "%s", kvcal_test_path(name));
        CU_ASSERT_NOT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, out, model, 0),
                            KVCAL_OK);
        CU_ASSERT(kvcal_test_error_has(cases[i].error));
        char p[700];
        snprintf(p, sizeof p, "%s/kv_scales.safetensors", out);
        CU_ASSERT_FALSE(exists(p));
        kvcal_scales_destroy(s);
    }
    /* fp8 with per-tensor scales is what its loader reads */
    const char *model = make_model_dir("ck_fp8_model", QUANT_FP8);
    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_TENSOR), *r = NULL;
    char out[600];
    snprintf(out, sizeof out, "%s", kvcal_test_path("ck_fp8_out"));
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, out, model, 0),
                    KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_scales_load(out, NULL, 0, &r), KVCAL_OK);
    kvcal_scales_destroy(r);
    kvcal_scales_destroy(s);
}

/* --- legacy keys as sglang reads them -------------------------------------- */

/* Each key with what pydantic 2.14.3 (and 2.12.0) made of it as a
 * dict[int, ...] key: 'R' rejected, 'C' canonical, 'N' read as `value`.
 * The table was produced by running pydantic on these keys. */
static void legacy_keys_are_read_as_pydantic_reads_them(void)
{
    static const struct {
        const char *key;
        char kind;
        long value;
    } rows[] = {
        {"7", 'C', 7},
        {"0", 'C', 0},
        {"-1", 'C', -1},
        {"07", 'N', 7},
        {"+7", 'N', 7},
        {" 7", 'N', 7},
        {"7 ", 'N', 7},
        {"\t7\n", 'N', 7},
        {"\xc2\xa0"
         "7",
         'N', 7},
        {"\xe3\x80\x80"
         "7",
         'N', 7},
        {"7.0", 'N', 7},
        {"7.00", 'N', 7},
        {"07.0", 'N', 7},
        {"1_0", 'N', 10},
        {"1_0.0", 'N', 10},
        {"00", 'N', 0},
        {"-0", 'N', 0},
        {"0_7", 'N', 7},
        {"0__7", 'N', 7},
        {"0-5", 'N', -5},
        {"-07", 'N', -7},
        {"+0", 'N', 0},
        {"1__0", 'R', 0},
        {"_1", 'R', 0},
        {"1_", 'R', 0},
        {"7.", 'R', 0},
        {"7.5", 'R', 0},
        {"7.0_0", 'R', 0},
        {"+-1", 'R', 0},
        {"--1", 'R', 0},
        {"- 7", 'R', 0},
        {"0x7", 'R', 0},
        {"7e0", 'R', 0},
        {"", 'R', 0},
        {" ", 'R', 0},
        {"rank0", 'R', 0},
        {"\x1c"
         "7",
         'R', 0},
        {"\xe2\x80\x8b"
         "7",
         'R', 0},
        {"\xd9\xa1", 'R', 0},
        {"9223372036854775807", 'C', LONG_MAX},
        {"99999999999999999999", 'C', LONG_MAX},
        {"-99999999999999999999", 'C', LONG_MIN},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        long v = 12345;
        kvcal_int_key k = kvcal_parse_pydantic_int_key(rows[i].key, &v);
        char got = k == KVCAL_INT_KEY_REJECTED    ? 'R'
                   : k == KVCAL_INT_KEY_CANONICAL ? 'C'
                                                  : 'N';
        if (got != rows[i].kind || (got != 'R' && v != rows[i].value))
            printf("\n  key \"%s\": got %c %ld, want %c %ld", rows[i].key, got, v,
                   rows[i].kind, rows[i].value);
        CU_ASSERT_EQUAL(got, rows[i].kind);
        if (got != 'R')
            CU_ASSERT_EQUAL(v, rows[i].value);
    }
    char big[4400];
    memset(big, '1', 4301);
    big[4301] = '\0';
    long v = 0;
    CU_ASSERT_EQUAL(kvcal_parse_pydantic_int_key(big, &v), KVCAL_INT_KEY_REJECTED);
    big[4300] = '\0';
    CU_ASSERT_EQUAL(kvcal_parse_pydantic_int_key(big, &v), KVCAL_INT_KEY_CANONICAL);
}

/* sglang loads "01" as layer 1 and, of "1" and "01", keeps the later: kvcal
 * loads the same values and says where it normalized. */
static void legacy_normalized_keys_load_and_the_later_duplicate_wins(void)
{
    const char *text =
        "{\"model_type\": \"llama\", \"kv_cache\": {\"dtype\": \"float8_e4m3fn\", "
        "\"scaling_factor\": {\"00\": {\"+0\": 0.125, \"1\": 0.25, \"01\": 0.375}}}}";
    const char *p = kvcal_test_path("legacy_normalized.json");
    kvcal_test_write_file(p, text, strlen(text));
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(p, TINY, 1, &s), KVCAL_OK);
    float k, v;
    kvcal_scales_get_head(s, 0, 0, &k, &v);
    CU_ASSERT_EQUAL(k, 0.125f);
    kvcal_scales_get_head(s, 1, 3, &k, &v);
    CU_ASSERT_EQUAL(k, 0.375f);
    CU_ASSERT_EQUAL(v, 0.375f);
    kvcal_scales_destroy(s);
    kvcal_report_t *rep = validate(p, TINY, 1);
    CU_ASSERT_TRUE(kvcal_report_passes(rep, 0));
    CU_ASSERT_FALSE(kvcal_report_passes(rep, 1));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_WARNING, "reads it as rank 0"));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_WARNING, "reads it as layer 0"));
    CU_ASSERT_TRUE(
        has_finding(rep, KVCAL_SEVERITY_WARNING, "layer keys \"1\" and \"01\" both"));
    kvcal_report_destroy(rep);
}

/* --- writers refuse bad values ------------------------------------------------ */

static void writers_refuse_nonfinite_zero_negative_and_write_nothing(void)
{
    const char *model = make_model_dir("refuse_model", NULL);
    const float bad[3] = {NAN, 0.0f, -0.5f};
    const kvcal_format fmts[3] = {KVCAL_FORMAT_LEGACY_JSON, KVCAL_FORMAT_KVCAL_JSON,
                                  KVCAL_FORMAT_CHECKPOINT};
    for (int b = 0; b < 3; b++)
        for (int f = 0; f < 3; f++) {
            kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_HEAD);
            /* past the setters, which refuse these values themselves */
            s->v_head[kvcal_scales_index(s, 1, 2)] = bad[b];
            char name[64], path[600];
            snprintf(name, sizeof name, "refused_%d_%d", b, f);
            snprintf(path, sizeof path, "%s", kvcal_test_path(name));
            CU_ASSERT_EQUAL(kvcal_scales_write(s, fmts[f], path, model, 1),
                            KVCAL_ERR_NONFINITE);
            CU_ASSERT(kvcal_test_error_has("layer 1 kv head 2"));
            CU_ASSERT_FALSE(exists(path));
            kvcal_scales_destroy(s);
        }
}

/* Provenance counts are JSON numbers, exact only up to 2^53: a larger seed
 * would be written rounded and then refused by the reader; one of 16 digits
 * comes back exactly. */
static void kvcal_json_writer_refuses_provenance_beyond_2_pow_53(void)
{
    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_HEAD);
    const char *path = kvcal_test_path("big_seed.json");
    s->provenance.seed = 9223372036854775807LL;
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_KVCAL_JSON, path, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("provenance seed 9223372036854775807"));
    CU_ASSERT_FALSE(exists(path));
    s->provenance.seed = 4503599627370497LL; /* 2^52 + 1: 16 digits */
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_KVCAL_JSON, path, NULL, 0),
                          KVCAL_OK);
    kvcal_scales_t *back = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(path, NULL, 0, &back), KVCAL_OK);
    CU_ASSERT_EQUAL(back->provenance.seed, 4503599627370497LL);
    kvcal_scales_destroy(back);
    kvcal_scales_destroy(s);
}

/* --- warnings ------------------------------------------------------------------ */

static void validation_warns_on_unit_large_tiny_and_equal_kv(void)
{
    const char *text =
        "{\"model_type\": \"llama\", \"kv_cache\": {\"dtype\": \"float8_e4m3fn\", "
        "\"scaling_factor\": {\"0\": {\"0\": 1.0, \"1\": 0.75}}}, \"extra\": 1}";
    const char *p = kvcal_test_path("warn_legacy.json");
    kvcal_test_write_file(p, text, strlen(text));
    kvcal_report_t *rep = validate(p, TINY, 1);
    CU_ASSERT_TRUE(kvcal_report_passes(rep, 0));
    CU_ASSERT_FALSE(kvcal_report_passes(rep, 1));
    CU_ASSERT_EQUAL(kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR), 0);
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_WARNING, "exactly 1.0"));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_WARNING, "exceed 0.5"));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_WARNING, "unknown key \"extra\""));
    kvcal_report_destroy(rep);

    kvcal_scales_t *s = make_tiny(KVCAL_GRANULARITY_HEAD);
    for (int l = 0; l < 2; l++)
        kvcal_scales_set_layer(s, l, 5e-7f, 5e-7f);
    p = kvcal_test_path("warn_kvcal.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_KVCAL_JSON, p, NULL, 0),
                          KVCAL_OK);
    rep = validate(p, TINY, 0);
    CU_ASSERT_TRUE(kvcal_report_passes(rep, 0));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_WARNING, "below 1e-6"));
    CU_ASSERT_TRUE(has_finding(rep, KVCAL_SEVERITY_WARNING, "K and V scales are equal"));
    kvcal_report_destroy(rep);
    kvcal_scales_destroy(s);
}

static void validate_missing_file_is_an_io_error(void)
{
    kvcal_report_t *rep = (kvcal_report_t *)1;
    CU_ASSERT_EQUAL(
        kvcal_scales_validate_file(kvcal_test_path("nope.json"), NULL, 0, &rep),
        KVCAL_ERR_IO);
    CU_ASSERT_PTR_NULL(rep);
    CU_ASSERT_EQUAL(kvcal_scales_validate_file(LLAMA2 "/kv_cache_scales.json",
                                               "no/such/dir", 1, &rep),
                    KVCAL_ERR_IO);
    kvcal_report_destroy(NULL);
    CU_ASSERT_EQUAL(kvcal_report_count(NULL), 0);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(vllm_legacy_fixture_validates_at_tp1_and_fails_at_tp2),
    KVCAL_TEST(vllm_legacy_fixture_loads_its_values),
    KVCAL_TEST(legacy_round_trip_is_exact),
    KVCAL_TEST(legacy_writer_takes_max_of_k_v_over_each_ranks_heads),
    KVCAL_TEST(legacy_replicates_heads_when_tp_exceeds_kv_heads),
    KVCAL_TEST(legacy_without_model_takes_the_files_rank_and_layer_count),
    KVCAL_TEST(legacy_rank_count_mismatch_names_the_tp_to_pass),
    KVCAL_TEST(kvcal_json_round_trip_keeps_every_field),
    KVCAL_TEST(kvcal_json_tensor_granularity_without_per_head_arrays_loads),
    KVCAL_TEST(checkpoint_round_trip_per_tensor_and_per_head),
    KVCAL_TEST(checkpoint_export_keeps_quantization_config_and_extends_index),
    KVCAL_TEST(checkpoint_export_refuses_scales_the_model_shards_already_hold),
    KVCAL_TEST(checkpoint_export_refuses_qkqkv_proj_scales_the_model_shards_hold),
    KVCAL_TEST(checkpoint_validation_requires_the_scales_shard_in_the_index),
    KVCAL_TEST(checkpoint_reader_accepts_older_names_and_single_kv_scale),
    KVCAL_TEST(checkpoint_validation_names_missing_tensors_shapes_and_scheme),
    KVCAL_TEST(checkpoint_export_refuses_methods_that_would_not_use_the_scales),
    KVCAL_TEST(legacy_keys_are_read_as_pydantic_reads_them),
    KVCAL_TEST(legacy_normalized_keys_load_and_the_later_duplicate_wins),
    KVCAL_TEST(writers_refuse_nonfinite_zero_negative_and_write_nothing),
    KVCAL_TEST(kvcal_json_writer_refuses_provenance_beyond_2_pow_53),
    KVCAL_TEST(validation_warns_on_unit_large_tiny_and_equal_kv),
    KVCAL_TEST(validate_missing_file_is_an_io_error),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(scales_io, KVCAL_NEEDS_NOTHING, tests)

static CU_TestInfo shared_tests[] = {
    KVCAL_TEST(shared_vllm_fixture_is_the_bundled_copy),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(scales_shared, KVCAL_NEEDS_SHARED, shared_tests)
