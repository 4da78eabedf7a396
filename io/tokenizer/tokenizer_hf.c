/* io/tokenizer/tokenizer_hf.c: Hugging Face tokenizer.json with a BPE model.
 *
 * Two families: byte-level BPE (GPT-2, Llama 3, Qwen2: regex Split
 * pre-tokenizers run with PCRE2 (UTF + Unicode properties, JIT), then the
 * GPT-2 byte-to-character map) and SentencePiece-style BPE (Llama 2,
 * Mistral: Prepend/Replace normalizers or a Metaspace pre-tokenizer, byte
 * fallback). The pipeline is the library's: added tokens are cut out of the
 * raw text first (leftmost, longest), each remaining segment is normalized,
 * pre-tokenized and merged by rank (lowest first, leftmost on ties).
 * BOS/EOS come from tokenizer_config.json beside the file (add_bos_token,
 * add_eos_token, bos_token, eos_token) and otherwise from the
 * TemplateProcessing post-processor.
 *
 * Input that is not UTF-8 (which HF tokenizers cannot take) is encoded
 * byte by byte: invalid bytes become their byte-level characters or byte
 * fallback tokens. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/status.h"
#include "io/json_file.h"
#include "io/tokenizer/tokenizer_kinds.h"
#include "io/tokenizer/tokenizer_nfc.h"

#define GPT2_PATTERN                                                                     \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define METASPACE "\xE2\x96\x81"

// --- byte-level character map (GPT-2 bytes_to_unicode) ---------------------------

static int byte_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
           (b >= 0xAE && b <= 0xFF);
}

/* UTF-8 of the character standing for byte b; returns its length (1 or 2). */
static size_t bytelevel_char(unsigned b, char out[2])
{
    unsigned cp = b;
    if (!byte_printable(b)) {
        unsigned k = 0;
        for (unsigned x = 0; x < b; x++)
            k += !byte_printable(x);
        cp = 0x100 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

// --- loading ------------------------------------------------------------------------

void kvcal_tok_free_hf(kvcal_tokenizer_t *t)
{
    kvcal_pairmap_free(&t->merges);
    for (int i = 0; i < t->n_split; i++)
        pcre2_code_free((pcre2_code *)t->split_re[i]);
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    free(t->added);
    t->n_split = t->n_norm = t->n_added = 0;
    t->added = NULL;
}

static const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int json_true(const cJSON *o, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static int is_type(const cJSON *o, const char *type)
{
    const char *t = json_str(o, "type");
    return t && !strcmp(t, type);
}

static kvcal_status add_split(kvcal_tokenizer_t *t, const char *path, const char *pattern,
                              int literal, int removed)
{
    if (t->n_split == KVCAL_TOK_MAX_SPLITS)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED, "%s: more than %d Split pre-tokenizers",
                          path, KVCAL_TOK_MAX_SPLITS);
    int err;
    PCRE2_SIZE off;
    uint32_t flags =
        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, flags,
                                   &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: pre-tokenizer regex does not compile with PCRE2 at offset %zu: %s", path,
            (size_t)off, (const char *)msg);
    }
    /* when JIT is unavailable, pcre2_match interprets the pattern */
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    t->split_re[t->n_split] = re;
    t->split_removed[t->n_split++] = removed;
    return KVCAL_OK;
}

static kvcal_status parse_metaspace(kvcal_tokenizer_t *t, const char *path,
                                    const cJSON *o)
{
    const char *rep = json_str(o, "replacement");
    if (rep && strcmp(rep, METASPACE))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: Metaspace replacement \"%s\" (only U+2581)", path, rep);
    const char *scheme = json_str(o, "prepend_scheme");
    t->metaspace = 1;
    if (scheme)
        t->metaspace_prepend = !strcmp(scheme, "always")  ? 2
                               : !strcmp(scheme, "first") ? 1
                                                          : 0;
    else /* older files: add_prefix_space */
        t->metaspace_prepend = json_true(o, "add_prefix_space") ? 2 : 0;
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(o, "split");
    t->split_words = split ? cJSON_IsTrue(split) : 1;
    return KVCAL_OK;
}

