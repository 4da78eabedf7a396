/* calib/arch.h: an architecture family as data, one file per family
 * (calib/arch_<family>.c), in the manner of llama.cpp's src/models/: the
 * architectures it covers, the config.json fields it reads, the checkpoint
 * names of its weights and how they fuse, and its layer as a sequence of
 * ops. The executor (calib/executor.h) runs the ops on a backend
 * (calib/backend.h); no backend ever tests the architecture.
 *
 * Adding an architecture: a new arch_<family>.c with its kvcal_arch, a line
 * in calib/arch.c, its golden tests; a backend changes only for a new op. */
#ifndef KVCAL_CALIB_ARCH_H
#define KVCAL_CALIB_ARCH_H

#include <stddef.h>

#include "io/checkpoint/model_config.h"
#include "kvcal.h"

typedef struct kvcal_model_desc kvcal_model_desc;

/* The logical weights of a layer, what the ops read. A family maps its
 * checkpoint tensors onto them; a fused weight is its parts stacked by rows
 * in order. Values only grow at the end. */
typedef enum kvcal_weight {
    KVCAL_W_NONE = -1,
    KVCAL_W_ATTN_NORM = 0, /* (hidden) */
    KVCAL_W_QKV,           /* (q + 2 kv, hidden): [Wq; Wk; Wv] */
    KVCAL_W_QKV_BIAS,      /* (q + 2 kv) */
    KVCAL_W_O,             /* (hidden, q) */
    KVCAL_W_O_BIAS,        /* (hidden) */
    KVCAL_W_Q_NORM,        /* (head_dim) per-head RMSNorm of q */
    KVCAL_W_K_NORM,        /* (head_dim) per-head RMSNorm of k */
    KVCAL_W_FFN_NORM,      /* (hidden) */
    KVCAL_W_GATE_UP,       /* (2 intermediate, hidden): [Wgate; Wup] */
    KVCAL_W_DOWN,          /* (hidden, intermediate) */
    KVCAL_W_ROUTER,        /* (experts, hidden) the router's logits */
    KVCAL_W_EXPERT_GATE_UP, /* (experts, 2 moe_inter, hidden): per expert [Wgate; Wup] */
    KVCAL_W_EXPERT_DOWN,   /* (experts, hidden, moe_inter) */
    KVCAL_W_SHARED_GATE_UP, /* (2 shared_inter, hidden) the shared expert's [Wgate; Wup] */
    KVCAL_W_SHARED_DOWN,   /* (hidden, shared_inter) */
    KVCAL_W_SHARED_GATE,   /* (1, hidden) the sigmoid gate of the shared expert */
    KVCAL_W_POST_ATTN_NORM, /* (hidden) RMSNorm of the attention's output (Gemma) */
    KVCAL_W_POST_FFN_NORM, /* (hidden) RMSNorm of the MLP's output (Gemma) */
    KVCAL_W_ROUTER_BIAS,   /* (experts) the router's bias: added to the scores to choose
                              with sigmoid routing (GLM), to the logits with softmax
                              routing (gpt-oss) */
    /* multi-head latent attention (DeepSeek-V2/V3): */
    KVCAL_W_Q_A,       /* (q_lora_rank, hidden) the query's LoRA down */
    KVCAL_W_Q_A_NORM,  /* (q_lora_rank) its RMSNorm */
    KVCAL_W_Q_B,       /* (heads * qk_head, q_lora_rank) the query's LoRA up */
    KVCAL_W_Q_PROJ,    /* (heads * qk_head, hidden) the query without LoRA */
    KVCAL_W_KV_A,      /* (kv_lora_rank + qk_rope, hidden) latent and RoPE part */
    KVCAL_W_KV_A_NORM, /* (kv_lora_rank) the latent's RMSNorm */
    KVCAL_W_KV_B,      /* (heads * (qk_nope + v_head), kv_lora_rank) per head
                          [W_UK; W_UV]: the latent's K (no RoPE) and V */
    KVCAL_W_ATTN_SINKS,    /* (heads) a logit per query head in the softmax's
                              denominator (gpt-oss's attention sinks) */
    KVCAL_W_EXPERT_GATE_UP_BIAS, /* (experts, 2 moe_inter): per expert [bgate; bup] */
    KVCAL_W_EXPERT_DOWN_BIAS,    /* (experts, hidden) */
    KVCAL_W_ATTN_GATE, /* (q, hidden) the attention output's gate (Qwen3-Next's
                          q_proj rows beside each head's query) */
    /* the gated delta-net of a linear-attention layer (Qwen3-Next, Qwen3.5): */
    KVCAL_W_LIN_QKVZ,  /* (2 lin_k + 2 lin_v, hidden): [Wq; Wk; Wv; Wz] by head */
    KVCAL_W_LIN_BA,    /* (2 lin_v_heads, hidden): [Wb; Wa] by value head */
    KVCAL_W_LIN_CONV,  /* (2 lin_k + lin_v, conv kernel) the causal depthwise
                          convolution of q, k and v */
    KVCAL_W_LIN_A_LOG, /* (lin_v_heads) log of the decay rate A */
    KVCAL_W_LIN_DT_BIAS, /* (lin_v_heads) the time step's bias */
    KVCAL_W_LIN_NORM,  /* (lin_v_head_dim) the gated RMSNorm's weight (plain w) */
    KVCAL_W_LIN_OUT,   /* (hidden, lin_v) */
    KVCAL_W_COUNT
} kvcal_weight;

