/* calib/arch_granite.c: IBM Granite: GraniteForCausalLM (Granite 3.x dense)
 * and GraniteMoeForCausalLM (Granite 3.0 MoE). Llama's pre-norm layers with four
 * multipliers: the embedding times embedding_multiplier, q k^T times attention_multiplier
 * (instead of head_dim^-0.5), each block's output times residual_multiplier before its
 * residual add, the logits divided by logits_scaling. The MoE models'
 * experts in two stacked tensors (block_sparse_moe.input_linear (experts, 2
 * inter, hidden): gate's rows then up's; output_linear (experts, hidden,
 * inter)), the top-k router logits softmaxed. Every layer caches K and V
 * (vLLM's granite.py, granitemoe.py). */
#include "calib/arch.h"
#include "calib/arch_attention_weights.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const dense_architectures[] = {"GraniteForCausalLM", NULL};
static const char *const moe_architectures[] = {"GraniteMoeForCausalLM", NULL};

static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    d->qkv_bias = d->o_bias = c->attention_bias;
    d->qk_norm = 0;
    d->embed_scale = (float)c->embedding_multiplier;
    d->attn_scale = (float)c->attention_multiplier;
    d->residual_scale = (float)c->residual_multiplier;
    d->logit_divisor = (float)c->logits_scaling;
    if (d->num_experts &&
        (d->experts_per_tok < 1 || d->experts_per_tok > d->num_experts ||
         d->moe_intermediate_size < 1))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "config.json: %s needs num_local_experts >= 1, "
                          "num_experts_per_tok in 1..num_local_experts and "
                          "intermediate_size >= 1 (found %d, %d and %d); fix the config",
                          c->architecture, d->num_experts, d->experts_per_tok,
                          d->moe_intermediate_size);
    return KVCAL_OK;
}

static const char *const refused[] = {"mlp.gate_proj.bias", "mlp.down_proj.bias",
                                      "block_sparse_moe.router.layer.bias", NULL};

// clang-format off
#define ATTENTION_OPS                                                                                  \
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_ATTN_NORM, KVCAL_W_NONE,     0}, \
    {KVCAL_OP_LINEAR,       KVCAL_ACT_QKV,   KVCAL_ACT_NORM,  KVCAL_W_QKV,       KVCAL_W_QKV_BIAS, 0}, \
    {KVCAL_OP_QK_NORM_ROPE, KVCAL_ACT_QKV,   KVCAL_ACT_QKV,   KVCAL_W_NONE,      KVCAL_W_NONE,     1}, \
    {KVCAL_OP_ATTENTION,    KVCAL_ACT_ATT,   KVCAL_ACT_QKV,   KVCAL_W_NONE,      KVCAL_W_NONE,     0}, \
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_ATT,   KVCAL_W_O,         KVCAL_W_O_BIAS,   0}, \
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_FFN_NORM,  KVCAL_W_NONE,     0}

static const kvcal_op dense_layer[] = {
    ATTENTION_OPS,
    {KVCAL_OP_SWIGLU,       KVCAL_ACT_MLP,   KVCAL_ACT_NORM,  KVCAL_W_GATE_UP,   KVCAL_W_NONE,     0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_MLP,   KVCAL_W_DOWN,      KVCAL_W_NONE,     0},
};

static const kvcal_op moe_layer[] = {
    ATTENTION_OPS,
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA, KVCAL_ACT_NORM,  KVCAL_W_ROUTER,    KVCAL_W_NONE,     0},
};

const kvcal_arch kvcal_arch_granite = {
    .family = "granite",
    .architectures = dense_architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        KVCAL_ARCH_ATTENTION_WEIGHTS,
        KVCAL_ARCH_O_BIAS_WEIGHT,
        [KVCAL_W_GATE_UP] = {{{"mlp.gate_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN},
                              {"mlp.up_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_DOWN] = {{{"mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER}}},
    },
    .refused = refused,
    .describe = describe,
    .layer = dense_layer,
    .layer_ops = (int)(sizeof dense_layer / sizeof dense_layer[0]),
};

const kvcal_arch kvcal_arch_granite_moe = {
    .family = "granite_moe",
    .architectures = moe_architectures,
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
    .layer = moe_layer,
    .layer_ops = (int)(sizeof moe_layer / sizeof moe_layer[0]),
};
// clang-format on
