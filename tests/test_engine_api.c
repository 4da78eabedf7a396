/* tests/test_engine_api.c: what an engine does with libkvcal's public API
 * beyond quantizing: fill a scale set with what it learned and write it in
 * every format (the setters), and calibrate in place (the calibrator of
 * include/kvcal_calibrate.h, host side: the device side is
 * tests/test_calibrator_cuda.c). The calibrator's statistics are compared
 * with observers/stats.h fed the same values, byte for byte. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/scales.h"
#include "kvcal.h"
#include "observers/observer.h"
#include "observers/stats.h"
#include "tests/test_util.h"

static uint32_t rng = 7u;
static uint32_t next_u32(void)
{
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return rng;
}

static const char *model_dir(const char *name)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path(name));
    mkdir(dir, 0755);
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *text =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
        "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
        "\"num_key_value_heads\": 4, \"vocab_size\": 512}";
    kvcal_test_write_file(path, text, strlen(text));
    return dir;
}

// --- setters -----------------------------------------------------------------

static void scales_setters_refuse_bad_values_and_leave_the_set_unchanged(void)
{
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 4, &s), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_scales_set_head(s, 1, 2, 0.25f, 0.5f), KVCAL_OK);
    const float bad[4] = {NAN, INFINITY, 0.0f, -0.1f};
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(kvcal_scales_set_head(s, 1, 2, 0.1f, bad[i]), KVCAL_ERR_NONFINITE);
        CU_ASSERT(kvcal_test_error_has("layer 1 kv head 2: V scale"));
        CU_ASSERT_EQUAL(kvcal_scales_set_layer(s, 1, bad[i], 0.1f), KVCAL_ERR_NONFINITE);
        CU_ASSERT(kvcal_test_error_has("layer 1: K scale"));
        CU_ASSERT_EQUAL(kvcal_scales_set_q(s, 0, bad[i]), KVCAL_ERR_NONFINITE);
    }
    const float heads[4] = {0.1f, 0.2f, NAN, 0.4f};
    CU_ASSERT_EQUAL(kvcal_scales_set_layer_heads(s, 1, NULL, heads), KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("layer 1 kv head 2: V scale nan"));
    float k, v, q;
    CU_ASSERT_EQUAL(kvcal_scales_get_head(s, 1, 2, &k, &v), KVCAL_OK);
    CU_ASSERT_EQUAL(k, 0.25f);
    CU_ASSERT_EQUAL(v, 0.5f);
    CU_ASSERT_EQUAL(kvcal_scales_get_head(s, 1, 0, &k, &v), KVCAL_OK);
    CU_ASSERT_EQUAL(v, 0.0f); /* the refused array wrote no head */
    CU_ASSERT_EQUAL(kvcal_scales_get_q(s, 0, &q), KVCAL_OK);
    CU_ASSERT_EQUAL(q, 0.0f);
    CU_ASSERT_EQUAL(kvcal_scales_set_head(s, 2, 0, 0.1f, 0.1f), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("layer 2 head 0 out of range"));
    CU_ASSERT_EQUAL(kvcal_scales_set_head(s, 0, 4, 0.1f, 0.1f), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_scales_set_q(s, -1, 0.1f), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_scales_set_granularity(s, (kvcal_granularity)7),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_scales_set_model(s, NULL, NULL, 6, 0), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("multiple of the set's 4 kv heads"));
    char long_name[200];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    CU_ASSERT_EQUAL(kvcal_scales_set_model(s, long_name, NULL, 0, 0), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_scales_set_head(NULL, 0, 0, 0.1f, 0.1f), KVCAL_ERR_INVALID_ARG);
    kvcal_scales_destroy(s);
}

/* An engine with per-head K and V scales of its own (and q) fills a set and
 * writes every format; each loads back with the values it can hold. */
