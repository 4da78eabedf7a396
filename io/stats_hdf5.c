/* io/stats_hdf5.c: K/V statistics to and from HDF5 (layout in the header). */
#include "io/stats_hdf5.h"

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/status.h"
#include "io/file_read.h"
#include "io/hdf5_util.h"

#define DEFLATE_LEVEL 6

static const char *const kv_group[2] = {"k", "v"};

// --- writing -----------------------------------------------------------------

static kvcal_status put_attr_str(hid_t loc, const char *path, const char *name,
                                 const char *value)
{
    if (kvcal_h5_write_attr_str(loc, name, value) < 0)
        return kvcal_h5_fail(KVCAL_ERR_IO, path, "write attribute", name);
    return KVCAL_OK;
}

static kvcal_status put_attr_i64(hid_t loc, const char *path, const char *name,
                                 long long value)
{
    if (kvcal_h5_write_attr(loc, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &value) < 0)
        return kvcal_h5_fail(KVCAL_ERR_IO, path, "write attribute", name);
    return KVCAL_OK;
}

/* Writes data (dims) as dataset `name` of loc; rank 0 is a scalar (stored
 * contiguous), other ranks are chunked by `chunk` and compressed. */
static kvcal_status put_dataset(hid_t loc, const char *path, const char *name,
                                hid_t file_type, hid_t mem_type, int rank,
                                const hsize_t *dims, const hsize_t *chunk,
                                const void *data)
{
    if (kvcal_h5_write_dataset(loc, name, file_type, mem_type, rank, dims, chunk,
                               DEFLATE_LEVEL, KVCAL_H5_SHUFFLE | KVCAL_H5_NO_TIMES,
                               data) < 0)
        return kvcal_h5_fail(KVCAL_ERR_IO, path, "write dataset", name);
    return KVCAL_OK;
}

static kvcal_status put_root_attrs(hid_t file, const char *path, const kvcal_stats_t *s,
                                   const kvcal_model_identity *m,
                                   const kvcal_provenance *p)
{
    kvcal_status st;
    const struct {
        const char *name;
        const char *value;
    } strs[] = {
        {"format", KVCAL_STATS_FORMAT_NAME},
        {"tool_version",
         p && p->tool_version[0] ? p->tool_version : KVCAL_VERSION_STRING},
        {"architecture", m ? m->architecture : ""},
        {"model_type", m ? m->model_type : ""},
        {"dataset", p ? p->dataset : ""},
        {"observer", p ? p->observer : ""},
        {"observer_params", p && p->observer_params[0] ? p->observer_params : "{}"},
    };
    const struct {
        const char *name;
        long long value;
    } ints[] = {
        {"format_version", KVCAL_STATS_FORMAT_VERSION},
        {"num_layers", s->num_layers},
        {"num_kv_heads", s->num_kv_heads},
        {"head_dim", s->head_dim},
        {"num_bins", s->num_bins},
        {"hist_bins_per_octave", KVCAL_HIST_BINS_PER_OCTAVE},
        {"hist_min_exp", KVCAL_HIST_MIN_EXP},
        {"batches", s->batches},
        {"batch_start_tokens", s->batch_start_tokens},
        {"num_attention_heads", m ? m->num_attention_heads : 0},
        {"num_samples", p ? p->num_samples : 0},
        {"num_tokens", p ? p->num_tokens : 0},
        {"seed", p ? p->seed : 0},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if ((st = put_attr_str(file, path, strs[i].name, strs[i].value)))
            return st;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if ((st = put_attr_i64(file, path, ints[i].name, ints[i].value)))
            return st;
    if (s->num_experts && (st = put_attr_i64(file, path, "num_experts", s->num_experts)))
        return st;
    if (s->num_q_heads && (st = put_attr_i64(file, path, "num_q_heads", s->num_q_heads)))
        return st;
    if (s->min[0] && (st = put_attr_i64(file, path, "signed_range", 1)))
        return st;
    return KVCAL_OK;
}

static kvcal_status put_bin_edges(hid_t file, const char *path, int num_bins)
{
    double *edges = malloc((size_t)(num_bins + 1) * sizeof *edges); // (num_bins + 1)
    if (!edges)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    edges[0] = 0.0;
    for (int b = 1; b < num_bins; b++)
        edges[b] = kvcal_hist_bin_lower(b);
    edges[num_bins] = INFINITY;
    hsize_t dims[1] = {(hsize_t)num_bins + 1};
    kvcal_status st = put_dataset(file, path, "hist_bin_edges", H5T_IEEE_F64LE,
                                  H5T_NATIVE_DOUBLE, 1, dims, dims, edges);
    free(edges);
    return st;
}

/* Creates a group without modification times, so identical statistics give
 * byte-identical files. */
static hid_t create_group(hid_t loc, const char *name)
{
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE), g = -1;
    if (gcpl >= 0 && H5Pset_obj_track_times(gcpl, 0) >= 0)
        g = H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    if (gcpl >= 0)
        H5Pclose(gcpl);
    return g;
}

