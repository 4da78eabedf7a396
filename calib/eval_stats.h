/* calib/eval_stats.h: what `kvcal eval` concludes from per-token results:
 * a run against the baseline on the same tokens, with the definitions of
 * llama.cpp's `llama-perplexity --kl-divergence` (tools/perplexity) and a
 * confidence interval that respects the windows the tokens came in. Pure
 * C, no I/O.
 *
 * Per token t: d_t = nll_t - nll_base_t (paired), kld_t, top_t (0 or 1).
 * - ln_ratio = mean d = ln(PPL / PPL_base); ln_ratio_se the standard error
 *   of that mean over tokens, sqrt(sum (d - mean)^2 / (N (N - 1))), which is
 *   llama-perplexity's sqrt(se^2 + se_base^2 - 2 cov) written the other way.
 * - Tokens of one window (sample) are not independent; ln_ratio_se_window
 *   treats the W windows as the independent draws (the variance of a ratio
 *   of sums: W / (W - 1) sum_w (D_w - n_w ln_ratio)^2 / N^2, D_w and n_w the
 *   window's sum of d and token count); with W >= 2 the 95% interval is
 *   ln_ratio +- t(0.975, W - 1) ln_ratio_se_window, else +- 1.96
 *   ln_ratio_se.
 * - no_interval: 1 when the interval cannot be computed (one token, so no
 *   spread): ci_lo and ci_hi are NAN and within_noise is 0, which then says
 *   nothing: a caller reports the interval and the verdict as not available.
 * - within_noise: the interval holds 0. tokens_to_resolve: the tokens at
 *   which the interval's half width h would equal |ln_ratio| if the mean,
 *   the spread and the quantile stayed as measured, N (h / ln_ratio)^2
 *   (NAN when ln_ratio is 0): more than N exactly when within noise (a
 *   little conservative: more windows lower t).
 * - kld_mean +- kld_se (standard error of the mean), the median, 99th
 *   percentile and maximum of kld_t (percentiles interpolated between the
 *   sorted values at fraction x (N - 1), as llama-perplexity's); top1 the
 *   fraction of top_t = 1, top1_se = sqrt(top1 (1 - top1) / (N - 1)). */
#ifndef KVCAL_CALIB_EVAL_STATS_H
#define KVCAL_CALIB_EVAL_STATS_H

#include <stdint.h>

typedef struct kvcal_eval_compare {
    int64_t tokens;
    int windows;                /* windows with at least one token */
    double ln_ppl, ln_ppl_base; /* mean nll, mean nll_base */
    double ln_ratio, ln_ratio_se, ln_ratio_se_window; /* NAN below 2 tokens / windows */
    double ci_lo, ci_hi;                              /* 95% interval of ln_ratio */
    int ci_from_windows; /* 1: the interval is the windows' (t), 0: the tokens' */
    int no_interval;     /* 1: below 2 tokens, no interval (ci_lo, ci_hi NAN) */
    int within_noise;    /* 0 when no_interval */
    double tokens_to_resolve;
    double kld_mean, kld_se, kld_median, kld_p99, kld_max;
    double top1, top1_se;
} kvcal_eval_compare;

/* Fills *c from nll, nll_base, kld and top (tokens, in window order:
 * window w holds lengths[w] - 1 tokens, none when lengths[w] < 2; windows
 * `num_windows`); scratch (tokens) floats for sorting. tokens >= 1. */
void kvcal_eval_compare_tokens(kvcal_eval_compare *c, const float *nll,
                               const float *nll_base, const float *kld, const float *top,
                               const int32_t *lengths, int num_windows, float *scratch);

/* t(0.975, df): the two-sided 95% quantile of Student's t with df >= 1
 * degrees of freedom (a table to 30, then the Cornish-Fisher expansion,
 * within 1e-3 of the exact value). */
double kvcal_student_t975(int df);

/* The value at fraction f in [0, 1] of sorted (n >= 1): interpolated
 * between sorted[floor(f (n - 1))] and the next. */
double kvcal_sorted_percentile(const float *sorted, int64_t n, double f);

#endif
