/* tests/test_attn_search.c: the attention observer (calib/attn_search.h)
 * on stories260K and on a golden model of head_dim 48 (NVFP4 needs a
 * multiple of 16): what it picks is one of its candidates and never moves
 * the attention output more than minmax does on the samples searched, for
 * each cache format; its error is the one of that format's round trip,
 * recomputed here by the format's definition; the format changes what it
 * picks; and `kvcal calibrate --observer attention` writes scales that
 * name it and, under --kv-dtype, were searched for that cache. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/attn_search.h"
#include "core/fp8.h"
#include "kernels/cpu/ops.h"
#include "observers/observer.h"
#include "tests/test_calib_util.h"
#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"
#define HD48 "tests/fixtures/golden/llama3_gqa_hd48_bf16"
#define C KVCAL_ATTN_CANDIDATES

enum { N = 6, LEN = 48, BATCH = 2, SEARCHED = 4 };

/* A model, its statistics over kvcal_test_calibrate's samples and a fresh
 * executor to search on the same samples. */
typedef struct fixture {
    kvcal_model_t *m;
    const kvcal_model_desc *d;
    kvcal_stats_t *stats;
    kvcal_exec_t *x;
    int32_t ids[N * LEN], lengths[N];
    kvcal_exec_samples s;
    size_t n; /* (layers, 2, kv_heads) */
} fixture;

static int fixture_open(fixture *f, const char *model)
{
    memset(f, 0, sizeof *f);
    if (kvcal_model_open(model, &f->m))
        return -1;
    f->d = kvcal_model_describe(f->m);
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    if (kvcal_test_calibrate(f->m, o, N, LEN, BATCH, &f->stats, NULL))
        return -1;
    /* the pattern of samples kvcal_test_calibrate ran */
    for (int i = 0; i < N * LEN; i++)
        f->ids[i] = (i * 37 + i / LEN * 11 + 5) % f->d->vocab_size;
    for (int i = 0; i < N; i++)
        f->lengths[i] = i == N - 1 ? LEN / 2 + 1 : LEN;
    o.backend.max_batch = BATCH;
    o.backend.max_seq_len = LEN;
    f->s = (kvcal_exec_samples){.ids = f->ids,
                                .lengths = f->lengths,
                                .num_samples = N,
                                .seq_len = LEN,
                                .batch = BATCH};
    f->n = (size_t)f->d->num_layers * 2 * f->d->num_kv_heads;
    return kvcal_exec_create(f->m, &o, &f->x) ? -1 : 0;
}

static void fixture_close(fixture *f)
{
    kvcal_exec_destroy(f->x);
    kvcal_stats_destroy(f->stats);
    kvcal_model_close(f->m);
}

/* One search for `format` into freshly allocated arrays (caller frees). */
typedef struct found {
    float *t;
    int *chosen;
    double *err; /* (n, C) */
} found;

static kvcal_status search(const fixture *f, kvcal_kv_format format, found *r)
{
    r->t = calloc(f->n, sizeof *r->t);
    r->chosen = calloc(f->n, sizeof *r->chosen);
    r->err = calloc(f->n * C, sizeof *r->err);
    if (!r->t || !r->chosen || !r->err)
        return KVCAL_ERR_NOMEM;
    kvcal_attn_search_result res = {r->t, r->chosen, r->err};
    return kvcal_attn_search(f->x, f->d, f->stats, &f->s, SEARCHED, format, &res);
}

static void found_free(found *r)
{
    free(r->t);
    free(r->chosen);
    free(r->err);
}

/* The candidate's observer, in the documented order. */
static kvcal_observer_config candidate(int c)
{
    static const double pct[5] = {99.999, 99.99, 99.9, 99.5, 99.0};
    kvcal_observer_config o = kvcal_observer_default();
    if (c >= 1 && c <= 5)
        o.kind = KVCAL_OBSERVER_PERCENTILE, o.percentile = pct[c - 1];
    else if (c == 6)
        o.kind = KVCAL_OBSERVER_MSE;
    return o;
}

