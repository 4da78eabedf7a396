/* calib/arch_granite.c: IBM Granite's MoE model, GraniteMoeForCausalLM
 * (Granite 3.0 MoE): the dense Granite's layers (GraniteForCausalLM, in the
 * Llama family; its four multipliers read by calib/model.c for both) with
 * the experts in two stacked tensors (block_sparse_moe.input_linear
 * (experts, 2 inter, hidden): gate's rows then up's; output_linear
 * (experts, hidden, inter)), the top-k router logits softmaxed. Every layer
 * caches K and V (vLLM's granitemoe.py). */
#include "calib/arch.h"
#include "calib/arch_attention_weights.h"
#include "calib/arch_layer_ops.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {"GraniteMoeForCausalLM", NULL};

static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    d->qkv_bias = d->o_bias = c->attention_bias;
    if (d->experts_per_tok < 1 || d->experts_per_tok > d->num_experts ||
        d->moe_intermediate_size < 1)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "config.json: %s needs num_local_experts >= 1, "
                          "num_experts_per_tok in 1..num_local_experts and "
                          "intermediate_size >= 1 (found %d, %d and %d); fix the config",
                          c->architecture, d->num_experts, d->experts_per_tok,
                          d->moe_intermediate_size);
    return KVCAL_OK;
}

static const char *const refused[] = {"block_sparse_moe.router.layer.bias", NULL};

// clang-format off
static const kvcal_op layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA, KVCAL_ACT_NORM,  KVCAL_W_ROUTER,    KVCAL_W_NONE,     0},
};

const kvcal_arch kvcal_arch_granite_moe = {
    .family = "granite_moe",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        KVCAL_ARCH_ATTENTION_WEIGHTS,
        KVCAL_ARCH_O_BIAS_WEIGHT,
        [KVCAL_W_ROUTER] = {{{"block_sparse_moe.router.layer.weight", KVCAL_DIM_EXPERTS, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_EXPERT_GATE_UP] = {{{"block_sparse_moe.input_linear.weight", KVCAL_DIM_2MOE_INTER, KVCAL_DIM_HIDDEN}},
                                    KVCAL_WHEN_ALWAYS, KVCAL_EXPERTS_STACKED},
        [KVCAL_W_EXPERT_DOWN] = {{{"block_sparse_moe.output_linear.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_MOE_INTER}},
                                 KVCAL_WHEN_ALWAYS, KVCAL_EXPERTS_STACKED},
    },
    .refused = refused,
    .describe = describe,
    .float_weights_only = 1,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
};
// clang-format on
