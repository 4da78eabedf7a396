/* io/checkpoint/weight_quant.h: the weight quantization a checkpoint's
 * config declares, read as vLLM reads it (schemas/README.md, "FP8
 * weights"): the FP8 schemes of compressed-tensors (config_groups of float
 * 8-bit weights: strategy tensor, channel or block; input activations
 * static per tensor, dynamic, or none), of the fp8 method (per-tensor
 * weight_scale, or weight_block_size with weight_scale_inv) and of ModelOpt
 * (quant_algo FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO; in config.json or
 * in hf_quant_config.json beside it), with the modules each leaves
 * unquantized (ignore, ignored_layers / modules_to_not_convert,
 * exclude_modules). */
#ifndef KVCAL_IO_WEIGHT_QUANT_H
#define KVCAL_IO_WEIGHT_QUANT_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "core/fp8_linear.h"
#include "kvcal.h"

/* Who wrote the scales. Values only grow at the end. */
typedef enum kvcal_wq_method {
    KVCAL_WQ_NONE = 0,               /* no weight quantization declared */
    KVCAL_WQ_COMPRESSED_TENSORS = 1, /* llm-compressor */
    KVCAL_WQ_FP8 = 2,                /* quant_method fp8 (Qwen3-FP8, DeepSeek-V3) */
    KVCAL_WQ_MODELOPT = 3,           /* NVIDIA ModelOpt */
    KVCAL_WQ_OTHER = 4 /* a method kvcal does not read (quark, ...): its weights must
                          be unquantized (a config written for KV-cache scales) */
} kvcal_wq_method;

/* How vLLM turns the per-tensor scales of a fused weight's shards into one
 * (requantize_with_max_scale): always (compressed-tensors, fp8), or only
 * when they differ (ModelOpt FP8). */
typedef enum kvcal_wq_requant {
    KVCAL_WQ_REQUANT_ALWAYS = 0,
    KVCAL_WQ_REQUANT_IF_DIFFERENT = 1
} kvcal_wq_requant;

/* How one module's weight is stored and served. */
typedef struct kvcal_wq_scheme {
    kvcal_fp8_linear fp8;   /* fp8.w KVCAL_FP8W_NONE: the module is not quantized */
    const char *scale_name; /* "weight_scale" or "weight_scale_inv" (after the module) */
    int input_scale;        /* 1: an "input_scale" tensor (static activations) */
} kvcal_wq_scheme;

typedef struct kvcal_weight_quant kvcal_weight_quant_t;

/* Reads the weight quantization of the model in `dir`: config.json's
 * quantization_config, else a ModelOpt hf_quant_config.json beside it.
 * None, or one that quantizes only the KV cache: method KVCAL_WQ_NONE. A
 * weight scheme kvcal does not run (int, 4-bit, NVFP4, awq, gptq, ...):
 * KVCAL_ERR_UNSUPPORTED with one line naming it. *out = NULL on failure;
 * the caller destroys it. */
kvcal_status kvcal_weight_quant_load(const char *dir, kvcal_weight_quant_t **out);

/* The same from a quantization config object (config.json's
 * quantization_config, or an hf_quant_config.json); `name` is used in
 * messages. qc NULL: method KVCAL_WQ_NONE. */
kvcal_status kvcal_weight_quant_parse(const cJSON *qc, const char *name,
                                      kvcal_weight_quant_t **out);

/* NULL is a no-op. */
void kvcal_weight_quant_destroy(kvcal_weight_quant_t *q);

kvcal_wq_method kvcal_weight_quant_method(const kvcal_weight_quant_t *q);
kvcal_wq_requant kvcal_weight_quant_requant(const kvcal_weight_quant_t *q);

/* The method as the config names it ("compressed-tensors", "fp8",
 * "modelopt FP8_PB_WO", "quark"), "" for none. Owned by q. */
const char *kvcal_weight_quant_name(const kvcal_weight_quant_t *q);

/* The file the config was read from (config.json, or hf_quant_config.json
 * beside it; the name given to kvcal_weight_quant_parse), "" where there
 * was none. Owned by q. */
const char *kvcal_weight_quant_source(const kvcal_weight_quant_t *q);

/* The scheme of module `module` (a linear layer's name,
 * "model.layers.0.self_attn.q_proj"): the config's scheme for it, or
 * fp8.w KVCAL_FP8W_NONE where the config leaves it unquantized (ignored,
 * or no config group targets it). */
void kvcal_weight_quant_module(const kvcal_weight_quant_t *q, const char *module,
                               kvcal_wq_scheme *out);

/* One line describing scheme s: "FP8 weights per-tensor, activations static
 * per-tensor" ... into buf (n bytes). */
void kvcal_wq_scheme_describe(const kvcal_fp8_linear *s, char *buf, size_t n);

#endif
