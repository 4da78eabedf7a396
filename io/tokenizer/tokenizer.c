/* io/tokenizer/tokenizer.c: loading (kind detected from the content), finding the
 * tokenizer next to a model, the public encode/decode entry points, and the
 * tables every kind shares (pieces, hash maps, UTF-8). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"
#include "io/file_read.h"
#include "io/tokenizer/tokenizer_kinds.h"

// --- loading -------------------------------------------------------------------

void kvcal_tokenizer_destroy(kvcal_tokenizer_t *tok)
{
    if (!tok)
        return;
    kvcal_tok_free_hf(tok);
    free(tok->path);
    free(tok->piece_data);
    free(tok->piece_off);
    free(tok->scores);
    free(tok->piece_type);
    free(tok->map.slots);
    free(tok);
}

kvcal_status kvcal_tokenizer_load_memory(const void *bytes, size_t len, const char *name,
                                         kvcal_tokenizer_t **out)
{
    *out = NULL;
    if (!bytes || !name)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "tokenizer: no data or name given");
    const unsigned char *data = bytes;
    kvcal_tokenizer_t *t = calloc(1, sizeof *t);
    if (t && !(t->path = strdup(name))) {
        free(t);
        t = NULL;
    }
    if (!t)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", name);
    t->bos = t->eos = t->unk = -1;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    kvcal_status st;
    size_t i = 0;
    while (i < len &&
           (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t'))
        i++;
    if (i < len && data[i] == '{')
        st = kvcal_tok_load_hf(t, name, (const char *)data, len);
    else if (len >= 2 && data[0] == 0x0A && data[1] != 0)
        st = kvcal_tok_load_spm(t, name, data, len);
    else if (len >= 4 && data[1] == 0 && data[2] == 0 && data[3] == 0 && data[0] > 0)
        st = kvcal_tok_load_llama2c(t, name, data, len);
    else
        st = kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: unknown tokenizer type (expected a Hugging Face tokenizer.json, a "
            "SentencePiece tokenizer.model or a llama2.c tokenizer.bin)",
            name);
    if (st) {
        kvcal_tokenizer_destroy(t);
        return st;
    }
    *out = t;
    return KVCAL_OK;
}

kvcal_status kvcal_tokenizer_load(const char *path, kvcal_tokenizer_t **out)
{
    *out = NULL;
    if (!path)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "tokenizer: no path given");
    char *data = NULL;
    size_t len = 0;
    kvcal_status st = kvcal_file_read(path, "tokenizer", SIZE_MAX, &data, &len);
    if (st)
        return st;
    st = kvcal_tokenizer_load_memory(data, len, path, out);
    free(data);
    return st;
}

/* First "tok*.bin" of a directory in name order, into buf; 0 when none. */
/* The one tok*.bin of dir (llama2.c names them by vocabulary size) into buf:
 * 1 found, 0 none, -1 several (an error naming two of them: which one fits
 * the model cannot be told from the names). */
static int find_tok_bin(const char *dir, char *buf, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    char first[256] = "", other[256] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n >= 7 && n < sizeof first && !strncmp(e->d_name, "tok", 3) &&
            !strcmp(e->d_name + n - 4, ".bin"))
            memcpy(first[0] ? other : first, e->d_name, n + 1);
    }
    closedir(d);
    if (other[0]) {
        kvcal_fail(KVCAL_ERR_INVALID_ARG,
                   "%s: several llama2.c tokenizers (%s, %s): give the one that fits the "
                   "model with --tokenizer",
                   dir, first, other);
        return -1;
    }
    if (!first[0])
        return 0;
    return snprintf(buf, cap, "%s/%s", dir, first) < (int)cap;
}

