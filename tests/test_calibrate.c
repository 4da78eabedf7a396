/* tests/test_calibrate.c: `kvcal calibrate` end to end on the bundled
 * stories260K and default calibration text, through kvcal_test_run_kvcal. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/scales.h"
#include "io/checkpoint/safetensors.h"
#include "io/stats_hdf5.h"
#include "kvcal.h"
#include "observers/stats.h"
#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"
/* SMALL less its --batch, for a run that gives its own (an option is given once) */
#define SMALL_ANY_BATCH "--num-samples 6 --seq-len 48 --quiet"
#define SMALL SMALL_ANY_BATCH " --batch 4"

static int files_equal(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = kvcal_test_read_file(a, &na), *y = kvcal_test_read_file(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

static void calibrate_writes_every_format_and_each_validates(void)
{
    char args[2048], *out = NULL;
    const char *dir = kvcal_test_path("all");
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --format all --out '%s'", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "K absmax"));
    free(out);
    static const char *const files[] = {"kv_cache_scales.json", "kvcal_scales.json",
                                        "checkpoint"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "validate-scales '%s/%s'", dir, files[i]);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    }
}

static void calibrate_is_byte_identical_for_same_inputs_and_seed(void)
{
    char args[2048], a[600], b[600], ha[600], hb[600];
    snprintf(a, sizeof a, "%s", kvcal_test_path("run-a.json"));
    snprintf(b, sizeof b, "%s", kvcal_test_path("run-b.json"));
    snprintf(ha, sizeof ha, "%s", kvcal_test_path("run-a.h5"));
    snprintf(hb, sizeof hb, "%s", kvcal_test_path("run-b.h5"));
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --seed 5 --out '%s' --stats '%s'", a,
             ha);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    sleep(1); /* a clock tick apart: file times must not reach the outputs */
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --seed 5 --out '%s' --stats '%s'", b,
             hb);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT_TRUE(files_equal(a, b));
    CU_ASSERT_TRUE(files_equal(ha, hb));
    /* another batch size: per-token results do not depend on the batch (the
     * statistics do: EMA state and batch count are per batch) */
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL_ANY_BATCH
             " --seed 5 --batch 5 --out '%s'",
             b);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT_TRUE(files_equal(a, b));
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --seed 6 --out '%s'", b);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT_FALSE(files_equal(a, b));
}

static void calibrate_finds_its_default_text_from_any_directory(void)
{
    char model[PATH_MAX], cwd[PATH_MAX], args[2 * PATH_MAX];
    CU_ASSERT_FATAL(realpath(MODEL, model) != NULL);
    CU_ASSERT_FATAL(getcwd(cwd, sizeof cwd) != NULL);
    CU_ASSERT_FATAL(chdir(kvcal_test_tmpdir()) == 0);
    snprintf(args, sizeof args, "calibrate --model '%s' " SMALL " --out default.json",
             model);
    int rc = kvcal_test_run_kvcal(args, NULL);
    CU_ASSERT_FATAL(chdir(cwd) == 0);
    CU_ASSERT_EQUAL(rc, 0);
}

static void calibrate_rejects_seq_len_beyond_the_model_context(void)
{
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("calibrate --model " MODEL
                                         " --seq-len 513 --quiet "
                                         "--out /nonexistent/x.json",
                                         NULL),
                    1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("context of 512 tokens"));
}

static void calibrate_device_cuda_runs_or_says_why_it_cannot(void)
{
    if (kvcal_cuda_device_count() > 0) {
        char args[1024];
        snprintf(args, sizeof args,
                 "calibrate --model " MODEL " --device cuda " SMALL " --out '%s'",
                 kvcal_test_path("cuda.json"));
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    } else {
        CU_ASSERT_EQUAL(
            kvcal_test_run_kvcal("calibrate --model " MODEL " --device cuda", NULL), 2);
        CU_ASSERT(kvcal_test_kvcal_stderr_has("--device cuda: "));
    }
}

