/* io/dataset/dataset.c: documents from a dataset file, and samples drawn from them.
 *
 * Formats (detected from the path):
 * - a directory: one document per file (sorted by name; dot files and
 *   subdirectories skipped, a FIFO, socket or device refused);
 * - *.jsonl / *.ndjson / *.json: one JSON object per line with a text field
 *   (--text-field, default "text"), or chat "messages" [{role, content}]
 *   joined as "role: content" lines, or "input_ids" token ids (taken
 *   verbatim: no BOS is added);
 * - *.h5 / *.hdf5 (or the HDF5 signature): a token set written by
 *   `kvcal tokenize` (input_ids [N, L] int32, lengths [N]), one document per
 *   row;
 * - anything else: plain text, documents separated by blank lines.
 *
 * UTF-8 policy: text must be well-formed UTF-8; the first invalid byte is an
 * error naming the file, line and byte offset (nothing is replaced silently,
 * since the ids would then differ from the engine's).
 *
 * Sampling: documents are visited in an order shuffled by the seed
 * (Fisher-Yates driven by xoshiro256**, seeded through splitmix64), and
 * tokenized lazily until enough tokens are there. Text documents are encoded
 * with the tokenizer's special tokens (BOS as its configuration says).
 * Packed samples are consecutive seq_len windows of the concatenated
 * documents; when the tokenizer adds a BOS, a window that does not start
 * with it gets one in front (the engine always sees BOS at position 0), so
 * a window needs room for one token after it (seq_len 1 is refused);
 * token-id documents are never changed. With
 * pack = 0 each sample is one document, cut at seq_len, shorter ones padded
 * with id -1. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"
#include "io/dataset/dataset.h"
#include "io/dataset/dataset_hdf5.h"
#include "io/dataset/dataset_impl.h"
#include "io/file_read.h"
#include "io/path.h"
#include "io/utf8.h"

// --- PRNG: splitmix64 seeds xoshiro256** -------------------------------------------

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void kvcal_rng_seed(kvcal_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

uint64_t kvcal_rng_next(kvcal_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [0, n) without modulo bias (Lemire's rejection). */
static uint64_t rng_below(kvcal_rng *r, uint64_t n)
{
    uint64_t limit = -n % n;
    for (;;) {
        uint64_t x = kvcal_rng_next(r);
        if (x >= limit)
            return x % n;
    }
}

/* Error for the first invalid UTF-8 byte of text, naming its line. */
static kvcal_status check_utf8(const char *path, const char *text, size_t len,
                               size_t line0)
{
    size_t bad = kvcal_utf8_check(text, len);
    if (bad == len)
        return KVCAL_OK;
    size_t line = line0;
    for (size_t i = 0; i < bad; i++)
        line += text[i] == '\n';
    return kvcal_fail(
        KVCAL_ERR_FORMAT,
        "%s: line %zu: invalid UTF-8 (byte 0x%02X at offset %zu); convert the "
        "file to UTF-8 first (e.g. iconv -f latin1 -t utf-8)",
        path, line, (unsigned char)text[bad], bad);
}