static kvcal_status parse_pretok(kvcal_tokenizer_t *t, const char *path, const cJSON *o,
                                 int *bytelevel)
{
    if (!o || cJSON_IsNull(o))
        return KVCAL_OK;
    const char *type = json_str(o, "type");
    if (!type)
        return kvcal_fail(KVCAL_ERR_FORMAT, "%s: pre_tokenizer without a type", path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "pretokenizers"))
        {
            kvcal_status st = parse_pretok(t, path, e, bytelevel);
            if (st)
                return st;
        }
        return KVCAL_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        *bytelevel = 1;
        t->prefix_space = json_true(o, "add_prefix_space");
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(o, "use_regex");
        if (!ur || cJSON_IsTrue(ur))
            return add_split(t, path, GPT2_PATTERN, 0, 0);
        return KVCAL_OK;
    }
    if (!strcmp(type, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
        const char *re = json_str(pat, "Regex"), *lit = json_str(pat, "String");
        const char *beh = json_str(o, "behavior");
        int removed = beh && !strcmp(beh, "Removed");
        if ((!re && !lit) || !beh || (!removed && strcmp(beh, "Isolated")) ||
            json_true(o, "invert"))
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: Split pre-tokenizer with behavior %s%s is not supported "
                "(Isolated or Removed, not inverted)",
                path, beh ? beh : "(none)", json_true(o, "invert") ? ", inverted" : "");
        return add_split(t, path, re ? re : lit, !re, removed);
    }
    if (!strcmp(type, "Metaspace"))
        return parse_metaspace(t, path, o);
    if (!strcmp(type, "Digits")) /* numbers apart from the rest, one by one or in runs */
        return add_split(t, path,
                         json_true(o, "individual_digits") ? "\\p{N}" : "\\p{N}+", 0, 0);
    return kvcal_fail(
        KVCAL_ERR_UNSUPPORTED,
        "%s: pre_tokenizer type %s is not supported (ByteLevel, Split, Metaspace, "
        "Digits, Sequence)",
        path, type);
}

static kvcal_status add_norm(kvcal_tokenizer_t *t, const char *path, int op,
                             const char *a, const char *b)
{
    if (t->n_norm == KVCAL_TOK_MAX_NORM)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED, "%s: more than %d normalizers", path,
                          KVCAL_TOK_MAX_NORM);
    kvcal_norm_step *s = &t->norm[t->n_norm];
    s->op = op;
    s->a = strdup(a);
    s->b = strdup(b ? b : "");
    if (!s->a || !s->b) {
        free(s->a);
        free(s->b);
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    }
    s->la = strlen(a);
    s->lb = strlen(s->b);
    t->n_norm++;
    return KVCAL_OK;
}

static kvcal_status parse_normalizer(kvcal_tokenizer_t *t, const char *path,
                                     const cJSON *o)
{
    if (!o || cJSON_IsNull(o))
        return KVCAL_OK;
    const char *type = json_str(o, "type");
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "normalizers"))
        {
            kvcal_status st = parse_normalizer(t, path, e);
            if (st)
                return st;
        }
        return KVCAL_OK;
    }
    if (type && !strcmp(type, "NFC"))
        return add_norm(t, path, KVCAL_NORM_NFC, "", NULL);
    if (type && !strcmp(type, "Prepend") && json_str(o, "prepend"))
        return add_norm(t, path, KVCAL_NORM_PREPEND, json_str(o, "prepend"), NULL);
    if (type && !strcmp(type, "Replace")) {
        const char *from =
            json_str(cJSON_GetObjectItemCaseSensitive(o, "pattern"), "String");
        const char *to = json_str(o, "content");
        if (from && *from && to)
            return add_norm(t, path, KVCAL_NORM_REPLACE, from, to);
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: Replace normalizer with a regex pattern is not supported",
                          path);
    }
    return kvcal_fail(
        KVCAL_ERR_UNSUPPORTED,
        "%s: normalizer %s is not supported (NFC, Prepend, Replace with a string "
        "pattern, Sequence)",
        path, type ? type : "(no type)");
}

