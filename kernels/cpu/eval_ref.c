/* kernels/cpu/eval_ref.c: the reductions of `kvcal eval` on the CPU. */
#include "kernels/cpu/eval_ref.h"

#include <math.h>
#include <string.h>

#include "core/fp8.h"

void kvcal_token_nll_ref(float *nll, const float *logits, const int32_t *target,
                         int64_t rows, int vocab)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *z = logits + r * vocab;
        if (target[r] < 0) {
            nll[r] = 0.0f;
            continue;
        }
        double m = z[0], sum = 0.0;
        for (int i = 1; i < vocab; i++)
            m = z[i] > m ? z[i] : m;
        for (int i = 0; i < vocab; i++)
            sum += exp((double)z[i] - m);
        nll[r] = (float)(m + log(sum) - z[target[r]]);
    }
}

/* The first index of the largest of z (n >= 1). */
static int first_max(const float *z, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        best = z[i] > z[best] ? i : best;
    return best;
}

static double log_sum_exp(const float *z, int n)
{
    const double m = z[first_max(z, n)];
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp((double)z[i] - m);
    return m + log(sum);
}

void kvcal_token_keep_ref(float *ref, float *ref_lse, const float *logits,
                          const int64_t *keep, int64_t rows, int vocab)
{
    for (int64_t r = 0; r < rows; r++) {
        if (keep[r] < 0)
            continue;
        const float *z = logits + r * vocab;
        memcpy(ref + keep[r] * vocab, z, (size_t)vocab * sizeof *z);
        ref_lse[keep[r]] = (float)log_sum_exp(z, vocab);
    }
}

void kvcal_token_kld_ref(float *kld, float *top, const float *logits, const float *ref,
                         const float *ref_lse, const int64_t *keep, int64_t rows,
                         int vocab)
{
    for (int64_t r = 0; r < rows; r++) {
        kld[r] = top[r] = 0.0f;
        if (keep[r] < 0)
            continue;
        const float *z = logits + r * vocab, *b = ref + keep[r] * vocab;
        /* both logsumexps rounded to float alike: equal rows give 0 exactly */
        const double lse = (float)log_sum_exp(z, vocab), lse_b = ref_lse[keep[r]];
        double sum = 0.0;
        for (int i = 0; i < vocab; i++) {
            const double lp = (double)b[i] - lse_b;
            sum += exp(lp) * (lp - ((double)z[i] - lse));
        }
        kld[r] = (float)sum;
        top[r] = first_max(z, vocab) == first_max(b, vocab) ? 1.0f : 0.0f;
    }
}

void kvcal_error_sums_ref(kvcal_error_sums *s, const float *x, int64_t x_stride,
                          const float *y, int64_t y_stride, const float *scale, int group,
                          const int32_t *pos, int64_t rows, int cols)
{
    const int groups = scale ? cols / group : 0;
    for (int64_t r = 0; r < rows; r++) {
        if (pos && pos[r] < 0)
            continue;
        const float *xr = x + r * x_stride, *yr = y + r * y_stride;
        for (int c = 0; c < cols; c++) {
            const double e = (double)yr[c] - xr[c];
            s->x2 += (double)xr[c] * xr[c];
            s->e2 += e * e;
            if (scale)
                s->clipped +=
                    kvcal_value_clips(fabsf(xr[c]), scale[r * groups + c / group]);
        }
        s->n += (unsigned long long)cols;
    }
}

void kvcal_fp8_roundtrip_ref(float *x, int64_t stride, int64_t rows, int cols,
                             float scale)
{
    const float inv = 1.0f / scale;
    for (int64_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float *v = &x[r * stride + c];
            *v = kvcal_fp8_e4m3_to_float(kvcal_fp8_e4m3_from_float(*v * inv)) * scale;
        }
}
