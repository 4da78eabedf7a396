/* calib/eval_stats.c: a run against the baseline from per-token results
 * (see eval_stats.h). */
#include "calib/eval_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define Z975 1.959963984540054

double kvcal_student_t975(int df)
{
    static const double table[30] = {
        12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
        2.2010,  2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
        2.0796,  2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423};
    if (df < 1)
        return NAN;
    if (df <= 30)
        return table[df - 1];
    const double z = Z975, z3 = z * z * z, z5 = z3 * z * z, n = df;
    return z + (z3 + z) / (4.0 * n) + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * n * n);
}

double kvcal_sorted_percentile(const float *sorted, int64_t n, double f)
{
    if (f <= 0.0 || n == 1)
        return sorted[0];
    if (f >= 1.0)
        return sorted[n - 1];
    const double p = f * (double)(n - 1);
    const int64_t i = (int64_t)p;
    const double w = p - (double)i;
    return (1.0 - w) * sorted[i] + w * sorted[i + 1 < n ? i + 1 : n - 1];
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Mean and standard error of the mean of x (n). */
static void mean_se(const float *x, int64_t n, double *mean, double *se)
{
    double s = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++)
        s2 += ((double)x[i] - *mean) * ((double)x[i] - *mean);
    *se = n > 1 ? sqrt(s2 / ((double)n * (double)(n - 1))) : NAN;
}

void kvcal_eval_compare_tokens(kvcal_eval_compare *c, const float *nll,
                               const float *nll_base, const float *kld, const float *top,
                               const int32_t *lengths, int num_windows, float *scratch)
{
    memset(c, 0, sizeof *c);
    int64_t n = 0;
    for (int w = 0; w < num_windows; w++)
        if (lengths[w] > 1) {
            n += lengths[w] - 1;
            c->windows++;
        }
    c->tokens = n;
    double s = 0.0, sb = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s += nll[i], sb += nll_base[i];
        scratch[i] = nll[i] - nll_base[i];
    }
    c->ln_ppl = s / (double)n, c->ln_ppl_base = sb / (double)n;
    mean_se(scratch, n, &c->ln_ratio, &c->ln_ratio_se);
    /* the windows as the draws: sum over windows of (D_w - n_w mean)^2 */
    double v = 0.0;
    int64_t i = 0;
    for (int w = 0; w < num_windows; w++) {
        double d = 0.0;
        const int64_t nw = lengths[w] > 1 ? lengths[w] - 1 : 0;
        for (int64_t j = 0; j < nw; j++, i++)
            d += scratch[i];
        if (nw)
            v += (d - (double)nw * c->ln_ratio) * (d - (double)nw * c->ln_ratio);
    }
    const int W = c->windows;
    c->ln_ratio_se_window = W > 1 ? sqrt(v * W / (W - 1.0)) / (double)n : NAN;
    c->ci_from_windows = W > 1;
    const double se = W > 1 ? c->ln_ratio_se_window : c->ln_ratio_se;
    const double q = W > 1 ? kvcal_student_t975(W - 1) : Z975, half = q * se;
    c->ci_lo = c->ln_ratio - half, c->ci_hi = c->ln_ratio + half;
    c->no_interval = !isfinite(c->ci_lo) || !isfinite(c->ci_hi);
    if (c->no_interval)
        c->ci_lo = c->ci_hi = NAN;
    c->within_noise = !c->no_interval && c->ci_lo <= 0.0 && c->ci_hi >= 0.0;
    c->tokens_to_resolve = c->ln_ratio != 0.0 && isfinite(se)
                               ? (double)n * (half / c->ln_ratio) * (half / c->ln_ratio)
                               : NAN;
    mean_se(kld, n, &c->kld_mean, &c->kld_se);
    memcpy(scratch, kld, (size_t)n * sizeof *scratch);
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_float);
    c->kld_median = kvcal_sorted_percentile(scratch, n, 0.5);
    c->kld_p99 = kvcal_sorted_percentile(scratch, n, 0.99);
    c->kld_max = scratch[n - 1];
    double same = 0.0;
    for (int64_t k = 0; k < n; k++)
        same += top[k];
    c->top1 = same / (double)n;
    c->top1_se = n > 1 ? sqrt(c->top1 * (1.0 - c->top1) / (double)(n - 1)) : NAN;
}