static kvcal_status put_layer(hid_t layers, const char *path, const kvcal_stats_t *s,
                              int l)
{
    kvcal_status st = KVCAL_OK;
    char name[32], full[48];
    const hsize_t H = (hsize_t)s->num_kv_heads;
    snprintf(name, sizeof name, "%d", l);
    hid_t lg = create_group(layers, name), g = -1;
    if (lg < 0) {
        snprintf(full, sizeof full, "layers/%d", l);
        return kvcal_h5_fail(KVCAL_ERR_IO, path, "create group", full);
    }
    for (int kv = 0; kv < 2 && !st; kv++) {
        g = create_group(lg, kv_group[kv]);
        if (g < 0) {
            snprintf(full, sizeof full, "layers/%d/%s", l, kv_group[kv]);
            st = kvcal_h5_fail(KVCAL_ERR_IO, path, "create group", full);
            break;
        }
        size_t lh = (size_t)l * s->num_kv_heads;
        hsize_t abs_dims[2] = {H, (hsize_t)s->head_dim};
        hsize_t hist_dims[2] = {H, (hsize_t)s->num_bins},
                hist_chunk[2] = {1, hist_dims[1]};
        hsize_t head_dims[1] = {H};
        st = put_dataset(g, path, "absmax", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, abs_dims,
                         abs_dims, s->absmax[kv] + lh * s->head_dim);
        if (!st)
            st = put_dataset(g, path, "histogram", H5T_STD_U64LE, H5T_NATIVE_UINT64, 2,
                             hist_dims, hist_chunk, s->hist[kv] + lh * s->num_bins);
        if (!st)
            st = put_dataset(g, path, "ema", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1,
                             head_dims, head_dims, s->ema[kv] + lh);
        if (!st)
            st = put_dataset(g, path, "batch_absmax", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1,
                             head_dims, head_dims, s->batch_absmax[kv] + lh);
        if (!st)
            st = put_dataset(g, path, "tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, NULL,
                             NULL, &s->tokens[l]);
        if (!st)
            st = put_dataset(g, path, "ema_tensor", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0,
                             NULL, NULL, &s->ema_tensor[kv][l]);
        if (!st && s->min[0])
            st = put_dataset(g, path, "min", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2,
                             abs_dims, abs_dims, s->min[kv] + lh * s->head_dim);
        if (!st && s->min[0])
            st = put_dataset(g, path, "max", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2,
                             abs_dims, abs_dims, s->max[kv] + lh * s->head_dim);
        H5Gclose(g);
    }
    if (!st && s->num_q_heads) {
        const hsize_t Q[1] = {(hsize_t)s->num_q_heads};
        if ((g = create_group(lg, "q")) < 0) {
            snprintf(full, sizeof full, "layers/%d/q", l);
            st = kvcal_h5_fail(KVCAL_ERR_IO, path, "create group", full);
        } else {
            st = put_dataset(g, path, "absmax", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, Q, Q,
                             s->q_absmax + (size_t)l * s->num_q_heads);
            H5Gclose(g);
        }
    }
    const hsize_t E[1] = {(hsize_t)s->num_experts};
    if (!st && s->num_experts)
        st = put_dataset(lg, path, "expert_tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, E,
                         E, s->expert_tokens + (size_t)l * s->num_experts);
    H5Gclose(lg);
    return st;
}

