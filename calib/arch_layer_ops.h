/* calib/arch_layer_ops.h: the op rows of a pre-norm decoder layer that
 * Llama, Qwen's MoE models, GLM-4.5, MiniMax-M2, ERNIE 4.5, Hunyuan and
 * Granite MoE share, for a kvcal_arch's .layer: RMSNorm, the QKV projection
 * (its biases), the q/k norms and RoPE (the cache point), attention, o_proj
 * (its bias), RMSNorm; then a SwiGLU MLP or the family's MoE op. A weight a
 * family lacks (no q/k norm, no bias) is absent and the op runs without it. */
#ifndef KVCAL_CALIB_ARCH_LAYER_OPS_H
#define KVCAL_CALIB_ARCH_LAYER_OPS_H

#include "calib/arch.h"

// clang-format off
#define KVCAL_ARCH_ATTENTION_OPS                                                                       \
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_ATTN_NORM, KVCAL_W_NONE,     0}, \
    {KVCAL_OP_LINEAR,       KVCAL_ACT_QKV,   KVCAL_ACT_NORM,  KVCAL_W_QKV,       KVCAL_W_QKV_BIAS, 0}, \
    {KVCAL_OP_QK_NORM_ROPE, KVCAL_ACT_QKV,   KVCAL_ACT_QKV,   KVCAL_W_Q_NORM,    KVCAL_W_K_NORM,   1}, \
    {KVCAL_OP_ATTENTION,    KVCAL_ACT_ATT,   KVCAL_ACT_QKV,   KVCAL_W_NONE,      KVCAL_W_NONE,     0}, \
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_ATT,   KVCAL_W_O,         KVCAL_W_O_BIAS,   0}, \
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_FFN_NORM,  KVCAL_W_NONE,     0}

#define KVCAL_ARCH_SWIGLU_MLP_OPS                                                                      \
    {KVCAL_OP_SWIGLU,       KVCAL_ACT_MLP,   KVCAL_ACT_NORM,  KVCAL_W_GATE_UP,   KVCAL_W_NONE,     0}, \
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_MLP,   KVCAL_W_DOWN,      KVCAL_W_NONE,     0}
// clang-format on

#endif
