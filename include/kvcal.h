/* kvcal.h: public API of libkvcal.
 *
 * kvcal calibrates and checks the scales an inference engine needs to keep its
 * KV cache in FP8 (e4m3), and quantizes K/V into such a cache.
 *
 * Conventions (all functions):
 * - Every fallible function returns a kvcal_status; KVCAL_OK is 0. On failure
 *   kvcal_last_error() returns one line naming the file, the place and the fix
 *   (thread-local; valid until the next kvcal call on the same thread).
 * - kvcal_x_create(..., kvcal_x_t **out) sets *out = NULL on failure; the
 *   caller owns a created object and frees it with kvcal_x_destroy();
 *   kvcal_x_destroy(NULL) is a no-op.
 * - const char * returned by a getter is owned by the object and lives as long
 *   as it does.
 * - The library never prints and never exits.
 * - Scale semantics: dequantized = fp8_value * scale, scale = max(absmax/448,
 *   1/(448*512)); OCP e4m3fn (max 448).
 */
#ifndef KVCAL_H
#define KVCAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvcal_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- scales -------------------------------------------------------------- */

/* On-disk formats of DESIGN.md ("Formats"). Values only grow at the end. */
typedef enum kvcal_format {
    KVCAL_FORMAT_UNKNOWN = 0,
    KVCAL_FORMAT_LEGACY_JSON = 1, /* sglang --quantization-param-path, old vLLM */
    KVCAL_FORMAT_KVCAL_JSON = 2,  /* kvcal's full result */
    KVCAL_FORMAT_CHECKPOINT = 3,  /* k_scale / v_scale tensors + config.json */
    KVCAL_FORMAT_MODELOPT = 4,    /* ModelOpt: k_proj.k_scale / v_proj.v_scale */
    KVCAL_FORMAT_QUARK = 5,       /* Quark: k_proj / v_proj (/ q_proj).output_scale */
    KVCAL_FORMAT_KV_SCALE = 6,    /* the old single self_attn.kv_scale (AMD, fp8) */
    KVCAL_FORMAT_TRTLLM = 7,      /* TensorRT-LLM: rank<r>.safetensors
                                     kv_cache_scaling_factor */
    KVCAL_FORMAT_ASCEND = 8       /* vllm-ascend's C8 (int8) cache: ModelSlim's
                                     k_proj.kv_cache_scale / kv_cache_offset +
                                     quant_model_description.json */
} kvcal_format;

/* A set of K/V scales for every layer (and kv head), with optional absmax,
 * model identity and calibration provenance. Opaque. */
typedef struct kvcal_scales kvcal_scales_t;

/* Creates a scale set of num_layers x num_kv_heads, every scale unset (0).
 * Both counts in [1, 65536], their product at most 2^24. */
KVCAL_API kvcal_status kvcal_scales_create(int num_layers, int num_kv_heads,
                                           kvcal_scales_t **out);
KVCAL_API void kvcal_scales_destroy(kvcal_scales_t *scales);

KVCAL_API int kvcal_scales_num_layers(const kvcal_scales_t *scales);
KVCAL_API int kvcal_scales_num_kv_heads(const kvcal_scales_t *scales);
KVCAL_API kvcal_granularity kvcal_scales_granularity(const kvcal_scales_t *scales);

/* Per-head K and V scales of one layer (head in [0, num_kv_heads)). */
KVCAL_API kvcal_status kvcal_scales_get_head(const kvcal_scales_t *scales, int layer,
                                             int head, float *k_scale, float *v_scale);
/* Per-tensor K and V scales of one layer (for a per-head set: the max over
 * heads, which is what an engine with one scale per layer must use). */
KVCAL_API kvcal_status kvcal_scales_get_tensor(const kvcal_scales_t *scales, int layer,
                                               float *k_scale, float *v_scale);

/* --- filling a scale set (what an engine learned, for kvcal_scales_write) - */

/* Every setter checks its values first: a scale that is not finite and > 0
 * is KVCAL_ERR_NONFINITE naming layer (and head), a layer or head out of
 * range KVCAL_ERR_INVALID_ARG, and the set is unchanged then. A created
 * set is of KVCAL_GRANULARITY_HEAD with every scale 0 (unset), which the
 * writers refuse: set every layer before writing. */

/* K and V scales of one (layer, head). */
KVCAL_API kvcal_status kvcal_scales_set_head(kvcal_scales_t *scales, int layer, int head,
                                             float k_scale, float v_scale);
/* One K and one V scale for every head of a layer (a per-tensor scale). */
KVCAL_API kvcal_status kvcal_scales_set_layer(kvcal_scales_t *scales, int layer,
                                              float k_scale, float v_scale);
/* Per-head K and V scales of one layer, (num_kv_heads) each; either may be
 * NULL to keep that tensor's scales (K and V set apart). */
KVCAL_API kvcal_status kvcal_scales_set_layer_heads(kvcal_scales_t *scales, int layer,
                                                    const float *k_scale,
                                                    const float *v_scale);
/* The query scale of one layer (FP8 attention). Kept in the set and in the
 * kvcal JSON format, which holds it for every layer or none: a set with some
 * layers' q scale unset is refused by that writer. */
KVCAL_API kvcal_status kvcal_scales_set_q(kvcal_scales_t *scales, int layer,
                                          float q_scale);
/* The query scale of one layer; 0 when it was never set. */
KVCAL_API kvcal_status kvcal_scales_get_q(const kvcal_scales_t *scales, int layer,
                                          float *q_scale);
