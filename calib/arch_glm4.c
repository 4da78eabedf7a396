/* calib/arch_glm4.c: GLM-4's dense decoder: Glm4ForCausalLM (GLM-4-9B-0414,
 * GLM-4-32B-0414, GLM-Z1), and the language model of Glm4vForConditionalGeneration
 * (GLM-4.1V-Thinking, GLM-4.6V-Flash: its wrapper row is in calib/arch.c).
 *
 * A layer: RMSNorm, q/k/v projections with biases (attention_bias), RoPE
 * on interleaved pairs (2i, 2i + 1) of the first partial_rotary_factor of
 * each head (the K and V the engines cache: vLLM's Glm4Attention,
 * is_neox_style False), causal GQA attention, o_proj, an RMSNorm of the
 * attention's output (post_self_attn_layernorm) before the residual add;
 * RMSNorm, a SwiGLU MLP whose gate and up rows are one tensor
 * (gate_up_proj), an RMSNorm of its output (post_mlp_layernorm) before the
 * residual add. Every layer caches K and V; the multi-token-prediction
 * layers past num_hidden_layers are not run (vLLM drops them). */
#include "calib/arch.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {"Glm4ForCausalLM", NULL};

static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    d->qkv_bias = c->attention_bias;
    d->o_bias = 0;
    d->qk_norm = 0;
    d->rope_interleaved = 1;
    return KVCAL_OK;
}

static const char *const refused[] = {"self_attn.o_proj.bias", "mlp.gate_up_proj.bias",
                                      "mlp.down_proj.bias", NULL};

// clang-format off
static const kvcal_op layer[] = {
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_ATTN_NORM,      KVCAL_W_NONE,     0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_QKV,   KVCAL_ACT_NORM,  KVCAL_W_QKV,            KVCAL_W_QKV_BIAS, 0},
    {KVCAL_OP_QK_NORM_ROPE, KVCAL_ACT_QKV,   KVCAL_ACT_QKV,   KVCAL_W_NONE,           KVCAL_W_NONE,     1},
    {KVCAL_OP_ATTENTION,    KVCAL_ACT_ATT,   KVCAL_ACT_QKV,   KVCAL_W_NONE,           KVCAL_W_NONE,     0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_ATT,   KVCAL_W_O,              KVCAL_W_NONE,     0},
    {KVCAL_OP_RMSNORM,      KVCAL_ACT_DELTA, KVCAL_ACT_DELTA, KVCAL_W_POST_ATTN_NORM, KVCAL_W_NONE,     0},
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_FFN_NORM,       KVCAL_W_NONE,     0},
    {KVCAL_OP_SWIGLU,       KVCAL_ACT_MLP,   KVCAL_ACT_NORM,  KVCAL_W_GATE_UP,        KVCAL_W_NONE,     0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_MLP,   KVCAL_W_DOWN,           KVCAL_W_NONE,     0},
    {KVCAL_OP_RMSNORM,      KVCAL_ACT_DELTA, KVCAL_ACT_DELTA, KVCAL_W_POST_FFN_NORM,  KVCAL_W_NONE,     0},
};

#define NORM(name) {{{name, KVCAL_DIM_HIDDEN, KVCAL_DIM_NONE}}}

const kvcal_arch kvcal_arch_glm4 = {
    .family = "glm4",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        [KVCAL_W_ATTN_NORM] = NORM("input_layernorm.weight"),
        [KVCAL_W_QKV] = {{{"self_attn.q_proj.weight", KVCAL_DIM_Q, KVCAL_DIM_HIDDEN},
                          {"self_attn.k_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN},
                          {"self_attn.v_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_QKV_BIAS] = {{{"self_attn.q_proj.bias", KVCAL_DIM_Q, KVCAL_DIM_NONE},
                               {"self_attn.k_proj.bias", KVCAL_DIM_KV, KVCAL_DIM_NONE},
                               {"self_attn.v_proj.bias", KVCAL_DIM_KV, KVCAL_DIM_NONE}},
                              KVCAL_WHEN_QKV_BIAS},
        [KVCAL_W_O] = {{{"self_attn.o_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_Q}}},
        [KVCAL_W_POST_ATTN_NORM] = NORM("post_self_attn_layernorm.weight"),
        [KVCAL_W_FFN_NORM] = NORM("post_attention_layernorm.weight"),
        [KVCAL_W_GATE_UP] = {{{"mlp.gate_up_proj.weight", KVCAL_DIM_2INTER, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_DOWN] = {{{"mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER}}},
        [KVCAL_W_POST_FFN_NORM] = NORM("post_mlp_layernorm.weight"),
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
};
// clang-format on