/* A size of the model a weight's shape is made of. */
typedef enum kvcal_dim {
    KVCAL_DIM_NONE = 0, /* (as cols) the weight is a vector */
    KVCAL_DIM_HIDDEN,   /* hidden_size */
    KVCAL_DIM_Q,        /* num_heads * head_dim */
    KVCAL_DIM_KV,       /* num_kv_heads * head_dim */
    KVCAL_DIM_INTER,    /* intermediate_size */
    KVCAL_DIM_HEAD,     /* head_dim */
    KVCAL_DIM_EXPERTS,  /* num_experts */
    KVCAL_DIM_MOE_INTER,    /* moe_intermediate_size (each expert's) */
    KVCAL_DIM_SHARED_INTER, /* shared_expert_intermediate_size */
    KVCAL_DIM_ONE,          /* 1 */
    KVCAL_DIM_QKV,          /* (num_heads + 2 num_kv_heads) * head_dim: a fused qkv_proj */
    KVCAL_DIM_2INTER,  /* 2 intermediate_size: a fused gate_up_proj */
    KVCAL_DIM_Q_LORA,  /* q_lora_rank */
    KVCAL_DIM_KV_LORA, /* kv_lora_rank */
    KVCAL_DIM_KV_A,    /* kv_lora_rank + qk_rope_head_dim: the cached entry */
    KVCAL_DIM_MLA_Q,   /* num_heads * (qk_nope_head_dim + qk_rope_head_dim) */
    KVCAL_DIM_KV_B,    /* num_heads * (qk_nope_head_dim + v_head_dim) */
    KVCAL_DIM_MLA_O,   /* num_heads * v_head_dim */
    KVCAL_DIM_HEADS,   /* num_heads */
    KVCAL_DIM_2MOE_INTER, /* 2 moe_intermediate_size: an expert's fused gate_up_proj */
    /* a gated delta-net's (linear_num_key_heads x linear_key_head_dim = lin_k,
     * linear_num_value_heads x linear_value_head_dim = lin_v): */
    KVCAL_DIM_LIN_QKV,    /* 2 lin_k + lin_v: the convolved channels */
    KVCAL_DIM_LIN_QKVZ,   /* 2 lin_k + 2 lin_v */
    KVCAL_DIM_LIN_V,      /* lin_v */
    KVCAL_DIM_LIN_2HEADS, /* 2 linear_num_value_heads */
    KVCAL_DIM_LIN_HEADS,  /* linear_num_value_heads */
    KVCAL_DIM_LIN_V_HEAD, /* linear_value_head_dim */
    KVCAL_DIM_LIN_CONV    /* linear_conv_kernel_dim */
} kvcal_dim;

/* When a weight exists, from the model description. */
typedef enum kvcal_when {
    KVCAL_WHEN_ALWAYS = 0,
    KVCAL_WHEN_QKV_BIAS,         /* desc->qkv_bias */
    KVCAL_WHEN_O_BIAS,           /* desc->o_bias */
    KVCAL_WHEN_QK_NORM,          /* desc->qk_norm */
    KVCAL_WHEN_SHARED_EXPERT,    /* desc->shared_intermediate_size > 0: the MoE layers */
    KVCAL_WHEN_DENSE_LAYERS,     /* the dense layers of desc->layer_dense only */
    KVCAL_WHEN_MOE_LAYERS,       /* the other layers only */
    KVCAL_WHEN_Q_LORA,           /* desc->q_lora_rank > 0 */
    KVCAL_WHEN_NO_Q_LORA,        /* desc->q_lora_rank == 0 */
    KVCAL_WHEN_ATTENTION_LAYERS, /* the attention layers of a hybrid model */
    KVCAL_WHEN_LINEAR_LAYERS     /* its linear-attention layers (desc->layer_linear) */
} kvcal_when;

