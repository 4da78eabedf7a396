/* io/tokenizer/tokenizer_spm.c: SentencePiece tokenizer.model (BPE models).
 *
 * The protobuf (ModelProto) is parsed here directly: pieces (1: piece,
 * 2: score, 3: type), trainer_spec (3: model_type, 24:
 * treat_whitespace_as_suffix, 35: byte_fallback, 40-42: unk/bos/eos ids) and
 * normalizer_spec (2: precompiled_charsmap, 3: add_dummy_prefix, 4:
 * remove_extra_whitespaces, 5: escape_whitespaces). Encoding follows
 * sentencepiece's normalizer and bpe_model: spaces become U+2581, a dummy
 * prefix is added, characters merge pairwise by the highest piece score
 * (leftmost on ties), and a piece left unknown becomes its byte tokens
 * (byte_fallback) or <unk>. Only the identity normalization (an empty
 * precompiled_charsmap, as Llama 2 and Mistral use) is supported. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/tokenizer/tokenizer_kinds.h"

// --- protobuf wire format -------------------------------------------------------

typedef struct pb {
    const unsigned char *p, *end;
} pb;

static int pb_varint(pb *r, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end)
            return -1;
        unsigned char c = *r->p++;
        *v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80))
            return 0;
    }
    return -1;
}

/* Reads one field: its number, wire type, and for length-delimited fields the
 * payload; varints in *v, fixed32 in *v. Returns -1 on malformed input. */
static int pb_field(pb *r, int *field, int *wire, uint64_t *v, pb *sub)
{
    uint64_t key;
    if (pb_varint(r, &key))
        return -1;
    *field = (int)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0:
        return pb_varint(r, v);
    case 1:
        if (r->end - r->p < 8)
            return -1;
        r->p += 8;
        return 0;
    case 2:
        if (pb_varint(r, v) || *v > (uint64_t)(r->end - r->p))
            return -1;
        sub->p = r->p;
        sub->end = r->p + *v;
        r->p += *v;
        return 0;
    case 5:
        if (r->end - r->p < 4)
            return -1;
        *v = (uint64_t)r->p[0] | (uint64_t)r->p[1] << 8 | (uint64_t)r->p[2] << 16 |
             (uint64_t)r->p[3] << 24;
        r->p += 4;
        return 0;
    }
    return -1;
}

typedef struct spm_spec {
    int model_type; /* 1 unigram, 2 bpe, 3 word, 4 char */
    int byte_fallback;
    int suffix_whitespace; /* treat_whitespace_as_suffix */
    int unk_id, bos_id, eos_id;
    size_t charsmap_len;
    int add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces;
} spm_spec;

static int parse_trainer(pb r, spm_spec *s)
{
    int field, wire;
    uint64_t v;
    pb sub;
    while (r.p < r.end) {
        if (pb_field(&r, &field, &wire, &v, &sub))
            return -1;
        if (wire != 0)
            continue;
        switch (field) {
        case 3:
            s->model_type = (int)v;
            break;
        case 24:
            s->suffix_whitespace = v != 0;
            break;
        case 35:
            s->byte_fallback = v != 0;
            break;
        case 40:
            s->unk_id = (int)(int32_t)v;
            break;
        case 41:
            s->bos_id = (int)(int32_t)v;
            break;
        case 42:
            s->eos_id = (int)(int32_t)v;
            break;
        }
    }
    return 0;
}

static int parse_normalizer(pb r, spm_spec *s)
{
    int field, wire;
    uint64_t v;
    pb sub;
    while (r.p < r.end) {
        if (pb_field(&r, &field, &wire, &v, &sub))
            return -1;
        if (field == 2 && wire == 2)
            s->charsmap_len = (size_t)v;
        else if (wire == 0 && field == 3)
            s->add_dummy_prefix = v != 0;
        else if (wire == 0 && field == 4)
            s->remove_extra_whitespaces = v != 0;
        else if (wire == 0 && field == 5)
            s->escape_whitespaces = v != 0;
    }
    return 0;
}

