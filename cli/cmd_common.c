/* cli/cmd_common.c: helpers shared by the commands (see the header). It
 * defines no command of its own. */
#include "cli/cmd_common.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/command.h"
#include "core/status.h"
#include "io/scales/scales_io.h"
#include "io/tokenizer/tokenizer.h"

int kvcal_cmd_parse_ll(const char *cmd, const char *opt, const char *text, long long lo,
                       long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || end == text || v < lo || v > hi) {
        fprintf(stderr, "kvcal %s: %s '%s': expected an integer in [%lld, %lld]\n", cmd,
                opt, text, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int kvcal_cmd_parse_size(const char *cmd, const char *opt, const char *text,
                         unsigned long long *out)
{
    char *end = NULL;
    errno = 0;
    const double v = strtod(text, &end);
    double mult = 1.0;
    if (end && *end) {
        static const char units[] = "KMGT";
        const char *u = strchr(units, toupper((unsigned char)*end));
        if (u && *end) {
            for (int i = 0; i <= u - units; i++)
                mult *= 1024.0;
            end++;
            if (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "ib") ||
                !strcmp(end, "b"))
                end += strlen(end);
        }
    }
    const double bytes = v * mult;
    if (end == text || (end && *end) || errno || !(bytes >= 1048576.0) || bytes > 1e18) {
        fprintf(stderr,
                "kvcal %s: %s '%s': expected a size of at least 1M, such as 40G, 4096M "
                "or 4GiB\n",
                cmd, opt, text);
        return -1;
    }
    *out = (unsigned long long)bytes;
    return 0;
}

int kvcal_cmd_parse_int(const char *cmd, const char *opt, const char *text, int lo,
                        int hi, int *out)
{
    long long v;
    if (kvcal_cmd_parse_ll(cmd, opt, text, lo, hi, &v))
        return -1;
    *out = (int)v;
    return 0;
}

int kvcal_cmd_parse_path(const char *cmd, const char *opt, const char *text,
                         const char **out)
{
    if (!text[0]) {
        fprintf(stderr, "kvcal %s: %s: empty path; give a file or directory name\n", cmd,
                opt);
        return -1;
    }
    *out = text;
    return 0;
}

int kvcal_cmd_mark_option(const char *cmd, const struct option *longopts, int c,
                          const char *arg, kvcal_cmd_seen_options *seen)
{
    for (int i = 0; longopts[i].name; i++) {
        if (longopts[i].flag || longopts[i].val != c)
            continue;
        if (i >= KVCAL_CMD_MAX_OPTIONS) {
            fprintf(stderr,
                    "kvcal %s: --%s: more than %d options to track (a bug in kvcal); "
                    "please report it\n",
                    cmd, longopts[i].name, KVCAL_CMD_MAX_OPTIONS);
            return -1;
        }
        const kvcal_cmd_seen_options bit = 1ull << i;
        if (!(*seen & bit)) {
            *seen |= bit;
            return 0;
        }
        if (longopts[i].has_arg == no_argument || !arg)
            fprintf(stderr, "kvcal %s: --%s given twice; give it once\n", cmd,
                    longopts[i].name);
        else
            fprintf(stderr,
                    "kvcal %s: --%s given twice (the second '%s'); give it once\n", cmd,
                    longopts[i].name, arg);
        return -1;
    }
    return 0;
}

/* Stores option c with value arg into o when it is one of the KVCAL_OPT_*
 * run options but --help: 1 when stored, 0 for another option, -1 for a bad
 * value (message printed). */
static int run_option(const char *cmd, int c, const char *arg, int min_seq_len,
                      kvcal_cmd_run_options *o)
{
    switch (c) {
    case KVCAL_OPT_MODEL:
        return kvcal_cmd_parse_path(cmd, "--model", arg, &o->model) ? -1 : 1;
    case KVCAL_OPT_DATASET:
        return kvcal_cmd_parse_path(cmd, "--dataset", arg, &o->dataset) ? -1 : 1;
    case KVCAL_OPT_TOKENIZER:
        return kvcal_cmd_parse_path(cmd, "--tokenizer", arg, &o->tokenizer) ? -1 : 1;
    case KVCAL_OPT_TEXT_FIELD:
        o->text_field = arg;
        return 1;
    case KVCAL_OPT_MAX_DEVICE_MEMORY:
        return kvcal_cmd_parse_size(cmd, "--max-device-memory", arg,
                                    &o->max_device_memory)
                   ? -1
                   : 1;
    case KVCAL_OPT_DEVICE:
        if (strcmp(arg, "cpu") && strcmp(arg, "cuda")) {
            fprintf(stderr, "kvcal %s: --device '%s': expected cpu or cuda\n", cmd, arg);
            return -1;
        }
        o->cuda = !strcmp(arg, "cuda");
        return 1;
    case KVCAL_OPT_QUIET:
        o->quiet = 1;
        return 1;
    case KVCAL_OPT_JSON:
        o->json = 1;
        return 1;
    case KVCAL_OPT_SAMPLES:
        return kvcal_cmd_parse_int(cmd, "--num-samples", arg, 1, KVCAL_CMD_INT_MAX,
                                   &o->num_samples)
                   ? -1
                   : 1;
    case KVCAL_OPT_SEQ:
        return kvcal_cmd_parse_int(cmd, "--seq-len", arg, min_seq_len, KVCAL_CMD_INT_MAX,
                                   &o->seq_len)
                   ? -1
                   : 1;
    case KVCAL_OPT_BATCH:
        return kvcal_cmd_parse_int(cmd, "--batch", arg, 1, KVCAL_CMD_INT_MAX, &o->batch)
                   ? -1
                   : 1;
    case KVCAL_OPT_TP:
        return kvcal_cmd_parse_int(cmd, "--tp", arg, 1, KVCAL_TP_MAX, &o->tp) ? -1 : 1;
    case KVCAL_OPT_SEED:
        return kvcal_cmd_parse_ll(cmd, "--seed", arg, 0, KVCAL_CMD_SEED_MAX, &o->seed)
                   ? -1
                   : 1;
    default:
        return 0;
    }
}

int kvcal_cmd_parse_run_argv(const char *cmd, int argc, char **argv,
                             const struct option *longopts, int min_seq_len,
                             kvcal_cmd_run_options *run, kvcal_cmd_own_option own,
                             void *ctx)
{
    int c;
    kvcal_cmd_seen_options seen = 0;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h' || c == KVCAL_OPT_HELP)
            return 1;
        if (kvcal_cmd_mark_option(cmd, longopts, c, optarg, &seen))
            return -1;
        int took = run_option(cmd, c, optarg, min_seq_len, run);
        if (!took)
            took = own(c, optarg, ctx);
        if (took < 0)
            return -1;
        if (!took) {
            fprintf(stderr, "kvcal %s: unknown or incomplete option '%s' (see --help)\n",
                    cmd, argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kvcal %s: unexpected argument '%s' (see --help)\n", cmd,
                argv[optind]);
        return -1;
    }
    return 0;
}

/* Every id of the samples inside the model's vocabulary of `vocab`, before
 * any work: token ids taken verbatim with no tokenizer to check them were
 * found out of range only in the forward pass (calibrate's and eval's), by
 * an error that named neither the dataset nor the fix. */
static kvcal_status check_sample_ids(const kvcal_samples *s, int vocab,
                                     const char *dataset, const char *model)
{
    for (int i = 0; i < s->num_samples; i++)
        for (int k = 0; k < s->lengths[i]; k++) {
            const int32_t id = s->ids[(size_t)i * s->seq_len + k];
            if (id < 0 || id >= vocab)
                return kvcal_fail(
                    KVCAL_ERR_MISMATCH,
                    "%s: token id %d (sample %d, position %d) is outside the vocabulary "
                    "of %s (%d tokens, ids 0 to %d): were these ids made with another "
                    "model's tokenizer? (give the model's own with --tokenizer to have "
                    "each id checked by line)",
                    dataset, id, i, k, model, vocab, vocab - 1);
        }
    return KVCAL_OK;
}

kvcal_status kvcal_cmd_load_samples(const char *cmd, const char *model_path,
                                    int vocab_size, const char *tokenizer,
                                    const char *dataset, const kvcal_dataset_options *opt,
                                    kvcal_samples **out)
{
    kvcal_tokenizer_t *tok = NULL;
    char tok_error[1024] = "";
    kvcal_status st = kvcal_tokenizer_find(model_path, tokenizer, &tok);
    if (st) {
        if (tokenizer)
            return st;
        snprintf(tok_error, sizeof tok_error, "%s", kvcal_last_error());
    }
    if (tok && kvcal_tokenizer_vocab_size(tok) > vocab_size)
        st = kvcal_fail(KVCAL_ERR_MISMATCH,
                        "the tokenizer has %d tokens but the model's vocabulary has %d: "
                        "wrong --tokenizer for %s?",
                        kvcal_tokenizer_vocab_size(tok), vocab_size, model_path);
    else if ((st = kvcal_dataset_load(dataset, tok, opt, out)) && tok_error[0])
        fprintf(stderr, "kvcal %s: note: no tokenizer: %s\n", cmd, tok_error);
    else if (!st && (st = check_sample_ids(*out, vocab_size, dataset, model_path))) {
        kvcal_samples_destroy(*out);
        *out = NULL;
    }
    kvcal_tokenizer_destroy(tok);
    return st;
}

int kvcal_cmd_run_exit_code(kvcal_status st)
{
    return st == KVCAL_ERR_IO || st == KVCAL_ERR_NO_DEVICE || st == KVCAL_ERR_NOMEM ||
                   st == KVCAL_ERR_INTERRUPTED
               ? KVCAL_EXIT_USAGE
               : KVCAL_EXIT_INVALID;
}

int kvcal_cmd_file_exit_code(kvcal_status st)
{
    return st == KVCAL_ERR_IO || st == KVCAL_ERR_INVALID_ARG ? KVCAL_EXIT_USAGE
                                                             : KVCAL_EXIT_INVALID;
}

double kvcal_cmd_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* *choice: 1 or 2 where the environment variable `name` holds a or b (b
 * NULL: a alone is taken), 0 where it is unset or empty; any other value is
 * refused naming the ones it takes. */
static kvcal_status env_choice(const char *name, const char *a, const char *b,
                               int *choice)
{
    const char *v = getenv(name);
    *choice = !v || !*v ? 0 : !strcmp(v, a) ? 1 : b && !strcmp(v, b) ? 2 : -1;
    if (*choice >= 0)
        return KVCAL_OK;
    return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s=%s: use %s%s%s (or leave it unset)",
                      name, v, a, b ? " or " : "", b ? b : "");
}