/* How a checkpoint tensor holds its part (flags of kvcal_weight_part.layout;
 * 0: (rows, cols) row-major, as nn.Linear's weight). */
/* stored (cols, rows): an (in, out) parameter, as gpt-oss's experts */
#define KVCAL_PART_TRANSPOSED 1
/* rows stored interleaved: row 2i is row i of the part's first half, row
 * 2i + 1 row i of its second half (gpt-oss's gate, up, gate, up, ...) */
#define KVCAL_PART_INTERLEAVED 2
/* may be stored as MXFP4 instead, as the tensors <name>_blocks (rows, cols
 * / 32, 16) of e2m1 pairs (the low nibble first) and <name>_scales (rows,
 * cols / 32) of e8m0 exponents, (rows, cols) whatever KVCAL_PART_TRANSPOSED
 * says (the released gpt-oss checkpoints; io/checkpoint/mxfp4.h) */
#define KVCAL_PART_MXFP4 4
/* the part is one of two row blocks of head_dim rows that alternate head by
 * head in the tensor (2 x the part's rows): the first (KVCAL_PART_HEAD_FIRST)
 * or the second (KVCAL_PART_HEAD_SECOND) of each head (Qwen3-Next's q_proj:
 * each head's query, then its output gate) */
#define KVCAL_PART_HEAD_FIRST 8
#define KVCAL_PART_HEAD_SECOND 16
/* the part's rows grouped by key head in the tensor, as Qwen3-Next's fused
 * in_proj_qkvz (per key head q, k, then its value heads' v and z) and
 * in_proj_ba (per key head its value heads' b, then their a): read as the
 * weight's canonical [Wq; Wk; Wv; Wz] and [Wb; Wa] */
#define KVCAL_PART_GDN_GROUPED 32
/* stored (rows, 1, cols): a depthwise Conv1d's weight */
#define KVCAL_PART_CONV1D 64

/* One checkpoint tensor of a logical weight: its name after the layer
 * prefix ("self_attn.k_proj.weight"), its shape and layout. */
typedef struct kvcal_weight_part {
    const char *name;
    kvcal_dim rows, cols;
    unsigned layout; /* KVCAL_PART_* flags */
} kvcal_weight_part;

#define KVCAL_WEIGHT_PARTS_MAX 3

#define KVCAL_EXPERTS_NAMED 1
#define KVCAL_EXPERTS_STACKED 2

typedef struct kvcal_weight_spec {
    kvcal_weight_part parts[KVCAL_WEIGHT_PARTS_MAX]; /* name NULL ends the list */
    kvcal_when when;
    /* one copy of the parts per expert, stacked by expert: KVCAL_EXPERTS_NAMED
     * (a tensor per expert, each part's name holds a %d for it:
     * "mlp.experts.%d.up_proj.weight") or KVCAL_EXPERTS_STACKED (one tensor
     * (experts, ...) per part); 0: one copy */
    int per_expert;
    /* 1: an RMSNorm weight, used as norm_offset + w (calib/model.h) */
    int norm;
    /* nonzero: vLLM serves this weight and the layer's other weights of the
     * same value as one fused linear layer (DeepSeek's q_a_proj and
     * kv_a_proj_with_mqa: fused_qkv_a_proj; a gated attention's q/k/v and
     * gate: qkv_proj), so their FP8 schemes are one,
     * per-tensor shards run at the largest of their scales with one static
     * input scale, and block-wise shards but the last are whole blocks */
    int fused;
} kvcal_weight_spec;

/* The activations of a layer, as a backend holds them for every row of a
 * batch. */
