/* tests/test_outputs_cli.c: what the commands that write files do with
 * their outputs, as a user runs them (through kvcal_test_run_kvcal): no
 * output ever replaces an input, whatever it is called; a full disk writes
 * nothing and says so in one line; usage errors name their limits; the
 * progress line reaches a log; the summary says what each format loses.
 * Every input a test could destroy is a copy in the test's tmpdir. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"
#define TEXT "datasets/default_calibration.txt"
#define SMALL "--num-samples 2 --seq-len 16 --quiet"

// --- shared steps -----------------------------------------------------------

/* A fresh directory under the test tmpdir (its path in a static buffer). */
static const char *fresh_dir(const char *name)
{
    static char dir[8][600];
    static int slot;
    char *d = dir[slot++ % 8];
    snprintf(d, sizeof dir[0], "%s", kvcal_test_path(name));
    char cmd[2 * sizeof dir[0] + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", d, d);
    CU_ASSERT_EQUAL(system(cmd), 0);
    return d;
}

static int copy_file(const char *from, const char *to)
{
    size_t n = 0;
    char *data = kvcal_test_read_file(from, &n);
    int rc = data ? kvcal_test_write_file(to, data, n) : -1;
    free(data);
    return rc;
}

static int same_content(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = kvcal_test_read_file(a, &na), *y = kvcal_test_read_file(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

/* Entries of dir (without . and ..), -1 when it cannot be opened. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* Runs kvcal with files limited to `bytes` (RLIMIT_FSIZE, SIGXFSZ ignored:
 * a write past the limit fails with EFBIG, as on a full disk), then
 * restores both. */
static int run_with_file_limit(const char *args, rlim_t bytes, char **out)
{
    struct rlimit old, lim;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = bytes;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    int rc = kvcal_test_run_kvcal(args, out);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    return rc;
}

/* stderr of the last run is exactly one line "kvcal <cmd>: ..." holding
 * needle, and no HDF5 diagnostics. */
static int stderr_is_one_line(const char *cmd, const char *needle)
{
    char *err = kvcal_test_kvcal_stderr(), prefix[64];
    snprintf(prefix, sizeof prefix, "kvcal %s: ", cmd);
    int ok = err && !strncmp(err, prefix, strlen(prefix)) && strchr(err, '\n') &&
             strchr(err, '\n')[1] == '\0' && strstr(err, needle) && !strstr(err, "HDF5");
    if (!ok)
        fprintf(stderr, "\n  stderr: %s\n", err ? err : "(none)");
    free(err);
    return ok;
}

// --- outputs that are inputs -------------------------------------------------

/* The dataset, the model file and the tokenizer as --out or --stats, under
 * their own name, "./" and ".." spellings, a symbolic link and a hard link:
 * refused with exit 2 before anything runs, the input untouched. */
static void calibrate_refuses_an_output_that_is_an_input_by_any_name(void)
{
    const char *dir = fresh_dir("out-is-input");
    char data[700], model[700], tok[700], link_to[700], hard[700], args[4096];
    snprintf(data, sizeof data, "%s/d.txt", dir);
    snprintf(model, sizeof model, "%s/m.bin", dir);
    snprintf(tok, sizeof tok, "%s/tok512.bin", dir);
    snprintf(link_to, sizeof link_to, "%s/link.json", dir);
    snprintf(hard, sizeof hard, "%s/hard.json", dir);
    CU_ASSERT_EQUAL_FATAL(copy_file(TEXT, data), 0);
    CU_ASSERT_EQUAL_FATAL(copy_file(MODEL, model), 0);
    CU_ASSERT_EQUAL_FATAL(copy_file("models/stories260K/tok512.bin", tok), 0);
    CU_ASSERT_EQUAL_FATAL(symlink("d.txt", link_to), 0);
    CU_ASSERT_EQUAL_FATAL(link(data, hard), 0);
    char dotted[800], up[900];
    snprintf(dotted, sizeof dotted, "%s/./d.txt", dir);
    snprintf(up, sizeof up, "%s/../out-is-input/d.txt", dir);
    const struct {
        const char *option, *path, *what;
    } cases[] = {
        {"--out", data, "is the dataset"}, {"--out", dotted, "is the dataset"},
        {"--out", up, "is the dataset"},   {"--out", link_to, "is the dataset"},
        {"--out", hard, "is the dataset"}, {"--stats", data, "is the dataset"},
        {"--out", model, "is the model"},  {"--stats", tok, "is a file of the model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args,
                 "calibrate --model '%s' --dataset '%s' " SMALL " %s '%s'", model, data,
                 cases[i].option, cases[i].path);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
        CU_ASSERT(kvcal_test_kvcal_stderr_has(cases[i].what));
        CU_ASSERT(same_content(data, TEXT));
        CU_ASSERT(same_content(model, MODEL));
        CU_ASSERT(same_content(tok, "models/stories260K/tok512.bin"));
    }
    struct stat st;
    CU_ASSERT(lstat(link_to, &st) == 0 && S_ISLNK(st.st_mode));
    /* --format all: the directory's files are checked, not the directory */
    snprintf(args, sizeof args,
             "calibrate --model '%s' --dataset '%s' " SMALL " --format all --out '%s' "
             "--stats '%s/kvcal_scales.json'",
             model, data, dir, dir);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("is also the output"));
}

/* A ModelOpt checkpoint's hf_quant_config.json and vllm-ascend's
 * quant_model_description.json are read with the checkpoint (the scales'
 * and the model's): convert's and eval's outputs are refused there, the
 * file untouched (both were replaced by the output, exit 0). */
static void outputs_refuse_a_modelopt_or_ascend_description_of_an_input(void)
{
    const char *dir = fresh_dir("quant-descriptions");
    const char *golden = "tests/fixtures/golden/fp8_llama_modelopt_tensor_static";
    static const char *const files[] = {"config.json", "hf_quant_config.json",
                                        "model.safetensors"};
    char model[700], from[700], to[800], keep[700], args[4096];
    snprintf(model, sizeof model, "%s/model", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(model, 0755), 0);
    for (int i = 0; i < 3; i++) {
        snprintf(from, sizeof from, "%s/%s", golden, files[i]);
        snprintf(to, sizeof to, "%s/%s", model, files[i]);
        CU_ASSERT_EQUAL_FATAL(copy_file(from, to), 0);
    }
    static const struct {
        const char *kv_dtype, *to, *description;
    } cases[] = {{"fp8_e4m3", "modelopt", "hf_quant_config.json"},
                 {"int8", "ascend", "quant_model_description.json"}};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args,
                 "calibrate --model '%s' --dataset '%s' --num-samples 2 --seq-len 16 "
                 "--quiet --kv-dtype %s --out '%s/%s.json'",
                 model, kvcal_test_golden_ids(), cases[i].kv_dtype, dir, cases[i].to);
        CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
        snprintf(args, sizeof args,
                 "convert '%s/%s.json' --to %s --model '%s' --out '%s/%s'", dir,
                 cases[i].to, cases[i].to, model, dir, cases[i].to);
        CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
        snprintf(to, sizeof to, "%s/%s/%s", dir, cases[i].to, cases[i].description);
        snprintf(keep, sizeof keep, "%s/keep.json", dir);
        CU_ASSERT_EQUAL_FATAL(copy_file(to, keep), 0);
        snprintf(args, sizeof args, "convert '%s/%s' --to kvcal --model '%s' --out '%s'",
                 dir, cases[i].to, model, to);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
        CU_ASSERT(kvcal_test_kvcal_stderr_has("is the scales file being converted"));
        CU_ASSERT(same_content(to, keep));
    }
    snprintf(to, sizeof to, "%s/hf_quant_config.json", model);
    snprintf(from, sizeof from, "%s/hf_quant_config.json", golden);
    snprintf(args, sizeof args,
             "eval --model '%s' --dataset '%s' --num-samples 2 --seq-len 16 --quiet "
             "--modes dynamic --report '%s'",
             model, kvcal_test_golden_ids(), to);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("is a file of the model"));
    CU_ASSERT(same_content(to, from));
}