/* The CUDA runner's variables (KVCAL_ATTENTION, KVCAL_MLP, KVCAL_FP8_GEMM,
 * KVCAL_RESIDUAL) take the values they name: another is refused before
 * any work, naming the variable and the values, and nothing is written
 * (with a GPU or without). */
static void calibrate_refuses_a_runner_variable_value_it_does_not_take(void)
{
    static const char *const vars[][2] = {
        {"KVCAL_ATTENTION=cudnn", "KVCAL_ATTENTION=cudnn: use kvcal (or leave it unset)"},
        {"KVCAL_MLP=yes", "KVCAL_MLP=yes: use fused or unfused (or leave it unset)"},
        {"KVCAL_FP8_GEMM=bf16",
         "KVCAL_FP8_GEMM=bf16: use dequant or fast (or leave it unset)"},
        {"KVCAL_RESIDUAL=apart",
         "KVCAL_RESIDUAL=apart: use fused or unfused (or leave it unset)"}};
    const char *out = kvcal_test_path("variable.json");
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "%s \"$KVCAL\" calibrate --model " MODEL " --device cuda " SMALL
                 " --out '%s'",
                 vars[i][0], out);
        CU_ASSERT_EQUAL(kvcal_test_run_command(cmd, NULL), 1);
        CU_ASSERT(kvcal_test_kvcal_stderr_has(vars[i][1]));
        CU_ASSERT_EQUAL(access(out, F_OK), -1);
    }
}

/* --time-only runs the samples unobserved and reports the rate alone: no
 * scales, no outputs (on the CPU, and on a CUDA device where there is one);
 * it refuses the options that name an output. */
static void check_time_only(const char *device)
{
    char args[512], *out = NULL;
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --time-only --json --device %s",
             device);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    cJSON *root = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    CU_ASSERT(cJSON_IsFalse(cJSON_GetObjectItem(root, "observed")));
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(root, "num_tokens")->valuedouble, 6 * 48);
    CU_ASSERT(cJSON_GetObjectItem(root, "tokens_per_second")->valuedouble > 0.0);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(root, "outputs"));
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(root, "layers"));
    cJSON_Delete(root);
    free(out);
}

static void calibrate_time_only_reports_the_rate_and_writes_nothing(void)
{
    check_time_only("cpu");
    if (kvcal_cuda_device_count() > 0)
        check_time_only("cuda");
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("calibrate --model " MODEL " " SMALL
                                         " --time-only --out never.json",
                                         NULL),
                    2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--time-only writes nothing"));
    CU_ASSERT_EQUAL(access("never.json", F_OK), -1);
}

/* The op profile's count of an op's intervals in calibrate's JSON, -1 when absent. */
static double profile_calls(cJSON *root, const char *op)
{
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "op_profile"))
    {
        if (!strcmp(cJSON_GetObjectItem(e, "op")->valuestring, op))
            return cJSON_GetObjectItem(e, "ms")->valuedouble >= 0.0
                       ? cJSON_GetObjectItem(e, "calls")->valuedouble
                       : -2.0;
    }
    return -1.0;
}

/* --profile: each op's time in the summary (op_profile), every layer's ops
 * on each of the 2 batches, the last layer's up to its cache point; the
 * table on stdout without --json; nothing of it without --profile. */
static void calibrate_profile_reports_each_ops_time(void)
{
    char args[512], *out = NULL;
    snprintf(args, sizeof args, "calibrate --model " MODEL " " SMALL " --json --out '%s'",
             kvcal_test_path("plain.json"));
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    cJSON *root = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(root, "op_profile"));
    cJSON_Delete(root);
    free(out);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --profile --json --out '%s'",
             kvcal_test_path("profiled.json"));
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    root = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const int L = cJSON_GetArraySize(cJSON_GetObjectItem(root, "layers"));
    CU_ASSERT(L > 1);
    CU_ASSERT_EQUAL(profile_calls(root, "linear qkv"), 2 * L);
    CU_ASSERT_EQUAL(profile_calls(root, "attention"), 2 * (L - 1));
    CU_ASSERT_EQUAL(profile_calls(root, "swiglu gate_up"), 2 * (L - 1));
    cJSON_Delete(root);
    free(out);
    snprintf(args, sizeof args, "calibrate --model " MODEL " " SMALL " --profile --out '%s'",
             kvcal_test_path("profiled.json"));
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, &out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "op profile (host time"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "  linear qkv "));
    free(out);
}

