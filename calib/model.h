/* calib/model.h: a decoder-only model as the runner needs it: its shape, its
 * RoPE, and fp32 weights one layer at a time.
 *
 * Sources: a Hugging Face checkpoint (config.json + safetensors, single or
 * sharded) of an architecture a family of calib/arch.h runs, with F32 / F16 /
 * BF16 weights, or FP8 ones (compressed-tensors, fp8 and ModelOpt schemes:
 * io/checkpoint/weight_quant.h), its tensors named by the family's file; or a llama2.c
 * .bin checkpoint (the Llama family). Checkpoints are mapped, never read whole; a layer's
 * weights are converted to fp32 into one buffer when the layer is loaded, so memory is
 * one layer of fp32 weights whatever the model size. Every tensor's presence,
 * dtype and shape is checked when the model is opened. */
#ifndef KVCAL_CALIB_MODEL_H
#define KVCAL_CALIB_MODEL_H

#include <stdint.h>

#include "calib/arch.h"
#include "core/fp8_linear.h"
#include "core/scales.h"
#include "io/checkpoint/llama2c.h"
#include "io/checkpoint/safetensors.h"
#include "kvcal.h"

struct kvcal_model_desc {
    const kvcal_arch *arch;            /* the family that runs it */
    char architecture[KVCAL_NAME_MAX]; /* "LlamaForCausalLM" */
    char model_type[KVCAL_NAME_MAX];   /* "llama" */
    char source[16];                   /* "hf" or "llama2c" */
    char weight_dtype[16];             /* "F32", "BF16", "F16" (of the projections) */
    int num_layers;
    int hidden_size;
    int intermediate_size;
    int num_heads;
    int num_kv_heads;
    int head_dim;
    int vocab_size;
    int max_seq_len; /* max_position_embeddings (llama2.c: seq_len) */
    float norm_eps;
    int rot_dim;                 /* channels of each head that RoPE rotates (even) */
    int rope_interleaved;        /* 1: pairs (2i, 2i+1); 0: (i, i + rot_dim/2) */
    const float *inv_freq;       /* (rot_dim / 2), scaling already applied; owned */
    float rope_attention_factor; /* multiplies RoPE's cos and sin (yarn), else 1 */
    int qkv_bias;                /* q/k/v projections carry a bias */
    int o_bias;                  /* o_proj carries a bias */
    int qk_norm;                 /* per-head RMSNorm of q and k before RoPE */
    int tied_embeddings;         /* lm_head is the embedding */
    int sliding_window;          /* the sliding layers' attention window, 0: none */
    const int *layer_window;     /* (num_layers) layer l's window (0: none); owned */
    const float *inv_freq_sliding; /* (rot_dim / 2) RoPE of the sliding layers where
                                      it differs (Gemma's local base), else NULL */
    float attn_scale;            /* of q k^T: 1/sqrt(head_dim), Gemma's
                                    query_pre_attn_scalar^-0.5 */
    float embed_scale;           /* the embedding's factor (Gemma sqrt(hidden)), 1 */
    float norm_offset;           /* RMSNorm weights used as offset + w (Gemma 1) */
    float attn_softcap;          /* attention scores as cap * tanh(s / cap), 0: none */
    float logit_softcap;         /* the same of the logits (Gemma 2), 0: none */
    /* a mixture of experts (KVCAL_OP_MOE); 0 for a dense model */
    int num_experts;
    int experts_per_tok;          /* top-k */
    int moe_intermediate_size;    /* each expert's */
    int shared_intermediate_size; /* the shared expert's, 0 when none */
    int norm_topk_prob;           /* the top-k weights renormalized to sum 1 */
    int moe_sigmoid;              /* sigmoid routing with a choice bias (GLM) */
    float routed_scale;           /* the chosen weights' factor, 1 */
    const unsigned char *layer_dense; /* (num_layers) 1: layer l has a dense MLP
                                         among the MoE layers (GLM's leading ones,
                                         Qwen's mlp_only_layers); owned */
    int dense_layers;             /* how many */
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

/* One layer's fp32 weights by logical weight (calib/arch.h), (out, in)
 * row-major like nn.Linear, fused weights stacked by rows; NULL where the
 * model has none. */
typedef struct kvcal_layer_weights {
    const float *w[KVCAL_W_COUNT];
    /* an FP8 weight's w is dequantized as the engine serves it (its
     * requantized bytes times their scales); input_scale[w] its static
     * activation scale (KVCAL_FP8A_STATIC), else 0 */
    float input_scale[KVCAL_W_COUNT];
} kvcal_layer_weights;

typedef struct kvcal_model kvcal_model_t;

// --- the weights of a family, at a model's sizes ---

/* The size `dim` stands for in model d (of its family, d->arch) (0 for KVCAL_DIM_NONE).
 */
long long kvcal_model_dim(const kvcal_model_desc *d, kvcal_dim dim);

/* RoPE frequencies of layer l (rot_dim / 2). */
const float *kvcal_model_layer_inv_freq(const kvcal_model_desc *d, int layer);

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

/* The ops of layer l of model d (the family's dense layer ops in its
 * dense layers) and their count. */
const kvcal_op *kvcal_model_layer_ops(const kvcal_model_desc *d, int layer, int *n);

/* Copies of weight w in model d: num_experts for a per-expert weight, else
 * 1 (0 when absent). */
int kvcal_model_weight_copies(const kvcal_model_desc *d, kvcal_weight w);

/* Shape of logical weight w in model d: rows (its parts' rows added, times
 * its copies) and cols (0 for a vector); 0 x 0 when absent. */
void kvcal_model_weight_shape(const kvcal_model_desc *d, kvcal_weight w, long long *rows,
                              long long *cols);

/* Opens a checkpoint directory (config.json + *.safetensors), a single
 * .safetensors file beside its config.json, or a llama2.c .bin file, and
 * checks every tensor. An unsupported architecture, rope scaling or weight
 * dtype, a missing tensor or a wrong shape is an error naming it.
 * *out = NULL on failure; the caller closes the model. */
kvcal_status kvcal_model_open(const char *path, kvcal_model_t **out);

/* Unmaps and frees; NULL is a no-op. */
void kvcal_model_close(kvcal_model_t *m);

/* Owned by the model. */
const kvcal_model_desc *kvcal_model_describe(const kvcal_model_t *m);

/* The header of a llama2.c source, NULL for a Hugging Face checkpoint;
 * owned by the model. */
const kvcal_llama2c_config *kvcal_model_llama2c_config(const kvcal_model_t *m);

/* The model identity recorded with scales. */
void kvcal_model_identity_get(const kvcal_model_t *m, kvcal_model_identity *id);

/* Loads layer `layer` (fp32); the pointers stay valid until the next load
 * of any layer or close. Not thread-safe on one model. */
kvcal_status kvcal_model_load_layer(kvcal_model_t *m, int layer, kvcal_layer_weights *w);

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
} kvcal_tensor_view;