/* Every (layer, K/V, head): the threshold is its chosen candidate's, the
 * chosen error the least of the candidates', none above minmax's. Returns
 * how many heads it found better than minmax. */
static int check_choice(const fixture *f, const found *r)
{
    const int HKV = f->d->num_kv_heads;
    int better = 0;
    for (int l = 0; l < f->d->num_layers; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < HKV; h++) {
                const size_t i = ((size_t)l * 2 + kv) * HKV + h;
                const double *e = r->err + i * C;
                CU_ASSERT_FATAL(r->chosen[i] >= 0 && r->chosen[i] < C);
                kvcal_observer_config c = candidate(r->chosen[i]);
                float want = -1.0f;
                CU_ASSERT_EQUAL(kvcal_stats_threshold(f->stats, &c, l, kv, h, &want),
                                KVCAL_OK);
                CU_ASSERT_EQUAL(r->t[i], want);
                for (int k = 0; k < C; k++)
                    CU_ASSERT(e[r->chosen[i]] <= e[k]);
                CU_ASSERT(e[0] > 0.0 && e[r->chosen[i]] <= e[0]);
                better += e[r->chosen[i]] < e[0];
            }
    return better;
}

static void attn_search_picks_a_candidate_no_worse_than_minmax_for_each_cache_format(void)
{
    static const struct {
        const char *model;
        kvcal_kv_format format;
    } runs[] = {{MODEL, KVCAL_KV_FORMAT_FP8_E4M3},
                {MODEL, KVCAL_KV_FORMAT_INT8},
                {HD48, KVCAL_KV_FORMAT_FP8_E4M3},
                {HD48, KVCAL_KV_FORMAT_INT8},
                {HD48, KVCAL_KV_FORMAT_NVFP4}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        fixture f;
        CU_ASSERT_EQUAL_FATAL(fixture_open(&f, runs[i].model), 0);
        found r;
        CU_ASSERT_EQUAL_FATAL(search(&f, runs[i].format, &r), KVCAL_OK);
        /* on these models some head gains by clipping its outliers */
        CU_ASSERT(check_choice(&f, &r) > 0);
        found_free(&r);
        fixture_close(&f);
    }
}

/* --- the error of a format's round trip, by its definition -------------- */

/* The e2m1 value nearest to y, ties to the even code (0, 0.5, 1, 1.5, 2, 3,
 * 4, 6 are codes 0 .. 7), saturating at 6. */
