/* tests/test_tokenizer.c: token ids identical to the reference libraries.
 *
 * tests/make_tokenizer_fixtures.py wrote the test strings and, per
 * tokenizer, the ids HF tokenizers / sentencepiece / a port of llama2.c's
 * encode gave for them (tests/fixtures/tokenizer/). Every string must give
 * exactly those ids. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"
#include "io/tokenizer/tokenizer.h"
#include "io/tokenizer/tokenizer_vocab.h"
#include "tests/test_util.h"

#define FIX "tests/fixtures/tokenizer/"

typedef struct fixture_strings {
    size_t n;
    char **s;    /* (n) bytes */
    size_t *len; /* (n) */
} fixture_strings;

static fixture_strings strings;

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Loads strings.jsonl once: {"text": "..."} or {"hex": "..."} per line. */
static const fixture_strings *load_strings(void)
{
    if (strings.n)
        return &strings;
    size_t len;
    char *data = kvcal_test_read_file(FIX "strings.jsonl", &len);
    if (!data)
        return NULL;
    size_t cap = 2048;
    strings.s = calloc(cap, sizeof *strings.s);
    strings.len = calloc(cap, sizeof *strings.len);
    for (char *line = strtok(data, "\n"); line && strings.n < cap;
         line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *t = cJSON_GetObjectItem(o, "text"),
                    *h = cJSON_GetObjectItem(o, "hex");
        size_t i = strings.n++;
        if (cJSON_IsString(t)) {
            strings.len[i] = strlen(t->valuestring);
            strings.s[i] = strdup(t->valuestring);
        } else if (cJSON_IsString(h)) {
            size_t m = strlen(h->valuestring) / 2;
            strings.s[i] = malloc(m + 1);
            for (size_t k = 0; k < m; k++)
                strings.s[i][k] = (char)(hexval(h->valuestring[2 * k]) << 4 |
                                         hexval(h->valuestring[2 * k + 1]));
            strings.len[i] = m;
        }
        cJSON_Delete(o);
    }
    free(data);
    return &strings;
}

/* Encodes every string named in ids_file and compares with its ids; returns
 * the number of strings checked, reporting the first mismatches. */
static size_t check_ids(const kvcal_tokenizer_t *tok, const char *ids_file,
                        size_t *mismatches)
{
    const fixture_strings *fs = load_strings();
    size_t len, checked = 0;
    char *data = kvcal_test_read_file(ids_file, &len);
    *mismatches = 0;
    if (!fs || !data) {
        free(data);
        return 0;
    }
    char *save = NULL;
    for (char *line = strtok_r(data, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        int i = cJSON_GetObjectItem(o, "i")->valueint;
        const cJSON *want = cJSON_GetObjectItem(o, "ids");
        int32_t *ids = NULL;
        size_t n = 0;
        kvcal_status st = kvcal_tokenizer_encode(tok, fs->s[i], fs->len[i], 0, &ids, &n);
        int ok = st == KVCAL_OK && n == (size_t)cJSON_GetArraySize(want);
        for (size_t k = 0; ok && k < n; k++)
            ok = ids[k] == cJSON_GetArrayItem(want, (int)k)->valueint;
        if (!ok && (*mismatches)++ < 5) {
            fprintf(stderr, "\n  %s: string %d (%zu bytes): got", ids_file, i,
                    fs->len[i]);
            for (size_t k = 0; k < n && k < 24; k++)
                fprintf(stderr, " %d", ids[k]);
            char *w = cJSON_PrintUnformatted(want);
            fprintf(stderr, "\n    want %.200s %s\n", w, st ? kvcal_last_error() : "");
            free(w);
        }
        free(ids);
        cJSON_Delete(o);
        checked++;
    }
    free(data);
    return checked;
}

static void encode_str(const kvcal_tokenizer_t *tok, const char *s, int special,
                       int32_t *out, size_t *n);

static kvcal_tokenizer_t *load(const char *path)
{
    kvcal_tokenizer_t *tok = NULL;
    kvcal_status st = kvcal_tokenizer_load(path, &tok);
    if (st)
        fprintf(stderr, "\n  %s: %s\n", path, kvcal_last_error());
    return tok;
}

static char *shared_path(const char *rel)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", kvcal_test_shared_dir(), rel);
    return p;
}

