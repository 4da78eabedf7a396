/* calib/arch_qwen_expert_weights.h: the MLP weights of Qwen's mixtures of
 * experts (Qwen2-MoE, Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE checkpoints): each
 * expert's tensors (calib/arch_expert_weights.h) and the shared expert
 * behind its sigmoid gate (where the model has one), for a kvcal_arch's
 * .weights beside KVCAL_ARCH_DENSE_AND_ROUTER_WEIGHTS. */
#ifndef KVCAL_CALIB_ARCH_QWEN_EXPERT_WEIGHTS_H
#define KVCAL_CALIB_ARCH_QWEN_EXPERT_WEIGHTS_H

#include "calib/arch.h"
#include "calib/arch_expert_weights.h"

// clang-format off
/* a tensor per expert and the shared expert (none where the model's
 * shared_expert_intermediate_size is 0: Qwen3-MoE) */
#define KVCAL_ARCH_QWEN_EXPERT_WEIGHTS                                                          \
    KVCAL_ARCH_NAMED_EXPERT_WEIGHTS,                                                            \
    [KVCAL_W_SHARED_GATE_UP] = {{{"mlp.shared_expert.gate_proj.weight", KVCAL_DIM_SHARED_INTER, KVCAL_DIM_HIDDEN}, \
                                 {"mlp.shared_expert.up_proj.weight", KVCAL_DIM_SHARED_INTER, KVCAL_DIM_HIDDEN}},  \
                                KVCAL_WHEN_SHARED_EXPERT},                                      \
    [KVCAL_W_SHARED_DOWN] = {{{"mlp.shared_expert.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_SHARED_INTER}}, \
                             KVCAL_WHEN_SHARED_EXPERT},                                         \
    [KVCAL_W_SHARED_GATE] = {{{"mlp.shared_expert_gate.weight", KVCAL_DIM_ONE, KVCAL_DIM_HIDDEN}}, \
                             KVCAL_WHEN_SHARED_EXPERT}
// clang-format on

#endif