/* One SentencePiece message: piece bytes, score, type. */
static int parse_piece(pb r, pb *piece, float *score, int *type)
{
    int field, wire;
    uint64_t v;
    pb sub;
    piece->p = piece->end = NULL;
    *score = 0.0f;
    *type = KVCAL_PIECE_NORMAL;
    while (r.p < r.end) {
        if (pb_field(&r, &field, &wire, &v, &sub))
            return -1;
        if (field == 1 && wire == 2)
            *piece = sub;
        else if (field == 2 && wire == 5) {
            uint32_t u = (uint32_t)v;
            memcpy(score, &u, 4);
        } else if (field == 3 && wire == 0)
            *type = (int)v;
    }
    return piece->p ? 0 : -1;
}

static int spm_mergeable(const kvcal_tokenizer_t *t, int32_t id)
{
    return t->piece_type[id] == KVCAL_PIECE_NORMAL ||
           t->piece_type[id] == KVCAL_PIECE_USER_DEFINED;
}

kvcal_status kvcal_tok_load_spm(kvcal_tokenizer_t *t, const char *path,
                                const unsigned char *data, size_t len)
{
    spm_spec s = {.model_type = 1,
                  .unk_id = 0,
                  .bos_id = 1,
                  .eos_id = 2,
                  .add_dummy_prefix = 1,
                  .remove_extra_whitespaces = 1,
                  .escape_whitespaces = 1};
    pb r = {data, data + len}, sub;
    int field, wire;
    uint64_t v;
    int n = 0;
    size_t total = 0;
    /* pass 1: specs, piece count and bytes */
    while (r.p < r.end) {
        if (pb_field(&r, &field, &wire, &v, &sub))
            goto malformed;
        if (field == 1 && wire == 2) {
            pb piece;
            float score;
            int type;
            if (parse_piece(sub, &piece, &score, &type))
                goto malformed;
            total += (size_t)(piece.end - piece.p);
            n++;
        } else if (field == 2 && wire == 2) {
            if (parse_trainer(sub, &s))
                goto malformed;
        } else if (field == 3 && wire == 2) {
            if (parse_normalizer(sub, &s))
                goto malformed;
        }
    }
    if (n == 0)
        return kvcal_fail(KVCAL_ERR_FORMAT, "%s: SentencePiece model has no pieces",
                          path);
    if (s.model_type != 2)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: SentencePiece model_type %d is not supported (only BPE, type 2: "
            "Llama 2, Mistral); use the model's tokenizer.json if it has one",
            path, s.model_type);
    if (s.charsmap_len)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: SentencePiece normalizer has a precompiled_charsmap (NFKC-style "
            "normalization), which kvcal does not implement; use the model's "
            "tokenizer.json if it has one",
            path);
    if (s.suffix_whitespace)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: SentencePiece treat_whitespace_as_suffix is not supported",
                          path);
    kvcal_status st = kvcal_tok_alloc(t, n, total);
    if (st)
        return st;
    /* pass 2: pieces */
    r = (pb){data, data + len};
    size_t pos = 0;
    int i = 0;
    while (r.p < r.end) {
        pb_field(&r, &field, &wire, &v, &sub);
        if (!(field == 1 && wire == 2))
            continue;
        pb piece;
        float score;
        int type;
        parse_piece(sub, &piece, &score, &type);
        if (type < KVCAL_PIECE_NORMAL || type > KVCAL_PIECE_BYTE)
            return kvcal_fail(KVCAL_ERR_FORMAT, "%s: piece %d has unknown type %d", path,
                              i, type);
        if (type == KVCAL_PIECE_UNUSED)
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: piece %d is of type UNUSED, which kvcal's SentencePiece BPE "
                "encoder does not resegment; use the model's tokenizer.json",
                path, i);
        size_t pl = (size_t)(piece.end - piece.p);
        memcpy(t->piece_data + pos, piece.p, pl);
        t->piece_off[i] = (uint32_t)pos;
        t->scores[i] = score;
        t->piece_type[i] = (uint8_t)type;
        pos += pl;
        t->n_user_defined += type == KVCAL_PIECE_USER_DEFINED;
        i++;
    }
    t->piece_off[n] = (uint32_t)pos;
    t->kind = KVCAL_TOK_SENTENCEPIECE;
    t->unk = s.unk_id >= 0 && s.unk_id < n ? s.unk_id : -1;
    t->bos = s.bos_id >= 0 && s.bos_id < n ? s.bos_id : -1;
    t->eos = s.eos_id >= 0 && s.eos_id < n ? s.eos_id : -1;
    t->add_bos = t->bos >= 0;
    t->add_eos = 0;
    t->byte_fallback = s.byte_fallback;
    t->add_dummy_prefix = s.add_dummy_prefix;
    t->remove_extra_whitespaces = s.remove_extra_whitespaces;
    t->escape_whitespaces = s.escape_whitespaces;
    t->strip_leading_space = s.add_dummy_prefix;
    if (t->unk < 0)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: SentencePiece model has no unk piece (unk_id %d)", path,
                          s.unk_id);
    kvcal_tok_find_byte_pieces(t);
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] >= 0 && t->piece_type[t->byte_id[b]] != KVCAL_PIECE_BYTE)
            t->byte_id[b] = -1;
    if (s.byte_fallback)
        for (int b = 0; b < 256; b++)
            if (t->byte_id[b] < 0)
                return kvcal_fail(
                    KVCAL_ERR_FORMAT,
                    "%s: byte_fallback is set but there is no byte piece <0x%02X>", path,
                    b);
    if ((st = kvcal_tok_build_map(t, spm_mergeable)))
        return st;
    t->split_words = kvcal_tok_words_independent(
        t, t->escape_whitespaces ? "\xE2\x96\x81" : " ", spm_mergeable);
    return kvcal_tok_apply_config(t, path); /* HF LlamaTokenizer's add_bos_token etc. */