/* Id of a token named in the file (added token or vocabulary piece). */
/* BOS/EOS from TemplateProcessing's "single" template: the special token
 * before $A is the BOS, the one after it the EOS. */
static void parse_post(kvcal_tokenizer_t *t, const cJSON *o)
{
    if (!o || cJSON_IsNull(o))
        return;
    if (is_type(o, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "processors"))
            parse_post(t, e);
        return;
    }
    if (!is_type(o, "TemplateProcessing"))
        return;
    const cJSON *e, *specials = cJSON_GetObjectItemCaseSensitive(o, "special_tokens");
    int after = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "single"))
    {
        if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
            after = 1;
            continue;
        }
        const char *name =
            json_str(cJSON_GetObjectItemCaseSensitive(e, "SpecialToken"), "id");
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(specials, name ? name : ""), "ids");
        const cJSON *id0 = cJSON_IsArray(ids) && cJSON_GetArraySize(ids) == 1
                               ? cJSON_GetArrayItem(ids, 0)
                               : NULL;
        /* valueint is saturated by cJSON */
        int32_t id = cJSON_IsNumber(id0) ? id0->valueint : kvcal_tok_id_of(t, name);
        if (id < 0 || id >= t->vocab_size)
            continue;
        if (!after) {
            t->bos = id;
            t->add_bos = 1;
        } else {
            t->eos = id;
            t->add_eos = 1;
        }
    }
}

static int added_cmp(const void *a, const void *b, void *tok)
{
    const kvcal_tokenizer_t *t = tok;
    size_t la, lb;
    kvcal_tok_piece(t, ((const kvcal_added_token *)a)->id, &la);
    kvcal_tok_piece(t, ((const kvcal_added_token *)b)->id, &lb);
    return la < lb ? 1 : la > lb ? -1 : 0;
}

static int hf_mergeable(const kvcal_tokenizer_t *t, int32_t id)
{
    return t->piece_type[id] != KVCAL_PIECE_UNUSED; /* holes in the id range */
}

