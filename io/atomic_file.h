/* io/atomic_file.h: write a file through a temporary in the same directory
 * and rename it into place, so a reader never sees half a file. */
#ifndef KVCAL_IO_ATOMIC_FILE_H
#define KVCAL_IO_ATOMIC_FILE_H

#include <stdio.h>

#include "kvcal.h"

typedef struct kvcal_atomic_file {
    FILE *f;            /* write through this */
    char path[4096];    /* final path */
    char tmp[4096];     /* temporary path */
} kvcal_atomic_file;

/* Opens "<path>.tmp.XXXXXX" for writing. */
kvcal_status kvcal_atomic_open(kvcal_atomic_file *af, const char *path);
/* Flushes, fsyncs, closes and renames onto the final path. On any failure
 * the temporary is removed and the final path is untouched. */
kvcal_status kvcal_atomic_commit(kvcal_atomic_file *af);
/* Closes and removes the temporary (safe to call after a failed commit). */
void kvcal_atomic_abort(kvcal_atomic_file *af);
/* Writes a whole buffer atomically. */
kvcal_status kvcal_atomic_write(const char *path, const void *data, size_t len);

#endif