static void an_engine_fills_a_set_and_every_format_loads_back(void)
{
    const char *model = model_dir("engine_model");
    kvcal_scales_t *s = NULL, *r = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 4, &s), KVCAL_OK);
    for (int l = 0; l < 2; l++) {
        float k[4], v[4];
        for (int h = 0; h < 4; h++) {
            k[h] = 0.01f * (float)(1 + l * 4 + h);
            v[h] = 0.003f * (float)(8 - h) + (float)l * 1e-4f;
        }
        CU_ASSERT_EQUAL(kvcal_scales_set_layer_heads(s, l, k, NULL), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_scales_set_layer_heads(s, l, NULL, v), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_scales_set_q(s, l, 0.02f + 0.01f * (float)l), KVCAL_OK);
    }
    CU_ASSERT_EQUAL(kvcal_scales_set_model(s, "LlamaForCausalLM", "llama", 8, 16), KVCAL_OK);
    char path[600];
    snprintf(path, sizeof path, "%s", kvcal_test_path("engine.kvcal.json"));
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_KVCAL_JSON, path, NULL, 0),
                          KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(path, model, 1, &r), KVCAL_OK);
    for (int l = 0; l < 2; l++) {
        for (int h = 0; h < 4; h++) {
            float k0, v0, k1, v1;
            kvcal_scales_get_head(s, l, h, &k0, &v0);
            kvcal_scales_get_head(r, l, h, &k1, &v1);
            CU_ASSERT_EQUAL(k0, k1);
            CU_ASSERT_EQUAL(v0, v1);
        }
        float q;
        CU_ASSERT_EQUAL(kvcal_scales_get_q(r, l, &q), KVCAL_OK);
        CU_ASSERT_EQUAL(q, 0.02f + 0.01f * (float)l);
    }
    kvcal_scales_destroy(r);
    r = NULL;
    /* per tensor: the checkpoint holds one [1] scale per layer, the max */
    CU_ASSERT_EQUAL(kvcal_scales_set_granularity(s, KVCAL_GRANULARITY_TENSOR), KVCAL_OK);
    snprintf(path, sizeof path, "%s", kvcal_test_path("engine_ck"));
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_CHECKPOINT, path, model, 0),
                          KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(path, NULL, 0, &r), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_scales_granularity(r), KVCAL_GRANULARITY_TENSOR);
    float k0, v0, k1, v1;
    kvcal_scales_get_tensor(s, 1, &k0, &v0);
    kvcal_scales_get_tensor(r, 1, &k1, &v1);
    CU_ASSERT_EQUAL(k0, k1);
    CU_ASSERT_EQUAL(v0, v1);
    kvcal_scales_destroy(r);
    r = NULL;
    /* legacy: model_type from the setter, checked against config.json */
    snprintf(path, sizeof path, "%s", kvcal_test_path("engine_legacy.json"));
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_LEGACY_JSON, path, NULL, 1),
                          KVCAL_OK);
    kvcal_report_t *rep = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_validate_file(path, model, 1, &rep), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR), 0);
    kvcal_report_destroy(rep);
    kvcal_scales_destroy(s);
}

static void kvcal_json_holds_q_for_every_layer_or_refuses(void)
{
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(3, 1, &s), KVCAL_OK);
    for (int l = 0; l < 3; l++)
        kvcal_scales_set_layer(s, l, 0.1f, 0.2f);
    kvcal_scales_set_q(s, 0, 0.05f);
    char path[600];
    snprintf(path, sizeof path, "%s", kvcal_test_path("q_partial.json"));
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_KVCAL_JSON, path, NULL, 0),
                    KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("layer 1 has no q scale"));
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(path, &st), 0);
    kvcal_scales_destroy(s);
    /* a file with q in some layers only is refused by the reader */
    const char *text =
        "{\"format\": \"kvcal-kv-scales\", \"version\": 1, \"model\": {\"num_layers\": 2, "
        "\"num_kv_heads\": 1}, \"dtype\": \"float8_e4m3fn\", \"fp8_max\": 448, "
        "\"granularity\": \"tensor\", \"layers\": [{\"layer\": 0, \"k_scale\": 0.1, "
        "\"v_scale\": 0.2, \"q_scale\": 0.05}, {\"layer\": 1, \"k_scale\": 0.1, "
        "\"v_scale\": 0.2}]}";
    snprintf(path, sizeof path, "%s", kvcal_test_path("q_partial_read.json"));
    kvcal_test_write_file(path, text, strlen(text));
    kvcal_scales_t *r = NULL;
    CU_ASSERT_NOT_EQUAL(kvcal_scales_load(path, NULL, 0, &r), KVCAL_OK);
    CU_ASSERT(kvcal_test_error_has("q_scale in 1 of 2 layers"));
    CU_ASSERT_PTR_NULL(r);
}

