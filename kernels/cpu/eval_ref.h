/* kernels/cpu/eval_ref.h: the reductions of `kvcal eval` on the CPU: the
 * next-token negative log-likelihood of logits rows, the baseline's
 * next-token distributions kept and a run's compared with them (KL
 * divergence, top-1 agreement), and the error sums of a tensor against its
 * approximation (SQNR, clipped values, relative error). Pointers, sizes and strides only.
 * These are the oracles of kernels/cuda/eval.h (same stems, _launch there). */
#ifndef KVCAL_KERNELS_CPU_EVAL_REF_H
#define KVCAL_KERNELS_CPU_EVAL_REF_H

#include <stdint.h>

#include "core/scale_rule.h"

/* Sums over the values of x compared with an approximation y. The same
 * layout on the host and on the device (the CUDA reduction adds into it). */
typedef struct kvcal_error_sums {
    double x2;                  /* sum x^2 */
    double e2;                  /* sum (y - x)^2 */
    unsigned long long clipped; /* values that clip: kvcal_value_clips(|x|, scale) */
    unsigned long long n;       /* values seen */
} kvcal_error_sums;

/* nll (rows) = logsumexp(logits[r]) - logits[r][target[r]] in double, with
 * logits (rows, vocab), vocab >= 1; a row whose target is < 0 gets 0.
 * Targets are not range-checked beyond that: the caller's ids are. */
void kvcal_token_nll_ref(float *nll, const float *logits, const int32_t *target,
                         int64_t rows, int vocab);

/* Keeps the distribution of each row r whose keep[r] >= 0 (keep (rows)):
 * ref row keep[r] (ref (kept rows, vocab)) = logits[r], ref_lse[keep[r]] =
 * logsumexp(logits[r]) (in double). Rows with keep[r] < 0 are skipped. */
void kvcal_token_keep_ref(float *ref, float *ref_lse, const float *logits,
                          const int64_t *keep, int64_t rows, int vocab);

/* Compares each row r whose keep[r] >= 0 with the distribution kept at row
 * keep[r] (kvcal_token_keep_ref): kld[r] = sum_i p_i (log p_i - log q_i)
 * with p = softmax(ref[keep[r]]) (log p_i = ref - ref_lse), q =
 * softmax(logits[r]) (its logsumexp rounded to float as the kept one is,
 * so that equal rows give exactly 0), in double over the whole vocabulary (no cut-off:
 * llama-perplexity's skips p_i < e^-16, an artefact of its 16-bit file);
 * top[r] = 1 when the first largest logit of both rows is the same token,
 * else 0. Rows with keep[r] < 0 get kld 0 and top 0. */
void kvcal_token_kld_ref(float *kld, float *top, const float *logits, const float *ref,
                         const float *ref_lse, const int64_t *keep, int64_t rows,
                         int vocab);

/* Adds to *s the rows of x (rows, cols; row stride x_stride) against y
 * (rows, cols; row stride y_stride): x2, e2 and n over every value of a
 * row whose pos is >= 0 (pos (rows), or NULL: every row). When scale is
 * non-NULL, (rows, cols / group) contiguous, value c of row r is counted as
 * clipped when kvcal_value_clips(|x|, scale[r * (cols / group) + c / group])
 * (core/scale_rule.h: |x| * (1 / scale) > 464); group divides cols. */
void kvcal_error_sums_ref(kvcal_error_sums *s, const float *x, int64_t x_stride,
                          const float *y, int64_t y_stride, const float *scale, int group,
                          const int32_t *pos, int64_t rows, int cols);

/* x (rows, cols; row stride stride) through e4m3 under scale and back, in
 * place: x = e4m3_value(e4m3(x * (1 / scale))) * scale (core/fp8.h). What
 * attention computes with its query quantized to FP8 by a static scale, as
 * FlashAttention 3 does with an fp8 cache. */
void kvcal_fp8_roundtrip_ref(float *x, int64_t stride, int64_t rows, int cols,
                             float scale);

#endif
