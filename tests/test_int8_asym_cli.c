/* tests/test_int8_asym_cli.c: int8 with zero points end to end: `calibrate
 * --kv-dtype int8_asym` takes each head's scale and offset from the signed
 * range it observed (ModelSlim's rule); `--format ascend` / `convert --to
 * ascend` write vllm-ascend's C8 checkpoint (per-channel tensors, the
 * description listing every weight), offsets 0 for a symmetric int8 set and
 * non-zero ones only when forced, and read back to the same set; what no
 * engine would serve is refused and nothing written. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/scale_rule.h"
#include "core/scales.h"
#include "io/checkpoint/safetensors.h"
#include "io/stats_hdf5.h"
#include "kvcal.h"
#include "observers/stats.h"
#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"
#define GOLDEN "tests/fixtures/golden/llama_gqa_mlp256_bf16"
#define SMALL "--num-samples 4 --seq-len 64 --batch 2 --quiet"

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* A token set of ids below the golden fixtures' vocabulary of 128. */
static const char *golden_ids(void)
{
    const char *data = kvcal_test_path("asym_ids.jsonl");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_ids(data, 4, 64, 128, 23u), 0);
    return data;
}

static void calibrate_int8_asym_takes_scales_and_offsets_from_the_signed_range(void)
{
    char out_path[512], stats_path[512], args[2048];
    snprintf(out_path, sizeof out_path, "%s", kvcal_test_path("asym_cal.json"));
    snprintf(stats_path, sizeof stats_path, "%s", kvcal_test_path("asym_cal.h5"));
    for (int g = 0; g < 2; g++) {
        snprintf(args, sizeof args,
                 "calibrate --model " MODEL
                 " --kv-dtype int8_asym --granularity %s " SMALL
                 " --stats '%s' --out '%s' --json",
                 g ? "tensor" : "head", stats_path, out_path);
        char *out = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
        cJSON *summary = out ? cJSON_Parse(out) : NULL;
        free(out);
        const cJSON *l0 = cJSON_GetArrayItem(cJSON_GetObjectItem(summary, "layers"), 0);
        CU_ASSERT(cJSON_GetArraySize(cJSON_GetObjectItem(l0, "k_offset")) == 4);
        cJSON_Delete(summary);
        kvcal_stats_t *st = NULL;
        kvcal_scales_t *s = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(stats_path, &st, NULL, NULL),
                              KVCAL_OK);
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(out_path, NULL, 1, &s), KVCAL_OK);
        CU_ASSERT_PTR_NOT_NULL_FATAL(st->min[0]); /* the range was kept */
        CU_ASSERT_EQUAL(s->format, KVCAL_KV_FORMAT_INT8_ASYM);
        const int H = st->num_kv_heads, D = st->head_dim;
        int nonzero = 0;
        for (int l = 0; l < st->num_layers; l++)
            for (int kv = 0; kv < 2; kv++)
                for (int h = 0; h < H; h++) {
                    /* per head its channels' range; per tensor every head's */
                    const int h0 = g ? 0 : h, h1 = g ? H : h + 1;
                    float lo = 0.0f, hi = 0.0f, scale, offset;
                    for (int c = h0 * D; c < h1 * D; c++) {
                        lo = fminf(lo, st->min[kv][(size_t)l * H * D + c]);
                        hi = fmaxf(hi, st->max[kv][(size_t)l * H * D + c]);
                    }
                    kvcal_int8_asym_params(lo, hi, &scale, &offset);
                    const int i = kvcal_scales_index(s, l, h);
                    CU_ASSERT_EQUAL((kv ? s->v_head : s->k_head)[i], scale);
                    CU_ASSERT_EQUAL((kv ? s->v_offset : s->k_offset)[i], offset);
                    nonzero += offset != 0.0f;
                }
        CU_ASSERT(nonzero > 0); /* K and V ranges are not symmetric */
        kvcal_scales_destroy(s);
        kvcal_stats_destroy(st);
    }
    /* the attention observer searches symmetric scales: refused */
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("calibrate --model " MODEL
                                         " --kv-dtype int8_asym --observer attention",
                                         NULL),
                    2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("searches symmetric scales"));
}

/* Compares the scales (and offsets) of two files exactly. */
static void same_sets(const char *a_path, const char *b_path, kvcal_kv_format format)
{
    kvcal_scales_t *a = NULL, *b = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(a_path, NULL, 1, &a), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(b_path, NULL, 1, &b), KVCAL_OK);
    CU_ASSERT_EQUAL(b->format, format);
    const size_t n = (size_t)a->num_layers * a->num_kv_heads * sizeof(float);
    CU_ASSERT_EQUAL_FATAL(b->num_layers * b->num_kv_heads,
                          a->num_layers * a->num_kv_heads);
    CU_ASSERT(!memcmp(a->k_head, b->k_head, n) && !memcmp(a->v_head, b->v_head, n));
    CU_ASSERT((a->k_offset == NULL) == (b->k_offset == NULL));
    if (a->k_offset && b->k_offset)
        CU_ASSERT(!memcmp(a->k_offset, b->k_offset, 2 * n));
    kvcal_scales_destroy(a);
    kvcal_scales_destroy(b);
}

