/* calib/arch_deepseek.c: the DeepSeek family: DeepseekV2ForCausalLM
 * (DeepSeek-V2, V2-Lite) and DeepseekV3ForCausalLM (DeepSeek-V3, R1, Kimi
 * K2), multi-head latent attention and a mixture of experts; and
 * Glm4MoeLiteForCausalLM (GLM-4.7-Flash), whose layers are V3's (transformers'
 * Glm4MoeLiteAttention is DeepseekV3Attention, its router and experts
 * DeepSeek-V3's; vLLM and sglang run it on their DeepSeek-V2 MLA attention):
 * only its layer plan (mlp_layer_types) and defaults differ. Also
 * DeepseekV32ForCausalLM (DeepSeek-V3.2) and GlmMoeDsaForCausalLM (GLM-5):
 * V3's layers with DeepSeek Sparse Attention, where an indexer keeps
 * index_topk keys a query; up to index_topk tokens a sample that is every
 * key (transformers' top-k then masks none), so kvcal runs them dense on
 * such samples, without the indexer's weights, and refuses longer ones
 * (kvcal_model_desc.sparse_topk).
 *
 * A pre-norm decoder layer: RMSNorm; the query, through its LoRA
 * (q_a_proj, q_a_layernorm, q_b_proj) or q_proj; kv_a_proj_with_mqa into
 * the latent (kv_lora_rank) and the RoPE part (qk_rope_head_dim);
 * kv_a_layernorm of the latent and RoPE of the RoPE part and of the
 * query's (the entry the engines cache, one per token and layer); kv_b_proj
 * expanding the latent into every head's K (no RoPE) and V; causal
 * attention of q = [q_nope, q_rope] on k = [k_nope, the shared RoPE part]
 * (scaled by (qk_nope + qk_rope)^-0.5, times yarn's mscale(factor,
 * mscale_all_dim)^2); o_proj, residual; RMSNorm; the leading dense layers'
 * SwiGLU MLP (first_k_dense_replace, moe_layer_freq), else the experts:
 * V2 a softmax top-k (grouped under group_limited_greedy), V3 sigmoids
 * chosen by score plus e_score_correction_bias in groups (noaux_tc), both
 * times routed_scaling_factor, plus n_shared_experts ungated shared
 * experts; residual. The multi-token-prediction layer past
 * num_hidden_layers is not run (engines serve it apart).
 *
 * FP8 checkpoints (the released V3 / R1 / Kimi K2 blocks among them) run
 * as vLLM serves them: q_a_proj and kv_a_proj_with_mqa as its one
 * fused_qkv_a_proj, kv_b_proj as the quantized linear layer its MLA
 * prefill runs on the cached latent (kv_b_proj(kv_c_normed)). */
#include <math.h>
#include <string.h>

#include "calib/arch.h"
#include "calib/arch_expert_weights.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const v2_architectures[] = {"DeepseekV2ForCausalLM", NULL};
static const char *const v3_architectures[] = {
    "DeepseekV3ForCausalLM", "Glm4MoeLiteForCausalLM", "DeepseekV32ForCausalLM",
    "GlmMoeDsaForCausalLM", NULL};

/* yarn's get_mscale (transformers' and vLLM's yarn_get_mscale). */
static double mscale(double factor, double m)
{
    return factor <= 1.0 ? 1.0 : 0.1 * m * log(factor) + 1.0;
}

/* config.json: the MLA sizes (kv_lora_rank, q_lora_rank, qk_nope_head_dim,
 * qk_rope_head_dim, v_head_dim), the experts as io/model_config reads
 * them, yarn's mscale_all_dim. Refused: attention_bias (vLLM's DeepSeek
 * has none), a V3 config with rope_interleave false (transformers then
 * rotates halves, vLLM interleaved pairs whatever the flag), scoring other
 * than the architecture's (softmax for V2, sigmoid for V3) and a
 * GLM-4.7-Flash partial_rotary_factor other than 1 (transformers' GLM rotary
 * table rotates that share of qk_rope_head_dim, the engines' DeepSeek
 * rotary all of it). DeepSeek-V3.2's and GLM-5's attention rotates
 * interleaved pairs whatever rope_interleave says. */