/* The JSON's phases.progress_save_seconds of a run. */
static double progress_save_seconds(const char *save_every)
{
    char args[512], *out = NULL;
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --json --save-every %s --out '%s'",
             save_every, kvcal_test_path("saves.json"));
    if (kvcal_test_run_kvcal(args, &out) != 0) {
        free(out);
        return -1.0;
    }
    cJSON *root = cJSON_Parse(out);
    const cJSON *v =
        cJSON_GetObjectItem(cJSON_GetObjectItem(root, "phases"), "progress_save_seconds");
    const double s = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
    cJSON_Delete(root);
    free(out);
    return s;
}

/* The run's own time in its progress saves (the copy for the save's
 * thread, the waits for it) is reported: a run of 6 samples in batches of
 * 4 saving after every 4 saves once (after the first batch), one that
 * never saves reports 0. */
static void calibrate_reports_the_time_its_progress_saves_took(void)
{
    CU_ASSERT(progress_save_seconds("4") > 0.0);
    CU_ASSERT_EQUAL(progress_save_seconds("0"), 0.0);
}

/* A progress save that fails (a directory where its file goes) is a
 * warning: the run goes on to its outputs, and saves no more. */
static void calibrate_goes_on_when_a_progress_save_fails(void)
{
    char args[4096], blocker[4200];
    const char *out = kvcal_test_path("blocked.json");
    snprintf(blocker, sizeof blocker, "%s.kvcal-progress.h5", out);
    CU_ASSERT_EQUAL_FATAL(mkdir(blocker, 0755), 0);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " " SMALL " --save-every 4 --out '%s'", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("warning: progress not saved"));
    CU_ASSERT_EQUAL(access(out, F_OK), 0);
    rmdir(blocker);
}

