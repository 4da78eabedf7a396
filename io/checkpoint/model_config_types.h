/* io/checkpoint/model_config_types.h: what kvcal reads of a Hugging Face
 * config.json (kvcal_model_config) and the bounds it holds a file to; read by
 * io/checkpoint/model_config.h's functions, the families' readers among
 * them (model_config_families.h). */
#ifndef KVCAL_IO_MODEL_CONFIG_TYPES_H
#define KVCAL_IO_MODEL_CONFIG_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* RoPE frequency scaling. Values only grow at the end. */
typedef enum kvcal_rope_type {
    KVCAL_ROPE_DEFAULT = 0,
    KVCAL_ROPE_LINEAR = 1,
    KVCAL_ROPE_LLAMA3 = 2,
    KVCAL_ROPE_DYNAMIC = 3,
    KVCAL_ROPE_YARN = 4,
    KVCAL_ROPE_OTHER = 5, /* any other rope_type; its name is in rope_type_name */
    KVCAL_ROPE_LONGROPE = 6 /* Phi-3 / 3.5 / 4: per-frequency factors */
} kvcal_rope_type;

/* Layers whose kind (sliding or full attention) kvcal keeps: every layer a
 * config.json may state (KVCAL_CONFIG_MAX_LAYERS). */
#define KVCAL_LAYER_BITS 65536

/* LongRoPE factors kvcal keeps at most (one per rotated channel pair). */
#define KVCAL_ROPE_EXT_MAX 512

/* What an engine's KV cache holds for one token. Values only grow at the end. */
typedef enum kvcal_kv_layout {
    KVCAL_KV_PER_HEAD = 0, /* K and V, num_kv_heads x head_dim each, in each of
                              kv_layers layers */
    KVCAL_KV_MLA = 1,      /* one latent entry of kv_lora_rank + qk_rope_head_dim
                              values in each of kv_layers layers, no per-head K/V
                              (DeepSeek-V2/V3, Kimi K2: the config has kv_lora_rank) */
    KVCAL_KV_UNKNOWN = 2   /* layer_types names a kind of layer kvcal does not know */
} kvcal_kv_layout;