// --- the calibrator ----------------------------------------------------------

/* K and V of one layer's step in dtype (strided, as an engine holds them)
 * and the same values as floats (T, H, D) for the reference. */
typedef struct {
    void *k, *v;
    float *fk, *fv;
    int64_t *slots;
    uint8_t *valid;
    kvcal_kv_batch b;
} step_data;

/* A value exactly representable in dtype: sign, a 4-bit mantissa and an
 * exponent in [-14, 8] (normal in every dtype), stored as its bits. */
static float make_value(kvcal_dtype dtype, void *dst, int64_t i, int layer)
{
    uint32_t r = next_u32();
    int e = (int)(r % 12u) - 8 + layer, m = (int)((r >> 8) & 15u), neg = (int)((r >> 12) & 1u);
    if ((r >> 16) % 13u == 0)
        m = 0, e = -200; /* a zero now and then */
    float x = e < -100 ? 0.0f : ldexpf(1.0f + (float)m / 16.0f, e);
    x = neg ? -x : x;
    if (dtype == KVCAL_DTYPE_F32) {
        ((float *)dst)[i] = x;
    } else if (dtype == KVCAL_DTYPE_BF16) {
        uint32_t u;
        memcpy(&u, &x, 4);
        ((uint16_t *)dst)[i] = (uint16_t)(u >> 16);
    } else {
        uint16_t h = (uint16_t)(neg ? 0x8000u : 0u);
        if (x != 0.0f)
            h |= (uint16_t)(((unsigned)(e + 15) << 10) | ((unsigned)m << 6));
        ((uint16_t *)dst)[i] = h;
    }
    return x;
}

static void step_make(step_data *s, kvcal_dtype dtype, int64_t T, int H, int D, int pad,
                      int layer)
{
    const size_t es = dtype == KVCAL_DTYPE_F32 ? 4 : 2;
    const int64_t hs = D + 3, ts = (int64_t)H * hs + 5; // padded strides
    memset(s, 0, sizeof *s);
    s->k = calloc((size_t)(T * ts + 1), es);
    s->v = calloc((size_t)(T * ts + 1), es);
    s->fk = calloc((size_t)(T * H * D + 1), sizeof(float));
    s->fv = calloc((size_t)(T * H * D + 1), sizeof(float));
    s->slots = calloc((size_t)T + 1, sizeof(int64_t));
    s->valid = calloc((size_t)T + 1, 1);
    for (int64_t t = 0; t < T; t++) {
        s->slots[t] = pad && t % 5 == 3 ? -1 : t;
        s->valid[t] = s->slots[t] >= 0;
        for (int h = 0; h < H; h++)
            for (int c = 0; c < D; c++) {
                size_t j = ((size_t)t * H + h) * D + c;
                s->fk[j] = make_value(dtype, s->k, t * ts + h * hs + c, layer);
                s->fv[j] = make_value(dtype, s->v, t * ts + h * hs + c, layer + 1);
            }
    }
    s->b.k = s->k;
    s->b.v = s->v;
    s->b.dtype = dtype;
    s->b.num_tokens = T;
    s->b.k_token_stride = s->b.v_token_stride = ts;
    s->b.k_head_stride = s->b.v_head_stride = hs;
    s->b.slot_mapping = pad ? s->slots : NULL;
}

