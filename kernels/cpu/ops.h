/* kernels/cpu/ops.h: fp32 CPU reference of every op of the model runner.
 * Pointers, sizes and strides only: no files, no model knowledge. These are
 * the oracles of the CUDA kernels (same stem, _kernel / _launch there).
 * Row-major everywhere; shapes in the comments. Threaded where it pays. */
#ifndef KVCAL_KERNELS_CPU_OPS_H
#define KVCAL_KERNELS_CPU_OPS_H

#include <stdint.h>

#include "kernels/kv_observer.h"

/* out (rows, dim) = x * rsqrt(mean(x^2) + eps) * w ; x (rows, dim), w (dim) */
void kvcal_rmsnorm_ref(float *out, const float *x, const float *w, int rows, int dim,
                       float eps);

/* out (rows, n) = x (rows, k) @ w^T + bias ; w (n, k) as checkpoints store
 * nn.Linear weights; bias (n) or NULL. Threaded over the machine's cores. */
void kvcal_matmul_ref(float *out, const float *x, const float *w, const float *bias,
                      int rows, int k, int n);

/* In place: rotates x (tokens, heads, head_dim) by position pos[t] with
 * inv_freq (rot_dim/2); only the first rot_dim channels rotate.
 * interleaved = 1 pairs (2i, 2i+1) (llama2.c / GPT-J); 0 pairs (i, i+rot_dim/2)
 * (Hugging Face rotate_half). */
void kvcal_rope_ref(float *x, const int32_t *pos, const float *inv_freq, int tokens,
                    int heads, int head_dim, int rot_dim, int interleaved);

/* kvcal_rope_ref with cos and sin multiplied by attention_factor (YaRN's
 * attention scaling, as transformers applies it to the cos/sin tables), so
 * the rotated channels come out scaled by it and the others untouched. */
void kvcal_rope_scaled_ref(float *x, const int32_t *pos, const float *inv_freq,
                           int tokens, int heads, int head_dim, int rot_dim,
                           int interleaved, float attention_factor);

/* The host counterpart of kernels/cuda/ops.h's kvcal_rope_cfg. */
typedef struct kvcal_rope_ref_cfg {
    const float *inv_freq; /* (rot_dim / 2) */
    int rot_dim;           /* even, 0 .. head_dim: channels that rotate */
    int interleaved;       /* 1: pairs (2i, 2i+1); 0: (i, i + rot_dim/2) */
    const float *q_norm_w; /* (head_dim) per-head RMSNorm of q before RoPE, or NULL */
    const float *k_norm_w; /* (head_dim) the same for k, or NULL */
    float norm_eps;
    float attention_factor; /* multiplies cos and sin (yarn), 1 otherwise */
} kvcal_rope_ref_cfg;

/* The reference of kvcal_rope_observe_launch, in place on qkv (tokens,
 * token_stride) holding q (n_heads, head_dim) at column 0, k (n_kv_heads,
 * head_dim) after it and v (n_kv_heads, head_dim) after k: per token with
 * pos >= 0, the per-head RMSNorm of q and of k where rope gives its weight
 * (kvcal_rmsnorm_ref), then kvcal_rope_scaled_ref of q and k at pos, then,
 * when obs is non-NULL, K (as rotated) and V folded into obs (host memory,
 * kernels/kv_observer.h: absmax and batch_absmax by max, a NaN winning,
 * hist by adding, binned by kvcal_hist_bin), and Q (as rotated) into
 * obs->q_absmax per query head where it is set. Tokens with pos < 0 are
 * padding: untouched and not observed. n_heads may be 0 (rows of k and v
 * alone). rot_dim 0 with no norm weights leaves qkv as it is and only
 * observes: the fold of what a kernel stored. */
void kvcal_rope_observe_ref(float *qkv, int64_t token_stride, const int32_t *pos,
                            int tokens, int n_heads, int n_kv_heads, int head_dim,
                            const kvcal_rope_ref_cfg *rope, const kvcal_kv_observer *obs);

/* Causal attention of one sequence of `tokens` tokens:
 * out (tokens, n_heads, head_dim) = softmax(q k^T * scale + causal mask) v,
 * q (tokens, n_heads, head_dim), k and v (tokens, n_kv_heads, head_dim);
 * query head h reads kv head h / (n_heads / n_kv_heads). */
void kvcal_attention_ref(float *out, const float *q, const float *k, const float *v,
                         int tokens, int n_heads, int n_kv_heads, int head_dim,
                         float scale);

/* kvcal_attention_ref with a sliding window: query t reads keys t - window
 * + 1 .. t (transformers' sliding-window mask, q - k < window; flash
 * attention's window (window - 1, 0)); window 0: every key up to t; softcap
 * > 0: each scaled score s becomes softcap * tanh(s / softcap) (Gemma 2). */
void kvcal_attention_window_ref(float *out, const float *q, const float *k,
                                const float *v, int tokens, int n_heads, int n_kv_heads,
                                int head_dim, float scale, int window, float softcap);

/* Softmax top-k routing of a mixture of experts: per token, the softmax of
 * logits (tokens, num_experts) over every expert, the top_k largest
 * probabilities (the lower expert index first on a tie) into experts
 * (tokens, top_k) and their probabilities into weights (tokens, top_k),
 * renormalized to sum 1 when renormalize (norm_topk_prob). */
void kvcal_moe_route_ref(int32_t *experts, float *weights, const float *logits,
                         int64_t tokens, int num_experts, int top_k, int renormalize);

/* Sigmoid top-k routing (DeepSeek-V3 / GLM-4.5 with one group): scores
 * sigmoid(logits) (tokens, num_experts), the top_k of scores + bias (num_experts,
 * or NULL) into experts (the lower expert first on a tie), their scores
 * (without the bias) into weights, renormalized to sum 1 (+1e-20) when
 * renormalize, then times scale. */
void kvcal_moe_route_sigmoid_ref(int32_t *experts, float *weights, const float *logits,
                                 const float *bias, int64_t tokens, int num_experts,
                                 int top_k, int renormalize, float scale);

/* 1 / (1 + exp(-x)) */
float kvcal_sigmoid_ref(float x);

/* out (n, dim) = table[ids[i]] (vocab, dim) per row; ids[i] < 0 (padding)
 * gives a zero row. Ids are not range-checked (the caller's are). The
 * reference of kvcal_embed_launch. */
void kvcal_embed_ref(float *out, const float *table, const int32_t *ids, int64_t n,
                     int dim);

/* out (n) = silu(gate) * up */
void kvcal_swiglu_ref(float *out, const float *gate, const float *up, int64_t n);

/* out (n) = gelu_tanh(gate) * up, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2 / pi)
 * (g + 0.044715 g^3))) (transformers' gelu_pytorch_tanh) */
void kvcal_geglu_ref(float *out, const float *gate, const float *up, int64_t n);

/* x (n) += y (n) */
void kvcal_add_ref(float *x, const float *y, int64_t n);

/* Threads the threaded ops use: n > 0 fixes the count, 0 restores the
 * default (the machine's online cores). Results do not depend on it. Not
 * thread-safe against ops running at the same time. */
void kvcal_cpu_set_threads(int n);
int kvcal_cpu_threads(void);

#endif
