/* io/tokenizer/tokenizer_kinds.h: the entry points of each tokenizer kind
 * (llama2.c, SentencePiece, HF tokenizer.json), which io/tokenizer/tokenizer.c
 * dispatches to, and the tokenizer_config.json they apply (not installed). */
#ifndef KVCAL_IO_TOKENIZER_KINDS_H
#define KVCAL_IO_TOKENIZER_KINDS_H

#include <stddef.h>

#include "io/tokenizer/tokenizer_vocab.h"
#include "kvcal.h"

kvcal_status kvcal_tok_load_llama2c(kvcal_tokenizer_t *t, const char *path,
                                    const unsigned char *data, size_t len);
kvcal_status kvcal_tok_load_spm(kvcal_tokenizer_t *t, const char *path,
                                const unsigned char *data, size_t len);
kvcal_status kvcal_tok_load_hf(kvcal_tokenizer_t *t, const char *path, const char *data,
                               size_t len);

kvcal_status kvcal_tok_encode_llama2c(const kvcal_tokenizer_t *t, const char *text,
                                      size_t len, kvcal_ids *out);
kvcal_status kvcal_tok_encode_spm(const kvcal_tokenizer_t *t, const char *text,
                                  size_t len, kvcal_ids *out);
kvcal_status kvcal_tok_encode_hf(const kvcal_tokenizer_t *t, const char *text, size_t len,
                                 kvcal_ids *out);

void kvcal_tok_free_hf(kvcal_tokenizer_t *t);

/* Applies the tokenizer_config.json beside `path`, when there is one:
 * add_bos_token, add_eos_token, bos_token, eos_token (a string or
 * {"content": ...}) override what the tokenizer file says. */
kvcal_status kvcal_tok_apply_config(kvcal_tokenizer_t *t, const char *path);

#endif
