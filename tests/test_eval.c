/* tests/test_eval.c: `kvcal eval` end to end on the bundled stories260K,
 * through kvcal_test_run_kvcal, and the CPU references of its reductions
 * (kernels/cpu/eval_ref.h). The CUDA path against this one is in
 * tests/test_eval_cuda.c. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/eval_stats.h"
#include "kernels/cpu/eval_ref.h"
#include "kvcal.h"
#include "tests/test_calib_util.h"
#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <stdint.h>

#include "kernels/cuda/eval.h"
#endif

#define MODEL "models/stories260K/stories260K.bin"
#define DATA "datasets/default_calibration.txt"
#define SMALL "--num-samples 4 --seq-len 64 --batch 2 --quiet"

static double number(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

// --- the reductions --------------------------------------------------------------

static void token_nll_ref_is_log_vocab_on_flat_logits_and_0_without_target(void)
{
    enum { ROWS = 3, VOCAB = 517 };
    float logits[ROWS * VOCAB], nll[ROWS];
    const int32_t target[ROWS] = {5, -1, 516};
    for (int i = 0; i < ROWS * VOCAB; i++)
        logits[i] = 2.5f;
    logits[2 * VOCAB + 516] = 2.5f + logf(2.0f); /* twice as likely as the rest */
    kvcal_token_nll_ref(nll, logits, target, ROWS, VOCAB);
    KVCAL_ASSERT_CLOSE(nll[0], log(VOCAB), 1e-6, 1e-6);
    CU_ASSERT_EQUAL(nll[1], 0.0f);
    KVCAL_ASSERT_CLOSE(nll[2], log((VOCAB + 1) / 2.0), 1e-6, 1e-6);
}

/* p = (1/2, 1/4, 1/4) against q = (1/4, 1/2, 1/4): KL = ln2 / 2 - ln2 / 4;
 * the first largest tokens differ (0 and 1). A row equal to the kept one
 * but shifted by 7 (softmax does not see it) has KL 0 (within the
 * rounding of the logsumexps to float) and the same top;
 * a row kept nowhere gets 0 and 0. */
static void token_kld_ref_is_hand_checked_on_three_token_rows(void)
{
    enum { V = 3 };
    const float ln2 = logf(2.0f);
    const float base[2 * V] = {ln2, 0, 0, 1, 3, -2};
    const float run[3 * V] = {0, ln2, 0, 8, 10, 5, 4, 4, 4};
    const int64_t keep_at[2] = {1, 0}, cmp_at[3] = {1, 0, -1};
    float ref[2 * V], lse[2], kld[3] = {9, 9, 9}, top[3] = {9, 9, 9};
    kvcal_token_keep_ref(ref, lse, base, keep_at, 2, V);
    CU_ASSERT(!memcmp(ref + V, base, V * sizeof(float)));
    CU_ASSERT(!memcmp(ref, base + V, V * sizeof(float)));
    KVCAL_ASSERT_CLOSE(lse[1], log(4.0), 1e-7, 1e-6);
    kvcal_token_kld_ref(kld, top, run, ref, lse, cmp_at, 3, V);
    KVCAL_ASSERT_CLOSE(kld[0], 0.25 * log(2.0), 1e-7, 1e-6);
    CU_ASSERT_EQUAL(top[0], 0.0f);
    /* the two logsumexps (4.1 and 11.1) are kept as floats: 1e-6 apart at most */
    KVCAL_ASSERT_CLOSE(kld[1], 0.0, 1e-6, 0.0);
    CU_ASSERT_EQUAL(top[1], 1.0f);
    CU_ASSERT_EQUAL(kld[2], 0.0f);
    CU_ASSERT_EQUAL(top[2], 0.0f);
}

/* Two windows of 2 and 3 predicted tokens (a third with one token
 * predicts none), d = nll - nll_base = (0.1, 0.3 | -0.1, 0.2, 0.8):
 * mean 0.26; per token se sqrt(0.452 / 20); per window the sums 0.4 and 0.9
 * deviate by -0.12 and +0.12 from 2 x and 3 x 0.26, se sqrt(0.0288 x 2) / 5
 * = 0.048, the interval 0.26 +- 12.7062 x 0.048 holds 0; tokens to resolve
 * 5 (12.7062 x 0.048 / 0.26)^2. KLD (0.5, 0.1, 0.3, 0.2, 0.4): mean 0.3, se
 * sqrt(0.1 / 20), median 0.3, 99th percentile 0.4 + 0.96 x 0.1; top-1 4 of
 * 5, se sqrt(0.8 x 0.2 / 4). */
