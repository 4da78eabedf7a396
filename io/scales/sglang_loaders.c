/* io/scales/sglang_loaders.c: what sglang 0.5.23's model classes do with a
 * model's K/V scales, by architecture (io/scales/sglang_loaders.h). */
#include "io/scales/sglang_loaders.h"

#include <stddef.h>
#include <string.h>

/* The architectures whose sglang 0.5.23 model class (or a base class) has
 * load_kv_cache_scales: with --quantization-param-path and an fp8_e4m3
 * cache, load_model_utils.py raises RuntimeError ("model ... does not
 * support loading scaling factors") at start for every other one (Qwen3.5,
 * Qwen3-MoE, Mixtral, Gemma, DeepSeek among them; sglang issue 37379).
 * Read from sglang's models/ with tests/engines/sglang_archs.py, which
 * make test-engines runs against the installed sglang. */
static const char *const sglang_legacy_archs[] = {
    "ApertusForCausalLM",
    "ArceeForCausalLM",
    "Cosmos3EdgeForConditionalGeneration",
    "Glm4ForCausalLM",
    "HunYuanDenseV1ForCausalLM",
    "HunYuanMoEV1ForCausalLM",
    "IQuestCoderForCausalLM",
    "InternLM3ForCausalLM",
    "LlamaForCausalLM",
    "MiMoForCausalLM",
    "MiMoV2ASRForCausalLM",
    "MiMoV2FlashForCausalLM",
    "MiMoV2ForCausalLM",
    "Ministral3ForCausalLM",
    "MistralForCausalLM",
    "OPTForCausalLM",
    "Phi3ForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "TeleFLMForCausalLM",
    NULL,
};

/* Architectures whose sglang 0.5.23 class has load_kv_cache_scales, handing
 * the file to the model class it builds, which has none: with
 * --quantization-param-path sglang fails at start (AttributeError) where
 * the hand-over is unguarded (Llama 4's Llama4Model, Exaone 4's, the Eagle
 * drafts' and MiMo-V2's multi-token-prediction model), and starts with a
 * warning, every scale left at 1.0, where it asks getattr first (GLM-5
 * Next's). tests/engines/sglang_archs.py's "broken" and "ignores". */
static const char *const sglang_legacy_fails[] = {"Exaone4ForCausalLM",
                                                  "Llama4ForCausalLM",
                                                  "LlamaForCausalLMEagle",
                                                  "LlamaForCausalLMEagle3",
                                                  "MiMoV2MTP",
                                                  "MistralForCausalLMEagle",
                                                  "Qwen2ForCausalLMEagle",
                                                  NULL};
static const char *const sglang_legacy_ignored[] = {"Glm5NextForConditionalGeneration",
                                                    NULL};

static int listed(const char *const *list, const char *name)
{
    for (const char *const *a = list; *a; a++)
        if (!strcmp(*a, name))
            return 1;
    return 0;
}

kvcal_sglang_legacy kvcal_sglang_legacy_of(const char *architecture)
{
    return listed(sglang_legacy_archs, architecture)     ? KVCAL_SGLANG_LEGACY_READS
           : listed(sglang_legacy_fails, architecture)   ? KVCAL_SGLANG_LEGACY_FAILS
           : listed(sglang_legacy_ignored, architecture) ? KVCAL_SGLANG_LEGACY_IGNORES
                                                         : KVCAL_SGLANG_LEGACY_REFUSES;
}

/* The names of a K scale after "self_attn." the table tells of:
 * compressed-tensors' and llm-compressor's, the attention module's own,
 * ModelOpt's, Quark's, ModelOpt's of a fused-QKV model (Phi-3's), and the
 * qkqkv_proj spelling vLLM 0.32.0 maps alike (base_config.py
 * get_cache_scale_mapper; weight_utils.py maybe_remap_kv_scale_name). */
enum { NAME_PLAIN, NAME_ATTN, NAME_K_PROJ, NAME_QUARK, NAME_QKV, NAME_QKQKV, NAMES };
static const char *const names[NAMES] = {"k_scale",          "attn.k_scale",
                                         "k_proj.k_scale",   "k_proj.output_scale",
                                         "qkv_proj.k_scale", "qkqkv_proj.k_scale"};