kvcal_status kvcal_cmd_exec_options(const kvcal_cmd_run_options *run, int batch,
                                    int seq_len, kvcal_exec_options *out)
{
    memset(out, 0, sizeof *out);
    out->device = run->cuda ? KVCAL_DEVICE_CUDA : KVCAL_DEVICE_CPU;
    out->backend.max_batch = batch;
    out->backend.max_seq_len = seq_len;
    out->backend.max_device_memory = (size_t)run->max_device_memory;
    if (!run->cuda)
        return KVCAL_OK;
    int attention = 0, mlp = 0, fp8 = 0, residual = 0;
    kvcal_status st = env_choice("KVCAL_ATTENTION", "kvcal", NULL, &attention);
    if (!st)
        st = env_choice("KVCAL_MLP", "fused", "unfused", &mlp);
    if (!st)
        st = env_choice("KVCAL_FP8_GEMM", "dequant", "fast", &fp8);
    if (!st)
        st = env_choice("KVCAL_RESIDUAL", "fused", "unfused", &residual);
    if (st)
        return st;
    out->backend.attention = attention ? KVCAL_ATTENTION_OWN : KVCAL_ATTENTION_AUTO;
    out->backend.mlp = mlp == 1 ? KVCAL_MLP_FUSED
                       : mlp    ? KVCAL_MLP_UNFUSED
                                : KVCAL_MLP_AUTO;
    out->backend.fp8_dequant = fp8 == 1;
    out->backend.fp8_fast_accum = fp8 == 2;
    out->backend.residual_unfused = residual == 2;
    return KVCAL_OK;
}

