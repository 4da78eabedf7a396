/* io/dataset/dataset_hdf5.c: the rows of an HDF5 token set (what `kvcal
 * tokenize` writes, io/dataset/token_set_write.c) read back as documents.
 * HDF5's own error printing is suppressed (io/hdf5_util.h); failures become
 * one kvcal_fail line. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/dataset/dataset_hdf5.h"
#include "io/hdf5_util.h"

kvcal_status kvcal_dataset_read_hdf5(const char *path, kvcal_doclist *l)
{
    kvcal_status st = KVCAL_OK;
    hid_t file = -1, dset = -1, space = -1, ldset = -1;
    int32_t *ids = NULL, *lens = NULL;
    l->rows = 1;
    kvcal_h5_quiet q;
    kvcal_h5_quiet_begin(&q);
    file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        st = kvcal_fail(KVCAL_ERR_PARSE, "%s: not a readable HDF5 file", path);
        goto done;
    }
    dset = H5Dopen2(file, "input_ids", H5P_DEFAULT);
    if (dset < 0) {
        st = kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: no dataset \"input_ids\" (write token sets with kvcal tokenize)", path);
        goto done;
    }
    space = H5Dget_space(dset);
    hsize_t dims[2] = {0, 0};
    hid_t type = H5Dget_type(dset);
    int is_int = type >= 0 && H5Tget_class(type) == H5T_INTEGER;
    if (type >= 0)
        H5Tclose(type);
    if (space < 0 || H5Sget_simple_extent_ndims(space) != 2 || !is_int) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: input_ids must be a 2-D integer dataset [N, L]", path);
        goto done;
    }
    H5Sget_simple_extent_dims(space, dims, NULL);
    if (dims[0] == 0 || dims[1] == 0 || dims[1] > (1ull << 31) / dims[0]) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: input_ids has shape [%llu, %llu]: empty or more than 2^31 "
                        "ids; split the token set",
                        path, (unsigned long long)dims[0], (unsigned long long)dims[1]);
        goto done;
    }
    size_t N = (size_t)dims[0], L = (size_t)dims[1];
    ids = malloc(N * L * sizeof *ids);
    lens = malloc(N * sizeof *lens);
    if (!ids || !lens) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory for %zu x %zu ids", path, N,
                        L);
        goto done;
    }
    if (H5Dread(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids) < 0) {
        st = kvcal_fail(KVCAL_ERR_IO, "%s: cannot read input_ids", path);
        goto done;
    }
    ldset = H5Lexists(file, "lengths", H5P_DEFAULT) > 0
                ? H5Dopen2(file, "lengths", H5P_DEFAULT)
                : -1;
    if (ldset >= 0) {
        hid_t ls = H5Dget_space(ldset);
        hsize_t ld = 0;
        int ok = ls >= 0 && H5Sget_simple_extent_ndims(ls) == 1;
        if (ok)
            H5Sget_simple_extent_dims(ls, &ld, NULL);
        if (ls >= 0)
            H5Sclose(ls);
        if (!ok || ld != N ||
            H5Dread(ldset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, lens) < 0) {
            st = kvcal_fail(KVCAL_ERR_FORMAT,
                            "%s: lengths must be a 1-D integer dataset of "
                            "%zu rows",
                            path, N);
            goto done;
        }
    } else {
        for (size_t i = 0; i < N; i++) {
            size_t n = 0;
            while (n < L && ids[i * L + n] >= 0)
                n++;
            lens[i] = (int32_t)n;
        }
    }
    for (size_t i = 0; i < N && !st; i++) {
        if (lens[i] < 0 || (size_t)lens[i] > L) {
            st = kvcal_fail(KVCAL_ERR_FORMAT, "%s: lengths[%zu] = %d is not in [0, %zu]",
                            path, i, lens[i], L);
            break;
        }
        for (int32_t k = 0; k < lens[i]; k++)
            if (ids[i * L + (size_t)k] < 0) {
                st =
                    kvcal_fail(KVCAL_ERR_FORMAT,
                               "%s: input_ids[%zu][%d] = %d is negative inside the row's "
                               "length",
                               path, i, k, ids[i * L + (size_t)k]);
                break;
            }
        if (st || lens[i] == 0)
            continue;
        kvcal_doc d = {.is_ids = 1, .n_ids = (size_t)lens[i], .line = i};
        d.ids = malloc((size_t)lens[i] * sizeof *d.ids);
        if (!d.ids) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        memcpy(d.ids, ids + i * L, (size_t)lens[i] * sizeof *d.ids);
        if ((st = kvcal_doclist_push(l, d))) {
            free(d.ids);
            break;
        }
    }
done:;
    kvcal_h5_quiet_end(&q);
    free(ids);
    free(lens);
    if (ldset >= 0)
        H5Dclose(ldset);
    if (space >= 0)
        H5Sclose(space);
    if (dset >= 0)
        H5Dclose(dset);
    if (file >= 0)
        H5Fclose(file);
    return st;
}