/* The C8 checkpoint in dir: per-channel f32 tensors each head's value
 * repeated over head_dim 16, offsets 0 when `symmetric`, and a description
 * with kv_cache_type C8 that lists every weight of the model. */
static void check_c8_files(const char *dir, const char *set_path, int symmetric)
{
    char p[600];
    snprintf(p, sizeof p, "%s/kv_scales.safetensors", dir);
    kvcal_safetensors_t *sf = NULL;
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(p, &sf), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(set_path, NULL, 1, &s), KVCAL_OK);
    for (int l = 0; l < 2; l++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.%d.self_attn.v_proj.kv_cache_scale", l);
        const kvcal_tensor_info *t = kvcal_safetensors_find(sf, name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT(t->dtype == KVCAL_DTYPE_F32 && t->ndim == 1 && t->numel == 2 * 16);
        float v[32];
        CU_ASSERT_EQUAL(kvcal_tensor_to_f32(t, v), KVCAL_OK);
        for (int c = 0; c < 32; c++)
            CU_ASSERT_EQUAL(v[c], s->v_head[kvcal_scales_index(s, l, c / 16)]);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.k_proj.kv_cache_offset",
                 l);
        t = kvcal_safetensors_find(sf, name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_EQUAL(kvcal_tensor_to_f32(t, v), KVCAL_OK);
        for (int c = 0; c < 32; c++)
            CU_ASSERT_EQUAL(
                v[c], symmetric ? 0.0f : s->k_offset[kvcal_scales_index(s, l, c / 16)]);
    }
    kvcal_safetensors_close(sf);
    kvcal_scales_destroy(s);
    snprintf(p, sizeof p, "%s/quant_model_description.json", dir);
    char *text = kvcal_test_read_file(p, NULL);
    cJSON *desc = text ? cJSON_Parse(text) : NULL;
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(desc);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(desc, "kv_cache_type")->valuestring, "C8");
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetObjectItem(desc, "model.layers.1.self_attn.v_proj.kv_cache_offset")
            ->valuestring,
        "C8");
    kvcal_safetensors_t *model = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(GOLDEN "/model.safetensors", &model),
                          KVCAL_OK);
    int listed = 0, weights = 0;
    for (int i = 0; i < kvcal_safetensors_count(model); i++) {
        const char *name = kvcal_safetensors_at(model, i)->name;
        if (strstr(name, ".weight")) {
            weights++;
            const cJSON *e = cJSON_GetObjectItem(desc, name);
            listed += cJSON_IsString(e) && !strcmp(e->valuestring, "FLOAT");
        }
    }
    CU_ASSERT(weights > 10 && listed == weights);
    kvcal_safetensors_close(model);
    cJSON_Delete(desc);
}

/* The C8 checkpoint in dir is valid (with warnings: --strict exits
 * strict_rc) and converts back (into back) to the set it was written from. */
static void reads_back(const char *dir, const char *set_path, const char *back,
                       int strict_rc, kvcal_kv_format format)
{
    char args[2048];
    snprintf(args, sizeof args, "validate-scales '%s'", dir);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "validate-scales '%s' --strict", dir);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), strict_rc);
    snprintf(args, sizeof args, "convert '%s' --to kvcal --out '%s'", dir, back);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    same_sets(set_path, back, format);
}

