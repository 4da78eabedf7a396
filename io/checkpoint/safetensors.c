/* io/checkpoint/safetensors.c: safetensors files (mmap read, atomic write) and
 * checkpoints of one or more shards.
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON header
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
 * {str: str}}, then the data section; offsets are relative to its start. The
 * checks are those of the reference (Rust) implementation: N at most 100 MB
 * and inside the file, tensors tiling the data section exactly. */
#include "io/checkpoint/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"
#include "io/atomic_file.h"
#include "io/file_read.h"
#include "io/json_file.h"

#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact */

/* --- dtypes -------------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    [KVCAL_DTYPE_F32] = {"F32", 4},   [KVCAL_DTYPE_F16] = {"F16", 2},
    [KVCAL_DTYPE_BF16] = {"BF16", 2}, [KVCAL_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [KVCAL_DTYPE_I32] = {"I32", 4},   [KVCAL_DTYPE_I64] = {"I64", 8},
    [KVCAL_DTYPE_F64] = {"F64", 8},   [KVCAL_DTYPE_U8] = {"U8", 1},
    [KVCAL_DTYPE_I8] = {"I8", 1},     [KVCAL_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [KVCAL_DTYPE_I16] = {"I16", 2},   [KVCAL_DTYPE_BOOL] = {"BOOL", 1},
    [KVCAL_DTYPE_U16] = {"U16", 2},   [KVCAL_DTYPE_U32] = {"U32", 4},
    [KVCAL_DTYPE_U64] = {"U64", 8},
};
#define DTYPE_COUNT ((int)(sizeof dtype_table / sizeof dtype_table[0]))

const char *kvcal_dtype_name(kvcal_dtype dtype)
{
    return (unsigned)dtype < (unsigned)DTYPE_COUNT ? dtype_table[dtype].name : NULL;
}

int kvcal_dtype_parse(const char *name, kvcal_dtype *out)
{
    for (int i = 0; name && i < DTYPE_COUNT; i++) {
        if (!strcmp(name, dtype_table[i].name)) {
            *out = (kvcal_dtype)i;
            return 0;
        }
    }
    return -1;
}

size_t kvcal_dtype_size(kvcal_dtype dtype)
{
    return (unsigned)dtype < (unsigned)DTYPE_COUNT ? dtype_table[dtype].size : 0;
}

/* --- one file ------------------------------------------------------------ */

struct kvcal_safetensors {
    char *name; /* path, for messages */
    void *map;  /* mmap of the file, NULL for an in-memory image */
    size_t map_len;
    cJSON *header;  /* owns the tensor names */
    char *metadata; /* "__metadata__" printed as JSON, or NULL */
    int count;
    kvcal_tensor_info *tensors; /* (count) in header order */
    int *by_name;               /* (count) indices sorted by name */
};

static int exact_uint(const cJSON *it, double max, uint64_t *out)
{
    if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > max ||
        it->valuedouble != floor(it->valuedouble))
        return 0;
    *out = (uint64_t)it->valuedouble;
    return 1;
}

