/* calib/arch_llama4.c: Llama4ForCausalLM, the language model of Llama 4
 * (Scout, Maverick; released as Llama4ForConditionalGeneration, whose
 * wrapper row is in calib/arch.c).
 *
 * A pre-norm decoder layer: RMSNorm, GQA attention, RMSNorm, then a dense
 * SwiGLU MLP (intermediate_size_mlp) or, every interleave_moe_layer_step-th
 * layer, a mixture of experts: the top-k router logits' sigmoids weigh the
 * chosen experts' inputs (not their outputs), the experts held in two
 * stacked tensors (gate_up_proj (experts, hidden, 2 inter), gate's columns
 * then up's; down_proj (experts, inter, hidden)), plus a shared expert with
 * no gate. Attention: RoPE on pairs (2i, 2i + 1) (transformers' complex
 * rotation) in all but the NoPE layers (no_rope_layers); in the RoPE layers
 * q and k then RMS-normalized per head without a weight (use_qk_norm) and
 * the keys of the query's own chunk of attention_chunk_size tokens alone
 * attended; the NoPE layers attend to every key, their queries scaled by
 * the temperature tuning. Every layer caches K and V: vLLM and sglang
 * cache K after RoPE and the norm (vLLM rotates halves of permuted q/k
 * rows, the same values per head in another channel order). */
#include "calib/arch.h"
#include "calib/arch_attention_weights.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {"Llama4ForCausalLM", NULL};

static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    if (c->attention_bias)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "config.json: %s with attention_bias true: transformers adds "
                          "q/k/v/o biases, vLLM and sglang build Llama 4's attention "
                          "without them, so their K and V differ; fix the field (false)",
                          c->architecture);
    d->qkv_bias = d->o_bias = 0;
    d->qk_norm = 0;
    d->qk_l2_norm = c->qk_norm;
    d->rope_interleaved = 1;
    d->attention_chunk = c->attention_chunk_size;
    d->attn_temp_scale = (float)c->attn_temperature_scale;
    d->attn_temp_floor = (float)c->attn_temperature_floor;
    d->moe_input_weighted = 1;
    d->norm_topk_prob = 0;
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

static const char *const refused[] = {"self_attn.q_proj.bias", "self_attn.o_proj.bias",
                                      NULL};

// clang-format off
static const kvcal_op layer[] = {
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_ATTN_NORM, KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_QKV,   KVCAL_ACT_NORM,  KVCAL_W_QKV,       KVCAL_W_NONE, 0},
    {KVCAL_OP_QK_NORM_ROPE, KVCAL_ACT_QKV,   KVCAL_ACT_QKV,   KVCAL_W_NONE,      KVCAL_W_NONE, 1},
    {KVCAL_OP_ATTENTION,    KVCAL_ACT_ATT,   KVCAL_ACT_QKV,   KVCAL_W_NONE,      KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_ATT,   KVCAL_W_O,         KVCAL_W_NONE, 0},
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_FFN_NORM,  KVCAL_W_NONE, 0},
    {KVCAL_OP_MOE,          KVCAL_ACT_DELTA, KVCAL_ACT_NORM,  KVCAL_W_ROUTER,    KVCAL_W_NONE, 0},
};

/* the dense layers: the same attention, a SwiGLU MLP */
static const kvcal_op dense_layer[] = {
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_ATTN_NORM, KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_QKV,   KVCAL_ACT_NORM,  KVCAL_W_QKV,       KVCAL_W_NONE, 0},
    {KVCAL_OP_QK_NORM_ROPE, KVCAL_ACT_QKV,   KVCAL_ACT_QKV,   KVCAL_W_NONE,      KVCAL_W_NONE, 1},
    {KVCAL_OP_ATTENTION,    KVCAL_ACT_ATT,   KVCAL_ACT_QKV,   KVCAL_W_NONE,      KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_ATT,   KVCAL_W_O,         KVCAL_W_NONE, 0},
    {KVCAL_OP_ADD_RMSNORM,  KVCAL_ACT_NORM,  KVCAL_ACT_DELTA, KVCAL_W_FFN_NORM,  KVCAL_W_NONE, 0},
    {KVCAL_OP_SWIGLU,       KVCAL_ACT_MLP,   KVCAL_ACT_NORM,  KVCAL_W_GATE_UP,   KVCAL_W_NONE, 0},
    {KVCAL_OP_LINEAR,       KVCAL_ACT_DELTA, KVCAL_ACT_MLP,   KVCAL_W_DOWN,      KVCAL_W_NONE, 0},
};

