/* io/hdf5_util.c: HDF5 helpers shared by the HDF5 formats (see the header). */
#include "io/hdf5_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/atomic_file.h"

// --- errors ------------------------------------------------------------------

void kvcal_h5_quiet_begin(kvcal_h5_quiet *q)
{
    H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void kvcal_h5_quiet_end(const kvcal_h5_quiet *q)
{
    H5Eset_auto2(H5E_DEFAULT, q->func, q->data);
}

void kvcal_h5_quiet_process(void)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

typedef struct h5_detail {
    char text[256];
} h5_detail;

static herr_t h5_first_error(unsigned n, const H5E_error2_t *e, void *ctx)
{
    h5_detail *d = ctx;
    if (n == 0)
        snprintf(d->text, sizeof d->text, "%s", e->desc ? e->desc : "unknown HDF5 error");
    return 0;
}

kvcal_status kvcal_h5_fail(kvcal_status st, const char *path, const char *verb,
                           const char *what)
{
    h5_detail d;
    snprintf(d.text, sizeof d.text, "no HDF5 detail");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_first_error, &d);
    return kvcal_fail(st, "%s: could not %s %s (HDF5: %s)", path, verb, what, d.text);
}

// --- writing -----------------------------------------------------------------

int kvcal_h5_write_attr(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                        const void *value)
{
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = space >= 0
                     ? H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT)
                     : -1;
    int rc = attr >= 0 && H5Awrite(attr, mem_type, value) >= 0 ? 0 : -1;
    if (attr >= 0)
        H5Aclose(attr);
    if (space >= 0)
        H5Sclose(space);
    return rc;
}

int kvcal_h5_write_attr_str(hid_t loc, const char *name, const char *value)
{
    const char *v = value ? value : "";
    hid_t type = H5Tcopy(H5T_C_S1);
    int rc = type >= 0 && H5Tset_size(type, H5T_VARIABLE) >= 0 &&
                     H5Tset_cset(type, H5T_CSET_UTF8) >= 0
                 ? kvcal_h5_write_attr(loc, name, type, type, &v)
                 : -1;
    if (type >= 0)
        H5Tclose(type);
    return rc;
}

// --- files in memory ---------------------------------------------------------

/* HDF5's core driver allocates the image through these (udata: the
 * kvcal_h5_image); new bytes are zeroed, so unwritten gaps are the same in
 * every run, and the image is kept when the driver lets go of it on close. */
static void *image_malloc(size_t size, H5FD_file_image_op_t op, void *udata)
{
    (void)op;
    kvcal_h5_image *img = udata;
    void *p = calloc(1, size ? size : 1);
    if (p)
        img->size = size;
    return p;
}

static void *image_realloc(void *ptr, size_t size, H5FD_file_image_op_t op, void *udata)
{
    (void)op;
    kvcal_h5_image *img = udata;
    size_t old = ptr ? img->size : 0;
    unsigned char *p = realloc(ptr, size ? size : 1);
    if (!p)
        return NULL;
    if (size > old)
        memset(p + old, 0, size - old);
    img->size = size;
    return p;
}

static void *image_memcpy(void *dest, const void *src, size_t size,
                          H5FD_file_image_op_t op, void *udata)
{
    (void)op;
    (void)udata;
    return memcpy(dest, src, size);
}

static herr_t image_free(void *ptr, H5FD_file_image_op_t op, void *udata)
{
    kvcal_h5_image *img = udata;
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && !img->bytes)
        img->bytes = ptr;
    else
        free(ptr);
    return 0;
}

static void *image_udata_copy(void *udata)
{
    return udata;
}

static herr_t image_udata_free(void *udata)
{
    (void)udata;
    return 0;
}

int kvcal_h5_image_create(kvcal_h5_image *img)
{
    img->file = -1;
    img->bytes = NULL;
    img->size = 0;
    H5FD_file_image_callbacks_t cb = {image_malloc, image_memcpy,     image_realloc,
                                      image_free,   image_udata_copy, image_udata_free,
                                      img};
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (fapl >= 0 && fcpl >= 0 && H5Pset_obj_track_times(fcpl, 0) >= 0 &&
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) >= 0 &&
        H5Pset_fapl_core(fapl, (size_t)1 << 16, 0) >= 0 &&
        H5Pset_file_image_callbacks(fapl, &cb) >= 0 &&
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) >= 0)
        img->file = H5Fcreate("kvcal-image.h5", H5F_ACC_TRUNC, fcpl, fapl);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (fcpl >= 0)
        H5Pclose(fcpl);
    return img->file >= 0 ? 0 : -1;
}

/* Bytes of the image that make the file: its end-of-file address from the
 * superblock (version 2 or 3, 8-byte addresses: the layout of the 1.10
 * format), the whole allocation when it cannot be read. */
static size_t image_length(const kvcal_h5_image *img)
{
    static const unsigned char signature[8] = {0x89, 'H',  'D',  'F',
                                               '\r', '\n', 0x1a, '\n'};
    const unsigned char *b = img->bytes;
    if (img->size < 48 || memcmp(b, signature, 8) || (b[8] != 2 && b[8] != 3) ||
        b[9] != 8)
        return img->size;
    uint64_t eof = 0;
    for (int i = 7; i >= 0; i--)
        eof = eof << 8 | b[28 + i];
    return eof > 0 && eof <= img->size ? (size_t)eof : img->size;
}

kvcal_status kvcal_h5_image_write(kvcal_h5_image *img, const char *path)
{
    herr_t closed = img->file >= 0 ? H5Fclose(img->file) : -1;
    img->file = -1;
    kvcal_status st =
        closed < 0 || !img->bytes
            ? kvcal_h5_fail(KVCAL_ERR_IO, path, "finish", "the file in memory")
            : kvcal_atomic_write(path, img->bytes, image_length(img));
    free(img->bytes);
    img->bytes = NULL;
    img->size = 0;
    return st;
}

void kvcal_h5_image_discard(kvcal_h5_image *img)
{
    if (img->file >= 0)
        H5Fclose(img->file);
    img->file = -1;
    free(img->bytes);
    img->bytes = NULL;
    img->size = 0;
}

int kvcal_h5_write_dataset(hid_t loc, const char *name, hid_t file_type, hid_t mem_type,
                           int rank, const hsize_t *dims, const hsize_t *chunk,
                           int deflate, unsigned flags, const void *data)
{
    int rc = -1;
    hid_t space = rank ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), dset = -1;
    if (space < 0 || dcpl < 0)
        goto done;
    if ((flags & KVCAL_H5_NO_TIMES) && H5Pset_obj_track_times(dcpl, 0) < 0)
        goto done;
    if (rank && (H5Pset_chunk(dcpl, rank, chunk) < 0 ||
                 ((flags & KVCAL_H5_SHUFFLE) && H5Pset_shuffle(dcpl) < 0) ||
                 H5Pset_deflate(dcpl, (unsigned)deflate) < 0))
        goto done;
    dset = H5Dcreate2(loc, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (dset >= 0 && H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0)
        rc = 0;
done:
    if (dset >= 0)
        H5Dclose(dset);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    return rc;
}
