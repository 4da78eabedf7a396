/* calib/arch_post_norm.c: the post-norm decoders, whose attention and MLP
 * read the residual stream itself (no input norm) and whose outputs are
 * normalized (post_attention_layernorm, post_feedforward_layernorm) before
 * the residual adds; q and k RMS-normalized before RoPE; every layer caches
 * K and V (after the k norm and RoPE).
 *
 * Exaone4ForCausalLM (EXAONE 4.0 1.2B, 32B): the q/k norms per head; RoPE
 * (halves) in the sliding layers of layer_types, or in every layer where
 * none slides (the other layers are NoPE: vLLM's Exaone4Attention), causal
 * GQA attention within the sliding window where the layer slides.
 *
 * Olmo2ForCausalLM and Olmo3ForCausalLM (OLMo 2, Olmo 3): the q/k norms over
 * the whole projection (every head's channels at once), RoPE in every
 * layer; Olmo 3's sliding layers of layer_types with RoPE of their own
 * (rope_parameters.sliding_attention: its legacy rope_scaling stretches the
 * full-attention layers' alone). vLLM 0.32.0 serves OLMo through its
 * Transformers modeling backend (transformers' modules). */
#include <string.h>

#include "calib/arch.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const exaone4_architectures[] = {"Exaone4ForCausalLM", NULL};
static const char *const olmo_architectures[] = {"Olmo2ForCausalLM", "Olmo3ForCausalLM",
                                                 NULL};

static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    d->qkv_bias = d->o_bias = 0;
    d->qk_norm = 1;
    d->qk_norm_whole = !strcmp(c->architecture, "Olmo2ForCausalLM") ||
                       !strcmp(c->architecture, "Olmo3ForCausalLM");
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

/* every weight but the q/k norms, whose size differs */
#define POST_NORM_WEIGHTS                                                                       \
    [KVCAL_W_QKV] = {{{"self_attn.q_proj.weight", KVCAL_DIM_Q, KVCAL_DIM_HIDDEN},               \
                      {"self_attn.k_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN},              \
                      {"self_attn.v_proj.weight", KVCAL_DIM_KV, KVCAL_DIM_HIDDEN}}},            \
    [KVCAL_W_O] = {{{"self_attn.o_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_Q}}},               \
    [KVCAL_W_POST_ATTN_NORM] = NORM("post_attention_layernorm.weight", KVCAL_DIM_HIDDEN),       \
    [KVCAL_W_GATE_UP] = {{{"mlp.gate_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN},          \
                          {"mlp.up_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN}}},          \
    [KVCAL_W_DOWN] = {{{"mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER}}},           \
    [KVCAL_W_POST_FFN_NORM] = NORM("post_feedforward_layernorm.weight", KVCAL_DIM_HIDDEN)

const kvcal_arch kvcal_arch_exaone4 = {
    .family = "exaone4",
    .architectures = exaone4_architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        POST_NORM_WEIGHTS,
        [KVCAL_W_Q_NORM] = NORM("self_attn.q_norm.weight", KVCAL_DIM_HEAD),
        [KVCAL_W_K_NORM] = NORM("self_attn.k_norm.weight", KVCAL_DIM_HEAD),
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
};

const kvcal_arch kvcal_arch_olmo2 = {
    .family = "olmo2",
    .architectures = olmo_architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        POST_NORM_WEIGHTS,
        /* over the whole projection: a weight per channel of every head */
        [KVCAL_W_Q_NORM] = NORM("self_attn.q_norm.weight", KVCAL_DIM_Q),
        [KVCAL_W_K_NORM] = NORM("self_attn.k_norm.weight", KVCAL_DIM_KV),
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
};
// clang-format on
