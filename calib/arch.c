/* calib/arch.c: the families kvcal runs, and what every family shares. */
#include "calib/arch.h"

#include <stdio.h>
#include <string.h>

extern const kvcal_arch kvcal_arch_llama;
extern const kvcal_arch kvcal_arch_qwen_moe;
extern const kvcal_arch kvcal_arch_mixtral;
extern const kvcal_arch kvcal_arch_phi3;
extern const kvcal_arch kvcal_arch_gemma;
extern const kvcal_arch kvcal_arch_glm4_moe;
extern const kvcal_arch kvcal_arch_minimax_m2;
extern const kvcal_arch kvcal_arch_llama4;
extern const kvcal_arch kvcal_arch_glm4;
extern const kvcal_arch kvcal_arch_ernie45_moe;
extern const kvcal_arch kvcal_arch_exaone4;
extern const kvcal_arch kvcal_arch_olmo2;
extern const kvcal_arch kvcal_arch_hunyuan_moe;
extern const kvcal_arch kvcal_arch_hunyuan_dense;
extern const kvcal_arch kvcal_arch_granite_moe;
extern const kvcal_arch kvcal_arch_deepseek_v2;
extern const kvcal_arch kvcal_arch_deepseek_v3;
extern const kvcal_arch kvcal_arch_gpt_oss;
extern const kvcal_arch kvcal_arch_qwen3_vl_moe;
extern const kvcal_arch kvcal_arch_qwen3_next;
extern const kvcal_arch kvcal_arch_qwen3_5;
extern const kvcal_arch kvcal_arch_qwen3_5_moe;

static const kvcal_arch *const families[] = {
    &kvcal_arch_llama,       &kvcal_arch_qwen_moe,      &kvcal_arch_mixtral,
    &kvcal_arch_phi3,        &kvcal_arch_gemma,         &kvcal_arch_glm4_moe,
    &kvcal_arch_deepseek_v2, &kvcal_arch_deepseek_v3,   &kvcal_arch_gpt_oss,
    &kvcal_arch_qwen3_next,  &kvcal_arch_qwen3_5,       &kvcal_arch_qwen3_5_moe,
    &kvcal_arch_minimax_m2,  &kvcal_arch_llama4,        &kvcal_arch_glm4,
    &kvcal_arch_ernie45_moe, &kvcal_arch_exaone4,       &kvcal_arch_olmo2,
    &kvcal_arch_hunyuan_moe, &kvcal_arch_hunyuan_dense, &kvcal_arch_granite_moe};

#define FAMILIES (sizeof families / sizeof families[0])

const kvcal_arch *kvcal_arch_find(const char *architecture)
{
    for (size_t f = 0; f < FAMILIES; f++)
        for (const char *const *a = families[f]->architectures; *a; a++)
            if (!strcmp(*a, architecture))
                return families[f];
    return NULL;
}

/* Multimodal models whose language model a family runs, from the text
 * alone: the wrapper's architecture, the family's architecture its
 * text_config describes, and the text model_types that architecture has
 * in transformers (another one is a language model kvcal does not know).
 * With text alone the wrappers run their language model as the causal LM
 * would: Gemma 3's bidirectional image spans, Qwen3-VL's 3-axis positions
 * and Qwen2(.5)-VL's 3-axis positions (equal on text, so one RoPE) and
 * Qwen3-VL's deepstack inputs act on images only. */
