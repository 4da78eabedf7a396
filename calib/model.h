/* calib/model.h: a decoder-only model as the runner needs it: its shape, its
 * RoPE, and fp32 weights one layer at a time.
 *
 * Sources: a Hugging Face checkpoint (config.json + safetensors, single or
 * sharded) of an architecture a family of calib/arch.h runs, with F32 / F16 /
 * BF16 weights, or FP8 ones (compressed-tensors, fp8 and ModelOpt schemes:
 * io/checkpoint/weight_quant.h), its tensors named by the family's file; or a llama2.c
 * .bin checkpoint (the Llama family). Checkpoints are mapped, never read whole; a layer's
 * weights are converted to fp32 into one buffer when the layer is loaded, so memory is
 * one layer of fp32 weights whatever the model size. Every tensor's presence,
 * dtype and shape is checked when the model is opened. */
#ifndef KVCAL_CALIB_MODEL_H
#define KVCAL_CALIB_MODEL_H

#include <stdint.h>

#include "calib/arch.h"
#include "calib/model_desc.h"
#include "calib/model_fp8.h"
#include "core/fp8_linear.h"
#include "core/scales.h"
#include "io/checkpoint/llama2c.h"
#include "io/checkpoint/safetensors.h"
#include "kvcal.h"

/* One layer's fp32 weights by logical weight (calib/arch.h), (out, in)
 * row-major like nn.Linear, fused weights stacked by rows; NULL where the
 * model has none. */
typedef struct kvcal_layer_weights {
    const float *w[KVCAL_W_COUNT];
    /* an FP8 weight's w is dequantized as the engine serves it (its
     * requantized bytes times their scales); input_scale[w] its static
     * activation scale (KVCAL_FP8A_STATIC), else 0 */
    float input_scale[KVCAL_W_COUNT];
} kvcal_layer_weights;

typedef struct kvcal_model kvcal_model_t;

/* Opens a checkpoint directory (config.json + *.safetensors), a single
 * .safetensors file beside its config.json, or a llama2.c .bin file, and
 * checks every tensor. An unsupported architecture, rope scaling or weight
 * dtype, a missing tensor or a wrong shape is an error naming it.
 * *out = NULL on failure; the caller closes the model. */
kvcal_status kvcal_model_open(const char *path, kvcal_model_t **out);

/* Unmaps and frees; NULL is a no-op. */
void kvcal_model_close(kvcal_model_t *m);

/* Owned by the model. */
const kvcal_model_desc *kvcal_model_describe(const kvcal_model_t *m);

/* The header of a llama2.c source, NULL for a Hugging Face checkpoint;
 * owned by the model. */
const kvcal_llama2c_config *kvcal_model_llama2c_config(const kvcal_model_t *m);

/* The model identity recorded with scales. */
void kvcal_model_identity_get(const kvcal_model_t *m, kvcal_model_identity *id);

/* Loads layer `layer` (fp32); the pointers stay valid until the next load
 * of any layer or close. Not thread-safe on one model. */
kvcal_status kvcal_model_load_layer(kvcal_model_t *m, int layer, kvcal_layer_weights *w);

/* out (n) = values first .. first + n - 1 of view v in row-major order of
 * its (rows, cols) matrix, converted to float (exactly: MXFP4 and the bf16
 * and f16 values are floats). Thread-safe. */
kvcal_status kvcal_tensor_view_to_f32(const kvcal_tensor_view *v, int64_t first,
                                      int64_t n, float *out);

/* The checkpoint tensors that copy `copy` (the expert of a per-expert
 * weight, else 0; see kvcal_model_weight_copies) of logical weight w of
 * `layer` stacks, in order (the parts of calib/arch.h), into parts (the
 * copy's part of a tensor that stacks every expert); *n their count, 0
 * when the model has no such weight. The copies follow one another in the
 * logical weight. Reads nothing; thread-safe, unlike load_layer: for
 * loaders that convert or copy the weights themselves (the cuda backend's,
 * on several threads). */
kvcal_status kvcal_model_weight_parts(const kvcal_model_t *m, int layer, kvcal_weight w,
                                      int copy,
                                      kvcal_tensor_view parts[KVCAL_WEIGHT_PARTS_MAX],
                                      int *n);

/* Fills *p for FP8 weight w (desc->fp8[w].w not KVCAL_FP8W_NONE) of
 * `layer`, copy `expert` (0 but for a per-expert weight), and its scales
 * into `scales` (kvcal_fp8_weight_scales floats of one copy,
 * core/fp8_linear.h's layout). Reads only the scales; thread-safe. */
kvcal_status kvcal_model_fp8_weight(const kvcal_model_t *m, int layer, kvcal_weight w,
                                    int expert, kvcal_fp8_parts *p, float *scales);

/* The embedding table (vocab, hidden) and the final norm (hidden) and
 * classifier (vocab, hidden; the embedding when tied) as views. */
void kvcal_model_head_views(const kvcal_model_t *m, kvcal_tensor_view *embed,
                            kvcal_tensor_view *final_norm, kvcal_tensor_view *lm_head);

/* out (n, hidden) = embedding rows of ids (n); an id outside [0, vocab) is
 * an error naming it. */
kvcal_status kvcal_model_embed(const kvcal_model_t *m, const int32_t *ids, int64_t n,
                               float *out);

/* The final norm (hidden) and the classifier (vocab, hidden), fp32, valid
 * until close; converted on the first call. */
kvcal_status kvcal_model_load_head(kvcal_model_t *m, const float **final_norm,
                                   const float **lm_head);

#endif
