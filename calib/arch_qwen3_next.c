/* calib/arch_qwen3_next.c: the hybrid families of Qwen3-Next and Qwen3.5:
 * Qwen3NextForCausalLM (Qwen3-Next-80B-A3B), Qwen3_5ForCausalLM (the dense
 * Qwen3.5 models' language model) and Qwen3_5MoeForCausalLM (the MoE
 * ones'), the multimodal Qwen3.5 wrappers' through calib/arch.c's table.
 *
 * Two kinds of layer, as layer_types (or Qwen3-Next's
 * full_attention_interval) lays them out, three linear-attention layers to
 * one attention layer in the released models:
 *   - attention: (1 + w) RMSNorm, q/k/v projections, per-head (1 + w) q/k
 *     RMSNorm, RoPE on the first quarter of each head (partial_rotary_factor,
 *     halves rotated), causal GQA attention (the K and V the engine caches),
 *     times sigmoid of the gate q_proj holds beside each head's query, o_proj;
 *   - linear attention: a gated delta-net (kernels/cpu/gated_delta.h), which
 *     caches no entry per token: its convolution and recurrent states have a
 *     fixed size, outside the KV cache and its scales;
 * each followed by (1 + w) RMSNorm and the MLP: a SwiGLU MLP (Qwen3.5),
 * or the experts (softmax top-k, renormalized where norm_topk_prob says,
 * always for Qwen3.5-MoE) beside a shared expert behind a sigmoid gate, with
 * Qwen3-Next's mlp_only_layers as dense layers.
 *
 * Checkpoint names: Qwen3-Next fuses the delta-net's input projections
 * (in_proj_qkvz, in_proj_ba, rows grouped by key head); Qwen3.5 keeps them
 * apart (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a). vLLM and sglang
 * cache K and V in the attention layers alone and load their scales by
 * those layers' indices (Qwen3-Next's under ModelOpt's names, the ones
 * sglang's loader of it maps: io/scales/scales_checkpoint.c). */
#include <string.h>

#include "calib/arch.h"
#include "calib/arch_qwen_expert_weights.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const next_architectures[] = {"Qwen3NextForCausalLM", NULL};
static const char *const qwen3_5_architectures[] = {"Qwen3_5ForCausalLM", NULL};
static const char *const qwen3_5_moe_architectures[] = {"Qwen3_5MoeForCausalLM", NULL};

/* config.json as io/model_config reads it (sizes, layer kinds, experts);
 * refused: a model without an attention layer (nothing to calibrate), a
 * delta-net without sizes (a model_type that has none). */
static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    if (d->linear_layers == d->num_layers)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "config.json: every layer of this %s is linear_attention: no "
                          "layer caches K and V; fix layer_types",
                          c->architecture);
    if (d->linear_layers &&
        (d->lin_k_heads < 1 || d->lin_v_heads < 1 || d->lin_v_heads % d->lin_k_heads ||
         d->lin_k_head_dim < 1 || d->lin_v_head_dim < 1 || d->lin_conv < 1))
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "config.json: %s's linear-attention layers need "
            "linear_num_key_heads, linear_num_value_heads (a multiple of "
            "it), linear_key_head_dim, linear_value_head_dim and "
            "linear_conv_kernel_dim >= 1 (model_type '%s' has none: "
            "qwen3_next, qwen3_5_text or qwen3_5_moe_text do); fix the config",
            c->architecture, c->model_type);
    d->qk_norm = 1;
    d->attn_gate = 1;
    d->norm_offset = 1.0f;
    if (!strcmp(c->architecture, "Qwen3_5ForCausalLM"))
        return KVCAL_OK;
    if (d->num_experts < 1 || d->experts_per_tok < 1 ||
        d->experts_per_tok > d->num_experts || d->moe_intermediate_size < 1 ||
        d->shared_intermediate_size < 1)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "config.json: %s needs num_experts >= 1, num_experts_per_tok "
                          "in 1..num_experts, moe_intermediate_size >= 1 and "
                          "shared_expert_intermediate_size >= 1 (found %d, %d, %d and "
                          "%d); fix the config",
                          c->architecture, d->num_experts, d->experts_per_tok,
                          d->moe_intermediate_size, d->shared_intermediate_size);
    return KVCAL_OK;
}

static const char *const refused[] = {"self_attn.q_proj.bias", "self_attn.o_proj.bias",
                                      "linear_attn.conv1d.bias", "mlp.gate.bias", NULL};

