/* io/scales/scales_validate.c: reports and findings, and the rules every scales
 * format shares (scale values, TP splits, integer keys). */
#include "io/scales/scales_validate.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/scale_rule.h"
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

/* What an engine does with a zero / negative / non-finite scale. The
 * checkpoint texts are those of vLLM's compressed-tensors KV-cache method,
 * the convention kvcal writes; io/scales/scales_checkpoint.c passes its own for
 * the other quantization methods. */
static const char *bad_value_consequence(kvcal_format format, const char *kind)
{
    if (format == KVCAL_FORMAT_LEGACY_JSON) {
        if (!strcmp(kind, "zero"))
            return "sglang loads it unchecked (the schema has no range check): a "
                   "backend that applies it divides by zero";
        if (!strcmp(kind, "negative"))
            return "sglang loads it unchecked (the schema has no range check)";
        return "sglang loads it unchecked: the layer's cache becomes NaN";
    }
    if (format == KVCAL_FORMAT_CHECKPOINT) {
        if (!strcmp(kind, "zero"))
            return "vLLM (compressed-tensors) loads it unchecked and fails only later: "
                   "the cache write divides by it";
        if (!strcmp(kind, "negative"))
            return "vLLM (compressed-tensors) loads it unchecked: nothing at load "
                   "checks the sign";
        return "vLLM (compressed-tensors) loads it and the layer's cache becomes NaN";
    }
    return "kvcal refuses to load or convert the file";
}

static void tally_first(char *dst, size_t size, const char *place, int *count)
{
    if ((*count)++ == 0)
        snprintf(dst, size, "%s", place);
}