/* decode(encode(text)) gives the text back for valid UTF-8 */
static void check_roundtrip(const kvcal_tokenizer_t *tok, size_t max_strings)
{
    const fixture_strings *fs = load_strings();
    CU_ASSERT_PTR_NOT_NULL_FATAL(fs);
    size_t bad = 0;
    for (size_t i = 0; i < fs->n && i < max_strings; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        char *text = NULL;
        const char *s = fs->s[i];
        size_t l = fs->len[i];
        /* sentencepiece-style decoders drop one leading space and turn
           U+2581 into a space, special tokens decode to nothing: skip such
           texts, and those not UTF-8 */
        if (kvcal_utf8_check(s, l) != l || memchr(s, 0, l) || (l && s[0] == ' ') ||
            strstr(s, "\xE2\x96\x81") || (strchr(s, '<') && strchr(s, '>')))
            continue;
        if (kvcal_tokenizer_encode(tok, s, l, 1, &ids, &n) ||
            kvcal_tokenizer_decode(tok, ids, n, &text))
            bad++;
        else if (strlen(text) != l || memcmp(text, s, l)) {
            if (bad < 3)
                fprintf(stderr, "\n  roundtrip %zu: [%.60s] -> [%.60s]\n", i, s, text);
            bad++;
        }
        free(ids);
        free(text);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

// --- llama2.c tokenizer.bin ---------------------------------------------------------

static void llama2c_matches_run_c_encode_on_stories260k(void)
{
    kvcal_tokenizer_t *tok = load(shared_path("models/stories260K/tok512.bin"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_STRING_EQUAL(kvcal_tokenizer_kind(tok), "llama2c");
    CU_ASSERT_EQUAL(kvcal_tokenizer_vocab_size(tok), 512);
    size_t bad, n = check_ids(tok, FIX "llama2c_ids.jsonl", &bad);
    CU_ASSERT(n >= 400);
    CU_ASSERT_EQUAL(bad, 0);
    kvcal_tokenizer_destroy(tok);
}

static void llama2c_adds_bos_not_eos_and_decodes_back(void)
{
    kvcal_tokenizer_t *tok = load(shared_path("models/stories260K/tok512.bin"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_EQUAL(kvcal_tokenizer_bos(tok), 1);
    CU_ASSERT_EQUAL(kvcal_tokenizer_eos(tok), 2);
    int32_t *ids = NULL;
    size_t n = 0;
    const char *text = "Once upon a time, there was a little girl named Lily.";
    CU_ASSERT_EQUAL_FATAL(kvcal_tokenizer_encode(tok, text, strlen(text), 1, &ids, &n),
                          KVCAL_OK);
    CU_ASSERT(n > 2);
    CU_ASSERT_EQUAL(ids[0], 1);
    CU_ASSERT_NOT_EQUAL(ids[n - 1], 2);
    char *back = NULL;
    CU_ASSERT_EQUAL(kvcal_tokenizer_decode(tok, ids, n, &back), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(back, text);
    free(back);
    free(ids);
    CU_ASSERT_EQUAL(kvcal_tokenizer_encode(tok, "", 0, 0, &ids, &n), KVCAL_OK);
    CU_ASSERT_EQUAL(n, 0);
    free(ids);
    check_roundtrip(tok, 400);
    kvcal_tokenizer_destroy(tok);
}

static void tokenizer_find_picks_tok_bin_next_to_model(void)
{
    kvcal_tokenizer_t *tok = NULL;
    CU_ASSERT_EQUAL(kvcal_tokenizer_find(
                        shared_path("models/stories260K/stories260K.bin"), NULL, &tok),
                    KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(kvcal_tokenizer_kind(tok), "llama2c");
    kvcal_tokenizer_destroy(tok);
    CU_ASSERT_EQUAL(kvcal_tokenizer_find(shared_path("models/stories260K"), NULL, &tok),
                    KVCAL_OK);
    CU_ASSERT_PTR_NOT_NULL(tok);
    kvcal_tokenizer_destroy(tok);
    /* tokenizer.model wins over tokenizer.bin in one folder */
    CU_ASSERT_EQUAL(
        kvcal_tokenizer_find(shared_path("models/llama2-tokenizer"), NULL, &tok),
        KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(kvcal_tokenizer_kind(tok), "sentencepiece");
    kvcal_tokenizer_destroy(tok);
}

// --- SentencePiece tokenizer.model ---------------------------------------------------

static void sentencepiece_matches_sentencepiece_on_llama2_model(void)
{
    kvcal_tokenizer_t *tok = load(shared_path("models/llama2-tokenizer/tokenizer.model"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_STRING_EQUAL(kvcal_tokenizer_kind(tok), "sentencepiece");
    CU_ASSERT_EQUAL(kvcal_tokenizer_vocab_size(tok), 32000);
    CU_ASSERT_EQUAL(kvcal_tokenizer_bos(tok), 1);
    CU_ASSERT_EQUAL(kvcal_tokenizer_eos(tok), 2);
    size_t bad, n = check_ids(tok, FIX "llama2_spm_ids.jsonl", &bad);
    CU_ASSERT(n >= 1000);
    CU_ASSERT_EQUAL(bad, 0);
    check_roundtrip(tok, 2000);
    kvcal_tokenizer_destroy(tok);
}

static void sentencepiece_follows_tokenizer_config_and_decodes_unk(void)
{
    size_t len;
    char *model = kvcal_test_read_file(
        shared_path("models/llama2-tokenizer/tokenizer.model"), &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(model);
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("spm_cfg"));
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const char *cfg =
        "{\"add_bos_token\": false, \"add_eos_token\": true, \"eos_token\": \"</s>\"}";
    kvcal_test_write_file(path, cfg, strlen(cfg));
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    kvcal_test_write_file(path, model, len);
    free(model);
    kvcal_tokenizer_t *tok = load(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    int32_t ids[16];
    size_t n;
    encode_str(tok, "Hello world", 1, ids, &n);
    CU_ASSERT(n == 3 && ids[0] == 15043 && ids[1] == 3186 && ids[2] == 2);
    /* sentencepiece decodes [<s> Hello <unk> world </s>] as "Hello \u2047  world" */
    const int32_t with_unk[] = {1, 15043, 0, 3186, 2};
    char *text = NULL;
    CU_ASSERT_EQUAL(kvcal_tokenizer_decode(tok, with_unk, 5, &text), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(text, "Hello \xE2\x81\x87  world");
    free(text);
    kvcal_tokenizer_destroy(tok);
}

static void llama2c_and_sentencepiece_exports_agree_on_prose(void)
{
    /* the same Llama 2 vocabulary in both formats gives the same ids on
       ordinary text (llama2.c's encoder differs only on rare whitespace) */
    kvcal_tokenizer_t *a = load(shared_path("models/llama2-tokenizer/tokenizer.model"));
    kvcal_tokenizer_t *b = load(shared_path("models/llama2-tokenizer/tokenizer.bin"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    const char *text =
        "The quick brown fox jumps over the lazy dog. Les élèves ont mangé 12 crêpes.";
    int32_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    CU_ASSERT_EQUAL(kvcal_tokenizer_encode(a, text, strlen(text), 1, &x, &nx), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_tokenizer_encode(b, text, strlen(text), 1, &y, &ny), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(nx, ny);
    CU_ASSERT_EQUAL(memcmp(x, y, nx * sizeof *x), 0);
    free(x);
    free(y);
    kvcal_tokenizer_destroy(a);
    kvcal_tokenizer_destroy(b);
}

// --- tokenizer.json -------------------------------------------------------------------

static void hf_bytelevel_matches_hf_tokenizers_on_every_string(void)
{
    kvcal_tokenizer_t *tok = load(FIX "bytelevel/tokenizer.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_STRING_EQUAL(kvcal_tokenizer_kind(tok), "hf-bpe-bytelevel");
    CU_ASSERT_EQUAL(kvcal_tokenizer_vocab_size(tok), 3000);
    size_t bad, n = check_ids(tok, FIX "bytelevel_ids.jsonl", &bad);
    CU_ASSERT(n >= 1000);
    CU_ASSERT_EQUAL(bad, 0);
    kvcal_tokenizer_destroy(tok);
}

static void hf_bytelevel_adds_template_bos_and_decodes_back(void)
{
    kvcal_tokenizer_t *tok = load(FIX "bytelevel/tokenizer.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    /* TemplateProcessing "<|begin_of_text|> $A", no tokenizer_config.json */
    CU_ASSERT_EQUAL(kvcal_tokenizer_bos(tok), 0);
    CU_ASSERT_EQUAL(kvcal_tokenizer_eos(tok), -1);
    int32_t *ids = NULL;
    size_t n = 0;
    const char *text = "Hello <|eot_id|>world";
    CU_ASSERT_EQUAL_FATAL(kvcal_tokenizer_encode(tok, text, strlen(text), 1, &ids, &n),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(ids[0], 0);
    int found = 0;
    for (size_t i = 0; i < n; i++)
        found += ids[i] == 2;
    CU_ASSERT_EQUAL(found, 1);
    char *back = NULL;
    CU_ASSERT_EQUAL(kvcal_tokenizer_decode(tok, ids, n, &back), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(back, "Hello world"); /* special tokens decode to nothing */
    free(back);
    free(ids);
    check_roundtrip(tok, 2000);
    kvcal_tokenizer_destroy(tok);
}

/* The byte-level fixture with its pre-tokenizer swapped, as
 * tests/make_tokenizer_fixtures.py's bytelevel_variant() builds it: "gpt2"
 * (ByteLevel's own regex), "qwen2" (NFC + the Qwen2 Split regex) or
 * "digits" (Digits, then ByteLevel's regex); all with ignore_merges false and
 * a ByteLevel post-processor. Returns its path. */
static const char *bytelevel_variant(const char *name)
{
    static char path[512];
    size_t len;
    char *text = kvcal_test_read_file(FIX "bytelevel/tokenizer.json", &len);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!root)
        return NULL;
    const char *gpt2_pre = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                           "\"trim_offsets\": true, \"use_regex\": true}";
    const char *qwen2_pre =
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
        "{\"Regex\": "
        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
        "\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
        "\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, "
        "\"use_regex\": false}]}";
    int gpt2 = strcmp(name, "qwen2") != 0; /* gpt2 and digits */
    cJSON *pre = cJSON_Parse(gpt2 ? gpt2_pre : qwen2_pre);
    if (!strcmp(name, "digits")) {
        cJSON *seq =
            cJSON_Parse("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
                        "\"Digits\", \"individual_digits\": true}]}");
        cJSON_AddItemToArray(cJSON_GetObjectItem(seq, "pretokenizers"), pre);
        pre = seq;
    }
    cJSON_ReplaceItemInObject(root, "pre_tokenizer", pre);
    cJSON_ReplaceItemInObject(root, "normalizer",
                              gpt2 ? cJSON_CreateNull()
                                   : cJSON_Parse("{\"type\": \"NFC\"}"));
    cJSON_ReplaceItemInObject(
        root, "post_processor",
        cJSON_Parse("{\"type\": \"ByteLevel\", \"add_prefix_space\": "
                    "true, \"trim_offsets\": false, \"use_regex\": true}"));
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "model"), "ignore_merges",
                              cJSON_CreateFalse());
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char file[64];
    snprintf(file, sizeof file, "%s.json", name);
    snprintf(path, sizeof path, "%s", kvcal_test_path(file));
    int rc = out ? kvcal_test_write_file(path, out, strlen(out)) : -1;
    free(out);
    return rc ? NULL : path;
}

static void hf_bytelevel_gpt2_regex_matches_hf_tokenizers(void)
{
    const char *p = bytelevel_variant("gpt2");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    kvcal_tokenizer_t *tok = load(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    size_t bad, n = check_ids(tok, FIX "bytelevel_gpt2_ids.jsonl", &bad);
    CU_ASSERT(n >= 1000);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(kvcal_tokenizer_bos(tok), -1); /* ByteLevel post-processor: none */
    kvcal_tokenizer_destroy(tok);
}

static void hf_digits_pretokenizer_matches_hf_tokenizers(void)
{
    const char *p = bytelevel_variant("digits");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    kvcal_tokenizer_t *tok = load(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    size_t bad, n = check_ids(tok, FIX "bytelevel_digits_ids.jsonl", &bad);
    CU_ASSERT(n >= 250);
    CU_ASSERT_EQUAL(bad, 0);
    kvcal_tokenizer_destroy(tok);
}

static void hf_bytelevel_nfc_and_qwen2_regex_match_hf_tokenizers(void)
{
    const char *p = bytelevel_variant("qwen2");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    kvcal_tokenizer_t *tok = load(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    size_t bad, n = check_ids(tok, FIX "bytelevel_qwen2_ids.jsonl", &bad);
    CU_ASSERT(n >= 1000);
    CU_ASSERT_EQUAL(bad, 0);
    /* NFC composes: "e" + U+0301 encodes as U+00E9 does */
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CU_ASSERT_EQUAL(kvcal_tokenizer_encode(tok, "caf\x65\xcc\x81", 6, 0, &a, &na),
                    KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_tokenizer_encode(tok, "caf\xc3\xa9", 5, 0, &b, &nb), KVCAL_OK);
    CU_ASSERT_EQUAL(na, nb);
    CU_ASSERT(na == nb && !memcmp(a, b, na * sizeof *a));
    free(a);
    free(b);
    kvcal_tokenizer_destroy(tok);
}

static void hf_sentencepiece_style_matches_hf_tokenizers(void)
{
    kvcal_tokenizer_t *tok = load(FIX "spmbpe/tokenizer.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_STRING_EQUAL(kvcal_tokenizer_kind(tok), "hf-bpe-sentencepiece");
    size_t bad, n = check_ids(tok, FIX "spmbpe_ids.jsonl", &bad);
    CU_ASSERT(n >= 1000);
    CU_ASSERT_EQUAL(bad, 0);
    /* tokenizer_config.json: add_bos_token true, eos_token </s> */
    CU_ASSERT_EQUAL(kvcal_tokenizer_bos(tok), 1);
    CU_ASSERT_EQUAL(kvcal_tokenizer_eos(tok), 2);
    check_roundtrip(tok, 2000);
    kvcal_tokenizer_destroy(tok);
}

static void hf_metaspace_pretokenizer_matches_hf_tokenizers(void)
{
    kvcal_tokenizer_t *tok = load(FIX "spmbpe_meta/tokenizer.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_STRING_EQUAL(kvcal_tokenizer_kind(tok), "hf-bpe-sentencepiece");
    size_t bad, n = check_ids(tok, FIX "spmbpe_meta_ids.jsonl", &bad);
    CU_ASSERT(n >= 1000);
    CU_ASSERT_EQUAL(bad, 0);
    /* no tokenizer_config.json: BOS from the template, no EOS */
    CU_ASSERT_EQUAL(kvcal_tokenizer_bos(tok), 1);
    CU_ASSERT_EQUAL(kvcal_tokenizer_eos(tok), -1);
    kvcal_tokenizer_destroy(tok);
}

/* A tiny SentencePiece-style tokenizer.json written into dir, with an
 * optional tokenizer_config.json. */
static const char *write_tiny(const char *dir, const char *added, const char *config)
{
    static char path[600];
    char d[512], cfg[600];
    snprintf(d, sizeof d, "%s", kvcal_test_path(dir));
    mkdir(d, 0755);
    char json[2048];
    snprintf(
        json, sizeof json,
        "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}, "
        "{\"id\": 1, \"content\": \"<s>\", \"special\": true}, "
        "{\"id\": 2, \"content\": \"</s>\", \"special\": true}%s],"
        " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", "
        "\"replacement\": \"\u2581\", \"prepend_scheme\": \"first\", \"split\": false},"
        " \"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\u2581\", "
        "\"prepend_scheme\": \"first\", \"split\": false},"
        " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
        "[{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": "
        "{\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {}},"
        " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": "
        "false, \"fuse_unk\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, "
        "\"\u2581\": 3, \"h\": 4, \"i\": 5, \"hi\": 6, \"\u2581hi\": 7, \"<x>\": 8}, "
        "\"merges\": [\"h i\", \"\u2581 hi\"]}}",
        added);
    snprintf(path, sizeof path, "%s/tokenizer.json", d);
    kvcal_test_write_file(path, json, strlen(json));
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", d);
    if (config)
        kvcal_test_write_file(cfg, config, strlen(config));
    return path;
}

static void encode_str(const kvcal_tokenizer_t *tok, const char *s, int special,
                       int32_t *out, size_t *n)
{
    int32_t *ids = NULL;
    *n = 0;
    CU_ASSERT_EQUAL(kvcal_tokenizer_encode(tok, s, strlen(s), special, &ids, n),
                    KVCAL_OK);
    if (ids && *n <= 16)
        memcpy(out, ids, *n * sizeof *ids);
    free(ids);
}

static void hf_tokenizer_config_overrides_the_template(void)
{
    kvcal_tokenizer_t *tok = load(write_tiny("cfg_none", "", NULL));
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    int32_t ids[16];
    size_t n;
    encode_str(tok, "hi hi", 1, ids, &n); /* template: <s> first */
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT(n == 3 && ids[0] == 1 && ids[1] == 7 && ids[2] == 7);
    CU_ASSERT_EQUAL(kvcal_tokenizer_eos(tok), -1);
    kvcal_tokenizer_destroy(tok);
    tok = load(write_tiny("cfg_eos", "",
                          "{\"add_bos_token\": false, \"add_eos_token\": true, "
                          "\"eos_token\": {\"content\": \"</s>\"}}"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    encode_str(tok, "hi", 1, ids, &n);
    CU_ASSERT(n == 2 && ids[0] == 7 && ids[1] == 2);
    /* unknown characters fuse into one <unk> (no byte fallback) */
    encode_str(tok, "hi\xc3\xa9\xc3\xa9", 0, ids, &n);
    CU_ASSERT(n == 2 && ids[0] == 7 && ids[1] == 0);
    kvcal_tokenizer_destroy(tok);
}

static void hf_added_tokens_split_first_and_strip_whitespace(void)
{
    kvcal_tokenizer_t *tok = load(write_tiny(
        "added",
        ", {\"id\": 8, \"content\": \"<x>\", \"special\": false, \"lstrip\": true, "
        "\"rstrip\": true}",
        NULL));
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    int32_t ids[16];
    size_t n;
    /* "hi" <x> "hi": the spaces around <x> belong to it; Metaspace "first"
       puts U+2581 only before the first segment */
    encode_str(tok, "hi <x> hi", 0, ids, &n);
    CU_ASSERT(n == 3 && ids[0] == 7 && ids[1] == 8 && ids[2] == 6);
    char *back = NULL;
    CU_ASSERT_EQUAL(kvcal_tokenizer_decode(tok, ids, n, &back), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(back,
                           "hi<x>hi"); /* non-special added tokens keep their text */
    free(back);
    kvcal_tokenizer_destroy(tok);
}

static void hf_rejects_what_it_does_not_implement(void)
{
    kvcal_tokenizer_t *tok = NULL;
    const char *wp = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}";
    CU_ASSERT_EQUAL(kvcal_tokenizer_load_memory(wp, strlen(wp), "wp.json", &tok),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("WordPiece"));
    const char *pre = "{\"pre_tokenizer\": {\"type\": \"Punctuation\"}, \"model\": "
                      "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}";
    CU_ASSERT_EQUAL(kvcal_tokenizer_load_memory(pre, strlen(pre), "p.json", &tok),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("Punctuation"));
    const char *merge = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                        "\"merges\": [\"a b\"]}}";
    CU_ASSERT_EQUAL(kvcal_tokenizer_load_memory(merge, strlen(merge), "m.json", &tok),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("merges[0]"));
    CU_ASSERT_PTR_NULL(tok);
}

// --- errors ---------------------------------------------------------------------------

/* An empty "a b" merge string (read past its end before) and a vocabulary
 * with no token at all (which loaded, then failed on every text without
 * naming the file) are format errors naming the file and the field. */
static void hf_rejects_an_empty_merge_and_an_empty_vocabulary(void)
{
    kvcal_tokenizer_t *tok = (kvcal_tokenizer_t *)1;
    const char *merge = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, "
                        "\"ab\": 2}, \"merges\": [\"a b\", \"\"]}}";
    CU_ASSERT_EQUAL(kvcal_tokenizer_load_memory(merge, strlen(merge), "m.json", &tok),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT_PTR_NULL(tok);
    CU_ASSERT(kvcal_test_error_has("m.json: model.merges[1] is not"));
    const char *empty = "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}";
    CU_ASSERT_EQUAL(kvcal_tokenizer_load_memory(empty, strlen(empty), "e.json", &tok),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT_PTR_NULL(tok);
    CU_ASSERT(kvcal_test_error_has("e.json: model.vocab and added_tokens are empty"));
    kvcal_tokenizer_destroy(tok);
}

static void tokenizer_load_rejects_unknown_and_truncated_files(void)
{
    kvcal_tokenizer_t *tok = (kvcal_tokenizer_t *)1;
    const char *p = kvcal_test_path("garbage.bin");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(p, "\xff\xfe garbage", 10), 0);
    CU_ASSERT_EQUAL(kvcal_tokenizer_load(p, &tok), KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(tok);
    CU_ASSERT(kvcal_test_error_has("unknown tokenizer type"));
    /* a llama2.c header followed by a token that runs past the end */
    const unsigned char trunc[] = {16, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 'a'};
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(p, trunc, sizeof trunc), 0);
    CU_ASSERT_EQUAL(kvcal_tokenizer_load(p, &tok), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("token 0"));
    CU_ASSERT_EQUAL(kvcal_tokenizer_load(kvcal_test_path("missing.model"), &tok),
                    KVCAL_ERR_IO);
    CU_ASSERT_EQUAL(kvcal_tokenizer_find(kvcal_test_tmpdir(), NULL, &tok), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("--tokenizer"));
    kvcal_tokenizer_destroy(NULL);
}

static void tokenizer_find_refuses_two_llama2c_tokenizers_side_by_side(void)
{
    size_t n = 0;
    char *bin = kvcal_test_read_file("models/stories260K/tok512.bin", &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bin);
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("two-tokenizers"));
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/tok512.bin", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, bin, n), 0);
    kvcal_tokenizer_t *tok = NULL;
    CU_ASSERT_EQUAL(kvcal_tokenizer_find(dir, NULL, &tok), KVCAL_OK);
    kvcal_tokenizer_destroy(tok);
    snprintf(path, sizeof path, "%s/tok4096.bin", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, bin, n), 0);
    CU_ASSERT_EQUAL(kvcal_tokenizer_find(dir, NULL, &tok), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(tok);
    CU_ASSERT(kvcal_test_error_has("--tokenizer"));
    free(bin);
}

/* The encode errors of a tokenizer that cannot encode a text (a character
 * outside a vocabulary with neither byte_fallback nor unk; a byte without a
 * byte-level token and no unk) name the tokenizer file and the character:
 * they named neither, so a dataset's error did not say which tokenizer. */
static void hf_encode_errors_name_the_tokenizer_file_and_the_character(void)
{
    char dir[600], spm[700], bl[700];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("encode-errors"));
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    snprintf(spm, sizeof spm, "%s/spm-tokenizer.json", dir);
    snprintf(bl, sizeof bl, "%s/bytelevel-tokenizer.json", dir);
    const char *spm_json =
        "{\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\u2581\", "
        "\"prepend_scheme\": \"first\", \"split\": false}, \"model\": {\"type\": "
        "\"BPE\", \"byte_fallback\": false, \"vocab\": {\"\u2581\": 0, \"h\": 1, "
        "\"i\": 2, \"hi\": 3, \"\u2581hi\": 4}, \"merges\": [\"h i\", \"\u2581 hi\"]}}";
    const char *bl_json =
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
        "\"use_regex\": false}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"h\": 0, "
        "\"i\": 1, \"hi\": 2}, \"merges\": [\"h i\"]}}";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(spm, spm_json, strlen(spm_json)), 0);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(bl, bl_json, strlen(bl_json)), 0);
    int32_t *ids = NULL;
    size_t n = 0;
    kvcal_tokenizer_t *tok = load(spm);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_EQUAL(kvcal_tokenizer_encode(tok, "hi", 2, 0, &ids, &n), KVCAL_OK);
    free(ids);
    CU_ASSERT_EQUAL(kvcal_tokenizer_encode(tok, "hi \xc3\xa9", 5, 0, &ids, &n),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT_PTR_NULL(ids);
    CU_ASSERT(kvcal_test_error_has(spm));
    CU_ASSERT(kvcal_test_error_has("(U+00E9) is not in the vocabulary"));
    kvcal_tokenizer_destroy(tok);
    tok = load(bl);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_EQUAL(kvcal_tokenizer_encode(tok, "hi hi", 5, 0, &ids, &n),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT_PTR_NULL(ids);
    CU_ASSERT(kvcal_test_error_has(bl));
    CU_ASSERT(kvcal_test_error_has("byte 0x20 has no byte-level token"));
    kvcal_tokenizer_destroy(tok);
    /* loaded from memory: the name given */
    CU_ASSERT_EQUAL_FATAL(
        kvcal_tokenizer_load_memory(bl_json, strlen(bl_json), "mem/tokenizer.json", &tok),
        KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_tokenizer_encode(tok, "h\x01", 2, 0, &ids, &n),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("mem/tokenizer.json: byte 0x01"));
    kvcal_tokenizer_destroy(tok);
}

static CU_TestInfo shared_tests[] = {
    KVCAL_TEST(llama2c_matches_run_c_encode_on_stories260k),
    KVCAL_TEST(llama2c_adds_bos_not_eos_and_decodes_back),
    KVCAL_TEST(tokenizer_find_picks_tok_bin_next_to_model),
    KVCAL_TEST(sentencepiece_matches_sentencepiece_on_llama2_model),
    KVCAL_TEST(sentencepiece_follows_tokenizer_config_and_decodes_unk),
    KVCAL_TEST(llama2c_and_sentencepiece_exports_agree_on_prose),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(tokenizer_shared, KVCAL_NEEDS_SHARED, shared_tests)

static CU_TestInfo tests[] = {
    KVCAL_TEST(hf_bytelevel_matches_hf_tokenizers_on_every_string),
    KVCAL_TEST(hf_bytelevel_adds_template_bos_and_decodes_back),
    KVCAL_TEST(hf_bytelevel_gpt2_regex_matches_hf_tokenizers),
    KVCAL_TEST(hf_bytelevel_nfc_and_qwen2_regex_match_hf_tokenizers),
    KVCAL_TEST(hf_digits_pretokenizer_matches_hf_tokenizers),
    KVCAL_TEST(hf_tokenizer_config_overrides_the_template),
    KVCAL_TEST(hf_added_tokens_split_first_and_strip_whitespace),
    KVCAL_TEST(hf_rejects_what_it_does_not_implement),
    KVCAL_TEST(hf_rejects_an_empty_merge_and_an_empty_vocabulary),
    KVCAL_TEST(hf_sentencepiece_style_matches_hf_tokenizers),
    KVCAL_TEST(hf_metaspace_pretokenizer_matches_hf_tokenizers),
    KVCAL_TEST(tokenizer_load_rejects_unknown_and_truncated_files),
    KVCAL_TEST(tokenizer_find_refuses_two_llama2c_tokenizers_side_by_side),
    KVCAL_TEST(hf_encode_errors_name_the_tokenizer_file_and_the_character),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(tokenizer, KVCAL_NEEDS_NOTHING, tests)
