/* tests/test_eval_torch.c: the metrics of `kvcal eval` (the CPU references
 * of kernels/cpu/eval_ref.h and the statistics of calib/eval_stats.h)
 * against an independent torch computation in float64
 * (tests/eval_metrics_torch.py) on random logits of a baseline and of a
 * perturbed run, in windows of uneven lengths. Skipped without a Python
 * that imports torch and numpy (make test-python makes one under build/). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "calib/eval_stats.h"
#include "kernels/cpu/eval_ref.h"
#include "tests/test_util.h"

/* float against double: per-token values within 1e-5 + 1e-4 relative,
 * means and errors within 1e-6 + 1e-4 relative */
#define TOK_ATOL 1e-5
#define TOK_RTOL 1e-4
#define SUM_ATOL 1e-6
#define SUM_RTOL 1e-4

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static int write_raw(const char *name, const void *p, size_t bytes)
{
    return kvcal_test_write_file(kvcal_test_path(name), p, bytes);
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Worst |got - want[i]| of a JSON array, checked with atol + |want| rtol. */
static void check_array(const float *got, const cJSON *want, int n, double atol,
                        double rtol)
{
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(want), n);
    for (int i = 0; i < n; i++)
        KVCAL_ASSERT_CLOSE(got[i], cJSON_GetArrayItem(want, i)->valuedouble, atol, rtol);
}

static void eval_metrics_match_torch_float64(void)
{
    enum { W = 6, V = 1031 };
    const int32_t lengths[W] = {17, 9, 1, 30, 2, 12};
    int rows = 0;
    for (int w = 0; w < W; w++)
        rows += lengths[w] > 1 ? lengths[w] - 1 : 0;
    float *base = malloc((size_t)rows * V * sizeof *base);
    float *run = malloc((size_t)rows * V * sizeof *run);
    float *ref = malloc((size_t)rows * V * sizeof *ref);
    float lse[128], nll[128], nll_base[128], kld[128], top[128], scratch[128];
    int32_t target[128];
    int64_t keep[128];
    CU_ASSERT_FATAL(base && run && ref && rows <= 128);
    for (int r = 0; r < rows; r++) {
        /* a peaked baseline; the run perturbed by a row-dependent amount, a
         * few rows a lot (the top-1 token may change there) */
        const double amount = r % 7 == 3 ? 2.0 : 0.05 * (1 + r % 4);
        for (int i = 0; i < V; i++) {
            const float b = (float)(6.0 * uniform() * uniform() - 1.0);
            base[(size_t)r * V + i] = b;
            run[(size_t)r * V + i] = b + (float)(amount * (uniform() - 0.5));
        }
        target[r] = (int32_t)(uniform() * V);
        keep[r] = r;
    }
    kvcal_token_nll_ref(nll_base, base, target, rows, V);
    kvcal_token_nll_ref(nll, run, target, rows, V);
    kvcal_token_keep_ref(ref, lse, base, keep, rows, V);
    kvcal_token_kld_ref(kld, top, run, ref, lse, keep, rows, V);
    kvcal_eval_compare c;
    kvcal_eval_compare_tokens(&c, nll, nll_base, kld, top, lengths, W, scratch);

    char meta[128];
    snprintf(meta, sizeof meta, "{\"rows\": %d, \"vocab\": %d}", rows, V);
    CU_ASSERT_FATAL(!write_raw("input.json", meta, strlen(meta)) &&
                    !write_raw("base.f32", base, (size_t)rows * V * sizeof *base) &&
                    !write_raw("run.f32", run, (size_t)rows * V * sizeof *run) &&
                    !write_raw("target.i32", target, (size_t)rows * sizeof *target) &&
                    !write_raw("lengths.i32", lengths, sizeof lengths));
    char cmd[4096];
    const char *out = kvcal_test_path("torch.json");
    snprintf(cmd, sizeof cmd, "'%s' tests/eval_metrics_torch.py '%s' > '%s'",
             kvcal_test_python(), kvcal_test_tmpdir(), out);
    const int rc = system(cmd);
    CU_ASSERT_FATAL(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    char *text = kvcal_test_read_file(out, NULL);
    cJSON *t = text ? cJSON_Parse(text) : NULL;
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    check_array(nll, cJSON_GetObjectItem(t, "nll"), rows, TOK_ATOL, TOK_RTOL);
    check_array(nll_base, cJSON_GetObjectItem(t, "nll_base"), rows, TOK_ATOL, TOK_RTOL);
    check_array(kld, cJSON_GetObjectItem(t, "kld"), rows, TOK_ATOL, TOK_RTOL);
    check_array(top, cJSON_GetObjectItem(t, "top"), rows, 0.0, 0.0);
    KVCAL_ASSERT_CLOSE(c.ln_ratio, num(t, "ln_ratio"), SUM_ATOL, SUM_RTOL);
    KVCAL_ASSERT_CLOSE(c.ln_ratio_se, num(t, "ln_ratio_se"), SUM_ATOL, SUM_RTOL);
    KVCAL_ASSERT_CLOSE(c.ln_ratio_se_window, num(t, "ln_ratio_se_window"), SUM_ATOL,
                       SUM_RTOL);
    KVCAL_ASSERT_CLOSE(c.kld_mean, num(t, "kld_mean"), SUM_ATOL, SUM_RTOL);
    KVCAL_ASSERT_CLOSE(c.kld_se, num(t, "kld_se"), SUM_ATOL, SUM_RTOL);
    KVCAL_ASSERT_CLOSE(c.kld_median, num(t, "kld_median"), SUM_ATOL, SUM_RTOL);
    KVCAL_ASSERT_CLOSE(c.kld_p99, num(t, "kld_p99"), SUM_ATOL, SUM_RTOL);
    KVCAL_ASSERT_CLOSE(c.kld_max, num(t, "kld_max"), SUM_ATOL, SUM_RTOL);
    KVCAL_ASSERT_CLOSE(c.top1, num(t, "top1"), 1e-12, 0.0);
    /* the perturbation moves the distributions: a test that could pass on
     * zeros would not be one */
    CU_ASSERT(c.kld_mean > 1e-4 && c.top1 < 1.0 && c.top1 > 0.5);
    cJSON_Delete(t);
    free(base);
    free(run);
    free(ref);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(eval_metrics_match_torch_float64),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(eval_torch, KVCAL_NEEDS_PYTHON_TORCH, tests)