static void calibrate_usage_errors_exit_2(void)
{
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("calibrate", NULL), 2);
    CU_ASSERT_EQUAL(
        kvcal_test_run_kvcal("calibrate --model " MODEL " --format xml", NULL), 2);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("calibrate --model " MODEL " --batch 0", NULL),
                    2);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("calibrate --help", NULL), 0);
    /* the seed is recorded in the kvcal JSON, whose numbers are exact to 2^53 */
    CU_ASSERT_EQUAL(
        kvcal_test_run_kvcal("calibrate --model " MODEL " --seed 9007199254740993", NULL),
        2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("[0, 9007199254740992]"));
    CU_ASSERT_EQUAL(
        kvcal_test_run_kvcal("calibrate --model " MODEL " --device gpu", NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--device 'gpu': expected cpu or cuda"));
}

/* An unsplittable --tp is refused before any sample is read or run (the
 * dataset here does not even exist), not after the whole calibration. */
static void calibrate_refuses_a_tp_the_kv_heads_cannot_split_before_running(void)
{
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("calibrate --model " MODEL " --format legacy "
                                         "--tp 3 --dataset no/such/file.txt --out x.json",
                                         NULL),
                    1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--tp 3: " MODEL " has 4 kv heads"));
}

/* A golden fp32 checkpoint whose layer-1 v_proj holds one Inf: V of layer 1
 * overflows (K of layer 1 and every layer-0 value stay finite). */
static void calibrate_refuses_nonfinite_v_naming_layer_head_and_sample(void)
{
    const char *src = "tests/fixtures/golden/llama_mha_linear_tied_fp32";
    const char *dir = kvcal_test_path("inf-model");
    char cmd[2048], path[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, src, dir);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t len = 0;
    char *buf = kvcal_test_read_file(path, &len);
    kvcal_safetensors_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_parse(buf, len, path, &st), KVCAL_OK);
    const kvcal_tensor_info *t =
        kvcal_safetensors_find(st, "model.layers.1.self_attn.v_proj.weight");
    CU_ASSERT_FATAL(t && t->dtype == KVCAL_DTYPE_F32);
    float inf = INFINITY;
    memcpy(buf + ((const char *)t->data - buf) + 17 * t->shape[1] * sizeof(float), &inf,
           sizeof inf); /* row 17: kv head 1 of head_dim 16 */
    kvcal_safetensors_close(st);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, buf, len), 0);
    free(buf);
    const char *ids = kvcal_test_path("ids.jsonl");
    const char *line = "{\"input_ids\": [5, 9, 17, 3, 100, 42, 7, 8]}\n";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(ids, line, strlen(line)), 0);
    snprintf(cmd, sizeof cmd,
             "calibrate --model '%s' --dataset '%s' --num-samples 1 --seq-len 8 --quiet "
             "--out '%s'",
             dir, ids, kvcal_test_path("never.json"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(cmd, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("layer 1 V kv head 1: sample 0"));
    CU_ASSERT_EQUAL(access(kvcal_test_path("never.json"), F_OK), -1);
}

/* --seq-len 1 with a tokenizer that adds BOS: every packed window was BOS
 * alone, and the run wrote scales of BOS only (exit 0, the text never
 * read); it is refused naming the dataset and the fix, nothing written.
 * Token ids (no BOS put in front) still run at --seq-len 1. */
static void calibrate_refuses_seq_len_1_that_leaves_no_room_after_bos(void)
{
    char args[2048];
    const char *out = kvcal_test_path("bos-only.json");
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --num-samples 4 --seq-len 1 --batch 2 --quiet "
             "--out '%s'",
             out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(
        "default_calibration.txt: --seq-len 1 leaves no room for text"));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--seq-len 2 or more"));
    CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0);
    const char *ids = kvcal_test_path("bos-only.jsonl");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_ids(ids, 2, 8, 512, 3), 0);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --dataset '%s' --num-samples 4 --seq-len 1 "
             "--quiet --out '%s'",
             ids, out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
}

/* Token ids past the model's vocabulary, with no tokenizer to check them,
 * are refused before the run naming the dataset, the sample and the fix
 * (found only in the forward pass before, naming neither). */
static void calibrate_refuses_token_ids_past_the_vocabulary_naming_the_dataset(void)
{
    char cmd[2048];
    const char *model = kvcal_test_model_without_tokenizer("no-tokenizer");
    const char *ids = kvcal_test_path("past-vocab.jsonl");
    const char *line = "{\"input_ids\": [5, 9, 600, 3]}\n";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(ids, line, strlen(line)), 0);
    const char *out = kvcal_test_path("past-vocab.json");
    snprintf(cmd, sizeof cmd,
             "calibrate --model '%s' --dataset '%s' --num-samples 1 --seq-len 4 --quiet "
             "--out '%s'",
             model, ids, out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(cmd, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(
        "past-vocab.jsonl: token id 600 (sample 0, position 2) is outside the "
        "vocabulary"));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--tokenizer"));
    CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0);
}

// --- resuming -------------------------------------------------------------------

static int same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = kvcal_test_read_file(a, &na), *y = kvcal_test_read_file(b, &nb);
    const int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

#define RESUME_RUN                                                                        \
    "calibrate --model " MODEL " --num-samples 96 --seq-len 256 --batch 4 --save-every 8 " \
    "--observer ema:0.9 --granularity head --quiet"

/* A run stopped by SIGINT after a chunk keeps its progress beside --out and
 * says how to go on; the same command with --resume gives scales and
 * statistics byte-identical to a run never stopped, and removes the
 * progress. */