static void tokenize_refuses_an_output_that_is_an_input(void)
{
    const char *dir = fresh_dir("tok-out-is-input");
    char data[700], tok[700], args[4096];
    snprintf(data, sizeof data, "%s/d.txt", dir);
    snprintf(tok, sizeof tok, "%s/tok512.bin", dir);
    CU_ASSERT_EQUAL_FATAL(copy_file(TEXT, data), 0);
    CU_ASSERT_EQUAL_FATAL(copy_file("models/stories260K/tok512.bin", tok), 0);
    snprintf(args, sizeof args, "tokenize -d '%s' -t '%s' -l 64 -q -o '%s'", data, tok,
             data);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--output"));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("is the dataset"));
    snprintf(args, sizeof args,
             "tokenize -d '%s' -m '%s' -l 64 -q -o '%s' --format jsonl", data, dir, tok);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("is a file of the model"));
    CU_ASSERT(same_content(data, TEXT));
    CU_ASSERT(same_content(tok, "models/stories260K/tok512.bin"));
}

/* convert never writes over the FILE it converts, nor over the model's
 * files, except that a checkpoint may go into the model directory itself
 * (config.json and the index rewritten with every field kept). */
static void convert_refuses_its_file_but_may_write_into_the_model_dir(void)
{
    const char *dir = fresh_dir("convert-inputs");
    char args[4096], scales[700], model[700], keep[700];
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --format all --out '%s/run'", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(scales, sizeof scales, "%s/run/kvcal_scales.json", dir);
    snprintf(keep, sizeof keep, "%s/keep.json", dir);
    snprintf(model, sizeof model, "%s/run/checkpoint", dir);
    CU_ASSERT_EQUAL_FATAL(copy_file(scales, keep), 0);
    snprintf(args, sizeof args, "convert '%s' --to legacy --out '%s'", scales, scales);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("is the scales file being converted"));
    CU_ASSERT(same_content(scales, keep));
    snprintf(args, sizeof args,
             "convert '%s' --to legacy --model '%s' --out '%s/config.json'", scales,
             model, model);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("is a file of the model"));
    snprintf(args, sizeof args, "convert '%s' --to checkpoint --model '%s' --out '%s'",
             scales, model, model);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args,
             "convert '%s/kv_scales.safetensors' --to checkpoint --model '%s' --out '%s'",
             model, model, model);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("is the scales file being converted"));
}

