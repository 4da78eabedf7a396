/* calib/arch_glm4_moe.c: the GLM-4.5 family: Glm4MoeForCausalLM (GLM-4.5,
 * GLM-4.5-Air, GLM-4.6). Leading dense layers (first_k_dense_replace) with a
 * SwiGLU MLP, then mixture-of-experts layers: sigmoid scores chosen by score
 * plus e_score_correction_bias, top-k renormalized and times
 * routed_scaling_factor (in n_group groups, the topk_group best ones open),
 * and n_shared_experts ungated shared experts (one MLP
 * of n_shared x moe_intermediate_size). Partial rotary (0.5), q/k/v biases
 * (attention_bias), an optional per-head q/k norm (use_qk_norm). Every layer
 * caches K and V; the multi-token-prediction layer past num_hidden_layers
 * is not run (engines serve it apart). */
#include "calib/arch.h"
#include "calib/arch_attention_weights.h"
#include "calib/arch_expert_weights.h"
#include "calib/arch_layer_ops.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {"Glm4MoeForCausalLM", NULL};

/* Grouped top-k (n_group > 1) as DeepSeek-V3's: groups scored by their two
 * best experts' sum. */
static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    d->qkv_bias = c->attention_bias;
    d->o_bias = 0;
    d->qk_norm = c->qk_norm;
    return kvcal_model_check_routed_experts(d, c->architecture);
}

static const char *const refused[] = {"self_attn.o_proj.bias", "mlp.gate.bias", NULL};

// clang-format off
static const kvcal_op layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA, KVCAL_ACT_NORM,  KVCAL_W_ROUTER,    KVCAL_W_ROUTER_BIAS, 0},
};

static const kvcal_op dense_layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    KVCAL_ARCH_SWIGLU_MLP_OPS,
};

const kvcal_arch kvcal_arch_glm4_moe = {
    .family = "glm4_moe",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        KVCAL_ARCH_ATTENTION_WEIGHTS,
        KVCAL_ARCH_HEAD_QK_NORM_WEIGHTS,
        [KVCAL_W_ROUTER_BIAS] = {{{"mlp.gate.e_score_correction_bias", KVCAL_DIM_EXPERTS,
                                   KVCAL_DIM_NONE}},
                                 KVCAL_WHEN_MOE_LAYERS},
        KVCAL_ARCH_EXPERT_WEIGHTS,
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
    .dense_layer = dense_layer,
    .dense_layer_ops = (int)(sizeof dense_layer / sizeof dense_layer[0]),
};
// clang-format on