static void eval_compare_is_hand_checked_on_two_windows(void)
{
    const float nll[5] = {1.1f, 1.3f, 0.9f, 1.2f, 1.8f}, base[5] = {1, 1, 1, 1, 1};
    const float kld[5] = {0.5f, 0.1f, 0.3f, 0.2f, 0.4f}, top[5] = {1, 0, 1, 1, 1};
    const int32_t lengths[3] = {3, 4, 1};
    float scratch[5];
    kvcal_eval_compare c;
    kvcal_eval_compare_tokens(&c, nll, base, kld, top, lengths, 3, scratch);
    CU_ASSERT_EQUAL(c.tokens, 5);
    CU_ASSERT_EQUAL(c.windows, 2);
    KVCAL_ASSERT_CLOSE(c.ln_ppl, 1.26, 1e-6, 0);
    KVCAL_ASSERT_CLOSE(c.ln_ppl_base, 1.0, 1e-7, 0);
    KVCAL_ASSERT_CLOSE(c.ln_ratio, 0.26, 1e-6, 0);
    KVCAL_ASSERT_CLOSE(c.ln_ratio_se, sqrt(0.452 / 20), 1e-6, 0);
    KVCAL_ASSERT_CLOSE(c.ln_ratio_se_window, 0.048, 1e-6, 0);
    CU_ASSERT(c.ci_from_windows);
    KVCAL_ASSERT_CLOSE(c.ci_lo, 0.26 - 12.7062 * 0.048, 1e-5, 0);
    KVCAL_ASSERT_CLOSE(c.ci_hi, 0.26 + 12.7062 * 0.048, 1e-5, 0);
    CU_ASSERT(c.within_noise);
    const double r = 12.7062 * 0.048 / 0.26;
    KVCAL_ASSERT_CLOSE(c.tokens_to_resolve, 5 * r * r, 1e-5, 1e-4);
    CU_ASSERT(c.tokens_to_resolve > c.tokens); /* within noise: more are needed */
    KVCAL_ASSERT_CLOSE(c.kld_mean, 0.3, 1e-7, 0);
    KVCAL_ASSERT_CLOSE(c.kld_se, sqrt(0.1 / 20), 1e-7, 1e-6);
    KVCAL_ASSERT_CLOSE(c.kld_median, 0.3, 1e-7, 0);
    KVCAL_ASSERT_CLOSE(c.kld_p99, 0.496, 1e-6, 0);
    KVCAL_ASSERT_CLOSE(c.kld_max, 0.5, 1e-7, 0);
    KVCAL_ASSERT_CLOSE(c.top1, 0.8, 1e-12, 0);
    KVCAL_ASSERT_CLOSE(c.top1_se, 0.2, 1e-12, 0);
    /* one window: the interval is the tokens', with 1.96; a change far
     * outside it is beyond noise */
    const int32_t one[1] = {6};
    const float far[5] = {2.1f, 2.3f, 1.9f, 2.2f, 2.8f};
    kvcal_eval_compare_tokens(&c, far, base, kld, top, one, 1, scratch);
    CU_ASSERT(!c.ci_from_windows);
    CU_ASSERT(isnan(c.ln_ratio_se_window));
    KVCAL_ASSERT_CLOSE(c.ci_lo, 1.26 - 1.959964 * sqrt(0.452 / 20), 1e-5, 0);
    CU_ASSERT(!c.within_noise);
}

/* One token has no spread: no interval, and so no verdict (the interval
 * was NAN and within_noise 1, printed "[+nan, +nan] within noise"). */
static void eval_compare_of_one_token_has_no_interval_and_no_verdict(void)
{
    const float nll[1] = {1.5f}, base[1] = {1.0f}, kld[1] = {0.2f}, top[1] = {1.0f};
    const int32_t lengths[2] = {2, 1};
    float scratch[1];
    kvcal_eval_compare c;
    kvcal_eval_compare_tokens(&c, nll, base, kld, top, lengths, 2, scratch);
    CU_ASSERT_EQUAL(c.tokens, 1);
    CU_ASSERT_EQUAL(c.windows, 1);
    KVCAL_ASSERT_CLOSE(c.ln_ratio, 0.5, 1e-7, 0);
    CU_ASSERT(c.no_interval);
    CU_ASSERT(isnan(c.ci_lo) && isnan(c.ci_hi));
    CU_ASSERT(!c.within_noise);
    CU_ASSERT(isnan(c.tokens_to_resolve));
    /* two tokens have one */
    const float two[2] = {1.5f, 1.25f}, base2[2] = {1, 1}, kld2[2] = {0.2f, 0.1f},
                top2[2] = {1, 0};
    const int32_t lengths2[1] = {3};
    float scratch2[2];
    kvcal_eval_compare_tokens(&c, two, base2, kld2, top2, lengths2, 1, scratch2);
    CU_ASSERT(!c.no_interval);
    CU_ASSERT(isfinite(c.ci_lo) && isfinite(c.ci_hi));
}

/* `kvcal eval` of one predicted token: the table says the interval is not
 * available instead of printing NaN and "within noise"; the JSON has no
 * NaN (cJSON would write it as null) and within_noise null, not true. */
static void eval_of_one_token_says_the_interval_is_not_available(void)
{
    char *out = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal("eval --model " MODEL " --dataset " DATA
                                               " --modes dynamic,unit --num-samples 1 "
                                               "--seq-len 2 --batch 1 --quiet",
                                               &out),
                          0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_PTR_NULL(strstr(out, "nan"));
    CU_ASSERT_PTR_NULL(strstr(out, "within noise:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "[n/a]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "no interval: 1 predicted token (2 needed"));
    free(out);
    out = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal("eval --model " MODEL " --dataset " DATA
                                               " --modes dynamic,unit --num-samples 1 "
                                               "--seq-len 2 --batch 1 --quiet --json",
                                               &out),
                          0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_PTR_NULL(strstr(out, "nan"));
    CU_ASSERT_PTR_NULL(strstr(out, "NaN"));
    cJSON *root = cJSON_Parse(out);
    free(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const cJSON *modes = cJSON_GetObjectItem(root, "modes"), *m;
    CU_ASSERT_EQUAL(cJSON_GetArraySize(modes), 3);
    int compared = 0;
    cJSON_ArrayForEach(m, modes)
    {
        if (!strcmp(cJSON_GetObjectItem(m, "mode")->valuestring, "baseline"))
            continue;
        compared++;
        CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(m, "within_noise")));
        const cJSON *ci = cJSON_GetObjectItem(m, "perplexity_change_rel_ci95");
        CU_ASSERT(cJSON_IsNull(cJSON_GetArrayItem(ci, 0)) &&
                  cJSON_IsNull(cJSON_GetArrayItem(ci, 1)));
        const cJSON *vb = cJSON_GetObjectItem(m, "vs_best");
        const cJSON *bm = cJSON_GetObjectItem(vb, "mode");
        /* the best mode against itself: a change of 0, within noise */
        if (bm && strcmp(bm->valuestring, cJSON_GetObjectItem(m, "mode")->valuestring))
            CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(vb, "within_noise")));
    }
    CU_ASSERT_EQUAL(compared, 2);
    cJSON_Delete(root);
}

