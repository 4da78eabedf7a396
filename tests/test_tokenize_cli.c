/* tests/test_tokenize_cli.c: `kvcal tokenize` as a user runs it, on the
 * bundled stories260K tokenizer and the default calibration text: outputs
 * read back, exit codes, errors that leave no output behind (through
 * kvcal_test_run_kvcal). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/dataset/dataset.h"
#include "io/dataset/dataset_impl.h"
#include "tests/test_util.h"

#define TEXT "datasets/default_calibration.txt"
#define MODEL "models/stories260K"

static void cli_tokenize_hdf5_reads_back_as_the_same_samples(void)
{
    char args[1024], *out = NULL, h5[512];
    snprintf(h5, sizeof h5, "%s", kvcal_test_path("default.h5"));
    snprintf(args, sizeof args,
             "tokenize -d " TEXT " -m " MODEL " -l 256 -n 20 --seed 3 -o %s --json", h5);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    cJSON *rep = out ? cJSON_Parse(out) : NULL;
    free(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(rep, "num_samples")->valueint, 20);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(rep, "tokens")->valueint, 20 * 256);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(rep, "tokenizer_kind")->valuestring,
                           "llama2c");
    cJSON_Delete(rep);
    /* the set holds what the library samples from the text with that seed */
    kvcal_tokenizer_t *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_tokenizer_find(MODEL, NULL, &tok), KVCAL_OK);
    kvcal_dataset_options opt = {.num_samples = 20, .seq_len = 256, .seed = 3, .pack = 1};
    kvcal_samples *want = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_load(TEXT, tok, &opt, &want), KVCAL_OK);
    kvcal_doclist rows;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_read(h5, NULL, &rows), KVCAL_OK);
    CU_ASSERT_EQUAL(rows.n, 20);
    for (size_t i = 0; i < rows.n && i < 20; i++) {
        CU_ASSERT_EQUAL(rows.d[i].n_ids, 256);
        CU_ASSERT_EQUAL(rows.d[i].ids[0], 1); /* every window starts with BOS */
        CU_ASSERT(!memcmp(rows.d[i].ids, want->ids + i * 256, 256 * sizeof(int32_t)));
    }
    kvcal_doclist_free(&rows);
    kvcal_samples_destroy(want);
    kvcal_tokenizer_destroy(tok);
}

static void cli_tokenize_jsonl_writes_one_line_per_document_in_order(void)
{
    char args[1024], jl[512];
    snprintf(jl, sizeof jl, "%s", kvcal_test_path("default.jsonl"));
    snprintf(args, sizeof args,
             "tokenize -d " TEXT " -t " MODEL "/tok512.bin --format jsonl -q -o %s", jl);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    kvcal_tokenizer_t *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_tokenizer_find(MODEL, NULL, &tok), KVCAL_OK);
    kvcal_documents *docs = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_tokenize_documents(TEXT, tok, NULL, NULL, &docs),
                          KVCAL_OK);
    size_t len;
    char *text = kvcal_test_read_file(jl, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    int line = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save), line++) {
        cJSON *o = cJSON_Parse(l);
        const cJSON *ids = cJSON_GetObjectItem(o, "input_ids");
        CU_ASSERT_FATAL(line < docs->num_docs && cJSON_IsArray(ids));
        CU_ASSERT_EQUAL((size_t)cJSON_GetArraySize(ids), docs->lengths[line]);
        CU_ASSERT_EQUAL(cJSON_GetArrayItem(ids, 0)->valueint, docs->ids[line][0]);
        cJSON_Delete(o);
    }
    CU_ASSERT_EQUAL(line, docs->num_docs);
    CU_ASSERT(docs->num_docs > 50);
    free(text);
    kvcal_documents_destroy(docs);
    kvcal_tokenizer_destroy(tok);
}

static void cli_tokenize_same_seed_gives_a_byte_identical_token_set(void)
{
    char args[1024], a[512], b[512];
    snprintf(a, sizeof a, "%s", kvcal_test_path("same-a.h5"));
    snprintf(b, sizeof b, "%s", kvcal_test_path("same-b.h5"));
    snprintf(args, sizeof args, "tokenize -d " TEXT " -m " MODEL " -l 64 -n 8 --seed 9 -o %s",
             a);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    sleep(1); /* a clock tick apart: file times must not reach the output */
    snprintf(args, sizeof args, "tokenize -d " TEXT " -m " MODEL " -l 64 -n 8 --seed 9 -o %s",
             b);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    size_t na = 0, nb = 0;
    char *x = kvcal_test_read_file(a, &na), *y = kvcal_test_read_file(b, &nb);
    CU_ASSERT_TRUE(x && y && na == nb && !memcmp(x, y, na));
    free(x);
    free(y);
}