static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    const int v3 = strcmp(c->architecture, "DeepseekV2ForCausalLM") != 0;
    const int dsa = c->index_topk > 0;
    const char *scoring = v3 ? "sigmoid" : "softmax";
    if (c->kv_layout != KVCAL_KV_MLA || c->qk_nope_head_dim < 1 || c->v_head_dim < 1)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "config.json: %s needs kv_lora_rank, qk_rope_head_dim, "
                          "qk_nope_head_dim and v_head_dim (its multi-head latent "
                          "attention); add them",
                          c->architecture);
    if (c->attention_bias)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "config.json: %s with attention_bias true is not supported: "
                          "vLLM's DeepSeek projections have no bias; the released "
                          "checkpoints set it false",
                          c->architecture);
    if (v3 && !dsa && c->rope_interleave == 0)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "config.json: %s with rope_interleave false is not supported: "
            "transformers then rotates halves of the RoPE part while vLLM "
            "and sglang rotate interleaved pairs, so the cached entry depends "
            "on the engine; remove the field (true is the default)",
            c->architecture);
    if (!strcmp(c->architecture, "Glm4MoeLiteForCausalLM") &&
        c->partial_rotary_factor != 1.0)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "config.json: %s with partial_rotary_factor %g is not "
                          "supported: transformers would rotate that share of "
                          "qk_rope_head_dim, vLLM and sglang all of it; the released "
                          "config sets 1.0",
                          c->architecture, c->partial_rotary_factor);
    if (c->moe_scoring[0] && strcmp(c->moe_scoring, scoring))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "config.json: %s with scoring_func \"%s\" is not supported; "
                          "transformers' %s scores experts with a %s",
                          c->architecture, c->moe_scoring, c->architecture, scoring);
    if (dsa && !c->q_lora_rank)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "config.json: %s needs q_lora_rank (its attention has no "
                          "q_proj); set it",
                          c->architecture);
    kvcal_status st = kvcal_model_check_routed_experts(d, c->architecture);
    if (st)
        return st;
    d->mla = 1;
    d->sparse_topk = c->index_topk;
    d->q_lora_rank = c->q_lora_rank;
    d->kv_lora_rank = c->kv_lora_rank;
    d->qk_nope_head_dim = c->qk_nope_head_dim;
    d->qk_rope_head_dim = c->qk_rope_head_dim;
    d->v_head_dim = c->v_head_dim;
    d->num_kv_heads = 1;
    d->head_dim = c->kv_lora_rank + c->qk_rope_head_dim;
    d->qkv_bias = d->o_bias = d->qk_norm = 0;
    d->moe_sigmoid = v3;
    double scale = 1.0 / sqrt((double)(c->qk_nope_head_dim + c->qk_rope_head_dim));
    if (c->rope_type == KVCAL_ROPE_YARN && c->rope_mscale_all_dim != 0.0) {
        const double m = mscale(c->rope_factor, c->rope_mscale_all_dim);
        scale *= m * m;
    }
    if (!((float)scale > 0.0f) || !isfinite((float)scale))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "config.json: %s's softmax scale, (qk_nope_head_dim + "
                          "qk_rope_head_dim)^-0.5 times yarn's mscale(factor, "
                          "mscale_all_dim)^2, is %g, which a float does not hold as a "
                          "number > 0; fix rope_parameters.mscale_all_dim",
                          c->architecture, scale);
    d->attn_scale = (float)scale;
    return KVCAL_OK;
}

/* attention_bias's tensors (checked in layer 0, which attends in every layer) */
static const char *const refused[] = {"self_attn.q_a_proj.bias",
                                      "self_attn.kv_a_proj_with_mqa.bias",
                                      "self_attn.o_proj.bias", NULL};

// clang-format off
#define ATTENTION_OPS                                                                               \
    {KVCAL_OP_ADD_RMSNORM, KVCAL_ACT_NORM,   KVCAL_ACT_DELTA,  KVCAL_W_ATTN_NORM, KVCAL_W_NONE, 0}, \
    {KVCAL_OP_LINEAR,      KVCAL_ACT_Q_A,    KVCAL_ACT_NORM,   KVCAL_W_Q_A,       KVCAL_W_NONE, 0}, \
    {KVCAL_OP_RMSNORM,     KVCAL_ACT_Q_A,    KVCAL_ACT_Q_A,    KVCAL_W_Q_A_NORM,  KVCAL_W_NONE, 0}, \
    {KVCAL_OP_LINEAR,      KVCAL_ACT_Q,      KVCAL_ACT_Q_A,    KVCAL_W_Q_B,       KVCAL_W_NONE, 0}, \
    {KVCAL_OP_LINEAR,      KVCAL_ACT_Q,      KVCAL_ACT_NORM,   KVCAL_W_Q_PROJ,    KVCAL_W_NONE, 0}, \
    {KVCAL_OP_LINEAR,      KVCAL_ACT_LATENT, KVCAL_ACT_NORM,   KVCAL_W_KV_A,      KVCAL_W_NONE, 0}, \
    {KVCAL_OP_MLA_LATENT,  KVCAL_ACT_LATENT, KVCAL_ACT_LATENT, KVCAL_W_KV_A_NORM, KVCAL_W_NONE, 1}, \
    {KVCAL_OP_MLA_EXPAND,  KVCAL_ACT_NONE,   KVCAL_ACT_LATENT, KVCAL_W_KV_B,      KVCAL_W_NONE, 0}, \
    {KVCAL_OP_ATTENTION,   KVCAL_ACT_ATT,    KVCAL_ACT_Q,      KVCAL_W_NONE,      KVCAL_W_NONE, 0}, \
    {KVCAL_OP_LINEAR,      KVCAL_ACT_DELTA,  KVCAL_ACT_ATT,    KVCAL_W_O,         KVCAL_W_NONE, 0}, \
    {KVCAL_OP_ADD_RMSNORM, KVCAL_ACT_NORM,   KVCAL_ACT_DELTA,  KVCAL_W_FFN_NORM,  KVCAL_W_NONE, 0}

