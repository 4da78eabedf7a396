/* calib/arch_phi3.c: the Phi-3 family: Phi3ForCausalLM (Phi-3, Phi-3.5,
 * Phi-4-mini). Llama's layer with q/k/v and gate/up already fused in the
 * checkpoint (self_attn.qkv_proj, mlp.gate_up_proj), partial rotary
 * (partial_rotary_factor), longrope scaling and a sliding window where the
 * config sets one (calib/model.c, io/checkpoint/model_config.c). */
#include "calib/arch.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {"Phi3ForCausalLM", NULL};

/* No biases and no q/k norm in this family. */
static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    (void)c;
    d->qkv_bias = d->o_bias = d->qk_norm = 0;
    return KVCAL_OK;
}

static const char *const refused[] = {"self_attn.qkv_proj.bias", "self_attn.o_proj.bias",
                                      "mlp.gate_up_proj.bias", "mlp.down_proj.bias", NULL};

// clang-format off
static const kvcal_op layer[] = {
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_ATTN_NORM, KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_QKV,   KVCAL_ACT_NORM,  KVCAL_W_QKV,       KVCAL_W_NONE, 0},
    {KVCAL_OP_QK_NORM_ROPE, KVCAL_ACT_QKV,   KVCAL_ACT_QKV,   KVCAL_W_NONE,      KVCAL_W_NONE, 1},
    {KVCAL_OP_ATTENTION,    KVCAL_ACT_ATT,   KVCAL_ACT_QKV,   KVCAL_W_NONE,      KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_ATT,   KVCAL_W_O,         KVCAL_W_NONE, 0},
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_FFN_NORM,  KVCAL_W_NONE, 0},
    {KVCAL_OP_SWIGLU,       KVCAL_ACT_MLP,   KVCAL_ACT_NORM,  KVCAL_W_GATE_UP,   KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_MLP,   KVCAL_W_DOWN,      KVCAL_W_NONE, 0},
};

const kvcal_arch kvcal_arch_phi3 = {
    .family = "phi3",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        [KVCAL_W_ATTN_NORM] = {{{"input_layernorm.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_NONE}}},
        [KVCAL_W_QKV] = {{{"self_attn.qkv_proj.weight", KVCAL_DIM_QKV, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_O] = {{{"self_attn.o_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_Q}}},
        [KVCAL_W_FFN_NORM] = {{{"post_attention_layernorm.weight", KVCAL_DIM_HIDDEN,
                                KVCAL_DIM_NONE}}},
        [KVCAL_W_GATE_UP] = {{{"mlp.gate_up_proj.weight", KVCAL_DIM_2INTER, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_DOWN] = {{{"mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER}}},
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
};
// clang-format on