kvcal_status kvcal_tokenizer_find(const char *model_path, const char *override,
                                  kvcal_tokenizer_t **out)
{
    *out = NULL;
    if (override)
        return kvcal_tokenizer_load(override, out);
    if (!model_path)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "tokenizer: no model path and no --tokenizer");
    char dir[4096];
    struct stat sb;
    if (stat(model_path, &sb) != 0)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot read model path: %s", model_path,
                          strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        if (snprintf(dir, sizeof dir, "%s", model_path) >= (int)sizeof dir)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: path too long", model_path);
    } else {
        const char *slash = strrchr(model_path, '/');
        if (!slash)
            snprintf(dir, sizeof dir, ".");
        else if (snprintf(dir, sizeof dir, "%.*s", (int)(slash - model_path),
                          model_path) >= (int)sizeof dir)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: path too long", model_path);
        if (!dir[0])
            snprintf(dir, sizeof dir, "/");
    }
    static const char *const names[] = {"tokenizer.json", "tokenizer.model",
                                        "tokenizer.bin"};
    char path[4352];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (access(path, F_OK) == 0)
            return kvcal_tokenizer_load(path, out);
    }
    int found = find_tok_bin(dir, path, sizeof path);
    if (found < 0)
        return KVCAL_ERR_INVALID_ARG;
    if (found)
        return kvcal_tokenizer_load(path, out);
    return kvcal_fail(
        KVCAL_ERR_IO,
        "%s: no tokenizer.json, tokenizer.model, tokenizer.bin or tok*.bin there "
        "(give the tokenizer file with --tokenizer)",
        dir);
}

// --- encode / decode ---------------------------------------------------------------

kvcal_status kvcal_tokenizer_encode(const kvcal_tokenizer_t *tok, const char *text,
                                    size_t len, int add_special, int32_t **ids,
                                    size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (!tok || (!text && len))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "tokenizer_encode: NULL tokenizer or text");
    kvcal_ids b = {0};
    kvcal_status st = KVCAL_OK;
    if (add_special && tok->add_bos && tok->bos >= 0)
        st = kvcal_ids_push(&b, tok->bos);
    if (!st) {
        switch (tok->kind) {
        case KVCAL_TOK_LLAMA2C:
            st = kvcal_tok_encode_llama2c(tok, text, len, &b);
            break;
        case KVCAL_TOK_SENTENCEPIECE:
            st = kvcal_tok_encode_spm(tok, text, len, &b);
            break;
        case KVCAL_TOK_HF_BYTELEVEL:
        case KVCAL_TOK_HF_SENTENCEPIECE:
            st = kvcal_tok_encode_hf(tok, text, len, &b);
            break;
        }
    }
    if (!st && add_special && tok->add_eos && tok->eos >= 0)
        st = kvcal_ids_push(&b, tok->eos);
    if (!st && !b.v) /* empty text, nothing added: still a valid allocation */
        st = (b.v = malloc(sizeof *b.v))
                 ? KVCAL_OK
                 : kvcal_fail(KVCAL_ERR_NOMEM, "tokenizer: out of memory");
    if (st) {
        free(b.v);
        return st;
    }
    *ids = b.v;
    *n_ids = b.n;
    return KVCAL_OK;
}

typedef struct text_buf {
    char *s;
    size_t n, cap;
} text_buf;

static int text_put(text_buf *b, const void *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s)
            return -1;
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}

/* Inverse of the GPT-2 byte-to-character table: the byte a byte-level
 * character (U+0021..U+0143) stands for, or -1. */
static int bytelevel_byte(unsigned cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) ||
        (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp < 0x100 || cp > 0x143)
        return -1;
    /* the 68 remaining bytes, in order, map to U+0100.. */
    unsigned k = cp - 0x100, seen = 0;
    for (unsigned b = 0; b < 256; b++) {
        int printable =
            (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if (!printable && seen++ == k)
            return (int)b;
    }
    return -1;
}

static int decode_bytelevel(const char *s, size_t n, text_buf *b)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = kvcal_utf8_char_len(u + i, n - i);
        unsigned cp = 0;
        if (l == 1)
            cp = u[i];
        else if (l == 2)
            cp = (u[i] & 0x1Fu) << 6 | (u[i + 1] & 0x3Fu);
        int byte = l ? bytelevel_byte(cp) : -1;
        if (byte >= 0) {
            unsigned char c = (unsigned char)byte;
            if (text_put(b, &c, 1))
                return -1;
        } else if (text_put(b, u + i, l ? l : 1))
            return -1;
        i += l ? l : 1;
    }
    return 0;
}

