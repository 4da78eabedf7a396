/* tests/test_dataset.c: dataset formats, sampling, and their errors. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"
#include "io/dataset/dataset.h"
#include "io/dataset/dataset_impl.h"
#include "io/file_read.h"
#include "io/dataset/token_set_info.h"
#include "tests/test_util.h"

static const char *write_tmp(const char *name, const char *text)
{
    const char *p = kvcal_test_path(name);
    CU_ASSERT_EQUAL(kvcal_test_write_file(p, text, strlen(text)), 0);
    return p;
}

static int doc_is(const kvcal_doclist *l, size_t i, const char *want)
{
    return i < l->n && l->d[i].len == strlen(want) &&
           !memcmp(l->d[i].text, want, l->d[i].len);
}

static void dataset_text_splits_documents_on_blank_lines(void)
{
    const char *p =
        write_tmp("docs.txt", "\n\nfirst line\nsecond line\n\n \t\nthird\r\n\n\nlast");
    kvcal_doclist l;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_read(p, NULL, &l), KVCAL_OK);
    CU_ASSERT_EQUAL(l.n, 3);
    CU_ASSERT(doc_is(&l, 0, "first line\nsecond line"));
    CU_ASSERT(doc_is(&l, 1, "third\r"));
    CU_ASSERT(doc_is(&l, 2, "last"));
    kvcal_doclist_free(&l);
}

static void dataset_directory_is_one_document_per_file_in_name_order(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("docdir"));
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    char p[600];
    snprintf(p, sizeof p, "%s/b.txt", dir);
    kvcal_test_write_file(p, "bee\n\nstill bee\n", 15);
    snprintf(p, sizeof p, "%s/a.txt", dir);
    kvcal_test_write_file(p, "ay", 2);
    snprintf(p, sizeof p, "%s/.hidden", dir);
    kvcal_test_write_file(p, "no", 2);
    kvcal_doclist l;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_read(dir, NULL, &l), KVCAL_OK);
    CU_ASSERT_EQUAL(l.n, 2);
    CU_ASSERT(doc_is(&l, 0, "ay"));
    CU_ASSERT(doc_is(&l, 1, "bee\n\nstill bee"));
    kvcal_doclist_free(&l);
}

static void dataset_jsonl_reads_text_field_and_chat_messages(void)
{
    const char *p =
        write_tmp("t.jsonl", "{\"body\": \"custom field\"}\n"
                             "\n"
                             "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi?\"},"
                             " {\"role\": \"assistant\", \"content\": [{\"type\": "
                             "\"text\", \"text\": \"Hello.\"}]}]}\n");
    kvcal_doclist l;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_read(p, "body", &l), KVCAL_OK);
    CU_ASSERT_EQUAL(l.n, 2);
    CU_ASSERT(doc_is(&l, 0, "custom field"));
    CU_ASSERT(doc_is(&l, 1, "user: Hi?\nassistant: Hello."));
    kvcal_doclist_free(&l);
    /* without --text-field the first line has no usable field */
    CU_ASSERT_EQUAL(kvcal_dataset_read(p, NULL, &l), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("line 1"));
    CU_ASSERT(kvcal_test_error_has("--text-field"));
}

/* A NUL character in a JSONL line of text (the \u0000 escape, or a 0 byte)
 * is refused naming the line: the text after it was cut away unseen (a
 * document of 5 tokens where the line held 9). The same escape in a line
 * of token ids, which reads no string, in a field of a text line that is
 * not read, and an escaped backslash before "u0000" are read; in the text
 * field named by --text-field, or in a key (a key cut short could read as
 * the text's), it is refused. */
