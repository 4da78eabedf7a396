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
extern const kvcal_arch kvcal_arch_deepseek_v2;
extern const kvcal_arch kvcal_arch_deepseek_v3;
extern const kvcal_arch kvcal_arch_gpt_oss;

static const kvcal_arch *const families[] = {
    &kvcal_arch_llama,       &kvcal_arch_qwen_moe,   &kvcal_arch_mixtral,
    &kvcal_arch_phi3,        &kvcal_arch_gemma,      &kvcal_arch_glm4_moe,
    &kvcal_arch_deepseek_v2, &kvcal_arch_deepseek_v3, &kvcal_arch_gpt_oss};

#define FAMILIES (sizeof families / sizeof families[0])

const kvcal_arch *kvcal_arch_find(const char *architecture)
{
    for (size_t f = 0; f < FAMILIES; f++)
        for (const char *const *a = families[f]->architectures; *a; a++)
            if (!strcmp(*a, architecture))
                return families[f];
    return NULL;
}

/* Architectures served with FP8 caches that kvcal refuses, and what it
 * lacks for each (the configs of transformers' own classes). */
static const struct {
    const char *architecture, *missing;
} not_yet[] = {
    {"Gemma3ForConditionalGeneration",
     "the multimodal wrapper's weight names (its language model runs as "
     "Gemma3ForCausalLM from a text-only checkpoint)"},
    {"Kimi_K25ForConditionalGeneration",
     "the multimodal wrapper's weight names (its language model is "
     "DeepSeek-V3's, which kvcal runs as DeepseekV3ForCausalLM)"},
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
    size_t total = 0, i = 0, len = 0;
    for (size_t f = 0; f < FAMILIES; f++)
        for (const char *const *a = families[f]->architectures; *a; a++)
            total++;
    buf[0] = '\0';
    for (size_t f = 0; f < FAMILIES; f++)
        for (const char *const *a = families[f]->architectures; *a; a++, i++) {
            const char *sep = i == 0 ? "" : i + 1 == total ? " and " : ", ";
            int w = snprintf(buf + len, n - len, "%s%s", sep, *a);
            if (w < 0 || (size_t)w >= n - len)
                return;
            len += (size_t)w;
        }
}
