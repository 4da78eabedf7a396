/* io/atomic_file.h: write a file through a temporary in the same directory
 * and rename it into place, so a reader never sees half a file; stage
 * several outputs so that either all of them are written or none; refuse
 * an output that would replace one of a command's inputs; join paths. */
#ifndef KVCAL_IO_ATOMIC_FILE_H
#define KVCAL_IO_ATOMIC_FILE_H

#include <stdio.h>

#include "io/path.h"
#include "kvcal.h"

/* The longest output path, in bytes (without the NUL): room is left for
 * the temporary's ".tmp.XXXXXX". */
#define KVCAL_ATOMIC_PATH_MAX (4096 - sizeof ".tmp.XXXXXX")

typedef struct kvcal_atomic_file {
    FILE *f;         /* write through this */
    char path[4096]; /* final path: the path given, or the file a symbolic link there
                        names */
    char tmp[4096];  /* temporary path */
} kvcal_atomic_file;

/* Opens "<path>.tmp.XXXXXX" for writing. A symbolic link at path is
 * written through: the file it names is replaced and the link kept; a link
 * to nothing is refused (KVCAL_ERR_IO), as is a directory, a FIFO or a
 * device at path. */
kvcal_status kvcal_atomic_open(kvcal_atomic_file *af, const char *path);
/* What kvcal_atomic_open checks, without creating anything: KVCAL_OK when
 * an output can be written at path (its directory aside), so that a
 * command can refuse a bad output before its work. */
kvcal_status kvcal_atomic_check(const char *path);
/* Flushes, fsyncs, closes and renames onto the final path. On any failure
 * the temporary is removed and the final path is untouched. While a batch
 * is open on the calling thread the temporary is kept, finished, for
 * kvcal_atomic_batch_commit to rename. */
kvcal_status kvcal_atomic_commit(kvcal_atomic_file *af);
/* Closes and removes the temporary (safe to call after a failed commit). */
void kvcal_atomic_abort(kvcal_atomic_file *af);
/* Writes a whole buffer atomically. */
kvcal_status kvcal_atomic_write(const char *path, const void *data, size_t len);
/* Creates directory dir if it does not exist (its parent must); KVCAL_ERR_IO
 * naming dir, the cause (a parent that does not exist or is not a
 * directory, one not writable, a file at dir) and the fix. Outside a batch:
 * nothing removes it on a later failure. */
kvcal_status kvcal_atomic_mkdir(const char *dir);

// --- several outputs as one --------------------------------------------------

/* A batch of outputs: while it is open on a thread, every kvcal_atomic_commit
 * on that thread (every kvcal writer goes through it) finishes its temporary
 * beside the final path but does not rename it. kvcal_atomic_batch_commit
 * then renames them all, in the order they were written; kvcal_atomic_batch_abort
 * removes them and the directories the batch created. One batch at a time
 * per thread. */
typedef struct kvcal_atomic_batch kvcal_atomic_batch_t;

/* Opens a batch on the calling thread. *out: end it with commit or abort. */
kvcal_status kvcal_atomic_batch_begin(kvcal_atomic_batch_t **out);
/* Creates directory dir if it does not exist (its parent must); the batch
 * removes it again on abort when it created it and it is empty. */
kvcal_status kvcal_atomic_batch_mkdir(kvcal_atomic_batch_t *b, const char *dir);
/* Renames every staged temporary onto its path and ends the batch (b is
 * freed). A rename that fails (it does not once every write succeeded,
 * short of the directory changing under it) removes the temporaries not yet
 * renamed; the error says which outputs were written. */
kvcal_status kvcal_atomic_batch_commit(kvcal_atomic_batch_t *b);
/* Removes every staged temporary and the directories the batch created,
 * and ends the batch (b is freed). NULL is a no-op. */
void kvcal_atomic_batch_abort(kvcal_atomic_batch_t *b);

// --- outputs that would replace an input -------------------------------------

/* The files a command reads, which none of its outputs may replace. */
typedef struct kvcal_inputs kvcal_inputs_t;

kvcal_status kvcal_inputs_create(kvcal_inputs_t **out);
void kvcal_inputs_destroy(kvcal_inputs_t *in);
/* Records path as an input; `what` names it in messages ("the dataset") and
 * must outlive `in`. A file is recorded itself; for a directory, every
 * regular file directly inside it whose name keep() accepts (keep NULL:
 * every one). A path that does not exist adds nothing (reading it fails
 * later, with its own message). */
kvcal_status kvcal_inputs_add(kvcal_inputs_t *in, const char *path, const char *what,
                              int (*keep)(const char *name));
/* KVCAL_ERR_INVALID_ARG, with a message naming opt, out and the input, when
 * the output file `out` is one of the inputs however it is named (symbolic
 * links, "..", hard links: the same st_dev and st_ino); else KVCAL_OK. */
kvcal_status kvcal_inputs_check(const kvcal_inputs_t *in, const char *opt,
                                const char *out);

// --- paths -------------------------------------------------------------------

/* 1 when a and b name the same file, existing or about to be written: the
 * same st_dev and st_ino when both exist, else the same name in the same
 * directory; 0 otherwise. */
int kvcal_path_same_file(const char *a, const char *b);

#endif