static int is_blank_line(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* Plain text: documents are runs of non-blank lines. */
static kvcal_status read_text(const char *path, kvcal_doclist *l)
{
    char *data;
    size_t len;
    kvcal_status st = kvcal_file_read(path, "dataset", SIZE_MAX, &data, &len);
    if (st)
        return st;
    if ((st = check_utf8(path, data, len, 1))) {
        free(data);
        return st;
    }
    if ((st = kvcal_doclist_keep_buffer(l, data)))
        return st;
    size_t i = 0, doc_start = 0, doc_end = 0;
    int in_doc = 0;
    while (i <= len) {
        size_t e = i;
        while (e < len && data[e] != '\n')
            e++;
        if (!is_blank_line(data + i, e - i)) {
            if (!in_doc)
                doc_start = i;
            in_doc = 1;
            doc_end = e;
        } else if (in_doc) {
            if ((st = kvcal_doclist_push(l, (kvcal_doc){.text = data + doc_start,
                                                        .len = doc_end - doc_start})))
                return st;
            in_doc = 0;
        }
        i = e + 1;
    }
    if (in_doc)
        st = kvcal_doclist_push(
            l, (kvcal_doc){.text = data + doc_start, .len = doc_end - doc_start});
    return st;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory: one document per regular file, sorted by name. */
static kvcal_status read_dir(const char *path, kvcal_doclist *l)
{
    DIR *d = opendir(path);
    if (!d)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot open dataset directory: %s", path,
                          strerror(errno));
    kvcal_status st = KVCAL_OK;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char **p = realloc(names, (n + 1) * sizeof *p);
        if (!p || !(p[n] = strdup(e->d_name))) {
            names = p ? p : names;
            st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory listing the directory",
                            path);
            goto fail;
        }
        names = p;
        n++;
    }
    if (n)
        qsort(names, n, sizeof *names, name_cmp);
    for (size_t i = 0; i < n; i++) {
        char full[4096];
        if (snprintf(full, sizeof full, "%s/%s", path, names[i]) >= (int)sizeof full) {
            st =
                kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s/%s: path too long", path, names[i]);
            goto fail;
        }
        struct stat sb;
        if (stat(full, &sb) == 0 && S_ISDIR(sb.st_mode))
            continue;
        char *data;
        size_t len;
        if ((st = kvcal_file_read(full, "dataset", SIZE_MAX, &data, &len)))
            goto fail;
        if ((st = check_utf8(full, data, len, 1))) {
            free(data);
            goto fail;
        }
        while (len && (data[len - 1] == '\n' || data[len - 1] == '\r'))
            len--;
        if ((st = kvcal_doclist_keep_buffer(l, data)))
            goto fail;
        if (!is_blank_line(data, len) &&
            (st = kvcal_doclist_push(l, (kvcal_doc){.text = data, .len = len})))
            goto fail;
    }
fail:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return st;
}

// --- JSONL ---------------------------------------------------------------------------

/* Appends s to a growing malloc'ed string. */
static int str_append(char **s, size_t *n, size_t *cap, const char *p, size_t len)
{
    if (*n + len + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *n + len + 1)
            c *= 2;
        char *q = realloc(*s, c);
        if (!q)
            return -1;
        *s = q;
        *cap = c;
    }
    memcpy(*s + *n, p, len);
    *n += len;
    (*s)[*n] = 0;
    return 0;
}

/* Chat messages as plain text: "role: content" lines. Content is a string or
 * a list of parts whose "text" strings are concatenated. */
static kvcal_status chat_text(const char *path, size_t line, const cJSON *msgs,
                              char **out, size_t *out_len)
{
    char *s = NULL;
    size_t n = 0, cap = 0;
    const cJSON *m;
    size_t k = 0;
    cJSON_ArrayForEach(m, msgs)
    {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsString(role) || !content) {
            free(s);
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: line %zu: messages[%zu] needs a string \"role\" and a "
                              "\"content\"",
                              path, line, k);
        }
        int fail =
            (n && str_append(&s, &n, &cap, "\n", 1)) ||
            str_append(&s, &n, &cap, role->valuestring, strlen(role->valuestring)) ||
            str_append(&s, &n, &cap, ": ", 2);
        if (cJSON_IsString(content))
            fail = fail || str_append(&s, &n, &cap, content->valuestring,
                                      strlen(content->valuestring));
        else if (cJSON_IsArray(content)) {
            const cJSON *part;
            cJSON_ArrayForEach(part, content)
            {
                const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (cJSON_IsString(tx))
                    fail = fail || str_append(&s, &n, &cap, tx->valuestring,
                                              strlen(tx->valuestring));
            }
        } else if (!cJSON_IsNull(content)) {
            free(s);
            return kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: line %zu: messages[%zu].content is neither a string nor a "
                "list of parts",
                path, line, k);
        }
        if (fail) {
            free(s);
            return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
        }
        k++;
    }
    *out = s;
    *out_len = n;
    return KVCAL_OK;
}

