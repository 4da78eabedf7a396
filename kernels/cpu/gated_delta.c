/* kernels/cpu/gated_delta.c: the gated delta-net references (see
 * gated_delta.h). */
#include "kernels/cpu/gated_delta.h"

#include <math.h>
#include <string.h>

static float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

static float siluf(float x)
{
    return x * sigmoidf(x);
}

/* torch's softplus (beta 1, threshold 20: x itself above it) */
static float softplusf(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

int64_t kvcal_gated_delta_scratch(const kvcal_gated_delta_dims *d, int64_t T)
{
    const int64_t C = 2LL * d->nk * d->dk + (int64_t)d->nv * d->dv;
    return T * C + (int64_t)d->dk * d->dv + d->dv;
}

/* x (n) / sqrt(sum x^2 + eps) in place (FLA's l2norm, as transformers') */
static void l2norm(float *x, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += x[i] * x[i];
    const float inv = 1.0f / sqrtf(s + 1e-6f);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void kvcal_gated_delta_ref(float *out, const float *qkvz, const float *ba, int64_t T,
                           const kvcal_gated_delta_dims *d,
                           const kvcal_gated_delta_weights *w, float *scratch)
{
    const int nk = d->nk, dk = d->dk, nv = d->nv, dv = d->dv, K = d->kernel;
    const int64_t KD = (int64_t)nk * dk, VD = (int64_t)nv * dv, C = 2 * KD + VD;
    const int64_t row = C + VD; /* a token's qkvz */
    float *mixed = scratch, *S = scratch + T * C, *o = S + (int64_t)dk * dv;
    /* the causal depthwise convolution and SiLU of [q; k; v] */
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) {
                const int64_t src = t - (K - 1) + j;
                if (src >= 0)
                    acc += w->conv[c * K + j] * qkvz[src * row + c];
            }
            mixed[t * C + c] = siluf(acc);
        }
    for (int64_t t = 0; t < T; t++) {
        float *m = mixed + t * C;
        for (int h = 0; h < nk; h++) {
            l2norm(m + (int64_t)h * dk, dk);
            l2norm(m + KD + (int64_t)h * dk, dk);
        }
        const float qs = 1.0f / sqrtf((float)dk);
        for (int64_t i = 0; i < KD; i++)
            m[i] *= qs;
    }
    const int per_k = nv / nk;
    for (int h = 0; h < nv; h++) {
        const int hk = h / per_k;
        const float A = expf(w->a_log[h]);
        memset(S, 0, sizeof(float) * (size_t)dk * dv);
        for (int64_t t = 0; t < T; t++) {
            const float *m = mixed + t * C;
            const float *q = m + (int64_t)hk * dk, *k = m + KD + (int64_t)hk * dk;
            const float *v = m + 2 * KD + (int64_t)h * dv;
            const float beta = sigmoidf(ba[t * 2 * nv + h]);
            const float g = -A * softplusf(ba[t * 2 * nv + nv + h] + w->dt_bias[h]);
            const float decay = expf(g);
            for (int64_t i = 0; i < (int64_t)dk * dv; i++)
                S[i] *= decay;
            /* kv_mem = S^T k, then S += k delta^T with delta = beta (v - kv_mem) */
            for (int j = 0; j < dv; j++) {
                float mem = 0.0f;
                for (int i = 0; i < dk; i++)
                    mem += S[(int64_t)i * dv + j] * k[i];
                o[j] = (v[j] - mem) * beta;
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++)
                    S[(int64_t)i * dv + j] += k[i] * o[j];
            float *y = out + t * VD + (int64_t)h * dv;
            for (int j = 0; j < dv; j++) {
                float acc = 0.0f;
                for (int i = 0; i < dk; i++)
                    acc += S[(int64_t)i * dv + j] * q[i];
                y[j] = acc;
            }
            /* the gated RMSNorm: rmsnorm(y) * norm * silu(z) */
            const float *z = qkvz + t * row + C + (int64_t)h * dv;
            float ss = 0.0f;
            for (int j = 0; j < dv; j++)
                ss += y[j] * y[j];
            const float inv = 1.0f / sqrtf(ss / (float)dv + d->eps);
            for (int j = 0; j < dv; j++)
                y[j] = y[j] * inv * w->norm[j] * siluf(z[j]);
        }
    }
}

void kvcal_sigmoid_gate_ref(float *x, const float *gate, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= sigmoidf(gate[i]);
}
