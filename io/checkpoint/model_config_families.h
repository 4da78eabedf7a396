/* io/checkpoint/model_config_families.h: the fields and class defaults of
 * config.json that belong to one family (its model_type): each reader
 * returns KVCAL_OK at once for another model type; they run in
 * io/checkpoint/model_config.c's order (its sections filled first). */
#ifndef KVCAL_IO_MODEL_CONFIG_FAMILIES_H
#define KVCAL_IO_MODEL_CONFIG_FAMILIES_H

#include "io/checkpoint/config_fields.h"
#include "io/checkpoint/model_config_types.h"

/* The family whose fields config model_type `t` has (a multimodal model's
 * language model reads as its text family), any other as itself. */
const char *family_type(const char *t);

/* Qwen3-Next's and Qwen3.5's model types. */
int gated_delta_type(const char *t);

/* The transformers config class's rms_norm_eps of model_type `t`. */
double rms_norm_eps_default(const char *t);

/* Qwen's MoE sliding layers (use_sliding_window). */
kvcal_status cfg_qwen_moe_windows(const cfg_obj *top, kvcal_model_config *c);

/* DeepSeek-V2 / V3, Kimi K2, GLM-4.7-Flash, DeepSeek-V3.2 and GLM-5's experts. */
kvcal_status cfg_read_deepseek(const cfg_obj *top, kvcal_model_config *c);

/* MiniMax-M2's router fields. */
kvcal_status cfg_read_minimax_routing(const cfg_obj *top, kvcal_model_config *c);

/* MiniMax-M2's rotary_dim. */
kvcal_status cfg_read_rotary_dim(const cfg_obj *top, kvcal_model_config *c);

/* Gemma 2 and 3. */
kvcal_status cfg_read_gemma(const cfg_obj *top, kvcal_model_config *c);

/* Qwen3-Next's and Qwen3.5's gated delta-net. */
kvcal_status cfg_read_gated_delta(const cfg_obj *top, kvcal_model_config *c);

/* gpt-oss. */
kvcal_status cfg_read_gpt_oss(const cfg_obj *top, kvcal_model_config *c);

/* Llama 4's language model. */
kvcal_status cfg_read_llama4(const cfg_obj *top, kvcal_model_config *c);

/* Hunyuan's NTK-alpha RoPE and its MoE model's experts. */
kvcal_status cfg_read_hunyuan(const cfg_obj *top, kvcal_model_config *c);

/* IBM Granite's multipliers and its MoE models' experts. */
kvcal_status cfg_read_granite(const cfg_obj *top, kvcal_model_config *c);

/* Olmo 3's sliding layers and their RoPE. */
kvcal_status cfg_read_olmo3(const cfg_obj *top, kvcal_model_config *c);

/* SmolLM3's NoPE layers. */
kvcal_status cfg_read_smollm3(const cfg_obj *top, kvcal_model_config *c);

/* EXAONE 4's layer kinds. */
kvcal_status cfg_read_exaone4(const cfg_obj *top, kvcal_model_config *c);

/* ERNIE 4.5's mixture of experts. */
kvcal_status cfg_read_ernie45(const cfg_obj *top, kvcal_model_config *c);

/* GLM-4.1V's language model. */
kvcal_status cfg_read_glm4v_text(const cfg_obj *top, kvcal_model_config *c);

/* Ministral 3's llama_4_scaling_beta. */
kvcal_status cfg_query_scaling(const cfg_obj *top, kvcal_model_config *c);

#endif