static kvcal_status json_ids(const char *path, size_t line, const cJSON *arr,
                             kvcal_doc *d)
{
    int n = cJSON_GetArraySize(arr);
    d->ids = malloc(((size_t)n + 1) * sizeof *d->ids);
    if (!d->ids)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    d->n_ids = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        double x = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
        if (!(x >= 0 && x <= INT32_MAX) || x != (double)(int32_t)x) {
            free(d->ids);
            d->ids = NULL;
            return kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: line %zu: input_ids[%zu] is not a non-negative integer", path, line,
                d->n_ids);
        }
        d->ids[d->n_ids++] = (int32_t)x;
    }
    return KVCAL_OK;
}

/* Whether the JSON string starting at s[i] (its opening quote; n bytes in
 * all) may read as `name`: spelled so, or with an escape in it. */
static int json_string_may_be(const char *s, size_t n, size_t i, const char *name)
{
    const size_t k = strlen(name);
    if (i + k + 2 <= n && !memcmp(s + i + 1, name, k) && s[i + k + 1] == '"')
        return 1;
    for (size_t j = i + 1; j < n && s[j] != '"'; j++)
        if (s[j] == '\\')
            return 1;
    return 0;
}

/* Offset in the JSON object line s (n bytes) of the first NUL character, a
 * 0 byte or a \u0000 escape (a backslash not itself escaped), inside a
 * string the text is read from: the value under the top-level key `field`
 * or "messages" (at any depth below it), or a top-level key (cut short,
 * it could read as one of them); else n. cJSON's strings end at a NUL, so
 * the text after it would be dropped unseen; other fields are not read. */
static size_t json_text_nul_at(const char *s, size_t n, const char *field)
{
    int depth = 0, in_string = 0, is_key = 0, want_key = 0, text = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (in_string) {
            const int nul =
                !c || (c == '\\' && i + 5 < n && !memcmp(s + i + 1, "u0000", 5));
            if (nul && (is_key || text))
                return i;
            if (c == '\\')
                i++; /* the escaped character */
            else if (c == '"')
                in_string = 0;
            continue;
        }
        if (!c)
            return i;
        if (c == '"') {
            in_string = 1;
            is_key = depth == 1 && want_key;
            if (is_key) { /* the value after it is the text, or not */
                want_key = 0;
                text = json_string_may_be(s, n, i, field) ||
                       json_string_may_be(s, n, i, "messages");
            }
        } else if (c == '{' || c == '[') {
            want_key = ++depth == 1;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',' && depth == 1) {
            want_key = 1;
            text = 0;
        }
    }
    return n;
}