/* Vocabulary, added tokens and merges into the piece tables. */
static kvcal_status load_model(kvcal_tokenizer_t *t, const char *path, const cJSON *model,
                               const cJSON *added)
{
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: model.vocab (object) or model.merges (list) missing",
                          path);
    int n = 0;
    size_t total = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab)
    {
        double id = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(id >= 0 && id < (1 << 24)) || id != (double)(int32_t)id)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: model.vocab[\"%s\"] is not a valid id", path,
                              e->string);
        if ((int)id + 1 > n)
            n = (int)id + 1;
        total += strlen(e->string);
    }
    cJSON_ArrayForEach(e, added)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const char *content = json_str(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) ||
            !content)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: added_tokens entry without id or content", path);
        if ((int)id->valuedouble + 1 > n)
            n = (int)id->valuedouble + 1;
        total += strlen(content);
    }
    if (n == 0)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: model.vocab and added_tokens are empty: the tokenizer has "
                          "no tokens; pass the model's own tokenizer.json",
                          path);
    kvcal_status st = kvcal_tok_alloc(t, n, total);
    if (st)
        return st;
    /* ids may have holes: collect (id, string) and lay them out in id order */
    const char **str = calloc((size_t)n, sizeof *str);
    if (!str)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    cJSON_ArrayForEach(e, vocab) str[(int)e->valuedouble] = e->string;
    int n_added = cJSON_GetArraySize(added);
    t->added = calloc((size_t)n_added + 1, sizeof *t->added);
    if (!t->added) {
        free(str);
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    }
    cJSON_ArrayForEach(e, added)
    {
        int id = (int)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        str[id] = json_str(e, "content");
        t->added[t->n_added++] = (kvcal_added_token){
            id, json_true(e, "special"), json_true(e, "lstrip"), json_true(e, "rstrip")};
    }
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        size_t l = str[i] ? strlen(str[i]) : 0;
        memcpy(t->piece_data + pos, str[i] ? str[i] : "", l);
        t->piece_off[i] = (uint32_t)pos;
        t->piece_type[i] = str[i] ? KVCAL_PIECE_NORMAL : KVCAL_PIECE_UNUSED;
        pos += l;
    }
    t->piece_off[n] = (uint32_t)pos;
    free(str);
    for (int i = 0; i < t->n_added; i++) {
        t->piece_type[t->added[i].id] =
            t->added[i].special ? KVCAL_PIECE_CONTROL : KVCAL_PIECE_USER_DEFINED;
        size_t l;
        const char *p = kvcal_tok_piece(t, t->added[i].id, &l);
        if (l)
            t->added_first[(unsigned char)p[0]] = 1;
    }
    qsort_r(t->added, (size_t)t->n_added, sizeof *t->added, added_cmp, t);
    if ((st = kvcal_tok_build_map(t, hf_mergeable)))
        return st;
    /* merges: "a b" strings (older files) or ["a", "b"] pairs */
    int n_merges = cJSON_GetArraySize(merges);
    if ((st = kvcal_pairmap_init(&t->merges, (size_t)n_merges)))
        return st;
    int rank = 0;
    cJSON_ArrayForEach(e, merges)
    {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (cJSON_IsString(e) && e->valuestring[0]) {
            const char *sp = strchr(e->valuestring + 1, ' ');
            if (sp) {
                a = e->valuestring;
                la = (size_t)(sp - a);
                b = sp + 1;
                lb = strlen(b);
            }
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            a = cJSON_GetArrayItem(e, 0)->valuestring;
            b = cJSON_GetArrayItem(e, 1)->valuestring;
            la = strlen(a);
            lb = strlen(b);
        }
        if (!a)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: model.merges[%d] is not \"a b\" or [a, b]", path,
                              rank);
        int32_t ia = kvcal_tok_lookup(t, a, la), ib = kvcal_tok_lookup(t, b, lb);
        char *cat = malloc(la + lb + 1);
        if (!cat)
            return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        int32_t im = kvcal_tok_lookup(t, cat, la + lb);
        free(cat);
        if (ia < 0 || ib < 0 || im < 0)
            return kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: model.merges[%d] (\"%.*s\" + \"%.*s\") names a piece missing "
                "from model.vocab",
                path, rank, (int)la, a, (int)lb, b);
        kvcal_pairmap_put(&t->merges, ia, ib, rank++, im);
    }
    return KVCAL_OK;
}