kvcal_status kvcal_stats_write_hdf5(const char *path, const kvcal_stats_t *stats,
                                    const kvcal_model_identity *model,
                                    const kvcal_provenance *prov)
{
    if (!path || !stats)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_stats_write_hdf5: NULL argument");
    kvcal_status st = KVCAL_OK;
    kvcal_h5_quiet q;
    kvcal_h5_quiet_begin(&q);
    kvcal_h5_image img;
    hid_t layers = -1;
    if (kvcal_h5_image_create(&img) < 0) {
        st = kvcal_h5_fail(KVCAL_ERR_IO, path, "create", "the file in memory");
        goto fail;
    }
    if ((st = put_root_attrs(img.file, path, stats, model, prov)) ||
        (st = put_bin_edges(img.file, path, stats->num_bins)))
        goto fail;
    layers = create_group(img.file, "layers");
    if (layers < 0) {
        st = kvcal_h5_fail(KVCAL_ERR_IO, path, "create group", "layers");
        goto fail;
    }
    for (int l = 0; l < stats->num_layers; l++)
        if ((st = put_layer(layers, path, stats, l)))
            goto fail;
    H5Gclose(layers);
    st = kvcal_h5_image_write(&img, path);
    kvcal_h5_quiet_end(&q);
    return st;
fail:
    if (layers >= 0)
        H5Gclose(layers);
    kvcal_h5_image_discard(&img);
    kvcal_h5_quiet_end(&q);
    return st;
}

// --- reading -----------------------------------------------------------------

/* Whether attribute `name` of loc is missing (or unreadable: a damaged
 * file); then *st is KVCAL_OK if it is optional, else a recorded error. */
static int attr_absent(hid_t loc, const char *path, const char *name, int required,
                       kvcal_status *st)
{
    const htri_t exists = H5Aexists(loc, name);
    if (exists > 0)
        return 0;
    if (exists < 0) {
        char what[96];
        snprintf(what, sizeof what, "attribute '%s'; is the file damaged?", name);
        *st = kvcal_h5_fail(KVCAL_ERR_FORMAT, path, "read", what);
        return 1;
    }
    *st = required ? kvcal_fail(KVCAL_ERR_FORMAT,
                                "%s: attribute '%s' is missing; not a kvcal statistics "
                                "file",
                                path, name)
                   : KVCAL_OK;
    return 1;
}

/* Reads a string attribute (variable or fixed length) into buf; a missing
 * attribute gives "" unless required. */
static kvcal_status get_attr_str(hid_t loc, const char *path, const char *name,
                                 int required, char *buf, size_t n)
{
    kvcal_status st = KVCAL_OK;
    hid_t attr = -1, type = -1, mem = -1;
    buf[0] = '\0';
    if (attr_absent(loc, path, name, required, &st))
        return st;
    attr = H5Aopen(loc, name, H5P_DEFAULT);
    type = attr >= 0 ? H5Aget_type(attr) : -1;
    if (type < 0)
        goto fail;
    if (H5Tget_class(type) != H5T_STRING) {
        st = kvcal_fail(KVCAL_ERR_FORMAT, "%s: attribute '%s' is not a string", path,
                        name);
        goto done;
    }
    if (H5Tis_variable_str(type) > 0) {
        char *v = NULL;
        mem = H5Tcopy(H5T_C_S1);
        if (mem < 0 || H5Tset_size(mem, H5T_VARIABLE) < 0 ||
            H5Tset_cset(mem, H5Tget_cset(type)) < 0 || H5Aread(attr, mem, &v) < 0)
            goto fail;
        snprintf(buf, n, "%s", v ? v : "");
        H5free_memory(v);
    } else {
        size_t size = H5Tget_size(type);
        char *v = calloc(size + 1, 1);
        mem = H5Tcopy(H5T_C_S1);
        if (!v || mem < 0 || H5Tset_size(mem, size + 1) < 0 ||
            H5Tset_cset(mem, H5Tget_cset(type)) < 0 ||
            H5Tset_strpad(mem, H5T_STR_NULLTERM) < 0 || H5Aread(attr, mem, v) < 0) {
            free(v);
            goto fail;
        }
        snprintf(buf, n, "%s", v);
        free(v);
    }
    goto done;
fail:
    st = kvcal_h5_fail(KVCAL_ERR_FORMAT, path, "read attribute", name);
done:
    if (mem >= 0)
        H5Tclose(mem);
    if (type >= 0)
        H5Tclose(type);
    if (attr >= 0)
        H5Aclose(attr);
    return st;
}