/* A symbolic link at --out is written through (the file it names gets the
 * scales, the link stays a link); a link to nothing is refused before the
 * run and creates nothing. */
static void outputs_write_through_a_symbolic_link_and_refuse_a_dangling_one(void)
{
    const char *dir = fresh_dir("symlink-out");
    char link_to[700], target[700], args[2048], *out = NULL;
    snprintf(link_to, sizeof link_to, "%s/current.json", dir);
    snprintf(target, sizeof target, "%s/v1.json", dir);
    CU_ASSERT_EQUAL_FATAL(symlink("v1.json", link_to), 0);
    snprintf(args, sizeof args, "calibrate --model " MODEL " " SMALL " --out '%s'",
             link_to);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("a symbolic link to nothing"));
    CU_ASSERT_EQUAL(count_entries(dir), 1);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(target, "old", 3), 0);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &out), 0);
    free(out);
    struct stat st;
    CU_ASSERT(lstat(link_to, &st) == 0 && S_ISLNK(st.st_mode));
    char *text = kvcal_test_read_file(target, NULL);
    CU_ASSERT(text && strstr(text, "\"kvcal-kv-scales\""));
    free(text);
    CU_ASSERT_EQUAL(count_entries(dir), 2);
}

static void calibrate_refuses_two_outputs_that_are_one_file(void)
{
    const char *dir = fresh_dir("two-outputs");
    char args[2048], a[700];
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --out '%s' --stats '%s/./a.json'", a,
             dir);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("is also the output"));
    CU_ASSERT_EQUAL(count_entries(dir), 0);
}

// --- a full disk -------------------------------------------------------------

/* The scales (3 KB) fit under the limit, the statistics (about 40 KB) do
 * not: the run fails with one line and exit 2, and writes neither; the
 * directory --format all created is gone again. */
static void calibrate_on_a_full_disk_writes_nothing_and_says_so_in_one_line(void)
{
    const char *dir = fresh_dir("full-calibrate");
    char args[2048];
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --out '%s/a.json' --stats '%s/a.h5'",
             dir, dir);
    CU_ASSERT_EQUAL(run_with_file_limit(args, 16384, NULL), 2);
    CU_ASSERT(stderr_is_one_line("calibrate", "a.h5"));
    CU_ASSERT_EQUAL(count_entries(dir), 0);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --format all --out '%s/all' "
             "--stats '%s/all/s.h5'",
             dir, dir);
    CU_ASSERT_EQUAL(run_with_file_limit(args, 16384, NULL), 2);
    CU_ASSERT(stderr_is_one_line("calibrate", "s.h5"));
    CU_ASSERT_EQUAL(count_entries(dir), 0);
}

