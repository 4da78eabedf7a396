/* calib/arch_gemma.c: the Gemma family's text models: Gemma2ForCausalLM
 * and Gemma3ForCausalLM (model_type gemma3_text). RMSNorms whose weight is
 * used as 1 + w, norms before and after the attention and the MLP (sandwich
 * norms), the attention scaled by query_pre_attn_scalar^-0.5, sliding-window
 * layers (layer_types, or every sliding_window_pattern-th layer global), a
 * GELU-tanh gated MLP, the embedding scaled by sqrt(hidden_size). Gemma 3
 * adds a per-head q/k norm and the sliding layers' own RoPE base beside the
 * global layers' (scaled) RoPE; Gemma 2 soft-caps the attention scores and
 * the logits (cap * tanh(x / cap)). Every layer caches K and V, the sliding
 * ones over their window. */
#include <math.h>
#include <string.h>

#include "calib/arch.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {"Gemma2ForCausalLM", "Gemma3ForCausalLM",
                                            NULL};

/* attention_bias (q/k/v and o), q/k norm (Gemma 3), the (1 + w) norms, the
 * embedding's scale, the soft caps. */
static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    d->qkv_bias = d->o_bias = c->attention_bias;
    d->qk_norm = c->qk_norm;
    d->attn_softcap = (float)c->attn_logit_softcapping;
    d->logit_softcap = (float)c->final_logit_softcapping;
    d->norm_offset = 1.0f;
    d->embed_scale = sqrtf((float)c->hidden_size);
    return KVCAL_OK;
}

static const char *const refused[] = {"mlp.gate_proj.bias", "mlp.up_proj.bias",
                                      "mlp.down_proj.bias", NULL};

// clang-format off
static const kvcal_op layer[] = {
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_ATTN_NORM,      KVCAL_W_NONE,     0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_QKV,   KVCAL_ACT_NORM,  KVCAL_W_QKV,            KVCAL_W_QKV_BIAS, 0},
    {KVCAL_OP_QK_NORM_ROPE, KVCAL_ACT_QKV,   KVCAL_ACT_QKV,   KVCAL_W_Q_NORM,         KVCAL_W_K_NORM,   1},
    {KVCAL_OP_ATTENTION,    KVCAL_ACT_ATT,   KVCAL_ACT_QKV,   KVCAL_W_NONE,           KVCAL_W_NONE,     0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_ATT,   KVCAL_W_O,              KVCAL_W_O_BIAS,   0},
    {KVCAL_OP_RMSNORM,      KVCAL_ACT_DELTA, KVCAL_ACT_DELTA, KVCAL_W_POST_ATTN_NORM, KVCAL_W_NONE,     0},
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_FFN_NORM,       KVCAL_W_NONE,     0},
    {KVCAL_OP_GEGLU,        KVCAL_ACT_MLP,   KVCAL_ACT_NORM,  KVCAL_W_GATE_UP,        KVCAL_W_NONE,     0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_MLP,   KVCAL_W_DOWN,           KVCAL_W_NONE,     0},
    {KVCAL_OP_RMSNORM,      KVCAL_ACT_DELTA, KVCAL_ACT_DELTA, KVCAL_W_POST_FFN_NORM,  KVCAL_W_NONE,     0},
};

#define NORM(name, dim) {{{name, dim, KVCAL_DIM_NONE}}, KVCAL_WHEN_ALWAYS, 0, 1}

const kvcal_arch kvcal_arch_gemma = {
    .family = "gemma",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        [KVCAL_W_ATTN_NORM] = NORM("input_layernorm.weight", KVCAL_DIM_HIDDEN),
        [KVCAL_W_QKV] = {{{"self_attn.q_proj.weight", KVCAL_DIM_Q, KVCAL_DIM_HIDDEN},
                          {"self_attn.k_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN},
                          {"self_attn.v_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_QKV_BIAS] = {{{"self_attn.q_proj.bias", KVCAL_DIM_Q, KVCAL_DIM_NONE},
                               {"self_attn.k_proj.bias", KVCAL_DIM_KV, KVCAL_DIM_NONE},
                               {"self_attn.v_proj.bias", KVCAL_DIM_KV, KVCAL_DIM_NONE}},
                              KVCAL_WHEN_QKV_BIAS},
        [KVCAL_W_O] = {{{"self_attn.o_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_Q}}},
        [KVCAL_W_O_BIAS] = {{{"self_attn.o_proj.bias", KVCAL_DIM_HIDDEN, KVCAL_DIM_NONE}},
                            KVCAL_WHEN_O_BIAS},
        [KVCAL_W_Q_NORM] = {{{"self_attn.q_norm.weight", KVCAL_DIM_HEAD, KVCAL_DIM_NONE}},
                            KVCAL_WHEN_QK_NORM, 0, 1},
        [KVCAL_W_K_NORM] = {{{"self_attn.k_norm.weight", KVCAL_DIM_HEAD, KVCAL_DIM_NONE}},
                            KVCAL_WHEN_QK_NORM, 0, 1},
        [KVCAL_W_POST_ATTN_NORM] = NORM("post_attention_layernorm.weight", KVCAL_DIM_HIDDEN),
        [KVCAL_W_FFN_NORM] = NORM("pre_feedforward_layernorm.weight", KVCAL_DIM_HIDDEN),
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