static void dataset_jsonl_refuses_a_nul_that_would_cut_the_text(void)
{
    kvcal_doclist l;
    CU_ASSERT_EQUAL(
        kvcal_dataset_read(write_tmp("nul.jsonl", "{\"text\": \"one\"}\n"
                                                  "{\"text\": \"two\\u0000 three\"}\n"),
                           NULL, &l),
        KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("nul.jsonl: line 2: a NUL character"));
    CU_ASSERT(kvcal_test_error_has("at byte 13 of the line"));
    static const char raw[] = "{\"messages\": [{\"role\": \"user\", \"content\": "
                              "\"a\0b\"}]}\n";
    const char *p = kvcal_test_path("rawnul.jsonl");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(p, raw, sizeof raw - 1), 0);
    CU_ASSERT_EQUAL(kvcal_dataset_read(p, NULL, &l), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("rawnul.jsonl: line 1: a NUL character"));
    CU_ASSERT_EQUAL_FATAL(
        kvcal_dataset_read(write_tmp("nul_ids.jsonl", "{\"input_ids\": [1, 2], "
                                                      "\"id\": \"\\u0000\"}\n"),
                           NULL, &l),
        KVCAL_OK);
    CU_ASSERT_EQUAL(l.n, 1);
    kvcal_doclist_free(&l);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_dataset_read(write_tmp("backslash.jsonl", "{\"text\": \"a\\\\u0000\"}\n"),
                           NULL, &l),
        KVCAL_OK);
    CU_ASSERT(doc_is(&l, 0, "a\\u0000"));
    kvcal_doclist_free(&l);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_dataset_read(
            write_tmp("nul_other.jsonl",
                      "{\"id\": \"x\\u0000y\", \"meta\": {\"a\": "
                      "[\"\\u0000\"]}, \"text\": \"kept, \\\"quoted\\\"\"}\n"),
            NULL, &l),
        KVCAL_OK);
    CU_ASSERT(doc_is(&l, 0, "kept, \"quoted\""));
    kvcal_doclist_free(&l);
    CU_ASSERT_EQUAL(kvcal_dataset_read(write_tmp("nul_field.jsonl",
                                                 "{\"text\": \"a\\u0000\", \"body\": "
                                                 "\"b\\u0000c\"}\n"),
                                       "body", &l),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("at byte 30 of the line"));
    CU_ASSERT_EQUAL(
        kvcal_dataset_read(
            write_tmp("nul_key.jsonl", "{\"te\\u0000xt\": \"a\", \"text\": \"b\"}\n"),
            NULL, &l),
        KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("at byte 4 of the line"));
}

static void dataset_jsonl_ids_are_taken_verbatim_and_packed(void)
{
    const char *p =
        write_tmp("ids.jsonl", "{\"input_ids\": [5, 6, 7]}\n{\"input_ids\": [8, 9]}\n"
                               "{\"input_ids\": [10, 11, 12, 13]}\n");
    kvcal_dataset_options opt = {.num_samples = 3, .seq_len = 3, .seed = 7, .pack = 1};
    kvcal_samples *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_OK);
    CU_ASSERT_EQUAL(s->num_tokens, 9);
    /* every id appears once, no BOS was added, whatever the order */
    int seen[16] = {0};
    for (int i = 0; i < 9; i++)
        if (s->ids[i] >= 5 && s->ids[i] <= 13)
            seen[s->ids[i]]++;
    int count = 0;
    for (int i = 5; i <= 13; i++)
        count += seen[i];
    CU_ASSERT_EQUAL(count, 9);
    kvcal_samples_destroy(s);
    /* one document per sample: padded with -1 */
    opt = (kvcal_dataset_options){.num_samples = 3, .seq_len = 5, .seed = 1, .pack = 0};
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_OK);
    CU_ASSERT_EQUAL(s->num_tokens, 9);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT(s->lengths[i] >= 2 && s->lengths[i] <= 4);
        for (int k = s->lengths[i]; k < 5; k++)
            CU_ASSERT_EQUAL(s->ids[i * 5 + k], -1);
    }
    kvcal_samples_destroy(s);
}

/* Empty documents ({"input_ids": []}) pack as nothing, in whatever order
 * the seed shuffles them, and a file of them alone (each reaching the
 * packer before it holds any tokens) is the clear error, not a sample. */
