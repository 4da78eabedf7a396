/* io/dataset/dataset.h: calibration / evaluation samples from a dataset file.
 * Formats: plain text (documents split on blank lines), JSONL of text
 * (--text-field, chat "messages"), JSONL of token ids ({"input_ids": [...]},
 * taken verbatim), HDF5 token sets (input_ids [N, L] int32). */
#ifndef KVCAL_IO_DATASET_H
#define KVCAL_IO_DATASET_H

#include <stdint.h>

#include "io/tokenizer/tokenizer.h"
#include "kvcal.h"

typedef struct kvcal_dataset_options {
    int num_samples;        /* samples wanted (> 0), or 0: as many as the
                               dataset fills */
    int seq_len;            /* tokens per sample (> 0) */
    uint64_t seed;          /* shuffling seed; same seed -> same samples */
    int pack;               /* 1: pack documents into seq_len windows;
                               0: one document per sample (shorter ones padded) */
    const char *text_field; /* JSONL text field, NULL for "text" */
} kvcal_dataset_options;

/* Called after each document is tokenized, on the calling thread: documents
 * done, documents in the dataset, tokens so far. */
typedef struct kvcal_dataset_progress {
    void (*fn)(void *ctx, long long docs_done, long long docs_total, long long tokens);
    void *ctx;
} kvcal_dataset_progress;

/* num_samples x seq_len token ids; lengths[i] <= seq_len valid tokens of
 * sample i, the rest is padding (id -1) that is never observed. */
typedef struct kvcal_samples {
    int num_samples;
    int seq_len;
    int32_t *ids;         /* (num_samples, seq_len) */
    int32_t *lengths;     /* (num_samples) */
    long long num_tokens; /* sum of lengths */
} kvcal_samples;

/* Reads `path`, tokenizing text with `tok` (may be NULL for token-id
 * datasets). Fewer tokens than asked is an error that says how many there
 * are. Samples are allocated as they fill, so memory follows the tokens the
 * dataset holds; num_samples x seq_len over 2^31 tokens is refused before
 * reading, and packing text into windows of seq_len 1 with a tokenizer that
 * adds BOS (no room for text after it) before tokenizing
 * (KVCAL_ERR_INVALID_ARG). *out = NULL on failure; free with
 * kvcal_samples_destroy. */
kvcal_status kvcal_dataset_load(const char *path, const kvcal_tokenizer_t *tok,
                                const kvcal_dataset_options *opt, kvcal_samples **out);

/* kvcal_dataset_load, reporting progress (may be NULL). */
kvcal_status kvcal_dataset_load_progress(const char *path, const kvcal_tokenizer_t *tok,
                                         const kvcal_dataset_options *opt,
                                         const kvcal_dataset_progress *progress,
                                         kvcal_samples **out);

void kvcal_samples_destroy(kvcal_samples *s);

/* Every document of a dataset, in input order, unpacked: text encoded with
 * the tokenizer's special tokens (BOS as its configuration says), token ids
 * taken verbatim. */
typedef struct kvcal_documents {
    int num_docs;
    int32_t **ids;   /* (num_docs) arrays of lengths[i] ids */
    size_t *lengths; /* (num_docs) */
} kvcal_documents;

/* Reads and tokenizes every document of `path` (tok may be NULL for
 * token-id datasets), reporting progress (may be NULL). *out = NULL on
 * failure; free with kvcal_documents_destroy. */
kvcal_status kvcal_dataset_tokenize_documents(const char *path,
                                              const kvcal_tokenizer_t *tok,
                                              const char *text_field,
                                              const kvcal_dataset_progress *progress,
                                              kvcal_documents **out);
void kvcal_documents_destroy(kvcal_documents *docs);

/* Where a token set came from; strings may be NULL (written as ""). */
typedef struct kvcal_token_provenance {
    const char *source;         /* dataset path */
    const char *tokenizer;      /* tokenizer path */
    const char *tokenizer_kind; /* kvcal_tokenizer_kind() */
    uint64_t seed;
    int pack;
} kvcal_token_provenance;

/* Writes samples as an HDF5 token set, atomically: dataset "input_ids"
 * (num_samples, seq_len) int32 and "lengths" (num_samples) int32, deflate
 * compressed, with attributes format = "kvcal-tokens", format_version = 1,
 * kvcal_version, num_tokens and the provenance fields. Padding is id -1. */
kvcal_status kvcal_samples_write_hdf5(const char *path, const kvcal_samples *s,
                                      const kvcal_token_provenance *prov);

#endif