/* Student's t quantiles against the printed tables (to 4 decimals). */
static void student_t975_matches_the_tables(void)
{
    static const struct {
        int df;
        double t;
    } t[] = {{1, 12.7062}, {2, 4.3027},  {10, 2.2281},  {30, 2.0423},
             {40, 2.0211}, {60, 2.0003}, {120, 1.9799}, {1000, 1.9623}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        KVCAL_ASSERT_CLOSE(kvcal_student_t975(t[i].df), t[i].t, 1e-3, 0);
    CU_ASSERT(isnan(kvcal_student_t975(0)));
}

static void error_sums_ref_skips_padding_rows_and_counts_values_past_464(void)
{
    /* 3 rows of 4 values in 2 groups of 2 (row stride 5), the middle row padding */
    const float x[15] = {1, -2, 464, -465, 9, 100, 100, 100, 100, 9, 0, 3, 0.5f, -4, 9};
    const float y[12] = {1, -2, 448, -448, 0, 0, 0, 0, 0, 3, 0.5f, -4};
    const float scale[6] = {1, 1, 1, 1, 1, 0.001f};
    const int32_t pos[3] = {0, -1, 1};
    kvcal_error_sums s = {0};
    kvcal_error_sums_ref(&s, x, 5, y, 4, scale, 2, pos, 3, 4);
    CU_ASSERT_EQUAL(s.n, 8);
    /* 464 sits on the rounding boundary and is not clipped; -465 is, and
     * 0.5 and -4 are under the 0.001 scale of the last group */
    CU_ASSERT_EQUAL(s.clipped, 3);
    CU_ASSERT_EQUAL(s.x2, 1 + 4 + 464.0 * 464 + 465.0 * 465 + 0 + 9 + 0.25 + 16);
    CU_ASSERT_EQUAL(s.e2, 16.0 * 16 + 17.0 * 17);
    kvcal_error_sums t = {0};
    kvcal_error_sums_ref(&t, x, 5, y, 4, NULL, 0, NULL, 3, 4);
    CU_ASSERT_EQUAL(t.n, 12);
    CU_ASSERT_EQUAL(t.clipped, 0);
    CU_ASSERT_EQUAL(t.e2, 16.0 * 16 + 17.0 * 17 + 4 * 100.0 * 100);
}

#ifdef KVCAL_WITH_CUDA
/* The CUDA reductions check their arguments on the host before any device
 * work, so no device is needed here (the non-NULL pointers are never
 * dereferenced): a NULL buffer, negative rows, a vocabulary of 0, a stride
 * under the columns, a group that does not divide them or a y dtype other
 * than F32 / BF16 is KVCAL_ERR_INVALID_ARG naming the op; 0 rows queue
 * nothing, whatever the buffers. */
static void eval_launches_reject_bad_arguments_before_device_work(void)
{
    float *nll = (float *)(uintptr_t)0x1000, *y = (float *)(uintptr_t)0x2000;
    const kvcal_bf16 *logits = (const kvcal_bf16 *)(uintptr_t)0x3000;
    const kvcal_bf16 *x = (const kvcal_bf16 *)(uintptr_t)0x4000;
    const int32_t *target = (const int32_t *)(uintptr_t)0x5000;
    kvcal_error_sums *sums = (kvcal_error_sums *)(uintptr_t)0x6000;
    const float *scale = (const float *)(uintptr_t)0x7000;
    const kvcal_status nll_bad[5] = {
        kvcal_token_nll_launch(NULL, logits, target, 2, 8, NULL),
        kvcal_token_nll_launch(nll, NULL, target, 2, 8, NULL),
        kvcal_token_nll_launch(nll, logits, NULL, 2, 8, NULL),
        kvcal_token_nll_launch(nll, logits, target, -1, 8, NULL),
        kvcal_token_nll_launch(nll, logits, target, 2, 0, NULL)};
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(nll_bad[i], KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("token_nll"));
    kvcal_bf16 *ref = (kvcal_bf16 *)(uintptr_t)0x5000;
    const int64_t *keep = (const int64_t *)(uintptr_t)0x6000;
    const kvcal_status head_bad[6] = {
        kvcal_token_keep_launch(NULL, nll, logits, keep, 2, 8, NULL),
        kvcal_token_keep_launch(ref, nll, logits, NULL, 2, 8, NULL),
        kvcal_token_keep_launch(ref, nll, logits, keep, 2, 0, NULL),
        kvcal_token_kld_launch(nll, y, logits, ref, NULL, keep, 2, 8, NULL),
        kvcal_token_kld_launch(nll, NULL, logits, ref, y, keep, 2, 8, NULL),
        kvcal_token_kld_launch(nll, y, logits, ref, y, keep, -1, 8, NULL)};
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(head_bad[i], KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("token_kld"));
    CU_ASSERT_EQUAL(
        kvcal_token_kld_launch(NULL, NULL, NULL, NULL, NULL, NULL, 0, 8, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_token_nll_launch(NULL, NULL, NULL, 0, 8, NULL), KVCAL_OK);
    const kvcal_dtype f32 = KVCAL_DTYPE_F32;
    const kvcal_status sums_bad[7] = {
        kvcal_error_sums_launch(NULL, x, 8, y, 8, f32, NULL, 0, NULL, 2, 8, NULL, NULL),
        kvcal_error_sums_launch(sums, NULL, 8, y, 8, f32, NULL, 0, NULL, 2, 8, NULL,
                                NULL),
        kvcal_error_sums_launch(sums, x, 8, NULL, 8, f32, NULL, 0, NULL, 2, 8, NULL,
                                NULL),
        kvcal_error_sums_launch(sums, x, 8, y, 8, f32, NULL, 0, NULL, -1, 8, NULL, NULL),
        kvcal_error_sums_launch(sums, x, 7, y, 8, f32, NULL, 0, NULL, 2, 8, NULL, NULL),
        kvcal_error_sums_launch(sums, x, 8, y, 8, f32, scale, 3, NULL, 2, 8, NULL, NULL),
        kvcal_error_sums_launch(sums, x, 8, y, 8, KVCAL_DTYPE_F16, NULL, 0, NULL, 2, 8,
                                NULL, NULL)};
    for (int i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(sums_bad[i], KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("error_sums"));
    CU_ASSERT_EQUAL(kvcal_error_sums_launch(NULL, NULL, 8, NULL, 8, f32, NULL, 0, NULL, 0,
                                            8, NULL, NULL),
                    KVCAL_OK);
}
#endif

// --- the command -----------------------------------------------------------------

static void eval_reports_every_mode_against_the_baseline(void)
{
    const char *scales = kvcal_test_path("eval_scales.json");
    char args[2048], *out = NULL;
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --granularity head " SMALL " --out '%s'",
             scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA " --scales '%s' " SMALL " --json",
             scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    cJSON *root = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(root, "device")->valuestring, "cpu");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(root, "baseline_dtype")->valuestring,
                           "fp32");
    const cJSON *modes = cJSON_GetObjectItemCaseSensitive(root, "modes");
    static const char *const names[] = {"baseline", "static-tensor", "static-head",
                                        "unit",     "dynamic",       "first-batch"};
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(modes), 6);
    double base = number(cJSON_GetArrayItem(modes, 0), "perplexity");
    CU_ASSERT(base > 1.0 && base < 512.0); /* a trained model beats uniform over 512 */
    int vs_best = 0;
    for (int i = 0; i < 6; i++) {
        const cJSON *m = cJSON_GetArrayItem(modes, i);
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(m, "mode")->valuestring, names[i]);
        double ppl = number(m, "perplexity");
        /* an FP8 cache moves the perplexity of this model by a few percent */
        CU_ASSERT(isfinite(ppl) && fabs(ppl - base) < 0.1 * base);
        const cJSON *layers = cJSON_GetObjectItemCaseSensitive(m, "layers");
        CU_ASSERT_EQUAL(cJSON_GetArraySize(layers), i == 0 ? 0 : 5);
        /* the window sums add up to the perplexity and the mean KLD */
        const cJSON *w = cJSON_GetObjectItem(m, "windows"), *x;
        double tokens = 0.0, nll = 0.0, kld_sum = 0.0;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(w, "tokens")) tokens += x->valuedouble;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(w, "nll_sum")) nll += x->valuedouble;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(w, "kld_sum")) kld_sum += x->valuedouble;
        CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(w, "tokens")), 4);
        CU_ASSERT_EQUAL(tokens, 4 * 63);
        KVCAL_ASSERT_CLOSE(exp(nll / tokens), number(m, "perplexity"), 0.0, 1e-9);
        if (i > 0)
            KVCAL_ASSERT_CLOSE(kld_sum / tokens, number(m, "kld_mean"), 1e-12, 1e-9);
        if (i > 0) {
            /* against the baseline on the same tokens: the distributions
             * moved a little, the interval holds the change, the verdict
             * says whether it holds 0 */
            const double kld = number(m, "kld_mean"), top = number(m, "top1_agreement");
            const double rel = number(m, "perplexity_change_rel");
            const cJSON *ci = cJSON_GetObjectItem(m, "perplexity_change_rel_ci95");
            const double lo = cJSON_GetArrayItem(ci, 0)->valuedouble;
            const double hi = cJSON_GetArrayItem(ci, 1)->valuedouble;
            CU_ASSERT(kld > 0.0 && kld < 0.2);
            CU_ASSERT(number(m, "kld_p99") >= number(m, "kld_median"));
            CU_ASSERT(number(m, "kld_max") >= number(m, "kld_p99"));
            CU_ASSERT(top > 0.5 && top <= 1.0);
            CU_ASSERT(lo < rel && rel < hi);
            KVCAL_ASSERT_CLOSE(expm1(number(m, "ln_ppl_ratio")), rel, 1e-9, 1e-6);
            CU_ASSERT_EQUAL(cJSON_IsTrue(cJSON_GetObjectItem(m, "within_noise")),
                            lo <= 0.0 && hi >= 0.0);
            CU_ASSERT(number(m, "tokens_to_resolve") > 0.0);
            CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(m, "ci_over")->valuestring,
                                   "windows");
            /* every mode but the best (the least perplexity) against it */
            const cJSON *vb = cJSON_GetObjectItem(m, "vs_best");
            if (vb) {
                const cJSON *bm = NULL, *o;
                cJSON_ArrayForEach(
                    o, modes) if (!strcmp(cJSON_GetObjectItem(o, "mode")->valuestring,
                                          cJSON_GetObjectItem(vb, "mode")->valuestring))
                    bm = o;
                CU_ASSERT_PTR_NOT_NULL_FATAL(bm);
                CU_ASSERT(number(bm, "perplexity") <= number(m, "perplexity"));
                CU_ASSERT_STRING_EQUAL(
                    cJSON_GetObjectItem(cJSON_GetObjectItem(bm, "vs_best"), "mode")
                        ->valuestring,
                    cJSON_GetObjectItem(bm, "mode")->valuestring);
                KVCAL_ASSERT_CLOSE(
                    number(vb, "ln_ppl_ratio"),
                    log(number(m, "perplexity") / number(bm, "perplexity")), 1e-6, 1e-4);
                vs_best++;
            }
        }
        const cJSON *l;
        cJSON_ArrayForEach(l, layers)
        {
            /* e4m3 keeps 3 mantissa bits: ~31 dB on values that neither clip
             * nor underflow; the dynamic mode does at least as well */
            CU_ASSERT(number(l, "k_sqnr_db") > 25.0 && number(l, "v_sqnr_db") > 25.0);
            CU_ASSERT(number(l, "k_clipped") < 0.01 && number(l, "v_clipped") < 0.01);
            CU_ASSERT(number(l, "attention_rel_error") > 0.0 &&
                      number(l, "attention_rel_error") < 1.0);
        }
    }
    CU_ASSERT_EQUAL(vs_best, 5); /* the best one's against itself: 0 */
    cJSON_Delete(root);
    free(out);
}