static void dataset_packs_empty_documents_as_nothing(void)
{
    const char *p = write_tmp("empty_docs.jsonl", "{\"input_ids\": []}\n"
                                                  "{\"input_ids\": []}\n"
                                                  "{\"input_ids\": [3, 4, 5, 6]}\n");
    kvcal_samples *s = NULL;
    for (uint64_t seed = 0; seed < 6; seed++) {
        kvcal_dataset_options opt = {
            .num_samples = 0, .seq_len = 2, .seed = seed, .pack = 1};
        CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_OK);
        CU_ASSERT_EQUAL(s->num_samples, 2);
        CU_ASSERT_EQUAL(s->num_tokens, 4);
        CU_ASSERT(s->ids[0] == 3 && s->ids[1] == 4 && s->ids[2] == 5 && s->ids[3] == 6);
        kvcal_samples_destroy(s);
    }
    p = write_tmp("only_empty.jsonl", "{\"input_ids\": []}\n{\"input_ids\": []}\n");
    kvcal_dataset_options opt = {.num_samples = 0, .seq_len = 2, .pack = 1};
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("has 0 tokens in 2 documents"));
}

static void dataset_same_seed_gives_same_samples(void)
{
    char text[4096] = "";
    for (int i = 0; i < 40; i++) {
        char line[96];
        snprintf(line, sizeof line, "{\"input_ids\": [%d, %d, %d, %d]}\n", i, i + 100,
                 i + 200, i + 300);
        strcat(text, line);
    }
    const char *p = write_tmp("many.jsonl", text);
    kvcal_dataset_options opt = {.num_samples = 10, .seq_len = 4, .seed = 42, .pack = 0};
    kvcal_samples *a = NULL, *b = NULL, *c = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, NULL, &opt, &a), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, NULL, &opt, &b), KVCAL_OK);
    opt.seed = 43;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, NULL, &opt, &c), KVCAL_OK);
    CU_ASSERT_EQUAL(memcmp(a->ids, b->ids, 40 * sizeof *a->ids), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a->ids, c->ids, 40 * sizeof *a->ids), 0);
    kvcal_samples_destroy(a);
    kvcal_samples_destroy(b);
    kvcal_samples_destroy(c);
    /* the generator is xoshiro256** seeded by splitmix64: fixed outputs */
    kvcal_rng r;
    kvcal_rng_seed(&r, 0);
    CU_ASSERT_EQUAL(kvcal_rng_next(&r), 0x99EC5F36CB75F2B4ull);
}

static void dataset_rejects_invalid_utf8_naming_the_line(void)
{
    const char *p = write_tmp("latin1.txt", "fine\nfine too\ncaf\xe9\n");
    kvcal_doclist l;
    CU_ASSERT_EQUAL(kvcal_dataset_read(p, NULL, &l), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("line 3"));
    CU_ASSERT(kvcal_test_error_has("UTF-8"));
}

static void dataset_too_few_tokens_says_how_many_there_are(void)
{
    const char *p =
        write_tmp("few.jsonl", "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [4, 5]}\n");
    kvcal_dataset_options opt = {.num_samples = 2, .seq_len = 4, .seed = 0, .pack = 1};
    kvcal_samples *s = (kvcal_samples *)1;
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_ERR_FORMAT);
    CU_ASSERT_PTR_NULL(s);
    /* what there is, what was asked for, and what to pass */
    CU_ASSERT(kvcal_test_error_has("has 5 tokens in 2 documents, but 2 samples x 4 "
                                   "tokens need about 8; pass more text with --dataset "
                                   "FILE (public sets: datasets/RECIPES.md) or lower "
                                   "--num-samples or --seq-len"));
    opt.num_samples = 0;
    opt.seq_len = 6;
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("has 5 tokens in 2 documents, not one sample of 6 "
                                   "tokens; pass more text with --dataset FILE"));
    CU_ASSERT(kvcal_test_error_has("datasets/RECIPES.md"));
    opt.pack = 0;
    opt.num_samples = 3;
    opt.seq_len = 4;
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("has 2 non-empty documents (5 tokens), but "
                                   "--num-samples asks for 3"));
    CU_ASSERT(kvcal_test_error_has("--dataset FILE (public sets: datasets/RECIPES.md)"));
}

/* The "Vm<key>:" line of /proc/self/status, in kB; -1 when unreadable. */
static long long vm_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Vm", 2) && !strncmp(line + 2, key, n) && line[2 + n] == ':')
            kb = atoll(line + 3 + n);
    if (f)
        fclose(f);
    return kb;
}

