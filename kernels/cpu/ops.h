/* kernels/cpu/ops.h: fp32 CPU reference of every op of the model runner.
 * Pointers, sizes and strides only: no files, no model knowledge. These are
 * the oracles of the CUDA kernels (same stem, _kernel / _launch there).
 * Row-major everywhere; shapes in the comments. Threaded where it pays. */
#ifndef KVCAL_KERNELS_CPU_OPS_H
#define KVCAL_KERNELS_CPU_OPS_H

#include <stdint.h>

#include "kernels/kv_observer.h"

/* out (rows, dim) = x * rsqrt(mean(x^2) + eps) * w ; x (rows, dim), w (dim),
 * or NULL: no weight (Llama 4's q/k norm) */
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

/* In place: each row t of x (rows, cols) times 1 + scale ln(1 + floor((pos[t]
 * + 1) / floor_scale)) (Llama 4's attention temperature tuning of the
 * queries of its layers without RoPE). */
void kvcal_query_temperature_ref(float *x, const int32_t *pos, int64_t rows, int cols,
                                 float scale, float floor_scale);

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

/* kvcal_attention_window_ref with attention sinks: sinks (n_heads) or NULL,
 * query head h's logit added to its softmax's denominator (gpt-oss: the
 * weights of the keys sum to less than 1, the sink's share going to no
 * value). A sink is not scaled nor capped. */
void kvcal_attention_sinks_ref(float *out, const float *q, const float *k, const float *v,
                               int tokens, int n_heads, int n_kv_heads, int head_dim,
                               float scale, int window, float softcap,
                               const float *sinks);

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

/* Grouped top-k routing (DeepSeek-V2/V3, GLM-4.5), the general form of the
 * two above: the choice values are the logits (softmax scoring: the same
 * order as the probabilities) or sigmoid(logits) + bias; the experts lie
 * in `groups` groups of num_experts / groups, each scored by its best
 * expert's score (group_max: softmax's probability, transformers'
 * group_limited_greedy) or by the sum of its two best choice values
 * (noaux_tc), and only the topk_groups best groups (the lower group first
 * on a tie) are open to the top-k. Weights: the softmax's probability or
 * the sigmoid (without the bias), renormalized (sigmoid: + 1e-20) when
 * renormalize, then times scale. groups 1: the two above, bit for bit
 * (with scale 1 for a softmax). */
typedef struct kvcal_moe_route_cfg {
    int num_experts, top_k;
    int sigmoid;       /* 0: softmax scoring */
    const float *bias; /* (num_experts) the choice bias, added to the sigmoid or
                          softmax scores the top-k is chosen by, or NULL */
    int groups, topk_groups, group_max;
    int renormalize;
    float scale;
} kvcal_moe_route_cfg;

void kvcal_moe_route_grouped_ref(int32_t *experts, float *weights, const float *logits,
                                 int64_t tokens, const kvcal_moe_route_cfg *cfg);

/* --- multi-head latent attention (DeepSeek-V2/V3) ------------------------- */

/* The MLA cache point, in place (the reference of kvcal_mla_latent_launch):
 * per token t with pos[t] >= 0, entry (tokens, entry_stride) row t holding
 * the latent (kv_lora_rank) then the RoPE part (rope_dim): the latent
 * through kvcal_rmsnorm_ref with norm_w, the RoPE part and, when q is
 * non-NULL, the last rope_dim channels of each of q's n_heads heads (q
 * (tokens, q_stride), head h at h * qk_dim) rotated at pos[t] in
 * interleaved pairs with cos and sin times attention_factor
 * (kvcal_rope_scaled_ref); then, when obs is non-NULL, the entry (one head
 * of kv_lora_rank + rope_dim) folded into obs's K and V alike. Tokens with
 * pos < 0 are padding: untouched, not observed. */
void kvcal_mla_latent_ref(float *entry, int64_t entry_stride, float *q, int64_t q_stride,
                          const int32_t *pos, int tokens, int n_heads, int qk_dim,
                          int kv_lora_rank, int rope_dim, const float *norm_w, float eps,
                          const float *inv_freq, float attention_factor,
                          const kvcal_kv_observer *obs);

/* The attention's K and V of every head from the expanded latent (the
 * reference of kvcal_mla_expand_launch, and its K's RoPE part that of
 * kvcal_mla_expand_rope_launch): kvb (tokens, n_heads, nope +
 * v_dim) the latent through kv_b_proj, entry (tokens, entry_stride) whose
 * channels kv_lora_rank .. + rope_dim are the RoPE part: k (tokens,
 * n_heads, nope + rope_dim) = [kvb's first nope channels, the RoPE part],
 * v (tokens, n_heads, v_stride) = [kvb's last v_dim channels, zeros up to
 * v_stride] (v_stride >= v_dim: a V padded to the q/k head size runs on the
 * attention kernels of one head size). */
void kvcal_mla_expand_ref(float *k, float *v, int v_stride, const float *kvb,
                          const float *entry, int64_t entry_stride, int tokens,
                          int n_heads, int nope, int v_dim, int kv_lora_rank,
                          int rope_dim);

/* vLLM's fp8_ds_mla cache of the entry and back (the reference of
 * kvcal_mla_ds_roundtrip_launch): per row of x (rows, x_stride), the
 * latent (kv_lora_rank) in tiles of 128 channels (the last one shorter
 * when kv_lora_rank is not a multiple of 128), each under its own scale
 * max(absmax / 448, FLT_MIN) as e4m3 of x / scale (core/fp8.h) times the
 * scale, and the RoPE part (rope_dim) rounded to bf16 (to nearest even),
 * into out (rows, out_stride). */
void kvcal_mla_ds_roundtrip_ref(float *out, int64_t out_stride, const float *x,
                                int64_t x_stride, int64_t rows, int kv_lora_rank,
                                int rope_dim);

/* kvcal_attention_window_ref with v of its own head size (v_dim; q and k
 * of qk_dim): out (tokens, n_heads, v_dim). MLA's decompressed heads. */
void kvcal_attention_vdim_ref(float *out, const float *q, const float *k, const float *v,
                              int tokens, int n_heads, int n_kv_heads, int qk_dim,
                              int v_dim, float scale, int window, float softcap);

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

/* out (n) = (up' + 1) * g * sigmoid(alpha * g), g = min(gate, limit), up'
 * = up clamped to [-limit, limit]: gpt-oss's experts (transformers'
 * GptOssExperts, alpha 1.702, limit 7) */
void kvcal_swiglu_oai_ref(float *out, const float *gate, const float *up, int64_t n,
                          float alpha, float limit);

/* x (n) += y (n) */
void kvcal_add_ref(float *x, const float *y, int64_t n);

/* Threads the threaded ops use: n > 0 fixes the count, 0 restores the
 * default (the machine's online cores). Results do not depend on it. Not
 * thread-safe against ops running at the same time. */
void kvcal_cpu_set_threads(int n);
int kvcal_cpu_threads(void);

#endif
