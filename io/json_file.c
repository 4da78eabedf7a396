/* io/json_file.c: strict JSON on top of cJSON.
 *
 * A scanner checks the whole text against RFC 8259 first (syntax, nesting
 * depth, UTF-8, number range) and remembers where every object key starts;
 * only text that passes reaches cJSON, so cJSON never recurses deeper than
 * KVCAL_JSON_MAX_DEPTH. Duplicate keys are found on the tree cJSON builds and
 * located through the remembered key offsets (cJSON keeps members in text
 * order, so a pre-order walk meets keys in the order the scanner did). */
#include "io/json_file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/atomic_file.h"
#include "io/file_read.h"

#define JSON_MAX_NUMBER_CHARS 400

/* --- scanner ------------------------------------------------------------ */

typedef struct json_scan {
    const char *text;
    size_t len;
    size_t pos;
    const char *name;
    int depth;
    size_t *keys; /* (nkeys) byte offset of each object key's opening quote */
    size_t nkeys;
    size_t cap;
} json_scan;

/* 1-based line and column (in characters) of byte offset `at`. */
static void json_locate(const char *text, size_t len, size_t at, int *line, int *col)
{
    int l = 1, c = 1;
    if (at > len)
        at = len;
    for (size_t i = 0; i < at; i++) {
        unsigned char b = (unsigned char)text[i];
        if (b == '\n') {
            l++;
            c = 1;
        } else if ((b & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static kvcal_status scan_fail(const json_scan *sc, size_t at, const char *what,
                              const char *fix)
{
    int line, col;
    json_locate(sc->text, sc->len, at, &line, &col);
    return kvcal_fail(KVCAL_ERR_PARSE, "%s:%d:%d: %s; %s", sc->name, line, col, what,
                      fix);
}

/* Describes the byte at `at` for a message: "'x'", "byte 0x01", "end of file". */
static const char *scan_describe(const json_scan *sc, size_t at, char buf[16])
{
    if (at >= sc->len)
        return "end of file";
    unsigned char b = (unsigned char)sc->text[at];
    if (b >= 0x21 && b < 0x7F)
        snprintf(buf, 16, "'%c'", b);
    else
        snprintf(buf, 16, "byte 0x%02X", b);
    return buf;
}

static void scan_skip_ws(json_scan *sc)
{
    while (sc->pos < sc->len) {
        char ch = sc->text[sc->pos];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r')
            break;
        sc->pos++;
    }
}

static int scan_has_prefix_ci(const json_scan *sc, const char *word)
{
    size_t n = strlen(word);
    if (sc->len - sc->pos < n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = sc->text[sc->pos + i];
        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        if (ch != word[i])
            return 0;
    }
    return 1;
}

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Reads the 4 hex digits of a \u escape starting at sc->pos; -1 if malformed. */
static long scan_hex4(json_scan *sc)
{
    if (sc->len - sc->pos < 4)
        return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(sc->text[sc->pos + (size_t)i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    sc->pos += 4;
    return v;
}

/* Length of the well-formed UTF-8 sequence at `s` (n bytes available), or 0. */
static int utf8_sequence_length(const unsigned char *s, size_t n)
{
    unsigned char b = s[0];
    int len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if ((size_t)len > n || s[1] < lo || s[1] > hi)
        return 0;
    for (int i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

static kvcal_status scan_string(json_scan *sc)
{
    size_t start = sc->pos;
    sc->pos++;
    while (sc->pos < sc->len) {
        unsigned char b = (unsigned char)sc->text[sc->pos];
        if (b == '"') {
            sc->pos++;
            return KVCAL_OK;
        }
        if (b == 0)
            return scan_fail(sc, sc->pos, "NUL byte inside a string",
                             "the file is binary or corrupted; regenerate it");
        if (b < 0x20) {
            char what[64];
            snprintf(what, sizeof what, "raw control character 0x%02X inside a string",
                     b);
            return scan_fail(sc, sc->pos, what,
                             b == '\n' ? "close the string on its line or write \\n"
                                       : "escape it as \\u00XX");
        }
        if (b == '\\') {
            size_t esc = sc->pos;
            sc->pos++;
            if (sc->pos >= sc->len)
                break;
            char e = sc->text[sc->pos++];
            if (e == 'u') {
                long cp = scan_hex4(sc);
                if (cp < 0)
                    return scan_fail(sc, esc, "\\u escape without 4 hex digits",
                                     "write \\u followed by 4 hex digits");
                if (cp == 0)
                    return scan_fail(sc, esc, "\\u0000 inside a string",
                                     "remove the NUL character");
                if (cp >= 0xDC00 && cp <= 0xDFFF)
                    return scan_fail(sc, esc, "lone low surrogate escape",
                                     "pair it with a preceding \\uD800-\\uDBFF escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    long lo = -1;
                    if (sc->len - sc->pos >= 2 && sc->text[sc->pos] == '\\' &&
                        sc->text[sc->pos + 1] == 'u') {
                        sc->pos += 2;
                        lo = scan_hex4(sc);
                    }
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        return scan_fail(
                            sc, esc,
                            "high surrogate escape not followed by a low surrogate",
                            "write the character as a \\uD8xx\\uDCxx pair or as UTF-8");
                }
            } else if (!strchr("\"\\/bfnrt", e) || e == '\0') {
                char what[64];
                snprintf(what, sizeof what, "invalid escape \\%c",
                         (e >= 0x21 && e < 0x7F) ? e : '?');
                return scan_fail(sc, esc, what,
                                 "use one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX");
            }
            continue;
        }
        if (b >= 0x80) {
            int n = utf8_sequence_length((const unsigned char *)sc->text + sc->pos,
                                         sc->len - sc->pos);
            if (n == 0)
                return scan_fail(sc, sc->pos, "invalid UTF-8 inside a string",
                                 "save the file as UTF-8");
            sc->pos += (size_t)n;
            continue;
        }
        sc->pos++;
    }
    return scan_fail(sc, start, "unterminated string", "close it with '\"'");
}

static kvcal_status scan_number(json_scan *sc)
{
    size_t start = sc->pos;
    const char *t = sc->text;
    if (t[sc->pos] == '-')
        sc->pos++;
    if (sc->pos >= sc->len || t[sc->pos] < '0' || t[sc->pos] > '9')
        return scan_fail(sc, start, "'-' not followed by a digit",
                         "write a number such as -1.5");
    if (t[sc->pos] == '0' && sc->pos + 1 < sc->len && t[sc->pos + 1] >= '0' &&
        t[sc->pos + 1] <= '9')
        return scan_fail(sc, start, "number with a leading zero",
                         "remove the leading zero");
    while (sc->pos < sc->len && t[sc->pos] >= '0' && t[sc->pos] <= '9')
        sc->pos++;
    if (sc->pos < sc->len && t[sc->pos] == '.') {
        sc->pos++;
        if (sc->pos >= sc->len || t[sc->pos] < '0' || t[sc->pos] > '9')
            return scan_fail(sc, start, "'.' not followed by a digit",
                             "write a digit after the decimal point");
        while (sc->pos < sc->len && t[sc->pos] >= '0' && t[sc->pos] <= '9')
            sc->pos++;
    }
    if (sc->pos < sc->len && (t[sc->pos] == 'e' || t[sc->pos] == 'E')) {
        sc->pos++;
        if (sc->pos < sc->len && (t[sc->pos] == '+' || t[sc->pos] == '-'))
            sc->pos++;
        if (sc->pos >= sc->len || t[sc->pos] < '0' || t[sc->pos] > '9')
            return scan_fail(sc, start, "exponent without digits",
                             "write digits after 'e'");
        while (sc->pos < sc->len && t[sc->pos] >= '0' && t[sc->pos] <= '9')
            sc->pos++;
    }
    size_t n = sc->pos - start;
    if (n > JSON_MAX_NUMBER_CHARS) {
        char what[64];
        snprintf(what, sizeof what, "number longer than %d characters",
                 JSON_MAX_NUMBER_CHARS);
        return scan_fail(sc, start, what, "shorten it");
    }
    char buf[JSON_MAX_NUMBER_CHARS + 1];
    memcpy(buf, t + start, n);
    buf[n] = '\0';
    if (!isfinite(strtod(buf, NULL)))
        return scan_fail(sc, start, "number out of the range of a double",
                         "write a finite number below 1.8e308");
    return KVCAL_OK;
}

static kvcal_status scan_value(json_scan *sc);

static kvcal_status scan_push_key(json_scan *sc)
{
    if (sc->nkeys == sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 64;
        size_t *keys = realloc(sc->keys, cap * sizeof *keys);
        if (!keys)
            return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory while reading JSON",
                              sc->name);
        sc->keys = keys;
        sc->cap = cap;
    }
    sc->keys[sc->nkeys++] = sc->pos;
    return KVCAL_OK;
}

static kvcal_status scan_container(json_scan *sc)
{
    char open = sc->text[sc->pos];
    char close = open == '{' ? '}' : ']';
    char buf[16], what[96];
    if (++sc->depth > KVCAL_JSON_MAX_DEPTH) {
        snprintf(what, sizeof what, "nesting deeper than %d levels",
                 KVCAL_JSON_MAX_DEPTH);
        return scan_fail(sc, sc->pos, what, "flatten the document");
    }
    sc->pos++;
    scan_skip_ws(sc);
    if (sc->pos < sc->len && sc->text[sc->pos] == close) {
        sc->pos++;
        sc->depth--;
        return KVCAL_OK;
    }
    for (;;) {
        kvcal_status s;
        if (open == '{') {
            if (sc->pos >= sc->len || sc->text[sc->pos] != '"') {
                snprintf(what, sizeof what, "expected a quoted key, found %s",
                         scan_describe(sc, sc->pos, buf));
                return scan_fail(
                    sc, sc->pos, what,
                    "object keys are strings in double quotes, with no trailing comma");
            }
            if ((s = scan_push_key(sc)) != KVCAL_OK || (s = scan_string(sc)) != KVCAL_OK)
                return s;
            scan_skip_ws(sc);
            if (sc->pos >= sc->len || sc->text[sc->pos] != ':') {
                snprintf(what, sizeof what, "expected ':' after the key, found %s",
                         scan_describe(sc, sc->pos, buf));
                return scan_fail(sc, sc->pos, what, "write key: value");
            }
            sc->pos++;
            scan_skip_ws(sc);
        }
        if ((s = scan_value(sc)) != KVCAL_OK)
            return s;
        scan_skip_ws(sc);
        if (sc->pos < sc->len && sc->text[sc->pos] == ',') {
            sc->pos++;
            scan_skip_ws(sc);
            if (open == '[' && sc->pos < sc->len && sc->text[sc->pos] == ']')
                return scan_fail(sc, sc->pos, "trailing comma before ']'",
                                 "remove the comma");
            continue;
        }
        if (sc->pos < sc->len && sc->text[sc->pos] == close) {
            sc->pos++;
            sc->depth--;
            return KVCAL_OK;
        }
        snprintf(what, sizeof what, "expected ',' or '%c', found %s", close,
                 scan_describe(sc, sc->pos, buf));
        return scan_fail(sc, sc->pos, what,
                         open == '{'
                             ? "separate members with ',' and close the object with '}'"
                             : "separate elements with ',' and close the array with ']'");
    }
}

static kvcal_status scan_value(json_scan *sc)
{
    char buf[16], what[96];
    if (sc->pos >= sc->len)
        return scan_fail(sc, sc->pos, "unexpected end of file, expected a value",
                         "the file is truncated; complete it");
    char ch = sc->text[sc->pos];
    if (ch == '{' || ch == '[')
        return scan_container(sc);
    if (ch == '"')
        return scan_string(sc);
    if (scan_has_prefix_ci(sc, "nan") || scan_has_prefix_ci(sc, "inf") ||
        scan_has_prefix_ci(sc, "-inf") || scan_has_prefix_ci(sc, "+inf") ||
        scan_has_prefix_ci(sc, "-nan"))
        return scan_fail(sc, sc->pos, "NaN/Infinity literal",
                         "JSON has no non-finite numbers; write a finite value");
    if (ch == '-' || (ch >= '0' && ch <= '9'))
        return scan_number(sc);
    static const char *const literals[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(literals[i]);
        if (sc->len - sc->pos >= n && memcmp(sc->text + sc->pos, literals[i], n) == 0) {
            sc->pos += n;
            return KVCAL_OK;
        }
    }
    if (ch == '\0')
        return scan_fail(sc, sc->pos, "NUL byte where a value was expected",
                         "the file is binary or corrupted; regenerate it");
    if (ch == '\'')
        return scan_fail(sc, sc->pos, "single-quoted string", "use double quotes");
    snprintf(what, sizeof what, "unexpected %s, expected a value",
             scan_describe(sc, sc->pos, buf));
    return scan_fail(sc, sc->pos, what,
                     "write a string, number, object, array, true, false or null");
}

/* Checks the whole text; on success sc->keys holds every key offset. */
static kvcal_status scan_document(json_scan *sc)
{
    char buf[16], what[96];
    if (sc->len >= 3 && memcmp(sc->text, "\xEF\xBB\xBF", 3) == 0)
        return scan_fail(sc, 0, "UTF-8 byte order mark at the start",
                         "save the file as UTF-8 without BOM (Python's json rejects it)");
    scan_skip_ws(sc);
    if (sc->pos >= sc->len)
        return kvcal_fail(
            KVCAL_ERR_PARSE,
            "%s:1:1: empty file, expected a JSON value; write the JSON document",
            sc->name);
    kvcal_status s = scan_value(sc);
    if (s != KVCAL_OK)
        return s;
    scan_skip_ws(sc);
    if (sc->pos < sc->len) {
        snprintf(what, sizeof what, "unexpected %s after the end of the JSON value",
                 scan_describe(sc, sc->pos, buf));
        return scan_fail(sc, sc->pos, what,
                         "remove the trailing text (one document per file)");
    }
    return KVCAL_OK;
}

/* --- duplicate keys ------------------------------------------------------ */

typedef struct json_member {
    const char *key;
    size_t order; /* index of the key in document order */
} json_member;

static int member_compare(const void *a, const void *b)
{
    const json_member *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Walks `item` in pre-order, numbering keys; fails on the first duplicate. */
static kvcal_status json_check_duplicates(const cJSON *item, const json_scan *sc,
                                          size_t *order)
{
    if (!cJSON_IsObject(item) && !cJSON_IsArray(item))
        return KVCAL_OK;
    int is_object = cJSON_IsObject(item);
    size_t n = 0;
    for (const cJSON *c = item->child; c; c = c->next)
        n++;
    json_member *members = NULL;
    if (is_object && n > 1 && !(members = malloc(n * sizeof *members)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory while checking keys",
                          sc->name);
    size_t i = 0;
    kvcal_status s = KVCAL_OK;
    for (const cJSON *c = item->child; c && s == KVCAL_OK; c = c->next, i++) {
        if (members)
            members[i] = (json_member){c->string, *order};
        if (is_object)
            (*order)++;
        s = json_check_duplicates(c, sc, order);
    }
    if (s == KVCAL_OK && members) {
        qsort(members, n, sizeof *members, member_compare);
        for (i = 1; i < n; i++) {
            if (strcmp(members[i - 1].key, members[i].key) != 0)
                continue;
            int line, col, first_line, first_col;
            size_t at = members[i].order < sc->nkeys ? sc->keys[members[i].order] : 0;
            size_t first =
                members[i - 1].order < sc->nkeys ? sc->keys[members[i - 1].order] : 0;
            json_locate(sc->text, sc->len, at, &line, &col);
            json_locate(sc->text, sc->len, first, &first_line, &first_col);
            s = kvcal_fail(KVCAL_ERR_PARSE,
                           "%s:%d:%d: duplicate key \"%.128s\" (first at line %d); "
                           "remove one of them (readers disagree on which wins)",
                           sc->name, line, col, members[i].key, first_line);
            break;
        }
    }
    free(members);
    return s;
}

/* --- public: read -------------------------------------------------------- */

kvcal_status kvcal_json_parse(const char *text, size_t len, const char *name, cJSON **out)
{
    *out = NULL;
    if (!name)
        name = "(json)";
    if (len > KVCAL_JSON_MAX_BYTES)
        return kvcal_fail(KVCAL_ERR_PARSE,
                          "%s: %zu bytes of JSON exceed the limit of %u MiB; this is not "
                          "a config or scales file",
                          name, len, KVCAL_JSON_MAX_BYTES >> 20);
    if (!text && len)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: NULL text with length %zu", name,
                          len);
    json_scan sc = {.text = text ? text : "", .len = len, .name = name};
    kvcal_status s = scan_document(&sc);
    cJSON *root = NULL;
    if (s == KVCAL_OK) {
        const char *end = NULL;
        root = cJSON_ParseWithLengthOpts(sc.text, len, &end, 0);
        if (!root) {
            const char *at = cJSON_GetErrorPtr();
            size_t off =
                (at && at >= sc.text && at <= sc.text + len) ? (size_t)(at - sc.text) : 0;
            s = scan_fail(&sc, off, "cJSON could not build the document",
                          "the host may be out of memory");
        }
    }
    if (s == KVCAL_OK) {
        size_t order = 0;
        s = json_check_duplicates(root, &sc, &order);
    }
    free(sc.keys);
    if (s != KVCAL_OK) {
        cJSON_Delete(root);
        return s;
    }
    *out = root;
    return KVCAL_OK;
}

kvcal_status kvcal_json_load(const char *path, cJSON **out)
{
    *out = NULL;
    char *buf;
    size_t n;
    kvcal_status s = kvcal_file_read(path, "JSON file", KVCAL_JSON_MAX_BYTES, &buf, &n);
    if (s)
        return s;
    s = kvcal_json_parse(buf, n, path, out);
    free(buf);
    return s;
}

/* --- public: write ------------------------------------------------------- */

/* Finds a non-finite number; `where` accumulates the key path. */
static int json_find_nonfinite(const cJSON *item, char *where, size_t cap)
{
    if (cJSON_IsNumber(item))
        return !isfinite(item->valuedouble);
    if (!cJSON_IsObject(item) && !cJSON_IsArray(item))
        return 0;
    size_t base = strlen(where);
    int i = 0;
    for (const cJSON *c = item->child; c; c = c->next, i++) {
        if (cJSON_IsObject(item))
            snprintf(where + base, cap - base, "%s%s", base ? "." : "",
                     c->string ? c->string : "");
        else
            snprintf(where + base, cap - base, "[%d]", i);
        if (json_find_nonfinite(c, where, cap))
            return 1;
    }
    where[base] = '\0';
    return 0;
}

kvcal_status kvcal_json_write(const char *path, const cJSON *root)
{
    char where[512] = "";
    if (!root)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: no JSON document to write", path);
    if (json_find_nonfinite(root, where, sizeof where))
        return kvcal_fail(KVCAL_ERR_NONFINITE,
                          "%s: value at %s is NaN or infinite; nothing was written (JSON "
                          "cannot hold it)",
                          path, where[0] ? where : "the document root");
    char *text = cJSON_Print(root);
    if (!text)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory while printing JSON", path);
    size_t n = strlen(text);
    kvcal_atomic_file af;
    kvcal_status s = kvcal_atomic_open(&af, path);
    if (s == KVCAL_OK) {
        if (fwrite(text, 1, n, af.f) != n || fputc('\n', af.f) == EOF) {
            kvcal_atomic_abort(&af);
            s = kvcal_fail(KVCAL_ERR_IO, "%s: write failed: %s; nothing was written",
                           path, strerror(errno));
        } else {
            s = kvcal_atomic_commit(&af);
        }
    }
    cJSON_free(text);
    return s;
}
