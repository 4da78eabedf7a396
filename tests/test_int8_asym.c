/* tests/test_int8_asym.c: int8 with zero points, vllm-ascend's C8 cache:
 * ModelSlim's scale and offset of a signed range and vllm-ascend's store and
 * read against torch (tests/make_int8_asym_fixture.py), the library's static
 * INT8_ASYM round trip under those parameters, the observers' scales and
 * offsets from the statistics' signed range, and the kvcal format's offsets
 * (write, read, and what the reader refuses). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/scale_rule.h"
#include "core/scales.h"
#include "io/scales/scales_io.h"
#include "kvcal.h"
#include "observers/observer.h"
#include "observers/stats.h"
#include "tests/test_util.h"

#define FIXTURE "tests/fixtures/int8_asym/c8_torch.bin"
#define VALUES 64

/* The library's static INT8_ASYM round trip of x (n values, one head of
 * head_dim 1, a token each) under vllm-ascend's (scale, offset): the zero
 * point the uint8 code 0 stands for is -(offset + 128) * scale. */
static void library_round_trip(const float *x, int n, float scale, float offset,
                               float *out)
{
    int64_t slots[VALUES];
    uint8_t kc[VALUES], vc[VALUES];
    float kd[VALUES], vd[VALUES];
    for (int i = 0; i < n; i++)
        slots[i] = i;
    const float zero = -(offset + 128.0f) * scale;
    const kvcal_kv_batch b = {x, x, KVCAL_DTYPE_F32, n, 1, 1, 1, 1, slots};
    const kvcal_kv_cache c = {kc, vc, NULL, NULL, n, 1, 1, 1, 0, KVCAL_CACHE_NHD};
    const kvcal_kv_qparams q = {KVCAL_KV_FORMAT_INT8_ASYM,
                                KVCAL_KV_ROUND_NEAREST_EVEN,
                                KVCAL_GRANULARITY_TENSOR,
                                &scale,
                                &scale,
                                &zero,
                                &zero,
                                NULL,
                                NULL};
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_fmt_ref(&b, &c, &q), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_dequantize_fmt_ref(&b, &c, &q, kd, vd, KVCAL_DTYPE_F32), KVCAL_OK);
    memcpy(out, kd, (size_t)n * sizeof *out);
}

static void int8_asym_params_and_round_trip_match_modelslim_and_vllm_ascend(void)
{
    size_t len = 0;
    unsigned char *buf = (unsigned char *)kvcal_test_read_file(FIXTURE, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    uint32_t cases;
    memcpy(&cases, buf, 4);
    const size_t per = 4 * (4 + 2 * VALUES);
    CU_ASSERT_FATAL(cases >= 50 && len == 4 + cases * per);
    int halves = 0, differ = 0, total = 0;
    for (uint32_t c = 0; c < cases; c++) {
        float h[4], x[VALUES], want[VALUES], got[VALUES];
        const unsigned char *p = buf + 4 + c * per;
        memcpy(h, p, sizeof h);
        memcpy(x, p + 16, sizeof x);
        memcpy(want, p + 16 + sizeof x, sizeof want);
        float scale, offset;
        kvcal_int8_asym_params(h[0], h[1], &scale, &offset);
        CU_ASSERT_EQUAL(scale, h[2]);
        CU_ASSERT_EQUAL(offset, h[3]);
        CU_ASSERT(kvcal_int8_offset_is_valid(offset));
        const float lo = h[0] < 0.0f ? h[0] : 0.0f;
        const float t = -lo / scale;
        halves += t - floorf(t) == 0.5f;
        /* the library's uint8 cache reads back vllm-ascend's values (its
         * fmaf(code, scale, zero) within a few ulp of (q - offset) *
         * scale), but where x / scale + offset and (x - zero) / scale round
         * apart: there one step (the scale) away */
        library_round_trip(x, VALUES, scale, offset, got);
        for (int i = 0; i < VALUES; i++, total++) {
            const float d = fabsf(got[i] - want[i]);
            const float ulps = 4.0f * 128.0f * scale * FLT_EPSILON;
            CU_ASSERT(d <= ulps || fabsf(d - scale) <= ulps);
            differ += d > ulps;
        }
    }
    printf("\n  %u ranges (%d on an exact half), %d of %d values a step apart", cases,
           halves, differ, total);
    CU_ASSERT(halves >= 4);
    CU_ASSERT(differ * 100 <= total);
    free(buf);
}

/* Statistics of 2 layers x 2 kv heads x 2 channels: every K value of
 * (layer l, head h, channel c) is one of the two of kvals, V's their halves. */
static kvcal_stats_t *observed_stats(void)
{
    kvcal_stats_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(2, 2, 2, &s), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_range(s, 1), KVCAL_OK);
    /* (tokens 2, heads 2, channels 2) */
    const float k[2][8] = {
        {-1.0f, 0.5f, 2.0f, 3.0f, /* token 0 */ 0.25f, -0.5f, -4.0f, 1.0f},
        {0.5f, 0.75f, 6.0f, -0.25f, -0.125f, 0.25f, 1.0f, 2.0f}};
    for (int l = 0; l < 2; l++) {
        float v[8];
        for (int i = 0; i < 8; i++)
            v[i] = 0.5f * k[l][i];
        kvcal_kv_block bk = kvcal_kv_block_dense(k[l], 1, 2, 2, 2, NULL, NULL);
        kvcal_kv_block bv = kvcal_kv_block_dense(v, 1, 2, 2, 2, NULL, NULL);
        CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, l, KVCAL_K, &bk), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, l, KVCAL_V, &bv), KVCAL_OK);
    }
    CU_ASSERT_EQUAL(kvcal_stats_end_batch(s, 0.99), KVCAL_OK);
    return s;
}

