/* calib/model_desc.h: what a model is, as data: its sizes, RoPE and
 * family (kvcal_model_desc), and the questions a description answers
 * alone: the size a dimension stands for, where a family's weights exist,
 * a layer's ops, a tensor's checkpoint name; and where a tensor's values lie
 * in a mapped checkpoint (kvcal_tensor_view). calib/model.h opens models;
 * calib/model_fp8.h reads their FP8 weights. */
#ifndef KVCAL_CALIB_MODEL_DESC_H
#define KVCAL_CALIB_MODEL_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "calib/arch.h"
#include "core/fp8_linear.h"
#include "core/scales.h"
#include "kvcal.h"

struct kvcal_model_desc {
    const kvcal_arch *arch;            /* the family that runs it */
    char architecture[KVCAL_NAME_MAX]; /* "LlamaForCausalLM" */
    char model_type[KVCAL_NAME_MAX];   /* "llama" */
    char source[16];                   /* "hf" or "llama2c" */
    char weight_dtype[16];             /* "F32", "BF16", "F16" (of the projections) */
    /* where the checkpoint keeps the language model: the prefix that
     * replaces the families' "model." ("model.", or a multimodal model's
     * "model.language_model." / "language_model.model."), and the one
     * before their "lm_head." ("" or "language_model.") */
    char lm_prefix[32];
    char head_prefix[24];
    int num_layers;
    int hidden_size;
    int intermediate_size;
    int num_heads;
    int num_kv_heads;
    int head_dim;
    int vocab_size;
    int max_seq_len; /* max_position_embeddings (llama2.c: seq_len) */
    float norm_eps;
    int rot_dim;                   /* channels of each head that RoPE rotates (even) */
    int rope_interleaved;          /* 1: pairs (2i, 2i+1); 0: (i, i + rot_dim/2) */
    const float *inv_freq;         /* (rot_dim / 2), scaling already applied; owned */
    float rope_attention_factor;   /* multiplies RoPE's cos and sin (yarn), else 1 */
    int qkv_bias;                  /* q/k/v projections carry a bias */
    int o_bias;                    /* o_proj carries a bias */
    int qk_norm;                   /* per-head RMSNorm of q and k before RoPE */
    int qk_norm_whole; /* 1: the q/k norms span all heads at once (MiniMax-M2) */
    int qk_norm_after_rope;        /* 1: the q/k norms after RoPE, not before (Hunyuan) */
    int tied_embeddings;           /* lm_head is the embedding */
    int sliding_window;            /* the sliding layers' attention window, 0: none */
    const int *layer_window;       /* (num_layers) layer l's window (0: none); owned */
    const float *inv_freq_sliding; /* (rot_dim / 2) RoPE of the sliding layers where
                                      it differs (Gemma's local base), else NULL */
    float attn_scale;              /* of q k^T: 1/sqrt(head_dim), Gemma's
                                      query_pre_attn_scalar^-0.5 */
    float embed_scale;             /* the embedding's factor (Gemma sqrt(hidden)), 1 */
    float residual_scale;          /* each block's output times it before its residual
                                      add (Granite's residual_multiplier), 1 */
    float logit_divisor;           /* the logits divided by it (Granite's
                                      logits_scaling), 1 */
    float norm_offset;             /* RMSNorm weights used as offset + w (Gemma 1) */
    float attn_softcap;            /* attention scores as cap * tanh(s / cap), 0: none */
    float logit_softcap;           /* the same of the logits (Gemma 2), 0: none */
    /* a mixture of experts (KVCAL_OP_MOE); 0 for a dense model */
    int num_experts;
    int experts_per_tok;              /* top-k */
    int moe_intermediate_size;        /* each expert's */
    int shared_intermediate_size;     /* the shared expert's, 0 when none */
    int norm_topk_prob;               /* the top-k weights renormalized to sum 1 */
    int moe_sigmoid;                  /* sigmoid routing with a choice bias (GLM) */
    int moe_softmax_bias;             /* softmax routing with a choice bias added to the
                                         probabilities (ERNIE 4.5) */
    float routed_scale;               /* the chosen weights' factor, 1 */
    const unsigned char *layer_dense; /* (num_layers) 1: layer l has a dense MLP
                                         among the MoE layers (GLM's leading ones,
                                         Qwen's mlp_only_layers); owned */
    int dense_layers;                 /* how many */
    /* grouped top-k routing: the experts in moe_groups groups, the top-k
     * chosen among the moe_topk_groups best groups, a group scored by its
     * best expert (moe_group_max) or its two best experts' sum; 1, 1: none */
    int moe_groups, moe_topk_groups, moe_group_max;
    /* multi-head latent attention (DeepSeek-V2/V3, Kimi K2), 0 elsewhere:
     * the cache holds one entry per token and layer, the normalized latent
     * (kv_lora_rank) then the rotated RoPE part (qk_rope_head_dim, = rot_dim,
     * pairs interleaved); num_kv_heads is 1 and head_dim their sum (the
     * entry is what is observed, scaled and simulated). The attention runs
     * decompressed: num_heads heads of qk_nope + qk_rope for q and k, of
     * v_head_dim for v (kvcal_model_attention_dims). */
    int mla;
    int q_lora_rank; /* 0: q_proj */
    int kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    /* DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): each query attends to
     * the index_topk keys its indexer scores highest, every key of a sample
     * of at most that many tokens. kvcal runs no indexer: it runs such
     * samples, whose attention is dense, and refuses longer ones. 0: dense */
    int sparse_topk;
    /* > 0: from this position on the queries are scaled by 1 + beta
     * ln(1 + floor(pos / it)) (Ministral 3's llama_4_scaling_beta), which the
     * engines do not agree on: samples stop before it */
    int query_scaling_from;
    /* Llama 4: layers without RoPE (layer_nope[l] 1; NULL: none), whose
     * queries are scaled by 1 + attn_temp_scale ln(1 + floor((pos + 1) /
     * attn_temp_floor)) (attn_temp_scale 0: as they are); the layers with
     * RoPE attend within chunks of attention_chunk tokens (0: none) and,
     * with qk_l2_norm, RMS-normalize each head of q and k without a weight
     * after RoPE; moe_input_weighted: an expert's routing weight scales its
     * input (apply_router_weight_on_input), its output is summed as it is */
    const unsigned char *layer_nope; /* (num_layers); owned */
    float attn_temp_scale, attn_temp_floor;
    int attention_chunk;
    int qk_l2_norm;
    int moe_input_weighted;
    /* a hybrid model (Qwen3-Next, Qwen3.5): linear-attention layers, a gated
     * delta-net that caches no entry per token (a fixed-size state instead),
     * among its attention layers, whose output is gated (attn_gate:
     * times sigmoid of KVCAL_W_ATTN_GATE's rows); NULL and 0 elsewhere */
    const unsigned char *layer_linear; /* (num_layers) 1: linear attention; owned */
    int linear_layers;
    int attn_gate;
    int lin_k_heads, lin_v_heads;       /* linear_num_key_heads, _value_heads */
    int lin_k_head_dim, lin_v_head_dim; /* linear_key_head_dim, _value_head_dim */
    int lin_conv;                       /* linear_conv_kernel_dim */
    /* FP8 weights: how each logical weight is served (fp8[w].w
     * KVCAL_FP8W_NONE: a bf16 / fp16 / fp32 weight), one scheme a weight
     * in every layer; weight_scheme says it in a line ("" for none) */
    kvcal_fp8_linear fp8[KVCAL_W_COUNT];
    char weight_scheme[384];
    /* the experts' clamped SwiGLU (gpt-oss): gate clamped above and up on
     * both sides at swiglu_limit, out = (up + 1) * gate * sigmoid(alpha *
     * gate); 0: the plain SwiGLU */
    float swiglu_limit, swiglu_alpha;
};