static void calibrate_interrupted_then_resumed_equals_an_uninterrupted_run(void)
{
    char args[4096], cmd[8192];
    const char *a = kvcal_test_path("whole.json"), *ah = kvcal_test_path("whole.h5");
    const char *b = kvcal_test_path("resumed.json"), *bh = kvcal_test_path("resumed.h5");
    const char *err = kvcal_test_path("resumed.err");
    snprintf(args, sizeof args, RESUME_RUN " --out '%s' --stats '%s'", a, ah);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    /* the same run in the background, SIGINT once its first progress is saved */
    snprintf(cmd, sizeof cmd,
             "'%s/kvcal' " RESUME_RUN " --out '%s' --stats '%s' 2>'%s' & pid=$!; "
             "i=0; while [ ! -e '%s.kvcal-progress.json' ] && [ $i -lt 2000 ]; do "
             "sleep 0.005; i=$((i+1)); done; kill -INT $pid; wait $pid",
             kvcal_test_build_dir(), b, bh, err, b);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    char *text = kvcal_test_read_file(err, NULL);
    if (rc == 0) {
        /* the machine finished the run before the signal arrived: nothing to resume */
        printf("(the run ended before the signal) ");
        CU_ASSERT(same_file(a, b));
        free(text);
        return;
    }
    CU_ASSERT_EQUAL(rc, 2);
    CU_ASSERT_PTR_NOT_NULL(text && strstr(text, "interrupted after"));
    CU_ASSERT_PTR_NOT_NULL(text && strstr(text, "--resume"));
    free(text);
    CU_ASSERT_NOT_EQUAL(access(b, F_OK), 0);
    snprintf(args, sizeof args, RESUME_RUN " --out '%s' --stats '%s' --resume", b, bh);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT(same_file(a, b));
    CU_ASSERT(same_file(ah, bh));
    snprintf(cmd, sizeof cmd, "%s.kvcal-progress.json", b);
    CU_ASSERT_NOT_EQUAL(access(cmd, F_OK), 0);
    snprintf(cmd, sizeof cmd, "%s.kvcal-progress.h5", b);
    CU_ASSERT_NOT_EQUAL(access(cmd, F_OK), 0);
}

/* --resume with no progress, or another run's, is an error that says so. */
static void calibrate_resume_refuses_missing_or_foreign_progress(void)
{
    char args[4096];
    const char *out = kvcal_test_path("foreign.json");
    snprintf(args, sizeof args, RESUME_RUN " --out '%s' --resume", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("no progress of an earlier run"));
    char run[512];
    snprintf(run, sizeof run, "%s.kvcal-progress.json", out);
    const char *json = "{\"format\": \"kvcal-progress\", \"format_version\": 1, "
                       "\"samples_done\": 8, \"run\": {\"model\": \"other\"}}";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(run, json, strlen(json)), 0);
    snprintf(run, sizeof run, "%s.kvcal-progress.h5", out);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(run, "x", 1), 0);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("is of another run (\"model\" differs)"));
}

/* A small run whose progress files a test writes itself: its identity as
 * calibrate records it (stories260K: 5 layers, 4 kv heads of 8 channels). */
#define SMALL_RESUME_RUN                                                                 \
    "calibrate --model " MODEL " --dataset datasets/default_calibration.txt "            \
    "--num-samples 16 --seq-len 32 --batch 4 --save-every 4 --quiet"
#define SMALL_RESUME_ID                                                                  \
    "{\"model\": \"" MODEL "\", \"dataset\": \"datasets/default_calibration.txt\", "     \
    "\"text_field\": \"\", \"tokenizer\": \"\", \"num_samples\": 16, \"seq_len\": 32, "  \
    "\"batch\": 4, \"seed\": 0, \"observer\": \"minmax\", \"q_scale\": false, "          \
    "\"signed_range\": false, \"num_tokens\": 512}"

/* Writes the progress of --out out: the JSON with format_version version and
 * samples_done done (as written), and statistics of `batches` batches of
 * the model named architecture (NULL: no statistics file). */
