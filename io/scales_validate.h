/* io/scales_validate.h: the validation engine shared by every scales format.
 *
 * Each format's checker walks a file once, adds findings (severity, place,
 * message, what the engine does with it) to a report, and builds the
 * in-memory scale set only when no error was found. Loading a file and
 * validating it therefore apply the same rules: kvcal_scales_load() is a
 * validation whose first error becomes the status.
 *
 * Engine behaviour the consequences describe (read from the engines' source):
 * - vLLM vllm/model_executor/model_loader/weight_utils.py
 *   kv_cache_scales_loader() and sglang python/sglang/srt/model_loader/
 *   weight_utils.py (a copy of it) json.load the file and validate it with
 *   the pydantic QuantParamSchema / KVCacheQuantSchema (vLLM
 *   vllm/model_executor/layers/quantization/schema.py). Any exception is
 *   logged and the loader returns no scales: every layer keeps 1.0. The
 *   schema rejects: dtype != "float8_e4m3fn"; a missing model_type key
 *   (Optional[str] without default is required in pydantic 2); model_type
 *   != config.json's; rank or layer keys that int() cannot parse ("rank0");
 *   a rank count != tp size; a rank missing from 0..tp-1; a rank whose
 *   layer count != num_hidden_layers (extra layers too); a layer missing
 *   from 0..num_hidden_layers-1; values pydantic cannot turn into a float.
 *   It accepts (lax mode) numeric strings and booleans as floats, and
 *   json.load accepts NaN, Infinity and 1e400 (inf): those load as is.
 *   Zero and negative scales also load unchecked.
 * - Checkpoint scales: vLLM BaseKVCacheMethod (vllm/model_executor/layers/
 *   quantization/kv_cache.py) starts k_scale / v_scale at -1.0; both > 0 are
 *   used as loaded; both still < 0 (not in the checkpoint) give 1.0 with a
 *   warning; only one > 0 (the deprecated single kv_scale) gives max(k, v)
 *   for both; otherwise (zero) an assertion fails and loading stops. */
#ifndef KVCAL_IO_SCALES_VALIDATE_H
#define KVCAL_IO_SCALES_VALIDATE_H

#include <cjson/cJSON.h>

#include "io/model_config.h"
#include "kvcal.h"

/* Findings kept per report; further ones are only counted. */
#define KVCAL_REPORT_MAX_FINDINGS 256

/* Consequences shared by several checks. */
#define KVCAL_LEGACY_REJECTED                                                            \
    "vLLM/sglang reject the file and use scale 1.0 for every layer"

/* What a checker knows about the deployment. */
typedef struct kvcal_scales_ctx {
    const char *name;                /* the file, for messages */
    const kvcal_model_config *model; /* NULL when no model was given */
    int tp;                          /* tensor-parallel size, 0 when unknown */
} kvcal_scales_ctx;

/* Creates an empty report. */
kvcal_status kvcal_report_create(kvcal_report_t **out);

/* Adds a finding; `status` is what a loader returns if it is the first
 * error (KVCAL_ERR_FORMAT, _MISMATCH, _NONFINITE, _PARSE). Allocation
 * failures are remembered and returned by kvcal_report_status(). */
void kvcal_report_add(kvcal_report_t *r, kvcal_severity severity, kvcal_status status,
                      const char *place, const char *consequence, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

void kvcal_report_set_format(kvcal_report_t *r, kvcal_format format);

/* KVCAL_ERR_NOMEM if a finding could not be stored, else KVCAL_OK. */
kvcal_status kvcal_report_status(const kvcal_report_t *r);

/* When the report holds an error, records it with kvcal_fail() as
 * "<name>: <place>: <message>: <consequence>" and returns its status;
 * else KVCAL_OK. */
kvcal_status kvcal_report_fail_first(const kvcal_report_t *r, const char *name);

/* Formats finding `f` of file `name` as one line (no newline) into buf. */
void kvcal_finding_format(const kvcal_finding *f, const char *name, char *buf,
                          size_t size);

/* --- scale values -------------------------------------------------------- */

/* Counts the suspicious values of one file, reported once each at the end
 * (one warning per kind, naming how many and the first place). */
typedef struct kvcal_value_tally {
    int total;
    int unit, large, tiny; /* == 1.0, > 0.5, < 1e-6 */
    char unit_at[128], large_at[128], tiny_at[128];
} kvcal_value_tally;

/* Checks a finite float scale: errors for non-finite, zero, negative (the
 * consequence names `format`'s engine), tallies the warnings. Returns 1 when
 * the value may be used. */
int kvcal_report_check_value(kvcal_report_t *r, kvcal_format format, double v,
                             const char *place, kvcal_value_tally *t);

/* Checks a JSON node that must hold a scale (number; strings and booleans
 * are errors naming how engines treat them). On success stores the value in
 * *out and returns 1. */
int kvcal_report_check_scale_node(kvcal_report_t *r, kvcal_format format,
                                  const cJSON *node, const char *place,
                                  kvcal_value_tally *t, float *out);

/* Emits the tallied warnings. */
void kvcal_report_flush_tally(kvcal_report_t *r, kvcal_format format,
                              const kvcal_value_tally *t);

/* Adds an error when `num_kv_heads` heads cannot be split over tp ranks the
 * way vLLM/sglang shard them (tp divides H, or H divides tp). */
void kvcal_report_check_tp_split(kvcal_report_t *r, const char *place, int num_kv_heads,
                                 int tp);

/* Parses a canonical non-negative decimal integer key ("0", "17"); -1 when
 * the key is anything else. */
long kvcal_parse_index_key(const char *key);

#endif