static void tokenize_on_a_full_disk_writes_nothing_and_says_so_in_one_line(void)
{
    const char *dir = fresh_dir("full-tokenize");
    char args[2048];
    snprintf(args, sizeof args,
             "tokenize -d " TEXT " -m models/stories260K -l 64 -q -o '%s/t.h5'", dir);
    CU_ASSERT_EQUAL(run_with_file_limit(args, 4096, NULL), 2);
    CU_ASSERT(stderr_is_one_line("tokenize", "t.h5"));
    CU_ASSERT_EQUAL(count_entries(dir), 0);
    snprintf(args, sizeof args,
             "tokenize -d " TEXT
             " -m models/stories260K -q --format jsonl -o '%s/t.jsonl'",
             dir);
    CU_ASSERT_EQUAL(run_with_file_limit(args, 4096, NULL), 2);
    CU_ASSERT(stderr_is_one_line("tokenize", "t.jsonl"));
    CU_ASSERT_EQUAL(count_entries(dir), 0);
}

/* A checkpoint that cannot be written leaves no directory behind. */
static void convert_checkpoint_that_fails_leaves_no_directory(void)
{
    const char *dir = fresh_dir("full-convert");
    char args[4096];
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --format all --out '%s/run'", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(
        args, sizeof args,
        "convert '%s/run/kvcal_scales.json' --to checkpoint --model '%s/run/checkpoint' "
        "--out '%s/new'",
        dir, dir, dir);
    CU_ASSERT_EQUAL(run_with_file_limit(args, 200, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("kvcal convert: "));
    CU_ASSERT_EQUAL(count_entries(dir), 1);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT_EQUAL(count_entries(dir), 2);
}

// --- limits and paths --------------------------------------------------------

static void usage_errors_name_their_limits_and_exit_2(void)
{
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(
                        "calibrate --model " MODEL " --num-samples 2147483648", NULL),
                    2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("expected an integer in [1, 1073741824]"));
    /* (an --out in the tmpdir: a kvcal without the limit writes 175 MB) */
    static const char *const tp_cases[] = {
        "calibrate --model " MODEL " " SMALL " --format legacy --tp 1000000 --out ",
        "eval --model " MODEL " --dataset " TEXT " --tp 4097",
        "convert x.json --to legacy --tp 5000 --out ",
        "validate-scales x.json --tp 65536",
    };
    for (size_t i = 0; i < sizeof tp_cases / sizeof tp_cases[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s%s", tp_cases[i],
                 strstr(tp_cases[i], "--out") ? kvcal_test_path("tp.json") : "");
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(cmd, NULL), 2);
        CU_ASSERT(kvcal_test_kvcal_stderr_has("expected an integer in [1, 4096]"));
    }
    /* an --out too long is a usage error found before the run */
    char *args = malloc(6000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(args);
    int n = snprintf(args, 6000, "calibrate --model " MODEL " " SMALL " --out ");
    memset(args + n, 'a', 4090);
    args[n + 4090] = '\0';
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("output path too long"));
    free(args);
}

/* --batch beyond the samples runs them in one pass (here it would ask for
 * terabytes of activations), with a note since it was given. */
static void batch_beyond_the_samples_is_capped_with_a_note(void)
{
    char args[2048];
    snprintf(args, sizeof args,
             "calibrate --model " MODEL
             " --num-samples 2 --seq-len 16 --batch 1073741824 "
             "--out '%s'",
             kvcal_test_path("capped.json"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(
        "note: --batch 1073741824 is more than the 2 samples; running 2 a pass"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("eval --model " MODEL " --dataset " TEXT
                                         " --num-samples 2 --seq-len 16 --modes unit "
                                         "--batch 1073741824 --json",
                                         NULL),
                    0);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("more than the 2 samples"));
}

static void written_paths_are_joined_without_a_doubled_slash(void)
{
    char args[2048], *out = NULL;
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --format all --out '%s/'",
             fresh_dir("joined"));
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "joined/kv_cache_scales.json\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "joined/checkpoint\n"));
    CU_ASSERT_PTR_NULL(strstr(out, "//"));
    free(out);
}

// --- progress and summary ----------------------------------------------------

/* stderr is a file here: with KVCAL_PROGRESS_INTERVAL=0 a plain line per
 * layer of a chunk of batches, no carriage return or escape; unset, one line at the end of a
 * short run; --quiet, none. */