/* Memory follows the tokens the dataset holds: a huge --seq-len or
 * --num-samples over a few tokens allocates no more than the data (peak
 * resident memory grows by less than 64 MiB, where the asked sizes would
 * take 1 to 8 GiB), and what cannot be held is refused before reading. */
static void dataset_load_allocates_by_the_tokens_held_not_by_the_sizes_asked(void)
{
    const char *p = write_tmp("small.jsonl", "{\"input_ids\": [1, 2, 3]}\n"
                                             "{\"input_ids\": [4, 5]}\n"
                                             "{\"input_ids\": [6]}\n");
    FILE *f = fopen("/proc/self/clear_refs", "w"); /* peak RSS = RSS from here */
    CU_ASSERT_FATAL(f && fputs("5", f) >= 0 && fclose(f) == 0);
    long long rss0 = vm_kb("RSS");
    CU_ASSERT_FATAL(rss0 > 0);
    kvcal_samples *s = NULL;
    kvcal_dataset_options opt = {.num_samples = 0, .seq_len = 1 << 24, .pack = 1};
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("not one sample of 16777216 tokens"));
    CU_ASSERT_FATAL(vm_kb("HWM") - rss0 < 64 << 10);
    opt.num_samples = 128; /* 2^31 tokens: the most accepted */
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("128 samples x 16777216 tokens need about 2147483648"));
    CU_ASSERT_FATAL(vm_kb("HWM") - rss0 < 64 << 10);
    opt.num_samples = 1 << 30;
    opt.seq_len = 2;
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("has 6 tokens in 3 documents"));
    opt.num_samples = 0; /* one padded row per document: 3 x 4 MiB */
    opt.seq_len = 1 << 20;
    opt.pack = 0;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_OK);
    CU_ASSERT_EQUAL(s->num_samples, 3);
    CU_ASSERT_EQUAL(s->num_tokens, 6);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(s->ids[(size_t)i * (1 << 20) + (1 << 20) - 1], -1);
    kvcal_samples_destroy(s);
    CU_ASSERT(vm_kb("HWM") - rss0 < 64 << 10);
    opt.num_samples = 129;
    opt.seq_len = 1 << 24;
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, NULL, &opt, &s), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("--num-samples 129 x --seq-len 16777216 would take "
                                   "2164260864 tokens (8.1 GiB)"));
}

static void dataset_empty_unreadable_or_textless_is_an_error(void)
{
    kvcal_doclist l;
    CU_ASSERT_EQUAL(kvcal_dataset_read(write_tmp("empty.txt", "\n \n\n"), NULL, &l),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("empty"));
    CU_ASSERT_EQUAL(kvcal_dataset_read(kvcal_test_path("nope.txt"), NULL, &l),
                    KVCAL_ERR_IO);
    kvcal_dataset_options opt = {.num_samples = 1, .seq_len = 4};
    kvcal_samples *s = NULL;
    CU_ASSERT_EQUAL(kvcal_dataset_load(write_tmp("x.txt", "words"), NULL, &opt, &s),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("needs a tokenizer"));
    opt.seq_len = 0;
    CU_ASSERT_EQUAL(kvcal_dataset_load(write_tmp("x.txt", "words"), NULL, &opt, &s),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_dataset_read(
                        write_tmp("bad.jsonl", "{\"input_ids\": [1, -2]}\n"), NULL, &l),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT_EQUAL(kvcal_dataset_read(write_tmp("bad2.jsonl", "not json\n"), NULL, &l),
                    KVCAL_ERR_PARSE);
}

static void dataset_hdf5_token_set_reads_back_as_written(void)
{
    kvcal_samples s = {.num_samples = 3, .seq_len = 4};
    int32_t ids[12] = {1, 2, 3, 4, 5, 6, -1, -1, 7, 8, 9, 10};
    int32_t lengths[3] = {4, 2, 4};
    s.ids = ids;
    s.lengths = lengths;
    s.num_tokens = 10;
    const char *p = kvcal_test_path("set.h5");
    kvcal_token_provenance prov = {.source = "x.txt",
                                   .tokenizer = "tok.bin",
                                   .tokenizer_kind = "llama2c",
                                   .seed = 3,
                                   .pack = 1};
    CU_ASSERT_EQUAL_FATAL(kvcal_samples_write_hdf5(p, &s, &prov), KVCAL_OK);
    kvcal_doclist l;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_read(p, NULL, &l), KVCAL_OK);
    CU_ASSERT_EQUAL(l.n, 3);
    CU_ASSERT_EQUAL(l.d[1].n_ids, 2);
    CU_ASSERT_EQUAL(l.d[1].ids[1], 6);
    CU_ASSERT_EQUAL(l.d[2].ids[3], 10);
    kvcal_doclist_free(&l);
    /* same seq_len, one row per sample: the rows come back (in seed order) */
    kvcal_dataset_options opt = {.num_samples = 3, .seq_len = 4, .seed = 9, .pack = 0};
    kvcal_samples *back = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, NULL, &opt, &back), KVCAL_OK);
    CU_ASSERT_EQUAL(back->num_tokens, 10);
    kvcal_samples_destroy(back);
    /* a file without input_ids */
    CU_ASSERT_EQUAL(
        kvcal_dataset_read(write_tmp("fake.h5", "\x89HDF\r\n\x1a\n junk"), NULL, &l),
        KVCAL_ERR_PARSE);
}

