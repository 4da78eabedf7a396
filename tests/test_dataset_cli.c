/* tests/test_dataset_cli.c: what calibrate, eval and tokenize say about the
 * datasets they are given, end to end through kvcal_test_run_kvcal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* A FIFO given as the dataset, the model, the tokenizer or a member of a
 * dataset directory: exit 2 at once with one line naming it (this hung:
 * read once for the format, closed, reopened, blocked). The alarm turns a
 * hang into a failed test. */
static void cli_fifo_inputs_exit_2_naming_the_path(void)
{
    char fifo[512], dir[512], member[600], args[2048], want[700];
    snprintf(fifo, sizeof fifo, "%s", kvcal_test_path("cli_pipe"));
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("cli_pipedir"));
    snprintf(member, sizeof member, "%s/x.txt", dir);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    CU_ASSERT_EQUAL_FATAL(mkfifo(member, 0600), 0);
    const char *out = kvcal_test_path("cli_pipe_out");
    static const char *const forms[] = {
        "calibrate --model " MODEL " --dataset '%s' --quiet --out '%s'",
        "calibrate --model '%s' --quiet --out '%s'",
        "calibrate --model " MODEL " --tokenizer '%s' --quiet --out '%s'",
        "eval --model " MODEL " --dataset '%s' --quiet --json",
        "tokenize -d '%s' -m " MODEL " -q -o '%s'",
        "tokenize -d datasets/default_calibration.txt -t '%s' -q -o '%s'",
    };
    alarm(60);
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        snprintf(args, sizeof args, forms[i], fifo, out);
        snprintf(want, sizeof want, "%s: is a named pipe (FIFO), not a regular file",
                 fifo);
        expect(args, 2, want);
    }
    snprintf(args, sizeof args, "eval --model " MODEL " --dataset '%s' --quiet", dir);
    snprintf(want, sizeof want, "%s: is a named pipe (FIFO), not a regular file",
             member);
    expect(args, 2, want);
    alarm(0);
    CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(cli_ids_outside_the_tokenizer_vocabulary_exit_1_naming_them),
    KVCAL_TEST(cli_fifo_inputs_exit_2_naming_the_path),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(dataset_cli, KVCAL_NEEDS_NOTHING, tests)
