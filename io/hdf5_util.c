/* io/hdf5_util.c: HDF5 helpers shared by the HDF5 formats (see the header). */
#include "io/hdf5_util.h"

#include <stdio.h>

#include "core/status.h"

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

hid_t kvcal_h5_create_file(const char *path)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5Pcreate(H5P_FILE_CREATE), file = -1;
    if (fapl >= 0 && fcpl >= 0 && H5Pset_obj_track_times(fcpl, 0) >= 0 &&
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) >= 0)
        file = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (fcpl >= 0)
        H5Pclose(fcpl);
    return file;
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
