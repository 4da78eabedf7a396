/* io/dataset/dataset_impl.h: private parts of the dataset readers (not installed). */
#ifndef KVCAL_IO_DATASET_IMPL_H
#define KVCAL_IO_DATASET_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "io/dataset/doclist.h"
#include "kvcal.h"

/* Reads every document of a dataset in input order; an empty dataset is an
 * error. Free with kvcal_doclist_free. The readers of each kind: this file
 * (text, a directory, JSONL), io/dataset/dataset_hdf5.h (HDF5 token sets). */
kvcal_status kvcal_dataset_read(const char *path, const char *text_field,
                                kvcal_doclist *l);

/* xoshiro256** (Blackman & Vigna), state seeded by splitmix64(seed). */
typedef struct kvcal_rng {
    uint64_t s[4];
} kvcal_rng;

void kvcal_rng_seed(kvcal_rng *r, uint64_t seed);
uint64_t kvcal_rng_next(kvcal_rng *r);

#endif
