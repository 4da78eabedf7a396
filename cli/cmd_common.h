/* cli/cmd_common.h: what several commands share: option values parsed with
 * one message style, the exit code of a failed model run, a monotonic clock.
 * Part of the kvcal program (these print), not of the library. */
#ifndef KVCAL_CALIB_CMD_COMMON_H
#define KVCAL_CALIB_CMD_COMMON_H

#include <getopt.h>

#include "calib/executor.h"
#include "io/dataset/dataset.h"
#include "kvcal.h"

/* The largest count an option takes: no limit a user would meet. */
#define KVCAL_CMD_INT_MAX (1 << 30)
/* Largest --seed: 2^53, the largest integer a JSON number (the kvcal
 * scales file records the seed) holds exactly. */
#define KVCAL_CMD_SEED_MAX 9007199254740992LL

/* Parses text (the value of option `opt` of command `cmd`) as a decimal
 * integer in [lo, hi] into *out. On failure prints "kvcal <cmd>: <opt>
 * '<text>': expected an integer in [lo, hi]" (the limits named, whatever
 * they are) to stderr and returns -1; else 0. */
int kvcal_cmd_parse_ll(const char *cmd, const char *opt, const char *text, long long lo,
                       long long hi, long long *out);
/* kvcal_cmd_parse_ll for an int option. */
int kvcal_cmd_parse_int(const char *cmd, const char *opt, const char *text, int lo,
                        int hi, int *out);
/* Parses a size ("4G", "4GiB", "512M", "1.5G", "300000000"; K, M, G, T
 * with or without "iB"/"B" are powers of 1024) of option `opt` into *out
 * (bytes, >= 1 MiB). A bad one prints "kvcal <cmd>: <opt> '<text>': ..."
 * and returns -1. */
int kvcal_cmd_parse_size(const char *cmd, const char *opt, const char *text,
                         unsigned long long *out);

/* Stores text (the path given to option or argument `opt` of command `cmd`)
 * into *out. An empty path prints "kvcal <cmd>: <opt>: empty path; give a
 * file or directory name" to stderr and returns -1 (a usage error, found
 * before any work is done); else 0. */
int kvcal_cmd_parse_path(const char *cmd, const char *opt, const char *text,
                         const char **out);

/* The entries of a command's longopts table given so far, for
 * kvcal_cmd_mark_option (bit i: entry i); 0 before the first option. */
typedef unsigned long long kvcal_cmd_seen_options;
/* The most entries a longopts table kvcal_cmd_mark_option reads may have. */
#define KVCAL_CMD_MAX_OPTIONS 64

/* Marks option c (a getopt_long result; arg: its optarg) of command `cmd`
 * as given in *seen. Every option of a kvcal command is given at most
 * once: when the entry of longopts whose val is c was given before, prints
 * "kvcal <cmd>: --<name> given twice (the second '<arg>'); give it once"
 * (no value named for an option that takes none) and returns -1, a usage
 * error; else 0. A short option and its long name are one option. A c that
 * no entry has ('?', ':', a short option without a long name) is left to
 * the caller: 0. No kvcal option is repeatable (a list is one
 * comma-separated value, as eval's --modes); one that were would not be
 * passed here. A table longer than KVCAL_CMD_MAX_OPTIONS is a bug: a
 * message and -1 for an option past the limit. */
int kvcal_cmd_mark_option(const char *cmd, const struct option *longopts, int c,
                          const char *arg, kvcal_cmd_seen_options *seen);

// --- options of the commands that run a model over samples ------------------

/* What calibrate and eval both take; each sets its own defaults. */
typedef struct kvcal_cmd_run_options {
    const char *model, *dataset, *tokenizer;
    const char *text_field; /* --text-field: JSONL text field, NULL for "text" */
    unsigned long long max_device_memory; /* --max-device-memory bytes, 0: unset */
    int cuda;                             /* --device cuda (default cpu) */
    int num_samples, seq_len, batch, tp, quiet, json;
    long long seed;
} kvcal_cmd_run_options;

/* getopt_long values of those options; a command numbers its own options
 * from KVCAL_OPT_RUN_END on. */
enum {
    KVCAL_OPT_MODEL = 256,
    KVCAL_OPT_DATASET,
    KVCAL_OPT_TOKENIZER,
    KVCAL_OPT_TEXT_FIELD,
    KVCAL_OPT_SAMPLES,
    KVCAL_OPT_SEQ,
    KVCAL_OPT_BATCH,
    KVCAL_OPT_TP,
    KVCAL_OPT_SEED,
    KVCAL_OPT_DEVICE,
    KVCAL_OPT_MAX_DEVICE_MEMORY,
    KVCAL_OPT_QUIET,
    KVCAL_OPT_JSON,
    KVCAL_OPT_HELP,
    KVCAL_OPT_RUN_END
};