/* out (n) = values first .. first + n - 1 of view v in row-major order of
 * its (rows, cols) matrix, converted to float (exactly: MXFP4 and the bf16
 * and f16 values are floats). Thread-safe. */
kvcal_status kvcal_tensor_view_to_f32(const kvcal_tensor_view *v, int64_t first,
                                      int64_t n, float *out);

/* The checkpoint tensors that copy `copy` (the expert of a per-expert
 * weight, else 0; see kvcal_model_weight_copies) of logical weight w of
 * `layer` stacks, in order (the parts of calib/arch.h), into parts (the
 * copy's part of a tensor that stacks every expert); *n their count, 0
 * when the model has no such weight. The copies follow one another in the
 * logical weight. Reads nothing; thread-safe, unlike load_layer: for
 * loaders that convert or copy the weights themselves (the cuda backend's,
 * on several threads). */
kvcal_status kvcal_model_weight_parts(const kvcal_model_t *m, int layer, kvcal_weight w,
                                      int copy,
                                      kvcal_tensor_view parts[KVCAL_WEIGHT_PARTS_MAX],
                                      int *n);

/* The FP8 weight w of `layer` as the engine serves it: the e4m3 bytes of
 * each part (views into the checkpoint, stacked by rows as the logical
 * weight), the map each part's bytes go through (vLLM's requantization of
 * a fused weight's per-tensor shards to their largest scale; the identity
 * where mapped is 0), the static input scale (the largest of the parts',
 * KVCAL_FP8A_STATIC; else 0). */
