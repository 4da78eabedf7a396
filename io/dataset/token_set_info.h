/* io/dataset/token_set_info.h: what an HDF5 file holds, read from its attributes
 * and shapes without its data, so a command can tell a token set (written
 * by kvcal_samples_write_hdf5) from statistics and describe it. */
#ifndef KVCAL_IO_TOKEN_SET_INFO_H
#define KVCAL_IO_TOKEN_SET_INFO_H

#include "core/scales.h"
#include "kvcal.h"

typedef struct kvcal_token_set_info {
    char format[KVCAL_NAME_MAX]; /* root attribute "format", "" when absent */
    long long format_version;    /* 0 when absent */
    int has_input_ids;           /* a 2-D dataset "input_ids" exists */
    long long num_samples;       /* rows of input_ids (0 when absent) */
    long long seq_len;           /* columns of input_ids */
    char kvcal_version[KVCAL_NAME_MAX];
    char source[KVCAL_TEXT_MAX]; /* provenance attributes, "" when absent */
    char tokenizer[KVCAL_TEXT_MAX];
    char tokenizer_kind[KVCAL_NAME_MAX];
    long long seed;
    long long pack; /* -1 when absent */
} kvcal_token_set_info;

/* Reads the root attributes and the shape of input_ids of the HDF5 file at
 * `path`. Any readable HDF5 file succeeds (absent fields stay empty); a file
 * HDF5 cannot open is KVCAL_ERR_PARSE naming it. */
kvcal_status kvcal_token_set_info_read(const char *path, kvcal_token_set_info *out);

#endif