static void step_free(step_data *s)
{
    free(s->k), free(s->v), free(s->fk), free(s->fv), free(s->slots), free(s->valid);
}

/* The reference: the same values folded into observers/stats.h directly. */
static void ref_observe(kvcal_stats_t *st, int layer, const step_data *s, int H, int D)
{
    kvcal_kv_block blk =
        kvcal_kv_block_dense(s->fk, 1, (int)s->b.num_tokens, H, D, NULL, NULL);
    if (s->b.slot_mapping)
        blk.valid = s->valid;
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(st, layer, KVCAL_K, &blk), KVCAL_OK);
    blk.x = s->fv;
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(st, layer, KVCAL_V, &blk), KVCAL_OK);
}

/* Whether the calibrator's serialized statistics are exactly st's slab. */
static int same_state(const kvcal_calibrator_t *cal, const kvcal_stats_t *st)
{
    size_t n = 0;
    if (kvcal_calibrator_serialize(cal, NULL, NULL, 0, &n))
        return 0;
    unsigned char *buf = malloc(n);
    size_t slab = kvcal_stats_slab_bytes(st);
    int ok = buf && n > slab && !kvcal_calibrator_serialize(cal, NULL, buf, n, &n) &&
             !memcmp(buf + (n - slab), st->slab, slab);
    free(buf);
    return ok;
}

static int same_scales(const kvcal_scales_t *a, const kvcal_scales_t *b)
{
    size_t n = (size_t)a->num_layers * a->num_kv_heads;
    return a->num_layers == b->num_layers && a->num_kv_heads == b->num_kv_heads &&
           a->granularity == b->granularity &&
           !memcmp(a->k_head, b->k_head, n * 4) && !memcmp(a->v_head, b->v_head, n * 4) &&
           !memcmp(a->k_absmax, b->k_absmax, n * 4) &&
           !memcmp(a->v_absmax, b->v_absmax, n * 4) &&
           !memcmp(a->k_clip, b->k_clip, (size_t)a->num_layers * 4) &&
           !memcmp(a->v_clip, b->v_clip, (size_t)a->num_layers * 4) &&
           !strcmp(a->provenance.observer, b->provenance.observer) &&
           a->provenance.num_tokens == b->provenance.num_tokens;
}

/* Three steps over two layers in every dtype, strided, with and without
 * padding, on odd shapes: the calibrator's statistics are the reference's
 * byte for byte, and so are the scales of every observer. */
