/* calib/arch_qwen_expert_weights.h: the MLP weights of Qwen's mixtures of
 * experts, named alike in Qwen2-MoE, Qwen3-MoE, Qwen3-Next and Qwen3.5-MoE
 * checkpoints: the dense layers' SwiGLU MLP (mlp_only_layers,
 * decoder_sparse_step), the router, each expert's tensors and the shared
 * expert behind its sigmoid gate (where the model has one), for a
 * kvcal_arch's .weights. */
#ifndef KVCAL_CALIB_ARCH_QWEN_EXPERT_WEIGHTS_H
#define KVCAL_CALIB_ARCH_QWEN_EXPERT_WEIGHTS_H

#include "calib/arch.h"

// clang-format off
/* the dense layers' MLP and the MoE layers' router (Qwen3-VL-MoE's stacked
 * experts beside them are its own) */
#define KVCAL_ARCH_QWEN_DENSE_AND_ROUTER_WEIGHTS                                                \
    [KVCAL_W_GATE_UP] = {{{"mlp.gate_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN},          \
                          {"mlp.up_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN}},           \
                         KVCAL_WHEN_DENSE_LAYERS},                                              \
    [KVCAL_W_DOWN] = {{{"mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER}},            \
                      KVCAL_WHEN_DENSE_LAYERS},                                                 \
    [KVCAL_W_ROUTER] = {{{"mlp.gate.weight", KVCAL_DIM_EXPERTS, KVCAL_DIM_HIDDEN}},             \
                        KVCAL_WHEN_MOE_LAYERS}

/* a tensor per expert and the shared expert (none where the model's
 * shared_expert_intermediate_size is 0: Qwen3-MoE) */
#define KVCAL_ARCH_QWEN_EXPERT_WEIGHTS                                                          \
    [KVCAL_W_EXPERT_GATE_UP] = {{{"mlp.experts.%d.gate_proj.weight", KVCAL_DIM_MOE_INTER, KVCAL_DIM_HIDDEN}, \
                                 {"mlp.experts.%d.up_proj.weight", KVCAL_DIM_MOE_INTER, KVCAL_DIM_HIDDEN}},  \
                                KVCAL_WHEN_MOE_LAYERS, KVCAL_EXPERTS_NAMED},                    \
    [KVCAL_W_EXPERT_DOWN] = {{{"mlp.experts.%d.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_MOE_INTER}}, \
                             KVCAL_WHEN_MOE_LAYERS, KVCAL_EXPERTS_NAMED},                       \
    [KVCAL_W_SHARED_GATE_UP] = {{{"mlp.shared_expert.gate_proj.weight", KVCAL_DIM_SHARED_INTER, KVCAL_DIM_HIDDEN}, \
                                 {"mlp.shared_expert.up_proj.weight", KVCAL_DIM_SHARED_INTER, KVCAL_DIM_HIDDEN}},  \
                                KVCAL_WHEN_SHARED_EXPERT},                                      \
    [KVCAL_W_SHARED_DOWN] = {{{"mlp.shared_expert.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_SHARED_INTER}}, \
                             KVCAL_WHEN_SHARED_EXPERT},                                         \
    [KVCAL_W_SHARED_GATE] = {{{"mlp.shared_expert_gate.weight", KVCAL_DIM_ONE, KVCAL_DIM_HIDDEN}}, \
                             KVCAL_WHEN_SHARED_EXPERT}
// clang-format on

#endif