static kvcal_status load_tree(kvcal_tokenizer_t *t, const char *path, const cJSON *root)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *mtype = json_str(model, "type");
    if (!model)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: no \"model\" object; is this a tokenizer.json?", path);
    if (mtype && strcmp(mtype, "BPE"))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: tokenizer model type %s is not supported (only BPE)", path,
                          mtype);
    if (!mtype && !cJSON_GetObjectItemCaseSensitive(model, "merges"))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: tokenizer model is not BPE (no merges)", path);
    const char *cs = json_str(model, "continuing_subword_prefix");
    const char *ew = json_str(model, "end_of_word_suffix");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if ((cs && *cs) || (ew && *ew) ||
        (cJSON_IsNumber(dropout) && dropout->valuedouble > 0))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: BPE with continuing_subword_prefix, end_of_word_suffix or dropout "
            "is not supported",
            path);
    kvcal_status st = load_model(t, path, model,
                                 cJSON_GetObjectItemCaseSensitive(root, "added_tokens"));
    if (st)
        return st;
    t->ignore_merges = json_true(model, "ignore_merges");
    t->fuse_unk = json_true(model, "fuse_unk");
    t->byte_fallback = json_true(model, "byte_fallback");
    t->unk = kvcal_tok_id_of(t, json_str(model, "unk_token"));
    int bytelevel = 0;
    if ((st = parse_normalizer(t, path,
                               cJSON_GetObjectItemCaseSensitive(root, "normalizer"))) ||
        (st = parse_pretok(t, path,
                           cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"),
                           &bytelevel)))
        return st;
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (is_type(dec, "ByteLevel"))
        bytelevel = 1;
    t->kind = bytelevel ? KVCAL_TOK_HF_BYTELEVEL : KVCAL_TOK_HF_SENTENCEPIECE;
    if (bytelevel) {
        if (t->metaspace)
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: byte-level BPE combined with a Metaspace pre-tokenizer is "
                "not supported",
                path);
        for (unsigned b = 0; b < 256; b++) {
            char c[2];
            t->byte_id[b] = kvcal_tok_lookup(t, c, bytelevel_char(b, c));
        }
    } else {
        kvcal_tok_find_byte_pieces(t);
        if (t->byte_fallback)
            for (int b = 0; b < 256; b++)
                if (t->byte_id[b] >= 0)
                    t->piece_type[t->byte_id[b]] = KVCAL_PIECE_BYTE;
        /* the decoder drops the space the normalizer / Metaspace put first */
        const cJSON *e;
        if (is_type(dec, "Metaspace"))
            t->strip_leading_space =
                t->metaspace_prepend > 0 || json_true(dec, "add_prefix_space");
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(dec, "decoders"))
        {
            const cJSON *start = cJSON_GetObjectItemCaseSensitive(e, "start");
            if (is_type(e, "Strip") && cJSON_IsNumber(start) && start->valueint >= 1)
                t->strip_leading_space = 1;
        }
    }
    /* SentencePiece-style without ignore_merges (which looks whole
       pre-tokens up) and with U+2581 in the vocabulary (so unknown
       characters never fuse across a word start) */
    t->words_independent = !bytelevel && !t->ignore_merges && !t->n_split &&
                           kvcal_tok_lookup(t, METASPACE, 3) >= 0 &&
                           kvcal_tok_words_independent(t, METASPACE, hf_mergeable);
    parse_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
    return kvcal_tok_apply_config(t, path);
}

kvcal_status kvcal_tok_load_hf(kvcal_tokenizer_t *t, const char *path, const char *data,
                               size_t len)
{
    cJSON *root = NULL;
    kvcal_status st = kvcal_json_parse(data, len, path, &root);
    if (st)
        return st;
    st = load_tree(t, path, root);
    cJSON_Delete(root);
    return st;
}

// --- encoding -------------------------------------------------------------------------

typedef struct hf_ctx {
    const kvcal_tokenizer_t *t;
    kvcal_ids *out;
    kvcal_bpe_work w;
    pcre2_match_data *md;
    char *buf; /* scratch for normalized text */
    size_t buf_cap;
} hf_ctx;

static int hf_pair(const kvcal_tokenizer_t *t, const char *text, const kvcal_bpe_sym *a,
                   const kvcal_bpe_sym *b, double *priority, int32_t *merged)
{
    (void)text;
    int32_t rank;
    if (a->id < 0 || b->id < 0 ||
        !kvcal_pairmap_get(&t->merges, a->id, b->id, &rank, merged))
        return 0;
    *priority = (double)rank;
    return 1;
}

static kvcal_status emit_symbols(hf_ctx *c, size_t n, const char *text)
{
    kvcal_bpe_sym *s = c->w.sym;
    for (size_t k = 0; k < n; k++) {
        s[k].prev = (int32_t)k - 1;
        s[k].next = k + 1 < n ? (int32_t)k + 1 : -1;
    }
    kvcal_status st = kvcal_bpe_merge(c->t, text, &c->w, n, hf_pair);
    for (int32_t k = 0; !st && k >= 0; k = s[k].next)
        st = kvcal_ids_push(c->out, s[k].id);
    return st;
}