static void calibrator_ref_folds_what_stats_fold_in_every_dtype(void)
{
    const kvcal_dtype dtypes[3] = {KVCAL_DTYPE_F32, KVCAL_DTYPE_F16, KVCAL_DTYPE_BF16};
    const char *observers[4] = {"minmax", "ema:0.9", "percentile:99.9", "mse"};
    const int shapes[3][3] = {{1, 1, 1}, {19, 3, 7}, {300, 2, 64}}; // T, H, D
    for (int d = 0; d < 3; d++)
        for (int sh = 0; sh < 3; sh++) {
            const int T = shapes[sh][0], H = shapes[sh][1], D = shapes[sh][2], L = 2;
            kvcal_calibrator_t *cal[4] = {NULL};
            for (int o = 0; o < 4; o++)
                CU_ASSERT_EQUAL_FATAL(
                    kvcal_calibrator_create(L, H, D, observers[o], 0, &cal[o]), KVCAL_OK);
            kvcal_stats_t *st = NULL;
            CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(L, H, D, &st), KVCAL_OK);
            for (int step = 0; step < 3; step++) {
                for (int l = 0; l < L; l++) {
                    step_data s;
                    step_make(&s, dtypes[d], T + step, H, D, (step + l) % 2, l);
                    for (int o = 0; o < 4; o++)
                        CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal[o], l, &s.b),
                                        KVCAL_OK);
                    ref_observe(st, l, &s, H, D);
                    step_free(&s);
                }
                for (int o = 0; o < 4; o++)
                    CU_ASSERT_EQUAL(kvcal_calibrator_end_step(cal[o], NULL), KVCAL_OK);
                kvcal_stats_end_batch(st, 0.9);
            }
            CU_ASSERT_TRUE(same_state(cal[1], st));
            int64_t tokens[2], steps = 0;
            CU_ASSERT_EQUAL(kvcal_calibrator_tokens(cal[0], NULL, tokens, &steps), KVCAL_OK);
            CU_ASSERT_EQUAL(tokens[0], st->tokens[0]);
            CU_ASSERT_EQUAL(tokens[1], st->tokens[1]);
            CU_ASSERT_EQUAL(steps, 3);
            for (int o = 0; o < 4; o++)
                for (int g = 0; g < 2; g++) {
                    kvcal_observer_config cfg;
                    CU_ASSERT_EQUAL(kvcal_observer_parse(observers[o], &cfg), KVCAL_OK);
                    kvcal_scales_t *want = NULL, *got = NULL;
                    kvcal_scales_create(L, H, &want);
                    CU_ASSERT_EQUAL(kvcal_stats_to_scales(st, &cfg, (kvcal_granularity)g,
                                                          want, NULL, NULL),
                                    KVCAL_OK);
                    CU_ASSERT_EQUAL_FATAL(
                        kvcal_calibrator_to_scales(cal[o], (kvcal_granularity)g, NULL, &got),
                        KVCAL_OK);
                    CU_ASSERT_TRUE(same_scales(want, got));
                    kvcal_scales_destroy(want);
                    kvcal_scales_destroy(got);
                }
            for (int o = 0; o < 4; o++)
                kvcal_calibrator_destroy(cal[o]);
            kvcal_stats_destroy(st);
        }
}

static void calibrator_padding_is_never_observed(void)
{
    kvcal_calibrator_t *cal = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(1, 2, 4, NULL, 0, &cal), KVCAL_OK);
    float k[3][2][4], v[3][2][4];
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 4; c++) {
                k[t][h][c] = t == 1 ? 1000.0f : 0.5f; // token 1 is padding
                v[t][h][c] = t == 1 ? NAN : -0.25f;   // even a NaN there
            }
    int64_t slots[3] = {7, -1, 3};
    kvcal_kv_batch b = {k, v, KVCAL_DTYPE_F32, 3, 8, 4, 8, 4, slots};
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, 0, &b), KVCAL_OK);
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_calibrator_to_scales(cal, KVCAL_GRANULARITY_HEAD, NULL, &s), KVCAL_OK);
    float ks, vs;
    kvcal_scales_get_head(s, 0, 1, &ks, &vs);
    CU_ASSERT_EQUAL(ks, 0.5f / 448.0f);
    CU_ASSERT_EQUAL(vs, 0.25f / 448.0f);
    CU_ASSERT_EQUAL(s->provenance.num_tokens, 2);
    kvcal_scales_destroy(s);
    kvcal_calibrator_destroy(cal);
}

/* A NaN or Inf in an observed value: the batch is refused whole, the error
 * names layer, K/V, head, token and channel, and the calibrator gives no
 * scale and no bytes from then on. */