static kvcal_status read_jsonl(const char *path, const char *text_field, kvcal_doclist *l)
{
    char *data;
    size_t len;
    kvcal_status st = kvcal_file_read(path, "dataset", SIZE_MAX, &data, &len);
    if (st)
        return st;
    const char *field = text_field ? text_field : "text";
    size_t line = 0, i = 0;
    int mode = 0; /* 0 unknown, 1 text, 2 ids */
    while (i < len && !st) {
        size_t e = i;
        while (e < len && data[e] != '\n')
            e++;
        line++;
        size_t s = i;
        i = e + 1;
        if (is_blank_line(data + s, e - s))
            continue;
        if ((st = check_utf8(path, data + s, e - s, line)))
            break;
        cJSON *obj = cJSON_ParseWithLength(data + s, e - s);
        if (!obj || !cJSON_IsObject(obj)) {
            cJSON_Delete(obj);
            st = kvcal_fail(KVCAL_ERR_PARSE,
                            "%s: line %zu: not a JSON object (JSONL needs one "
                            "object per line)",
                            path, line);
            break;
        }
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(obj, field);
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(obj, "messages");
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(obj, "input_ids");
        kvcal_doc d = {.line = line};
        int this_mode = cJSON_IsString(tx) || cJSON_IsArray(msgs) ? 1
                        : cJSON_IsArray(ids)                      ? 2
                                                                  : 0;
        if (!this_mode)
            st =
                kvcal_fail(KVCAL_ERR_FORMAT,
                           "%s: line %zu: no string \"%s\", no \"messages\" list and no "
                           "\"input_ids\" list (choose the text field with --text-field)",
                           path, line, field);
        else if (this_mode == 1 && json_text_nul_at(data + s, e - s, field) < e - s)
            st = kvcal_fail(KVCAL_ERR_FORMAT,
                            "%s: line %zu: a NUL character (\\u0000 or a 0 byte, at byte "
                            "%zu of the line) would cut the text there; remove it",
                            path, line, json_text_nul_at(data + s, e - s, field));
        else if (mode && this_mode != mode)
            st = kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: line %zu: mixes token ids and text in one dataset; keep one "
                "kind per file",
                path, line);
        else if (this_mode == 2)
            st = json_ids(path, line, ids, &d);
        else if (cJSON_IsString(tx)) {
            size_t n = strlen(tx->valuestring);
            if (!(d.owned_text = malloc(n + 1)))
                st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
            else {
                memcpy(d.owned_text, tx->valuestring, n + 1);
                d.len = n;
            }
        } else
            st = chat_text(path, line, msgs, &d.owned_text, &d.len);
        mode = this_mode;
        cJSON_Delete(obj);
        if (!st && d.owned_text && (st = check_utf8(path, d.owned_text, d.len, line)))
            free(d.owned_text);
        else if (st) {
            free(d.owned_text);
            free(d.ids);
        } else {
            d.text = d.owned_text;
            d.is_ids = mode == 2;
            if (d.is_ids || d.len) {
                if ((st = kvcal_doclist_push(l, d))) {
                    free(d.owned_text);
                    free(d.ids);
                }
            } else
                free(d.owned_text);
        }
    }
    free(data);
    return st;
}

// --- format detection
// -------------------------------------------------------------------

static int is_hdf5_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    unsigned char sig[8] = {0};
    size_t n = fread(sig, 1, 8, f);
    fclose(f);
    return n == 8 && !memcmp(sig, "\x89HDF\r\n\x1a\n", 8);
}

kvcal_status kvcal_dataset_read(const char *path, const char *text_field,
                                kvcal_doclist *l)
{
    memset(l, 0, sizeof *l);
    if (!path)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "dataset: no path given");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot read dataset: %s", path,
                          strerror(errno));
    kvcal_status st;
    if (!S_ISDIR(sb.st_mode) && (st = kvcal_file_check_input(path, "dataset", 0)))
        return st;
    if (S_ISDIR(sb.st_mode))
        st = read_dir(path, l);
    else if (kvcal_path_has_suffix(path, ".h5") || kvcal_path_has_suffix(path, ".hdf5") ||
             is_hdf5_file(path))
        st = kvcal_dataset_read_hdf5(path, l);
    else if (kvcal_path_has_suffix(path, ".jsonl") ||
             kvcal_path_has_suffix(path, ".ndjson") ||
             kvcal_path_has_suffix(path, ".json"))
        st = read_jsonl(path, text_field, l);
    else
        st = read_text(path, l);
    if (!st && l->n == 0)
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: the dataset is empty (no document with any text "
                        "or tokens)",
                        path);
    if (st)
        kvcal_doclist_free(l);
    return st;
}

// --- documents in input order
// ------------------------------------------------------------

void kvcal_documents_destroy(kvcal_documents *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->num_docs; i++)
        free(d->ids[i]);
    free(d->ids);
    free(d->lengths);
    free(d);
}

