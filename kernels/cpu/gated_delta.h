/* kernels/cpu/gated_delta.h: the linear attention of Qwen3-Next's and
 * Qwen3.5's linear-attention layers (a gated delta-net), fp32 references
 * of one sample's tokens, in transformers' recurrent form
 * (torch_recurrent_gated_delta_rule, the chunked form's equal). */
#ifndef KVCAL_KERNELS_CPU_GATED_DELTA_H
#define KVCAL_KERNELS_CPU_GATED_DELTA_H

#include <stdint.h>

/* The sizes of a gated delta-net: nk key heads of dk (q and k), nv value
 * heads of dv (v, z and the output; nk divides nv, key head h serving
 * value heads h * nv / nk .. (h + 1) * nv / nk - 1), a convolution of
 * kernel taps, the gated norm's eps. */
typedef struct kvcal_gated_delta_dims {
    int nk, dk, nv, dv, kernel;
    float eps;
} kvcal_gated_delta_dims;

/* The weights: conv (2 nk dk + nv dv, kernel) the depthwise causal
 * convolution of [q; k; v], a_log and dt_bias (nv), norm (dv) the gated
 * RMSNorm's weight. */
typedef struct kvcal_gated_delta_weights {
    const float *conv, *a_log, *dt_bias, *norm;
} kvcal_gated_delta_weights;

/* out (T, nv dv) = the gated delta-net of one sample's T tokens from a zero
 * state: qkvz (T, 2 nk dk + 2 nv dv) the rows [q; k; v; z] of each token,
 * ba (T, 2 nv) [b; a]. q, k, v through the convolution (the taps before the
 * first token zero) and SiLU; q and k L2-normalized (eps 1e-6), q times
 * dk^-0.5; beta = sigmoid(b), g = -exp(a_log) softplus(a + dt_bias); per
 * value head the state S (dk x dv) decays by exp(g), then S += k (beta (v -
 * S^T k))^T and o = S^T q; out = rmsnorm(o) * norm * silu(z). scratch:
 * kvcal_gated_delta_scratch(dims, T) floats. */
void kvcal_gated_delta_ref(float *out, const float *qkvz, const float *ba, int64_t T,
                           const kvcal_gated_delta_dims *dims,
                           const kvcal_gated_delta_weights *w, float *scratch);

/* Floats of kvcal_gated_delta_ref's scratch for T tokens. */
int64_t kvcal_gated_delta_scratch(const kvcal_gated_delta_dims *dims, int64_t T);

/* x[i] *= sigmoid(gate[i]), i < n: a gated attention's output. */
void kvcal_sigmoid_gate_ref(float *x, const float *gate, int64_t n);

#endif