/* --attribute: every layer's cache alone, per mode: a KL divergence and a
 * perplexity change per layer, and the costliest layer is the one of the
 * largest KL divergence alone. Without it, the layer of the largest
 * attention error. */
static void eval_attribute_names_the_layer_that_costs_the_most(void)
{
    char *out = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal("eval --model " MODEL " --dataset " DATA
                                               " --modes dynamic --attribute " SMALL
                                               " --json",
                                               &out),
                          0);
    cJSON *root = cJSON_Parse(out);
    free(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "modes"), 1);
    const cJSON *layers = cJSON_GetObjectItem(m, "layers"), *l;
    int worst = -1, at = 0;
    double worst_kld = -1.0;
    cJSON_ArrayForEach(l, layers)
    {
        const double k = number(l, "kld_alone");
        CU_ASSERT(k > 0.0 && k < number(m, "kld_mean") * 2.0);
        CU_ASSERT(isfinite(number(l, "perplexity_change_rel_alone")));
        if (k > worst_kld)
            worst = at, worst_kld = k;
        at++;
    }
    const cJSON *cl = cJSON_GetObjectItem(m, "costliest_layer");
    CU_ASSERT_EQUAL(number(cl, "layer"), worst);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(cl, "by")->valuestring, "kld_alone");
    CU_ASSERT_EQUAL(number(cl, "value"), worst_kld);
    cJSON_Delete(root);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal("eval --model " MODEL " --dataset " DATA
                                               " --modes dynamic " SMALL " --json",
                                               &out),
                          0);
    root = cJSON_Parse(out);
    free(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    m = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "modes"), 1);
    cl = cJSON_GetObjectItem(m, "costliest_layer");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(cl, "by")->valuestring,
                           "attention_rel_error");
    double most = 0.0;
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(m, "layers"))
    {
        CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(l, "kld_alone"));
        most = fmax(most, number(l, "attention_rel_error"));
    }
    CU_ASSERT_EQUAL(number(cl, "value"), most);
    cJSON_Delete(root);
}

