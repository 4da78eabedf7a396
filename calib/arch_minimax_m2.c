/* calib/arch_minimax_m2.c: MiniMaxM2ForCausalLM (MiniMax-M2, M2.1, M2.5).
 * Every layer a full-attention GQA layer and a mixture of experts. The
 * attention's q/k norms are RMSNorms over the whole projection (its config's
 * qk_norm_type "per_layer": one RMS over every head's channels, a weight a
 * channel; transformers' and vLLM's q_norm of num_heads x head_dim), before
 * partial RoPE (rotary_dim of each head, halves); the experts Mixtral's
 * (block_sparse_moe.experts.<e>.w1/w2/w3), chosen by sigmoid score plus
 * e_score_correction_bias and weighted by their sigmoids, renormalized
 * (io/model_config reads scoring_func and use_routing_bias). Every layer
 * caches K and V; the multi-token-prediction modules past num_hidden_layers
 * are not run (vLLM drops them). */
#include "calib/arch.h"
#include "calib/arch_attention_weights.h"
#include "calib/arch_expert_weights.h"
#include "calib/arch_layer_ops.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {"MiniMaxM2ForCausalLM", NULL};

static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    d->qkv_bias = c->attention_bias;
    d->o_bias = 0;
    d->qk_norm = 1;
    d->qk_norm_whole = 1;
    d->shared_intermediate_size = 0;
    if (d->num_experts < 1 || d->experts_per_tok < 1 ||
        d->experts_per_tok > d->num_experts || d->moe_intermediate_size < 1)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "config.json: %s needs num_local_experts >= 1, "
                          "num_experts_per_tok in 1..num_local_experts and "
                          "intermediate_size >= 1 (found %d, %d and %d); fix the config",
                          c->architecture, d->num_experts, d->experts_per_tok,
                          d->moe_intermediate_size);
    return KVCAL_OK;
}

static const char *const refused[] = {"self_attn.o_proj.bias",
                                      "block_sparse_moe.gate.bias", NULL};

// clang-format off
static const kvcal_op layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA, KVCAL_ACT_NORM,  KVCAL_W_ROUTER,    KVCAL_W_ROUTER_BIAS, 0},
};

const kvcal_arch kvcal_arch_minimax_m2 = {
    .family = "minimax_m2",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        KVCAL_ARCH_ATTENTION_WEIGHTS,
        /* over the whole projection: a weight per channel of every head */
        [KVCAL_W_Q_NORM] = {{{"self_attn.q_norm.weight", KVCAL_DIM_Q, KVCAL_DIM_NONE}}},
        [KVCAL_W_K_NORM] = {{{"self_attn.k_norm.weight", KVCAL_DIM_KV, KVCAL_DIM_NONE}}},
        [KVCAL_W_ROUTER_BIAS] = {{{"block_sparse_moe.e_score_correction_bias", KVCAL_DIM_EXPERTS,
                                   KVCAL_DIM_NONE}}},
        KVCAL_ARCH_BLOCK_SPARSE_MOE_WEIGHTS,
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
};
// clang-format on
