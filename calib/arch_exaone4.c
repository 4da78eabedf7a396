/* calib/arch_exaone4.c: Exaone4ForCausalLM (EXAONE 4.0 1.2B, 32B). A
 * post-norm decoder layer: the attention reads the residual stream itself
 * (no input norm): q/k/v projections, a per-head RMSNorm of q and k, RoPE
 * (halves) in the sliding layers of layer_types, or in every layer where
 * none slides (the other layers are NoPE), causal GQA attention within the
 * sliding window where the layer slides, o_proj, then an RMSNorm of that
 * output (post_attention_layernorm) before the residual add; the SwiGLU MLP
 * on the stream itself, its output normalized (post_feedforward_layernorm)
 * before the residual add. Every layer caches K and V (after the k norm and
 * RoPE: vLLM's Exaone4Attention). */
#include "calib/arch.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {"Exaone4ForCausalLM", NULL};

static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    (void)c;
    d->qkv_bias = d->o_bias = 0;
    d->qk_norm = 1;
    return KVCAL_OK;
}

static const char *const refused[] = {"self_attn.q_proj.bias", "self_attn.o_proj.bias",
                                      "input_layernorm.weight", NULL};

// clang-format off
static const kvcal_op layer[] = {
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_NONE,           KVCAL_W_NONE,   0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_QKV,   KVCAL_ACT_NORM,  KVCAL_W_QKV,            KVCAL_W_NONE,   0},
    {KVCAL_OP_QK_NORM_ROPE, KVCAL_ACT_QKV,   KVCAL_ACT_QKV,   KVCAL_W_Q_NORM,         KVCAL_W_K_NORM, 1},
    {KVCAL_OP_ATTENTION,    KVCAL_ACT_ATT,   KVCAL_ACT_QKV,   KVCAL_W_NONE,           KVCAL_W_NONE,   0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_ATT,   KVCAL_W_O,              KVCAL_W_NONE,   0},
    {KVCAL_OP_RMSNORM,      KVCAL_ACT_DELTA, KVCAL_ACT_DELTA, KVCAL_W_POST_ATTN_NORM, KVCAL_W_NONE,   0},
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_NONE,           KVCAL_W_NONE,   0},
    {KVCAL_OP_SWIGLU,       KVCAL_ACT_MLP,   KVCAL_ACT_NORM,  KVCAL_W_GATE_UP,        KVCAL_W_NONE,   0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_MLP,   KVCAL_W_DOWN,           KVCAL_W_NONE,   0},
    {KVCAL_OP_RMSNORM,      KVCAL_ACT_DELTA, KVCAL_ACT_DELTA, KVCAL_W_POST_FFN_NORM,  KVCAL_W_NONE,   0},
};

#define NORM(name, dim) {{{name, dim, KVCAL_DIM_NONE}}}

const kvcal_arch kvcal_arch_exaone4 = {
    .family = "exaone4",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        [KVCAL_W_QKV] = {{{"self_attn.q_proj.weight", KVCAL_DIM_Q, KVCAL_DIM_HIDDEN},
                          {"self_attn.k_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN},
                          {"self_attn.v_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_O] = {{{"self_attn.o_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_Q}}},
        [KVCAL_W_Q_NORM] = NORM("self_attn.q_norm.weight", KVCAL_DIM_HEAD),
        [KVCAL_W_K_NORM] = NORM("self_attn.k_norm.weight", KVCAL_DIM_HEAD),
        [KVCAL_W_POST_ATTN_NORM] = NORM("post_attention_layernorm.weight", KVCAL_DIM_HIDDEN),
        [KVCAL_W_GATE_UP] = {{{"mlp.gate_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN},
                              {"mlp.up_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_DOWN] = {{{"mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER}}},
        [KVCAL_W_POST_FFN_NORM] = NORM("post_feedforward_layernorm.weight", KVCAL_DIM_HIDDEN),
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
};
// clang-format on