static float e2m1_nearest(float y)
{
    static const float v[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float a = fabsf(y);
    int best = 0;
    for (int k = 1; k < 8; k++) {
        const float dk = fabsf(a - v[k]), db = fabsf(a - v[best]);
        if (dk < db || (dk == db && k % 2 == 0))
            best = k;
    }
    return y < 0.0f ? -v[best] : v[best];
}

/* Row x (head_dim values) through `format` under threshold t: e4m3 with
 * scale t / 448, int8 with t / 127 (round to nearest even, clamped to
 * [-128, 127]), NVFP4 with global scale g = t / (6 * 448) and per block of
 * 16 the e4m3 scale e4m3(amax / 6 / g) * g. */
static void by_definition(float *out, const float *x, int hd, kvcal_kv_format format,
                          float t)
{
    if (format == KVCAL_KV_FORMAT_FP8_E4M3) {
        const float s = t / 448.0f;
        for (int i = 0; i < hd; i++)
            out[i] = kvcal_fp8_e4m3_to_float(kvcal_fp8_e4m3_from_float(x[i] / s)) * s;
    } else if (format == KVCAL_KV_FORMAT_INT8) {
        const float s = t / 127.0f;
        for (int i = 0; i < hd; i++)
            out[i] = fminf(fmaxf(rintf(x[i] / s), -128.0f), 127.0f) * s;
    } else {
        const float g = t / (6.0f * 448.0f);
        for (int b = 0; b < hd; b += 16) {
            float amax = 0.0f;
            for (int i = b; i < b + 16; i++)
                amax = fmaxf(amax, fabsf(x[i]));
            const float d =
                kvcal_fp8_e4m3_to_float(kvcal_fp8_e4m3_from_float(amax / 6.0f / g)) * g;
            for (int i = b; i < b + 16; i++)
                out[i] = d > 0.0f ? e2m1_nearest(x[i] / d) * d : 0.0f;
        }
    }
}

/* A tap that adds each (layer, K/V, head)'s error of minmax's round trip
 * of `format`, the other of K/V exact, into err (n). */
typedef struct recompute {
    const fixture *f;
    kvcal_kv_format format;
    double *err;
} recompute;

static kvcal_status recompute_tap(void *ctx, int l, const kvcal_rows *rows,
                                  const float *q, const float *k, const float *v)
{
    const recompute *rc = ctx;
    const kvcal_model_desc *d = rc->f->d;
    const int H = d->num_heads, HKV = d->num_kv_heads, hd = d->head_dim, G = H / HKV;
    kvcal_observer_config minmax = kvcal_observer_default();
    for (int b = 0; b < rows->batch; b++) {
        const int T = rows->lengths[b];
        const int64_t r0 = rows->start[b];
        const float *qb = q + r0 * H * hd,
                    *in[2] = {k + r0 * HKV * hd, v + r0 * HKV * hd};
        float *exact = malloc(sizeof(float) * T * H * hd);
        float *att = malloc(sizeof(float) * T * H * hd);
        float *rt = malloc(sizeof(float) * T * HKV * hd);
        if (!exact || !att || !rt)
            return KVCAL_ERR_NOMEM;
        kvcal_attention_ref(exact, qb, in[0], in[1], T, H, HKV, hd,
                            1.0f / sqrtf((float)hd));
        for (int kv = 0; kv < 2; kv++) {
            for (int h = 0; h < HKV; h++) {
                float t = 0.0f;
                kvcal_stats_threshold(rc->f->stats, &minmax, l, kv, h, &t);
                for (int i = 0; i < T; i++)
                    by_definition(rt + ((int64_t)i * HKV + h) * hd,
                                  in[kv] + ((int64_t)i * HKV + h) * hd, hd, rc->format,
                                  t);
            }
            kvcal_attention_ref(att, qb, kv ? in[0] : rt, kv ? rt : in[1], T, H, HKV, hd,
                                1.0f / sqrtf((float)hd));
            for (int h = 0; h < HKV; h++)
                for (int i = 0; i < T; i++)
                    for (int j = h * G * hd; j < (h + 1) * G * hd; j++) {
                        const double e = (double)att[(int64_t)i * H * hd + j] -
                                         exact[(int64_t)i * H * hd + j];
                        rc->err[((size_t)l * 2 + kv) * HKV + h] += e * e;
                    }
        }
        free(exact);
        free(att);
        free(rt);
    }
    return KVCAL_OK;
}

static void attn_search_scores_the_round_trip_of_the_cache_format(void)
{
    fixture f;
    CU_ASSERT_EQUAL_FATAL(fixture_open(&f, HD48), 0);
    static const kvcal_kv_format formats[3] = {
        KVCAL_KV_FORMAT_FP8_E4M3, KVCAL_KV_FORMAT_INT8, KVCAL_KV_FORMAT_NVFP4};
    double *mine = calloc(f.n, sizeof *mine), *minmax[3] = {0};
    CU_ASSERT_PTR_NOT_NULL_FATAL(mine);
    for (int fi = 0; fi < 3; fi++) {
        found r;
        CU_ASSERT_EQUAL_FATAL(search(&f, formats[fi], &r), KVCAL_OK);
        memset(mine, 0, f.n * sizeof *mine);
        recompute rc = {&f, formats[fi], mine};
        for (int b0 = 0; b0 < SEARCHED; b0 += BATCH) {
            const kvcal_batch b = {f.ids + b0 * LEN, f.lengths + b0, NULL, BATCH, LEN};
            CU_ASSERT_EQUAL_FATAL(kvcal_exec_forward(f.x, &b, recompute_tap, &rc, NULL),
                                  KVCAL_OK);
        }
        double worst = 0.0;
        minmax[fi] = malloc(f.n * sizeof(double));
        CU_ASSERT_PTR_NOT_NULL_FATAL(minmax[fi]);
        for (size_t i = 0; i < f.n; i++) {
            minmax[fi][i] = r.err[i * C];
            worst = fmax(worst, fabs(r.err[i * C] - mine[i]) / mine[i]);
        }
        /* the same products in another order: float rounding apart */
        CU_ASSERT(worst < 1e-3);
        if (worst >= 1e-3)
            printf("\n    format %d: minmax's error off by %.3g relative\n",
                   (int)formats[fi], worst);
        found_free(&r);
    }
    /* e4m3 (3 mantissa bits) loses more than int8 (7 bits under absmax),
     * NVFP4 (1 mantissa bit under a block scale) most, on every head */
    for (size_t i = 0; i < f.n; i++) {
        CU_ASSERT(minmax[1][i] < minmax[0][i]);
        CU_ASSERT(minmax[0][i] < minmax[2][i]);
    }
    for (int fi = 0; fi < 3; fi++)
        free(minmax[fi]);
    free(mine);
    fixture_close(&f);
}

/* Two formats' searches on one model: the candidates chosen differ on some
 * heads, and wherever they do, each format's own choice costs it less than
 * the other's choice would (its objective ranks the two the other way). */
static void attn_search_choice_follows_the_cache_format(void)
{
    static const struct {
        const char *model;
        kvcal_kv_format a, b;
    } pairs[] = {{MODEL, KVCAL_KV_FORMAT_FP8_E4M3, KVCAL_KV_FORMAT_INT8},
                 {HD48, KVCAL_KV_FORMAT_FP8_E4M3, KVCAL_KV_FORMAT_NVFP4},
                 {HD48, KVCAL_KV_FORMAT_INT8, KVCAL_KV_FORMAT_NVFP4}};
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
        fixture f;
        CU_ASSERT_EQUAL_FATAL(fixture_open(&f, pairs[p].model), 0);
        found a, b;
        CU_ASSERT_EQUAL_FATAL(search(&f, pairs[p].a, &a), KVCAL_OK);
        CU_ASSERT_EQUAL_FATAL(search(&f, pairs[p].b, &b), KVCAL_OK);
        size_t differ = 0;
        for (size_t i = 0; i < f.n; i++) {
            const int ca = a.chosen[i], cb = b.chosen[i];
            if (a.t[i] == b.t[i])
                continue;
            differ++;
            CU_ASSERT(a.err[i * C + ca] < a.err[i * C + cb]);
            CU_ASSERT(b.err[i * C + cb] < b.err[i * C + ca]);
        }
        CU_ASSERT(differ * 4 >= f.n);
        found_free(&a);
        found_free(&b);
        fixture_close(&f);
    }
}