/* Reads an integer attribute; a missing one gives 0 unless required. */
static kvcal_status get_attr_i64(hid_t loc, const char *path, const char *name,
                                 int required, long long *out)
{
    kvcal_status st = KVCAL_OK;
    *out = 0;
    if (attr_absent(loc, path, name, required, &st))
        return st;
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t type = attr >= 0 ? H5Aget_type(attr) : -1;
    if (type < 0 || H5Tget_class(type) != H5T_INTEGER)
        st = kvcal_fail(KVCAL_ERR_FORMAT, "%s: attribute '%s' is not an integer", path,
                        name);
    else if (H5Aread(attr, H5T_NATIVE_LLONG, out) < 0)
        st = kvcal_h5_fail(KVCAL_ERR_FORMAT, path, "read attribute", name);
    if (type >= 0)
        H5Tclose(type);
    if (attr >= 0)
        H5Aclose(attr);
    return st;
}

/* Reads dataset `group`/`name` of the given class and shape into out. */
static kvcal_status get_dataset(hid_t file, const char *path, const char *group,
                                const char *name, H5T_class_t cls, hid_t mem_type,
                                int rank, const hsize_t *dims, void *out)
{
    kvcal_status st = KVCAL_OK;
    char full[96];
    snprintf(full, sizeof full, "%s/%s", group, name);
    hid_t dset = H5Dopen2(file, full, H5P_DEFAULT);
    hid_t space = dset >= 0 ? H5Dget_space(dset) : -1;
    hid_t type = dset >= 0 ? H5Dget_type(dset) : -1;
    if (dset < 0 || space < 0 || type < 0) {
        st = kvcal_fail(KVCAL_ERR_FORMAT, "%s: dataset %s is missing or unreadable", path,
                        full);
        goto done;
    }
    hsize_t got[2] = {0, 0};
    int got_rank = H5Sget_simple_extent_ndims(space);
    if (H5Tget_class(type) != cls || got_rank != rank || got_rank > 2 ||
        H5Sget_simple_extent_dims(space, got, NULL) < 0 ||
        (rank >= 1 && got[0] != dims[0]) || (rank == 2 && got[1] != dims[1])) {
        st =
            kvcal_fail(KVCAL_ERR_FORMAT,
                       "%s: dataset %s has the wrong type or shape (expected %s of shape "
                       "(%llu, %llu) of rank %d)",
                       path, full, cls == H5T_FLOAT ? "floats" : "integers",
                       rank >= 1 ? (unsigned long long)dims[0] : 0ull,
                       rank == 2 ? (unsigned long long)dims[1] : 0ull, rank);
        goto done;
    }
    if (H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
        st = kvcal_h5_fail(KVCAL_ERR_FORMAT, path, "read dataset", full);
done:
    if (type >= 0)
        H5Tclose(type);
    if (space >= 0)
        H5Sclose(space);
    if (dset >= 0)
        H5Dclose(dset);
    return st;
}

static kvcal_status check_values(const char *path, const char *what, const float *f,
                                 const double *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = f ? (double)f[i] : d[i];
        if (!isfinite(v) || v < 0.0)
            return kvcal_fail(
                isfinite(v) ? KVCAL_ERR_FORMAT : KVCAL_ERR_NONFINITE,
                "%s: %s[%zu] is %g; statistics must be finite and >= 0 (the "
                "file is damaged: recalibrate)",
                path, what, i, v);
    }
    return KVCAL_OK;
}