// --- the weights of a family, at a model's sizes ---

/* The size `dim` stands for in model d (of its family, d->arch) (0 for KVCAL_DIM_NONE).
 */
long long kvcal_model_dim(const kvcal_model_desc *d, kvcal_dim dim);

/* RoPE frequencies of layer l (rot_dim / 2). */
const float *kvcal_model_layer_inv_freq(const kvcal_model_desc *d, int layer);

/* The factor of layer l's cos and sin: the model's rope_attention_factor
 * (yarn's), 1 in a layer of the sliding layers' own RoPE (Olmo 3's, whose
 * yarn stretches the full-attention layers' alone). */
float kvcal_model_layer_rope_factor(const kvcal_model_desc *d, int layer);

/* Whether layer l of model d rotates q and k (all but Llama 4's, EXAONE 4's
 * and SmolLM3's NoPE layers). */
int kvcal_model_layer_rope(const kvcal_model_desc *d, int layer);

/* The chunk layer l of model d attends within (Llama 4's layers with
 * RoPE: attention_chunk tokens; a query at position p sees the keys from
 * p - p % chunk to p), 0: none. */
int kvcal_model_layer_chunk(const kvcal_model_desc *d, int layer);

/* The attention's shape in model d: the kv heads it reads, the head size
 * of q and k and that of v (MLA: num_heads decompressed heads; else
 * num_kv_heads and head_dim twice). */
void kvcal_model_attention_dims(const kvcal_model_desc *d, int *kv_heads, int *qk_dim,
                                int *v_dim);