/* input_ids declared [2^32, 2^32] (chunked, nothing stored: a 1 KB file):
 * N * L wraps to 0 in 64 bits, which must not pass the size check. */
static void dataset_hdf5_rejects_a_shape_whose_size_overflows(void)
{
    const char *p = kvcal_test_path("huge_shape.h5");
    hsize_t dims[2] = {1ull << 32, 1ull << 32}, chunk[2] = {1, 16};
    hid_t file = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t plist = H5Pcreate(H5P_DATASET_CREATE);
    CU_ASSERT_FATAL(file >= 0 && space >= 0 && plist >= 0);
    CU_ASSERT_FATAL(H5Pset_chunk(plist, 2, chunk) >= 0);
    hid_t dset = H5Dcreate2(file, "input_ids", H5T_NATIVE_INT32, space, H5P_DEFAULT,
                            plist, H5P_DEFAULT);
    CU_ASSERT_FATAL(dset >= 0);
    H5Dclose(dset);
    H5Pclose(plist);
    H5Sclose(space);
    H5Fclose(file);
    kvcal_doclist l;
    CU_ASSERT_EQUAL(kvcal_dataset_read(p, NULL, &l), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("input_ids has shape [4294967296, 4294967296]"));
}

/* Token ids at or past the tokenizer's vocabulary are an error naming the
 * file, the JSONL line (or HDF5 row), the document, the id and the
 * vocabulary's size, from every reader; never a read of freed memory. */
static void dataset_ids_outside_the_vocabulary_name_file_line_id_and_size(void)
{
    kvcal_tokenizer_t *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_tokenizer_load("models/stories260K/tok512.bin", &tok),
                          KVCAL_OK);
    const char *p = write_tmp("vocab.jsonl", "{\"input_ids\": [1, 2, 3]}\n\n"
                                             "{\"input_ids\": [1, 600, 4]}\n");
    kvcal_dataset_options opt = {.num_samples = 1, .seq_len = 6, .pack = 1};
    kvcal_samples *s = (kvcal_samples *)1;
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, tok, &opt, &s), KVCAL_ERR_MISMATCH);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT(kvcal_test_error_has(p));
    CU_ASSERT(kvcal_test_error_has("line 3 (document 2): input_ids[1] = 600 is outside "
                                   "the tokenizer's vocabulary of 512 tokens"));
    kvcal_documents *d = (kvcal_documents *)1;
    CU_ASSERT_EQUAL(kvcal_dataset_tokenize_documents(p, tok, NULL, NULL, &d),
                    KVCAL_ERR_MISMATCH);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT(kvcal_test_error_has("line 3 (document 2): input_ids[1] = 600"));
    /* 511 is the last id there is; 512 the first past it */
    p = write_tmp("vocab_edge.jsonl", "{\"input_ids\": [511, 512]}\n");
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, tok, &opt, &s), KVCAL_ERR_MISMATCH);
    CU_ASSERT(kvcal_test_error_has("line 1 (document 1): input_ids[1] = 512"));
    /* an HDF5 token set names the row */
    kvcal_samples set = {.num_samples = 2, .seq_len = 3};
    int32_t ids[6] = {1, 2, 3, 4, 9999, -1}, lengths[2] = {3, 2};
    set.ids = ids;
    set.lengths = lengths;
    set.num_tokens = 5;
    p = kvcal_test_path("vocab.h5");
    CU_ASSERT_EQUAL_FATAL(kvcal_samples_write_hdf5(p, &set, NULL), KVCAL_OK);
    opt = (kvcal_dataset_options){.num_samples = 2, .seq_len = 3, .pack = 1};
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, tok, &opt, &s), KVCAL_ERR_MISMATCH);
    CU_ASSERT(kvcal_test_error_has("input_ids row 1 (document 2): input_ids[1] = 9999"));
    kvcal_tokenizer_destroy(tok);
}

