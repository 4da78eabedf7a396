/* io/scales/scales_io.h: the three scales formats of DESIGN.md ("Formats"), each a
 * checker (findings + scale set) and an atomic writer. kvcal_scales_load(),
 * kvcal_scales_write() and kvcal_scales_validate_file() (include/kvcal.h)
 * dispatch to them.
 *
 * Checkers add every finding to `rep` and, when `out` is not NULL and no
 * error was found, build the scale set (*out, caller destroys). They return
 * a non-OK status only for failures unrelated to the file's content
 * (allocation). Writers refuse non-finite, zero or negative scales and
 * write nothing then. */
#ifndef KVCAL_IO_SCALES_IO_H
#define KVCAL_IO_SCALES_IO_H

#include <cjson/cJSON.h>

#include "core/scales.h"
#include "io/scales/scales_validate.h"

#define KVCAL_SCALES_FORMAT_NAME "kvcal-kv-scales"
#define KVCAL_SCALES_FORMAT_VERSION 1
#define KVCAL_CHECKPOINT_SHARD "kv_scales.safetensors"
#define KVCAL_CHECKPOINT_INDEX "model.safetensors.index.json"
#define KVCAL_MODELOPT_QUANT_CONFIG "hf_quant_config.json"
#define KVCAL_ASCEND_DESCRIPTION "quant_model_description.json"

/* The options that choose an output format, for the messages of the
 * writers, which both commands call: "write the kvcal format with " ... */
#define KVCAL_FORMAT_OPTIONS "calibrate --format or convert --to"

/* 1 for the formats written as a directory (a checkpoint's scales). */
static inline int kvcal_format_is_dir(kvcal_format f)
{
    return f == KVCAL_FORMAT_CHECKPOINT || f == KVCAL_FORMAT_MODELOPT ||
           f == KVCAL_FORMAT_QUARK || f == KVCAL_FORMAT_KV_SCALE ||
           f == KVCAL_FORMAT_TRTLLM || f == KVCAL_FORMAT_ASCEND;
}

/* --- legacy JSON (io/scales/scales_legacy.c) ----------------------------------- */

kvcal_status kvcal_scales_check_legacy(const cJSON *root, const kvcal_scales_ctx *ctx,
                                       kvcal_report_t *rep, kvcal_scales_t **out);
/* tp >= 1; the set's kv heads are split over tp ranks as the engines do. */
kvcal_status kvcal_scales_write_legacy(const kvcal_scales_t *s, const char *path, int tp);
/* *s, the set kvcal_scales_load read from the legacy file at path (for
 * messages) without a model's config.json (a llama2.c model), holds one
 * scale per layer and tp rank: the loader, which does not know the model's
 * kv heads then, gives each rank one head. Spreads the ranks over the
 * model's kv_heads as the engines shard them (rank r of tp holds heads
 * [r*H/tp, (r+1)*H/tp); when H < tp, head r*H/tp): *s is replaced. Nothing
 * is done for another layer count (the caller's check speaks) or when the
 * head counts agree; a rank count the heads do not split over is
 * KVCAL_ERR_MISMATCH naming the file. */
kvcal_status kvcal_scales_spread_legacy_ranks(const char *path, int layers, int kv_heads,
                                              kvcal_scales_t **s);

/* --- kvcal JSON (io/scales/scales_kvcal_json.c) -------------------------------- */

kvcal_status kvcal_scales_check_kvcal_json(const cJSON *root, const kvcal_scales_ctx *ctx,
                                           kvcal_report_t *rep, kvcal_scales_t **out);
kvcal_status kvcal_scales_write_kvcal_json(const kvcal_scales_t *s, const char *path);

/* --- checkpoint (io/scales/scales_checkpoint.c) -------------------------------- */

/* The layer of a tensor name "model.layers.<i>.self_attn.<suffix>" (i a
 * canonical decimal; or a multimodal model's "model.language_model." /
 * "language_model.model." before "layers.": io/checkpoint/lm_prefix.h),
 * *suffix pointing into name, *layout (may be NULL) the KVCAL_LM_* of the
 * prefix; -1 for another name. */
long kvcal_scales_parse_attn_name(const char *name, const char **suffix, int *layout);

/* path: a checkpoint directory or one .safetensors file. ctx->model, when
 * NULL, is read from the directory's (or the file's directory's)
 * config.json if there is one. */
kvcal_status kvcal_scales_check_checkpoint(const char *path, const kvcal_scales_ctx *ctx,
                                           kvcal_report_t *rep, kvcal_scales_t **out);
/* Writes kv_scales.safetensors (the names of `format`: checkpoint,
 * modelopt, quark or kv-scale), config.json (model_dir's, with the
 * format's KV-cache entries merged; hf_quant_config.json too for a
 * ModelOpt model that has one) and the index into dir (created if
 * missing). model_dir is required. */
kvcal_status kvcal_scales_write_checkpoint(const kvcal_scales_t *s, kvcal_format format,
                                           const char *dir, const char *model_dir);
/* The file names (in the output directory) the writer of `format` writes
 * for model_dir; returns their count (<= max). */
int kvcal_scales_checkpoint_files(kvcal_format format, const char *model_dir,
                                  const char **names, int max);

/* --- TensorRT-LLM (io/scales/scales_trtllm.c) ----------------------------- */

/* 1 when dir holds a TensorRT-LLM converted checkpoint (rank0.safetensors). */
int kvcal_scales_is_trtllm_dir(const char *dir);
kvcal_status kvcal_scales_check_trtllm(const char *dir, const kvcal_scales_ctx *ctx,
                                       kvcal_report_t *rep, kvcal_scales_t **out);
/* Writes config.json and rank<r>.safetensors (r < tp) into dir (created if
 * missing): one kv_cache_scaling_factor per layer, max(k, v) over its heads. */
kvcal_status kvcal_scales_write_trtllm(const kvcal_scales_t *s, const char *dir, int tp);

/* --- vllm-ascend C8 (io/scales/scales_ascend.c) -------------------------- */

/* 1 when dir holds ModelSlim's quant_model_description.json. */
int kvcal_scales_is_ascend_dir(const char *dir);
/* The C8 scales and offsets of dir (kvcal's kv_scales.safetensors when
 * present, else the checkpoint) against its description and config.json
 * (or ctx->model); the set is INT8 when every offset is 0, else INT8_ASYM. */
kvcal_status kvcal_scales_check_ascend(const char *dir, const kvcal_scales_ctx *ctx,
                                       kvcal_report_t *rep, kvcal_scales_t **out);
/* Writes kv_scales.safetensors, the index and quant_model_description.json
 * for model_dir (a Hugging Face checkpoint, unquantized or ModelSlim's)
 * into dir. An INT8 set gets offsets 0; an INT8_ASYM set with a non-zero
 * offset is refused unless allow_offsets (vllm-ascend 0.23.0.post1 ignores
 * them on decode). */
kvcal_status kvcal_scales_write_ascend(const kvcal_scales_t *s, const char *dir,
                                       const char *model_dir, int allow_offsets);
/* The file names the writer writes; returns their count (<= max). */
int kvcal_scales_ascend_files(const char **names, int max);

#endif
