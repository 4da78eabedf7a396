/* calib/arch_llama.c: the Llama family: LlamaForCausalLM (Llama 2 / 3 /
 * 3.1, and llama2.c checkpoints), MistralForCausalLM, Ministral3ForCausalLM
 * (Ministral 3: yarn, and queries scaled past the original context, where
 * samples stop), Qwen2ForCausalLM (q/k/v biases), Qwen3ForCausalLM
 * (per-head q/k RMSNorm), SeedOssForCausalLM (Seed-OSS: q/k/v biases by
 * attention_bias, o_proj's by attention_out_bias), SmolLM3ForCausalLM
 * (SmolLM3: every no_rope_layer_interval-th layer without RoPE, the
 * model's layer_nope) and GraniteForCausalLM (IBM Granite 3.x: q/k/v/o
 * biases by attention_bias; its four multipliers, which calib/model.c
 * reads for both Granite families).
 *
 * A pre-norm decoder layer: RMSNorm, fused QKV projection, optional per-head
 * q/k norm, RoPE (the K and V the engine caches), causal GQA attention,
 * o_proj, residual, RMSNorm, SwiGLU MLP, residual. */
#include <string.h>

#include "calib/arch.h"
#include "calib/arch_attention_weights.h"
#include "calib/arch_layer_ops.h"
#include "calib/model.h"
#include "core/status.h"

static const char *const architectures[] = {
    "LlamaForCausalLM",   "MistralForCausalLM", "Ministral3ForCausalLM",
    "Qwen2ForCausalLM",   "Qwen3ForCausalLM",   "SeedOssForCausalLM",
    "SmolLM3ForCausalLM", "GraniteForCausalLM", NULL};

/* config.json: attention_bias (Llama, Mistral: q/k/v and o biases; Qwen2:
 * q/k/v biases always, never o; Seed-OSS: q/k/v, with o's apart) and Qwen3's
 * q/k norm, as io/model_config reads them from each class's defaults. */
static kvcal_status describe(const kvcal_model_config *c, kvcal_model_desc *d)
{
    const int qwen2 = !strcmp(c->architecture, "Qwen2ForCausalLM");
    const int seed = !strcmp(c->architecture, "SeedOssForCausalLM");
    d->qkv_bias = qwen2 || c->attention_bias;
    d->o_bias = seed ? c->attention_out_bias : !qwen2 && c->attention_bias;
    d->qk_norm = !strcmp(c->architecture, "Qwen3ForCausalLM");
    d->query_scaling_from = c->query_scaling_from; /* Ministral 3's */
    return KVCAL_OK;
}

static const char *const refused[] = {"mlp.gate_proj.bias", "mlp.up_proj.bias",
                                      "mlp.down_proj.bias", NULL};

// clang-format off
static const kvcal_op layer[] = {
    KVCAL_ARCH_ATTENTION_OPS,
    KVCAL_ARCH_SWIGLU_MLP_OPS,
};

const kvcal_arch kvcal_arch_llama = {
    .family = "llama",
    .architectures = architectures,
    .layer_prefix = "model.layers.%d.",
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .weights = {
        KVCAL_ARCH_ATTENTION_WEIGHTS,
        KVCAL_ARCH_O_BIAS_WEIGHT,
        KVCAL_ARCH_HEAD_QK_NORM_WEIGHTS,
        [KVCAL_W_GATE_UP] = {{{"mlp.gate_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN},
                              {"mlp.up_proj.weight", KVCAL_DIM_INTER, KVCAL_DIM_HIDDEN}}},
        [KVCAL_W_DOWN] = {{{"mlp.down_proj.weight", KVCAL_DIM_HIDDEN, KVCAL_DIM_INTER}}},
    },
    .refused = refused,
    .describe = describe,
    .layer = layer,
    .layer_ops = (int)(sizeof layer / sizeof layer[0]),
};
// clang-format on