/* `kvcal eval --json` of stories260K's copy with K x factor (1: the model
 * itself), calibrated per head on its own K; NULL on failure. */
static cJSON *large_k_eval(float factor)
{
    char model[512], scales[512], args[4096], *out = NULL;
    snprintf(model, sizeof model, "%s", MODEL);
    if (factor != 1.0f) {
        snprintf(model, sizeof model, "%s/stories260K_k%g.bin", kvcal_test_tmpdir(),
                 (double)factor);
        if (kvcal_test_large_k_copy(MODEL, model, factor))
            return NULL;
    }
    snprintf(scales, sizeof scales, "%s/k%g_scales.json", kvcal_test_tmpdir(),
             (double)factor);
    snprintf(args, sizeof args,
             "calibrate --model '%s' --tokenizer models/stories260K/tok512.bin "
             "--granularity head " SMALL " --out '%s'",
             model, scales);
    if (kvcal_test_run_kvcal(args, NULL) != 0)
        return NULL;
    snprintf(args, sizeof args,
             "eval --model '%s' --tokenizer models/stories260K/tok512.bin --dataset " DATA
             " --scales '%s' --modes static-head,unit,dynamic " SMALL " --json",
             model, scales);
    cJSON *j = kvcal_test_run_kvcal(args, &out) == 0 && out ? cJSON_Parse(out) : NULL;
    free(out);
    return j;
}