/* BPE of one byte-level pre-token (raw bytes). */
static kvcal_status bpe_bytelevel(hf_ctx *c, const char *p, size_t n)
{
    const kvcal_tokenizer_t *t = c->t;
    kvcal_status st;
    if (t->ignore_merges && n <= 256) {
        char mapped[512];
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += bytelevel_char((unsigned char)p[i], mapped + m);
        int32_t id = kvcal_tok_lookup(t, mapped, m);
        if (id >= 0)
            return kvcal_ids_push(c->out, id);
    }
    if ((st = kvcal_bpe_work_reserve(&c->w, n)))
        return st;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(unsigned char)p[i]];
        if (id < 0) {
            if (t->unk < 0)
                return kvcal_fail(
                    KVCAL_ERR_FORMAT,
                    "%s: byte 0x%02X has no byte-level token and there is no "
                    "unk_token: this tokenizer cannot encode the text; use the model's "
                    "own tokenizer.json, or take the byte out of the text",
                    t->path, (unsigned char)p[i]);
            id = t->unk;
        }
        c->w.sym[k++] = (kvcal_bpe_sym){id, (uint32_t)i, (uint32_t)i + 1, -1, -1, 1};
    }
    return emit_symbols(c, k, p);
}

/* The error for the l bytes at u, a character outside the vocabulary of
 * a tokenizer with neither byte fallback nor unk: the file and the
 * character (its code point, or the byte of invalid UTF-8). */
static kvcal_status unknown_char(const kvcal_tokenizer_t *t, const unsigned char *u,
                                 size_t l)
{
    char what[32];
    unsigned cp = l == 1 ? u[0] : (u[0] & (0x7Fu >> l));
    for (size_t b = 1; b < l; b++)
        cp = cp << 6 | (u[b] & 0x3Fu);
    if (l == 1 && u[0] >= 0x80)
        snprintf(what, sizeof what, "byte 0x%02X (not UTF-8)", u[0]);
    else
        snprintf(what, sizeof what, "U+%04X", cp);
    return kvcal_fail(KVCAL_ERR_FORMAT,
                      "%s: a character (%s) is not in the vocabulary and the model has "
                      "neither byte_fallback nor an unk_token: this tokenizer cannot "
                      "encode the text; use the model's own tokenizer.json, or take the "
                      "character out of the text",
                      t->path, what);
}

/* BPE of one SentencePiece-style pre-token (U+2581-escaped UTF-8). */
static kvcal_status bpe_chars(hf_ctx *c, const char *p, size_t n)
{
    const kvcal_tokenizer_t *t = c->t;
    kvcal_status st;
    if (t->ignore_merges) {
        int32_t id = kvcal_tok_lookup(t, p, n);
        if (id >= 0)
            return kvcal_ids_push(c->out, id);
    }
    if ((st = kvcal_bpe_work_reserve(&c->w, n)))
        return st;
    const unsigned char *u = (const unsigned char *)p;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = kvcal_utf8_char_len(u + i, n - i);
        if (!l)
            l = 1;
        int32_t id = kvcal_tok_lookup(t, p + i, l);
        if (id >= 0)
            c->w.sym[k++] =
                (kvcal_bpe_sym){id, (uint32_t)i, (uint32_t)(i + l), -1, -1, 1};
        else if (t->byte_fallback && t->byte_id[u[i]] >= 0) {
            for (size_t b = i; b < i + l; b++)
                c->w.sym[k++] = (kvcal_bpe_sym){
                    t->byte_id[u[b]], (uint32_t)b, (uint32_t)b + 1, -1, -1, 1};
        } else if (t->unk >= 0) {
            if (t->fuse_unk && k && c->w.sym[k - 1].id == t->unk)
                c->w.sym[k - 1].end = (uint32_t)(i + l);
            else
                c->w.sym[k++] =
                    (kvcal_bpe_sym){t->unk, (uint32_t)i, (uint32_t)(i + l), -1, -1, 1};
        } else
            return unknown_char(t, u + i, l);
        i += l;
    }
    return emit_symbols(c, k, p);
}

static kvcal_status bpe_piece(hf_ctx *c, const char *p, size_t n)
{
    if (!n)
        return KVCAL_OK;
    return c->t->kind == KVCAL_TOK_HF_BYTELEVEL ? bpe_bytelevel(c, p, n)
                                                : bpe_chars(c, p, n);
}

/* Splits [p, p+n) with split step k (Isolated: matches and gaps are pieces;
 * Removed: gaps only), recursing into the next step. */