/* A FIFO (or socket, or device) given as a dataset, a dataset directory's
 * member, a tokenizer or a token set is refused before it is opened: one
 * line naming the path and what it is. Opening a FIFO with no writer
 * blocks, so the alarm turns a hang into a failed test. */
static void dataset_refuses_fifos_and_devices_before_opening_them(void)
{
    char fifo[512], fifo_h5[512], dir[512], member[600], want[700];
    snprintf(fifo, sizeof fifo, "%s", kvcal_test_path("pipe.txt"));
    snprintf(fifo_h5, sizeof fifo_h5, "%s", kvcal_test_path("pipe.h5"));
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("pipedir"));
    snprintf(member, sizeof member, "%s/b.txt", dir);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo_h5, 0600), 0);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    CU_ASSERT_EQUAL_FATAL(mkfifo(member, 0600), 0);
    char a[600];
    snprintf(a, sizeof a, "%s/a.txt", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(a, "words", 5), 0);
    alarm(20);
    kvcal_doclist l;
    snprintf(want, sizeof want, "%s: is a named pipe (FIFO), not a regular file", fifo);
    CU_ASSERT_EQUAL(kvcal_dataset_read(fifo, NULL, &l), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has(want));
    snprintf(want, sizeof want, "%s: is a named pipe (FIFO)", fifo_h5);
    CU_ASSERT_EQUAL(kvcal_dataset_read(fifo_h5, NULL, &l), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has(want));
    snprintf(want, sizeof want, "%s: is a named pipe (FIFO)", member);
    CU_ASSERT_EQUAL(kvcal_dataset_read(dir, NULL, &l), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has(want));
    kvcal_tokenizer_t *tok = (kvcal_tokenizer_t *)1;
    CU_ASSERT_EQUAL(kvcal_tokenizer_load(fifo, &tok), KVCAL_ERR_IO);
    CU_ASSERT_PTR_NULL(tok);
    CU_ASSERT(kvcal_test_error_has("save the tokenizer to a file"));
    kvcal_token_set_info info;
    CU_ASSERT_EQUAL(kvcal_token_set_info_read(fifo_h5, &info), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("is a named pipe (FIFO)"));
    char *data = (char *)1;
    size_t len = 1;
    CU_ASSERT_EQUAL(kvcal_file_read("/dev/null", "dataset", 100, &data, &len),
                    KVCAL_ERR_IO);
    CU_ASSERT(data == NULL && len == 0);
    CU_ASSERT(kvcal_test_error_has("/dev/null: is a character device"));
    alarm(0);
}

/* datasets/default_calibration.txt is what datasets/make_default_calibration.py
 * writes (from datasets/calibration_handwritten.txt and its own templates):
 * an edit of either that is not regenerated fails here. Needs python3 (make
 * deps installs it); says so and checks nothing without it. */
static void dataset_default_text_is_what_its_generator_writes(void)
{
    if (system("command -v python3 > /dev/null 2>&1") != 0) {
        fprintf(stderr, "\n  python3 not found: the default text was not checked\n");
        return;
    }
    CU_ASSERT_EQUAL(system("python3 datasets/make_default_calibration.py --check"), 0);
}

/* progress callback: counts calls and keeps the last report */
static void count_progress(void *ctx, long long done, long long total, long long tokens)
{
    long long *c = ctx;
    c[0]++;
    c[1] = done;
    c[2] = total;
    c[3] = tokens;
}

