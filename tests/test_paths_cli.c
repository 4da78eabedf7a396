/* tests/test_paths_cli.c: an empty path on the command line (`--out ''`) is
 * a usage error of every command that takes one: exit 2 and one line naming
 * the option, before any file is read (the model given here mostly does not
 * exist, so a command that went on would fail differently). So is an option
 * given twice, in every command: the first value is never dropped unsaid. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

// --- an option given twice ------------------------------------------------------

#define MODEL "models/stories260K/stories260K.bin"
#define TEXT "datasets/calibration_handwritten.txt"
#define SCALES "tests/fixtures/llama2-7b/kv_cache_scales.json"

/* A command line that succeeds (the output file, if any, at its %s), an
 * option of it given again (a second output's path at its %s, if any), and
 * the line that refuses the two (that second path at its %s, if any). */
typedef struct twice_case {
    const char *once, *again, *want;
} twice_case;

/* Each case's command line runs (exit 0, its output written), then with the
 * option given again is refused: exit 2, that one line on stderr, nothing
 * on stdout, neither output written. */
static void check_refused_twice(const twice_case *cases, size_t n)
{
    char first[512], second[512];
    snprintf(first, sizeof first, "%s", kvcal_test_path("twice_first"));
    snprintf(second, sizeof second, "%s", kvcal_test_path("twice_second"));
    for (size_t i = 0; i < n; i++) {
        char once[2048], again[1024], args[3200], want[1024], *out = NULL;
        snprintf(once, sizeof once, cases[i].once, first);
        snprintf(again, sizeof again, cases[i].again, second);
        snprintf(want, sizeof want, cases[i].want, second);
        strcat(want, "\n");
        remove(first);
        remove(second);
        const int rc_once = kvcal_test_run_kvcal(once, NULL);
        const int wrote = strstr(cases[i].once, "%s") ? access(first, F_OK) == 0 : 1;
        if (rc_once != 0 || !wrote)
            fprintf(stderr, "\n  kvcal %s: exit %d%s", once, rc_once,
                    wrote ? "\n" : ", no output\n");
        CU_ASSERT(rc_once == 0 && wrote);
        remove(first);
        snprintf(args, sizeof args, "%s %s", once, again);
        const int rc = kvcal_test_run_kvcal(args, &out);
        char *err = kvcal_test_kvcal_stderr();
        const int ok = rc == 2 && err && !strcmp(err, want) && out && !out[0] &&
                       access(first, F_OK) && access(second, F_OK);
        if (!ok)
            fprintf(stderr, "\n  kvcal %s: exit %d, stdout %zu bytes, stderr: %s", args,
                    rc, out ? strlen(out) : 0, err ? err : "(none)\n");
        CU_ASSERT(ok);
        free(err);
        free(out);
    }
}