void kvcal_tensor_shape_str(const kvcal_tensor_info *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "",
                              (long long)t->shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* Reads one tensor entry; `data_len` bytes of data follow the header. */
static kvcal_status st_read_tensor(const char *name, const cJSON *entry,
                                   const uint8_t *data, size_t data_len,
                                   kvcal_tensor_info *t, uint64_t range[2])
{
    const char *tn = entry->string;
    if (!cJSON_IsObject(entry))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: tensor \"%.200s\": header entry is not an object; "
                          "expected {\"dtype\", \"shape\", \"data_offsets\"}",
                          name, tn);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsString(dtype))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: tensor \"%.200s\": \"dtype\" missing or not a string; the "
                          "header is damaged",
                          name, tn);
    if (kvcal_dtype_parse(dtype->valuestring, &t->dtype) != 0)
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: tensor \"%.200s\": unknown dtype \"%.32s\"; expected one of F32 F16 "
            "BF16 F64 F8_E4M3 F8_E5M2 I8 I16 I32 I64 U8 U16 U32 U64 BOOL",
            name, tn, dtype->valuestring);
    if (!cJSON_IsArray(shape))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: tensor \"%.200s\": \"shape\" missing or not an array; the "
                          "header is damaged",
                          name, tn);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > KVCAL_MAX_DIMS)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: tensor \"%.200s\": %d dimensions, more than the %d supported", name, tn,
            ndim, KVCAL_MAX_DIMS);
    t->name = tn;
    t->ndim = ndim;
    uint64_t numel = 1;
    int d = 0;
    for (const cJSON *dim = shape->child; dim; dim = dim->next, d++) {
        uint64_t v;
        if (!exact_uint(dim, MAX_EXACT_INT, &v))
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: tensor \"%.200s\": shape[%d] is not a non-negative "
                              "integer; the header is damaged",
                              name, tn, d);
        t->shape[d] = (int64_t)v;
        if (__builtin_mul_overflow(numel, v, &numel) || numel > (uint64_t)INT64_MAX)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: tensor \"%.200s\": the element count of its shape "
                              "overflows 64 bits; the header is damaged",
                              name, tn);
    }
    t->numel = (int64_t)numel;
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)kvcal_dtype_size(t->dtype), &nbytes))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: tensor \"%.200s\": its byte size overflows 64 bits; the "
                          "header is damaged",
                          name, tn);
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !exact_uint(offsets->child, MAX_EXACT_INT, &range[0]) ||
        !exact_uint(offsets->child->next, MAX_EXACT_INT, &range[1]))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: tensor \"%.200s\": \"data_offsets\" is not [begin, end] "
                          "of non-negative integers; the header is damaged",
                          name, tn);
    if (range[1] < range[0])
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: tensor \"%.200s\": data_offsets [%llu, %llu] end before "
                          "they begin; the header is damaged",
                          name, tn, (unsigned long long)range[0],
                          (unsigned long long)range[1]);
    if (range[1] > data_len)
        return kvcal_fail(KVCAL_ERR_PARSE,
                          "%s: tensor \"%.200s\": data_offsets end at byte %llu of a "
                          "%zu-byte data section; the file is truncated",
                          name, tn, (unsigned long long)range[1], data_len);
    if (range[1] - range[0] != nbytes) {
        char sh[160];
        kvcal_tensor_shape_str(t, sh, sizeof sh);
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: tensor \"%.200s\": shape %s of %s needs %llu bytes but "
                          "data_offsets span %llu; the header is damaged",
                          name, tn, sh, dtype->valuestring, (unsigned long long)nbytes,
                          (unsigned long long)(range[1] - range[0]));
    }
    t->data = data + range[0];
    t->nbytes = (size_t)nbytes;
    return KVCAL_OK;
}

static kvcal_status st_read_metadata(const char *name, const cJSON *meta, char **out)
{
    if (!cJSON_IsObject(meta))
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: \"__metadata__\" is not an object; it must map strings to strings",
            name);
    for (const cJSON *m = meta->child; m; m = m->next)
        if (!cJSON_IsString(m))
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: \"__metadata__\" value of \"%.200s\" is not a string; "
                              "it must map strings to strings",
                              name, m->string);
    *out = cJSON_PrintUnformatted(meta);
    return *out ? KVCAL_OK : kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", name);
}

typedef struct st_span {
    uint64_t begin, end;
    int index;
} st_span;

