/* io/checkpoint/lm_prefix.h: where a Hugging Face checkpoint keeps its
 * language model's layers. A causal LM keeps them under "model."; a
 * multimodal model (Gemma 3, Mistral 3, Qwen3-VL, Kimi K2.5) under
 * "model.language_model." when transformers 4.52 or later saved it, under
 * "language_model.model." as Gemma 3, Mistral 3 and Kimi K2.5 were
 * released. An engine loads a KV scale by the name of its attention
 * module in the same layout as the weights (schemas/README.md). */
#ifndef KVCAL_IO_CHECKPOINT_LM_PREFIX_H
#define KVCAL_IO_CHECKPOINT_LM_PREFIX_H

enum {
    KVCAL_LM_CAUSAL = 0,  /* "model." */
    KVCAL_LM_WRAPPED = 1, /* "model.language_model." */
    KVCAL_LM_RELEASED = 2 /* "language_model.model." */
};
#define KVCAL_LM_PREFIXES 3

/* The prefix of layout i (KVCAL_LM_*). */
const char *kvcal_lm_prefix(int i);

/* The layout whose prefix `name` starts with, followed by "layers."; -1 for
 * another name. */
int kvcal_lm_prefix_of(const char *name);

/* The layout of the checkpoint in model_dir, read from the names of
 * model.safetensors.index.json's weight_map, else of model.safetensors'
 * header: that of its first layer tensor. `otherwise` when it holds no
 * layer tensor or no such file is there. */
int kvcal_lm_prefix_of_model_dir(const char *model_dir, int otherwise);

#endif