static void ascend_c8_round_trips_int8_and_refuses_offsets_vllm_ascend_ignores(void)
{
    char model[512], ids[512], i8[512], asym[512], out[512], back[512], args[4096];
    snprintf(model, sizeof model, "%s", kvcal_test_path("asym_golden"));
    snprintf(ids, sizeof ids, "%s", golden_ids());
    snprintf(i8, sizeof i8, "%s", kvcal_test_path("asym_i8.json"));
    snprintf(asym, sizeof asym, "%s", kvcal_test_path("asym_asym.json"));
    snprintf(out, sizeof out, "%s", kvcal_test_path("asym_c8_out"));
    snprintf(back, sizeof back, "%s", kvcal_test_path("asym_back.json"));
    snprintf(args, sizeof args, "rm -rf '%s' '%s' && cp -r " GOLDEN " '%s'", model, out,
             model);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_command(args, NULL), 0);
    const char *cal = "calibrate --model '%s' --dataset '%s' --granularity head " SMALL
                      " --kv-dtype %s --format %s --out '%s'%s";
    /* int8 into the model's own directory: offsets 0, read back the same */
    snprintf(args, sizeof args, cal, model, ids, "int8", "kvcal", i8, "");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, cal, model, ids, "int8", "ascend", model, "");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    check_c8_files(model, i8, 1);
    reads_back(model, i8, back, 0, KVCAL_KV_FORMAT_INT8);
    /* int8_asym: its non-zero offsets refused, nothing written ... */
    snprintf(args, sizeof args, cal, model, ids, "int8_asym", "kvcal", asym, "");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, cal, model, ids, "int8_asym", "ascend", out, "");
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("dequantizes decode with the scale alone"));
    CU_ASSERT(!exists(out));
    snprintf(args, sizeof args, "convert '%s' --to ascend --model '%s' --out '%s'", asym,
             model, out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(!exists(out));
    /* ... unless forced: written, a warning, and read back the same */
    snprintf(args, sizeof args,
             "convert '%s' --to ascend --model '%s' --out '%s' --force-offsets", asym,
             model, model);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    check_c8_files(model, asym, 0);
    reads_back(model, asym, back, 1, KVCAL_KV_FORMAT_INT8_ASYM);
    /* what vllm-ascend's C8 cache cannot take */
    snprintf(args, sizeof args, cal, model, ids, "fp8_e4m3", "ascend", out, "");
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("add --kv-dtype int8"));
    snprintf(args, sizeof args, cal, model, ids, "int8", "kvcal", back,
             " --force-offsets");
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --kv-dtype int8 --format ascend "
             "--out '%s'",
             out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("vllm-ascend serves Hugging Face checkpoints"));
    snprintf(args, sizeof args,
             "calibrate --model '%s' --dataset '%s' " SMALL " --out '%s'", model, ids,
             back);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "convert '%s' --to ascend --model '%s' --out '%s'", back,
             model, out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("C8 cache is int8"));
    CU_ASSERT(!exists(out));
}

/* ModelSlim writes per-channel scales; kvcal keeps one per kv head: such a
 * file is checked, and refused by convert with the reason. */
static void ascend_per_channel_scales_validate_but_do_not_convert(void)
{
    char dir[512], p[600], args[2048];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("asym_per_channel"));
    snprintf(args, sizeof args,
             "rm -rf '%s' && mkdir -p '%s' && cp tests/malformed/scales/tiny/config.json "
             "'%s'/",
             dir, dir, dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_command(args, NULL), 0);
    /* tiny: 2 layers, 4 kv heads, head_dim 8 */
    static const char *const kinds[4] = {
        "k_proj.kv_cache_scale", "k_proj.kv_cache_offset", "v_proj.kv_cache_scale",
        "v_proj.kv_cache_offset"};
    static float data[8][32];
    char names[8][96];
    kvcal_tensor_out t[8];
    cJSON *desc = cJSON_CreateObject();
    cJSON_AddStringToObject(desc, "kv_cache_type", "C8");
    for (int i = 0; i < 8; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.self_attn.%s", i / 4,
                 kinds[i % 4]);
        for (int c = 0; c < 32; c++)
            data[i][c] = i % 2 ? (float)(c % 5) : 0.01f + 0.001f * (float)c;
        t[i] = (kvcal_tensor_out){names[i], KVCAL_DTYPE_F32, 1, {32}, data[i]};
        cJSON_AddStringToObject(desc, names[i], "C8");
    }
    snprintf(p, sizeof p, "%s/kv_scales.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(p, t, 8, NULL), KVCAL_OK);
    char *text = cJSON_Print(desc);
    snprintf(p, sizeof p, "%s/quant_model_description.json", dir);
    CU_ASSERT_EQUAL(kvcal_test_write_file(p, text, strlen(text)), 0);
    free(text);
    cJSON_Delete(desc);
    snprintf(args, sizeof args, "validate-scales '%s'", dir);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    const char *back = kvcal_test_path("asym_pc.json");
    snprintf(args, sizeof args, "convert '%s' --to kvcal --out '%s'", dir, back);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(
        kvcal_test_kvcal_stderr_has("per-channel values that differ within kv head"));
    CU_ASSERT(!exists(back));
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(calibrate_int8_asym_takes_scales_and_offsets_from_the_signed_range),
    KVCAL_TEST(ascend_c8_round_trips_int8_and_refuses_offsets_vllm_ascend_ignores),
    KVCAL_TEST(ascend_per_channel_scales_validate_but_do_not_convert), CU_TEST_INFO_NULL};
KVCAL_SUITE(int8_asym_cli, KVCAL_NEEDS_NOTHING, tests)