#define L KVCAL_SGLANG_LOADS
#define S KVCAL_SGLANG_SKIPS
#define F KVCAL_SGLANG_FAILS
#define U KVCAL_SGLANG_UNKNOWN

/* Each architecture kvcal runs that has a class of its own in sglang 0.5.23
 * (not the MLA models: their scales, schemas/README.md "MLA caches"; nor the
 * Qwen3.5 ones, whose loader maps both common names). `attention`: the
 * attention class that builds its RadixAttention without quant_config (no
 * scale parameter: every name is skipped), else NULL and what load_weights
 * does with each name (a stand-in model holding the RadixAttention's
 * k_scale / v_scale where sglang's does, fed each name: make
 * test-engines). The last two, a fused-QKV model's qkv_proj.k_scale and
 * qkqkv_proj.k_scale: skipped where maybe_remap_kv_scale_name makes it
 * <proj>.attn.k_scale or the name is looked up as it is; a KeyError where
 * the stacked mapping's "v_proj" makes it qkqkv_proj (qkqkqkv_proj) or
 * nothing maps it; HunYuan's splits a ".qkv_proj" as a fused weight
 * (AssertionError), which ".qkqkv_proj" is not (no scale: skipped). */
static const struct {
    const char *architecture, *loader, *attention;
    unsigned char outcome[NAMES];
} table[] = {
    /* maybe_remap_kv_scale_name: the plain name and ModelOpt's / Quark's
       to the attention's; its own name doubled (".attn.attn.") and dropped */
    {"LlamaForCausalLM", "LlamaForCausalLM.load_weights", NULL, {L, S, L, L, S, S}},
    {"MistralForCausalLM", "LlamaForCausalLM.load_weights", NULL, {L, S, L, L, S, S}},
    {"Phi3ForCausalLM", "LlamaForCausalLM.load_weights", NULL, {L, S, L, L, S, S}},
    {"Gemma3ForCausalLM", "Gemma3ForCausalLM.load_weights", NULL, {L, S, L, L, S, S}},
    {"Gemma3ForConditionalGeneration",
     "Gemma3ForCausalLM.load_weights",
     NULL,
     {L, S, L, L, S, S}},
    {"Exaone4ForCausalLM", "Exaone4ForCausalLM.load_weights", NULL, {L, S, L, L, S, S}},
    {"MiniMaxM2ForCausalLM",
     "MiniMaxM2ForCausalLM.load_weights",
     NULL,
     {L, S, L, S, S, S}},
    {"Gemma2ForCausalLM", "Gemma2ForCausalLM.load_weights", NULL, {L, S, F, F, F, F}},
    /* no kv-scale remapping; a name it does not hold logged and skipped */
    {"Qwen2ForCausalLM", "Qwen2ForCausalLM.load_weights", NULL, {S, L, S, S, S, S}},
    {"Qwen2MoeForCausalLM", "Qwen2MoeForCausalLM.load_weights", NULL, {S, L, S, S, S, S}},
    {"Glm4ForCausalLM", "Glm4ForCausalLM.load_weights", NULL, {S, L, S, S, S, S}},
    {"Glm4vForConditionalGeneration",
     "Glm4vForConditionalGeneration.load_weights",
     NULL,
     {S, L, S, S, S, S}},
    /* skipped, but k_proj renamed qkv_proj is looked up (KeyError) */
    {"MixtralForCausalLM", "MixtralForCausalLM.load_weights", NULL, {S, L, F, F, F, F}},
    {"GraniteMoeForCausalLM",
     "MixtralForCausalLM.load_weights",
     NULL,
     {S, L, F, F, F, F}},
    {"Qwen2_5_VLForConditionalGeneration",
     "Qwen2_5_VLForConditionalGeneration.load_weights",
     NULL,
     {S, L, F, F, S, S}},
    /* every name looked up as it is: KeyError */
    {"Ernie4_5_MoeForCausalLM",
     "Ernie4_5_MoeForCausalLM.load_weights",
     NULL,
     {F, L, F, F, F, F}},
    {"GraniteForCausalLM", "GraniteForCausalLM.load_weights", NULL, {F, L, F, F, F, F}},
    {"Olmo2ForCausalLM", "Olmo2ForCausalLM.load_weights", NULL, {F, L, F, F, F, F}},
    {"Qwen2VLForConditionalGeneration",
     "Qwen2VLForConditionalGeneration.load_weights",
     NULL,
     {F, L, F, F, F, F}},
    /* ".self_attn" dropped; only ModelOpt's name mapped, the others
       asserted to be 1.0 (AssertionError) */
    {"Qwen3NextForCausalLM",
     "Qwen3NextForCausalLM.load_weights",
     NULL,
     {F, F, L, U, F, F}},
    /* the attention without quant_config */
    {"Qwen3ForCausalLM", NULL, "Qwen3Attention", {0}},
    {"Qwen3VLForConditionalGeneration", NULL, "Qwen3Attention", {0}},
    {"Qwen3MoeForCausalLM", NULL, "Qwen3MoeAttention", {0}},
    {"Qwen3VLMoeForConditionalGeneration", NULL, "Qwen3MoeAttention", {0}},
    {"Glm4MoeForCausalLM", NULL, "Glm4MoeAttention", {0}},
    {"Glm4vMoeForConditionalGeneration", NULL, "Glm4MoeAttention", {0}},
    {"GptOssForCausalLM", NULL, "GptOssAttention", {0}},
    {"HunYuanDenseV1ForCausalLM",
     "HunYuanMoEV1ForCausalLM.load_weights",
     "HunYuanAttention",
     {U, U, U, U, F, U}},
    {"HunYuanMoEV1ForCausalLM",
     "HunYuanMoEV1ForCausalLM.load_weights",
     "HunYuanAttention",
     {U, U, U, U, F, U}},
    {"Llama4ForCausalLM", NULL, "Llama4Attention", {0}},
    {"Llama4ForConditionalGeneration", NULL, "Llama4Attention", {0}},
};