static void stats_to_scales_takes_int8_asym_from_the_signed_range(void)
{
    kvcal_stats_t *st = observed_stats();
    kvcal_observer_config cfg = kvcal_observer_default();
    /* per head: head 0 of layer 0 holds -1, 0.5, 0.25, -0.5 (range [-1,
     * 0.5]), head 1 holds 2, 3, -4, 1 ([-4, 3]); layer 1's head 0 [-0.125,
     * 0.75], head 1 [-0.25, 6] */
    const float lo[2][2] = {{-1.0f, -4.0f}, {-0.125f, -0.25f}};
    const float hi[2][2] = {{0.5f, 3.0f}, {0.75f, 6.0f}};
    for (int g = 0; g < 2; g++) {
        kvcal_scales_t *s = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 2, &s), KVCAL_OK);
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_set_offsets(s, 1), KVCAL_OK);
        CU_ASSERT_EQUAL(s->format, KVCAL_KV_FORMAT_INT8_ASYM);
        const kvcal_granularity gran =
            g ? KVCAL_GRANULARITY_TENSOR : KVCAL_GRANULARITY_HEAD;
        CU_ASSERT_EQUAL_FATAL(kvcal_stats_to_scales(st, &cfg, gran, s, NULL, NULL),
                              KVCAL_OK);
        for (int l = 0; l < 2; l++)
            for (int h = 0; h < 2; h++) {
                const float a = g ? fminf(lo[l][0], lo[l][1]) : lo[l][h];
                const float b = g ? fmaxf(hi[l][0], hi[l][1]) : hi[l][h];
                float ks, ko, vs, vo;
                kvcal_int8_asym_params(a, b, &ks, &ko);
                kvcal_int8_asym_params(0.5f * a, 0.5f * b, &vs, &vo);
                const int i = kvcal_scales_index(s, l, h);
                CU_ASSERT_EQUAL(s->k_head[i], ks);
                CU_ASSERT_EQUAL(s->k_offset[i], ko);
                CU_ASSERT_EQUAL(s->v_head[i], vs);
                CU_ASSERT_EQUAL(s->v_offset[i], vo);
            }
        CU_ASSERT(!s->has_clip && s->has_absmax);
        /* the range's largest |x| is what symmetric modes take from the set */
        CU_ASSERT(kvcal_scales_head_range_absmax(s, 0, 1, 0) >= 4.0f);
        kvcal_scales_destroy(s);
    }
    /* a clipping observer clips the range at its threshold: percentile 50
     * of head 1 of layer 0 (|x| 1, 2, 3, 4) is below 4 */
    kvcal_observer_config pc;
    CU_ASSERT_EQUAL_FATAL(kvcal_observer_parse("percentile:50", &pc), KVCAL_OK);
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 2, &s), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_set_offsets(s, 1), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_stats_to_scales(st, &pc, KVCAL_GRANULARITY_HEAD, s, NULL, NULL), KVCAL_OK);
    float t;
    CU_ASSERT_EQUAL(kvcal_stats_threshold(st, &pc, 0, KVCAL_K, 1, &t), KVCAL_OK);
    CU_ASSERT(t < 4.0f);
    float ws, wo;
    kvcal_int8_asym_params(-t, fminf(3.0f, t), &ws, &wo);
    CU_ASSERT_EQUAL(s->k_head[1], ws);
    CU_ASSERT_EQUAL(s->k_offset[1], wo);
    kvcal_scales_destroy(s);
    /* without the signed range there is nothing to take the offsets from */
    CU_ASSERT_EQUAL(kvcal_stats_set_range(st, 0), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 2, &s), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_set_offsets(s, 1), KVCAL_OK);
    CU_ASSERT_EQUAL(
        kvcal_stats_to_scales(st, &cfg, KVCAL_GRANULARITY_HEAD, s, NULL, NULL),
        KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("signed range"));
    /* a symmetric set cannot become one by rescaling */
    CU_ASSERT_EQUAL(kvcal_scales_set_offsets(s, 0), KVCAL_OK);
    s->format = KVCAL_KV_FORMAT_FP8_E4M3;
    CU_ASSERT_EQUAL(kvcal_scales_rescale(s, KVCAL_KV_FORMAT_INT8_ASYM),
                    KVCAL_ERR_UNSUPPORTED);
    kvcal_scales_destroy(s);
    kvcal_stats_destroy(st);
}

