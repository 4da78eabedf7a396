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
    snprintf(args, sizeof args, "tokenize -d '%s' -m " MODEL " --format jsonl -q -o '%s'",
             path, kvcal_test_path("ids600.out.jsonl"));
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
        "inspect '%s'",
        "validate-scales '%s'",
    };
    alarm(60);
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        snprintf(args, sizeof args, forms[i], fifo, out);
        snprintf(want, sizeof want, "%s: is a named pipe (FIFO), not a regular file",
                 fifo);
        expect(args, 2, want);
    }
    snprintf(args, sizeof args, "eval --model " MODEL " --dataset '%s' --quiet", dir);
    snprintf(want, sizeof want, "%s: is a named pipe (FIFO), not a regular file", member);
    expect(args, 2, want);
    alarm(0);
    CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0);
}

static int files_equal(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = kvcal_test_read_file(a, &na), *y = kvcal_test_read_file(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

#define BODY_1                                                                           \
    "Once upon a time a little fox lived by the river. She liked to count the stones."
#define BODY_2                                                                           \
    "The old man planted a tree in the park, and every spring the children sat under "   \
    "it."
#define BODY_3                                                                           \
    "Tom had a red ball. He threw it high, and the dog ran fast to bring it back to "    \
    "him."

/* calibrate and eval take --text-field (the JSONL error tells users to pass
 * it): with it, a JSONL whose text is under "body" calibrates to the same
 * scales as the same documents in a text file; without it, exit 1 naming
 * the option; --help lists it. */
static void cli_calibrate_and_eval_read_the_text_field_given(void)
{
    char jsonl[512], txt[512], a[512], b[512], args[2048];
    snprintf(jsonl, sizeof jsonl, "%s",
             write_tmp("body.jsonl", "{\"id\": 1, \"body\": \"" BODY_1 "\"}\n"
                                     "{\"id\": 2, \"body\": \"" BODY_2 "\"}\n"
                                     "{\"id\": 3, \"body\": \"" BODY_3 "\"}\n"));
    snprintf(txt, sizeof txt, "%s",
             write_tmp("body.txt", BODY_1 "\n\n" BODY_2 "\n\n" BODY_3 "\n"));
    snprintf(a, sizeof a, "%s", kvcal_test_path("body_jsonl.json"));
    snprintf(b, sizeof b, "%s", kvcal_test_path("body_txt.json"));
    const char *run = "--num-samples 2 --seq-len 16 --seed 3 --quiet";
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --dataset '%s' --text-field body %s "
             "--format legacy --out '%s'",
             jsonl, run, a);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --dataset '%s' %s --format legacy --out '%s'",
             txt, run, b);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT(files_equal(a, b));
    char *out = NULL;
    snprintf(args, sizeof args,
             "eval --model " MODEL " --dataset '%s' --text-field body %s --modes "
             "baseline,dynamic --json",
             jsonl, run);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &out), 0);
    CU_ASSERT(out && strstr(out, "\"baseline\""));
    free(out);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --dataset '%s' %s --out '%s'", jsonl, run,
             kvcal_test_path("no_field.json"));
    expect(args, 1, "line 1: no string \"text\"");
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--text-field"));
    snprintf(args, sizeof args, "eval --model " MODEL " --dataset '%s' %s", jsonl, run);
    expect(args, 1, "line 1: no string \"text\"");
    static const char *const helps[] = {"calibrate --help", "eval --help"};
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(helps[i], &out), 0);
        CU_ASSERT(out && strstr(out, "--text-field NAME"));
        free(out);
    }
}

/* calibrate without --dataset on more samples than the default text holds:
 * exit 1, nothing written, and one line with the tokens there are, the
 * tokens asked for and what to pass. */
static void cli_default_text_too_short_says_what_to_pass(void)
{
    char args[1024];
    const char *out = kvcal_test_path("too_many.json");
    snprintf(args, sizeof args,
             "calibrate --model " MODEL
             " --num-samples 4000 --seq-len 512 --quiet --out '%s'",
             out);
    expect(args, 1, "datasets/default_calibration.txt: has ");
    CU_ASSERT(kvcal_test_kvcal_stderr_has(
        "tokens in 2396 documents, but 4000 samples x 512 tokens need about 2048000; "
        "pass more text with --dataset FILE (public sets: datasets/RECIPES.md) or lower "
        "--num-samples or --seq-len\n"));
    CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(cli_ids_outside_the_tokenizer_vocabulary_exit_1_naming_them),
    KVCAL_TEST(cli_fifo_inputs_exit_2_naming_the_path),
    KVCAL_TEST(cli_calibrate_and_eval_read_the_text_field_given),
    KVCAL_TEST(cli_default_text_too_short_says_what_to_pass),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(dataset_cli, KVCAL_NEEDS_NOTHING, tests)
