/* io/dataset/doclist.h: the documents a dataset reader yields, in input
 * order, before they are tokenized and packed into samples (not installed). */
#ifndef KVCAL_IO_DATASET_DOCLIST_H
#define KVCAL_IO_DATASET_DOCLIST_H

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

/* Frees every document and buffer; the list is empty after. */
void kvcal_doclist_free(kvcal_doclist *l);
/* Appends a document (the list takes ownership of its buffers). */
kvcal_status kvcal_doclist_push(kvcal_doclist *l, kvcal_doc d);
/* Keeps buf (a file's contents text documents point into) until free;
 * on failure buf is freed. */
kvcal_status kvcal_doclist_keep_buffer(kvcal_doclist *l, char *buf);

#endif