static int span_compare(const void *a, const void *b)
{
    const st_span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors must tile [0, data_len) exactly, as the reference requires. */
static kvcal_status st_check_tiling(const kvcal_safetensors_t *st, st_span *spans,
                                    size_t data_len)
{
    qsort(spans, (size_t)st->count, sizeof *spans, span_compare);
    uint64_t at = 0;
    for (int i = 0; i < st->count; i++) {
        const char *tn = st->tensors[spans[i].index].name;
        if (spans[i].begin < at)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: tensor \"%.200s\" (bytes %llu-%llu) overlaps tensor "
                              "\"%.200s\"; the header is damaged",
                              st->name, tn, (unsigned long long)spans[i].begin,
                              (unsigned long long)spans[i].end,
                              st->tensors[spans[i - 1].index].name);
        if (spans[i].begin > at)
            return kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: bytes %llu-%llu of the data section belong to no tensor (before "
                "\"%.200s\"); the reference loader rejects gaps",
                st->name, (unsigned long long)at, (unsigned long long)spans[i].begin, tn);
        at = spans[i].end;
    }
    if (at != data_len)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: %llu bytes of the data section follow the last tensor; "
                          "the reference loader rejects them",
                          st->name, (unsigned long long)(data_len - at));
    return KVCAL_OK;
}

static int name_compare(const void *a, const void *b, void *ctx)
{
    const kvcal_tensor_info *t = ctx;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

static kvcal_status st_parse_header(kvcal_safetensors_t *st, const uint8_t *buf,
                                    size_t len)
{
    if (len < 8)
        return kvcal_fail(KVCAL_ERR_PARSE,
                          "%s: %zu bytes, less than the 8-byte header length; not a "
                          "safetensors file (empty or truncated)",
                          st->name, len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | buf[i];
    if (n > KVCAL_SAFETENSORS_MAX_HEADER)
        return kvcal_fail(KVCAL_ERR_PARSE,
                          "%s: header length field says %llu bytes, over the %u-byte "
                          "limit; not a safetensors file or a corrupted one",
                          st->name, (unsigned long long)n, KVCAL_SAFETENSORS_MAX_HEADER);
    if (n > len - 8)
        return kvcal_fail(KVCAL_ERR_PARSE,
                          "%s: header length field says %llu bytes but only %zu follow; "
                          "the file is truncated or not safetensors",
                          st->name, (unsigned long long)n, len - 8);
    char json_name[600];
    snprintf(json_name, sizeof json_name, "%s (header)", st->name);
    kvcal_status s =
        kvcal_json_parse((const char *)buf + 8, (size_t)n, json_name, &st->header);
    if (s != KVCAL_OK)
        return s;
    if (!cJSON_IsObject(st->header))
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: the header is JSON but not an object; not a safetensors file", st->name);
    const uint8_t *data = buf + 8 + n;
    size_t data_len = len - 8 - (size_t)n;
    int count = 0;
    for (const cJSON *e = st->header->child; e; e = e->next)
        count += strcmp(e->string, "__metadata__") != 0;
    st->tensors = calloc((size_t)count + 1, sizeof *st->tensors);
    st->by_name = calloc((size_t)count + 1, sizeof *st->by_name);
    st_span *spans = calloc((size_t)count + 1, sizeof *spans);
    if (!st->tensors || !st->by_name || !spans) {
        free(spans);
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory for %d tensor entries",
                          st->name, count);
    }
    for (const cJSON *e = st->header->child; e && s == KVCAL_OK; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            s = st_read_metadata(st->name, e, &st->metadata);
            continue;
        }
        uint64_t range[2] = {0, 0};
        s = st_read_tensor(st->name, e, data, data_len, &st->tensors[st->count], range);
        spans[st->count] = (st_span){range[0], range[1], st->count};
        st->by_name[st->count] = st->count;
        st->count++;
    }
    if (s == KVCAL_OK)
        s = st_check_tiling(st, spans, data_len);
    free(spans);
    if (s == KVCAL_OK)
        qsort_r(st->by_name, (size_t)st->count, sizeof *st->by_name, name_compare,
                st->tensors);
    return s;
}

static kvcal_status st_create(const char *name, kvcal_safetensors_t **out)
{
    *out = calloc(1, sizeof **out);
    if (*out)
        (*out)->name = strdup(name ? name : "(safetensors)");
    if (!*out || !(*out)->name) {
        free(*out);
        *out = NULL;
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory",
                          name ? name : "(safetensors)");
    }
    return KVCAL_OK;
}

