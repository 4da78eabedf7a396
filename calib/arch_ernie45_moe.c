/* calib/arch_ernie45_moe.c: Ernie4_5_MoeForCausalLM (ERNIE-4.5-21B-A3B,
 * ERNIE-4.5-300B-A47B). A pre-norm decoder layer: RMSNorm, GQA attention
 * with RoPE on interleaved pairs (2i, 2i + 1) of the whole head (vLLM's
 * Ernie4_5_MoeAttention: is_neox_style False), RMSNorm, then a SwiGLU MLP
 * in the dense layers (those outside moe_layer_start_index ..
 * moe_layer_end_index, or not a multiple of moe_layer_interval) or a
 * mixture of experts: the softmax of the router's logits (fp32), the top-k
 * chosen by probability plus e_score_correction_bias (stored (1, experts)
 * as mlp.moe_statics's), weighted by the probabilities renormalized, plus
 * the ungated shared experts (one MLP of moe_num_shared_experts x
 * moe_intermediate_size). Every layer caches K and V; the
 * multi-token-prediction modules (mtp_*) are not run. */
#include "calib/arch.h"
#include "calib/arch_attention_weights.h"
#include "calib/arch_expert_weights.h"
#include "calib/arch_layer_ops.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {"Ernie4_5_MoeForCausalLM", NULL};

static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    d->qkv_bias = d->o_bias = 0;
    d->qk_norm = 0;
    d->rope_interleaved = 1;
    if (d->num_experts < 1 || d->experts_per_tok < 1 ||
        d->experts_per_tok > d->num_experts || d->moe_intermediate_size < 1 ||
        d->shared_intermediate_size < 1)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "config.json: %s needs moe_num_experts >= 1, moe_k in "
                          "1..moe_num_experts, moe_intermediate_size and "
                          "moe_num_shared_experts >= 1, as released (found %d, %d, %d, "
                          "shared experts of %d); fix the config",
                          c->architecture, d->num_experts, d->experts_per_tok,
                          d->moe_intermediate_size, d->shared_intermediate_size);
    return KVCAL_OK;
}

static const char *const refused[] = {"self_attn.q_proj.bias", "self_attn.o_proj.bias",
                                      "mlp.gate_proj.bias", NULL};

// clang-format off
static const kvcal_op layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA, KVCAL_ACT_NORM,  KVCAL_W_ROUTER,    KVCAL_W_ROUTER_BIAS, 0},
};

static const kvcal_op dense_layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    KVCAL_ARCH_SWIGLU_MLP_OPS,
};

const kvcal_arch kvcal_arch_ernie45_moe = {
    .family = "ernie45_moe",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        KVCAL_ARCH_ATTENTION_WEIGHTS,
        KVCAL_ARCH_EXPERT_WEIGHTS,
        /* (1, experts) as the checkpoints hold it */
        [KVCAL_W_ROUTER_BIAS] = {{{"mlp.moe_statics.e_score_correction_bias", KVCAL_DIM_ONE,
                                   KVCAL_DIM_EXPERTS}}, KVCAL_WHEN_MOE_LAYERS},
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
    .dense_layer = dense_layer,
    .dense_layer_ops = (int)(sizeof dense_layer / sizeof dense_layer[0]),
};
// clang-format on
