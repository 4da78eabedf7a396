/* calib/arch_expert_weights.h: the MLP weights of a mixture of experts named
 * alike in DeepSeek-V2/V3, GLM-4-MoE and Qwen's MoE checkpoints: the dense
 * layers' SwiGLU MLP, the router and each routed expert's tensors; and the
 * DeepSeek-style family's whole set, with its shared experts (the router's
 * correction bias, where a family has it, apart; Qwen's shared expert:
 * calib/arch_qwen_expert_weights.h), for a kvcal_arch's .weights. */
#ifndef KVCAL_CALIB_ARCH_EXPERT_WEIGHTS_H
#define KVCAL_CALIB_ARCH_EXPERT_WEIGHTS_H

#include "calib/arch.h"

// clang-format off
/* the dense layers' MLP and the MoE layers' router (Qwen3-VL-MoE's stacked
 * experts beside them are its own) */
#define KVCAL_ARCH_DENSE_AND_ROUTER_WEIGHTS                                                     \
    [KVCAL_W_GATE_UP] = {{{"mlp.gate_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN},          \
                          {"mlp.up_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN}},           \
                         KVCAL_WHEN_DENSE_LAYERS},                                              \
    [KVCAL_W_DOWN] = {{{"mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER}},            \
                      KVCAL_WHEN_DENSE_LAYERS},                                                 \
    [KVCAL_W_ROUTER] = {{{"mlp.gate.weight", KVCAL_DIM_EXPERTS, KVCAL_DIM_HIDDEN}},             \
                        KVCAL_WHEN_MOE_LAYERS}

/* a tensor per routed expert */
#define KVCAL_ARCH_NAMED_EXPERT_WEIGHTS                                                         \
    [KVCAL_W_EXPERT_GATE_UP] = {{{"mlp.experts.%d.gate_proj.weight", KVCAL_DIM_MOE_INTER, KVCAL_DIM_HIDDEN}, \
                                 {"mlp.experts.%d.up_proj.weight", KVCAL_DIM_MOE_INTER, KVCAL_DIM_HIDDEN}},  \
                                KVCAL_WHEN_MOE_LAYERS, KVCAL_EXPERTS_NAMED},                    \
    [KVCAL_W_EXPERT_DOWN] = {{{"mlp.experts.%d.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_MOE_INTER}}, \
                             KVCAL_WHEN_MOE_LAYERS, KVCAL_EXPERTS_NAMED}

/* DeepSeek's and GLM's: the above and the shared experts of every MoE layer */
#define KVCAL_ARCH_EXPERT_WEIGHTS                                                               \
    KVCAL_ARCH_DENSE_AND_ROUTER_WEIGHTS,                                                        \
    KVCAL_ARCH_NAMED_EXPERT_WEIGHTS,                                                            \
    [KVCAL_W_SHARED_GATE_UP] = {{{"mlp.shared_experts.gate_proj.weight", KVCAL_DIM_SHARED_INTER, KVCAL_DIM_HIDDEN}, \
                                 {"mlp.shared_experts.up_proj.weight", KVCAL_DIM_SHARED_INTER, KVCAL_DIM_HIDDEN}},  \
                                KVCAL_WHEN_MOE_LAYERS},                                         \
    [KVCAL_W_SHARED_DOWN] = {{{"mlp.shared_experts.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_SHARED_INTER}}, \
                             KVCAL_WHEN_MOE_LAYERS}
/* Mixtral's naming (MiniMax-M2's too): block_sparse_moe's router and each
 * expert's w1 (gate), w3 (up) and w2 (down) */
#define KVCAL_ARCH_BLOCK_SPARSE_MOE_WEIGHTS                                                     \
    [KVCAL_W_ROUTER] = {{{"block_sparse_moe.gate.weight", KVCAL_DIM_EXPERTS, KVCAL_DIM_HIDDEN}}}, \
    [KVCAL_W_EXPERT_GATE_UP] = {{{"block_sparse_moe.experts.%d.w1.weight", KVCAL_DIM_MOE_INTER, KVCAL_DIM_HIDDEN}, \
                                 {"block_sparse_moe.experts.%d.w3.weight", KVCAL_DIM_MOE_INTER, KVCAL_DIM_HIDDEN}}, \
                                KVCAL_WHEN_ALWAYS, KVCAL_EXPERTS_NAMED},                        \
    [KVCAL_W_EXPERT_DOWN] = {{{"block_sparse_moe.experts.%d.w2.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_MOE_INTER}}, \
                             KVCAL_WHEN_ALWAYS, KVCAL_EXPERTS_NAMED}
// clang-format on

#endif
