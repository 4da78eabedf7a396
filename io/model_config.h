/* io/model_config.h: the fields of a Hugging Face config.json the toolkit
 * needs, read from the formats older transformers wrote (top-level
 * rope_theta / rope_scaling) and the one transformers 5 writes
 * (rope_parameters). */
#ifndef KVCAL_IO_MODEL_CONFIG_H
#define KVCAL_IO_MODEL_CONFIG_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "kvcal.h"

/* RoPE frequency scaling. Values only grow at the end. */
typedef enum kvcal_rope_type {
    KVCAL_ROPE_DEFAULT = 0,
    KVCAL_ROPE_LINEAR = 1,
    KVCAL_ROPE_LLAMA3 = 2,
    KVCAL_ROPE_DYNAMIC = 3,
    KVCAL_ROPE_YARN = 4,
    KVCAL_ROPE_OTHER = 5 /* any other rope_type; its name is in rope_type_name */
} kvcal_rope_type;

typedef struct kvcal_model_config {
    char model_type[128];    /* "llama", "mistral", "qwen2", "qwen3" */
    char architecture[128];  /* architectures[0], "LlamaForCausalLM" */
    int num_layers;          /* num_hidden_layers */
    int hidden_size;
    int intermediate_size;
    int num_attention_heads;
    int num_kv_heads;        /* num_key_value_heads, defaults to num_attention_heads */
    int head_dim;            /* explicit, else hidden_size / num_attention_heads
                                (qwen3: 128, the transformers default) */
    int vocab_size;
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    kvcal_rope_type rope_type;
    double rope_factor;                /* linear/llama3/yarn factor */
    double rope_low_freq_factor;       /* llama3 */
    double rope_high_freq_factor;      /* llama3 */
    int rope_original_max_position;    /* llama3/yarn original_max_position_embeddings */
    double rope_attention_factor;      /* multiplies RoPE's cos and sin: yarn's
                                          attention factor, 1.0 otherwise */
    double rope_beta_fast;             /* yarn, 32 when absent or 0; else 0 */
    double rope_beta_slow;             /* yarn, 1 when absent or 0; else 0 */
    int rope_truncate;                 /* yarn: correction range floored/ceiled
                                          (truncate, default true); else 0 */
    double partial_rotary_factor;      /* 1.0 when absent */
    int tie_word_embeddings;
    int attention_bias;      /* q/k/v projections carry a bias (qwen2: 1) */
    int qk_norm;             /* per-head q_norm / k_norm (qwen3: 1) */
    int sliding_window;      /* 0 when none */
    char torch_dtype[16];    /* "bfloat16", "float16", "float32" or "" */
    int has_quantization_config;
    int has_kv_cache_scheme;
    char rope_type_name[32]; /* rope_type as written ("default", "llama3", ...) */
} kvcal_model_config;

/* Upper bounds on the sizes a config.json may state. Real models stay far
 * below them (about 130 layers, 128 heads, head_dim 256, hidden 16384,
 * vocabularies of 262144); they keep a hostile file from making the checkers
 * loop over billions of layers and heads or size buffers from nonsense, and
 * keep products such as layers * kv_heads * head_dim within int64. */
#define KVCAL_CONFIG_MAX_LAYERS 65536     /* num_hidden_layers */
#define KVCAL_CONFIG_MAX_HEADS 65536      /* num_attention_heads, num_key_value_heads */
#define KVCAL_CONFIG_MAX_HEAD_DIM 65536   /* head_dim */
#define KVCAL_CONFIG_MAX_HIDDEN (1 << 20) /* hidden_size */
#define KVCAL_CONFIG_MAX_VOCAB (1 << 27)  /* vocab_size */

/* Parses config.json text. `name` is used in messages. Missing required
 * fields (num_hidden_layers, num_attention_heads, hidden_size, model_type)
 * are an error naming the field (KVCAL_ERR_FORMAT), as are wrong types,
 * non-positive counts, sizes above the KVCAL_CONFIG_MAX_* bounds and head
 * counts that do not divide. An explicit null
 * counts as absent (but a null yarn factor is derived, as transformers
 * does: yarn's original context, factor and attention factor are resolved
 * here). *out is zeroed on failure. */
kvcal_status kvcal_model_config_parse(const char *json, size_t len, const char *name,
                                      kvcal_model_config *out);

/* Reads `path` (config.json or the directory holding it). */
kvcal_status kvcal_model_config_load(const char *path, kvcal_model_config *out);

/* The same from a parsed config.json object (the caller keeps `root`). */
kvcal_status kvcal_model_config_from_json(const cJSON *root, const char *name,
                                          kvcal_model_config *out);

#endif