static double mode_layer(const cJSON *j, int mode, int layer, const char *key)
{
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "modes"), mode);
    return layer < 0
               ? number(m, key)
               : number(cJSON_GetArrayItem(cJSON_GetObjectItem(m, "layers"), layer), key);
}

/* K x factor with scales calibrated on it: the scales grow with K, so the
 * e4m3 codes stay (exactly for a power of two: x 64 gives the same
 * perplexity bit for bit, so it can show nothing but unit scales'
 * clipping; within the float rounding of x / scale otherwise) and so does
 * the perplexity. Under unit scales a factor that is no power of two rounds
 * other mantissas: x 3 another SQNR with nothing clipped, x 100 clipping
 * as well. */
static void eval_large_k_copy_by_a_non_power_of_two_rounds_other_codes(void)
{
    static const float factors[4] = {1, 3, 64, 100};
    cJSON *j[4];
    for (int i = 0; i < 4; i++)
        CU_ASSERT_PTR_NOT_NULL_FATAL(j[i] = large_k_eval(factors[i]));
    /* modes: 0 baseline, 1 static-head, 2 unit, 3 dynamic */
    for (int m = 1; m <= 3; m += 2) {
        CU_ASSERT_EQUAL(mode_layer(j[2], m, -1, "perplexity"),
                        mode_layer(j[0], m, -1, "perplexity"));
        KVCAL_ASSERT_CLOSE(mode_layer(j[3], m, -1, "perplexity"),
                           mode_layer(j[0], m, -1, "perplexity"), 0.0, 1e-3);
    }
    int moved3 = 0;
    for (int l = 0; l < 5; l++) {
        moved3 += fabs(mode_layer(j[1], 2, l, "k_sqnr_db") -
                       mode_layer(j[0], 2, l, "k_sqnr_db")) > 1e-3;
        CU_ASSERT_EQUAL(mode_layer(j[1], 2, l, "k_clipped"), 0.0);
    }
    CU_ASSERT(moved3 > 0);
    CU_ASSERT_EQUAL(mode_layer(j[0], 2, 0, "k_clipped"), 0.0);
    CU_ASSERT(mode_layer(j[2], 2, 0, "k_clipped") > 0.01);
    CU_ASSERT(mode_layer(j[3], 2, 0, "k_clipped") > 0.01);
    for (int i = 0; i < 4; i++)
        cJSON_Delete(j[i]);
}

static void eval_counts_clipping_when_the_scales_are_too_small(void)
{
    /* values of |x| > 448 clip under unit scales: scale the bundled model's
     * K by running it as is but check that a mode with tiny scales clips:
     * a scales file whose every scale is the floor clips almost everything */
    const char *scales = kvcal_test_path("floor_scales.json");
    char args[2048], *out = NULL;
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --dataset " DATA " --out '%s'",
             scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    char *text = kvcal_test_read_file(scales, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    cJSON *root = cJSON_Parse(text);
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    /* shrink every "k_scale" number of the kvcal JSON 1000 times */
    int changed = 0;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    const cJSON *layer;
    cJSON_ArrayForEach(layer, layers)
    {
        cJSON *k = cJSON_GetObjectItemCaseSensitive(layer, "k_scale");
        cJSON *item;
        if (cJSON_IsNumber(k)) {
            cJSON_SetNumberValue(k, k->valuedouble / 1000.0);
            changed++;
        }
        cJSON *kh = cJSON_GetObjectItemCaseSensitive(layer, "k_scale_per_head");
        cJSON_ArrayForEach(item, kh)
        {
            cJSON_SetNumberValue(item, item->valuedouble / 1000.0);
            changed++;
        }
    }
    CU_ASSERT_FATAL(changed > 0);
    char *shrunk = cJSON_Print(root);
    cJSON_Delete(root);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(scales, shrunk, strlen(shrunk)), 0);
    free(shrunk);
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA
             " --scales '%s' --modes static-tensor " SMALL " --json",
             scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    root = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "modes"), 1);
    double base =
        number(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "modes"), 0), "perplexity");
    const cJSON *l0 = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "layers"), 0);
    CU_ASSERT(number(l0, "k_clipped") > 0.5);
    CU_ASSERT(number(l0, "k_sqnr_db") < 10.0);
    CU_ASSERT(number(m, "perplexity") > base);
    cJSON_Delete(root);
    free(out);
}

static void eval_rejects_scales_of_another_model_and_usage_errors(void)
{
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(
                        "eval --model " MODEL " --dataset " DATA
                        " --scales tests/fixtures/llama2-7b/kv_cache_scales.json " SMALL,
                        NULL),
                    1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("32 layers"));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("calibrate this one (kvcal calibrate --model"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("eval --model " MODEL " --dataset " DATA
                                         " --modes static-head",
                                         NULL),
                    2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--scales"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(
                        "eval --model " MODEL " --dataset " DATA " --modes fp4", NULL),
                    2);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("eval --model " MODEL, NULL), 2);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(
                        "eval --model " MODEL " --dataset " DATA " --device tpu", NULL),
                    2);
}

/* --modes with no mode, an empty name or a --tolerance with no number is a
 * usage error that says so in one line (it ran the baseline alone, or took
 * 0, exit 0); a list of any length is read, a name given twice runs once
 * (past 511 bytes it exited 2 without a word). */