kvcal_status kvcal_safetensors_parse(const void *buf, size_t len, const char *name,
                                     kvcal_safetensors_t **out)
{
    kvcal_status s = st_create(name, out);
    if (s != KVCAL_OK)
        return s;
    s = st_parse_header(*out, buf, len);
    if (s != KVCAL_OK) {
        kvcal_safetensors_close(*out);
        *out = NULL;
    }
    return s;
}

kvcal_status kvcal_safetensors_open(const char *path, kvcal_safetensors_t **out)
{
    *out = NULL;
    kvcal_safetensors_t *st = NULL;
    kvcal_status s = st_create(path, &st);
    if (s != KVCAL_OK)
        return s;
    if ((s = kvcal_file_map(path, ".safetensors file", &st->map, &st->map_len)) ||
        (s = st_parse_header(st, st->map, st->map_len))) {
        kvcal_safetensors_close(st);
        return s;
    }
    *out = st;
    return KVCAL_OK;
}

void kvcal_safetensors_close(kvcal_safetensors_t *st)
{
    if (!st)
        return;
    kvcal_file_unmap(st->map, st->map_len);
    cJSON_Delete(st->header);
    cJSON_free(st->metadata);
    free(st->tensors);
    free(st->by_name);
    free(st->name);
    free(st);
}

int kvcal_safetensors_count(const kvcal_safetensors_t *st)
{
    return st ? st->count : 0;
}

const kvcal_tensor_info *kvcal_safetensors_at(const kvcal_safetensors_t *st, int i)
{
    return st && i >= 0 && i < st->count ? &st->tensors[i] : NULL;
}