static kvcal_status get_layer(hid_t file, const char *path, kvcal_stats_t *s, int l)
{
    kvcal_status st = KVCAL_OK;
    const hsize_t H = (hsize_t)s->num_kv_heads;
    size_t lh = (size_t)l * s->num_kv_heads;
    for (int kv = 0; kv < 2 && !st; kv++) {
        char g[48];
        snprintf(g, sizeof g, "layers/%d/%s", l, kv_group[kv]);
        hsize_t abs_dims[2] = {H, (hsize_t)s->head_dim};
        hsize_t hist_dims[2] = {H, (hsize_t)s->num_bins};
        hsize_t head_dims[1] = {H};
        float *absmax = s->absmax[kv] + lh * s->head_dim;
        int64_t tokens = 0;
        char what[96];
        snprintf(what, sizeof what, "%s/absmax", g);
        if (!st)
            st = get_dataset(file, path, g, "absmax", H5T_FLOAT, H5T_NATIVE_FLOAT, 2,
                             abs_dims, absmax);
        if (!st)
            st = check_values(path, what, absmax, NULL, (size_t)H * s->head_dim);
        if (!st)
            st = get_dataset(file, path, g, "histogram", H5T_INTEGER, H5T_NATIVE_UINT64,
                             2, hist_dims, s->hist[kv] + lh * s->num_bins);
        snprintf(what, sizeof what, "%s/ema", g);
        if (!st)
            st = get_dataset(file, path, g, "ema", H5T_FLOAT, H5T_NATIVE_DOUBLE, 1,
                             head_dims, s->ema[kv] + lh);
        if (!st)
            st = check_values(path, what, NULL, s->ema[kv] + lh, (size_t)H);
        snprintf(what, sizeof what, "%s/batch_absmax", g);
        if (!st)
            st = get_dataset(file, path, g, "batch_absmax", H5T_FLOAT, H5T_NATIVE_FLOAT,
                             1, head_dims, s->batch_absmax[kv] + lh);
        if (!st)
            st = check_values(path, what, s->batch_absmax[kv] + lh, NULL, (size_t)H);
        if (!st)
            st = get_dataset(file, path, g, "tokens", H5T_INTEGER, H5T_NATIVE_INT64, 0,
                             NULL, &tokens);
        /* the per-tensor moving average; files written before it existed
         * get the max of the heads' averages, what kvcal used then */
        snprintf(what, sizeof what, "%s/ema_tensor", g);
        double *et = &s->ema_tensor[kv][l];
        if (!st && H5Lexists(file, what, H5P_DEFAULT) > 0) {
            st = get_dataset(file, path, g, "ema_tensor", H5T_FLOAT, H5T_NATIVE_DOUBLE, 0,
                             NULL, et);
            if (!st)
                st = check_values(path, what, NULL, et, 1);
        } else if (!st) {
            for (size_t h = 0; h < (size_t)H; h++)
                *et = s->ema[kv][lh + h] > *et ? s->ema[kv][lh + h] : *et;
        }
        for (int m = 0; !st && s->min[0] && m < 2; m++) {
            float *r = (m ? s->max[kv] : s->min[kv]) + lh * s->head_dim;
            st = get_dataset(file, path, g, m ? "max" : "min", H5T_FLOAT,
                             H5T_NATIVE_FLOAT, 2, abs_dims, r);
            for (size_t i = 0; !st && i < (size_t)H * s->head_dim; i++)
                if (!(isfinite(r[i]) && (m ? r[i] >= 0.0f : r[i] <= 0.0f)))
                    st = kvcal_fail(KVCAL_ERR_FORMAT,
                                    "%s: %s/%s[%zu] is %g: the signed range holds 0 (min "
                                    "<= 0 <= max) and is finite",
                                    path, g, m ? "max" : "min", i, (double)r[i]);
        }
        if (!st && tokens < 0)
            st = kvcal_fail(KVCAL_ERR_FORMAT, "%s: %s/tokens is negative (%lld)", path, g,
                            (long long)tokens);
        if (!st && kv == KVCAL_K)
            s->tokens[l] = tokens;
    }
    if (!st && s->num_q_heads) {
        char g[32], what[48];
        const hsize_t Q[1] = {(hsize_t)s->num_q_heads};
        float *qa = s->q_absmax + (size_t)l * s->num_q_heads;
        snprintf(g, sizeof g, "layers/%d/q", l);
        snprintf(what, sizeof what, "%s/absmax", g);
        st = get_dataset(file, path, g, "absmax", H5T_FLOAT, H5T_NATIVE_FLOAT, 1, Q, qa);
        if (!st)
            st = check_values(path, what, qa, NULL, (size_t)s->num_q_heads);
    }
    if (!st && s->num_experts) {
        char g[32];
        const hsize_t E[1] = {(hsize_t)s->num_experts};
        int64_t *counts = s->expert_tokens + (size_t)l * s->num_experts;
        snprintf(g, sizeof g, "layers/%d", l);
        st = get_dataset(file, path, g, "expert_tokens", H5T_INTEGER, H5T_NATIVE_INT64, 1,
                         E, counts);
        for (int e = 0; !st && e < s->num_experts; e++)
            if (counts[e] < 0)
                st = kvcal_fail(KVCAL_ERR_FORMAT,
                                "%s: %s/expert_tokens[%d] is negative (%lld)", path, g, e,
                                (long long)counts[e]);
    }
    return st;
}

