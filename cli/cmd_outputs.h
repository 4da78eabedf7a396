/* cli/cmd_outputs.h: what the commands that write files share: listing
 * the files a command reads, which no output may replace (io/atomic_file.h
 * does the comparing). Part of the kvcal program, not of the library. */
#ifndef KVCAL_CALIB_CMD_OUTPUTS_H
#define KVCAL_CALIB_CMD_OUTPUTS_H

#include "core/scales.h"
#include "io/atomic_file.h"

/* Adds the files a model at model_path is read from: the path itself when
 * it is a file, and in its directory (model_path, or the folder of a model
 * file) config.json, the safetensors shards and their index, a ModelOpt
 * checkpoint's hf_quant_config.json, vllm-ascend's
 * quant_model_description.json, and the tokenizer files kvcal looks for
 * there (tokenizer.json, tokenizer_config.json, tokenizer.model,
 * tokenizer.bin, tok*.bin). */
kvcal_status kvcal_cmd_add_model_inputs(kvcal_inputs_t *in, const char *model_path);

/* 1 when name is one of the files kvcal_cmd_add_model_inputs lists in a
 * model directory. */
int kvcal_cmd_is_model_file(const char *name);

/* What a scales file of `format` written from scales of granularity g for
 * the cache kvf of a model of `architecture` (NULL: unknown; an MLA model:
 * mla 1) keeps and loses, and which engines read it: two or three lines,
 * each starting with two spaces, no newline at the end (for calibrate's and
 * convert's reports). */
const char *kvcal_cmd_format_note(kvcal_format format, kvcal_granularity g,
                                  kvcal_kv_format kvf, int mla, const char *architecture);

#endif