const kvcal_tensor_info *kvcal_safetensors_find(const kvcal_safetensors_t *st,
                                                const char *name)
{
    int lo = 0, hi = st ? st->count - 1 : -1;
    while (name && lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const kvcal_tensor_info *t = &st->tensors[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *kvcal_safetensors_metadata(const kvcal_safetensors_t *st)
{
    return st ? st->metadata : NULL;
}

/* --- conversion to float32 ------------------------------------------------ */

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF,
             bits;
    if (exp == 0) {
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    if (exp == 31)
        bits = sign | 0x7F800000u | (man << 13);
    else
        bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* e4m3fn (OCP): bias 7, no infinities, S.1111.111 is NaN, max 448. */
static float e4m3_to_f32(uint8_t b)
{
    int exp = (b >> 3) & 0xF, man = b & 0x7;
    float v;
    if (exp == 15 && man == 7)
        v = NAN;
    else if (exp == 0)
        v = ldexpf((float)man, -9);
    else
        v = ldexpf((float)(8 + man), exp - 10);
    return (b & 0x80) ? -v : v;
}

/* e5m2: bias 15, IEEE-style infinities and NaNs, max 57344. */
static float e5m2_to_f32(uint8_t b)
{
    int exp = (b >> 2) & 0x1F, man = b & 0x3;
    float v;
    if (exp == 31)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexpf((float)man, -16);
    else
        v = ldexpf((float)(4 + man), exp - 17);
    return (b & 0x80) ? -v : v;
}

static float f64_to_f32(double d)
{
    if (d > FLT_MAX)
        return INFINITY;
    if (d < -FLT_MAX)
        return -INFINITY;
    return (float)d;
}

kvcal_status kvcal_tensor_to_f32(const kvcal_tensor_info *t, float *dst)
{
    const uint8_t *src = t->data; /* (numel * dtype size) bytes, maybe unaligned */
    size_t n = (size_t)t->numel;
    float lut[256];
    switch (t->dtype) {
    case KVCAL_DTYPE_F32:
        memcpy(dst, src, n * 4);
        return KVCAL_OK;
    case KVCAL_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)(src[2 * i] | (src[2 * i + 1] << 8)) << 16;
            memcpy(&dst[i], &bits, 4);
        }
        return KVCAL_OK;
    case KVCAL_DTYPE_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = f16_to_f32((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
        return KVCAL_OK;
    case KVCAL_DTYPE_F8_E4M3:
    case KVCAL_DTYPE_F8_E5M2:
        for (int b = 0; b < 256; b++)
            lut[b] = t->dtype == KVCAL_DTYPE_F8_E4M3 ? e4m3_to_f32((uint8_t)b)
                                                     : e5m2_to_f32((uint8_t)b);
        for (size_t i = 0; i < n; i++)
            dst[i] = lut[src[i]];
        return KVCAL_OK;
    case KVCAL_DTYPE_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = f64_to_f32(d);
        }
        return KVCAL_OK;
    default:
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "tensor \"%.200s\": dtype %s is not a floating type; only F32 "
                          "F16 BF16 F64 F8_E4M3 F8_E5M2 convert to float32",
                          t->name ? t->name : "?",
                          kvcal_dtype_name(t->dtype) ? kvcal_dtype_name(t->dtype)
                                                     : "unknown");
    }
}

/* --- writer ------------------------------------------------------------- */

static int out_index_compare(const void *a, const void *b)
{
    const kvcal_tensor_out *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* Checks names (present, unique, not reserved), dtypes, shapes; sizes[i]
 * receives the byte size of tensor i. */
static kvcal_status st_check_outputs(const char *path, const kvcal_tensor_out *tensors,
                                     int count, uint64_t *sizes)
{
    for (int i = 0; i < count; i++) {
        const kvcal_tensor_out *t = &tensors[i];
        if (!t->name || !t->name[0] || !strcmp(t->name, "__metadata__"))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "%s: tensor %d has an empty or reserved name; name it",
                              path, i);
        if (!kvcal_dtype_name(t->dtype))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "%s: tensor \"%.200s\": unknown dtype %d", path, t->name,
                              (int)t->dtype);
        if (t->ndim < 0 || t->ndim > KVCAL_MAX_DIMS)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "%s: tensor \"%.200s\": %d dimensions, expected 0 to %d",
                              path, t->name, t->ndim, KVCAL_MAX_DIMS);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0 ||
                __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel))
                return kvcal_fail(
                    KVCAL_ERR_INVALID_ARG,
                    "%s: tensor \"%.200s\": shape[%d] = %lld is negative or overflows",
                    path, t->name, d, (long long)t->shape[d]);
        if (__builtin_mul_overflow(numel, (uint64_t)kvcal_dtype_size(t->dtype),
                                   &sizes[i]) ||
            (double)sizes[i] > MAX_EXACT_INT)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: tensor \"%.200s\" is too large",
                              path, t->name);
        if (sizes[i] && !t->data)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: tensor \"%.200s\" has no data",
                              path, t->name);
    }
    const kvcal_tensor_out **sorted = malloc(((size_t)count + 1) * sizeof *sorted);
    if (!sorted)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < count; i++)
        sorted[i] = &tensors[i];
    qsort(sorted, (size_t)count, sizeof *sorted, out_index_compare);
    kvcal_status s = KVCAL_OK;
    for (int i = 1; i < count && s == KVCAL_OK; i++)
        if (!strcmp(sorted[i - 1]->name, sorted[i]->name))
            s = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                           "%s: tensor name \"%.200s\" given twice; names must be unique",
                           path, sorted[i]->name);
    free(sorted);
    return s;
}