/* How the formats store the set: KVCAL_GRANULARITY_TENSOR writes one scale
 * per layer (the max over its heads), KVCAL_GRANULARITY_HEAD one per head. */
KVCAL_API kvcal_status kvcal_scales_set_granularity(kvcal_scales_t *scales,
                                                    kvcal_granularity granularity);
/* The model identity the files record (the legacy format's model_type must
 * be config.json's for sglang to load it). A NULL string or a 0 count keeps
 * the value; strings up to 127 bytes; num_attention_heads a multiple of the
 * set's kv heads. */
KVCAL_API kvcal_status kvcal_scales_set_model(kvcal_scales_t *scales,
                                              const char *architecture,
                                              const char *model_type,
                                              int num_attention_heads, int head_dim);

/* Loads any supported scales file or checkpoint directory, detecting the
 * format. model_dir (may be NULL) is the directory holding config.json; it
 * supplies model_type and head counts the file itself may lack. tp is the
 * tensor-parallel size the legacy format is read for (1 when unsure). */
KVCAL_API kvcal_status kvcal_scales_load(const char *path, const char *model_dir, int tp,
                                         kvcal_scales_t **out);

/* The largest tensor-parallel size kvcal reads or writes a legacy file for:
 * more ranks than any deployment has (a file with more is not a scales
 * file). The heads must also split over tp as the engines shard them: tp
 * divides num_kv_heads, or num_kv_heads divides tp. */
#define KVCAL_TP_MAX 4096

/* Writes `scales` in `format` at `path` atomically (temp file + rename).
 * For the directory formats (checkpoint, modelopt, quark, kv-scale, trtllm)
 * path is an output directory; model_dir is the model's directory (its
 * config.json is copied with the format's KV-cache entries merged; modelopt,
 * quark and kv-scale need a model already quantized with that method, whose
 * weight loader vLLM uses). tp is used by the legacy and trtllm formats
 * (one entry per rank). The formats read by BaseKVCacheMethod (modelopt,
 * quark, kv-scale) and trtllm hold one scale per layer: the max over heads
 * (kv-scale and trtllm: max(k, v) too). Refuses non-finite, zero or negative
 * scales (KVCAL_ERR_NONFINITE / KVCAL_ERR_FORMAT) and writes nothing then.
 * ascend takes int8 sets alone (offsets 0 for a symmetric one) and refuses
 * non-zero offsets: vllm-ascend 0.23.0.post1 dequantizes decode without
 * them (KVCAL_ERR_UNSUPPORTED). */
KVCAL_API kvcal_status kvcal_scales_write(const kvcal_scales_t *scales,
                                          kvcal_format format, const char *path,
                                          const char *model_dir, int tp);

/* Short name of a format ("legacy-json", "kvcal-json", "checkpoint",
 * "modelopt", "quark", "kv-scale", "trtllm", "ascend", "unknown"); never
 * NULL. */
KVCAL_API const char *kvcal_format_name(kvcal_format format);

/* --- validation ---------------------------------------------------------- */

/* Severity of a finding. Values only grow at the end. */
typedef enum kvcal_severity {
    KVCAL_SEVERITY_ERROR = 0,  /* an engine rejects or misreads the file */
    KVCAL_SEVERITY_WARNING = 1 /* loads, but the scales are suspicious */
} kvcal_severity;

/* One finding of a validation. The strings are owned by the report. */
typedef struct kvcal_finding {
    kvcal_severity severity;
    const char *place;       /* "kv_cache.scaling_factor.0.5", "" for the whole file */
    const char *message;     /* what is wrong ("2 ranks but tp 1") */
    const char *consequence; /* what the engine does with it */
} kvcal_finding;

/* The findings of one validation, in the order they were found. Opaque. */
typedef struct kvcal_report kvcal_report_t;

/* Validates a scales file or checkpoint (format detected) against the model
 * whose config.json is in model_dir (may be NULL: model checks skipped) and
 * the tensor-parallel size tp (0: unknown, the file's rank count is taken).
 * Returns KVCAL_OK when the file could be examined, whatever the findings
 * (an empty or unparsable file is a finding); a missing path, an unreadable
 * model config or a failed allocation is an error status and *out is NULL
 * then. The caller owns the report (kvcal_report_destroy). */
KVCAL_API kvcal_status kvcal_scales_validate_file(const char *path, const char *model_dir,
                                                  int tp, kvcal_report_t **out);

KVCAL_API void kvcal_report_destroy(kvcal_report_t *report);
/* Format the file was recognised as (KVCAL_FORMAT_UNKNOWN when none). */
KVCAL_API kvcal_format kvcal_report_format(const kvcal_report_t *report);
/* Number of findings (of any severity). */
KVCAL_API int kvcal_report_count(const kvcal_report_t *report);
/* Number of findings of one severity. */
KVCAL_API int kvcal_report_count_severity(const kvcal_report_t *report,
                                          kvcal_severity severity);
/* Finding i in [0, count); the strings live as long as the report. */
KVCAL_API kvcal_status kvcal_report_get(const kvcal_report_t *report, int i,
                                        kvcal_finding *out);
/* 1 when the file passes: no error, and no warning either when strict. */
KVCAL_API int kvcal_report_passes(const kvcal_report_t *report, int strict);

#include "kvcal_quant.h"     /* online quantization: part of the API */
#include "kvcal_calibrate.h" /* in-engine calibration: part of the API */

#ifdef __cplusplus
}
#endif

#endif