/* Checks the routed experts of model d (GLM, DeepSeek: n_routed_experts,
 * num_experts_per_tok, moe_intermediate_size, n_shared_experts >= 1) and
 * its grouped top-k: the groups divide the experts, topk_group <= n_group,
 * the top-k experts fit in topk_group groups; an error naming
 * `architecture` and the fix. */
kvcal_status kvcal_model_check_routed_experts(const kvcal_model_desc *d,
                                              const char *architecture);

/* Whether op runs in layer l of model d (calib/arch.h: where its weight is). */
int kvcal_model_op_runs(const kvcal_model_desc *d, int layer, const kvcal_op *op);

/* Whether weight w exists in model d (in any of its layers). */
int kvcal_model_has_weight(const kvcal_model_desc *d, kvcal_weight w);

/* Whether weight w exists in layer l of model d. */
int kvcal_model_layer_has_weight(const kvcal_model_desc *d, int layer, kvcal_weight w);

/* Whether layer l of model d caches K and V (all but a hybrid model's
 * linear-attention layers). */
int kvcal_model_layer_caches(const kvcal_model_desc *d, int layer);

/* The ops of layer l of model d (the family's dense layer ops in its
 * dense layers) and their count. */
const kvcal_op *kvcal_model_layer_ops(const kvcal_model_desc *d, int layer, int *n);

/* The first layer after `layer` whose ops differ from those of every layer
 * up to it (a model's first MoE layer after its dense ones), -1 when there
 * is none: from 0, each kind of layer the model has once. */
int kvcal_model_next_layer_kind(const kvcal_model_desc *d, int layer);

/* Copies of weight w in model d: num_experts for a per-expert weight, else
 * 1 (0 when absent). */
int kvcal_model_weight_copies(const kvcal_model_desc *d, kvcal_weight w);

/* Shape of logical weight w in model d: rows (its parts' rows added, times
 * its copies) and cols (0 for a vector); 0 x 0 when absent. */
void kvcal_model_weight_shape(const kvcal_model_desc *d, kvcal_weight w, long long *rows,
                              long long *cols);

/* Floats of the scales of FP8 weight w as served (core/fp8_linear.h's
 * layout, kvcal_fp8_weight_scales, of each copy, the copies one after
 * another: a per-expert weight's experts each with their own); 0 when w is
 * not FP8 or absent. */
int64_t kvcal_model_fp8_scales(const kvcal_model_desc *d, kvcal_weight w);

/* "model.layers.<layer>.<suffix>" as d's family names it, where d's
 * checkpoint keeps it (d->lm_prefix), the suffix of a per-expert weight
 * naming expert `expert` (its %d), into out (n bytes). */
void kvcal_model_tensor_name(char *out, size_t n, const kvcal_model_desc *d, int layer,
                             const char *suffix, int expert);

/* A family's model-level tensor name ("model.embed_tokens.weight",
 * "lm_head.weight") where d's checkpoint keeps it, into out (n bytes). */
void kvcal_model_top_name(char *out, size_t n, const kvcal_model_desc *d,
                          const char *name);

/* Where a tensor's values lie in the mapped checkpoint: numel values of
 * dtype (F32, F16 or BF16; F8_E4M3 for an FP8 weight) at data, possibly
 * unaligned, in order when layout is 0; else (KVCAL_PART_* flags of
 * calib/arch.h) the (rows, cols) matrix of the values is held transposed,
 * with its rows' halves interleaved, or as MXFP4 (dtype U8: data the e2m1
 * pairs, scales the e8m0 exponents, io/checkpoint/mxfp4.h). Valid until
 * close. */
typedef struct kvcal_tensor_view {
    const void *data;
    kvcal_dtype dtype;
    int64_t numel;
    unsigned layout;
    int64_t rows, cols;
    const uint8_t *scales;
    /* KVCAL_PART_HEAD_* and KVCAL_PART_GDN_GROUPED: the tensor's rows in
     * `groups` groups, each segments seg[0 .. segs-1] long; the part is
     * rows first .. first + rows - 1 of [segment 0 of every group; segment
     * 1 of every group; ...] (groups 0: rows in order) */
    int groups, segs;
    int64_t seg[4], first;
} kvcal_tensor_view;

/* The grouping (kvcal_tensor_view's groups, segs, seg, first) of a part
 * stored with `layout` (KVCAL_PART_* flags) in model d: groups 0 for a
 * layout that keeps rows in order. */
void kvcal_model_part_groups(const kvcal_model_desc *d, unsigned layout,
                             kvcal_tensor_view *v);

/* The rows of the tensor a part of `rows` rows stored with `layout` is
 * read from: a head-split part (KVCAL_PART_HEAD_*) is half of them. */
int64_t kvcal_model_part_stored_rows(unsigned layout, int64_t rows);

/* The tensor's row that row r of view v's part is (v's grouping). */
int64_t kvcal_tensor_view_row(const kvcal_tensor_view *v, int64_t r);

#endif