/* Builds the header object: "__metadata__" first, then tensors in order. */
static kvcal_status st_build_header(const char *path, const kvcal_tensor_out *tensors,
                                    int count, const uint64_t *sizes,
                                    const char *metadata_json, cJSON **out)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = NULL;
    kvcal_status s = KVCAL_OK;
    *out = NULL;
    if (!root)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    if (metadata_json) {
        if ((s = kvcal_json_parse(metadata_json, strlen(metadata_json), "metadata",
                                  &meta)) != KVCAL_OK)
            goto fail;
        char *unused = NULL;
        if ((s = st_read_metadata(path, meta, &unused)) != KVCAL_OK)
            goto fail;
        cJSON_free(unused);
        cJSON_AddItemToObject(root, "__metadata__", meta);
        meta = NULL;
    }
    uint64_t at = 0;
    for (int i = 0; i < count; i++) {
        const kvcal_tensor_out *t = &tensors[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON *shape =
            e ? (cJSON_AddStringToObject(e, "dtype", kvcal_dtype_name(t->dtype)),
                 cJSON_AddArrayToObject(e, "shape"))
              : NULL;
        cJSON *offsets = shape ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        if (!offsets) {
            s = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
            goto fail;
        }
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)at));
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)(at + sizes[i])));
        at += sizes[i];
    }
    *out = root;
    return KVCAL_OK;
fail:
    cJSON_Delete(meta);
    cJSON_Delete(root);
    return s;
}

kvcal_status kvcal_safetensors_write(const char *path, const kvcal_tensor_out *tensors,
                                     int count, const char *metadata_json)
{
    if (count < 0 || (count > 0 && !tensors))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: bad tensor list (count %d)", path,
                          count);
    uint64_t *sizes = calloc((size_t)count + 1, sizeof *sizes);
    cJSON *header = NULL;
    char *text = NULL;
    kvcal_atomic_file af = {0};
    kvcal_status s;
    if (!sizes)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    if ((s = st_check_outputs(path, tensors, count, sizes)) != KVCAL_OK ||
        (s = st_build_header(path, tensors, count, sizes, metadata_json, &header)) !=
            KVCAL_OK)
        goto fail;
    if (!(text = cJSON_PrintUnformatted(header))) {
        s = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    uint8_t len_le[8];
    for (int i = 0; i < 8; i++)
        len_le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    if ((s = kvcal_atomic_open(&af, path)) != KVCAL_OK)
        goto fail;
    int ok = fwrite(len_le, 1, 8, af.f) == 8 && fwrite(text, 1, n, af.f) == n;
    for (size_t i = n; ok && i < padded; i++)
        ok = fputc(' ', af.f) != EOF;
    for (int i = 0; ok && i < count; i++)
        ok = sizes[i] == 0 ||
             fwrite(tensors[i].data, 1, (size_t)sizes[i], af.f) == sizes[i];
    if (!ok) {
        s = kvcal_fail(KVCAL_ERR_IO,
                       "%s: write failed: %s; nothing was written (check free space)",
                       path, strerror(errno));
        goto fail;
    }
    s = kvcal_atomic_commit(&af);
fail:
    kvcal_atomic_abort(&af);
    cJSON_free(text);
    cJSON_Delete(header);
    free(sizes);
    return s;
}

/* --- checkpoints --------------------------------------------------------- */

struct kvcal_checkpoint {
    int nshards;
    kvcal_safetensors_t **shards; /* (nshards) */
    int count;
    const kvcal_tensor_info **tensors; /* (count) */
    int *shard_of;                     /* (count) */
    int *by_name;                      /* (count) sorted by name */
};

static int ck_name_compare(const void *a, const void *b, void *ctx)
{
    const kvcal_tensor_info *const *t = ctx;
    return strcmp(t[*(const int *)a]->name, t[*(const int *)b]->name);
}

