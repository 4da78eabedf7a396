/* io/scales/scales_validate.h: the validation engine shared by every scales format.
 *
 * Each format's checker walks a file once, adds findings (severity, place,
 * message, what the engine does with it) to a report, and builds the
 * in-memory scale set only when no error was found. Loading a file and
 * validating it therefore apply the same rules: kvcal_scales_load() is a
 * validation whose first error becomes the status.
 *
 * The engine behaviour the consequences describe was read from the engines'
 * source (sglang 0.5.23, vLLM 0.33.0, pydantic 2.12-2.14); schemas/README.md
 * lists every rule with its source file and function, and the corpus file
 * of tests/malformed/scales that checks it. The formats' own files say what
 * their loader does (io/scales/scales_legacy.c, io/scales/scales_checkpoint.c). */
#ifndef KVCAL_IO_SCALES_VALIDATE_H
#define KVCAL_IO_SCALES_VALIDATE_H

#include <cjson/cJSON.h>

#include "io/checkpoint/model_config.h"
#include "kvcal.h"

/* Findings kept per report; further ones are only counted. */
#define KVCAL_REPORT_MAX_FINDINGS 256

/* Consequences shared by several checks. */
#define KVCAL_LEGACY_REJECTED "sglang rejects the file and uses scale 1.0 for every layer"

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
    /* absmax / scale of the scales' format (kvcal_scales_format_qmax); 0:
     * e4m3's 448. The thresholds below are those of e4m3 scales, in absmax */
    double qmax;
    int total;
    int unit, large,
        tiny; /* == 1.0, absmax > 224, absmax < 0.000448 (e4m3: > 0.5, < 1e-6) */
    char unit_at[128], large_at[128], tiny_at[128];
} kvcal_value_tally;

/* Checks a finite float scale: errors for non-finite, zero, negative (the
 * consequence names `format`'s engine), tallies the warnings. Returns 1 when
 * the value may be used. */
int kvcal_report_check_value(kvcal_report_t *r, kvcal_format format, double v,
                             const char *place, kvcal_value_tally *t);

/* As kvcal_report_check_value, with `consequence` (when not NULL) as what
 * the engine does with any zero, negative or non-finite value. */
int kvcal_report_check_value_as(kvcal_report_t *r, kvcal_format format,
                                const char *consequence, double v, const char *place,
                                kvcal_value_tally *t);

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

/* How sglang reads a rank or layer key of the legacy file: pydantic 2 in
 * lax mode validating dict[int, ...] (pydantic-core's str_as_int). */
typedef enum kvcal_int_key {
    KVCAL_INT_KEY_REJECTED = 0, /* not an integer: the schema fails */
    KVCAL_INT_KEY_CANONICAL,    /* "7", "-1": the decimal spelling of the value */
    KVCAL_INT_KEY_NORMALIZED,   /* "07", "+7", " 7", "7.0", "1_0": read as the value */
} kvcal_int_key;

/* Classifies `key` the way pydantic reads it as a Python int: surrounding
 * Unicode white space, one leading '+' or '-', leading zeros, one all-zero
 * fraction (".0", ".00") and single underscores between digits are
 * accepted. *value gets the integer (clamped to the range of long) unless
 * the key is rejected. */
kvcal_int_key kvcal_parse_pydantic_int_key(const char *key, long *value);

#endif