static void attn_search_refuses_nvfp4_on_a_head_dim_not_a_multiple_of_16(void)
{
    fixture f;
    CU_ASSERT_EQUAL_FATAL(fixture_open(&f, MODEL), 0); /* head_dim 8 */
    found r;
    CU_ASSERT_EQUAL(search(&f, KVCAL_KV_FORMAT_NVFP4, &r), KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(kvcal_last_error(), "multiple of 16; the model's is 8"));
    found_free(&r);
    CU_ASSERT_EQUAL(search(&f, KVCAL_KV_FORMAT_FP8_E5M2, &r), KVCAL_ERR_UNSUPPORTED);
    found_free(&r);
    fixture_close(&f);
}

static void calibrate_observer_attention_writes_scales_that_name_it(void)
{
    const char *out = kvcal_test_path("attention_scales.json");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "calibrate --model " MODEL " --granularity head --observer attention:2 "
             "--num-samples 4 --seq-len 64 --quiet --out '%s'",
             out);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(cmd, NULL), 0);
    char *text = kvcal_test_read_file(out, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    char *printed = cJSON_PrintUnformatted(j);
    CU_ASSERT_PTR_NOT_NULL_FATAL(printed);
    CU_ASSERT_PTR_NOT_NULL(strstr(
        printed, "\"observer\":{\"name\":\"attention\",\"params\":{\"samples\":2}}"));
    free(printed);
    cJSON_Delete(j);
    static const char *const bad[] = {"attention:0", "attention:x", "attention:"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd,
                 "calibrate --model " MODEL " --observer %s --num-samples 2 --seq-len 32 "
                 "--quiet --out '%s'",
                 bad[i], out);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(cmd, NULL), 2);
    }
}