malformed:
    return kvcal_fail(
        KVCAL_ERR_PARSE,
        "%s: not a valid SentencePiece model (malformed protobuf near byte %zu)", path,
        (size_t)(r.p - data));
}

// --- encoding ---------------------------------------------------------------------

/* sentencepiece's normalizer with an identity character map: invalid UTF-8
 * bytes become U+FFFD; spaces are optionally collapsed and trimmed, and
 * escaped to U+2581; a dummy prefix starts the text. *out is malloc'ed. */
static kvcal_status spm_normalize(const kvcal_tokenizer_t *t, const char *text,
                                  size_t len, char **out, size_t *out_len)
{
    const char *ws = t->escape_whitespaces ? "\xE2\x96\x81" : " ";
    size_t ws_len = t->escape_whitespaces ? 3 : 1;
    char *buf = malloc(len * 3 + 4);
    if (!buf)
        return kvcal_fail(KVCAL_ERR_NOMEM,
                          "tokenizer: out of memory normalizing %zu bytes", len);
    const unsigned char *u = (const unsigned char *)text;
    size_t i = 0, n = 0;
    if (t->remove_extra_whitespaces)
        while (i < len && u[i] == ' ')
            i++;
    if (i < len && t->add_dummy_prefix) {
        memcpy(buf, ws, ws_len);
        n = ws_len;
    }
    int prev_space = t->add_dummy_prefix;
    while (i < len) {
        size_t l = kvcal_utf8_char_len(u + i, len - i);
        if (u[i] == ' ') {
            if (!(t->remove_extra_whitespaces && prev_space)) {
                memcpy(buf + n, ws, ws_len);
                n += ws_len;
            }
            prev_space = 1;
            i++;
            continue;
        }
        prev_space = 0;
        if (!l) {
            memcpy(buf + n, "\xEF\xBF\xBD", 3);
            n += 3;
            i++;
        } else {
            memcpy(buf + n, u + i, l);
            n += l;
            i += l;
        }
    }
    if (t->remove_extra_whitespaces)
        while (n >= ws_len && !memcmp(buf + n - ws_len, ws, ws_len))
            n -= ws_len;
    *out = buf;
    *out_len = n;
    return KVCAL_OK;
}

