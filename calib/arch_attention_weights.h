/* calib/arch_attention_weights.h: the attention weights named alike in the
 * checkpoints of Llama, Mistral, Qwen, Mixtral, GLM-4.5, gpt-oss and
 * MiniMax-M2 (a pre-norm decoder layer's: input_layernorm, q/k/v_proj and
 * their optional biases, o_proj, post_attention_layernorm; and the per-head
 * q/k norms where a model has them), for a kvcal_arch's .weights. */
#ifndef KVCAL_CALIB_ARCH_ATTENTION_WEIGHTS_H
#define KVCAL_CALIB_ARCH_ATTENTION_WEIGHTS_H

#include "calib/arch.h"

// clang-format off
/* the norms around the attention, q/k/v (biases when desc->qkv_bias), o_proj */
#define KVCAL_ARCH_ATTENTION_WEIGHTS                                                            \
    [KVCAL_W_ATTN_NORM] = {{{"input_layernorm.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_NONE}}},     \
    [KVCAL_W_QKV] = {{{"self_attn.q_proj.weight", KVCAL_DIM_Q, KVCAL_DIM_HIDDEN},               \
                      {"self_attn.k_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN},              \
                      {"self_attn.v_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN}}},            \
    [KVCAL_W_QKV_BIAS] = {{{"self_attn.q_proj.bias", KVCAL_DIM_Q, KVCAL_DIM_NONE},              \
                           {"self_attn.k_proj.bias", KVCAL_DIM_KV, KVCAL_DIM_NONE},             \
                           {"self_attn.v_proj.bias", KVCAL_DIM_KV, KVCAL_DIM_NONE}},            \
                          KVCAL_WHEN_QKV_BIAS},                                                 \
    [KVCAL_W_O] = {{{"self_attn.o_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_Q}}},               \
    [KVCAL_W_FFN_NORM] = {{{"post_attention_layernorm.weight", KVCAL_DIM_HIDDEN,                \
                            KVCAL_DIM_NONE}}}

/* o_proj's bias, when desc->o_bias */
#define KVCAL_ARCH_O_BIAS_WEIGHT                                                                \
    [KVCAL_W_O_BIAS] = {{{"self_attn.o_proj.bias", KVCAL_DIM_HIDDEN, KVCAL_DIM_NONE}},          \
                        KVCAL_WHEN_O_BIAS}

/* a head's q and k RMSNorm weights, when desc->qk_norm */
#define KVCAL_ARCH_HEAD_QK_NORM_WEIGHTS                                                         \
    [KVCAL_W_Q_NORM] = {{{"self_attn.q_norm.weight", KVCAL_DIM_HEAD, KVCAL_DIM_NONE}},          \
                        KVCAL_WHEN_QK_NORM},                                                    \
    [KVCAL_W_K_NORM] = {{{"self_attn.k_norm.weight", KVCAL_DIM_HEAD, KVCAL_DIM_NONE}},          \
                        KVCAL_WHEN_QK_NORM}
// clang-format on

#endif
