/* io/dataset/token_set_info.c: attributes and shape of an HDF5 token set. */
#include "io/dataset/token_set_info.h"

#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"
#include "io/file_read.h"

/* A string attribute into buf (left empty when absent or not a string). */
static void attr_str(hid_t loc, const char *name, char *buf, size_t n)
{
    buf[0] = '\0';
    if (H5Aexists(loc, name) <= 0)
        return;
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t type = attr >= 0 ? H5Aget_type(attr) : -1;
    hid_t mem = H5Tcopy(H5T_C_S1);
    if (type >= 0 && mem >= 0 && H5Tget_class(type) == H5T_STRING &&
        H5Tset_cset(mem, H5Tget_cset(type)) >= 0) {
        if (H5Tis_variable_str(type) > 0) {
            char *v = NULL;
            if (H5Tset_size(mem, H5T_VARIABLE) >= 0 && H5Aread(attr, mem, &v) >= 0)
                snprintf(buf, n, "%s", v ? v : "");
            H5free_memory(v);
        } else if (H5Tget_size(type) < n && H5Tset_size(mem, n) >= 0 &&
                   H5Tset_strpad(mem, H5T_STR_NULLTERM) >= 0) {
            if (H5Aread(attr, mem, buf) < 0)
                buf[0] = '\0';
        }
    }
    if (mem >= 0)
        H5Tclose(mem);
    if (type >= 0)
        H5Tclose(type);
    if (attr >= 0)
        H5Aclose(attr);
}

/* An integer attribute, `absent` when missing or not an integer. */
static long long attr_int(hid_t loc, const char *name, long long absent)
{
    long long v = absent;
    if (H5Aexists(loc, name) <= 0)
        return absent;
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t type = attr >= 0 ? H5Aget_type(attr) : -1;
    if (type < 0 || H5Tget_class(type) != H5T_INTEGER ||
        H5Aread(attr, H5T_NATIVE_LLONG, &v) < 0)
        v = absent;
    if (type >= 0)
        H5Tclose(type);
    if (attr >= 0)
        H5Aclose(attr);
    return v;
}

kvcal_status kvcal_token_set_info_read(const char *path, kvcal_token_set_info *out)
{
    memset(out, 0, sizeof *out);
    out->pack = -1;
    kvcal_status st = kvcal_file_check_input(path, "token set", 0);
    if (st)
        return st;
    hid_t file = -1, dset = -1, space = -1;
    H5E_BEGIN_TRY
    {
        file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (file < 0) {
            st = kvcal_fail(KVCAL_ERR_PARSE, "%s: not a readable HDF5 file", path);
        } else {
            attr_str(file, "format", out->format, sizeof out->format);
            out->format_version = attr_int(file, "format_version", 0);
            attr_str(file, "kvcal_version", out->kvcal_version,
                     sizeof out->kvcal_version);
            attr_str(file, "source", out->source, sizeof out->source);
            attr_str(file, "tokenizer", out->tokenizer, sizeof out->tokenizer);
            attr_str(file, "tokenizer_kind", out->tokenizer_kind,
                     sizeof out->tokenizer_kind);
            out->seed = attr_int(file, "seed", 0);
            out->pack = attr_int(file, "pack", -1);
            if (H5Lexists(file, "input_ids", H5P_DEFAULT) > 0)
                dset = H5Dopen2(file, "input_ids", H5P_DEFAULT);
            space = dset >= 0 ? H5Dget_space(dset) : -1;
            hsize_t dims[2];
            if (space >= 0 && H5Sget_simple_extent_ndims(space) == 2 &&
                H5Sget_simple_extent_dims(space, dims, NULL) == 2) {
                out->has_input_ids = 1;
                out->num_samples = (long long)dims[0];
                out->seq_len = (long long)dims[1];
            }
        }
    }
    H5E_END_TRY;
    if (space >= 0)
        H5Sclose(space);
    if (dset >= 0)
        H5Dclose(dset);
    if (file >= 0)
        H5Fclose(file);
    return st;
}