typedef struct kvcal_model_config {
    char model_type[128];    /* "llama", "mistral", "qwen2", "qwen3" */
    char architecture[128];  /* architectures[0], "LlamaForCausalLM" */
    /* 1: the language model's fields came from text_config (a multimodal
     * wrapper's config: Gemma 3, Mistral 3, Qwen3-VL, Kimi K2.5) */
    int text_config;
    /* 1: a multimodal model's config (text_config, or a vision_config beside
     * the language model's fields, as Qwen2.5-VL's released ones) */
    int multimodal;
    int num_layers;          /* num_hidden_layers */
    int hidden_size;
    int intermediate_size;
    int num_attention_heads;
    int num_kv_heads;        /* num_key_value_heads, defaults to num_attention_heads */
    int head_dim;            /* explicit, else hidden_size / num_attention_heads
                                (qwen3: 128, the transformers default) */
    int vocab_size;
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    kvcal_rope_type rope_type;
    double rope_factor;                /* linear/llama3/yarn factor */
    double rope_low_freq_factor;       /* llama3 */
    double rope_high_freq_factor;      /* llama3 */
    int rope_original_max_position;    /* llama3/yarn original_max_position_embeddings */
    double rope_attention_factor;      /* multiplies RoPE's cos and sin: yarn's
                                          attention factor, 1.0 otherwise */
    double rope_beta_fast;             /* yarn, 32 when absent or 0; else 0 */
    double rope_beta_slow;             /* yarn, 1 when absent or 0; else 0 */
    int rope_truncate;                 /* yarn: correction range floored/ceiled
                                          (truncate, default true); else 0 */
    double partial_rotary_factor;      /* 1.0 when absent */
    double rope_llama4_beta;           /* Ministral 3's llama_4_scaling_beta */
    double rope_alpha;                 /* Hunyuan's NTK alpha ("dynamic"), 0: none */
    int query_scaling_from;            /* > 0: Ministral 3's queries are scaled by
                                          it from this position on (its yarn
                                          original_max_position_embeddings) */
    /* longrope: the factors each frequency is divided by, as vLLM applies
     * them: long_factor when max_position_embeddings exceeds
     * original_max_position_embeddings (vLLM's default max_model_len then
     * takes the long factors for every position), else short_factor;
     * rope_attention_factor its scale (given, or sqrt(1 + ln(factor) /
     * ln(original)), factor max_position_embeddings / original) */
    float rope_ext_factor[KVCAL_ROPE_EXT_MAX];
    int rope_ext_factors;              /* entries of rope_ext_factor */
    int rope_ext_long;                 /* 1: the long factors */
    int tie_word_embeddings;
    int attention_bias;      /* q/k/v projections carry a bias (qwen2: 1) */
    int attention_out_bias;  /* Seed-OSS: o_proj carries a bias */
    int qk_norm;             /* q_norm / k_norm (qwen3: 1, per head; minimax_m2: 1, over
                                the whole projection) */
    int sliding_window;      /* 0 when none */
    int max_window_layers;   /* qwen2 / qwen3 with use_sliding_window: layers from
                                this index on slide (transformers' default 28);
                                -1 otherwise */
    int layer_types_given;   /* config.json lists layer_types (or Gemma 3's
                                sliding_window_pattern stands for them) */
    /* bit l of layer_sliding[l / 8]: layer l is a sliding_attention layer */
    unsigned char layer_sliding[KVCAL_LAYER_BITS / 8];
    char torch_dtype[16];    /* "bfloat16", "float16", "float32" or "" */
    int has_quantization_config;
    int has_kv_cache_scheme;
    char rope_type_name[32]; /* rope_type as written ("default", "llama3", ...) */
    int rope_interleave;     /* rope_interleave: 1 true, 0 false, -1 absent */

    /* The KV cache (see kvcal_model_config_kv_values_per_token). */
    kvcal_kv_layout kv_layout;
    int kv_lora_rank;        /* MLA: latent values cached per token and layer; else 0 */
    int qk_rope_head_dim;    /* MLA: RoPE channels cached beside the latent; else 0 */
    int qk_nope_head_dim;    /* MLA: q/k channels without RoPE; 0 when absent */
    int v_head_dim;          /* MLA: V channels per head; 0 when absent */
    int index_head_dim;      /* a sparse-attention indexer's key size (DeepSeek-V3.2),
                                cached beside the latent; 0 when none */
    int index_topk;          /* DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the
                                keys each query attends to; 0 when dense */
    int kv_layers;           /* layers that cache an entry per token: num_layers, or
                                the attention layers of layer_types /
                                full_attention_interval */
    int sliding_layers;      /* of those, layer_types' sliding_attention layers */
    /* bit l of layer_linear[l / 8]: layer l is a linear_attention layer (of
     * layer_types or full_attention_interval) */
    unsigned char layer_linear[KVCAL_LAYER_BITS / 8];
    char no_kv_layer_types[64];   /* the kinds of layer_types that cache nothing per
                                     token ("linear_attention", "conv", ...), joined
                                     by ", " */
    char unknown_layer_type[32];  /* KVCAL_KV_UNKNOWN: the first kind kvcal does not
                                     know; unknown_layer is its index */
    int unknown_layer;
    int kv_layout_known;     /* 1: model_type is a family whose cache kvcal knows;
                                0: the layout above is read from the fields alone and
                                assumes every such layer caches it */

    /* Mixture of experts (qwen2_moe, qwen3_moe, mixtral; all 0 for a dense
     * model), with the transformers class defaults where a field is absent. */
    int num_experts;             /* num_experts, or num_local_experts (Mixtral, and
                                    what transformers 5 writes for Qwen3-MoE) */
    int num_experts_per_tok;     /* top-k */
    int moe_intermediate_size;   /* each expert's; Mixtral: intermediate_size */
    int shared_expert_intermediate_size; /* Qwen2-MoE's shared expert, 0: none */
    int norm_topk_prob;          /* top-k weights renormalized to sum 1 (Mixtral: 1) */
    int decoder_sparse_step;     /* layer i is MoE when (i + 1) % step == 0 */
    int mlp_only_layers;         /* entries of mlp_only_layers (dense layers) */
    int first_dense_layers;      /* GLM's first_k_dense_replace: leading dense layers */
    int dense_layers;            /* layers with a dense MLP in a mixture of experts */
    /* bit l of layer_dense[l / 8]: layer l has a dense MLP (mlp_only_layers,
     * decoder_sparse_step, first_k_dense_replace) */
    unsigned char layer_dense[KVCAL_LAYER_BITS / 8];
    int moe_sigmoid;             /* GLM: sigmoid scores, chosen by score plus
                                    e_score_correction_bias (else softmax) */
    int moe_softmax_bias;        /* ERNIE 4.5: softmax probabilities, chosen by
                                    probability plus e_score_correction_bias */
    double routed_scaling_factor; /* the chosen weights' factor (1) */
    int moe_groups, moe_topk_groups; /* n_group, topk_group (1, 1): the experts in
                                        n_group groups, the top-k chosen among
                                        the topk_group best groups */

    /* Gemma 3 (gemma3_text; 0 elsewhere) */
    double query_pre_attn_scalar;  /* attention scale query_pre_attn_scalar^-0.5 */
    double rope_sliding_theta;     /* RoPE base of the sliding layers */
    double final_logit_softcapping; /* 0: none */
    double attn_logit_softcapping;  /* 0: none */

    /* DeepSeek-V2 / V3 and Kimi K2 (deepseek_v2, deepseek_v3, kimi_k2; 0
     * elsewhere), with the transformers class defaults where a field is
     * absent */
    int q_lora_rank;            /* the query's LoRA rank (q_a_proj, q_a_layernorm,
                                   q_b_proj); 0: q_proj (an explicit null) */
    int moe_group_max;          /* grouped top-k: a group scores its best expert
                                   (V2's group_limited_greedy); 0: its two best
                                   experts' sum (V3's noaux_tc, GLM) */
    char moe_scoring[16];       /* scoring_func as written ("softmax", "sigmoid"),
                                   "" when absent */
    double rope_mscale_all_dim; /* yarn's mscale_all_dim, 0 when absent: DeepSeek's
                                   softmax scale is times mscale(factor, it)^2 */
    char quant_method[24];      /* quantization_config.quant_method, "" when absent */
    int weight_block_size;      /* quantization_config.weight_block_size's rows
                                   (128: DeepSeek-V3's block-wise FP8), 0 when absent */

    /* The gated delta-net of Qwen3-Next's and Qwen3.5's linear-attention
     * layers (qwen3_next, qwen3_5_text, qwen3_5_moe_text; 0 elsewhere), with
     * the transformers class defaults where a field is absent */
    int linear_num_key_heads, linear_num_value_heads;
    int linear_key_head_dim, linear_value_head_dim;
    int linear_conv_kernel_dim;

    /* Llama 4's language model (llama4_text; 0 elsewhere), with the
     * transformers class defaults where a field is absent: layers without
     * RoPE (no_rope_layers' 0 entries, by default every
     * no_rope_layer_interval-th), whose queries are scaled by 1 +
     * attn_temperature_scale ln(1 + floor((pos + 1) / floor_scale)) when
     * attn_temperature_tuning; the layers with RoPE attend within chunks of
     * attention_chunk_size tokens and normalize q and k without a weight
     * after RoPE (qk_norm: use_qk_norm); the MoE layers every
     * interleave_moe_layer_step-th (layer_dense the others; intermediate_size
     * is intermediate_size_mlp, the dense layers', the experts' and the
     * shared expert's moe_intermediate_size) */
    unsigned char layer_nope[KVCAL_LAYER_BITS / 8]; /* bit l: layer l has no RoPE */
    int nope_layers;
    int attention_chunk_size;      /* 0: none */
    double attn_temperature_scale; /* attn_scale, 0 without attn_temperature_tuning */
    double attn_temperature_floor; /* floor_scale */

    /* IBM Granite's multipliers (granite, granitemoe, granitemoeshared; 0
     * elsewhere): of the embedding, of each block's output before its
     * residual add, of q k^T (instead of head_dim^-0.5), and the logits'
     * divisor */
    double embedding_multiplier, residual_multiplier, attention_multiplier;
    double logits_scaling;

    /* gpt-oss (gpt_oss; 0 elsewhere) */
    double swiglu_limit; /* the experts' SwiGLU clamp (7) */
    double swiglu_alpha; /* its sigmoid's gain (1.702) */
} kvcal_model_config;

/* Upper bounds on the sizes a config.json may state. Real models stay far
 * below them (about 130 layers, 128 heads, head_dim 256, hidden 16384,
 * vocabularies of 262144); they keep a hostile file from making the checkers
 * loop over billions of layers and heads or size buffers from nonsense, and
 * keep products such as layers * kv_heads * head_dim within int64. */
#define KVCAL_CONFIG_MAX_LAYERS 65536     /* num_hidden_layers */
#define KVCAL_CONFIG_MAX_HEADS 65536      /* num_attention_heads, num_key_value_heads */
#define KVCAL_CONFIG_MAX_HEAD_DIM 65536   /* head_dim */
#define KVCAL_CONFIG_MAX_HIDDEN (1 << 20) /* hidden_size */
#define KVCAL_CONFIG_MAX_VOCAB (1 << 27)  /* vocab_size */

#endif