static void cli_tokenize_errors_exit_nonzero_and_write_nothing(void)
{
    char args[1024], o[512]; /* own copy: kvcal_test_path's slots rotate */
    snprintf(o, sizeof o, "%s", kvcal_test_path("never.h5"));
    snprintf(args, sizeof args, "tokenize -d " TEXT " -m " MODEL " -l 2048 -n 1000 -o %s",
             o);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("tokens in 2396 documents"));
    CU_ASSERT_NOT_EQUAL(access(o, F_OK), 0);
    snprintf(args, sizeof args, "tokenize -d no/such/file.txt -m " MODEL " -o %s", o);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("cannot read dataset"));
    snprintf(args, sizeof args, "tokenize -d " TEXT " -t " TEXT " -o %s", o);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("unknown tokenizer type"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("tokenize -d " TEXT " -m " MODEL, NULL),
                    2); /* no --output */
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--output"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("tokenize --format csv -d x -m x -o x", NULL),
                    2);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("tokenize --seq-len 0 -d x -m x -o x", NULL), 2);
    CU_ASSERT_NOT_EQUAL(access(o, F_OK), 0);
}

/* A --seq-len or --num-samples far beyond the text: refused up front when
 * the samples could not be held (naming both options and the size), else
 * the text's real size is reported at once, without allocating the asked
 * gigabytes. */
static void cli_tokenize_huge_sizes_are_refused_naming_the_options_and_size(void)
{
    char args[1024], o[512];
    snprintf(o, sizeof o, "%s", kvcal_test_path("huge.h5"));
    snprintf(args, sizeof args,
             "tokenize -d " TEXT " -m " MODEL " -l 16777216 -n 129 -q -o %s", o);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(
        "--num-samples 129 x --seq-len 16777216 would take 2164260864 "
        "tokens (8.1 GiB), more than the 2^31 tokens (8 GiB)"));
    snprintf(args, sizeof args, "tokenize -d " TEXT " -m " MODEL " -l 16777216 -q -o %s",
             o);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("not one sample of 16777216 tokens"));
    snprintf(args, sizeof args, "tokenize -d " TEXT " -m " MODEL " -l 2000000000 -o %s",
             o);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(
        "--seq-len '2000000000': expected an integer in [1, 16777216]"));
    CU_ASSERT_NOT_EQUAL(access(o, F_OK), 0);
}

/* A packed window starts with BOS, so --seq-len 1 has no room for text:
 * refused up front (before, every window was BOS alone, and without
 * --num-samples the windows grew to 8 GiB). One document per sample, or
 * token ids (no BOS added), still take any length. */
static void cli_tokenize_seq_len_1_with_bos_packing_is_refused(void)
{
    char args[1200], o[512], ids[512];
    snprintf(o, sizeof o, "%s", kvcal_test_path("bos-only.h5"));
    snprintf(args, sizeof args, "tokenize -d " TEXT " -m " MODEL " -l 1 -n 3 -q -o %s",
             o);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(
        "--seq-len 1 leaves no room for text: each packed window starts with the "
        "tokenizer's BOS (id 1); give --seq-len 2 or more, or --no-pack"));
    CU_ASSERT_NOT_EQUAL(access(o, F_OK), 0);
    snprintf(args, sizeof args,
             "tokenize -d " TEXT " -m " MODEL " -l 1 -n 3 --no-pack -q -o %s", o);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(ids, sizeof ids, "%s", kvcal_test_path("three-ids.jsonl"));
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(ids, "{\"input_ids\": [5, 6, 7]}\n", 25),
                          0);
    remove(o);
    snprintf(args, sizeof args, "tokenize -d %s -m " MODEL " -l 1 -q -o %s", ids, o);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    kvcal_doclist rows;
    CU_ASSERT_EQUAL_FATAL(kvcal_dataset_read(o, NULL, &rows), KVCAL_OK);
    CU_ASSERT(rows.n == 3 && rows.d[0].ids[0] == 5 && rows.d[2].ids[0] == 7);
    kvcal_doclist_free(&rows);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(cli_tokenize_hdf5_reads_back_as_the_same_samples),
    KVCAL_TEST(cli_tokenize_jsonl_writes_one_line_per_document_in_order),
    KVCAL_TEST(cli_tokenize_same_seed_gives_a_byte_identical_token_set),
    KVCAL_TEST(cli_tokenize_errors_exit_nonzero_and_write_nothing),
    KVCAL_TEST(cli_tokenize_huge_sizes_are_refused_naming_the_options_and_size),
    KVCAL_TEST(cli_tokenize_seq_len_1_with_bos_packing_is_refused),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(tokenize_cli, KVCAL_NEEDS_NOTHING, tests)
