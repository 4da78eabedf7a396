/* io/tokenizer/tokenizer.h: text -> token ids with the model's own tokenizer.
 * Kinds: HF tokenizer.json (BPE: byte-level with a regex pre-tokenizer, or
 * SentencePiece-style with Metaspace / byte fallback), SentencePiece
 * tokenizer.model, llama2.c tokenizer.bin. */
#ifndef KVCAL_IO_TOKENIZER_H
#define KVCAL_IO_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kvcal.h"

typedef struct kvcal_tokenizer kvcal_tokenizer_t;

/* Loads a tokenizer file, its kind detected from the content. */
kvcal_status kvcal_tokenizer_load(const char *path, kvcal_tokenizer_t **out);

/* Loads a tokenizer from `len` bytes in memory (kind detected from the
 * content); `name` is a path used in messages and to find a
 * tokenizer_config.json beside a tokenizer.json. */
kvcal_status kvcal_tokenizer_load_memory(const void *data, size_t len, const char *name,
                                         kvcal_tokenizer_t **out);

/* Finds the tokenizer of a model: `override` when not NULL, else next to
 * model_path (a directory, or the folder of a model file): tokenizer.json,
 * tokenizer.model, tokenizer.bin / tok*.bin, in that order. The error names
 * where it looked and suggests --tokenizer. */
kvcal_status kvcal_tokenizer_find(const char *model_path, const char *override,
                                  kvcal_tokenizer_t **out);

void kvcal_tokenizer_destroy(kvcal_tokenizer_t *tok);

/* Encodes `len` bytes of text. add_special: 1 adds BOS (and EOS) as the
 * tokenizer's configuration says, 0 adds none. Any bytes are accepted: a
 * SentencePiece model turns each invalid UTF-8 byte into U+FFFD as the
 * library does, the other kinds encode it as a byte token. A tokenizer is
 * read-only once loaded: several threads may encode with it at once. *ids is malloc'ed
 * and owned by the caller; *n_ids is its length. */
kvcal_status kvcal_tokenizer_encode(const kvcal_tokenizer_t *tok, const char *text,
                                    size_t len, int add_special, int32_t **ids,
                                    size_t *n_ids);

/* Decodes ids into malloc'ed NUL-terminated text owned by the caller.
 * Special tokens (BOS, EOS, unk, added special tokens) decode to nothing;
 * the space a SentencePiece-style encoder put in front is dropped. An id
 * outside the vocabulary is an error. */
kvcal_status kvcal_tokenizer_decode(const kvcal_tokenizer_t *tok, const int32_t *ids,
                                    size_t n_ids, char **text);

int kvcal_tokenizer_vocab_size(const kvcal_tokenizer_t *tok);
/* -1 when the tokenizer has none. */
int32_t kvcal_tokenizer_bos(const kvcal_tokenizer_t *tok);
int32_t kvcal_tokenizer_eos(const kvcal_tokenizer_t *tok);
/* 1 when encoding puts BOS in front of a text (its config says so). */
int kvcal_tokenizer_adds_bos(const kvcal_tokenizer_t *tok);
/* "hf-bpe-bytelevel", "hf-bpe-sentencepiece", "sentencepiece", "llama2c" */
const char *kvcal_tokenizer_kind(const kvcal_tokenizer_t *tok);

#endif