static kvcal_status split_step(hf_ctx *c, int k, const char *p, size_t n)
{
    if (k == c->t->n_split)
        return bpe_piece(c, p, n);
    const pcre2_code *re = c->t->split_re[k];
    size_t pos = 0, last = 0;
    kvcal_status st = KVCAL_OK;
    while (pos < n && !st) {
        int rc = pcre2_match(re, (PCRE2_SPTR)p, n, pos, 0, c->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: pre-tokenizer regex failed (PCRE2 error %d)",
                              c->t->path, rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t s = ov[0], e = ov[1];
        if (e == s) { /* empty match: step over one character */
            size_t l = kvcal_utf8_char_len((const unsigned char *)p + s, n - s);
            pos = s + (l ? l : 1);
            continue;
        }
        if (s > last)
            st = split_step(c, k + 1, p + last, s - last);
        if (!st && !c->t->split_removed[k])
            st = split_step(c, k + 1, p + s, e - s);
        last = pos = e;
    }
    if (!st && last < n)
        st = split_step(c, k + 1, p + last, n - last);
    return st;
}

static int reserve(hf_ctx *c, size_t n)
{
    if (n <= c->buf_cap)
        return 0;
    char *b = realloc(c->buf, n);
    if (!b)
        return -1;
    c->buf = b;
    c->buf_cap = n;
    return 0;
}

/* Normalizes one segment into c->buf (NFC / Prepend / Replace steps, then
 * Metaspace or the ByteLevel prefix space); returns its length. */
static kvcal_status normalize_segment(hf_ctx *c, const char *p, size_t n, int at_start,
                                      size_t *out_len)
{
    const kvcal_tokenizer_t *t = c->t;
    size_t cap = n + 8;
    for (int i = 0; i < t->n_norm; i++) {
        const kvcal_norm_step *s = &t->norm[i];
        if (s->op == KVCAL_NORM_NFC)
            cap = cap * 3 + 8; /* NFC grows UTF-8 at most 3x (UAX #15) */
        else if (s->op == KVCAL_NORM_REPLACE)
            cap = cap * (s->lb > s->la ? s->lb : 1) + 8;
        else
            cap += s->la;
    }
    cap = cap * 3 + 8;
    char *tmp = malloc(cap);
    if (!tmp || reserve(c, cap)) {
        free(tmp);
        return kvcal_fail(KVCAL_ERR_NOMEM,
                          "tokenizer: out of memory normalizing %zu bytes", n);
    }
    memcpy(c->buf, p, n);
    size_t len = n;
    for (int i = 0; i < t->n_norm; i++) {
        const kvcal_norm_step *s = &t->norm[i];
        if (s->op == KVCAL_NORM_NFC) {
            char *nfc = NULL;
            size_t m = 0;
            kvcal_status st = kvcal_nfc(c->buf, len, &nfc, &m);
            if (st) {
                free(tmp);
                return st;
            }
            memcpy(c->buf, nfc, m);
            free(nfc);
            len = m;
            continue;
        }
        if (s->op == KVCAL_NORM_PREPEND) {
            if (len) {
                memmove(c->buf + s->la, c->buf, len);
                memcpy(c->buf, s->a, s->la);
                len += s->la;
            }
            continue;
        }
        size_t m = 0;
        for (size_t j = 0; j < len;) {
            if (j + s->la <= len && !memcmp(c->buf + j, s->a, s->la)) {
                memcpy(tmp + m, s->b, s->lb);
                m += s->lb;
                j += s->la;
            } else
                tmp[m++] = c->buf[j++];
        }
        memcpy(c->buf, tmp, m);
        len = m;
    }
    if (t->metaspace) {
        size_t m = 0;
        for (size_t j = 0; j < len; j++) {
            if (c->buf[j] == ' ') {
                memcpy(tmp + m, METASPACE, 3);
                m += 3;
            } else
                tmp[m++] = c->buf[j];
        }
        int prepend =
            (t->metaspace_prepend == 2 || (t->metaspace_prepend == 1 && at_start)) &&
            !(m >= 3 && !memcmp(tmp, METASPACE, 3));
        len = 0;
        if (prepend && m) {
            memcpy(c->buf, METASPACE, 3);
            len = 3;
        }
        memcpy(c->buf + len, tmp, m);
        len += m;
    } else if (t->prefix_space && len && c->buf[0] != ' ') {
        memmove(c->buf + 1, c->buf, len);
        c->buf[0] = ' ';
        len++;
    }
    free(tmp);
    *out_len = len;
    return KVCAL_OK;
}

/* Normalizes, pre-tokenizes and encodes one segment between added tokens. */
static kvcal_status encode_segment(hf_ctx *c, const char *p, size_t n, int at_start)
{
    if (!n)
        return KVCAL_OK;
    size_t len = 0;
    kvcal_status st = normalize_segment(c, p, n, at_start, &len);
    if (st || !len)
        return st;
    const char *s = c->buf;
    int every = c->t->metaspace && c->t->split_words;
    if (every || c->t->words_independent) {
        /* Metaspace split: each U+2581 starts a new word. Otherwise, when no
           merge can cross a word start (U+2581 after something else), words
           are merged one by one: the same ids, smaller merge queues. */
        size_t start = 0;
        for (size_t j = 3; j + 3 <= len && !st; j++)
            if (!memcmp(s + j, METASPACE, 3) &&
                (every || memcmp(s + j - 3, METASPACE, 3))) {
                st = split_step(c, 0, s + start, j - start);
                start = j;
            }
        return st ? st : split_step(c, 0, s + start, len - start);
    }
    return split_step(c, 0, s, len);
}

static int is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' ||
           ch == '\v';
}