/* A 2 x 2 int8_asym set with distinct scales and offsets. */
static kvcal_scales_t *asym_set(void)
{
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 2, &s), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_set_offsets(s, 1), KVCAL_OK);
    for (int i = 0; i < 4; i++) {
        s->k_head[i] = 0.01f * (float)(i + 1);
        s->v_head[i] = 0.003f * (float)(i + 2);
        s->k_offset[i] = (float)(-128 + 50 * i);
        s->v_offset[i] = (float)(127 - 40 * i);
    }
    return s;
}

static void int8_asym_sets_round_trip_through_the_kvcal_format(void)
{
    kvcal_scales_t *s = asym_set(), *back = NULL;
    const char *path = kvcal_test_path("asym_set.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_KVCAL_JSON, path, NULL, 1),
                          KVCAL_OK);
    char *text = kvcal_test_read_file(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"int8_asym\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"k_offset_per_head\""));
    free(text);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(path, NULL, 1, &back), KVCAL_OK);
    CU_ASSERT_EQUAL(back->format, KVCAL_KV_FORMAT_INT8_ASYM);
    CU_ASSERT_PTR_NOT_NULL_FATAL(back->k_offset);
    CU_ASSERT(!memcmp(back->k_head, s->k_head, 4 * sizeof(float)));
    CU_ASSERT(!memcmp(back->v_head, s->v_head, 4 * sizeof(float)));
    CU_ASSERT(!memcmp(back->k_offset, s->k_offset, 4 * sizeof(float)));
    CU_ASSERT(!memcmp(back->v_offset, s->v_offset, 4 * sizeof(float)));
    kvcal_scales_destroy(back);
    /* a symmetric int8 set has no offsets, written or read */
    CU_ASSERT_EQUAL(kvcal_scales_set_offsets(s, 0), KVCAL_OK);
    CU_ASSERT_EQUAL(s->format, KVCAL_KV_FORMAT_INT8);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_write(s, KVCAL_FORMAT_KVCAL_JSON, path, NULL, 1),
                          KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_load(path, NULL, 1, &back), KVCAL_OK);
    CU_ASSERT_EQUAL(back->format, KVCAL_KV_FORMAT_INT8);
    CU_ASSERT_PTR_NULL(back->k_offset);
    kvcal_scales_destroy(back);
    kvcal_scales_destroy(s);
    /* an offset that is no int8 code is never written */
    s = asym_set();
    s->v_offset[3] = 128.0f;
    const char *bad = kvcal_test_path("asym_bad.json");
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_KVCAL_JSON, bad, NULL, 1),
                    KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("layer 1 kv head 1: V offset 128"));
    s->v_offset[3] = 2.5f;
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_KVCAL_JSON, bad, NULL, 1),
                    KVCAL_ERR_NONFINITE);
    FILE *f = fopen(bad, "r");
    CU_ASSERT_PTR_NULL(f);
    if (f)
        fclose(f);
    /* nor a set that says int8_asym without its offsets */
    kvcal_scales_t *bare = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 2, &bare), KVCAL_OK);
    for (int i = 0; i < 4; i++)
        bare->k_head[i] = bare->v_head[i] = 0.01f;
    bare->format = KVCAL_KV_FORMAT_INT8_ASYM;
    CU_ASSERT_EQUAL(kvcal_scales_write(bare, KVCAL_FORMAT_KVCAL_JSON, bad, NULL, 1),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("needs its offsets"));
    kvcal_scales_destroy(bare);
    /* nor is a set of offsets into the formats of the other engines */
    s->v_offset[3] = 0.0f;
    CU_ASSERT_EQUAL(kvcal_scales_write(s, KVCAL_FORMAT_LEGACY_JSON, bad, NULL, 1),
                    KVCAL_ERR_UNSUPPORTED);
    kvcal_scales_destroy(s);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(int8_asym_params_and_round_trip_match_modelslim_and_vllm_ascend),
    KVCAL_TEST(stats_to_scales_takes_int8_asym_from_the_signed_range),
    KVCAL_TEST(int8_asym_sets_round_trip_through_the_kvcal_format), CU_TEST_INFO_NULL};
KVCAL_SUITE(int8_asym, KVCAL_NEEDS_NOTHING, tests)
