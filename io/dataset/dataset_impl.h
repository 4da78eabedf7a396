/* io/dataset/dataset_impl.h: private parts of the dataset readers (not installed). */
#ifndef KVCAL_IO_DATASET_IMPL_H
#define KVCAL_IO_DATASET_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kvcal.h"

/* One document: text (UTF-8, not NUL-terminated) or token ids. */
typedef struct kvcal_doc {
    const char *text;
    size_t len;
    char *owned_text; /* set when text is owned by the document */
    int32_t *ids;     /* (n_ids) when is_ids */
    size_t n_ids;
    int is_ids;
    size_t line; /* where it starts: JSONL line (from 1), HDF5 row (from 0) */
} kvcal_doc;

typedef struct kvcal_doclist {
    kvcal_doc *d;
    size_t n, cap;
    char **bufs; /* file contents the text documents point into */
    size_t n_bufs;
    int rows; /* 1: the documents are HDF5 rows (kvcal_doc.line is the row) */
} kvcal_doclist;

/* Reads every document of a dataset in input order; an empty dataset is an
 * error. Free with kvcal_doclist_free. */
kvcal_status kvcal_dataset_read(const char *path, const char *text_field,
                                kvcal_doclist *l);
void kvcal_doclist_free(kvcal_doclist *l);
/* Appends a document (the list takes ownership of its buffers). */
kvcal_status kvcal_doclist_push(kvcal_doclist *l, kvcal_doc d);

/* The rows of an HDF5 token set as id documents. */
kvcal_status kvcal_dataset_read_hdf5(const char *path, kvcal_doclist *l);

/* xoshiro256** (Blackman & Vigna), state seeded by splitmix64(seed). */
typedef struct kvcal_rng {
    uint64_t s[4];
} kvcal_rng;

void kvcal_rng_seed(kvcal_rng *r, uint64_t seed);
uint64_t kvcal_rng_next(kvcal_rng *r);

#endif