#define DENSE(name, rows, cols) {{{name, rows, cols}}, KVCAL_WHEN_DENSE_LAYERS}
#define MOE(name, rows, cols) {{{name, rows, cols}}, KVCAL_WHEN_MOE_LAYERS}
#define STACKED(name, rows, cols) \
    {{{name, rows, cols, KVCAL_PART_TRANSPOSED}}, KVCAL_WHEN_MOE_LAYERS, KVCAL_EXPERTS_STACKED}

/* every weight but the routed experts' */
#define LLAMA4_WEIGHTS                                                                          \
    KVCAL_ARCH_ATTENTION_WEIGHTS,                                                               \
    [KVCAL_W_GATE_UP] = {{{"feed_forward.gate_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN}, \
                          {"feed_forward.up_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN}},  \
                         KVCAL_WHEN_DENSE_LAYERS},                                              \
    [KVCAL_W_DOWN] = DENSE("feed_forward.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER), \
    [KVCAL_W_ROUTER] = MOE("feed_forward.router.weight", KVCAL_DIM_EXPERTS, KVCAL_DIM_HIDDEN),  \
    [KVCAL_W_SHARED_GATE_UP] = {{{"feed_forward.shared_expert.gate_proj.weight",               \
                                  KVCAL_DIM_SHARED_INTER, KVCAL_DIM_HIDDEN},                    \
                                 {"feed_forward.shared_expert.up_proj.weight",                 \
                                  KVCAL_DIM_SHARED_INTER, KVCAL_DIM_HIDDEN}},                   \
                                KVCAL_WHEN_MOE_LAYERS},                                         \
    [KVCAL_W_SHARED_DOWN] = MOE("feed_forward.shared_expert.down_proj.weight",                 \
                                KVCAL_DIM_HIDDEN, KVCAL_DIM_SHARED_INTER)

/* llm-compressor's checkpoints (its SequentialLlama4TextMoe: an MLP per
 * expert, as the released FP8 ones of Scout and Maverick hold them): a
 * tensor per expert, FP8 or not; vLLM's Llama4Model.load_weights maps both
 * layouts */
static const kvcal_arch llama4_named_experts = {
    .family = "llama4",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        LLAMA4_WEIGHTS,
        [KVCAL_W_EXPERT_GATE_UP] = {{{"feed_forward.experts.%d.gate_proj.weight",
                                      KVCAL_DIM_MOE_INTER, KVCAL_DIM_HIDDEN},
                                     {"feed_forward.experts.%d.up_proj.weight",
                                      KVCAL_DIM_MOE_INTER, KVCAL_DIM_HIDDEN}},
                                    KVCAL_WHEN_MOE_LAYERS, KVCAL_EXPERTS_NAMED},
        [KVCAL_W_EXPERT_DOWN] = {{{"feed_forward.experts.%d.down_proj.weight",
                                   KVCAL_DIM_HIDDEN, KVCAL_DIM_MOE_INTER}},
                                 KVCAL_WHEN_MOE_LAYERS, KVCAL_EXPERTS_NAMED},
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
    .dense_layer = dense_layer,
    .dense_layer_ops = (int)(sizeof dense_layer / sizeof dense_layer[0]),
};

/* transformers' layout, as the bf16 releases hold it: each layer's experts
 * in two stacked (in, out) tensors */
const kvcal_arch kvcal_arch_llama4 = {
    .family = "llama4",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        LLAMA4_WEIGHTS,
        [KVCAL_W_EXPERT_GATE_UP] = STACKED("feed_forward.experts.gate_up_proj",
                                           KVCAL_DIM_2MOE_INTER, KVCAL_DIM_HIDDEN),
        [KVCAL_W_EXPERT_DOWN] = STACKED("feed_forward.experts.down_proj", KVCAL_DIM_HIDDEN,
                                        KVCAL_DIM_MOE_INTER),
    },
    .refused = refused,
    .describe = describe,
    /* FP8 stacked experts (ModelOpt's) are not read: the FP8 releases
       llm-compressor writes hold an MLP per expert (named_experts) */
    .float_weights_only = 1,
    .named_experts = &llama4_named_experts,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
    .dense_layer = dense_layer,
    .dense_layer_ops = (int)(sizeof dense_layer / sizeof dense_layer[0]),
};
// clang-format on
