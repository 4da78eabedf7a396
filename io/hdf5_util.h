/* io/hdf5_util.h: the small HDF5 pieces every kvcal HDF5 format shares:
 * silencing HDF5's own error printing, turning its error stack into one
 * kvcal_fail line, and writing scalar attributes and datasets. */
#ifndef KVCAL_IO_HDF5_UTIL_H
#define KVCAL_IO_HDF5_UTIL_H

#include <hdf5.h>

#include "kvcal.h"

/* HDF5's automatic error printing, saved while it is switched off. */
typedef struct kvcal_h5_quiet {
    H5E_auto2_t func;
    void *data;
} kvcal_h5_quiet;

/* Switches HDF5's automatic error printing off (the library never prints)
 * and saves the previous handler in *q; pair with kvcal_h5_quiet_end on the
 * same thread. */
void kvcal_h5_quiet_begin(kvcal_h5_quiet *q);
/* Restores the handler saved by kvcal_h5_quiet_begin. */
void kvcal_h5_quiet_end(const kvcal_h5_quiet *q);
/* Switches it off for the rest of the process, for a program that reports
 * every HDF5 failure itself in one line (the kvcal command). With it on when
 * the program exits, HDF5 1.10 fails to shut down after reading a corrupted
 * file and prints "HDF5: infinite loop closing library" and a list of its
 * interfaces after the program's own error. */
void kvcal_h5_quiet_process(void);

/* An HDF5 file built in memory and written out whole: HDF5 itself never
 * writes to disk, so a full disk or a file size limit is one clean write
 * error of io/atomic_file (HDF5 cannot then be left holding a file it
 * failed to flush, which it retries, and fails, when the program exits). */
typedef struct kvcal_h5_image {
    hid_t file;           /* the open file; -1 once closed */
    unsigned char *bytes; /* (size) the image HDF5 hands back when it closes the file */
    size_t size;          /* bytes allocated */
} kvcal_h5_image;

/* Creates img->file in memory in the 1.10 file format (a single chunk is
 * indexed without a B-tree: much smaller files; read by HDF5 >= 1.10,
 * h5dump, recent h5py), without object modification times, so the same
 * content gives byte-identical files; closing it closes every object still
 * open in it. Returns 0, or -1 (img->file -1) with the cause on the HDF5
 * error stack. img must stay where it is until kvcal_h5_image_write or
 * kvcal_h5_image_discard. */
int kvcal_h5_image_create(kvcal_h5_image *img);
/* Closes img->file and writes its image to path atomically
 * (kvcal_atomic_write: a temporary beside path, renamed into place, or
 * staged in the batch open on this thread). On failure nothing is written;
 * either way img holds nothing afterwards. */
kvcal_status kvcal_h5_image_write(kvcal_h5_image *img, const char *path);
/* Closes img->file (if open) and frees the image; nothing is written. */
void kvcal_h5_image_discard(kvcal_h5_image *img);

/* Records "<path>: could not <verb> <what> (HDF5: <most specific message of
 * the current error stack>)" with kvcal_fail and returns st. */
kvcal_status kvcal_h5_fail(kvcal_status st, const char *path, const char *verb,
                           const char *what);

/* Writes a scalar attribute `name` of loc: stored as file_type, value read as
 * mem_type. Returns 0, or -1 with the cause on the HDF5 error stack. */
int kvcal_h5_write_attr(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                        const void *value);
/* Writes a scalar variable-length UTF-8 string attribute (NULL writes "").
 * Returns 0 or -1 like kvcal_h5_write_attr. */
int kvcal_h5_write_attr_str(hid_t loc, const char *name, const char *value);

/* Options of kvcal_h5_write_dataset. */
enum {
    KVCAL_H5_SHUFFLE = 1u << 0,  /* byte-shuffle filter before deflate */
    KVCAL_H5_NO_TIMES = 1u << 1, /* no modification times (byte-identical files) */
};

/* Writes data as dataset `name` of loc with dims[rank]: rank 0 is a scalar
 * stored contiguous; other ranks are chunked by chunk[rank] and deflated at
 * `deflate` (0..9). flags: KVCAL_H5_*. Returns 0 or -1 like
 * kvcal_h5_write_attr. */
int kvcal_h5_write_dataset(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                           int rank, const hsize_t *dims, const hsize_t *chunk,
                           int deflate, unsigned flags, const void *data);

#endif
