/* tests/test_paths_cli.c: an empty path on the command line (`--out ''`) is
 * a usage error of every command that takes one: exit 2 and one line naming
 * the option, before any file is read (the model given here mostly does not
 * exist, so a command that went on would fail differently). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

#define NO_MODEL "no/such/model"

static void every_command_refuses_an_empty_path_with_exit_2_naming_the_option(void)
{
    static const struct {
        const char *args, *option;
    } cases[] = {
        {"calibrate --model " NO_MODEL " --out ''", "calibrate: --out"},
        {"calibrate --model models/stories260K/stories260K.bin --out '' --quiet",
         "calibrate: --out"},
        {"calibrate --model " NO_MODEL " --stats ''", "calibrate: --stats"},
        {"calibrate --model ''", "calibrate: --model"},
        {"calibrate --model " NO_MODEL " --dataset ''", "calibrate: --dataset"},
        {"calibrate --model " NO_MODEL " --tokenizer ''", "calibrate: --tokenizer"},
        {"eval --model " NO_MODEL " --dataset x --scales ''", "eval: --scales"},
        {"eval --model '' --dataset x", "eval: --model"},
        {"eval --model " NO_MODEL " --dataset ''", "eval: --dataset"},
        {"tokenize -d x -m " NO_MODEL " --output ''", "tokenize: --output"},
        {"tokenize -d x -m " NO_MODEL " -o ''", "tokenize: --output"},
        {"tokenize -d '' -m " NO_MODEL " -o x", "tokenize: --dataset"},
        {"tokenize -d x -m '' -o x", "tokenize: --model"},
        {"tokenize -d x -t '' -o x", "tokenize: --tokenizer"},
        {"convert x.json --to kvcal --out ''", "convert: --out"},
        {"convert '' --to kvcal --out x.json", "convert: FILE"},
        {"convert x.json --to checkpoint --model '' --out x", "convert: --model"},
        {"validate-scales ''", "validate-scales: FILE"},
        {"validate-scales x.json --model ''", "validate-scales: --model"},
        {"inspect ''", "inspect: PATH"},
        {"inspect " NO_MODEL " --model ''", "inspect: --model"},
        {"inspect " NO_MODEL " --tokenizer ''", "inspect: --tokenizer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char want[128];
        snprintf(want, sizeof want,
                 "kvcal %s: empty path; give a file or directory name\n",
                 cases[i].option);
        int rc = kvcal_test_run_kvcal(cases[i].args, NULL);
        char *err = kvcal_test_kvcal_stderr();
        int ok = rc == 2 && err && !strcmp(err, want);
        if (!ok)
            fprintf(stderr, "\n  kvcal %s: exit %d, stderr: %s", cases[i].args, rc,
                    err ? err : "(none)\n");
        CU_ASSERT(ok);
        free(err);
    }
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(every_command_refuses_an_empty_path_with_exit_2_naming_the_option),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(paths_cli, KVCAL_NEEDS_NOTHING, tests)