int kvcal_report_check_value_as(kvcal_report_t *r, kvcal_format format,
                                const char *consequence, double v, const char *place,
                                kvcal_value_tally *t)
{
    if (isnan(v) || isinf(v)) {
        kvcal_report_add(r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_NONFINITE, place,
                         consequence ? consequence
                                     : bad_value_consequence(format, "nonfinite"),
                         "scale %s is not finite", isnan(v) ? "NaN" : "Inf");
        return 0;
    }
    if (v == 0.0) {
        kvcal_report_add(r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_NONFINITE, place,
                         consequence ? consequence
                                     : bad_value_consequence(format, "zero"),
                         "scale is 0");
        return 0;
    }
    if (v < 0.0) {
        kvcal_report_add(r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_NONFINITE, place,
                         consequence ? consequence
                                     : bad_value_consequence(format, "negative"),
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
    const double qmax = t->qmax > 0 ? t->qmax : KVCAL_FP8_E4M3_MAX;
    if ((float)v == 1.0f)
        tally_first(t->unit_at, sizeof t->unit_at, place, &t->unit);
    else if (v * qmax > 0.5 * KVCAL_FP8_E4M3_MAX)
        tally_first(t->large_at, sizeof t->large_at, place, &t->large);
    else if (v * qmax < 1e-6 * KVCAL_FP8_E4M3_MAX)
        tally_first(t->tiny_at, sizeof t->tiny_at, place, &t->tiny);
    return 1;
}

int kvcal_report_check_value(kvcal_report_t *r, kvcal_format format, double v,
                             const char *place, kvcal_value_tally *t)
{
    return kvcal_report_check_value_as(r, format, NULL, v, place, t);
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
        kvcal_report_add(r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                         !legacy   ? "kvcal refuses to load or convert the file"
                         : numeric ? "sglang (pydantic, lax mode) reads it as a number, "
                                     "stricter readers reject it; write a JSON number"
                                   : KVCAL_LEGACY_REJECTED,
                         "scale is the string \"%.40s\", not a number",
                         node->valuestring);
        return 0;
    }
    if (cJSON_IsBool(node)) {
        kvcal_report_add(r, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                         legacy
                             ? "sglang (pydantic, lax mode) reads true as 1.0 and false "
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
    const char *engine = format == KVCAL_FORMAT_LEGACY_JSON  ? "sglang uses"
                         : format == KVCAL_FORMAT_CHECKPOINT ? "vLLM uses"
                                                             : "engines use";
    char c1[160], c2[160], c3[200];
    const double qmax = t->qmax > 0 ? t->qmax : KVCAL_FP8_E4M3_MAX;
    const double large = 0.5 * KVCAL_FP8_E4M3_MAX / qmax,
                 tiny = 1e-6 * KVCAL_FP8_E4M3_MAX / qmax;
    char tiny_text[32]; /* "1e-6", not printf's "1e-06" */
    snprintf(tiny_text, sizeof tiny_text, "%.3g", tiny);
    char *e = strstr(tiny_text, "e-0");
    if (e)
        memmove(e + 2, e + 3, strlen(e + 3) + 1);
    snprintf(c1, sizeof c1,
             "%s it, but 1.0 is the uncalibrated default (absmax %g): check "
             "that calibration ran",
             engine, qmax);
    snprintf(c2, sizeof c2,
             "%s it; absmax above 224 is unusual for K/V: check for outliers "
             "or a wrong model",
             engine);
    snprintf(c3, sizeof c3,
             "%s it; a scale under %s (absmax under 0.00045) is below "
             "kvcal's floor: the layer saw no data or the file uses another "
             "convention (1/scale?)",
             engine, tiny_text);
    if (t->unit)
        kvcal_report_add(r, KVCAL_SEVERITY_WARNING, KVCAL_OK, t->unit_at, c1,
                         "%d of %d scales are exactly 1.0 (first here)", t->unit,
                         t->total);
    if (t->large)
        kvcal_report_add(r, KVCAL_SEVERITY_WARNING, KVCAL_OK, t->large_at, c2,
                         "%d of %d scales exceed %.3g (first here)", t->large, t->total,
                         large);
    if (t->tiny)
        kvcal_report_add(r, KVCAL_SEVERITY_WARNING, KVCAL_OK, t->tiny_at, c3,
                         "%d of %d scales are below %s (first here)", t->tiny, t->total,
                         tiny_text);
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

/* --- integer keys as pydantic reads them ------------------------------------ */

/* Bytes of the Unicode White_Space character starting at s[0] (what Rust's
 * str::trim strips), 0 when s does not start with one. */
static size_t space_at(const unsigned char *s, size_t n)
{
    if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || s[0] == ' '))
        return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0))
        return 2;
    if (n < 3)
        return 0;
    if ((s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) || /* U+1680 */
        (s[0] == 0xe2 && s[1] == 0x80 &&
         ((s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 ||
          s[2] == 0xaf)) ||                               /* U+2000.. */
        (s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) || /* U+205F */
        (s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80))   /* U+3000 */
        return 3;
    return 0;
}

/* Bytes of the White_Space character ending at s[n - 1], 0 when none. */
static size_t space_before(const unsigned char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (space_at(s + n - k, k) == k)
            return k;
    return 0;
}

/* A JSON integer (-?(0|[1-9][0-9]*)) of at most 4300 digits, as jiter's
 * NumberInt reads it; *v clamped to long. Returns 1 when s[0..n) is one. */
static int json_int(const char *s, size_t n, long *v)
{
    size_t i = 0;
    int neg = n > 0 && s[0] == '-';
    i += (size_t)neg;
    if (i == n || (s[i] == '0' && n - i > 1) || n - i > 4300)
        return 0;
    unsigned long long m = 0;
    int big = 0;
    for (; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return 0;
        unsigned d = (unsigned)(s[i] - '0');
        big |= m > (ULLONG_MAX - d) / 10;
        m = big ? m : m * 10 + d;
    }
    if (neg)
        *v = big || m > (unsigned long long)LONG_MAX + 1 ? LONG_MIN
             : m == 0                                    ? 0
                                                         : -(long)(m - 1) - 1;
    else
        *v = big || m > (unsigned long long)LONG_MAX ? LONG_MAX : (long)m;
    return 1;
}

/* pydantic-core's clean_int_str: the spelling it retries as an integer
 * after the plain JSON form failed, written into out (size > n + 1).
 * Returns 0 when it gives up. */
static int clean_int_key(const char *key, char *out)
{
    size_t before = strlen(key), b = 0, e = before, k;
    const unsigned char *u = (const unsigned char *)key;
    while (b < e && (k = space_at(u + b, e - b)) > 0)
        b += k;
    while (e > b && (k = space_before(u + b, e - b)) > 0)
        e -= k;
    const char *s = key + b;
    size_t n = e - b;
    if (n && s[0] == '+') {
        if (n > 1 && s[1] == '-')
            return 0;
        s++, n--;
    }
    int neg = 0;
    if (n && s[0] == '-') {
        if (n > 1 && (s[1] == '-' || s[1] == '+'))
            return 0;
        neg = 1;
        s++, n--;
    }
    if (n == 0 || !(s[0] == '0' || (s[0] >= '1' && s[0] <= '9') || s[0] == '-'))
        return 0;
    if (s[0] == '0') {
        size_t i = 1;
        while (i < n && (s[i] == '0' || s[i] == '_'))
            i++;
        if (i == n) {
            s += n - 1, n = 1;
        } else if ((s[i] >= '1' && s[i] <= '9') || s[i] == '-') {
            s += i, n -= i;
        } else if (s[i] == '.') {
            s += i - 1, n -= i - 1;
        } else {
            return 0;
        }
    }
    const char *dot = memchr(s, '.', n);
    if (dot && (size_t)(dot - s) + 1 < n) {
        size_t at = (size_t)(dot - s), z = at + 1;
        while (z < n && s[z] == '0')
            z++;
        if (z == n)
            n = at;
    }
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    int unders = memchr(s, '_', n) != NULL;
    int ok_unders = unders && s[0] != '_' && s[n - 1] != '_';
    for (size_t i = 0; ok_unders && i + 1 < n; i++)
        ok_unders = !(s[i] == '_' && s[i + 1] == '_');
    if (ok_unders) {
        for (size_t i = 0; i < n; i++)
            if (s[i] != '_')
                out[o++] = s[i];
        out[o] = '\0';
        return 1;
    }
    if (before == n)
        return 0;
    memcpy(out + o, s, n);
    out[o + n] = '\0';
    return 1;
}

kvcal_int_key kvcal_parse_pydantic_int_key(const char *key, long *value)
{
    size_t n = key ? strlen(key) : 0;
    if (!key)
        return KVCAL_INT_KEY_REJECTED;
    if (json_int(key, n, value))
        return strcmp(key, "-0") ? KVCAL_INT_KEY_CANONICAL : KVCAL_INT_KEY_NORMALIZED;
    char *clean = malloc(n + 2);
    long v = 0;
    int ok = clean && clean_int_key(key, clean) && json_int(clean, strlen(clean), &v);
    free(clean);
    if (!ok)
        return KVCAL_INT_KEY_REJECTED;
    *value = v;
    return KVCAL_INT_KEY_NORMALIZED;
}