/* Their struct option entries, for a command's longopts table. */
// clang-format off
#define KVCAL_CMD_RUN_LONGOPTS                                    \
    {"model", required_argument, 0, KVCAL_OPT_MODEL},             \
    {"dataset", required_argument, 0, KVCAL_OPT_DATASET},         \
    {"tokenizer", required_argument, 0, KVCAL_OPT_TOKENIZER},     \
    {"text-field", required_argument, 0, KVCAL_OPT_TEXT_FIELD},   \
    {"num-samples", required_argument, 0, KVCAL_OPT_SAMPLES},     \
    {"seq-len", required_argument, 0, KVCAL_OPT_SEQ},             \
    {"batch", required_argument, 0, KVCAL_OPT_BATCH},             \
    {"tp", required_argument, 0, KVCAL_OPT_TP},                   \
    {"seed", required_argument, 0, KVCAL_OPT_SEED},               \
    {"device", required_argument, 0, KVCAL_OPT_DEVICE},           \
    {"max-device-memory", required_argument, 0, KVCAL_OPT_MAX_DEVICE_MEMORY}, \
    {"quiet", no_argument, 0, KVCAL_OPT_QUIET},                   \
    {"json", no_argument, 0, KVCAL_OPT_JSON},                     \
    {"help", no_argument, 0, KVCAL_OPT_HELP}
// clang-format on

/* A command's own option c (a getopt_long result) with value arg, for
 * kvcal_cmd_parse_run_argv: returns 1 when it took it, 0 when c is not one
 * of its options, -1 for a bad value (message "kvcal <cmd>: ..." printed). */
typedef int (*kvcal_cmd_own_option)(int c, const char *arg, void *ctx);

/* getopt_long over argv (longopts: KVCAL_CMD_RUN_LONGOPTS and the command's
 * own) for a command that runs a model over samples and takes no operands:
 * the options above go into *run (--seq-len must be >= min_seq_len), every
 * other one to own(c, optarg, ctx). Returns 1 for --help or -h, -1 for a
 * usage error (a bad value, an unknown or incomplete option, an option given
 * twice (kvcal_cmd_mark_option), an operand; one line "kvcal <cmd>: ..."
 * printed), 0 otherwise. */
int kvcal_cmd_parse_run_argv(const char *cmd, int argc, char **argv,
                             const struct option *longopts, int min_seq_len,
                             kvcal_cmd_run_options *run, kvcal_cmd_own_option own,
                             void *ctx);

/* Loads `dataset` as samples of opt for the model at model_path (vocabulary
 * of vocab_size tokens), tokenized with `tokenizer` or else the tokenizer
 * found beside the model. A tokenizer that is not found is an error when it
 * was named, or when the dataset needs one (then a note on stderr, "kvcal
 * <cmd>: note: no tokenizer: ...", says why none was found); a tokenizer
 * larger than the vocabulary is an error, and so is a sample's token id
 * outside the vocabulary (named by dataset, sample and position). *out:
 * caller destroys. */
kvcal_status kvcal_cmd_load_samples(const char *cmd, const char *model_path,
                                    int vocab_size, const char *tokenizer,
                                    const char *dataset, const kvcal_dataset_options *opt,
                                    kvcal_samples **out);

/* The executor's options for a run of batches of `batch` samples of
 * seq_len tokens on run's device; on cuda the kernel choices come from the
 * environment: KVCAL_ATTENTION=kvcal (kvcal's attention kernel, not
 * cuDNN's), KVCAL_MLP=fused|unfused (insist on, or leave out, the fused
 * gate/up + SwiGLU kernel). Any other value of either is
 * KVCAL_ERR_INVALID_ARG naming it. */
kvcal_status kvcal_cmd_exec_options(const kvcal_cmd_run_options *run, int batch,
                                    int seq_len, kvcal_exec_options *out);

/* Notes on stderr ("kvcal <cmd>: note: ...") where the model's config holds
 * values kvcal runs but the engines do not read: gpt-oss's swiglu_limit and
 * swiglu_alpha other than 7 and 1.702 (vLLM's experts kernel has those
 * two fixed; schemas/README.md); and where the engines' fp8 cache of the
 * model reads no scale: DeepSeek Sparse Attention's, fp8_ds_mla. */
void kvcal_cmd_note_config_engines_ignore(const char *cmd, const kvcal_model_desc *d);

/* KVCAL_ERR_UNSUPPORTED naming --seq-len where it is longer than the keys a
 * query of a DeepSeek Sparse Attention model keeps (kvcal_model_desc's
 * sparse_topk), which kvcal runs dense; KVCAL_OK otherwise. */
kvcal_status kvcal_cmd_check_sparse_seq_len(int seq_len, const kvcal_model_desc *d);

/* Exit code of a command that ran a model and failed with st: 2 (usage or
 * I/O) for I/O errors, no CUDA device and out of memory, else 1 (invalid
 * input). */
int kvcal_cmd_run_exit_code(kvcal_status st);

/* Exit code of a command that reads and writes files (tokenize, inspect)
 * and failed with st: 2 (usage or I/O) for I/O errors and bad arguments,
 * else 1 (invalid input). */
int kvcal_cmd_file_exit_code(kvcal_status st);

/* Seconds on a monotonic clock (for elapsed times). */
double kvcal_cmd_now_s(void);

/* --- scales formats ------------------------------------------------------ */

/* The format names --format / --to take. */
#define KVCAL_CMD_FORMATS                                                                \
    "legacy, kvcal, checkpoint (or compressed-tensors), modelopt, quark, kv-scale, "     \
    "trtllm or ascend"
#define KVCAL_CMD_MAX_DIR_FILES 4

/* Parses a format name of KVCAL_CMD_FORMATS; -1 when unknown. */
int kvcal_cmd_parse_format(const char *name, kvcal_format *out);

/* The files a directory format writes into its output directory (for
 * trtllm at tp 1: config.json and rank0.safetensors; more ranks are checked
 * by the writer); returns their count. */
int kvcal_cmd_dir_files(kvcal_format f, const char *model_dir, const char **names,
                        int max);

#endif