kvcal_status kvcal_stats_read_hdf5(const char *path, kvcal_stats_t **out,
                                   kvcal_model_identity *model, kvcal_provenance *prov)
{
    if (!path || !out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_stats_read_hdf5: NULL argument");
    *out = NULL;
    if (access(path, R_OK) != 0)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    kvcal_status st = KVCAL_OK;
    kvcal_stats_t *s = NULL;
    hid_t file = -1;
    kvcal_h5_quiet q;
    if ((st = kvcal_file_check_input(path, "statistics file", 0)))
        return st;
    kvcal_h5_quiet_begin(&q);
    if (H5Fis_hdf5(path) <= 0) {
        st = kvcal_fail(KVCAL_ERR_PARSE,
                        "%s: not an HDF5 file (expected statistics written by kvcal "
                        "calibrate --stats)",
                        path);
        goto fail;
    }
    file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        st = kvcal_h5_fail(KVCAL_ERR_IO, path, "open", "the file");
        goto fail;
    }
    char text[KVCAL_TEXT_MAX];
    if ((st = get_attr_str(file, path, "format", 1, text, sizeof text)))
        goto fail;
    if (strcmp(text, KVCAL_STATS_FORMAT_NAME)) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: format is '%s', not '%s'; not a kvcal statistics file", path,
                        text, KVCAL_STATS_FORMAT_NAME);
        goto fail;
    }
    long long version, L, H, D, bins, per_octave, min_exp, batches, start;
    if ((st = get_attr_i64(file, path, "format_version", 1, &version)))
        goto fail;
    if (version < 1 || version > KVCAL_STATS_FORMAT_VERSION) {
        st =
            kvcal_fail(KVCAL_ERR_FORMAT,
                       "%s: format_version %lld is not one this kvcal reads (1..%d); use "
                       "the kvcal that wrote it",
                       path, version, KVCAL_STATS_FORMAT_VERSION);
        goto fail;
    }
    if ((st = get_attr_i64(file, path, "num_layers", 1, &L)) ||
        (st = get_attr_i64(file, path, "num_kv_heads", 1, &H)) ||
        (st = get_attr_i64(file, path, "head_dim", 1, &D)) ||
        (st = get_attr_i64(file, path, "num_bins", 1, &bins)) ||
        (st = get_attr_i64(file, path, "hist_bins_per_octave", 1, &per_octave)) ||
        (st = get_attr_i64(file, path, "hist_min_exp", 1, &min_exp)) ||
        (st = get_attr_i64(file, path, "batches", 1, &batches)) ||
        (st = get_attr_i64(file, path, "batch_start_tokens", 0, &start)))
        goto fail;
    if (bins != KVCAL_HIST_BINS || per_octave != KVCAL_HIST_BINS_PER_OCTAVE ||
        min_exp != KVCAL_HIST_MIN_EXP) {
        st = kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: histogram of %lld bins, %lld per octave from 2^%lld; this kvcal "
            "uses %d bins, %d per octave from 2^%d",
            path, bins, per_octave, min_exp, KVCAL_HIST_BINS, KVCAL_HIST_BINS_PER_OCTAVE,
            KVCAL_HIST_MIN_EXP);
        goto fail;
    }
    if (L < 1 || L > 65536 || H < 1 || H > 65536 || D < 1 || D > 65536 || batches < 0 ||
        start < 0) {
        st = kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: %lld layers x %lld kv heads x head_dim %lld, %lld batches: out "
            "of range",
            path, L, H, D, batches);
        goto fail;
    }
    if ((st = kvcal_stats_create((int)L, (int)H, (int)D, &s)))
        goto fail;
    s->batches = batches;
    s->batch_start_tokens = start;
    long long experts = 0;
    if ((st = get_attr_i64(file, path, "num_experts", 0, &experts)))
        goto fail;
    if (experts < 0 || experts > 65536) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: num_experts %lld is out of range [0, 65536]", path, experts);
        goto fail;
    }
    if ((st = kvcal_stats_set_experts(s, (int)experts)))
        goto fail;
    /* added later, both optional: files written before read without them */
    long long q_heads = 0, range = 0;
    if ((st = get_attr_i64(file, path, "num_q_heads", 0, &q_heads)) ||
        (st = get_attr_i64(file, path, "signed_range", 0, &range)))
        goto fail;
    if (q_heads < 0 || q_heads > 65536 || q_heads % H || (range != 0 && range != 1)) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: num_q_heads %lld (a multiple of the %lld kv heads in [0, "
                        "65536]) or signed_range %lld (0 or 1) is out of range",
                        path, q_heads, H, range);
        goto fail;
    }
    if ((st = kvcal_stats_set_q_heads(s, (int)q_heads)) ||
        (st = kvcal_stats_set_range(s, (int)range)))
        goto fail;
    for (int l = 0; l < s->num_layers; l++)
        if ((st = get_layer(file, path, s, l)))
            goto fail;
    if (model) {
        long long heads;
        memset(model, 0, sizeof *model);
        if ((st = get_attr_str(file, path, "architecture", 0, model->architecture,
                               sizeof model->architecture)) ||
            (st = get_attr_str(file, path, "model_type", 0, model->model_type,
                               sizeof model->model_type)) ||
            (st = get_attr_i64(file, path, "num_attention_heads", 0, &heads)))
            goto fail;
        model->num_layers = (int)L;
        model->num_kv_heads = (int)H;
        model->head_dim = (int)D;
        model->num_attention_heads = (int)heads;
    }
    if (prov) {
        memset(prov, 0, sizeof *prov);
        if ((st = get_attr_str(file, path, "observer", 0, prov->observer,
                               sizeof prov->observer)) ||
            (st = get_attr_str(file, path, "observer_params", 0, prov->observer_params,
                               sizeof prov->observer_params)) ||
            (st = get_attr_str(file, path, "dataset", 0, prov->dataset,
                               sizeof prov->dataset)) ||
            (st = get_attr_str(file, path, "tool_version", 0, prov->tool_version,
                               sizeof prov->tool_version)) ||
            (st = get_attr_i64(file, path, "num_samples", 0, &prov->num_samples)) ||
            (st = get_attr_i64(file, path, "num_tokens", 0, &prov->num_tokens)) ||
            (st = get_attr_i64(file, path, "seed", 0, &prov->seed)))
            goto fail;
    }
    H5Fclose(file);
    kvcal_h5_quiet_end(&q);
    *out = s;
    return KVCAL_OK;
fail:
    kvcal_stats_destroy(s);
    if (file >= 0)
        H5Fclose(file);
    kvcal_h5_quiet_end(&q);
    return st;
}