static void progress_reaches_a_log_as_plain_lines(void)
{
    const char *runs[] = {
        "calibrate --model " MODEL " --num-samples 6 --seq-len 16 --batch 2 --out ",
        "eval --model " MODEL " --dataset " TEXT
        " --num-samples 6 --seq-len 16 --batch 2 --modes unit --json",
        "tokenize -d " TEXT " -m models/stories260K -l 64 -o ",
    };
    const char *lines[][2] = {
        {"calibrate: 0/6 samples (layer 1/5)", "calibrate: 6/6 samples"},
        {"eval baseline: 0/6 samples (layer 1/5)", "eval unit: 6/6 samples"},
        {"kvcal tokenize: 1/", "documents"},
    };
    const char *files[] = {"progress.json", NULL, "progress.h5"};
    for (int i = 0; i < 3; i++) {
        char args[2048], *err;
        snprintf(args, sizeof args, "%s%s", runs[i],
                 files[i] ? kvcal_test_path(files[i]) : "");
        setenv("KVCAL_PROGRESS_INTERVAL", "0", 1);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
        err = kvcal_test_kvcal_stderr();
        CU_ASSERT_PTR_NOT_NULL_FATAL(err);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, lines[i][0]));
        CU_ASSERT_PTR_NOT_NULL(strstr(err, lines[i][1]));
        CU_ASSERT_PTR_NULL(strchr(err, '\r'));
        CU_ASSERT_PTR_NULL(strchr(err, '\033'));
        free(err);
        unsetenv("KVCAL_PROGRESS_INTERVAL");
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
        CU_ASSERT(kvcal_test_kvcal_stderr_has(lines[i][1]));
        if (i == 0) {
            err = kvcal_test_kvcal_stderr();
            CU_ASSERT(err && !strstr(err, "2/6") && strstr(err, "6/6 samples"));
            free(err);
        }
        char quiet[2100];
        snprintf(quiet, sizeof quiet, "%s --quiet", args);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(quiet, NULL), 0);
        err = kvcal_test_kvcal_stderr();
        CU_ASSERT(err && !strstr(err, lines[i][1]));
        free(err);
    }
}

/* The summary says, under each file written, what its format keeps and
 * which engines read it: legacy max(k, v) per rank, checkpoint per tensor
 * or per head (vLLM's FlashAttention at FA3+ only; sglang refuses). */
static void calibrate_summary_says_what_each_format_loses(void)
{
    char args[2048], *out = NULL;
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --format all --out '%s'",
             fresh_dir("notes"));
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "kv_cache_scales.json\n  legacy: one scale per "
                                       "layer and tp rank shared by K and V, max(k, v)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "kvcal_scales.json\n  kvcal: keeps everything"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(out, "checkpoint\n  checkpoint, per tensor (strategy tensor)"));
    free(out);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL
             " --granularity head --format checkpoint --out '%s' --json",
             fresh_dir("notes-head"));
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    cJSON *root = out ? cJSON_Parse(out) : NULL;
    free(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    cJSON *notes = cJSON_GetObjectItem(root, "format_notes");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(notes), 1);
    const char *note =
        cJSON_GetObjectItem(cJSON_GetArrayItem(notes, 0), "note")->valuestring;
    CU_ASSERT_PTR_NOT_NULL(strstr(note, "per head (strategy attn_head)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(note, "FlashAttention backend at FA3+"));
    CU_ASSERT_PTR_NOT_NULL(strstr(note, "sglang refuse to start"));
    CU_ASSERT_PTR_NULL(strchr(note, '\n'));
    cJSON_Delete(root);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(calibrate_refuses_an_output_that_is_an_input_by_any_name),
    KVCAL_TEST(tokenize_refuses_an_output_that_is_an_input),
    KVCAL_TEST(outputs_refuse_a_modelopt_or_ascend_description_of_an_input),
    KVCAL_TEST(convert_refuses_its_file_but_may_write_into_the_model_dir),
    KVCAL_TEST(outputs_write_through_a_symbolic_link_and_refuse_a_dangling_one),
    KVCAL_TEST(calibrate_refuses_two_outputs_that_are_one_file),
    KVCAL_TEST(calibrate_on_a_full_disk_writes_nothing_and_says_so_in_one_line),
    KVCAL_TEST(tokenize_on_a_full_disk_writes_nothing_and_says_so_in_one_line),
    KVCAL_TEST(convert_checkpoint_that_fails_leaves_no_directory),
    KVCAL_TEST(usage_errors_name_their_limits_and_exit_2),
    KVCAL_TEST(batch_beyond_the_samples_is_capped_with_a_note),
    KVCAL_TEST(written_paths_are_joined_without_a_doubled_slash),
    KVCAL_TEST(progress_reaches_a_log_as_plain_lines),
    KVCAL_TEST(calibrate_summary_says_what_each_format_loses),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(outputs_cli, KVCAL_NEEDS_NOTHING, tests)