// clang-format off
/* the attention layer; its MLP the SwiGLU one (dense layers) or the experts */
static const kvcal_op attention_layer[] = {
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA,    KVCAL_W_ATTN_NORM,  KVCAL_W_NONE,   0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_QKV,   KVCAL_ACT_NORM,     KVCAL_W_QKV,        KVCAL_W_NONE,   0},
    {KVCAL_OP_QK_NORM_ROPE, KVCAL_ACT_QKV,   KVCAL_ACT_QKV,      KVCAL_W_Q_NORM,     KVCAL_W_K_NORM, 1},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_GATE,  KVCAL_ACT_NORM,     KVCAL_W_ATTN_GATE,  KVCAL_W_NONE,   0},
    {KVCAL_OP_ATTENTION,    KVCAL_ACT_ATT,   KVCAL_ACT_QKV,      KVCAL_W_NONE,       KVCAL_W_NONE,   0},
    {KVCAL_OP_SIGMOID_GATE, KVCAL_ACT_ATT,   KVCAL_ACT_GATE,     KVCAL_W_ATTN_GATE,  KVCAL_W_NONE,   0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_ATT,      KVCAL_W_O,          KVCAL_W_NONE,   0},
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA,    KVCAL_W_FFN_NORM,   KVCAL_W_NONE,   0},
    {KVCAL_OP_SWIGLU,       KVCAL_ACT_MLP,   KVCAL_ACT_NORM,     KVCAL_W_GATE_UP,    KVCAL_W_NONE,   0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_MLP,      KVCAL_W_DOWN,       KVCAL_W_NONE,   0},
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA, KVCAL_ACT_NORM,     KVCAL_W_ROUTER,     KVCAL_W_NONE,   0},
};

/* the linear-attention layer, its MLP as the attention layer's */
static const kvcal_op linear_layer[] = {
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,     KVCAL_ACT_DELTA,    KVCAL_W_ATTN_NORM, KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_LIN_QKVZ, KVCAL_ACT_NORM,     KVCAL_W_LIN_QKVZ,  KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_LIN_BA,   KVCAL_ACT_NORM,     KVCAL_W_LIN_BA,    KVCAL_W_NONE, 0},
    {KVCAL_OP_GATED_DELTA,  KVCAL_ACT_LIN_OUT,  KVCAL_ACT_LIN_QKVZ, KVCAL_W_LIN_CONV,  KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA,    KVCAL_ACT_LIN_OUT,  KVCAL_W_LIN_OUT,   KVCAL_W_NONE, 0},
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,     KVCAL_ACT_DELTA,    KVCAL_W_FFN_NORM,  KVCAL_W_NONE, 0},
    {KVCAL_OP_SWIGLU,       KVCAL_ACT_MLP,      KVCAL_ACT_NORM,     KVCAL_W_GATE_UP,   KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA,    KVCAL_ACT_MLP,      KVCAL_W_DOWN,      KVCAL_W_NONE, 0},
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA,    KVCAL_ACT_NORM,     KVCAL_W_ROUTER,    KVCAL_W_NONE, 0},
};

#define ATTN KVCAL_WHEN_ATTENTION_LAYERS
#define LIN KVCAL_WHEN_LINEAR_LAYERS
#define NORM(name, dim, when) {{{name, dim, KVCAL_DIM_NONE}}, when, 0, 1}
#define VECTOR(name, dim) {{{name, dim, KVCAL_DIM_NONE}}, LIN}

/* every layer's norms, the attention layers' weights and the delta-net's
 * that both namings share */