static void dataset_text_packs_windows_that_start_with_bos(void)
{
    long long calls[4] = {0};
    kvcal_dataset_progress prog = {count_progress, calls};
    char tokp[512];
    snprintf(tokp, sizeof tokp, "%s/models/stories260K/tok512.bin",
             kvcal_test_shared_dir());
    kvcal_tokenizer_t *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_tokenizer_load(tokp, &tok), KVCAL_OK);
    const char *p =
        write_tmp("stories.txt",
                  "Once upon a time there was a cat. The cat liked milk and naps.\n\n"
                  "Tom ran to the park. He saw a big red ball and a small dog.\n\n"
                  "The sun was hot. Lily and Ben played in the water all day long.\n");
    kvcal_dataset_options opt = {.num_samples = 4, .seq_len = 12, .seed = 5, .pack = 1};
    kvcal_samples *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, tok, &opt, &s), KVCAL_OK);
    CU_ASSERT_EQUAL(s->num_tokens, 48);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(s->ids[i * 12], 1);
    kvcal_samples_destroy(s);
    /* one document per sample: each is the document's own encoding */
    opt = (kvcal_dataset_options){.num_samples = 3, .seq_len = 64, .seed = 5, .pack = 0};
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, tok, &opt, &s), KVCAL_OK);
    kvcal_documents *d = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_tokenize_documents(p, tok, NULL, &prog, &d),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(d->num_docs, 3);
    long long total = 0;
    for (int i = 0; i < 3; i++) {
        total += (long long)d->lengths[i];
        CU_ASSERT_EQUAL(d->ids[i][0], 1);
    }
    CU_ASSERT_EQUAL(s->num_tokens, total);
    /* progress: once per document, the last report has every token */
    CU_ASSERT(calls[0] == 3 && calls[1] == 3 && calls[2] == 3 && calls[3] == total);
    opt.num_samples = 1;
    opt.seq_len = 1000;
    opt.pack = 1;
    kvcal_samples *none = NULL;
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, tok, &opt, &none), KVCAL_ERR_FORMAT);
    char want[64];
    snprintf(want, sizeof want, "has %lld tokens in 3 documents", total);
    CU_ASSERT(kvcal_test_error_has(want));
    kvcal_documents_destroy(d);
    kvcal_samples_destroy(s);
    /* token ids stay verbatim even with a tokenizer that adds BOS */
    const char *ids =
        write_tmp("verbatim.jsonl", "{\"input_ids\": [7, 8, 9, 10, 11, 12]}\n");
    opt = (kvcal_dataset_options){.num_samples = 2, .seq_len = 3, .seed = 1, .pack = 1};
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(ids, tok, &opt, &s), KVCAL_OK);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(s->ids[i], 7 + i);
    kvcal_samples_destroy(s);
    kvcal_tokenizer_destroy(tok);
}

/* The default text holds the 128 x 2048 tokens of a common calibration
 * (llm-compressor's recipes use 512 x 2048 of a real set) with the Llama 2
 * tokenizer, a 32k vocabulary; the 32 KB text it replaced held 9.4k. */
static void dataset_default_text_fills_128_samples_of_2048_llama2_tokens(void)
{
    char tokp[512];
    snprintf(tokp, sizeof tokp, "%s/models/llama2-tokenizer/tokenizer.model",
             kvcal_test_shared_dir());
    kvcal_tokenizer_t *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_tokenizer_load(tokp, &tok), KVCAL_OK);
    kvcal_dataset_options opt = {.num_samples = 128, .seq_len = 2048, .pack = 1};
    kvcal_samples *s = NULL;
    CU_ASSERT_EQUAL(kvcal_dataset_load("datasets/default_calibration.txt", tok, &opt, &s),
                    KVCAL_OK);
    CU_ASSERT(s && s->num_tokens == 128 * 2048);
    kvcal_samples_destroy(s);
    kvcal_tokenizer_destroy(tok);
}

/* Packing text into windows of one token with a tokenizer that adds BOS
 * leaves no room for text: every window was BOS alone (samples of nothing
 * but BOS, the text never read), and with no --num-samples the packer went
 * on until 2^31 tokens of them. It is refused before any document is
 * tokenized, naming the file and the fix; token ids (no BOS put in front)
 * and one document per sample still fit windows of one token. */