/* The leftmost, longest added token at or after `from`: its index, and the
 * span it takes with lstrip / rstrip whitespace. -1 when none. */
static int find_added(const kvcal_tokenizer_t *t, const char *text, size_t len,
                      size_t from, size_t *start, size_t *end)
{
    for (size_t i = from; i < len; i++) {
        if (!t->added_first[(unsigned char)text[i]])
            continue;
        for (int k = 0; k < t->n_added; k++) {
            size_t m;
            const char *s = kvcal_tok_piece(t, t->added[k].id, &m);
            if (!m || m > len - i || memcmp(text + i, s, m))
                continue;
            size_t a = i, b = i + m;
            if (t->added[k].lstrip)
                while (a > from && is_ws(text[a - 1]))
                    a--;
            if (t->added[k].rstrip)
                while (b < len && is_ws(text[b]))
                    b++;
            *start = a;
            *end = b;
            return k;
        }
    }
    return -1;
}

kvcal_status kvcal_tok_encode_hf(const kvcal_tokenizer_t *t, const char *text, size_t len,
                                 kvcal_ids *out)
{
    hf_ctx c = {.t = t, .out = out};
    kvcal_status st = KVCAL_OK;
    if (t->n_split) {
        c.md = pcre2_match_data_create_from_pattern((const pcre2_code *)t->split_re[0],
                                                    NULL);
        for (int k = 1; c.md && k < t->n_split; k++) {
            /* one match data large enough for every pattern */
            pcre2_match_data *m2 = pcre2_match_data_create_from_pattern(
                (const pcre2_code *)t->split_re[k], NULL);
            if (m2 && pcre2_get_ovector_count(m2) > pcre2_get_ovector_count(c.md)) {
                pcre2_match_data_free(c.md);
                c.md = m2;
            } else
                pcre2_match_data_free(m2);
        }
        if (!c.md)
            return kvcal_fail(KVCAL_ERR_NOMEM,
                              "tokenizer: out of memory for regex match data");
    }
    size_t pos = 0;
    while (pos <= len && !st) {
        size_t a = len, b = len;
        int k = t->n_added ? find_added(t, text, len, pos, &a, &b) : -1;
        st = encode_segment(&c, text + pos, a - pos, pos == 0);
        if (!st && k >= 0)
            st = kvcal_ids_push(out, t->added[k].id);
        if (k < 0)
            break;
        pos = b;
    }
    pcre2_match_data_free(c.md);
    kvcal_bpe_work_free(&c.w);
    free(c.buf);
    return st;
}