static int str_ptr_compare(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int is_regular(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Opens the shards `dir`/files[i] (dir NULL: files are paths) and indexes
 * all their tensors. */
static kvcal_status ck_open_shards(kvcal_checkpoint_t *ck, const char *dir,
                                   const char *const *files, int n)
{
    ck->shards = calloc((size_t)n, sizeof *ck->shards);
    if (!ck->shards)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", dir ? dir : files[0]);
    for (int i = 0; i < n; i++) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s%s%s", dir ? dir : "", dir ? "/" : "",
                             files[i]) >= sizeof path)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%.64s...: shard path too long",
                              path);
        if (dir && !is_regular(path))
            return kvcal_fail(
                KVCAL_ERR_IO,
                "%s: shard \"%.200s\" named by model.safetensors.index.json is missing; "
                "download or restore it",
                dir, files[i]);
        kvcal_status s = kvcal_safetensors_open(path, &ck->shards[i]);
        if (s != KVCAL_OK)
            return s;
        ck->nshards++;
        ck->count += ck->shards[i]->count;
    }
    ck->tensors = calloc((size_t)ck->count + 1, sizeof *ck->tensors);
    ck->shard_of = calloc((size_t)ck->count + 1, sizeof *ck->shard_of);
    ck->by_name = calloc((size_t)ck->count + 1, sizeof *ck->by_name);
    if (!ck->tensors || !ck->shard_of || !ck->by_name)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", dir);
    int k = 0;
    for (int i = 0; i < ck->nshards; i++) {
        for (int j = 0; j < ck->shards[i]->count; j++, k++) {
            ck->tensors[k] = &ck->shards[i]->tensors[j];
            ck->shard_of[k] = i;
            ck->by_name[k] = k;
        }
    }
    qsort_r(ck->by_name, (size_t)ck->count, sizeof *ck->by_name, ck_name_compare,
            ck->tensors);
    for (int i = 1; i < ck->count; i++) {
        int a = ck->by_name[i - 1], b = ck->by_name[i];
        if (!strcmp(ck->tensors[a]->name, ck->tensors[b]->name))
            return kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: tensor \"%.200s\" is in both %s and %s; remove one copy",
                dir ? dir : files[0], ck->tensors[a]->name,
                ck->shards[ck->shard_of[a]]->name, ck->shards[ck->shard_of[b]]->name);
    }
    return KVCAL_OK;
}

/* A shard name must be a plain file name inside the checkpoint directory. */
static int is_plain_file_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static kvcal_status ck_open_index(kvcal_checkpoint_t *ck, const char *dir,
                                  const char *index_path)
{
    cJSON *index = NULL;
    const char **files = NULL;
    kvcal_status s = kvcal_json_load(index_path, &index);
    if (s != KVCAL_OK)
        return s;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    if (!cJSON_IsObject(map)) {
        s = kvcal_fail(KVCAL_ERR_FORMAT,
                       "%s: no \"weight_map\" object; the index must map tensor names to "
                       "shard files",
                       index_path);
        goto fail;
    }
    int n = cJSON_GetArraySize(map);
    if (!(files = malloc(((size_t)n + 1) * sizeof *files))) {
        s = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", index_path);
        goto fail;
    }
    int nfiles = 0;
    for (const cJSON *e = map->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !is_plain_file_name(e->valuestring)) {
            s = kvcal_fail(KVCAL_ERR_FORMAT,
                           "%s: weight_map[\"%.200s\"] is not a shard file name in the "
                           "checkpoint directory; fix the index",
                           index_path, e->string);
            goto fail;
        }
        files[nfiles++] = e->valuestring;
    }
    qsort(files, (size_t)nfiles, sizeof *files, str_ptr_compare);
    int distinct = 0;
    for (int i = 0; i < nfiles; i++)
        if (distinct == 0 || strcmp(files[distinct - 1], files[i]))
            files[distinct++] = files[i];
    if (distinct == 0) {
        s = kvcal_fail(KVCAL_ERR_FORMAT,
                       "%s: weight_map is empty; the index names no tensor", index_path);
        goto fail;
    }
    if ((s = ck_open_shards(ck, dir, files, distinct)) != KVCAL_OK)
        goto fail;
    for (const cJSON *e = map->child; e; e = e->next) {
        const char **hit = bsearch(&e->valuestring, files, (size_t)distinct,
                                   sizeof *files, str_ptr_compare);
        if (!kvcal_safetensors_find(ck->shards[hit - files], e->string)) {
            s = kvcal_fail(KVCAL_ERR_FORMAT,
                           "%s: weight_map puts tensor \"%.200s\" in %s, which does not "
                           "contain it; fix the index or the shard",
                           index_path, e->string, e->valuestring);
            goto fail;
        }
    }