/* sentencepiece-style piece: U+2581 -> ' ', "<0xXX>" byte pieces -> the byte */
static int decode_spm_piece(const kvcal_tokenizer_t *t, int32_t id, const char *s,
                            size_t n, text_buf *b)
{
    if (t->piece_type[id] == KVCAL_PIECE_BYTE) {
        unsigned char c = (unsigned char)kvcal_tok_byte_piece(s, n);
        return text_put(b, &c, 1);
    }
    size_t i = 0;
    while (i < n) {
        if (i + 3 <= n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
            if (text_put(b, " ", 1))
                return -1;
            i += 3;
        } else {
            if (text_put(b, s + i, 1))
                return -1;
            i++;
        }
    }
    return 0;
}

kvcal_status kvcal_tokenizer_decode(const kvcal_tokenizer_t *tok, const int32_t *ids,
                                    size_t n_ids, char **text)
{
    *text = NULL;
    if (!tok || (!ids && n_ids))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "tokenizer_decode: NULL tokenizer or ids");
    text_buf b = {0};
    if (text_put(&b, "", 0))
        return kvcal_fail(KVCAL_ERR_NOMEM, "tokenizer_decode: out of memory");
    for (size_t i = 0; i < n_ids; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tok->vocab_size) {
            free(b.s);
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "tokenizer_decode: id %d at position %zu is outside the "
                              "vocabulary [0, %d)",
                              id, i, tok->vocab_size);
        }
        size_t n;
        const char *s = kvcal_tok_piece(tok, id, &n);
        uint8_t type = tok->piece_type[id];
        int rc;
        if (type == KVCAL_PIECE_UNKNOWN && tok->kind == KVCAL_TOK_SENTENCEPIECE)
            rc = text_put(&b, " \xE2\x81\x87 ", 5); /* as sentencepiece decodes <unk> */
        else if (type == KVCAL_PIECE_CONTROL || type == KVCAL_PIECE_UNKNOWN ||
                 type == KVCAL_PIECE_UNUSED)
            continue; /* special tokens decode to nothing */
        else if (type == KVCAL_PIECE_USER_DEFINED &&
                 (tok->kind == KVCAL_TOK_HF_BYTELEVEL ||
                  tok->kind == KVCAL_TOK_HF_SENTENCEPIECE))
            rc = text_put(&b, s, n);
        else if (tok->kind == KVCAL_TOK_HF_BYTELEVEL)
            rc = decode_bytelevel(s, n, &b);
        else if (tok->kind == KVCAL_TOK_LLAMA2C && type != KVCAL_PIECE_BYTE)
            rc = text_put(&b, s, n);
        else
            rc = decode_spm_piece(tok, id, s, n, &b);
        if (rc) {
            free(b.s);
            return kvcal_fail(KVCAL_ERR_NOMEM, "tokenizer_decode: out of memory");
        }
    }
    /* the dummy-prefix space the encoder added */
    if (tok->strip_leading_space && b.n && b.s[0] == ' ')
        memmove(b.s, b.s + 1, b.n--);
    *text = b.s;
    return KVCAL_OK;
}

// --- getters ------------------------------------------------------------------------

int kvcal_tokenizer_vocab_size(const kvcal_tokenizer_t *tok)
{
    return tok ? tok->vocab_size : 0;
}

int32_t kvcal_tokenizer_bos(const kvcal_tokenizer_t *tok)
{
    return tok ? tok->bos : -1;
}

int kvcal_tokenizer_adds_bos(const kvcal_tokenizer_t *tok)
{
    return tok && tok->add_bos;
}

int32_t kvcal_tokenizer_eos(const kvcal_tokenizer_t *tok)
{
    return tok ? tok->eos : -1;
}

const char *kvcal_tokenizer_kind(const kvcal_tokenizer_t *tok)
{
    if (!tok)
        return "none";
    switch (tok->kind) {
    case KVCAL_TOK_HF_BYTELEVEL:
        return "hf-bpe-bytelevel";
    case KVCAL_TOK_HF_SENTENCEPIECE:
        return "hf-bpe-sentencepiece";
    case KVCAL_TOK_SENTENCEPIECE:
        return "sentencepiece";
    case KVCAL_TOK_LLAMA2C:
        return "llama2c";
    }
    return "none";
}