// --- scales formats -----------------------------------------------------------

int kvcal_cmd_parse_format(const char *name, kvcal_format *out)
{
    static const struct {
        const char *name;
        kvcal_format format;
    } names[] = {
        {"legacy", KVCAL_FORMAT_LEGACY_JSON},
        {"kvcal", KVCAL_FORMAT_KVCAL_JSON},
        {"checkpoint", KVCAL_FORMAT_CHECKPOINT},
        {"modelopt", KVCAL_FORMAT_MODELOPT},
        {"quark", KVCAL_FORMAT_QUARK},
        {"kv-scale", KVCAL_FORMAT_KV_SCALE},
        {"trtllm", KVCAL_FORMAT_TRTLLM},
        {"ascend", KVCAL_FORMAT_ASCEND},
        {"compressed-tensors", KVCAL_FORMAT_CHECKPOINT},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i].name)) {
            *out = names[i].format;
            return 0;
        }
    return -1;
}

int kvcal_cmd_dir_files(kvcal_format f, const char *model_dir, const char **names,
                        int max)
{
    if (f == KVCAL_FORMAT_TRTLLM) {
        int n = 0;
        if (n < max)
            names[n++] = "config.json";
        if (n < max)
            names[n++] = "rank0.safetensors";
        return n;
    }
    if (f == KVCAL_FORMAT_ASCEND)
        return kvcal_scales_ascend_files(names, max);
    return kvcal_format_is_dir(f)
               ? kvcal_scales_checkpoint_files(f, model_dir, names, max)
               : 0;
}