/* Error for id k of id document i, outside the tokenizer's vocabulary. */
static kvcal_status id_outside_vocab(const char *path, const kvcal_doclist *l, size_t i,
                                     size_t k, const kvcal_tokenizer_t *tok)
{
    const kvcal_doc *d = &l->d[i];
    char place[64];
    snprintf(place, sizeof place, l->rows ? "input_ids row %zu" : "line %zu", d->line);
    int vocab = kvcal_tokenizer_vocab_size(tok);
    return kvcal_fail(KVCAL_ERR_MISMATCH,
                      "%s: %s (document %zu): input_ids[%zu] = %d is outside the "
                      "tokenizer's vocabulary of %d tokens (ids 0 to %d); were these ids "
                      "made with another model's tokenizer?",
                      path, place, i + 1, k, d->ids[k], vocab, vocab - 1);
}

/* The ids of document i: verbatim, or encoded with special tokens. */
static kvcal_status doc_ids(const char *path, const kvcal_doclist *l, size_t i,
                            const kvcal_tokenizer_t *tok, int32_t **ids, size_t *n)
{
    const kvcal_doc *d = &l->d[i];
    *ids = NULL;
    *n = 0;
    if (d->is_ids) {
        if (tok)
            for (size_t k = 0; k < d->n_ids; k++)
                if (d->ids[k] >= kvcal_tokenizer_vocab_size(tok))
                    return id_outside_vocab(path, l, i, k, tok);
        *ids = malloc((d->n_ids + 1) * sizeof **ids);
        if (!*ids)
            return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
        memcpy(*ids, d->ids, d->n_ids * sizeof **ids);
        *n = d->n_ids;
        return KVCAL_OK;
    }
    if (!tok)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "%s: a text dataset needs a tokenizer (give the model or --tokenizer)", path);
    kvcal_status st = kvcal_tokenizer_encode(tok, d->text, d->len, 1, ids, n);
    if (st)
        return kvcal_fail_context(st, "%s: document %zu: ", path, i + 1);
    return KVCAL_OK;
}

kvcal_status kvcal_dataset_tokenize_documents(const char *path,
                                              const kvcal_tokenizer_t *tok,
                                              const char *text_field,
                                              const kvcal_dataset_progress *progress,
                                              kvcal_documents **out)
{
    *out = NULL;
    kvcal_doclist l;
    kvcal_status st = kvcal_dataset_read(path, text_field, &l);
    if (st)
        return st;
    kvcal_documents *d = calloc(1, sizeof *d);
    if (!d || !(d->ids = calloc(l.n, sizeof *d->ids)) ||
        !(d->lengths = calloc(l.n, sizeof *d->lengths))) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    long long tokens = 0;
    for (size_t i = 0; i < l.n; i++) {
        if ((st = doc_ids(path, &l, i, tok, &d->ids[i], &d->lengths[i])))
            goto fail;
        d->num_docs++;
        tokens += (long long)d->lengths[i];
        if (progress && progress->fn)
            progress->fn(progress->ctx, d->num_docs, (long long)l.n, tokens);
    }
    kvcal_doclist_free(&l);
    *out = d;
    return KVCAL_OK;
fail:
    kvcal_doclist_free(&l);
    kvcal_documents_destroy(d);
    return st;
}

// --- samples
// -------------------------------------------------------------------------------

void kvcal_samples_destroy(kvcal_samples *s)
{
    if (!s)
        return;
    free(s->ids);
    free(s->lengths);
    free(s);
}

/* The most token ids a set of samples holds in memory (8 GiB of int32). */
#define SAMPLES_MAX_TOKENS (1ll << 31)

/* An empty set of samples of L tokens each; rows come with samples_room. */
static kvcal_status samples_create(int L, kvcal_samples **out)
{
    kvcal_samples *s = calloc(1, sizeof *s);
    if (!s)
        return kvcal_fail(KVCAL_ERR_NOMEM, "dataset: out of memory");
    s->seq_len = L;
    *out = s;
    return KVCAL_OK;
}

/* Room for sample row i of s, which holds *cap rows: doubles them, never past
 * `max_rows`. Rows are allocated as they are filled, so memory follows the
 * tokens the dataset holds, never the samples asked for. */