fail:
    free(files);
    cJSON_Delete(index);
    return s;
}

/* The only *.safetensors file of `dir`, copied into name (cap bytes). */
static kvcal_status ck_find_single(const char *dir, char *name, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot list the directory: %s", dir,
                          strerror(errno));
    int found = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n > 12 && !strcmp(e->d_name + n - 12, ".safetensors") && n < cap) {
            if (found++ == 0)
                memcpy(name, e->d_name, n + 1);
        }
    }
    closedir(d);
    if (found == 0)
        return kvcal_fail(
            KVCAL_ERR_IO,
            "%s: no model.safetensors, model.safetensors.index.json or other "
            ".safetensors file; pass the model's checkpoint directory",
            dir);
    if (found > 1)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: %d .safetensors files but no "
                          "model.safetensors.index.json; add the index or pass one file",
                          dir, found);
    return KVCAL_OK;
}

kvcal_status kvcal_checkpoint_open(const char *path, kvcal_checkpoint_t **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: %s; pass a checkpoint directory or a .safetensors file",
                          path, strerror(errno));
    kvcal_checkpoint_t *ck = calloc(1, sizeof *ck);
    if (!ck)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    kvcal_status s;
    char file[4096];
    if (!S_ISDIR(sb.st_mode)) {
        s = ck_open_shards(ck, NULL, &path, 1);
        goto done;
    }
    if ((size_t)snprintf(file, sizeof file, "%s/model.safetensors.index.json", path) >=
        sizeof file) {
        s = kvcal_fail(KVCAL_ERR_INVALID_ARG, "%.64s...: path too long", path);
        goto fail;
    }
    if (is_regular(file)) {
        s = ck_open_index(ck, path, file);
        goto done;
    }
    snprintf(file, sizeof file, "%s/model.safetensors", path);
    if (is_regular(file)) {
        const char *name = "model.safetensors";
        s = ck_open_shards(ck, path, &name, 1);
        goto done;
    }
    char single[256];
    if ((s = ck_find_single(path, single, sizeof single)) == KVCAL_OK) {
        const char *name = single;
        s = ck_open_shards(ck, path, &name, 1);
    }
done:
    if (s == KVCAL_OK) {
        *out = ck;
        return KVCAL_OK;
    }
fail:
    kvcal_checkpoint_close(ck);
    return s;
}

void kvcal_checkpoint_close(kvcal_checkpoint_t *ck)
{
    if (!ck)
        return;
    for (int i = 0; i < ck->nshards; i++)
        kvcal_safetensors_close(ck->shards[i]);
    free(ck->shards);
    free(ck->tensors);
    free(ck->shard_of);
    free(ck->by_name);
    free(ck);
}

const kvcal_tensor_info *kvcal_checkpoint_find(const kvcal_checkpoint_t *ck,
                                               const char *name)
{
    int lo = 0, hi = ck ? ck->count - 1 : -1;
    while (name && lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const kvcal_tensor_info *t = ck->tensors[ck->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

int kvcal_checkpoint_count(const kvcal_checkpoint_t *ck)
{
    return ck ? ck->count : 0;
}

const kvcal_tensor_info *kvcal_checkpoint_at(const kvcal_checkpoint_t *ck, int i)
{
    return ck && i >= 0 && i < ck->count ? ck->tensors[i] : NULL;
}

const char *kvcal_checkpoint_shard_of(const kvcal_checkpoint_t *ck, int i)
{
    return ck && i >= 0 && i < ck->count ? ck->shards[ck->shard_of[i]]->name : NULL;
}