static const kvcal_op v2_layer[] = {
    ATTENTION_OPS,
    {KVCAL_OP_MOE,         KVCAL_ACT_DELTA,  KVCAL_ACT_NORM,   KVCAL_W_ROUTER,    KVCAL_W_NONE, 0},
};

static const kvcal_op v3_layer[] = {
    ATTENTION_OPS,
    {KVCAL_OP_MOE,         KVCAL_ACT_DELTA,  KVCAL_ACT_NORM,   KVCAL_W_ROUTER,    KVCAL_W_ROUTER_BIAS, 0},
};

static const kvcal_op dense_layer[] = {
    ATTENTION_OPS,
    {KVCAL_OP_SWIGLU,      KVCAL_ACT_MLP,    KVCAL_ACT_NORM,   KVCAL_W_GATE_UP,   KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,      KVCAL_ACT_DELTA,  KVCAL_ACT_MLP,    KVCAL_W_DOWN,      KVCAL_W_NONE, 0},
};

#define WEIGHTS                                                                                                          \
    [KVCAL_W_ATTN_NORM] = {{{"input_layernorm.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_NONE}}},                              \
    [KVCAL_W_Q_A] = {{{"self_attn.q_a_proj.weight", KVCAL_DIM_Q_LORA, KVCAL_DIM_HIDDEN}}, KVCAL_WHEN_Q_LORA, .fused = 1}, \
    [KVCAL_W_Q_A_NORM] = {{{"self_attn.q_a_layernorm.weight", KVCAL_DIM_Q_LORA, KVCAL_DIM_NONE}}, KVCAL_WHEN_Q_LORA},    \
    [KVCAL_W_Q_B] = {{{"self_attn.q_b_proj.weight", KVCAL_DIM_MLA_Q, KVCAL_DIM_Q_LORA}}, KVCAL_WHEN_Q_LORA},             \
    [KVCAL_W_Q_PROJ] = {{{"self_attn.q_proj.weight", KVCAL_DIM_MLA_Q, KVCAL_DIM_HIDDEN}}, KVCAL_WHEN_NO_Q_LORA},         \
    [KVCAL_W_KV_A] = {{{"self_attn.kv_a_proj_with_mqa.weight", KVCAL_DIM_KV_A, KVCAL_DIM_HIDDEN}}, .fused = 1},          \
    [KVCAL_W_KV_A_NORM] = {{{"self_attn.kv_a_layernorm.weight", KVCAL_DIM_KV_LORA, KVCAL_DIM_NONE}}},                    \
    [KVCAL_W_KV_B] = {{{"self_attn.kv_b_proj.weight", KVCAL_DIM_KV_B, KVCAL_DIM_KV_LORA}}},                              \
    [KVCAL_W_O] = {{{"self_attn.o_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_MLA_O}}},                                    \
    [KVCAL_W_FFN_NORM] = {{{"post_attention_layernorm.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_NONE}}},                      \
    KVCAL_ARCH_EXPERT_WEIGHTS

const kvcal_arch kvcal_arch_deepseek_v2 = {
    .family = "deepseek",
    .architectures = v2_architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {WEIGHTS},
    .refused = refused,
    .describe = describe,
    .layer = v2_layer,
    .layer_ops = (int)(sizeof v2_layer / sizeof v2_layer[0]),
    .dense_layer = dense_layer,
    .dense_layer_ops = (int)(sizeof dense_layer / sizeof dense_layer[0]),
};

const kvcal_arch kvcal_arch_deepseek_v3 = {
    .family = "deepseek",
    .architectures = v3_architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {WEIGHTS,
                [KVCAL_W_ROUTER_BIAS] = {{{"mlp.gate.e_score_correction_bias", KVCAL_DIM_EXPERTS,
                                           KVCAL_DIM_NONE}},
                                         KVCAL_WHEN_MOE_LAYERS}},
    .refused = refused,
    .describe = describe,
    .layer = v3_layer,
    .layer_ops = (int)(sizeof v3_layer / sizeof v3_layer[0]),
    .dense_layer = dense_layer,
    .dense_layer_ops = (int)(sizeof dense_layer / sizeof dense_layer[0]),
};
// clang-format on
