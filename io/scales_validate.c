/* io/scales_validate.c: reports and findings, and the rules every scales
 * format shares (scale values, TP splits, integer keys). */
#include "io/scales_validate.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

struct finding {
    kvcal_severity severity;
    kvcal_status status;
    char *place;
    char *message;
    char *consequence;
};

struct kvcal_report {
    kvcal_format format;
    int count, cap, dropped;
    int errors, warnings;
    int nomem;
    struct finding *items;
};

kvcal_status kvcal_report_create(kvcal_report_t **out)
{
    if (!out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_report_create: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_report_create: out of memory");
    return KVCAL_OK;
}

void kvcal_report_destroy(kvcal_report_t *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->count; i++) {
        free(r->items[i].place);
        free(r->items[i].message);
        free(r->items[i].consequence);
    }
    free(r->items);
    free(r);
}

/* Replaces control characters (from keys and strings of the file) so that
 * a finding stays one printable line. */
static void make_printable(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

void kvcal_report_add(kvcal_report_t *r, kvcal_severity severity, kvcal_status status,
                      const char *place, const char *consequence, const char *fmt, ...)
{
    if (severity == KVCAL_SEVERITY_ERROR)
        r->errors++;
    else
        r->warnings++;
    if (r->count == KVCAL_REPORT_MAX_FINDINGS) {
        r->dropped++;
        return;
    }
    if (r->count == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        struct finding *items = realloc(r->items, (size_t)cap * sizeof *items);
        if (!items) {
            r->nomem = 1;
            return;
        }
        r->items = items;
        r->cap = cap;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct finding *f = &r->items[r->count];
    f->severity = severity;
    f->status = status;
    f->place = strdup(place ? place : "");
    f->message = strdup(msg);
    f->consequence = strdup(consequence ? consequence : "");
    if (!f->place || !f->message || !f->consequence) {
        free(f->place);
        free(f->message);
        free(f->consequence);
        r->nomem = 1;
        return;
    }
    make_printable(f->place);
    make_printable(f->message);
    r->count++;
}

void kvcal_report_set_format(kvcal_report_t *r, kvcal_format format)
{
    r->format = format;
}
kvcal_format kvcal_report_format(const kvcal_report_t *r)
{
    return r ? r->format : KVCAL_FORMAT_UNKNOWN;
}
int kvcal_report_count(const kvcal_report_t *r)
{
    return r ? r->count : 0;
}

int kvcal_report_count_severity(const kvcal_report_t *r, kvcal_severity severity)
{
    if (!r)
        return 0;
    return severity == KVCAL_SEVERITY_ERROR ? r->errors : r->warnings;
}

kvcal_status kvcal_report_status(const kvcal_report_t *r)
{
    return r->nomem
               ? kvcal_fail(KVCAL_ERR_NOMEM, "validation: out of memory storing findings")
               : KVCAL_OK;
}

kvcal_status kvcal_report_get(const kvcal_report_t *r, int i, kvcal_finding *out)
{
    if (!r || !out || i < 0 || i >= r->count)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_report_get: finding %d out of range "
                          "[0, %d)",
                          i, r ? r->count : 0);
    const struct finding *f = &r->items[i];
    out->severity = f->severity;
    out->place = f->place;
    out->message = f->message;
    out->consequence = f->consequence;
    return KVCAL_OK;
}

int kvcal_report_passes(const kvcal_report_t *r, int strict)
{
    return r && r->errors == 0 && !r->nomem && !(strict && r->warnings > 0);
}

void kvcal_finding_format(const kvcal_finding *f, const char *name, char *buf,
                          size_t size)
{
    snprintf(buf, size, "%s: %s%s%s%s%s%s", name,
             f->severity == KVCAL_SEVERITY_WARNING ? "warning: " : "", f->place,
             f->place[0] ? ": " : "", f->message, f->consequence[0] ? ": " : "",
             f->consequence);
}

kvcal_status kvcal_report_fail_first(const kvcal_report_t *r, const char *name)
{
    if (r->nomem)
        return kvcal_report_status(r);
    for (int i = 0; i < r->count; i++) {
        if (r->items[i].severity != KVCAL_SEVERITY_ERROR)
            continue;
        kvcal_finding f;
        kvcal_report_get(r, i, &f);
        char line[1024];
        kvcal_finding_format(&f, name, line, sizeof line);
        return kvcal_fail(r->items[i].status, "%s", line);
    }
    if (r->errors > 0)
        return kvcal_fail(KVCAL_ERR_FORMAT, "%s: %d errors (not all stored)", name,
                          r->errors);
    return KVCAL_OK;
}

/* --- scale values -------------------------------------------------------- */

/* What an engine does with a zero / negative / non-finite scale. */
static const char *bad_value_consequence(kvcal_format format, const char *kind)
{
    if (format == KVCAL_FORMAT_LEGACY_JSON) {
        if (!strcmp(kind, "zero"))
            return "vLLM/sglang load it unchecked and divide by it: the layer's cache "
                   "becomes Inf/NaN";
        if (!strcmp(kind, "negative"))
            return "vLLM/sglang load it unchecked: every cached K/V of the layer flips "
                   "sign";
        return "vLLM/sglang load it unchecked: the layer's cache becomes NaN";
    }
    if (format == KVCAL_FORMAT_CHECKPOINT) {
        if (!strcmp(kind, "negative"))
            return "vLLM takes a negative scale for 'not in the checkpoint' and uses "
                   "1.0, "
                   "or fails an assertion when only one of K/V is negative";
        if (!strcmp(kind, "zero"))
            return "vLLM fails an assertion while loading the model";
        return "vLLM loads it and the layer's cache becomes NaN";
    }
    return "kvcal refuses to load or convert the file";
}

static void tally_first(char *dst, size_t size, const char *place, int *count)
{
    if ((*count)++ == 0)
        snprintf(dst, size, "%s", place);
}

int kvcal_report_check_value(kvcal_report_t *r, kvcal_format format, double v,
                             const char *place, kvcal_value_tally *t)
{
    if (isnan(v) || isinf(v)) {
        kvcal_report_add(r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_NONFINITE, place,
                         bad_value_consequence(format, "nonfinite"),
                         "scale %s is not finite", isnan(v) ? "NaN" : "Inf");
        return 0;
    }
    if (v == 0.0) {
        kvcal_report_add(r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_NONFINITE, place,
                         bad_value_consequence(format, "zero"), "scale is 0");
        return 0;
    }
    if (v < 0.0) {
        kvcal_report_add(r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_NONFINITE, place,
                         bad_value_consequence(format, "negative"),
                         "scale %g is negative", v);
        return 0;
    }
    if (v > 3.4028234663852886e38) {
        kvcal_report_add(
            r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_NONFINITE, place,
            "float32 engines read it as Inf and the layer's cache becomes NaN",
            "scale %g exceeds the float32 range", v);
        return 0;
    }
    if (v < FLT_MIN) {
        kvcal_report_add(
            r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_NONFINITE, place,
            "float32 engines read it as 0 or a subnormal whose reciprocal is infinite: "
            "the layer's cache becomes Inf/NaN",
            "scale %g is below the float32 range (smallest normal %g)", v,
            (double)FLT_MIN);
        return 0;
    }
    if (!t)
        return 1;
    t->total++;
    if ((float)v == 1.0f)
        tally_first(t->unit_at, sizeof t->unit_at, place, &t->unit);
    else if (v > 0.5)
        tally_first(t->large_at, sizeof t->large_at, place, &t->large);
    else if (v < 1e-6)
        tally_first(t->tiny_at, sizeof t->tiny_at, place, &t->tiny);
    return 1;
}

int kvcal_report_check_scale_node(kvcal_report_t *r, kvcal_format format,
                                  const cJSON *node, const char *place,
                                  kvcal_value_tally *t, float *out)
{
    int legacy = format == KVCAL_FORMAT_LEGACY_JSON;
    if (cJSON_IsString(node)) {
        char *end = NULL;
        errno = 0;
        strtod(node->valuestring, &end);
        int numeric = end != node->valuestring && *end == '\0' && errno == 0;
        kvcal_report_add(
            r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
            !legacy   ? "kvcal refuses to load or convert the file"
            : numeric ? "vLLM/sglang (pydantic, lax mode) read it as a number, "
                        "stricter readers reject it; write a JSON number"
                      : KVCAL_LEGACY_REJECTED,
            "scale is the string \"%.40s\", not a number", node->valuestring);
        return 0;
    }
    if (cJSON_IsBool(node)) {
        kvcal_report_add(
            r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
            legacy ? "vLLM/sglang (pydantic, lax mode) read true as 1.0 and false "
                     "as 0.0"
                   : "kvcal refuses to load or convert the file",
            "scale is a boolean, not a number");
        return 0;
    }
    if (!cJSON_IsNumber(node)) {
        kvcal_report_add(r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                         legacy ? KVCAL_LEGACY_REJECTED
                                : "kvcal refuses to load or convert the file",
                         "scale is %s, not a number",
                         cJSON_IsNull(node)     ? "null"
                         : cJSON_IsArray(node)  ? "an array"
                         : cJSON_IsObject(node) ? "an object"
                                                : "not a number");
        return 0;
    }
    if (!kvcal_report_check_value(r, format, node->valuedouble, place, t))
        return 0;
    *out = (float)node->valuedouble;
    return 1;
}

void kvcal_report_flush_tally(kvcal_report_t *r, kvcal_format format,
                              const kvcal_value_tally *t)
{
    const char *engine = format == KVCAL_FORMAT_LEGACY_JSON  ? "vLLM/sglang use"
                         : format == KVCAL_FORMAT_CHECKPOINT ? "vLLM uses"
                                                             : "engines use";
    char c1[160], c2[160], c3[200];
    snprintf(c1, sizeof c1,
             "%s it, but 1.0 is the uncalibrated default (absmax 448): check "
             "that calibration ran",
             engine);
    snprintf(c2, sizeof c2,
             "%s it; absmax above 224 is unusual for K/V: check for outliers "
             "or a wrong model",
             engine);
    snprintf(c3, sizeof c3,
             "%s it; a scale under 1e-6 (absmax under 0.00045) is below "
             "kvcal's floor: the layer saw no data or the file uses another "
             "convention (1/scale?)",
             engine);
    if (t->unit)
        kvcal_report_add(r, KVCAL_SEVERITY_WARNING, KVCAL_OK, t->unit_at, c1,
                         "%d of %d scales are exactly 1.0 (first here)", t->unit,
                         t->total);
    if (t->large)
        kvcal_report_add(r, KVCAL_SEVERITY_WARNING, KVCAL_OK, t->large_at, c2,
                         "%d of %d scales exceed 0.5 (first here)", t->large, t->total);
    if (t->tiny)
        kvcal_report_add(r, KVCAL_SEVERITY_WARNING, KVCAL_OK, t->tiny_at, c3,
                         "%d of %d scales are below 1e-6 (first here)", t->tiny,
                         t->total);
}

void kvcal_report_check_tp_split(kvcal_report_t *r, const char *place, int num_kv_heads,
                                 int tp)
{
    if (tp <= 0 || num_kv_heads <= 0)
        return;
    if ((num_kv_heads >= tp && num_kv_heads % tp == 0) ||
        (num_kv_heads < tp && tp % num_kv_heads == 0))
        return;
    kvcal_report_add(r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, place,
                     "vLLM/sglang refuse to start with this tp size (kv heads must split "
                     "evenly over the ranks or be replicated evenly)",
                     "%d kv heads cannot be split over tp %d", num_kv_heads, tp);
}

long kvcal_parse_index_key(const char *key)
{
    if (!key || !key[0] || strlen(key) > 9)
        return -1;
    if (key[0] == '0' && key[1])
        return -1;
    long v = 0;
    for (const char *p = key; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}