static int write_progress(const char *out, const char *version, const char *done,
                          const char *architecture, long long batches)
{
    char path[4200], json[2048];
    snprintf(path, sizeof path, "%s.kvcal-progress.json", out);
    snprintf(json, sizeof json,
             "{\"format\": \"kvcal-progress\", \"format_version\": %s, \"samples_done\": "
             "%s, \"run\": " SMALL_RESUME_ID "}",
             version, done);
    if (kvcal_test_write_file(path, json, strlen(json)))
        return -1;
    snprintf(path, sizeof path, "%s.kvcal-progress.h5", out);
    remove(path);
    if (!architecture)
        return 0;
    kvcal_stats_t *s = NULL;
    kvcal_model_identity id = {
        .num_layers = 5, .num_attention_heads = 8, .num_kv_heads = 4, .head_dim = 8};
    snprintf(id.architecture, sizeof id.architecture, "%s", architecture);
    snprintf(id.model_type, sizeof id.model_type, "llama");
    if (kvcal_stats_create(5, 4, 8, &s))
        return -1;
    s->batches = batches;
    const kvcal_status st = kvcal_stats_write_hdf5(path, s, &id, NULL);
    kvcal_stats_destroy(s);
    return st ? -1 : 0;
}

/* Progress a run would resume wrongly from is refused, naming the file and
 * the field: another format version, a samples_done that is no whole
 * number of batches, statistics of another moment of the run (the JSON
 * saved a chunk earlier or later than them) or of another model, and a
 * statistics file that is missing. The same files made right resume. */
static void calibrate_resume_refuses_progress_that_disagrees_with_itself(void)
{
    char args[4400], h5[4200];
    const char *out = kvcal_test_path("disagrees.json");
    snprintf(args, sizeof args, SMALL_RESUME_RUN " --out '%s' --resume", out);
    snprintf(h5, sizeof h5, "%s.kvcal-progress.h5", out);
    static const struct {
        const char *version, *done, *architecture;
        long long batches;
        int rc;
        const char *says;
    } cases[] = {
        {"2", "4", "LlamaForCausalLM", 1, 1, "format_version: not 1"},
        {"\"1\"", "4", "LlamaForCausalLM", 1, 1, "format_version: not 1"},
        {"1", "4.5", "LlamaForCausalLM", 1, 1, "samples_done: not a whole number"},
        {"1", "1e999", "LlamaForCausalLM", 1, 1, "out of the range of a double"},
        {"1", "8", "LlamaForCausalLM", 1, 1, "were not saved together"},
        {"1", "4", "LlamaForCausalLM", 2, 1, "were not saved together"},
        {"1", "4", "MistralForCausalLM", 1, 1, "(\"architecture\" differs"},
        {"1", "4", NULL, 0, 2, "kvcal-progress.h5: missing, though"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CU_ASSERT_EQUAL_FATAL(write_progress(out, cases[i].version, cases[i].done,
                                             cases[i].architecture, cases[i].batches),
                              0);
        remove(out);
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), cases[i].rc);
        CU_ASSERT(kvcal_test_kvcal_stderr_has(cases[i].says));
        CU_ASSERT(kvcal_test_kvcal_stderr_has("leave out --resume"));
        CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0);
    }
    CU_ASSERT_EQUAL_FATAL(write_progress(out, "1", "4", "LlamaForCausalLM", 1), 0);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT_EQUAL(access(out, F_OK), 0);
    CU_ASSERT_NOT_EQUAL(access(h5, F_OK), 0);
}

/* An output or an input given the name of a progress file of the run
 * (--stats OUT.kvcal-progress.h5, --report OUT.kvcal-progress.json, a
 * dataset of that name) is refused before the run, naming the option and
 * the fix: the run's saves wrote over it (an interrupted run left partial
 * statistics at --stats; a dataset was overwritten, then removed). With
 * --save-every 0 no progress is kept, and the name is free. */
