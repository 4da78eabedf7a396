/* io/tokenizer/tokenizer_llama2c.c: llama2.c tokenizer.bin (as used by stories260K).
 *
 * File: int32 max_token_length, then per token until the end of the file:
 * f32 score, i32 byte length, the bytes. Encoding follows llama2.c's run.c
 * encode(): BOS = 1, a " " dummy-prefix token when the text is not empty,
 * one token per UTF-8 character found in the vocabulary (else its bytes as
 * tokens byte + 3), then repeated merges of the adjacent pair whose
 * concatenation is in the vocabulary with the highest score (leftmost on
 * ties). EOS = 2 is never added, as run.c's generate() does not. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/tokenizer/tokenizer_kinds.h"

static int32_t rd_i32(const unsigned char *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    int32_t s;
    memcpy(&s, &v, 4);
    return s;
}

static float rd_f32(const unsigned char *p)
{
    int32_t v = rd_i32(p);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

kvcal_status kvcal_tok_load_llama2c(kvcal_tokenizer_t *t, const char *path,
                                    const unsigned char *data, size_t len)
{
    int32_t max_len = rd_i32(data);
    if (max_len <= 0 || max_len > 4096)
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: llama2.c tokenizer: max_token_length %d is not in [1, 4096]", path,
            max_len);
    /* pass 1: count and validate */
    size_t off = 4, total = 0;
    int n = 0;
    while (off < len) {
        if (len - off < 8)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: llama2.c tokenizer: truncated entry %d at byte %zu",
                              path, n, off);
        int32_t l = rd_i32(data + off + 4);
        if (l < 0 || l > max_len || (size_t)l > len - off - 8)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: llama2.c tokenizer: token %d at byte %zu has length "
                              "%d (max_token_length %d, "
                              "%zu bytes left); is this a llama2.c tokenizer.bin?",
                              path, n, off, l, max_len, len - off - 8);
        total += (size_t)l;
        off += 8 + (size_t)l;
        n++;
    }
    if (n < 259)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: llama2.c tokenizer: %d tokens; need <unk>, <s>, </s> and "
                          "256 byte tokens",
                          path, n);
    kvcal_status st = kvcal_tok_alloc(t, n, total);
    if (st)
        return st;
    off = 4;
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        int32_t l = rd_i32(data + off + 4);
        t->scores[i] = rd_f32(data + off);
        memcpy(t->piece_data + pos, data + off + 8, (size_t)l);
        t->piece_off[i] = (uint32_t)pos;
        pos += (size_t)l;
        off += 8 + (size_t)l;
        t->piece_type[i] = i == 0    ? KVCAL_PIECE_UNKNOWN
                           : i < 3   ? KVCAL_PIECE_CONTROL
                           : i < 259 ? KVCAL_PIECE_BYTE
                                     : KVCAL_PIECE_NORMAL;
    }
    t->piece_off[n] = (uint32_t)pos;
    t->kind = KVCAL_TOK_LLAMA2C;
    t->unk = 0;
    t->bos = 1;
    t->eos = 2;
    t->add_bos = 1;
    t->add_eos = 0;
    t->strip_leading_space = 1;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = b + 3;
    t->split_words = kvcal_tok_words_independent(t, " ", NULL);
    return kvcal_tok_build_map(t, NULL);
}

/* llama2.c merges two tokens when the concatenation of their strings is a
 * token; spans of the working string are exactly those strings. */
static int llama2c_pair(const kvcal_tokenizer_t *t, const char *text,
                        const kvcal_bpe_sym *a, const kvcal_bpe_sym *b, double *priority,
                        int32_t *merged)
{
    int32_t id = kvcal_tok_lookup(t, text + a->start, b->end - a->start);
    if (id < 0)
        return 0;
    *priority = -(double)t->scores[id];
    *merged = id;
    return 1;
}

/* Symbols of buf[ws, we), merged, appended to out. `dummy` >= 0: buf[ws] is
 * the dummy-prefix space, a token of its own (run.c adds it before grouping
 * the text). Grouping as run.c's: a lead byte starts a character, which takes
 * up to three following continuation bytes; one not in the vocabulary
 * becomes its bytes, + 3. */
static kvcal_status llama2c_encode_span(const kvcal_tokenizer_t *t, const char *buf,
                                        size_t ws, size_t we, int32_t dummy,
                                        kvcal_bpe_work *w, kvcal_ids *out)
{
    const unsigned char *u = (const unsigned char *)buf;
    size_t n = 0;
    if (dummy >= 0)
        w->sym[n++] = (kvcal_bpe_sym){dummy, (uint32_t)ws, (uint32_t)ws + 1, -1, -1, 1};
    for (size_t i = ws + (dummy >= 0); i < we;) {
        size_t j = i + 1;
        while (j < we && (u[j] & 0xC0) == 0x80 && j - i < 4)
            j++;
        int32_t id = kvcal_tok_lookup(t, buf + i, j - i);
        if (id >= 0)
            w->sym[n++] = (kvcal_bpe_sym){id, (uint32_t)i, (uint32_t)j, -1, -1, 1};
        else
            for (size_t k = i; k < j; k++)
                w->sym[n++] = (kvcal_bpe_sym){
                    (int32_t)u[k] + 3, (uint32_t)k, (uint32_t)k + 1, -1, -1, 0};
        i = j;
    }
    for (size_t k = 0; k < n; k++) {
        w->sym[k].prev = (int32_t)k - 1;
        w->sym[k].next = k + 1 < n ? (int32_t)k + 1 : -1;
    }
    kvcal_status st = kvcal_bpe_merge(t, buf, w, n, llama2c_pair);
    for (int32_t k = 0; !st && n && k >= 0; k = w->sym[k].next)
        st = kvcal_ids_push(out, w->sym[k].id);
    return st;
}

kvcal_status kvcal_tok_encode_llama2c(const kvcal_tokenizer_t *t, const char *text,
                                      size_t len, kvcal_ids *out)
{
    if (len == 0)
        return KVCAL_OK;
    int32_t space = kvcal_tok_lookup(t, " ", 1); /* the dummy prefix */
    size_t pre = space >= 0 ? 1 : 0;
    size_t n = len + pre;
    char *buf = malloc(n);
    if (!buf)
        return kvcal_fail(KVCAL_ERR_NOMEM, "tokenizer: out of memory for %zu bytes", len);
    buf[0] = ' ';
    memcpy(buf + pre, text, len);
    kvcal_bpe_work w = {0};
    kvcal_status st = kvcal_bpe_work_reserve(&w, n);
    size_t start = 0;
    for (size_t i = 1; !st && t->split_words && i < n; i++)
        if (buf[i] == ' ' && buf[i - 1] != ' ') { /* a word starts */
            st = llama2c_encode_span(t, buf, start, i, start ? -1 : space, &w, out);
            start = i;
        }
    if (!st)
        st = llama2c_encode_span(t, buf, start, n, start ? -1 : space, &w, out);
    kvcal_bpe_work_free(&w);
    free(buf);
    return st;
}