typedef struct kvcal_fp8_parts {
    kvcal_tensor_view part[KVCAL_WEIGHT_PARTS_MAX];
    int n;
    int mapped;
    uint8_t map[KVCAL_WEIGHT_PARTS_MAX][256];
    float input_scale;
} kvcal_fp8_parts;

/* Fills *p for FP8 weight w (desc->fp8[w].w not KVCAL_FP8W_NONE) of
 * `layer`, and its scales into `scales` (kvcal_fp8_weight_scales floats,
 * core/fp8_linear.h's layout). Reads only the scales; thread-safe. */
kvcal_status kvcal_model_fp8_weight(const kvcal_model_t *m, int layer, kvcal_weight w,
                                    kvcal_fp8_parts *p, float *scales);

// --- the FP8 weights of a checkpoint (calib/model_fp8.c, for calib/model.c) ---

typedef struct kvcal_model_fp8 kvcal_model_fp8_t;

/* Reads the quantization config of the model in `dir` and checks every
 * matrix of d's family in checkpoint ck (borrowed; path names it in
 * messages) against it: an F8_E4M3 tensor the config does not quantize, a
 * float one it does, an FP8 weight of a mixture of experts, schemes that
 * differ between layers or parts, missing or misshapen scales are errors
 * naming the tensor. Fills d->fp8 and d->weight_scheme. *out = NULL on
 * failure. */
kvcal_status kvcal_model_fp8_open(const kvcal_checkpoint_t *ck, const char *dir,
                                  const char *path, kvcal_model_desc *d,
                                  kvcal_model_fp8_t **out);

/* NULL is a no-op. */
void kvcal_model_fp8_close(kvcal_model_fp8_t *f);

/* kvcal_model_fp8_weight on the checkpoint. */
kvcal_status kvcal_model_fp8_get(const kvcal_model_fp8_t *f, const kvcal_checkpoint_t *ck,
                                 const kvcal_model_desc *d, int layer, kvcal_weight w,
                                 kvcal_fp8_parts *p, float *scales);

/* FP8 weight w of `layer` dequantized as served into out (rows, cols) fp32,
 * its static input scale into *input_scale; scratch holds
 * kvcal_fp8_weight_scales floats. */
kvcal_status kvcal_model_fp8_dequantize(const kvcal_model_fp8_t *f,
                                        const kvcal_checkpoint_t *ck,
                                        const kvcal_model_desc *d, int layer, kvcal_weight w,
                                        float *out, float *scratch, float *input_scale);

/* "model.layers.<layer>.<suffix>" as family a names it, the suffix of a
 * per-expert weight naming expert `expert` (its %d), into out (n bytes). */
void kvcal_model_tensor_name(char *out, size_t n, const kvcal_arch *a, int layer,
                             const char *suffix, int expert);

/* The embedding table (vocab, hidden) and the final norm (hidden) and
 * classifier (vocab, hidden; the embedding when tied) as views. */
void kvcal_model_head_views(const kvcal_model_t *m, kvcal_tensor_view *embed,
                            kvcal_tensor_view *final_norm, kvcal_tensor_view *lm_head);

/* out (n, hidden) = embedding rows of ids (n); an id outside [0, vocab) is
 * an error naming it. */
kvcal_status kvcal_model_embed(const kvcal_model_t *m, const int32_t *ids, int64_t n,
                               float *out);

/* The final norm (hidden) and the classifier (vocab, hidden), fp32, valid
 * until close; converted on the first call. */
kvcal_status kvcal_model_load_head(kvcal_model_t *m, const float **final_norm,
                                   const float **lm_head);

#endif