static void calibrate_refuses_an_output_or_input_named_like_its_progress(void)
{
    char args[9000], stats[4200], report[4200], data[4200];
    const char *out = kvcal_test_path("named_like.json");
    snprintf(stats, sizeof stats, "%s.kvcal-progress.h5", out);
    snprintf(report, sizeof report, "%s.kvcal-progress.json", out);
    snprintf(args, sizeof args, SMALL_RESUME_RUN " --out '%s' --stats '%s'", out, stats);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--stats "));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("give --stats another path"));
    CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0);
    CU_ASSERT_NOT_EQUAL(access(stats, F_OK), 0);
    snprintf(args, sizeof args, SMALL_RESUME_RUN " --out '%s' --report '%s'", out,
             report);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("give --report another path"));
    CU_ASSERT_NOT_EQUAL(access(report, F_OK), 0);
    /* a dataset of that name: saved over after the first chunk, then removed */
    snprintf(data, sizeof data, "%s", report);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_ids(data, 16, 32, 512, 7), 0);
    size_t n0 = 0, n1 = 0;
    char *before = kvcal_test_read_file(data, &n0);
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --dataset '%s' --num-samples 16 --seq-len 32 "
             "--batch 4 --save-every 4 --quiet --out '%s'",
             data, out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("--dataset "));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("give --out another path"));
    char *after = kvcal_test_read_file(data, &n1);
    CU_ASSERT(before && after && n0 == n1 && !memcmp(before, after, n0));
    free(before);
    free(after);
    remove(data);
    /* no progress kept: the name is an ordinary output */
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --dataset datasets/default_calibration.txt "
             "--num-samples 16 --seq-len 32 --batch 4 --save-every 0 --quiet --out '%s' "
             "--stats '%s'",
             out, stats);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    kvcal_stats_t *s = NULL;
    CU_ASSERT_EQUAL(kvcal_stats_read_hdf5(stats, &s, NULL, NULL), KVCAL_OK);
    CU_ASSERT(s && s->batches == 4); /* all 16 samples */
    kvcal_stats_destroy(s);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(calibrate_interrupted_then_resumed_equals_an_uninterrupted_run),
    KVCAL_TEST(calibrate_resume_refuses_missing_or_foreign_progress),
    KVCAL_TEST(calibrate_resume_refuses_progress_that_disagrees_with_itself),
    KVCAL_TEST(calibrate_refuses_an_output_or_input_named_like_its_progress),
    KVCAL_TEST(calibrate_writes_every_format_and_each_validates),
    KVCAL_TEST(calibrate_refuses_a_runner_variable_value_it_does_not_take),
    KVCAL_TEST(calibrate_is_byte_identical_for_same_inputs_and_seed),
    KVCAL_TEST(calibrate_finds_its_default_text_from_any_directory),
    KVCAL_TEST(calibrate_rejects_seq_len_beyond_the_model_context),
    KVCAL_TEST(calibrate_device_cuda_runs_or_says_why_it_cannot),
    KVCAL_TEST(calibrate_profile_reports_each_ops_time),
    KVCAL_TEST(calibrate_reports_the_time_its_progress_saves_took),
    KVCAL_TEST(calibrate_goes_on_when_a_progress_save_fails),
    KVCAL_TEST(calibrate_usage_errors_exit_2),
    KVCAL_TEST(calibrate_time_only_reports_the_rate_and_writes_nothing),
    KVCAL_TEST(calibrate_refuses_a_tp_the_kv_heads_cannot_split_before_running),
    KVCAL_TEST(calibrate_refuses_nonfinite_v_naming_layer_head_and_sample),
    KVCAL_TEST(calibrate_refuses_seq_len_1_that_leaves_no_room_after_bos),
    KVCAL_TEST(calibrate_refuses_token_ids_past_the_vocabulary_naming_the_dataset),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(calibrate, KVCAL_NEEDS_NOTHING, tests)
