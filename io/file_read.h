/* io/file_read.h: a whole input file into memory (read or mapped), with one
 * set of messages for every reader of an input file. */
#ifndef KVCAL_IO_FILE_READ_H
#define KVCAL_IO_FILE_READ_H

#include <stddef.h>

#include "kvcal.h"

/* Checks, without opening it, that path names a regular file (or, when
 * dir_ok, a directory): a FIFO, socket or device is KVCAL_ERR_IO with one
 * line naming the path and what it is, as is a missing path. Every input
 * read for its content passes here first: opening a FIFO for reading waits
 * for a writer, and what it holds can be read only once. */
kvcal_status kvcal_file_check_input(const char *path, const char *what, int dir_ok);

/* Reads the regular file at path into a new buffer with a NUL after its
 * *len bytes (*data: caller frees; NULL on failure). `what` names the file
 * in messages ("dataset", "JSON file"); a file larger than max_bytes is
 * KVCAL_ERR_PARSE, a missing, unreadable or non-regular one KVCAL_ERR_IO
 * (refused before it is opened, as kvcal_file_check_input). */
kvcal_status kvcal_file_read(const char *path, const char *what, size_t max_bytes,
                             char **data, size_t *len);

/* Maps the regular file at path read-only: *map (NULL for an empty file) and
 * *len. Release with kvcal_file_unmap. Messages as kvcal_file_read; a failed
 * mmap is KVCAL_ERR_IO. */
kvcal_status kvcal_file_map(const char *path, const char *what, void **map, size_t *len);
/* Unmaps what kvcal_file_map mapped; a NULL map is a no-op. */
void kvcal_file_unmap(void *map, size_t len);

#endif
