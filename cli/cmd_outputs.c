/* cli/cmd_outputs.c: the inputs of a model (see the header). It defines
 * no command of its own. */
#include "cli/cmd_outputs.h"

#include <string.h>
#include <sys/stat.h>

#include "io/scales/scales_io.h"
#include "io/scales/sglang_loaders.h"

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int kvcal_cmd_is_model_file(const char *name)
{
    static const char *const names[] = {"config.json",
                                        "tokenizer.json",
                                        "tokenizer_config.json",
                                        "tokenizer.model",
                                        "tokenizer.bin",
                                        KVCAL_CHECKPOINT_INDEX,
                                        KVCAL_MODELOPT_QUANT_CONFIG,
                                        KVCAL_ASCEND_DESCRIPTION};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return ends_with(name, ".safetensors") ||
           ends_with(name, ".safetensors.index.json") ||
           (!strncmp(name, "tok", 3) && ends_with(name, ".bin"));
}

kvcal_status kvcal_cmd_add_model_inputs(kvcal_inputs_t *in, const char *model_path)
{
    struct stat st;
    if (stat(model_path, &st) != 0)
        return KVCAL_OK;
    if (S_ISDIR(st.st_mode))
        return kvcal_inputs_add(in, model_path, "a file of the model",
                                kvcal_cmd_is_model_file);
    char dir[4096];
    kvcal_path_dirname(model_path, dir, sizeof dir);
    kvcal_status s = kvcal_inputs_add(in, model_path, "the model", NULL);
    return s ? s
             : kvcal_inputs_add(in, dir, "a file of the model", kvcal_cmd_is_model_file);
}

const char *kvcal_cmd_format_note(kvcal_format format, kvcal_granularity g,
                                  kvcal_kv_format kvf, int mla, const char *architecture)
{
    if (mla && format == KVCAL_FORMAT_MODELOPT)
        return "  modelopt, MLA model: k_proj.k_scale / v_proj.v_scale of the latent "
               "entry; sglang 0.5.23 loads\n  k_proj.k_scale into attn_mqa.k_scale, "
               "vLLM 0.32.0 drops it (k_scale 1.0: schemas/README.md)";
    if (mla && (format == KVCAL_FORMAT_CHECKPOINT || format == KVCAL_FORMAT_QUARK ||
                format == KVCAL_FORMAT_KV_SCALE))
        return "  checkpoint, MLA model: one k_scale per layer for the latent entry; "
               "vLLM 0.32.0 and sglang\n  0.5.23 load none into DeepSeek's MLA layers "
               "(k_scale 1.0: schemas/README.md); the kvcal JSON\n  keeps the entry's "
               "scales and its latent and RoPE parts' absmax";
    if (mla && format == KVCAL_FORMAT_KVCAL_JSON)
        return "  kvcal: the latent entry's scale per layer (K and V: one entry), the "
               "absmax of its latent\n  and of its RoPE part (mla), provenance; kvcal "
               "convert derives the other formats from it";
    switch (format) {
    case KVCAL_FORMAT_LEGACY_JSON:
        return "  legacy: one scale per layer and tp rank shared by K and V, max(k, v) "
               "over "
               "the rank's\n  kv heads (read by sglang --quantization-param-path, vLLM "
               "before 2025)";
    case KVCAL_FORMAT_KVCAL_JSON:
        return "  kvcal: keeps everything (per-head K and V, absmax, clipping, "
               "provenance); "
               "no engine\n  reads it: kvcal convert derives the other formats from it";
    case KVCAL_FORMAT_CHECKPOINT:
        if (kvf == KVCAL_KV_FORMAT_NVFP4)
            return "  checkpoint, compressed-tensors' NVFP4 (num_bits 4, tensor_group of "
                   "16): k_global_scale /\n  v_global_scale = 448 x 6 / amax per layer; "
                   "vLLM 0.32.0 refuses it at start, sglang ignores it";
        if (kvf == KVCAL_KV_FORMAT_INT8)
            return "  checkpoint, compressed-tensors' int8 (type int): k_scale / v_scale "
                   "= absmax / 127; vLLM\n  0.32.0 refuses it at start, sglang ignores "
                   "it";
        if (g == KVCAL_GRANULARITY_HEAD)
            return "  checkpoint, per head (strategy attn_head): read by vLLM's "
                   "FlashAttention backend at FA3+\n  (Hopper) only; its other backends "
                   "and sglang refuse to start (--granularity tensor: all)";
        if (architecture && kvcal_sglang_checkpoint_scale(architecture, "k_scale",
                                                          NULL) == KVCAL_SGLANG_NO_SCALES)
            return "  checkpoint, per tensor (strategy tensor): one k_scale and v_scale "
                   "per "
                   "layer, the max over\n  its kv heads (read by vLLM; sglang 0.5.23's "
                   "class of this model holds no scale and runs\n  the cache at 1.0: "
                   "schemas/README.md)";
        if (architecture && strcmp(kvcal_sglang_k_name(architecture), "k_scale"))
            return "  checkpoint, per tensor (strategy tensor): one k_scale and v_scale "
                   "per "
                   "layer, the max over\n  its kv heads, under the names this model's "
                   "sglang 0.5.23 loader takes (read by vLLM\n  and sglang)";
        return "  checkpoint, per tensor (strategy tensor): one k_scale and v_scale per "
               "layer, the max over\n  its kv heads (read by vLLM, and by sglang as "
               "k_scale / v_scale)";
    case KVCAL_FORMAT_MODELOPT:
        return "  modelopt: k_proj.k_scale / v_proj.v_scale per layer (the max over its "
               "kv heads) in a\n  ModelOpt-quantized checkpoint, kv_cache_quant_algo "
               "FP8 (read by vLLM's modelopt method)";
    case KVCAL_FORMAT_QUARK:
        return "  quark: k_proj / v_proj (/ q_proj).output_scale per layer (the max over "
               "its kv heads) in a\n  Quark checkpoint with an FP8 KV cache (vLLM's "
               "quark "
               "method; its Llama / Qwen loaders rename\n  k_proj first: see "
               "validate-scales)";
    case KVCAL_FORMAT_KV_SCALE:
        return "  kv-scale: the old single self_attn.kv_scale per layer, max(k, v) over "
               "its kv heads\n  (AMD's FP8-KV checkpoints; vLLM's fp8 / modelopt / quark "
               "methods use it for K and V)";
    case KVCAL_FORMAT_TRTLLM:
        return "  trtllm: rank<r>.safetensors with one kv_cache_scaling_factor per "
               "layer, "
               "max(k, v) over its\n  kv heads, and config.json (kv_cache_quant_algo "
               "FP8, "
               "mapping): merge into TensorRT-LLM's\n  converted checkpoint";
    case KVCAL_FORMAT_ASCEND:
        return "  ascend: k_proj / v_proj.kv_cache_scale and kv_cache_offset per layer "
               "(per head: repeated\n  over head_dim) and quant_model_description.json "
               "(kv_cache_type C8), read by vllm-ascend's\n  C8 cache; 0.23.0.post1 "
               "dequantizes decode without the offsets";
    case KVCAL_FORMAT_UNKNOWN:
        break;
    }
    return "";
}