typedef enum kvcal_act {
    KVCAL_ACT_NONE = 0,
    KVCAL_ACT_NORM,  /* (rows, hidden) normalized residual stream */
    KVCAL_ACT_DELTA, /* (rows, hidden) what a block adds to the residual */
    KVCAL_ACT_QKV,   /* (rows, q + 2 kv) q, k, v */
    KVCAL_ACT_ATT,   /* (rows, q) attention output */
    KVCAL_ACT_MLP,   /* (rows, intermediate) the MLP's hidden activation */
    KVCAL_ACT_Q_A,   /* (rows, q_lora_rank) the query's LoRA (MLA) */
    KVCAL_ACT_Q,     /* (rows, heads, qk_nope + qk_rope) the query (MLA) */
    KVCAL_ACT_LATENT, /* (rows, kv_lora_rank + qk_rope) the cached entry (MLA) */
    KVCAL_ACT_GATE,      /* (rows, q) the attention output's gate, before its sigmoid */
    KVCAL_ACT_LIN_QKVZ,  /* (rows, 2 lin_k + 2 lin_v) a gated delta-net's q, k, v, z */
    KVCAL_ACT_LIN_BA,    /* (rows, 2 lin_v_heads) its b and a */
    KVCAL_ACT_LIN_OUT    /* (rows, lin_v) its output, before out_proj */
} kvcal_act;



typedef enum kvcal_op_kind {
    /* residual += in (unless this is the batch's first op), then out =
     * rmsnorm(residual) * w (w KVCAL_W_NONE: out = residual, the input of
     * a post-norm layer, EXAONE 4's); the residual stream is the backend's
     * own */
    KVCAL_OP_ADD_RMSNORM,
    /* out = in @ w^T + b (b KVCAL_W_NONE or absent: no bias) */
    KVCAL_OP_LINEAR,
    /* in place on QKV: per-head RMSNorm of q with w and of k with b (when
     * present), then RoPE of q and k */
    KVCAL_OP_QK_NORM_ROPE,
    /* out = causal attention of QKV's q, k, v (GQA), within the model's
     * sliding window when it has one; w (KVCAL_W_ATTN_SINKS, or none): a
     * logit per query head added to the softmax's denominator */
    KVCAL_OP_ATTENTION,
    /* out = silu(in Wgate^T) * (in Wup^T), w = [Wgate; Wup] */
    KVCAL_OP_SWIGLU,
    /* out = the mixture of experts of in: w = KVCAL_W_ROUTER's logits (+ b,
     * b = KVCAL_W_ROUTER_BIAS or none), their softmax's top-k experts (or,
     * with the model's sigmoid routing, the top-k of sigmoid(logits) + b
     * with logits of w alone, weighted by the sigmoids; weights renormalized
     * when the model says so and times its routed scale), each a SwiGLU MLP
     * of KVCAL_W_EXPERT_GATE_UP and KVCAL_W_EXPERT_DOWN (plus their biases
     * where the model has them; the model's clamped SwiGLU where it has
     * one), summed by weight; plus, where the model has one, the shared
     * expert (KVCAL_W_SHARED_GATE_UP, _DOWN), scaled by sigmoid(in
     * KVCAL_W_SHARED_GATE^T) where that gate exists */
    KVCAL_OP_MOE,
    /* out = rmsnorm(in) * w, out may be in (a norm of a block's output
     * before the residual add, Gemma's post-norms) */
    KVCAL_OP_RMSNORM,
    /* out = gelu_tanh(in Wgate^T) * (in Wup^T), w = [Wgate; Wup] */
    KVCAL_OP_GEGLU,
    /* in place on LATENT (in, out) and Q: RMSNorm of the latent's first
     * kv_lora_rank channels with w, RoPE (interleaved pairs, as vLLM's
     * DeepSeek rotary) of its last qk_rope_head_dim channels and of the
     * last qk_rope_head_dim channels of each head of Q: the entry an MLA
     * engine caches */
    KVCAL_OP_MLA_LATENT,
    /* from the latent (in, after the cache point: what the cache gives
     * back) and w = KVCAL_W_KV_B, the attention's K of each head [latent
     * W_UK, the entry's RoPE part] and V (latent W_UV), for the next
     * KVCAL_OP_ATTENTION, which then attends Q (its in) to them */
    KVCAL_OP_MLA_EXPAND,
    /* out *= sigmoid(in), elementwise (the gated attention's output) */
    KVCAL_OP_SIGMOID_GATE,
    /* out (LIN_OUT) = the gated delta-net of in (LIN_QKVZ) and LIN_BA, each
     * sample from a zero state: q, k, v through the causal depthwise
     * convolution w (KVCAL_W_LIN_CONV) and SiLU; q and k L2-normalized, q
     * times lin_k_head_dim^-0.5; per value head beta = sigmoid(b), g =
     * -exp(A_log) softplus(a + dt_bias); per token the state S (k_dim x
     * v_dim) decays by exp(g), S += k (beta (v - S^T k))^T, o = S^T q (each
     * key head serving its lin_v_heads / lin_k_heads value heads in
     * order); out = rmsnorm(o) * w_norm * silu(z) per value head */
    KVCAL_OP_GATED_DELTA
} kvcal_op_kind;