static const kvcal_arch_wrapper wrappers[] = {
    {"Gemma3ForConditionalGeneration", "Gemma3ForCausalLM", "gemma3_text", NULL, NULL},
    {"Mistral3ForConditionalGeneration", "MistralForCausalLM", "mistral", NULL, NULL},
    /* Ministral 3's */
    {"Mistral3ForConditionalGeneration", "Ministral3ForCausalLM", "ministral3", NULL,
     NULL},
    {"Qwen3VLForConditionalGeneration", "Qwen3ForCausalLM", "qwen3_vl_text", NULL, NULL},
    {"Qwen3VLMoeForConditionalGeneration", "Qwen3MoeForCausalLM", "qwen3_vl_moe_text",
     NULL, &kvcal_arch_qwen3_vl_moe},
    {"Qwen2_5_VLForConditionalGeneration", "Qwen2ForCausalLM", "qwen2_5_vl_text",
     "qwen2_5_vl", NULL},
    {"Qwen2VLForConditionalGeneration", "Qwen2ForCausalLM", "qwen2_vl_text", "qwen2_vl",
     NULL},
    {"Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM", "qwen3_5_text", NULL, NULL},
    {"Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text",
     NULL, NULL},
    {"Llama4ForConditionalGeneration", "Llama4ForCausalLM", "llama4_text", NULL, NULL},
    /* GLM-4.1V and GLM-4.6V-Flash: GLM-4's dense layers, RoPE in 3 sections */
    {"Glm4vForConditionalGeneration", "Glm4ForCausalLM", "glm4v_text", NULL, NULL},
    /* GLM-4.5V and GLM-4.6V: GLM-4.5's layers, RoPE in 3 sections (equal on text) */
    {"Glm4vMoeForConditionalGeneration", "Glm4MoeForCausalLM", "glm4v_moe_text", NULL,
     NULL},
};

#define WRAPPERS (sizeof wrappers / sizeof wrappers[0])

const kvcal_arch_wrapper *kvcal_arch_wrapper_find(const char *architecture,
                                                  const char *model_type)
{
    const kvcal_arch_wrapper *first = NULL;
    for (size_t i = 0; i < WRAPPERS; i++) {
        const kvcal_arch_wrapper *w = &wrappers[i];
        if (strcmp(w->architecture, architecture))
            continue;
        if (!strcmp(w->text_model_type, model_type) ||
            (w->flat_model_type && !strcmp(w->flat_model_type, model_type)))
            return w;
        first = first ? first : w;
    }
    return first;
}

void kvcal_arch_wrapper_text_types(const char *architecture, char *buf, size_t n)
{
    size_t len = 0, count = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < WRAPPERS && len < n; i++)
        if (!strcmp(wrappers[i].architecture, architecture)) {
            int w = snprintf(buf + len, n - len, "%s'%s' (%s)", count++ ? " or " : "",
                             wrappers[i].text_model_type, wrappers[i].text_architecture);
            len += w > 0 ? (size_t)w : 0;
        }
}

#define KIMI_K25_MISSING                                                                 \
    "the released experts' INT4 weights (compressed-tensors pack-quantized) and "        \
    "tests of this multimodal model (its language model is DeepSeek-V3's, which "        \
    "kvcal runs as DeepseekV3ForCausalLM)"

/* Architectures served with FP8 caches that kvcal refuses, and what it
 * lacks for each (the configs of transformers' own classes). */
static const struct {
    const char *architecture, *missing;
} not_yet[] = {
    /* transformers' class, and the released config's name */
    {"Kimi_K25ForConditionalGeneration", KIMI_K25_MISSING},
    {"KimiK25ForConditionalGeneration", KIMI_K25_MISSING},
    {"DeepseekV4ForCausalLM",
     "DeepSeek-V4's attention: the compressed sparse and heavily compressed "
     "branches beside a sliding window, and their indexer"},
};

const char *kvcal_arch_missing(const char *architecture)
{
    for (size_t i = 0; i < sizeof not_yet / sizeof not_yet[0]; i++)
        if (!strcmp(not_yet[i].architecture, architecture))
            return not_yet[i].missing;
    return NULL;
}

void kvcal_arch_list(char *buf, size_t n)
{
    const char *names[64];
    size_t total = 0, len = 0;
    for (size_t f = 0; f < FAMILIES; f++)
        for (const char *const *a = families[f]->architectures; *a && total < 64; a++)
            names[total++] = *a;
    for (size_t w = 0; w < WRAPPERS && total < 64; w++)
        if (!w || strcmp(wrappers[w].architecture, wrappers[w - 1].architecture))
            names[total++] = wrappers[w].architecture;
    buf[0] = '\0';
    for (size_t i = 0; i < total; i++) {
        const char *sep = i == 0 ? "" : i + 1 == total ? " and " : ", ";
        int w = snprintf(buf + len, n - len, "%s%s", sep, names[i]);
        if (w < 0 || (size_t)w >= n - len)
            return;
        len += (size_t)w;
    }
}