static kvcal_status samples_room(kvcal_samples *s, int i, int *cap, int max_rows)
{
    if (i < *cap)
        return KVCAL_OK;
    size_t n = *cap ? (size_t)*cap * 2 : 1, L = (size_t)s->seq_len;
    size_t most = (size_t)SAMPLES_MAX_TOKENS / L;
    if (most > (size_t)max_rows)
        most = (size_t)max_rows;
    if (n > most)
        n = most;
    if ((size_t)i >= n)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "dataset: more than 2^31 tokens (8 GiB) of samples of --seq-len "
            "%zu; give --num-samples or lower --seq-len",
            L);
    int32_t *ids = realloc(s->ids, n * L * sizeof *ids);
    if (ids)
        s->ids = ids;
    int32_t *lengths = ids ? realloc(s->lengths, n * sizeof *lengths) : NULL;
    if (!lengths)
        return kvcal_fail(KVCAL_ERR_NOMEM,
                          "dataset: out of memory for %zu samples x --seq-len %zu "
                          "(%.1f GiB)",
                          n, L, (double)(n * L * sizeof *ids) / (1 << 30));
    s->lengths = lengths;
    *cap = (int)n;
    return KVCAL_OK;
}

kvcal_status kvcal_dataset_load(const char *path, const kvcal_tokenizer_t *tok,
                                const kvcal_dataset_options *opt, kvcal_samples **out)
{
    return kvcal_dataset_load_progress(path, tok, opt, NULL, out);
}