typedef struct kvcal_op {
    kvcal_op_kind kind;
    kvcal_act out, in;
    kvcal_weight w, b;
    /* 1: after this op, K and V in QKV are what the engine caches: the
     * executor observes them (calibrate), passes them through a simulated
     * FP8 cache (eval), and a calibration's last layer stops here */
    int kv_cache;
} kvcal_op;
/* An op runs in the layers that hold its weight w (KVCAL_W_NONE: every
 * layer; QK_NORM_ROPE, whose weights are optional norms, every layer too):
 * a family's conditional ops (MLA's query with or without its LoRA) are
 * those of conditional weights (kvcal_model_op_runs). */

typedef struct kvcal_arch {
    const char *family;                       /* "llama" */
    const char *const *architectures;         /* NULL-terminated */
    const char *layer_prefix;                 /* "model.layers.%d." */
    const char *embed, *final_norm, *lm_head; /* model-level tensor names */
    kvcal_weight_spec weights[KVCAL_W_COUNT];
    /* layer tensors whose presence the family does not implement (NULL-
     * terminated), refused when found: K/V computed without them would be
     * wrong */
    const char *const *refused;
    /* Fills d's family fields (biases, norms) from c; d's sizes and RoPE
     * are filled already. Returns an error naming the field it refuses. */
    kvcal_status (*describe)(const kvcal_model_config *c, kvcal_model_desc *d);
    const kvcal_op *layer;
    int layer_ops;
    /* the ops of the dense layers (desc->layer_dense), where the family has
     * them (GLM's first_k_dense_replace, Qwen's mlp_only_layers), else NULL */
    const kvcal_op *dense_layer;
    int dense_layer_ops;
    /* the ops of a hybrid model's linear-attention layers (desc->layer_linear),
     * where the family has them, else NULL */
    const kvcal_op *linear_layer;
    int linear_layer_ops;
    /* the family of the same model whose checkpoint holds a tensor per
     * routed expert where this one's are stacked (its describe and ops
     * alike), chosen where the first MoE layer holds expert 0's first
     * tensor (Llama 4's llm-compressor checkpoints), else NULL */
    const struct kvcal_arch *named_experts;
    /* 1: the family reads bf16 / fp16 / fp32 weights alone (an FP8 weight
     * of the checkpoint is refused); a quantization config that quantizes
     * no weight (a KV-cache scheme alone) is fine */
    int float_weights_only;
} kvcal_arch;

/* The family that runs `architecture` (config.json architectures[0]), or
 * NULL. */
const kvcal_arch *kvcal_arch_find(const char *architecture);

/* A multimodal model whose language model family `text_architecture`
 * runs (calib/arch.c's table). */
typedef struct kvcal_arch_wrapper {
    const char *architecture;      /* "Gemma3ForConditionalGeneration" */
    const char *text_architecture; /* "Gemma3ForCausalLM" */
    const char *text_model_type;   /* text_config's model_type, "gemma3_text" */
    /* the model_type of its released configs, which keep the language
     * model's fields at the top level and its weights under "model."
     * (Qwen2.5-VL: "qwen2_5_vl", Qwen2-VL: "qwen2_vl"); NULL where they nest them */
    const char *flat_model_type;
    /* the family that runs it where the checkpoint's weights differ from
     * text_architecture's (Qwen3-VL-MoE's stacked experts), else NULL: the
     * family of text_architecture */
    const struct kvcal_arch *family;
} kvcal_arch_wrapper;

/* The wrapper entry of `architecture` whose language model has
 * `model_type` (text or flat), else its first entry, or NULL. */
const kvcal_arch_wrapper *kvcal_arch_wrapper_find(const char *architecture,
                                                  const char *model_type);

/* The text model types the entries of wrapper `architecture` run, with
 * their architectures ("'mistral' (MistralForCausalLM) or ..."), into buf. */
void kvcal_arch_wrapper_text_types(const char *architecture, char *buf, size_t n);

/* What kvcal lacks to run `architecture`, for the architectures people ask
 * for that no family covers yet ("attention sinks, ..."), else NULL. */
const char *kvcal_arch_missing(const char *architecture);

/* "LlamaForCausalLM, MistralForCausalLM, ... and
 * Qwen3VLForConditionalGeneration" into buf (n bytes): every architecture
 * of every family, then the wrappers', for messages. */
void kvcal_arch_list(char *buf, size_t n);

#endif
