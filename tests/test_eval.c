/* tests/test_eval.c: `kvcal eval` end to end on the bundled stories260K,
 * through kvcal_test_run_kvcal, and the CPU references of its reductions
 * (kernels/cpu/eval_ref.h). The CUDA path against this one is in
 * tests/test_eval_cuda.c. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/eval_ref.h"
#include "kvcal.h"
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
    for (int i = 0; i < 6; i++) {
        const cJSON *m = cJSON_GetArrayItem(modes, i);
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(m, "mode")->valuestring, names[i]);
        double ppl = number(m, "perplexity");
        /* an FP8 cache moves the perplexity of this model by a few percent */
        CU_ASSERT(isfinite(ppl) && fabs(ppl - base) < 0.1 * base);
        const cJSON *layers = cJSON_GetObjectItemCaseSensitive(m, "layers");
        CU_ASSERT_EQUAL(cJSON_GetArraySize(layers), i == 0 ? 0 : 5);
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
    cJSON_Delete(root);
    free(out);
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

static CU_TestInfo tests[] = {
    KVCAL_TEST(token_nll_ref_is_log_vocab_on_flat_logits_and_0_without_target),
    KVCAL_TEST(error_sums_ref_skips_padding_rows_and_counts_values_past_464),
#ifdef KVCAL_WITH_CUDA
    KVCAL_TEST(eval_launches_reject_bad_arguments_before_device_work),
#endif
    KVCAL_TEST(eval_reports_every_mode_against_the_baseline),
    KVCAL_TEST(eval_counts_clipping_when_the_scales_are_too_small),
    KVCAL_TEST(eval_rejects_scales_of_another_model_and_usage_errors),
    KVCAL_TEST(eval_device_cuda_without_a_device_exits_2_and_names_device_cpu),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(eval, KVCAL_NEEDS_NOTHING, tests)