static void dataset_refuses_packed_windows_with_no_room_after_bos(void)
{
    kvcal_tokenizer_t *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_tokenizer_load("models/stories260K/tok512.bin", &tok),
                          KVCAL_OK);
    CU_ASSERT_FATAL(kvcal_tokenizer_adds_bos(tok) && kvcal_tokenizer_bos(tok) == 1);
    const char *p = write_tmp("bos-room.txt", "Once upon a time there was a cat.\n\n"
                                              "Tom ran to the park.\n");
    kvcal_dataset_options opt = {.num_samples = 4, .seq_len = 1, .pack = 1};
    kvcal_samples *s = (kvcal_samples *)1;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, tok, &opt, &s), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT(kvcal_test_error_has("bos-room.txt: --seq-len 1 leaves no room for text"));
    CU_ASSERT(kvcal_test_error_has("--seq-len 2 or more"));
    opt.num_samples = 0; /* as many as the text fills: never, before */
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, tok, &opt, &s), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(s);
    /* two tokens: BOS and one of the text */
    opt = (kvcal_dataset_options){.num_samples = 4, .seq_len = 2, .pack = 1};
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(p, tok, &opt, &s), KVCAL_OK);
    for (int i = 0; i < 4; i++)
        CU_ASSERT(s->ids[2 * i] == 1 && s->ids[2 * i + 1] != 1);
    kvcal_samples_destroy(s);
    /* one document per sample, and token ids: windows of one token */
    opt = (kvcal_dataset_options){.num_samples = 2, .seq_len = 1, .pack = 0};
    CU_ASSERT_EQUAL(kvcal_dataset_load(p, tok, &opt, &s), KVCAL_OK);
    kvcal_samples_destroy(s);
    const char *ids = write_tmp("bos-room.jsonl", "{\"input_ids\": [5, 6, 7, 8]}\n");
    opt = (kvcal_dataset_options){.num_samples = 4, .seq_len = 1, .pack = 1};
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(ids, tok, &opt, &s), KVCAL_OK);
    CU_ASSERT(s->ids[0] == 5 && s->ids[3] == 8);
    kvcal_samples_destroy(s);
    kvcal_tokenizer_destroy(tok);
}

static CU_TestInfo shared_tests[] = {
    KVCAL_TEST(dataset_text_packs_windows_that_start_with_bos),
    KVCAL_TEST(dataset_default_text_fills_128_samples_of_2048_llama2_tokens),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(dataset_shared, KVCAL_NEEDS_SHARED, shared_tests)

static CU_TestInfo tests[] = {
    KVCAL_TEST(dataset_text_splits_documents_on_blank_lines),
    KVCAL_TEST(dataset_directory_is_one_document_per_file_in_name_order),
    KVCAL_TEST(dataset_jsonl_reads_text_field_and_chat_messages),
    KVCAL_TEST(dataset_jsonl_refuses_a_nul_that_would_cut_the_text),
    KVCAL_TEST(dataset_jsonl_ids_are_taken_verbatim_and_packed),
    KVCAL_TEST(dataset_packs_empty_documents_as_nothing),
    KVCAL_TEST(dataset_same_seed_gives_same_samples),
    KVCAL_TEST(dataset_rejects_invalid_utf8_naming_the_line),
    KVCAL_TEST(dataset_too_few_tokens_says_how_many_there_are),
    KVCAL_TEST(dataset_load_allocates_by_the_tokens_held_not_by_the_sizes_asked),
    KVCAL_TEST(dataset_empty_unreadable_or_textless_is_an_error),
    KVCAL_TEST(dataset_hdf5_token_set_reads_back_as_written),
    KVCAL_TEST(dataset_hdf5_rejects_a_shape_whose_size_overflows),
    KVCAL_TEST(dataset_ids_outside_the_vocabulary_name_file_line_id_and_size),
    KVCAL_TEST(dataset_refuses_fifos_and_devices_before_opening_them),
    KVCAL_TEST(dataset_default_text_is_what_its_generator_writes),
    KVCAL_TEST(dataset_refuses_packed_windows_with_no_room_after_bos),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(dataset, KVCAL_NEEDS_NOTHING, tests)