#define HYBRID_WEIGHTS                                                                          \
    [KVCAL_W_ATTN_NORM] = NORM("input_layernorm.weight", KVCAL_DIM_HIDDEN, KVCAL_WHEN_ALWAYS), \
    [KVCAL_W_FFN_NORM] = NORM("post_attention_layernorm.weight", KVCAL_DIM_HIDDEN,             \
                              KVCAL_WHEN_ALWAYS),                                               \
    [KVCAL_W_QKV] = {{{"self_attn.q_proj.weight", KVCAL_DIM_Q, KVCAL_DIM_HIDDEN,                \
                       KVCAL_PART_HEAD_FIRST},                                                  \
                      {"self_attn.k_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN},              \
                      {"self_attn.v_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN}}, ATTN,       \
                     .fused = 1},                                                               \
    [KVCAL_W_ATTN_GATE] = {{{"self_attn.q_proj.weight", KVCAL_DIM_Q, KVCAL_DIM_HIDDEN,          \
                             KVCAL_PART_HEAD_SECOND}}, ATTN, .fused = 1},                       \
    [KVCAL_W_Q_NORM] = NORM("self_attn.q_norm.weight", KVCAL_DIM_HEAD, ATTN),                  \
    [KVCAL_W_K_NORM] = NORM("self_attn.k_norm.weight", KVCAL_DIM_HEAD, ATTN),                  \
    [KVCAL_W_O] = {{{"self_attn.o_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_Q}}, ATTN},         \
    [KVCAL_W_LIN_CONV] = {{{"linear_attn.conv1d.weight", KVCAL_DIM_LIN_QKV, KVCAL_DIM_LIN_CONV, \
                            KVCAL_PART_CONV1D}}, LIN},                                          \
    [KVCAL_W_LIN_A_LOG] = VECTOR("linear_attn.A_log", KVCAL_DIM_LIN_HEADS),                    \
    [KVCAL_W_LIN_DT_BIAS] = VECTOR("linear_attn.dt_bias", KVCAL_DIM_LIN_HEADS),                \
    [KVCAL_W_LIN_NORM] = VECTOR("linear_attn.norm.weight", KVCAL_DIM_LIN_V_HEAD),              \
    [KVCAL_W_LIN_OUT] = {{{"linear_attn.out_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_LIN_V}}, LIN}

/* Qwen3.5's delta-net input projections, apart */
#define QWEN3_5_LINEAR_WEIGHTS                                                                  \
    [KVCAL_W_LIN_QKVZ] = {{{"linear_attn.in_proj_qkv.weight", KVCAL_DIM_LIN_QKV, KVCAL_DIM_HIDDEN}, \
                           {"linear_attn.in_proj_z.weight", KVCAL_DIM_LIN_V, KVCAL_DIM_HIDDEN}},  \
                          LIN},                                                                 \
    [KVCAL_W_LIN_BA] = {{{"linear_attn.in_proj_b.weight", KVCAL_DIM_LIN_HEADS, KVCAL_DIM_HIDDEN}, \
                         {"linear_attn.in_proj_a.weight", KVCAL_DIM_LIN_HEADS, KVCAL_DIM_HIDDEN}}, \
                        LIN}

#define HYBRID_FAMILY(name, archs)                                                              \
    .family = name, .architectures = archs, .layer_prefix = "model.layers.%d.",                 \
    .embed = "model.embed_tokens.weight", .final_norm = "model.norm.weight",                    \
    .lm_head = "lm_head.weight", .refused = refused, .describe = describe,                      \
    .layer = attention_layer,                                                                   \
    .layer_ops = (int)(sizeof attention_layer / sizeof attention_layer[0]),                     \
    .linear_layer = linear_layer,                                                               \
    .linear_layer_ops = (int)(sizeof linear_layer / sizeof linear_layer[0])

const kvcal_arch kvcal_arch_qwen3_next = {
    HYBRID_FAMILY("qwen3_next", next_architectures),
    .weights = {
        HYBRID_WEIGHTS,
        KVCAL_ARCH_DENSE_AND_ROUTER_WEIGHTS,
        KVCAL_ARCH_QWEN_EXPERT_WEIGHTS,
        [KVCAL_W_LIN_QKVZ] = {{{"linear_attn.in_proj_qkvz.weight", KVCAL_DIM_LIN_QKVZ, KVCAL_DIM_HIDDEN,
                                KVCAL_PART_GDN_GROUPED}}, LIN},
        [KVCAL_W_LIN_BA] = {{{"linear_attn.in_proj_ba.weight", KVCAL_DIM_LIN_2HEADS, KVCAL_DIM_HIDDEN,
                              KVCAL_PART_GDN_GROUPED}}, LIN},
    },
};

const kvcal_arch kvcal_arch_qwen3_5 = {
    HYBRID_FAMILY("qwen3_5", qwen3_5_architectures),
    .weights = {
        HYBRID_WEIGHTS,
        QWEN3_5_LINEAR_WEIGHTS,
        [KVCAL_W_GATE_UP] = {{{"mlp.gate_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN},
                              {"mlp.up_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_DOWN] = {{{"mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER}}},
    },
};

const kvcal_arch kvcal_arch_qwen3_5_moe = {
    HYBRID_FAMILY("qwen3_5_moe", qwen3_5_moe_architectures),
    .weights = {
        HYBRID_WEIGHTS,
        QWEN3_5_LINEAR_WEIGHTS,
        KVCAL_ARCH_DENSE_AND_ROUTER_WEIGHTS,
        KVCAL_ARCH_QWEN_EXPERT_WEIGHTS,
    },
};
// clang-format on
