/* io/dataset/token_set_write.c: samples written as an HDF5 token set (what
 * `kvcal tokenize` writes and calibration reads back): input_ids (N, L)
 * int32 and lengths (N) int32, deflate-compressed chunks, provenance
 * attributes, built in memory and written whole. */
#include <hdf5.h>

#include "core/status.h"
#include "io/dataset/dataset.h"
#include "io/hdf5_util.h"

#define TOKENS_FORMAT "kvcal-tokens"
#define TOKENS_FORMAT_VERSION 1

/* A chunked, deflate-compressed int32 dataset of rank 1 or 2. */
static int write_i32(hid_t file, const char *name, int rank, const hsize_t *dims,
                     const int32_t *data)
{
    hsize_t chunk[2] = {dims[0], rank == 2 ? dims[1] : 1};
    size_t row = rank == 2 ? (size_t)dims[1] : 1;
    hsize_t rows = (hsize_t)((1u << 16) / row);
    if (rows < 1)
        rows = 1;
    if (chunk[0] > rows)
        chunk[0] = rows;
    return kvcal_h5_write_dataset(file, name, H5T_STD_I32LE, H5T_NATIVE_INT32, rank, dims,
                                  chunk, 4, KVCAL_H5_NO_TIMES, data);
}

kvcal_status kvcal_samples_write_hdf5(const char *path, const kvcal_samples *s,
                                      const kvcal_token_provenance *prov)
{
    if (!path || !s || s->num_samples <= 0 || s->seq_len <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "write token set: no samples to write");
    kvcal_status st = KVCAL_OK;
    kvcal_h5_quiet q;
    kvcal_h5_quiet_begin(&q);
    kvcal_h5_image img;
    hid_t file = kvcal_h5_image_create(&img) < 0 ? -1 : img.file;
    hsize_t dims[2] = {(hsize_t)s->num_samples, (hsize_t)s->seq_len};
    int32_t version = TOKENS_FORMAT_VERSION, pack = prov ? prov->pack : 0;
    int64_t ntok = s->num_tokens;
    uint64_t seed = prov ? prov->seed : 0;
    if (file < 0 || write_i32(file, "input_ids", 2, dims, s->ids) ||
        write_i32(file, "lengths", 1, dims, s->lengths) ||
        kvcal_h5_write_attr_str(file, "format", TOKENS_FORMAT) ||
        kvcal_h5_write_attr(file, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT32,
                            &version) ||
        kvcal_h5_write_attr_str(file, "kvcal_version", kvcal_version()) ||
        kvcal_h5_write_attr(file, "num_tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, &ntok) ||
        kvcal_h5_write_attr_str(file, "source", prov ? prov->source : NULL) ||
        kvcal_h5_write_attr_str(file, "tokenizer", prov ? prov->tokenizer : NULL) ||
        kvcal_h5_write_attr_str(file, "tokenizer_kind",
                                prov ? prov->tokenizer_kind : NULL) ||
        kvcal_h5_write_attr(file, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &seed) ||
        kvcal_h5_write_attr(file, "pack", H5T_STD_I32LE, H5T_NATIVE_INT32, &pack)) {
        st = kvcal_h5_fail(KVCAL_ERR_IO, path, "build", "the token set in memory");
        kvcal_h5_image_discard(&img);
    } else {
        st = kvcal_h5_image_write(&img, path);
    }
    kvcal_h5_quiet_end(&q);
    return st;
}
