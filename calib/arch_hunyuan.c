/* calib/arch_hunyuan.c: HunYuanMoEV1ForCausalLM (Hunyuan-A13B) and
 * HunYuanDenseV1ForCausalLM (Hunyuan dense, 0.5B-7B), as transformers
 * defines them and vLLM 0.32.0's Transformers backend serves them.
 *
 * A pre-norm decoder layer: RMSNorm, q/k/v projections (biases with
 * attention_bias, o_proj's too), RoPE (halves; a "dynamic" RoPE with an
 * alpha is the NTK-alpha base, io/checkpoint's reader), then
 * the per-head RMSNorms of q and k (query_layernorm, key_layernorm) after
 * RoPE: K is cached normalized. Causal GQA attention, o_proj, residual,
 * RMSNorm, then the dense model's SwiGLU MLP or the MoE model's mixture of
 * experts in every layer: softmax top-k renormalized (mlp.gate.wg, fp32),
 * each expert a SwiGLU MLP, plus the ungated shared MLP (mlp.shared_mlp) of
 * the same intermediate_size. */
#include <string.h>

#include "calib/arch.h"
#include "calib/arch_attention_weights.h"
#include "calib/arch_layer_ops.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const moe_architectures[] = {"HunYuanMoEV1ForCausalLM", NULL};
static const char *const dense_architectures[] = {"HunYuanDenseV1ForCausalLM", NULL};

static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    d->qkv_bias = d->o_bias = c->attention_bias;
    d->qk_norm = 1;
    d->qk_norm_after_rope = 1;
    if (strcmp(c->architecture, "HunYuanMoEV1ForCausalLM"))
        return KVCAL_OK;
    if (d->num_experts < 1 || d->experts_per_tok < 1 ||
        d->experts_per_tok > d->num_experts || d->moe_intermediate_size < 1)
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "config.json: %s needs num_experts >= 1, moe_topk in "
            "1..num_experts and intermediate_size >= 1 (found %d, %d and %d); "
            "fix the config",
            c->architecture, d->num_experts, d->experts_per_tok,
            d->moe_intermediate_size);
    return KVCAL_OK;
}

static const char *const refused[] = {"mlp.gate_proj.bias",
                                      "mlp.shared_mlp.gate_proj.bias", NULL};

// clang-format off
static const kvcal_op moe_layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA, KVCAL_ACT_NORM,  KVCAL_W_ROUTER,    KVCAL_W_NONE,     0},
};

static const kvcal_op dense_layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    KVCAL_ARCH_SWIGLU_MLP_OPS,
};

#define QK_NORMS                                                                                \
    [KVCAL_W_Q_NORM] = {{{"self_attn.query_layernorm.weight", KVCAL_DIM_HEAD, KVCAL_DIM_NONE}}}, \
    [KVCAL_W_K_NORM] = {{{"self_attn.key_layernorm.weight", KVCAL_DIM_HEAD, KVCAL_DIM_NONE}}}

const kvcal_arch kvcal_arch_hunyuan_moe = {
    .family = "hunyuan_moe",
    .architectures = moe_architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        KVCAL_ARCH_ATTENTION_WEIGHTS,
        KVCAL_ARCH_O_BIAS_WEIGHT,
        QK_NORMS,
        [KVCAL_W_ROUTER] = {{{"mlp.gate.wg.weight", KVCAL_DIM_EXPERTS, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_EXPERT_GATE_UP] = {{{"mlp.experts.%d.gate_proj.weight", KVCAL_DIM_MOE_INTER, KVCAL_DIM_HIDDEN},
                                     {"mlp.experts.%d.up_proj.weight", KVCAL_DIM_MOE_INTER, KVCAL_DIM_HIDDEN}},
                                    KVCAL_WHEN_ALWAYS, KVCAL_EXPERTS_NAMED},
        [KVCAL_W_EXPERT_DOWN] = {{{"mlp.experts.%d.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_MOE_INTER}},
                                 KVCAL_WHEN_ALWAYS, KVCAL_EXPERTS_NAMED},
        [KVCAL_W_SHARED_GATE_UP] = {{{"mlp.shared_mlp.gate_proj.weight", KVCAL_DIM_SHARED_INTER, KVCAL_DIM_HIDDEN},
                                     {"mlp.shared_mlp.up_proj.weight", KVCAL_DIM_SHARED_INTER, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_SHARED_DOWN] = {{{"mlp.shared_mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_SHARED_INTER}}},
    },
    .refused = refused,
    .describe = describe,
    .layer = moe_layer,
    .layer_ops = (int)(sizeof moe_layer / sizeof moe_layer[0]),
};

const kvcal_arch kvcal_arch_hunyuan_dense = {
    .family = "hunyuan_dense",
    .architectures = dense_architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        KVCAL_ARCH_ATTENTION_WEIGHTS,
        KVCAL_ARCH_O_BIAS_WEIGHT,
        QK_NORMS,
        [KVCAL_W_GATE_UP] = {{{"mlp.gate_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN},
                              {"mlp.up_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_DOWN] = {{{"mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER}}},
    },
    .refused = refused,
    .describe = describe,
    .layer = dense_layer,
    .layer_ops = (int)(sizeof dense_layer / sizeof dense_layer[0]),
};
// clang-format on