static void calibrator_refuses_nonfinite_and_gives_no_scale_after(void)
{
    kvcal_calibrator_t *cal = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(2, 2, 4, "minmax", 0, &cal), KVCAL_OK);
    float k[2][2][4] = {{{0}}}, v[2][2][4] = {{{0}}};
    kvcal_kv_batch b = {k, v, KVCAL_DTYPE_F32, 2, 8, 4, 8, 4, NULL};
    k[0][0][0] = 3.0f;
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, 0, &b), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, 1, &b), KVCAL_OK);
    k[0][0][0] = 900.0f;
    v[1][1][2] = INFINITY;
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, 1, &b), KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("layer 1 V kv head 1: token 1 channel 2 is inf"));
    int64_t tokens[2];
    kvcal_calibrator_tokens(cal, NULL, tokens, NULL);
    CU_ASSERT_EQUAL(tokens[1], 2); // nothing of the refused batch, K included
    kvcal_scales_t *s = (kvcal_scales_t *)1;
    CU_ASSERT_EQUAL(kvcal_calibrator_to_scales(cal, KVCAL_GRANULARITY_TENSOR, NULL, &s),
                    KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("layer 1 V kv head 1: token 1 channel 2 was inf"));
    CU_ASSERT_PTR_NULL(s);
    size_t n = 0;
    CU_ASSERT_EQUAL(kvcal_calibrator_serialize(cal, NULL, NULL, 0, &n), KVCAL_OK);
    unsigned char *buf = malloc(n);
    CU_ASSERT_EQUAL(kvcal_calibrator_serialize(cal, NULL, buf, n, &n), KVCAL_ERR_NONFINITE);
    free(buf);
    kvcal_calibrator_destroy(cal);
}

static void calibrator_rejects_bad_arguments_with_a_message(void)
{
    kvcal_calibrator_t *cal = (kvcal_calibrator_t *)1;
    CU_ASSERT_EQUAL(kvcal_calibrator_create(0, 2, 4, NULL, 0, &cal), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(cal);
    CU_ASSERT_EQUAL(kvcal_calibrator_create(1, 2, 4096, NULL, 0, &cal),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_calibrator_create(1, 2, 4, "maxmin", 0, &cal),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("maxmin"));
    if (kvcal_cuda_device_count() == 0) {
        CU_ASSERT_EQUAL(kvcal_calibrator_create(1, 2, 4, NULL, 1, &cal), KVCAL_ERR_NO_DEVICE);
        CU_ASSERT_PTR_NULL(cal);
    }
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(2, 2, 4, NULL, 0, &cal), KVCAL_OK);
    float x[16] = {0};
    kvcal_kv_batch b = {x, x, KVCAL_DTYPE_F32, 2, 8, 4, 8, 4, NULL};
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, 2, &b), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("layer 2 out of range (2 layers)"));
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_launch(cal, 0, &b, NULL), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("lives on the host"));
    b.k_token_stride = 6;
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, 0, &b), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("overlap rows of 2 heads x 4"));
    b.k_token_stride = 8;
    b.dtype = KVCAL_DTYPE_I32;
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, 0, &b), KVCAL_ERR_INVALID_ARG);
    b.dtype = KVCAL_DTYPE_F32;
    b.v = NULL;
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, 0, &b), KVCAL_ERR_INVALID_ARG);
    b.v = x;
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, 0, &b), KVCAL_OK);
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL(kvcal_calibrator_to_scales(cal, KVCAL_GRANULARITY_HEAD, NULL, &s),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("layer 1 observed no token"));
    kvcal_calibrator_t *other = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(2, 2, 4, "mse", 0, &other), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_calibrator_merge(cal, other, NULL), KVCAL_ERR_MISMATCH);
    kvcal_calibrator_destroy(other);
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(2, 3, 4, NULL, 0, &other), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_calibrator_merge(cal, other, NULL), KVCAL_ERR_MISMATCH);
    kvcal_calibrator_destroy(other);
    /* ema needs an ended step */
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(1, 2, 4, "ema", 0, &other), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(other, 0, &b), KVCAL_OK);
    CU_ASSERT_NOT_EQUAL(kvcal_calibrator_to_scales(other, KVCAL_GRANULARITY_HEAD, NULL, &s),
                        KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_calibrator_end_step(other, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_calibrator_to_scales(other, KVCAL_GRANULARITY_HEAD, NULL, &s),
                    KVCAL_OK);
    kvcal_scales_destroy(s);
    kvcal_calibrator_destroy(other);
    kvcal_calibrator_destroy(cal);
    kvcal_calibrator_destroy(NULL);
}

/* Traffic split over three "processes" and merged through bytes gives the
 * scales of one calibrator that saw it all (minmax, percentile, mse). */
