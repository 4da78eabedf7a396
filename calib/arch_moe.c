/* calib/arch_moe.c: the mixture-of-experts family: Qwen3MoeForCausalLM
 * (Qwen3-30B-A3B, Qwen3-235B-A22B: per-head q/k RMSNorm), Qwen2MoeForCausalLM
 * (q/k/v biases, a shared expert behind a sigmoid gate) and
 * MixtralForCausalLM (a sliding window when configured), under two naming
 * schemes of their checkpoints (Qwen's mlp.experts.<e>.gate_proj, Mixtral's
 * block_sparse_moe.experts.<e>.w1).
 *
 * A pre-norm decoder layer: RMSNorm, fused QKV projection, optional per-head
 * q/k norm, RoPE (the K and V the engine caches), causal GQA attention
 * (windowed), o_proj, residual, RMSNorm, the mixture of experts (softmax
 * top-k routing, each expert a SwiGLU MLP, and the gated shared expert),
 * residual. Every layer holds a cache in vLLM and sglang alike. With
 * use_sliding_window, Qwen3-MoE's window applies to every layer and
 * Qwen2-MoE's to its layer_types' sliding layers (io/model_config). */
#include <stdio.h>
#include <string.h>

#include "calib/arch.h"
#include "calib/arch_attention_weights.h"
#include "calib/arch_layer_ops.h"
#include "calib/arch_qwen_expert_weights.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const qwen_architectures[] = {"Qwen2MoeForCausalLM",
                                                 "Qwen3MoeForCausalLM", NULL};
/* Qwen3-VL-MoE's language model has no class of its own: its wrapper
 * (calib/arch.c) names this family */
static const char *const no_architectures[] = {NULL};
static const char *const mixtral_architectures[] = {"MixtralForCausalLM", NULL};

/* config.json: Qwen2-MoE has q/k/v biases (never o), Qwen3-MoE attention_bias
 * (q/k/v and o) and q/k norm, Mixtral neither; the experts and Qwen's dense
 * layers (mlp_only_layers, decoder_sparse_step) as io/model_config reads
 * them. */
static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    const int qwen2 = !strcmp(c->architecture, "Qwen2MoeForCausalLM");
    const int qwen3 = !strcmp(c->architecture, "Qwen3MoeForCausalLM");
    d->qkv_bias = qwen2 || (qwen3 && c->attention_bias);
    d->o_bias = qwen3 && c->attention_bias;
    d->qk_norm = qwen3;
    if (!qwen2)
        d->shared_intermediate_size = 0;
    if (d->num_experts < 1 || d->experts_per_tok < 1 ||
        d->experts_per_tok > d->num_experts || d->moe_intermediate_size < 1 ||
        (qwen2 && d->shared_intermediate_size < 1))
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "config.json: %s needs num_experts >= 1, num_experts_per_tok in "
            "1..num_experts and moe_intermediate_size >= 1%s (found %d, %d "
            "and %d, shared expert %d); fix the config",
            c->architecture, qwen2 ? ", shared_expert_intermediate_size >= 1" : "",
            d->num_experts, d->experts_per_tok, d->moe_intermediate_size,
            d->shared_intermediate_size);
    return KVCAL_OK;
}

static const char *const refused[] = {"mlp.gate.bias", NULL};

// clang-format off
static const kvcal_op layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA, KVCAL_ACT_NORM,  KVCAL_W_ROUTER,    KVCAL_W_NONE,     0},
};

/* Qwen's dense layers: the same attention, a SwiGLU MLP */
static const kvcal_op dense_layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    KVCAL_ARCH_SWIGLU_MLP_OPS,
};

#define ATTENTION_WEIGHTS \
    KVCAL_ARCH_ATTENTION_WEIGHTS, KVCAL_ARCH_O_BIAS_WEIGHT, KVCAL_ARCH_HEAD_QK_NORM_WEIGHTS

const kvcal_arch kvcal_arch_qwen_moe = {
    .family = "qwen_moe",
    .architectures = qwen_architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        ATTENTION_WEIGHTS,
        KVCAL_ARCH_DENSE_AND_ROUTER_WEIGHTS,
        KVCAL_ARCH_QWEN_EXPERT_WEIGHTS,
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
    .dense_layer = dense_layer,
    .dense_layer_ops = (int)(sizeof dense_layer / sizeof dense_layer[0]),
};

static const char *const mixtral_refused[] = {"block_sparse_moe.gate.bias", NULL};

const kvcal_arch kvcal_arch_mixtral = {
    .family = "mixtral",
    .architectures = mixtral_architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        ATTENTION_WEIGHTS,
        KVCAL_ARCH_BLOCK_SPARSE_MOE_WEIGHTS,
    },
    .refused = mixtral_refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
};
/* Qwen3-VL-MoE's language model (Qwen3VLMoeForConditionalGeneration's):
 * Qwen3-MoE's layers with the experts of a layer in two tensors, as
 * released and as vLLM loads them (is_fused_checkpoint_transposed):
 * gate_up_proj (experts, hidden, 2 inter), gate's columns then up's, and
 * down_proj (experts, inter, hidden). Its bf16 checkpoints alone (the FP8
 * ones' fused experts are not read yet: float_weights_only). */
#define STACKED(name, rows, cols) \
    {{{name, rows, cols, KVCAL_PART_TRANSPOSED}}, KVCAL_WHEN_MOE_LAYERS, KVCAL_EXPERTS_STACKED}

const kvcal_arch kvcal_arch_qwen3_vl_moe = {
    .family = "qwen3_vl_moe",
    .architectures = no_architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        ATTENTION_WEIGHTS,
        KVCAL_ARCH_DENSE_AND_ROUTER_WEIGHTS,
        [KVCAL_W_EXPERT_GATE_UP] = STACKED("mlp.experts.gate_up_proj", KVCAL_DIM_2MOE_INTER,
                                           KVCAL_DIM_HIDDEN),
        [KVCAL_W_EXPERT_DOWN] = STACKED("mlp.experts.down_proj", KVCAL_DIM_HIDDEN,
                                        KVCAL_DIM_MOE_INTER),
    },
    .refused = refused,
    .describe = describe,
    .float_weights_only = 1,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
    .dense_layer = dense_layer,
    .dense_layer_ops = (int)(sizeof dense_layer / sizeof dense_layer[0]),
};
// clang-format on