#undef L
#undef S
#undef F
#undef U

static int row_of(const char *architecture)
{
    for (size_t i = 0; architecture && i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(table[i].architecture, architecture))
            return (int)i;
    return -1;
}

/* Which of names[] suffix is, K's, V's or Q's (v or q for k throughout). */
static int name_of(const char *suffix)
{
    for (int n = 0; n < NAMES; n++) {
        const char *k = names[n], *s = suffix;
        while (*k && *s && (*k == *s || (*k == 'k' && (*s == 'v' || *s == 'q'))))
            k++, s++;
        if (!*k && !*s)
            return n;
    }
    return -1;
}

kvcal_sglang_outcome kvcal_sglang_checkpoint_scale(const char *architecture,
                                                   const char *suffix, const char **why)
{
    const int r = row_of(architecture), n = name_of(suffix);
    if (why)
        *why = r < 0 ? NULL : table[r].attention ? table[r].attention : table[r].loader;
    if (r < 0)
        return KVCAL_SGLANG_UNKNOWN;
    /* HunYuan's load_weights splits any .qkv_proj tensor as a fused q/k/v
       weight before it looks for a parameter (AssertionError) */
    if (table[r].attention && n >= 0 && table[r].outcome[n] == KVCAL_SGLANG_FAILS) {
        if (why)
            *why = table[r].loader;
        return KVCAL_SGLANG_FAILS;
    }
    if (table[r].attention)
        return KVCAL_SGLANG_NO_SCALES;
    return n < 0 ? KVCAL_SGLANG_UNKNOWN : (kvcal_sglang_outcome)table[r].outcome[n];
}

const char *kvcal_sglang_k_name(const char *architecture)
{
    const int r = row_of(architecture);
    if (r < 0 || table[r].attention || table[r].outcome[NAME_PLAIN] == KVCAL_SGLANG_LOADS)
        return names[NAME_PLAIN];
    return table[r].outcome[NAME_ATTN] == KVCAL_SGLANG_LOADS ? names[NAME_ATTN]
                                                             : names[NAME_K_PROJ];
}