static void calibrator_merged_through_bytes_equals_one_that_saw_everything(void)
{
    const char *observers[3] = {"minmax", "percentile:99", "mse"};
    const int L = 2, H = 3, D = 16;
    for (int o = 0; o < 3; o++) {
        kvcal_calibrator_t *all = NULL, *part[3] = {NULL};
        CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(L, H, D, observers[o], 0, &all),
                              KVCAL_OK);
        for (int p = 0; p < 3; p++)
            CU_ASSERT_EQUAL_FATAL(
                kvcal_calibrator_create(L, H, D, observers[o], 0, &part[p]), KVCAL_OK);
        for (int step = 0; step < 6; step++)
            for (int l = 0; l < L; l++) {
                step_data s;
                step_make(&s, KVCAL_DTYPE_BF16, 5 + 7 * step, H, D, step % 2, l);
                CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(all, l, &s.b), KVCAL_OK);
                CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(part[step % 3], l, &s.b),
                                KVCAL_OK);
                step_free(&s);
            }
        kvcal_calibrator_t *merged = NULL;
        for (int p = 0; p < 3; p++) {
            size_t n = 0;
            CU_ASSERT_EQUAL(kvcal_calibrator_serialize(part[p], NULL, NULL, 0, &n), KVCAL_OK);
            unsigned char *buf = malloc(n);
            CU_ASSERT_EQUAL(kvcal_calibrator_serialize(part[p], NULL, buf, n, &n), KVCAL_OK);
            kvcal_calibrator_t *back = NULL;
            CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_deserialize(buf, n, 0, &back), KVCAL_OK);
            free(buf);
            if (!merged) {
                merged = back;
                continue;
            }
            CU_ASSERT_EQUAL(kvcal_calibrator_merge(merged, back, NULL), KVCAL_OK);
            kvcal_calibrator_destroy(back);
        }
        for (int g = 0; g < 2; g++) {
            kvcal_scales_t *a = NULL, *b = NULL;
            CU_ASSERT_EQUAL_FATAL(
                kvcal_calibrator_to_scales(all, (kvcal_granularity)g, NULL, &a), KVCAL_OK);
            CU_ASSERT_EQUAL_FATAL(
                kvcal_calibrator_to_scales(merged, (kvcal_granularity)g, NULL, &b), KVCAL_OK);
            CU_ASSERT_TRUE(same_scales(a, b));
            kvcal_scales_destroy(a);
            kvcal_scales_destroy(b);
        }
        kvcal_calibrator_destroy(all);
        kvcal_calibrator_destroy(merged);
        for (int p = 0; p < 3; p++)
            kvcal_calibrator_destroy(part[p]);
    }
}

static void calibrator_bytes_round_trip_and_damaged_bytes_are_refused(void)
{
    kvcal_calibrator_t *cal = NULL, *back = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(2, 2, 8, "ema:0.5", 0, &cal), KVCAL_OK);
    for (int l = 0; l < 2; l++) {
        step_data s;
        step_make(&s, KVCAL_DTYPE_F16, 9, 2, 8, 1, l);
        CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, l, &s.b), KVCAL_OK);
        step_free(&s);
    }
    kvcal_calibrator_end_step(cal, NULL);
    size_t n = 0, m = 0;
    kvcal_calibrator_serialize(cal, NULL, NULL, 0, &n);
    unsigned char *buf = malloc(n), *again = malloc(n);
    CU_ASSERT_EQUAL(kvcal_calibrator_serialize(cal, NULL, buf, n - 1, &m),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("pass buf = NULL first"));
    CU_ASSERT_EQUAL(kvcal_calibrator_serialize(cal, NULL, buf, n, &m), KVCAL_OK);
    CU_ASSERT_EQUAL(m, n);
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_deserialize(buf, n, 0, &back), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_calibrator_serialize(back, NULL, again, n, &m), KVCAL_OK);
    CU_ASSERT_EQUAL(memcmp(buf, again, n), 0);
    kvcal_calibrator_destroy(back);
    back = (kvcal_calibrator_t *)1;
    CU_ASSERT_EQUAL(kvcal_calibrator_deserialize(buf, n - 8, 0, &back), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("truncated or damaged"));
    CU_ASSERT_PTR_NULL(back);
    CU_ASSERT_EQUAL(kvcal_calibrator_deserialize(buf, 10, 0, &back), KVCAL_ERR_FORMAT);
    memcpy(again, buf, n);
    again[0] = 'X';
    CU_ASSERT_EQUAL(kvcal_calibrator_deserialize(again, n, 0, &back), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("not bytes of kvcal_calibrator_serialize"));
    /* one count more in the first histogram than the tokens it saw */
    memcpy(again, buf, n);
    kvcal_stats_t *shape = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(2, 2, 8, &shape), KVCAL_OK);
    size_t hist0 = n - kvcal_stats_slab_bytes(shape); // hist[K] opens the slab
    kvcal_stats_destroy(shape);
    uint64_t c;
    memcpy(&c, again + hist0, 8);
    c++;
    memcpy(again + hist0, &c, 8);
    CU_ASSERT_EQUAL(kvcal_calibrator_deserialize(again, n, 0, &back), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("layer 0 K kv head 0: the histogram counts"));
    free(buf);
    free(again);
    kvcal_calibrator_destroy(cal);
}