void kvcal_cmd_note_config_engines_ignore(const char *cmd, const kvcal_model_desc *d)
{
    if (d->sparse_topk > 0)
        fprintf(stderr,
                "kvcal %s: note: %s runs DeepSeek Sparse Attention: vLLM and sglang "
                "keep its fp8 cache as fp8_ds_mla (the latent in tiles of 128 under "
                "scales computed as each token is written, the RoPE part in bf16) and "
                "read no k_scale for it; eval --modes fp8-ds-mla measures that cache\n",
                cmd, d->architecture);
    if (strcmp(d->architecture, "GptOssForCausalLM") ||
        (d->swiglu_limit == 7.0f && d->swiglu_alpha == 1.702f))
        return;
    fprintf(stderr,
            "kvcal %s: note: config.json's swiglu_limit %g and swiglu_alpha %g are "
            "what kvcal runs (as transformers 5.24 does); vLLM serves gpt-oss's "
            "experts with 7 and 1.702 whatever the config says, so its K and V "
            "after the first layer would differ from these\n",
            cmd, (double)d->swiglu_limit, (double)d->swiglu_alpha);
}

kvcal_status kvcal_cmd_check_sparse_seq_len(int seq_len, const kvcal_model_desc *d)
{
    if (d->sparse_topk <= 0 || seq_len <= d->sparse_topk)
        return KVCAL_OK;
    return kvcal_fail(
        KVCAL_ERR_UNSUPPORTED,
        "--seq-len %d: %s's sparse attention keeps %d keys a query "
        "(index_topk), and kvcal runs no indexer: up to that many tokens a "
        "sample attends to every key, as kvcal runs it; use --seq-len %d or "
        "less",
        seq_len, d->architecture, d->sparse_topk, d->sparse_topk);
}