kvcal_status kvcal_dataset_load_progress(const char *path, const kvcal_tokenizer_t *tok,
                                         const kvcal_dataset_options *opt,
                                         const kvcal_dataset_progress *progress,
                                         kvcal_samples **out)
{
    *out = NULL;
    if (!opt || opt->num_samples < 0 || opt->seq_len <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "dataset: --num-samples must be >= 0 and --seq-len positive");
    long long asked = (long long)opt->num_samples * opt->seq_len;
    if (asked > SAMPLES_MAX_TOKENS)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "dataset: --num-samples %d x --seq-len %d would take %lld tokens "
            "(%.1f GiB), more than the 2^31 tokens (8 GiB) kvcal holds; "
            "lower one of them",
            opt->num_samples, opt->seq_len, asked,
            (double)asked * sizeof(int32_t) / (1 << 30));
    kvcal_doclist l;
    kvcal_status st = kvcal_dataset_read(path, opt->text_field, &l);
    if (st)
        return st;
    kvcal_samples *s = NULL;
    size_t *order = malloc(l.n * sizeof *order);
    int32_t *pend = NULL; /* packed: tokens not yet placed in a sample */
    size_t n_pend = 0, cap_pend = 0;
    if (!order) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    for (size_t i = 0; i < l.n; i++)
        order[i] = i;
    kvcal_rng rng;
    kvcal_rng_seed(&rng, opt->seed);
    for (size_t i = l.n; i > 1; i--) {
        size_t j = (size_t)rng_below(&rng, i);
        size_t tmp = order[i - 1];
        order[i - 1] = order[j];
        order[j] = tmp;
    }
    const int want = opt->num_samples; /* 0: as many as the data fills */
    if ((st = samples_create(opt->seq_len, &s)))
        goto fail;
    const int L = opt->seq_len;
    int cap = 0, max_rows = want ? want : INT_MAX; /* no-pack: a row per document */
    if (!opt->pack && l.n < (size_t)max_rows)
        max_rows = (int)l.n;
    /* token ids are taken verbatim: no BOS is put in front of their windows */
    int32_t bos =
        kvcal_tokenizer_adds_bos(tok) && !l.d[0].is_ids ? kvcal_tokenizer_bos(tok) : -1;
    if (opt->pack && bos >= 0 && L < 2) { /* every window BOS alone, the text never */
        st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                        "%s: --seq-len %d leaves no room for text: each packed window "
                        "starts with the tokenizer's BOS (id %d), which fills it; give "
                        "--seq-len 2 or more",
                        path, L, (int)bos);
        goto fail;
    }
    int filled = 0;
    long long seen_tokens = 0;
    size_t seen_docs = 0;
    for (size_t k = 0; k < l.n && (!want || filled < want); k++) {
        int32_t *ids;
        size_t n;
        if ((st = doc_ids(path, &l, order[k], tok, &ids, &n)))
            goto fail;
        seen_tokens += (long long)n;
        seen_docs++;
        if (progress && progress->fn)
            progress->fn(progress->ctx, (long long)seen_docs, (long long)l.n,
                         seen_tokens);
        if (!opt->pack) {
            if (n && !(st = samples_room(s, filled, &cap, max_rows))) {
                size_t m = n < (size_t)L ? n : (size_t)L;
                int32_t *dst = s->ids + (size_t)filled * L;
                memcpy(dst, ids, m * sizeof *ids);
                for (size_t j = m; j < (size_t)L; j++)
                    dst[j] = -1;
                s->lengths[filled++] = (int32_t)m;
            }
            free(ids);
            if (st)
                goto fail;
            continue;
        }
        if (!n) { /* an empty document adds nothing to the packed stream */
            free(ids);
            continue;
        }
        if (n_pend + n > cap_pend) {
            size_t c = cap_pend ? cap_pend : 4096;
            while (c < n_pend + n)
                c *= 2;
            int32_t *p = realloc(pend, c * sizeof *p);
            if (!p) {
                free(ids);
                st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
                goto fail;
            }
            pend = p;
            cap_pend = c;
        }
        memcpy(pend + n_pend, ids, n * sizeof *ids);
        n_pend += n;
        free(ids);
        size_t used = 0;
        for (;;) {
            int need_bos = bos >= 0 && used < n_pend && pend[used] != bos;
            size_t take = (size_t)L - (size_t)need_bos;
            if ((want && filled >= want) || n_pend - used < take)
                break;
            if ((st = samples_room(s, filled, &cap, max_rows)))
                goto fail;
            int32_t *dst = s->ids + (size_t)filled * L;
            if (need_bos)
                dst[0] = bos;
            memcpy(dst + need_bos, pend + used, take * sizeof *pend);
            s->lengths[filled++] = L;
            used += take;
        }
        memmove(pend, pend + used, (n_pend - used) * sizeof *pend);
        n_pend -= used;
    }
    if (!want && filled == 0) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: has %lld tokens in %zu documents, not one sample of %d "
                        "tokens; pass more text with --dataset FILE (public sets: "
                        "datasets/RECIPES.md) or lower --seq-len",
                        path, seen_tokens, seen_docs, L);
        goto fail;
    }
    s->num_samples = filled;
    if (filled < want) {
        if (opt->pack)
            st = kvcal_fail(KVCAL_ERR_FORMAT,
                            "%s: has %lld tokens in %zu documents, but %d samples x %d "
                            "tokens need about %lld; pass more text with --dataset FILE "
                            "(public sets: datasets/RECIPES.md) or lower --num-samples "
                            "or --seq-len",
                            path, seen_tokens, seen_docs, want, L, (long long)want * L);
        else
            st = kvcal_fail(KVCAL_ERR_FORMAT,
                            "%s: has %d non-empty documents (%lld tokens), but "
                            "--num-samples asks for %d (one document per sample); pass "
                            "more documents with --dataset FILE (public sets: "
                            "datasets/RECIPES.md), pack them, or lower --num-samples",
                            path, filled, seen_tokens, want);
        goto fail;
    }
    for (int i = 0; i < s->num_samples; i++)
        s->num_tokens += s->lengths[i];
    free(order);
    free(pend);
    kvcal_doclist_free(&l);
    *out = s;
    return KVCAL_OK;
fail:
    free(order);
    free(pend);
    kvcal_doclist_free(&l);
    kvcal_samples_destroy(s);
    return st;
}
