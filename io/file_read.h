/* io/file_read.h: a whole input file into memory, with one set of messages
 * for the readers of text, JSON and tokenizer files. */
#ifndef KVCAL_IO_FILE_READ_H
#define KVCAL_IO_FILE_READ_H

#include <stddef.h>

#include "kvcal.h"

/* Reads the regular file at path into a new buffer with a NUL after its
 * *len bytes (*data: caller frees; NULL on failure). `what` names the file
 * in messages ("dataset", "JSON file"); a file larger than max_bytes is
 * KVCAL_ERR_PARSE, a missing, unreadable or non-regular one KVCAL_ERR_IO. */
kvcal_status kvcal_file_read(const char *path, const char *what, size_t max_bytes,
                             char **data, size_t *len);

#endif