static int spm_pair(const kvcal_tokenizer_t *t, const char *text, const kvcal_bpe_sym *a,
                    const kvcal_bpe_sym *b, double *priority, int32_t *merged)
{
    int32_t id = kvcal_tok_lookup(t, text + a->start, b->end - a->start);
    if (id < 0)
        return 0;
    *priority = -(double)t->scores[id];
    *merged = id;
    return 1;
}

/* Symbols of norm[ws, we), merged, appended to out as ids. */
static kvcal_status spm_encode_span(const kvcal_tokenizer_t *t, const char *norm,
                                    size_t ws, size_t we, kvcal_bpe_work *w,
                                    kvcal_ids *out)
{
    const unsigned char *u = (const unsigned char *)norm;
    size_t n = 0;
    for (size_t i = ws; i < we;) {
        size_t l = kvcal_utf8_char_len(u + i, we - i);
        /* user-defined pieces are single symbols that never merge */
        int32_t best = -1;
        size_t best_len = 0;
        for (size_t e = i + 1; t->n_user_defined && e <= we && e - i <= 64; e++) {
            int32_t id = kvcal_tok_lookup(t, norm + i, e - i);
            if (id >= 0 && t->piece_type[id] == KVCAL_PIECE_USER_DEFINED) {
                best = id;
                best_len = e - i;
            }
        }
        if (best >= 0 && best_len > 0) {
            w->sym[n++] =
                (kvcal_bpe_sym){best, (uint32_t)i, (uint32_t)(i + best_len), -1, -1, 0};
            i += best_len;
            continue;
        }
        if (!l)
            l = 1;
        w->sym[n++] = (kvcal_bpe_sym){
            kvcal_tok_lookup(t, norm + i, l), (uint32_t)i, (uint32_t)(i + l), -1, -1, 1};
        i += l;
    }
    for (size_t k = 0; k < n; k++) {
        w->sym[k].prev = (int32_t)k - 1;
        w->sym[k].next = k + 1 < n ? (int32_t)k + 1 : -1;
    }
    kvcal_status st = kvcal_bpe_merge(t, norm, w, n, spm_pair);
    for (int32_t k = 0; !st && n && k >= 0; k = w->sym[k].next) {
        const kvcal_bpe_sym *s = &w->sym[k];
        if (s->id >= 0)
            st = kvcal_ids_push(out, s->id);
        else if (t->byte_fallback)
            for (uint32_t b = s->start; b < s->end && !st; b++)
                st = kvcal_ids_push(out, t->byte_id[(unsigned char)norm[b]]);
        else
            st = kvcal_ids_push(out, t->unk);
    }
    return st;
}

kvcal_status kvcal_tok_encode_spm(const kvcal_tokenizer_t *t, const char *text,
                                  size_t len, kvcal_ids *out)
{
    char *norm = NULL;
    size_t n_norm = 0;
    kvcal_bpe_work w = {0};
    kvcal_status st = spm_normalize(t, text, len, &norm, &n_norm);
    if (st)
        return st;
    if (n_norm && !(st = kvcal_bpe_work_reserve(&w, n_norm))) {
        if (!t->split_words)
            st = spm_encode_span(t, norm, 0, n_norm, &w, out);
        else {
            /* no piece crosses the start of a word (a space marker after
               something else): the words merge independently */
            const char *ws = t->escape_whitespaces ? "\xE2\x96\x81" : " ";
            size_t wl = strlen(ws), start = 0;
            for (size_t i = wl; i + wl <= n_norm && !st; i++)
                if (!memcmp(norm + i, ws, wl) && memcmp(norm + i - wl, ws, wl)) {
                    st = spm_encode_span(t, norm, start, i, &w, out);
                    start = i;
                }
            if (!st)
                st = spm_encode_span(t, norm, start, n_norm, &w, out);
        }
    }
    kvcal_bpe_work_free(&w);
    free(norm);
    return st;
}
