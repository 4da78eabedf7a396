/* calib/arch_gpt_oss.c: the gpt-oss family: GptOssForCausalLM (gpt-oss-20b,
 * gpt-oss-120b), as transformers' modeling_gpt_oss runs it. A pre-norm
 * decoder layer: RMSNorm, q/k/v projections with biases, RoPE (yarn, not
 * truncated), causal GQA attention whose softmax has a learned sink logit
 * per query head in its denominator, within a window of sliding_window
 * tokens in the sliding layers of layer_types (every other layer, from
 * layer 0), o_proj with its bias, residual, RMSNorm, the mixture of
 * experts, residual. The router is a linear layer with a bias; a token's
 * top-k logits, softmaxed, weight its experts. Each expert's fused
 * gate_up_proj (hidden, 2 inter) interleaves gate and up columns and has a
 * bias, its activation is the clamped SwiGLU (up + 1) * g * sigmoid(alpha g)
 * (g = min(gate, limit), up clamped to +-limit; swiglu_alpha 1.702,
 * swiglu_limit 7), its
 * down_proj (inter, hidden) has a bias; both are stored transposed, (in,
 * out), or, in the released checkpoints, as MXFP4 blocks and scales (out,
 * in), dequantized when a layer is loaded (exactly: fp32 on cpu, bf16 on
 * cuda). Every layer caches K and V, the sliding ones over their window. */
#include <string.h>

#include "calib/arch.h"
#include "calib/arch_attention_weights.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {"GptOssForCausalLM", NULL};

/* attention_bias (q/k/v and o), the experts' clamp; quantized weights other
 * than MXFP4 experts are refused. */
static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    d->qkv_bias = d->o_bias = c->attention_bias;
    d->qk_norm = 0;
    d->shared_intermediate_size = 0;
    d->norm_topk_prob = 1;
    d->swiglu_limit = (float)c->swiglu_limit;
    d->swiglu_alpha = (float)c->swiglu_alpha;
    if (d->num_experts < 1 || d->experts_per_tok < 1 ||
        d->experts_per_tok > d->num_experts || d->moe_intermediate_size < 1)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "config.json: %s needs num_local_experts >= 1, "
                          "num_experts_per_tok in 1..num_local_experts and "
                          "intermediate_size >= 1 (found %d, %d and %d); fix the config",
                          c->architecture, d->num_experts, d->experts_per_tok,
                          d->moe_intermediate_size);
    if (c->quant_method[0] && strcmp(c->quant_method, "mxfp4"))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "config.json: %s quantized with quant_method '%s' is not "
                          "supported; kvcal reads its bf16 checkpoint or the released "
                          "MXFP4 one (quant_method mxfp4)",
                          c->architecture, c->quant_method);
    return KVCAL_OK;
}

// clang-format off
static const kvcal_op layer[] = {
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_ATTN_NORM,  KVCAL_W_NONE,        0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_QKV,   KVCAL_ACT_NORM,  KVCAL_W_QKV,        KVCAL_W_QKV_BIAS,    0},
    {KVCAL_OP_QK_NORM_ROPE, KVCAL_ACT_QKV,   KVCAL_ACT_QKV,   KVCAL_W_NONE,       KVCAL_W_NONE,        1},
    {KVCAL_OP_ATTENTION,    KVCAL_ACT_ATT,   KVCAL_ACT_QKV,   KVCAL_W_ATTN_SINKS, KVCAL_W_NONE,        0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_ATT,   KVCAL_W_O,          KVCAL_W_O_BIAS,      0},
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_FFN_NORM,   KVCAL_W_NONE,        0},
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA, KVCAL_ACT_NORM,  KVCAL_W_ROUTER,     KVCAL_W_ROUTER_BIAS, 0},
};

#define EXPERTS(name, rows, cols, layout) \
    {{{name, rows, cols, layout}}, KVCAL_WHEN_ALWAYS, KVCAL_EXPERTS_STACKED}

const kvcal_arch kvcal_arch_gpt_oss = {
    .family = "gpt_oss",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        KVCAL_ARCH_ATTENTION_WEIGHTS,
        KVCAL_ARCH_O_BIAS_WEIGHT,
        [KVCAL_W_ATTN_SINKS] = {{{"self_attn.sinks", KVCAL_DIM_HEADS, KVCAL_DIM_NONE}}},
        [KVCAL_W_ROUTER] = {{{"mlp.router.weight", KVCAL_DIM_EXPERTS, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_ROUTER_BIAS] = {{{"mlp.router.bias", KVCAL_DIM_EXPERTS, KVCAL_DIM_NONE}}},
        [KVCAL_W_EXPERT_GATE_UP] = EXPERTS("mlp.experts.gate_up_proj", KVCAL_DIM_2MOE_INTER,
                                           KVCAL_DIM_HIDDEN,
                                           KVCAL_PART_TRANSPOSED | KVCAL_PART_INTERLEAVED |
                                               KVCAL_PART_MXFP4),
        [KVCAL_W_EXPERT_GATE_UP_BIAS] = EXPERTS("mlp.experts.gate_up_proj_bias",
                                                KVCAL_DIM_2MOE_INTER, KVCAL_DIM_NONE,
                                                KVCAL_PART_INTERLEAVED),
        [KVCAL_W_EXPERT_DOWN] = EXPERTS("mlp.experts.down_proj", KVCAL_DIM_HIDDEN,
                                        KVCAL_DIM_MOE_INTER,
                                        KVCAL_PART_TRANSPOSED | KVCAL_PART_MXFP4),
        [KVCAL_W_EXPERT_DOWN_BIAS] = EXPERTS("mlp.experts.down_proj_bias", KVCAL_DIM_HIDDEN,
                                             KVCAL_DIM_NONE, 0),
    },
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
};
// clang-format on