/* The per-head K then V scales of every layer of a kvcal scales file into
 * out (n); returns how many it read. */
static size_t head_scales(const char *path, float *out, size_t n)
{
    char *text = kvcal_test_read_file(path, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    size_t got = 0;
    const cJSON *l, *v;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(j, "layers"))
    {
        static const char *const keys[2] = {"k_scale_per_head", "v_scale_per_head"};
        for (int kv = 0; kv < 2; kv++)
            cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(l, keys[kv]))
            {
                if (got < n)
                    out[got] = (float)v->valuedouble;
                got++;
            }
    }
    cJSON_Delete(j);
    return got;
}

/* --kv-dtype int8 against the default e4m3, each file's scales over its
 * format's largest value (absmax / 127 against / 448): minmax's thresholds
 * are the same in both, the attention observer's differ on some head. */
static void calibrate_observer_attention_searches_for_the_kv_dtype(void)
{
    enum { HEADS = 5 * 2 * 4 }; /* stories260K: layers x K/V x kv heads */
    static const char *const observers[2] = {"minmax", "attention:2"};
    for (int o = 0; o < 2; o++) {
        float scale[2][HEADS];
        for (int dt = 0; dt < 2; dt++) {
            const char *out = kvcal_test_path(dt ? "dtype_int8.json" : "dtype_e4m3.json");
            char cmd[1024];
            snprintf(cmd, sizeof cmd,
                     "calibrate --model " MODEL " --granularity head --observer %s "
                     "--kv-dtype %s --num-samples 4 --seq-len 64 --quiet --out '%s'",
                     observers[o], dt ? "int8" : "fp8_e4m3", out);
            CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(cmd, NULL), 0);
            CU_ASSERT_EQUAL_FATAL(head_scales(out, scale[dt], HEADS), HEADS);
        }
        int differ = 0;
        for (int i = 0; i < HEADS; i++)
            differ += fabs(scale[1][i] * 127.0 / (scale[0][i] * 448.0) - 1.0) > 1e-5;
        CU_ASSERT(o == 0 ? differ == 0 : differ > 0);
    }
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(attn_search_picks_a_candidate_no_worse_than_minmax_for_each_cache_format),
    KVCAL_TEST(attn_search_scores_the_round_trip_of_the_cache_format),
    KVCAL_TEST(attn_search_choice_follows_the_cache_format),
    KVCAL_TEST(attn_search_refuses_nvfp4_on_a_head_dim_not_a_multiple_of_16),
    KVCAL_TEST(calibrate_observer_attention_writes_scales_that_name_it),
    KVCAL_TEST(calibrate_observer_attention_searches_for_the_kv_dtype),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(attn_search, KVCAL_NEEDS_NOTHING, tests)
