/* calib/model_fp8.h: the FP8 weights of a checkpoint (compressed-tensors,
 * fp8 and ModelOpt schemes: io/checkpoint/weight_quant.h) as the engine
 * serves them; calib/model.c opens them with the model. */
#ifndef KVCAL_CALIB_MODEL_FP8_H
#define KVCAL_CALIB_MODEL_FP8_H

#include <stdint.h>

#include "calib/model_desc.h"
#include "io/checkpoint/safetensors.h"

/* The FP8 weight w of `layer` (of one expert, for a per-expert weight) as
 * the engine serves it: the e4m3 bytes of each part (views into the checkpoint, stacked
 * by rows as the logical weight; a view's numel the whole tensor's, its rows
 * the part's, taken through its grouping where the part regroups them:
 * kvcal_tensor_view_row), the map each part's bytes go through (vLLM's
 * requantization of a fused weight's per-tensor shards to their largest scale; the
 * identity where mapped is 0), the static input scale (the largest of the parts',
 * KVCAL_FP8A_STATIC; else 0). */
typedef struct kvcal_fp8_parts {
    kvcal_tensor_view part[KVCAL_WEIGHT_PARTS_MAX];
    int n;
    int mapped;
    uint8_t map[KVCAL_WEIGHT_PARTS_MAX][256];
    float input_scale;
} kvcal_fp8_parts;

typedef struct kvcal_model_fp8 kvcal_model_fp8_t;

/* Reads the quantization config of the model in `dir` and checks every
 * matrix of d's family in checkpoint ck (borrowed; path names it in
 * messages) against it: an F8_E4M3 tensor the config does not quantize, a
 * float one it does, an FP8 weight kvcal does not run, schemes that differ
 * between layers, parts, experts or the shards vLLM fuses, missing or
 * misshapen scales are errors naming the tensor. Fills d->fp8 and
 * d->weight_scheme. *out = NULL on failure. */
kvcal_status kvcal_model_fp8_open(const kvcal_checkpoint_t *ck, const char *dir,
                                  const char *path, kvcal_model_desc *d,
                                  kvcal_model_fp8_t **out);

/* NULL is a no-op. */
void kvcal_model_fp8_close(kvcal_model_fp8_t *f);

/* kvcal_model_fp8_weight on the checkpoint. */
kvcal_status kvcal_model_fp8_get(const kvcal_model_fp8_t *f, const kvcal_checkpoint_t *ck,
                                 const kvcal_model_desc *d, int layer, kvcal_weight w,
                                 int expert, kvcal_fp8_parts *p, float *scales);

/* FP8 weight w of `layer` dequantized as served into out (rows, cols) fp32
 * (a per-expert weight's experts one after another), its static input
 * scale into *input_scale (the largest of the parts' and experts');
 * scratch holds the scales of one copy (kvcal_fp8_weight_scales floats). */
kvcal_status kvcal_model_fp8_dequantize(const kvcal_model_fp8_t *f,
                                        const kvcal_checkpoint_t *ck,
                                        const kvcal_model_desc *d, int layer,
                                        kvcal_weight w, float *out, float *scratch,
                                        float *input_scale);

#endif