static void eval_refuses_empty_modes_and_tolerance_and_reads_long_mode_lists(void)
{
    static const char *const bad[] = {"''", "','", "dynamic,", ",dynamic",
                                      "dynamic,,unit"};
    char args[4096], *out = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args,
                 "eval --model " MODEL " --dataset " DATA " --modes %s " SMALL, bad[i]);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
        CU_ASSERT(kvcal_test_kvcal_stderr_has(i ? "--modes '" : "no mode named"));
        CU_ASSERT(kvcal_test_kvcal_stderr_has("give comma-separated mode names"));
    }
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("eval --model " MODEL " --dataset " DATA
                                         " --tolerance '' " SMALL,
                                         NULL),
                    2);
    CU_ASSERT(
        kvcal_test_kvcal_stderr_has("--tolerance '': give a percentage in [0, 1e6)"));
    int n =
        snprintf(args, sizeof args,
                 "eval --model " MODEL " --dataset " DATA " " SMALL " --json --modes ");
    for (int i = 0; i < 80; i++)
        n += snprintf(args + n, sizeof args - (size_t)n, "%sdynamic", i ? "," : "");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    cJSON *root = out ? cJSON_Parse(out) : NULL;
    free(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(root, "modes")), 2);
    cJSON_Delete(root);
}

/* A legacy file holds one scale per layer and tp rank and no head count;
 * a llama2.c model has no config.json to give one. eval spreads the ranks
 * over the model's kv heads as the engines shard them (it refused the
 * file: "5 layers x 1 kv heads, but ... has 5 x 4"): at tp 1 every head
 * holds the layer's one value, so static-head and static-tensor are the
 * same cache; a rank count the heads do not split over is refused, naming
 * the ranks. */
static void eval_reads_a_legacy_file_of_a_llama2c_model(void)
{
    const char *k = kvcal_test_path("eval_legacy_src.json");
    const char *l1 = kvcal_test_path("eval_legacy_tp1.json");
    const char *l2 = kvcal_test_path("eval_legacy_tp2.json");
    char args[2048], *out = NULL;
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --dataset " DATA " --granularity head " SMALL
             " --out '%s'",
             k);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "convert '%s' --to legacy --out '%s'", k, l1);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "convert '%s' --to legacy --tp 2 --out '%s'", k, l2);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA
             " --scales '%s' --modes static-tensor,static-head " SMALL " --json",
             l1);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    cJSON *root = out ? cJSON_Parse(out) : NULL;
    free(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const cJSON *modes = cJSON_GetObjectItem(root, "modes");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(modes), 3);
    const double tensor = number(cJSON_GetArrayItem(modes, 1), "perplexity");
    CU_ASSERT(isfinite(tensor));
    CU_ASSERT_EQUAL(number(cJSON_GetArrayItem(modes, 2), "perplexity"), tensor);
    CU_ASSERT_EQUAL(
        cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(modes, 2), "layers")),
        5);
    cJSON_Delete(root);
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA
             " --scales '%s' --tp 2 --modes static-head " SMALL,
             l2);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    /* without --tp (1), the error names the --tp that reads the file */
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA
             " --scales '%s' --modes static-head " SMALL,
             l2);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("2 ranks but tp 1"));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("it is for tp 2 (--tp 2)"));
    /* 3 ranks cannot hold 4 kv heads */
    const char *l3 = kvcal_test_path("eval_legacy_tp3.json");
    char text[1024];
    int n = snprintf(text, sizeof text,
                     "{\"model_type\": \"llama\", \"kv_cache\": {\"dtype\": "
                     "\"float8_e4m3fn\", \"scaling_factor\": {");
    for (int r = 0; r < 3; r++)
        n += snprintf(text + n, sizeof text - (size_t)n,
                      "%s\"%d\": {\"0\": 0.05, \"1\": 0.05, \"2\": 0.05, \"3\": 0.05, "
                      "\"4\": 0.05}",
                      r ? ", " : "", r);
    snprintf(text + n, sizeof text - (size_t)n, "}}}");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(l3, text, strlen(text)), 0);
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset " DATA
             " --scales '%s' --tp 3 --modes static-head " SMALL,
             l3);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("3 tp ranks, but the model's 4 kv heads"));
}

/* Token ids past the model's vocabulary, with no tokenizer to check them,
 * are refused before the baseline runs, naming the dataset, the sample,
 * the position and the fix, as calibrate refuses them (eval found them
 * only in the forward pass, naming neither the dataset nor --tokenizer). */
static void eval_refuses_token_ids_past_the_vocabulary_naming_the_dataset(void)
{
    char cmd[2048];
    const char *model = kvcal_test_model_without_tokenizer("eval-no-tokenizer");
    const char *ids = kvcal_test_path("eval-past-vocab.jsonl");
    const char *line = "{\"input_ids\": [5, 9, 600, 3, 7]}\n";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(ids, line, strlen(line)), 0);
    snprintf(cmd, sizeof cmd,
             "eval --model '%s' --dataset '%s' --num-samples 1 --seq-len 5 --quiet",
             model, ids);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(cmd, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(
        "eval-past-vocab.jsonl: token id 600 (sample 0, position 2) is outside the "
        "vocabulary"));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--tokenizer"));
}

static void eval_device_cuda_without_a_device_exits_2_and_names_device_cpu(void)
{
    if (kvcal_cuda_device_count() > 0)
        return; /* tests/test_eval_cuda.c runs it there */
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("eval --model " MODEL " --dataset " DATA
                                         " --device cuda " SMALL,
                                         NULL),
                    2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--device cpu"));
}

