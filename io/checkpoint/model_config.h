/* io/checkpoint/model_config.h: the fields of a Hugging Face config.json the toolkit
 * needs, read from the formats older transformers wrote (top-level
 * rope_theta / rope_scaling) and the one transformers 5 writes
 * (rope_parameters). */
#ifndef KVCAL_IO_MODEL_CONFIG_H
#define KVCAL_IO_MODEL_CONFIG_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "io/checkpoint/model_config_types.h"
#include "kvcal.h"

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

/* Values the KV cache holds for one token over all layers, K and V counted
 * apart: 2 * kv_layers * num_kv_heads * head_dim (per head) or kv_layers *
 * (kv_lora_rank + qk_rope_head_dim) (MLA); a sparse-attention indexer's keys
 * are not counted. 0 for KVCAL_KV_UNKNOWN. Bytes are this times the cache
 * dtype's size. */
int64_t kvcal_model_config_kv_values_per_token(const kvcal_model_config *c);

/* Whether layer l of c caches an entry per token (all but layer_types'
 * linear-attention layers). */
int kvcal_model_config_layer_caches(const kvcal_model_config *c, int l);

/* The kv heads and head size of what the KV cache holds per token and layer,
 * the shape of scales: one head of kv_lora_rank + qk_rope_head_dim for MLA
 * (one entry under one scale), else num_kv_heads and head_dim. */
int kvcal_model_config_cache_kv_heads(const kvcal_model_config *c);
int kvcal_model_config_cache_head_dim(const kvcal_model_config *c);

/* Reads `path` (config.json or the directory holding it). */
kvcal_status kvcal_model_config_load(const char *path, kvcal_model_config *out);

/* The same from a parsed config.json object (the caller keeps `root`). */
kvcal_status kvcal_model_config_from_json(const cJSON *root, const char *name,
                                          kvcal_model_config *out);

#endif
