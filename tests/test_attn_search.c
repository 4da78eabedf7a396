/* tests/test_attn_search.c: the attention observer (calib/attn_search.h)
 * on stories260K: what it picks is one of its candidates and never moves
 * the attention output more than minmax does on the samples searched, and
 * `kvcal calibrate --observer attention` writes scales that name it. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/attn_search.h"
#include "observers/observer.h"
#include "tests/test_calib_util.h"
#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"

static void attn_search_picks_a_candidate_no_worse_than_minmax(void)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open(MODEL, &m), KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    enum { N = 6, LEN = 48, BATCH = 2 };
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    kvcal_stats_t *stats = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, N, LEN, BATCH, &stats, NULL),
                          KVCAL_OK);
    /* the pattern of samples kvcal_test_calibrate ran, through a fresh executor */
    int32_t ids[N * LEN], lengths[N];
    for (int i = 0; i < N * LEN; i++)
        ids[i] = (i * 37 + i / LEN * 11 + 5) % d->vocab_size;
    for (int i = 0; i < N; i++)
        lengths[i] = i == N - 1 ? LEN / 2 + 1 : LEN;
    o.backend.max_batch = BATCH;
    o.backend.max_seq_len = LEN;
    kvcal_exec_t *x = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_exec_create(m, &o, &x), KVCAL_OK);
    const size_t n = (size_t)d->num_layers * 2 * d->num_kv_heads;
    float *t = calloc(n, sizeof *t);
    int *chosen = calloc(n, sizeof *chosen);
    double *rel = calloc(n, sizeof *rel);
    CU_ASSERT_FATAL(t && chosen && rel);
    const kvcal_exec_samples s = {
        .ids = ids, .lengths = lengths, .num_samples = N, .seq_len = LEN, .batch = BATCH};
    kvcal_attn_search_result r = {t, chosen, rel};
    CU_ASSERT_EQUAL_FATAL(kvcal_attn_search(x, d, stats, &s, 4, &r), KVCAL_OK);
    /* the candidates, in the documented order */
    static const double pct[5] = {99.999, 99.99, 99.9, 99.5, 99.0};
    int better = 0, not_minmax = 0;
    for (int l = 0; l < d->num_layers; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < d->num_kv_heads; h++) {
                const size_t i = ((size_t)l * 2 + kv) * d->num_kv_heads + h;
                kvcal_observer_config c = kvcal_observer_default();
                if (chosen[i] >= 1 && chosen[i] <= 5)
                    c.kind = KVCAL_OBSERVER_PERCENTILE, c.percentile = pct[chosen[i] - 1];
                else if (chosen[i] == 6)
                    c.kind = KVCAL_OBSERVER_MSE;
                float want = -1.0f;
                CU_ASSERT_EQUAL(kvcal_stats_threshold(stats, &c, l, kv, h, &want),
                                KVCAL_OK);
                CU_ASSERT_EQUAL(t[i], want);
                CU_ASSERT(chosen[i] >= 0 && chosen[i] < KVCAL_ATTN_CANDIDATES);
                CU_ASSERT(rel[i] <= 1.0);
                better += rel[i] < 1.0;
                not_minmax += chosen[i] != 0;
            }
    /* on a trained model some head gains by clipping its outliers */
    CU_ASSERT(better > 0 && not_minmax > 0);
    free(t);
    free(chosen);
    free(rel);
    kvcal_exec_destroy(x);
    kvcal_stats_destroy(stats);
    kvcal_model_close(m);
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

static CU_TestInfo tests[] = {
    KVCAL_TEST(attn_search_picks_a_candidate_no_worse_than_minmax),
    KVCAL_TEST(calibrate_observer_attention_writes_scales_that_name_it),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(attn_search, KVCAL_NEEDS_NOTHING, tests)