/* The calibrator's scales written in every format, through the public
 * API, validate against the model. */
static void calibrator_scales_write_in_every_format(void)
{
    const char *model = model_dir("cal_model");
    kvcal_calibrator_t *cal = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(2, 4, 16, "percentile:99.9", 0, &cal),
                          KVCAL_OK);
    for (int l = 0; l < 2; l++) {
        step_data s;
        step_make(&s, KVCAL_DTYPE_BF16, 33, 4, 16, 0, l);
        CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(cal, l, &s.b), KVCAL_OK);
        step_free(&s);
    }
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_to_scales(cal, KVCAL_GRANULARITY_TENSOR, NULL, &s),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_scales_set_model(s, "LlamaForCausalLM", "llama", 8, 0), KVCAL_OK);
    const kvcal_format fmts[3] = {KVCAL_FORMAT_LEGACY_JSON, KVCAL_FORMAT_KVCAL_JSON,
                                  KVCAL_FORMAT_CHECKPOINT};
    const char *names[3] = {"cal_legacy.json", "cal_kvcal.json", "cal_ck"};
    for (int f = 0; f < 3; f++) {
        char path[600];
        snprintf(path, sizeof path, "%s", kvcal_test_path(names[f]));
        CU_ASSERT_EQUAL(kvcal_scales_write(s, fmts[f], path, model, 1), KVCAL_OK);
        kvcal_report_t *rep = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_validate_file(path, model, 1, &rep), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_report_format(rep), fmts[f]);
        CU_ASSERT_EQUAL(kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR), 0);
        kvcal_report_destroy(rep);
    }
    kvcal_scales_destroy(s);
    kvcal_calibrator_destroy(cal);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(scales_setters_refuse_bad_values_and_leave_the_set_unchanged),
    KVCAL_TEST(an_engine_fills_a_set_and_every_format_loads_back),
    KVCAL_TEST(kvcal_json_holds_q_for_every_layer_or_refuses),
    KVCAL_TEST(calibrator_ref_folds_what_stats_fold_in_every_dtype),
    KVCAL_TEST(calibrator_padding_is_never_observed),
    KVCAL_TEST(calibrator_refuses_nonfinite_and_gives_no_scale_after),
    KVCAL_TEST(calibrator_rejects_bad_arguments_with_a_message),
    KVCAL_TEST(calibrator_merged_through_bytes_equals_one_that_saw_everything),
    KVCAL_TEST(calibrator_bytes_round_trip_and_damaged_bytes_are_refused),
    KVCAL_TEST(calibrator_scales_write_in_every_format),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(engine_api, KVCAL_NEEDS_NOTHING, tests)
