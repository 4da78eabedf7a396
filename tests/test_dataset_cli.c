/* tests/test_dataset_cli.c: what calibrate, eval and tokenize say about the
 * datasets they are given, end to end through kvcal_test_run_kvcal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"

static const char *write_tmp(const char *name, const char *text)
{
    const char *p = kvcal_test_path(name);
    CU_ASSERT_EQUAL(kvcal_test_write_file(p, text, strlen(text)), 0);
    return p;
}

/* Runs `kvcal <args>` and checks its exit code and that stderr holds want. */
static void expect(const char *args, int rc, const char *want)
{
    int got = kvcal_test_run_kvcal(args, NULL);
    if (got != rc)
        fprintf(stderr, "\n  kvcal %s: exit %d, expected %d\n", args, got, rc);
    CU_ASSERT_EQUAL(got, rc);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(want));
}

/* Ids past the vocabulary of the tokenizer beside the model: exit 1 and one
 * line naming the file, line, document, id and vocabulary size (this was a
 * crash in all three commands). */
static void cli_ids_outside_the_tokenizer_vocabulary_exit_1_naming_them(void)
{
    char path[512], args[1024], want[640];
    snprintf(path, sizeof path, "%s",
             write_tmp("ids600.jsonl", "{\"input_ids\": [1, 5, 7, 9, 11, 13, 15, 17]}\n"
                                       "{\"input_ids\": [1, 2, 600, 4, 5, 6, 7, 8]}\n"));
    snprintf(want, sizeof want,
             "%s: line 2 (document 2): input_ids[2] = 600 is outside the tokenizer's "
             "vocabulary of 512 tokens",
             path);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --dataset '%s' --num-samples 2 --seq-len 8 "
             "--quiet --out '%s'",
             path, kvcal_test_path("ids600.json"));
    expect(args, 1, want);
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset '%s' --num-samples 2 --seq-len 8 --quiet",
             path);
    expect(args, 1, want);
    snprintf(args, sizeof args,
             "tokenize -d '%s' -m " MODEL " --format jsonl -q -o '%s'", path,
             kvcal_test_path("ids600.out.jsonl"));
    expect(args, 1, want);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(cli_ids_outside_the_tokenizer_vocabulary_exit_1_naming_them),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(dataset_cli, KVCAL_NEEDS_NOTHING, tests)