/* Calibrates golden model `name` on 4 samples of 48 ids and evaluates its
 * static-head and dynamic caches (cpu runner): the layers reported over
 * both modes (*layers) and the worst attention_rel_error among them
 * (*worst); the baseline's perplexity is finite and every layer's error
 * above 0. */
static void eval_golden_attention_errors(const char *name, int *layers, double *worst)
{
    const char *ids = kvcal_test_path("golden_eval_ids.jsonl");
    char lines[4096] = "", args[2048], *out = NULL;
    for (int doc = 0; doc < 4; doc++) {
        size_t n = strlen(lines);
        n += (size_t)snprintf(lines + n, sizeof lines - n, "{\"input_ids\": [1");
        for (int t = 1; t < 48; t++)
            n += (size_t)snprintf(lines + n, sizeof lines - n, ", %d",
                                  3 + (doc * 37 + t * 11) % 125);
        snprintf(lines + n, sizeof lines - n, "]}\n");
    }
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(ids, lines, strlen(lines)), 0);
    const char *scales = kvcal_test_path("golden_eval_scales.json");
    snprintf(args, sizeof args,
             "calibrate --model tests/fixtures/golden/%s --dataset '%s' --granularity "
             "head --num-samples 4 --seq-len 48 --batch 2 --quiet --out '%s'",
             name, ids, scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args,
             "eval --model tests/fixtures/golden/%s --dataset '%s' --scales '%s' --modes "
             "static-head,dynamic --num-samples 4 --seq-len 48 --batch 2 --quiet --json",
             name, ids, scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    cJSON *root = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const cJSON *modes = cJSON_GetObjectItemCaseSensitive(root, "modes"), *m, *l;
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(modes), 3);
    const double base = number(cJSON_GetArrayItem(modes, 0), "perplexity");
    CU_ASSERT(isfinite(base) && base > 1.0);
    *layers = 0;
    *worst = 0.0;
    cJSON_ArrayForEach(m, modes)
        cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(m, "layers"))
    {
        const double e = number(l, "attention_rel_error");
        CU_ASSERT(e > 0.0);
        *worst = e > *worst ? e : *worst;
        ++*layers;
    }
    cJSON_Delete(root);
    free(out);
}

/* gpt-oss's simulated cache: the attention on the exact K and V that the
 * round trip's error is measured against has the sinks and the windows of
 * the attention the model runs (each layer's error then stays near what
 * the cache format costs, 2-4% on this model; an exact attention without
 * the sinks is off by 21% and 41%). */
static void eval_gpt_oss_simulates_the_cache_with_its_sinks_and_windows(void)
{
    int layers;
    double worst;
    eval_golden_attention_errors("gpt_oss_sinks_swa8_e8_top3_bf16", &layers, &worst);
    CU_ASSERT_EQUAL(layers, 4); /* two modes of two layers */
    CU_ASSERT(worst < 0.08);
}

/* Llama 4's simulated cache: the exact attention it is measured against
 * runs each chunk of 8 tokens of the RoPE layers apart, as the model does,
 * and the NoPE layer's temperature-scaled queries over every key. */
static void eval_llama4_simulates_the_cache_in_its_chunks(void)
{
    int layers;
    double worst;
    eval_golden_attention_errors("llama4_nope_chunk8_temp_e4_top2_bf16", &layers, &worst);
    CU_ASSERT_EQUAL(layers, 8); /* two modes of four layers */
    CU_ASSERT(worst < 0.08);
    printf("(worst attention error %.3g) ", worst);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(token_nll_ref_is_log_vocab_on_flat_logits_and_0_without_target),
    KVCAL_TEST(token_kld_ref_is_hand_checked_on_three_token_rows),
    KVCAL_TEST(eval_compare_is_hand_checked_on_two_windows),
    KVCAL_TEST(eval_compare_of_one_token_has_no_interval_and_no_verdict),
    KVCAL_TEST(student_t975_matches_the_tables),
    KVCAL_TEST(error_sums_ref_skips_padding_rows_and_counts_values_past_464),
#ifdef KVCAL_WITH_CUDA
    KVCAL_TEST(eval_launches_reject_bad_arguments_before_device_work),
#endif
    KVCAL_TEST(eval_reports_every_mode_against_the_baseline),
    KVCAL_TEST(eval_attribute_names_the_layer_that_costs_the_most),
    KVCAL_TEST(eval_large_k_copy_by_a_non_power_of_two_rounds_other_codes),
    KVCAL_TEST(eval_counts_clipping_when_the_scales_are_too_small),
    KVCAL_TEST(eval_rejects_scales_of_another_model_and_usage_errors),
    KVCAL_TEST(eval_refuses_empty_modes_and_tolerance_and_reads_long_mode_lists),
    KVCAL_TEST(eval_reads_a_legacy_file_of_a_llama2c_model),
    KVCAL_TEST(eval_of_one_token_says_the_interval_is_not_available),
    KVCAL_TEST(eval_refuses_token_ids_past_the_vocabulary_naming_the_dataset),
    KVCAL_TEST(eval_device_cuda_without_a_device_exits_2_and_names_device_cpu),
    KVCAL_TEST(eval_gpt_oss_simulates_the_cache_with_its_sinks_and_windows),
    KVCAL_TEST(eval_llama4_simulates_the_cache_in_its_chunks),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(eval, KVCAL_NEEDS_NOTHING, tests)