static void every_command_refuses_a_value_option_given_twice_and_writes_nothing(void)
{
    static const twice_case cases[] = {
        {"calibrate --model " MODEL " --num-samples 2 --seq-len 16 --quiet --out '%s'",
         "--num-samples 3",
         "kvcal calibrate: --num-samples given twice (the second '3'); give it once"},
        {"calibrate --model " MODEL " --num-samples 2 --seq-len 16 --quiet --out '%s'",
         "--out '%s'",
         "kvcal calibrate: --out given twice (the second '%s'); give it once"},
        {"calibrate --model " MODEL " --num-samples 2 --seq-len 16 --granularity head "
         "--quiet --out '%s'",
         "--granularity tensor",
         "kvcal calibrate: --granularity given twice (the second 'tensor'); give it "
         "once"},
        {"eval --model " MODEL " --dataset " TEXT " --num-samples 2 --seq-len 16 --modes "
         "unit --quiet --report '%s'",
         "--seq-len 32",
         "kvcal eval: --seq-len given twice (the second '32'); give it once"},
        {"eval --model " MODEL " --dataset " TEXT " --num-samples 2 --seq-len 16 --modes "
         "unit --quiet --report '%s'",
         "--modes dynamic",
         "kvcal eval: --modes given twice (the second 'dynamic'); give it once"},
        {"eval --model " MODEL " --dataset " TEXT " --num-samples 2 --seq-len 16 --modes "
         "unit --quiet --report '%s'",
         "--report '%s'",
         "kvcal eval: --report given twice (the second '%s'); give it once"},
        {"convert " SCALES " --to kvcal --out '%s'", "--to legacy",
         "kvcal convert: --to given twice (the second 'legacy'); give it once"},
        {"convert " SCALES " --to kvcal --out '%s'", "-o '%s'",
         "kvcal convert: --out given twice (the second '%s'); give it once"},
        {"validate-scales " SCALES " --tp 1", "--tp 2",
         "kvcal validate-scales: --tp given twice (the second '2'); give it once"},
        {"validate-scales " SCALES " --model tests/fixtures/llama2-7b", "-m '%s'",
         "kvcal validate-scales: --model given twice (the second '%s'); give it once"},
        {"inspect " SCALES " --model tests/fixtures/llama2-7b", "--model '%s'",
         "kvcal inspect: --model given twice (the second '%s'); give it once"},
        {"inspect " SCALES " --tokenizer models/stories260K/tok512.bin", "-t '%s'",
         "kvcal inspect: --tokenizer given twice (the second '%s'); give it once"},
        {"tokenize -d " TEXT " -m " MODEL " -o '%s' --seq-len 32 --quiet", "--seq-len 64",
         "kvcal tokenize: --seq-len given twice (the second '64'); give it once"},
        {"tokenize -d " TEXT " -m " MODEL " -o '%s' --seq-len 32 --quiet",
         "--output '%s'",
         "kvcal tokenize: --output given twice (the second '%s'); give it once"},
        {"report " SCALES " --tp 1 --out '%s'", "--tp 2",
         "kvcal report: --tp given twice (the second '2'); give it once"},
        {"report " SCALES " --out '%s'", "--out '%s'",
         "kvcal report: --out given twice (the second '%s'); give it once"},
    };
    check_refused_twice(cases, sizeof cases / sizeof cases[0]);
}

static void every_command_refuses_a_flag_given_twice(void)
{
    static const twice_case cases[] = {
        {"calibrate --model " MODEL " --num-samples 2 --seq-len 16 --quiet --out '%s'",
         "--quiet", "kvcal calibrate: --quiet given twice; give it once"},
        {"calibrate --model " MODEL " --num-samples 2 --seq-len 16 --q-scale --quiet "
         "--out '%s'",
         "--q-scale", "kvcal calibrate: --q-scale given twice; give it once"},
        {"eval --model " MODEL " --dataset " TEXT " --num-samples 2 --seq-len 16 --modes "
         "unit --quiet --report '%s'",
         "--quiet", "kvcal eval: --quiet given twice; give it once"},
        {"validate-scales " SCALES " --json", "--json",
         "kvcal validate-scales: --json given twice; give it once"},
        {"validate-scales " SCALES " --strict", "-s",
         "kvcal validate-scales: --strict given twice; give it once"},
        {"inspect " SCALES " --json", "-j",
         "kvcal inspect: --json given twice; give it once"},
        {"tokenize -d " TEXT " -m " MODEL " -o '%s' --seq-len 32 --quiet", "-q",
         "kvcal tokenize: --quiet given twice; give it once"},
    };
    check_refused_twice(cases, sizeof cases / sizeof cases[0]);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(every_command_refuses_an_empty_path_with_exit_2_naming_the_option),
    KVCAL_TEST(every_command_refuses_a_value_option_given_twice_and_writes_nothing),
    KVCAL_TEST(every_command_refuses_a_flag_given_twice),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(paths_cli, KVCAL_NEEDS_NOTHING, tests)
