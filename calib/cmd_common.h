/* calib/cmd_common.h: what several commands share: option values parsed with
 * one message style, the exit code of a failed model run, a monotonic clock.
 * Part of the kvcal program (these print), not of the library. */
#ifndef KVCAL_CALIB_CMD_COMMON_H
#define KVCAL_CALIB_CMD_COMMON_H

#include "io/dataset.h"
#include "kvcal.h"

/* The largest count an option takes: no limit a user would meet. */
#define KVCAL_CMD_INT_MAX (1 << 30)

/* Parses text (the value of option `opt` of command `cmd`) as a decimal
 * integer in [lo, hi] into *out. On failure prints "kvcal <cmd>: <opt>
 * '<text>': expected an integer in [lo, hi]" (">= lo" when hi is
 * KVCAL_CMD_INT_MAX or more) to stderr and returns -1; else 0. */
int kvcal_cmd_parse_ll(const char *cmd, const char *opt, const char *text, long long lo,
                       long long hi, long long *out);
/* kvcal_cmd_parse_ll for an int option. */
int kvcal_cmd_parse_int(const char *cmd, const char *opt, const char *text, int lo,
                        int hi, int *out);

/* Loads `dataset` as samples of opt for the model at model_path (vocabulary
 * of vocab_size tokens), tokenized with `tokenizer` or else the tokenizer
 * found beside the model. A tokenizer that is not found is an error when it
 * was named, or when the dataset needs one (then a note on stderr, "kvcal
 * <cmd>: note: no tokenizer: ...", says why none was found); a tokenizer
 * larger than the vocabulary is an error. *out: caller destroys. */
kvcal_status kvcal_cmd_load_samples(const char *cmd, const char *model_path,
                                    int vocab_size, const char *tokenizer,
                                    const char *dataset, const kvcal_dataset_options *opt,
                                    kvcal_samples **out);

/* Exit code of a command that ran a model and failed with st: 2 (usage or
 * I/O) for I/O errors, no CUDA device and out of memory, else 1 (invalid
 * input). */
int kvcal_cmd_run_exit_code(kvcal_status st);

/* Seconds on a monotonic clock (for elapsed times). */
double kvcal_cmd_now_s(void);

#endif
