/* tests/test_safetensors.c: safetensors reading (against files the reference
 * implementation wrote, tests/make_malformed_safetensors.py), dtype
 * conversion, the writer, checkpoints, and every malformed file. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint/mxfp4.h"
#include "io/checkpoint/safetensors.h"
#include "tests/test_util.h"

#define DTYPES_FIXTURE "tests/fixtures/safetensors/dtypes.safetensors"

static int same_float_bits(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* --- reading and conversion ---------------------------------------------- */

static void safetensors_converts_every_dtype_like_torch(void)
{
    static const char *const names[] = {"f16", "bf16", "e4m3", "e5m2", "f64"};
    kvcal_safetensors_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(DTYPES_FIXTURE, &st), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_safetensors_count(st), 12);
    CU_ASSERT_STRING_EQUAL(kvcal_safetensors_metadata(st),
                           "{\"format\":\"pt\",\"note\":\"dtype oracle\"}");
    for (int i = 0; i < 5; i++) {
        char ref_name[32];
        snprintf(ref_name, sizeof ref_name, "%s.f32", names[i]);
        const kvcal_tensor_info *t = kvcal_safetensors_find(st, names[i]);
        const kvcal_tensor_info *ref = kvcal_safetensors_find(st, ref_name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
        CU_ASSERT_EQUAL_FATAL(t->numel, ref->numel);
        CU_ASSERT_EQUAL(ref->dtype, KVCAL_DTYPE_F32);
        float *got = malloc((size_t)t->numel * sizeof *got);
        float *want = malloc((size_t)t->numel * sizeof *want);
        CU_ASSERT_PTR_NOT_NULL_FATAL(got);
        CU_ASSERT_PTR_NOT_NULL_FATAL(want);
        CU_ASSERT_EQUAL(kvcal_tensor_to_f32(t, got), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_tensor_to_f32(ref, want), KVCAL_OK);
        int64_t bad = 0;
        for (int64_t k = 0; k < t->numel; k++)
            bad += !same_float_bits(got[k], want[k]);
        if (bad)
            fprintf(stderr, "\n  %s: %lld values differ from torch\n", names[i],
                    (long long)bad);
        CU_ASSERT_EQUAL(bad, 0);
        free(got);
        free(want);
    }
    const kvcal_tensor_info *i32 = kvcal_safetensors_find(st, "i32");
    CU_ASSERT_PTR_NOT_NULL_FATAL(i32);
    float sink[2];
    CU_ASSERT_EQUAL(kvcal_tensor_to_f32(i32, sink), KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("tensor \"i32\": dtype I32 is not a floating type"));
    kvcal_safetensors_close(st);
}

static float convert_one(kvcal_dtype dtype, const void *bytes)
{
    kvcal_tensor_info t = {.name = "x",
                           .dtype = dtype,
                           .ndim = 1,
                           .shape = {1},
                           .numel = 1,
                           .data = bytes,
                           .nbytes = kvcal_dtype_size(dtype)};
    float f = -12345.0f;
    CU_ASSERT_EQUAL(kvcal_tensor_to_f32(&t, &f), KVCAL_OK);
    return f;
}

static float from_u16(kvcal_dtype dtype, uint16_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    return convert_one(dtype, b);
}

static float from_u8(kvcal_dtype dtype, uint8_t v)
{
    return convert_one(dtype, &v);
}

static void tensor_to_f32_matches_hand_values(void)
{
    CU_ASSERT_EQUAL(from_u16(KVCAL_DTYPE_BF16, 0x3F80), 1.0f);
    CU_ASSERT_EQUAL(from_u16(KVCAL_DTYPE_BF16, 0xC000), -2.0f);
    CU_ASSERT_EQUAL(from_u16(KVCAL_DTYPE_BF16, 0x0001), ldexpf(1.0f, -133));
    CU_ASSERT(isinf(from_u16(KVCAL_DTYPE_BF16, 0x7F80)));
    CU_ASSERT_EQUAL(from_u16(KVCAL_DTYPE_F16, 0x3C00), 1.0f);
    CU_ASSERT_EQUAL(from_u16(KVCAL_DTYPE_F16, 0x3555), 1365.0f / 4096.0f);
    CU_ASSERT_EQUAL(from_u16(KVCAL_DTYPE_F16, 0x7BFF), 65504.0f);
    CU_ASSERT_EQUAL(from_u16(KVCAL_DTYPE_F16, 0x0001),
                    ldexpf(1.0f, -24)); /* smallest subnormal */
    CU_ASSERT_EQUAL(from_u16(KVCAL_DTYPE_F16, 0x03FF),
                    ldexpf(1023.0f, -24)); /* largest subnormal */
    CU_ASSERT_EQUAL(from_u16(KVCAL_DTYPE_F16, 0x0400), ldexpf(1.0f, -14));
    CU_ASSERT_EQUAL(from_u16(KVCAL_DTYPE_F16, 0xFC00), -INFINITY);
    CU_ASSERT(isnan(from_u16(KVCAL_DTYPE_F16, 0x7E00)));
    CU_ASSERT(signbit(from_u16(KVCAL_DTYPE_F16, 0x8000)));
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E4M3, 0x7E), 448.0f);
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E4M3, 0xFE), -448.0f);
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E4M3, 0x38), 1.0f);
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E4M3, 0x01),
                    ldexpf(1.0f, -9)); /* smallest subnormal */
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E4M3, 0x07),
                    ldexpf(7.0f, -9)); /* largest subnormal */
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E4M3, 0x08), ldexpf(1.0f, -6));
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E4M3, 0x78), 256.0f); /* e4m3fn: no infinity */
    CU_ASSERT(isnan(from_u8(KVCAL_DTYPE_F8_E4M3, 0x7F)));
    CU_ASSERT(isnan(from_u8(KVCAL_DTYPE_F8_E4M3, 0xFF)));
    CU_ASSERT(signbit(from_u8(KVCAL_DTYPE_F8_E4M3, 0x80)) &&
              from_u8(KVCAL_DTYPE_F8_E4M3, 0x80) == 0.0f);
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E5M2, 0x3C), 1.0f);
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E5M2, 0x7B), 57344.0f);
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E5M2, 0x01), ldexpf(1.0f, -16));
    CU_ASSERT_EQUAL(from_u8(KVCAL_DTYPE_F8_E5M2, 0x7C), INFINITY);
    CU_ASSERT(isnan(from_u8(KVCAL_DTYPE_F8_E5M2, 0x7D)));
    double d[3] = {0.1, 1e300, -1e-300};
    kvcal_tensor_info t = {.name = "d",
                           .dtype = KVCAL_DTYPE_F64,
                           .ndim = 1,
                           .shape = {3},
                           .numel = 3,
                           .data = d,
                           .nbytes = sizeof d};
    float f[3];
    CU_ASSERT_EQUAL(kvcal_tensor_to_f32(&t, f), KVCAL_OK);
    CU_ASSERT_EQUAL(f[0], 0.1f);
    CU_ASSERT_EQUAL(f[1], INFINITY);
    CU_ASSERT_EQUAL(f[2], 0.0f);
}

static void dtype_names_round_trip_and_sizes(void)
{
    for (int i = KVCAL_DTYPE_F32; i <= KVCAL_DTYPE_U64; i++) {
        kvcal_dtype back;
        CU_ASSERT_PTR_NOT_NULL_FATAL(kvcal_dtype_name((kvcal_dtype)i));
        CU_ASSERT_EQUAL(kvcal_dtype_parse(kvcal_dtype_name((kvcal_dtype)i), &back), 0);
        CU_ASSERT_EQUAL(back, (kvcal_dtype)i);
        CU_ASSERT(kvcal_dtype_size((kvcal_dtype)i) > 0);
    }
    kvcal_dtype d;
    CU_ASSERT_EQUAL(kvcal_dtype_parse("Q4", &d), -1);
    CU_ASSERT_EQUAL(kvcal_dtype_parse("bf16", &d), -1);
    CU_ASSERT_PTR_NULL(kvcal_dtype_name((kvcal_dtype)99));
    CU_ASSERT_EQUAL(kvcal_dtype_size(KVCAL_DTYPE_BF16), 2);
    CU_ASSERT_EQUAL(kvcal_dtype_size(KVCAL_DTYPE_F8_E4M3), 1);
    CU_ASSERT_EQUAL(kvcal_dtype_size((kvcal_dtype)-1), 0);
}

/* --- writer --------------------------------------------------------------- */

static void safetensors_write_reproduces_reference_bytes(void)
{
    kvcal_safetensors_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(DTYPES_FIXTURE, &st), KVCAL_OK);
    int n = kvcal_safetensors_count(st);
    kvcal_tensor_out *out = calloc((size_t)n, sizeof *out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    for (int i = 0; i < n; i++) {
        const kvcal_tensor_info *t = kvcal_safetensors_at(st, i);
        out[i] = (kvcal_tensor_out){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(out[i].shape, t->shape, sizeof t->shape);
    }
    const char *path = kvcal_test_path("rewritten.safetensors");
    CU_ASSERT_EQUAL_FATAL(
        kvcal_safetensors_write(path, out, n, kvcal_safetensors_metadata(st)), KVCAL_OK);
    size_t na = 0, nb = 0;
    char *a = kvcal_test_read_file(DTYPES_FIXTURE, &na),
         *b = kvcal_test_read_file(path, &nb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(na, nb);
    CU_ASSERT(na == nb && memcmp(a, b, na) == 0);
    free(a);
    free(b);
    free(out);
    kvcal_safetensors_close(st);
}

static void safetensors_write_then_open_round_trips(void)
{
    float k[4] = {0.5f, 0.25f, 0.125f, 1.0f}; /* (kv_heads=4, 1, 1) */
    uint16_t w[6] = {0x3F80, 0x4000, 0x4040, 0xBF80, 0x0000, 0x7F7F};
    float scalar = 3.0f;
    kvcal_tensor_out out[] = {
        {"model.layers.0.self_attn.k_scale", KVCAL_DTYPE_F32, 3, {4, 1, 1}, k},
        {"w", KVCAL_DTYPE_BF16, 2, {2, 3}, w},
        {"empty", KVCAL_DTYPE_F16, 2, {0, 5}, NULL},
        {"scalar", KVCAL_DTYPE_F32, 0, {0}, &scalar},
    };
    const char *path = kvcal_test_path("rt.safetensors");
    CU_ASSERT_EQUAL_FATAL(
        kvcal_safetensors_write(path, out, 4,
                                "{\"format\": \"pt\", \"producer\": \"kvcal\"}"),
        KVCAL_OK);
    size_t len = 0;
    char *bytes = kvcal_test_read_file(path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
    uint64_t hlen = 0;
    memcpy(&hlen, bytes, 8);
    CU_ASSERT_EQUAL(hlen % 8, 0);
    CU_ASSERT(hlen > 0 && (bytes[8 + hlen - 1] == ' ' || bytes[8 + hlen - 1] == '}'));
    CU_ASSERT_EQUAL(len, 8 + hlen + sizeof k + sizeof w + sizeof scalar);
    free(bytes);
    kvcal_safetensors_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(path, &st), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_safetensors_count(st), 4);
    CU_ASSERT_STRING_EQUAL(kvcal_safetensors_metadata(st),
                           "{\"format\":\"pt\",\"producer\":\"kvcal\"}");
    for (int i = 0; i < 4; i++) {
        const kvcal_tensor_info *t = kvcal_safetensors_at(st, i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_STRING_EQUAL(t->name, out[i].name);
        CU_ASSERT_EQUAL(t->dtype, out[i].dtype);
        CU_ASSERT_EQUAL(t->ndim, out[i].ndim);
        CU_ASSERT_EQUAL(
            memcmp(t->shape, out[i].shape, (size_t)t->ndim * sizeof t->shape[0]), 0);
        CU_ASSERT(t->nbytes == 0 || memcmp(t->data, out[i].data, t->nbytes) == 0);
        CU_ASSERT_PTR_EQUAL(kvcal_safetensors_find(st, out[i].name), t);
    }
    CU_ASSERT_EQUAL(kvcal_safetensors_at(st, 1)->numel, 6);
    CU_ASSERT_EQUAL(kvcal_safetensors_at(st, 2)->numel, 0);
    CU_ASSERT_EQUAL(kvcal_safetensors_at(st, 3)->numel, 1);
    CU_ASSERT_PTR_NULL(kvcal_safetensors_at(st, 4));
    CU_ASSERT_PTR_NULL(kvcal_safetensors_at(st, -1));
    CU_ASSERT_PTR_NULL(kvcal_safetensors_find(st, "model.layers.0.self_attn.v_scale"));
    kvcal_safetensors_close(st);
    kvcal_safetensors_close(NULL);
    CU_ASSERT_EQUAL(kvcal_safetensors_write(path, NULL, 0, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(path, &st), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_safetensors_count(st), 0);
    CU_ASSERT_PTR_NULL(kvcal_safetensors_metadata(st));
    kvcal_safetensors_close(st);
}

static void safetensors_write_refuses_bad_tensors_and_writes_nothing(void)
{
    float v[2] = {1.0f, 2.0f};
    const char *path = kvcal_test_path("refused.safetensors");
    kvcal_tensor_out dup[] = {{"a", KVCAL_DTYPE_F32, 1, {1}, v},
                              {"a", KVCAL_DTYPE_F32, 1, {1}, v + 1}};
    CU_ASSERT_EQUAL(kvcal_safetensors_write(path, dup, 2, NULL), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("tensor name \"a\" given twice"));
    kvcal_tensor_out reserved[] = {{"__metadata__", KVCAL_DTYPE_F32, 1, {1}, v}};
    CU_ASSERT_EQUAL(kvcal_safetensors_write(path, reserved, 1, NULL),
                    KVCAL_ERR_INVALID_ARG);
    kvcal_tensor_out negative[] = {{"n", KVCAL_DTYPE_F32, 2, {2, -1}, v}};
    CU_ASSERT_EQUAL(kvcal_safetensors_write(path, negative, 1, NULL),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("shape[1] = -1"));
    kvcal_tensor_out nodata[] = {{"x", KVCAL_DTYPE_F32, 1, {2}, NULL}};
    CU_ASSERT_EQUAL(kvcal_safetensors_write(path, nodata, 1, NULL),
                    KVCAL_ERR_INVALID_ARG);
    kvcal_tensor_out ok[] = {{"x", KVCAL_DTYPE_F32, 1, {2}, v}};
    CU_ASSERT_EQUAL(kvcal_safetensors_write(path, ok, 1, "{\"format\": 1}"),
                    KVCAL_ERR_FORMAT);
    CU_ASSERT(
        kvcal_test_error_has("\"__metadata__\" value of \"format\" is not a string"));
    CU_ASSERT_EQUAL(kvcal_safetensors_write(path, ok, 1, "[\"pt\"]"), KVCAL_ERR_FORMAT);
    CU_ASSERT_EQUAL(kvcal_safetensors_write(path, ok, 1, "{"), KVCAL_ERR_PARSE);
    struct stat sb;
    CU_ASSERT_NOT_EQUAL(stat(path, &sb), 0);
}

/* --- malformed files ------------------------------------------------------ */

static const struct {
    const char *file;
    kvcal_status status;
    const char *needle;
} malformed[] = {
    {"empty.safetensors", KVCAL_ERR_PARSE, "0 bytes, less than the 8-byte header length"},
    {"seven_bytes.safetensors", KVCAL_ERR_PARSE,
     "7 bytes, less than the 8-byte header length"},
    {"header_length_1gb.safetensors", KVCAL_ERR_PARSE,
     "header length field says 1073741824 bytes, over the 100000000-byte limit"},
    {"header_length_past_end.safetensors", KVCAL_ERR_PARSE,
     "header length field says 1000 bytes but only 8 follow"},
    {"header_length_zero.safetensors", KVCAL_ERR_PARSE, "(header):1:1: empty file"},
    {"header_not_json.safetensors", KVCAL_ERR_PARSE, "(header):1:1: unexpected 'h'"},
    {"header_json_array.safetensors", KVCAL_ERR_FORMAT,
     "the header is JSON but not an object"},
    {"header_deep_nesting.safetensors", KVCAL_ERR_PARSE, "nesting deeper than 64 levels"},
    {"header_nan_shape.safetensors", KVCAL_ERR_PARSE, "NaN/Infinity literal"},
    {"dtype_q4.safetensors", KVCAL_ERR_FORMAT, "tensor \"w\": unknown dtype \"Q4\""},
    {"dtype_missing.safetensors", KVCAL_ERR_FORMAT, "tensor \"w\": \"dtype\" missing"},
    {"entry_not_object.safetensors", KVCAL_ERR_FORMAT,
     "tensor \"w\": header entry is not an object"},
    {"negative_shape.safetensors", KVCAL_ERR_FORMAT,
     "tensor \"w\": shape[0] is not a non-negative integer"},
    {"shape_overflow.safetensors", KVCAL_ERR_FORMAT,
     "tensor \"w\": the element count of its shape overflows 64 bits"},
    {"too_many_dims.safetensors", KVCAL_ERR_UNSUPPORTED,
     "tensor \"w\": 9 dimensions, more than the 8 supported"},
    {"offsets_past_end.safetensors", KVCAL_ERR_PARSE,
     "tensor \"w\": data_offsets end at byte 1000 of a 16-byte data section"},
    {"offsets_reversed.safetensors", KVCAL_ERR_FORMAT,
     "tensor \"w\": data_offsets [16, 0] end before they begin"},
    {"offsets_fractional.safetensors", KVCAL_ERR_FORMAT,
     "tensor \"w\": \"data_offsets\" is not [begin, end]"},
    {"size_mismatch.safetensors", KVCAL_ERR_FORMAT,
     "tensor \"w\": shape [2, 2] of F32 needs 16 bytes but data_offsets span 12"},
    {"duplicate_tensor_name.safetensors", KVCAL_ERR_PARSE, "duplicate key \"w\""},
    {"overlapping_tensors.safetensors", KVCAL_ERR_FORMAT,
     "tensor \"b\" (bytes 4-12) overlaps tensor \"a\""},
    {"gap_between_tensors.safetensors", KVCAL_ERR_FORMAT,
     "bytes 8-12 of the data section belong to no tensor"},
    {"bytes_after_last_tensor.safetensors", KVCAL_ERR_FORMAT,
     "4 bytes of the data section follow the last tensor"},
    {"metadata_not_strings.safetensors", KVCAL_ERR_FORMAT,
     "\"__metadata__\" value of \"format\" is not a string"},
    {"truncated_data.safetensors", KVCAL_ERR_PARSE,
     "tensor \"b\": data_offsets end at byte 20 of a 17-byte data section"},
    {"binary_garbage.safetensors", KVCAL_ERR_PARSE, "over the 100000000-byte limit"},
};

static void safetensors_rejects_every_malformed_file_with_one_line(void)
{
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/malformed/safetensors/%s", malformed[i].file);
        kvcal_safetensors_t *st = (kvcal_safetensors_t *)1;
        kvcal_status s = kvcal_safetensors_open(path, &st);
        int ok = s == malformed[i].status && st == NULL &&
                 strncmp(kvcal_last_error(), path, strlen(path)) == 0;
        if (!ok)
            fprintf(stderr, "\n  %s: status %d, message \"%s\"\n", malformed[i].file, s,
                    kvcal_last_error());
        CU_ASSERT(ok);
        CU_ASSERT(kvcal_test_error_has(malformed[i].needle));
        kvcal_safetensors_close(st);
    }
}

static void safetensors_parse_reads_a_memory_image(void)
{
    size_t len = 0;
    char *buf =
        kvcal_test_read_file("tests/fuzz/seeds/safetensors/kv_scales.safetensors", &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    kvcal_safetensors_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_parse(buf, len, "mem", &st), KVCAL_OK);
    const kvcal_tensor_info *k =
        kvcal_safetensors_find(st, "model.layers.0.self_attn.k_scale");
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    float f;
    CU_ASSERT_EQUAL(kvcal_tensor_to_f32(k, &f), KVCAL_OK);
    CU_ASSERT_EQUAL(f, 0.0125f);
    kvcal_safetensors_close(st);
    CU_ASSERT_EQUAL(kvcal_safetensors_parse(buf, len - 1, "mem", &st), KVCAL_ERR_PARSE);
    CU_ASSERT(kvcal_test_error_has("mem: tensor"));
    free(buf);
    CU_ASSERT_EQUAL(kvcal_safetensors_open(kvcal_test_tmpdir(), &st), KVCAL_ERR_IO);
    CU_ASSERT_EQUAL(kvcal_safetensors_open("tests/no/such.safetensors", &st),
                    KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("tests/no/such.safetensors: cannot open"));
}

/* --- checkpoints ---------------------------------------------------------- */

static float ck_values[4] = {1.0f, 2.0f, 3.0f, 4.0f};

/* Writes dir/name with tensors `names` (one F32 value each). */
static void write_shard(const char *dir, const char *name, const char *const *names,
                        int n)
{
    char path[600];
    kvcal_tensor_out out[4];
    for (int i = 0; i < n; i++)
        out[i] = (kvcal_tensor_out){names[i], KVCAL_DTYPE_F32, 1, {1}, &ck_values[i]};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CU_ASSERT_EQUAL(kvcal_safetensors_write(path, out, n, "{\"format\": \"pt\"}"),
                    KVCAL_OK);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CU_ASSERT_EQUAL(kvcal_test_write_file(path, text, strlen(text)), 0);
}

static const char *make_dir(const char *name)
{
    const char *dir = kvcal_test_path(name);
    CU_ASSERT_EQUAL(mkdir(dir, 0755), 0);
    return dir;
}

static void checkpoint_opens_each_shard_of_the_index_once(void)
{
    const char *dir = make_dir("ck_sharded");
    static const char *const s1[] = {"model.embed_tokens.weight",
                                     "model.layers.0.self_attn.k_proj.weight"};
    static const char *const s2[] = {"model.norm.weight", "lm_head.weight"};
    write_shard(dir, "model-00001-of-00002.safetensors", s1, 2);
    write_shard(dir, "model-00002-of-00002.safetensors", s2, 2);
    write_text(dir, "model.safetensors.index.json",
               "{\"metadata\": {\"total_size\": 16}, \"weight_map\": {"
               "\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
               "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
               "\"model.layers.0.self_attn.k_proj.weight\": "
               "\"model-00001-of-00002.safetensors\","
               "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"}}");
    kvcal_checkpoint_t *ck = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_checkpoint_open(dir, &ck), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_checkpoint_count(ck), 4);
    const kvcal_tensor_info *t = kvcal_checkpoint_find(ck, "lm_head.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    float v;
    memcpy(&v, t->data, sizeof v);
    CU_ASSERT_EQUAL(v, 2.0f);
    CU_ASSERT_PTR_NULL(kvcal_checkpoint_find(ck, "missing"));
    CU_ASSERT_STRING_EQUAL(kvcal_checkpoint_at(ck, 0)->name, "model.embed_tokens.weight");
    CU_ASSERT_PTR_NOT_NULL(
        strstr(kvcal_checkpoint_shard_of(ck, 0), "model-00001-of-00002.safetensors"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(kvcal_checkpoint_shard_of(ck, 3), "model-00002-of-00002.safetensors"));
    CU_ASSERT_PTR_NULL(kvcal_checkpoint_at(ck, 4));
    kvcal_checkpoint_close(ck);
    kvcal_checkpoint_close(NULL);
}

static void checkpoint_accepts_single_file_layouts(void)
{
    static const char *const names[] = {"a", "b"};
    kvcal_checkpoint_t *ck = NULL;
    const char *dir = make_dir("ck_model");
    write_shard(dir, "model.safetensors", names, 2);
    write_shard(dir, "other.safetensors", names, 1);
    CU_ASSERT_EQUAL_FATAL(kvcal_checkpoint_open(dir, &ck), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_checkpoint_count(ck), 2);
    kvcal_checkpoint_close(ck);
    const char *one = make_dir("ck_one");
    write_shard(one, "weights.safetensors", names, 2);
    CU_ASSERT_EQUAL_FATAL(kvcal_checkpoint_open(one, &ck), KVCAL_OK);
    CU_ASSERT_PTR_NOT_NULL(kvcal_checkpoint_find(ck, "b"));
    kvcal_checkpoint_close(ck);
    char file[600];
    snprintf(file, sizeof file, "%s/weights.safetensors", one);
    CU_ASSERT_EQUAL_FATAL(kvcal_checkpoint_open(file, &ck), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(kvcal_checkpoint_shard_of(ck, 1), file);
    kvcal_checkpoint_close(ck);
}

static void checkpoint_errors_name_the_shard_or_tensor(void)
{
    static const char *const names[] = {"a", "b"};
    kvcal_checkpoint_t *ck = (kvcal_checkpoint_t *)1;
    const char *missing = make_dir("ck_missing_shard");
    write_shard(missing, "s1.safetensors", names, 1);
    write_text(
        missing, "model.safetensors.index.json",
        "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}");
    CU_ASSERT_EQUAL(kvcal_checkpoint_open(missing, &ck), KVCAL_ERR_IO);
    CU_ASSERT_PTR_NULL(ck);
    CU_ASSERT(kvcal_test_error_has(
        "shard \"s2.safetensors\" named by model.safetensors.index.json is missing"));

    const char *wrong = make_dir("ck_wrong_map");
    write_shard(wrong, "s1.safetensors", names, 1);
    write_shard(wrong, "s2.safetensors", names + 1, 1);
    write_text(
        wrong, "model.safetensors.index.json",
        "{\"weight_map\": {\"a\": \"s2.safetensors\", \"b\": \"s2.safetensors\"}}");
    CU_ASSERT_EQUAL(kvcal_checkpoint_open(wrong, &ck), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has(
        "weight_map puts tensor \"a\" in s2.safetensors, which does not contain it"));

    const char *dup = make_dir("ck_duplicate");
    write_shard(dup, "s1.safetensors", names, 2);
    write_shard(dup, "s2.safetensors", names + 1, 1);
    write_text(
        dup, "model.safetensors.index.json",
        "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}");
    CU_ASSERT_EQUAL(kvcal_checkpoint_open(dup, &ck), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("tensor \"b\" is in both"));

    const char *escape = make_dir("ck_escape");
    write_text(escape, "model.safetensors.index.json",
               "{\"weight_map\": {\"a\": \"../s1.safetensors\"}}");
    CU_ASSERT_EQUAL(kvcal_checkpoint_open(escape, &ck), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("weight_map[\"a\"] is not a shard file name"));
    write_text(escape, "model.safetensors.index.json", "{\"metadata\": {}}");
    CU_ASSERT_EQUAL(kvcal_checkpoint_open(escape, &ck), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("no \"weight_map\" object"));

    const char *two = make_dir("ck_two");
    write_shard(two, "x.safetensors", names, 1);
    write_shard(two, "y.safetensors", names, 1);
    CU_ASSERT_EQUAL(kvcal_checkpoint_open(two, &ck), KVCAL_ERR_FORMAT);
    CU_ASSERT(
        kvcal_test_error_has("2 .safetensors files but no model.safetensors.index.json"));
    const char *none = make_dir("ck_none");
    CU_ASSERT_EQUAL(kvcal_checkpoint_open(none, &ck), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has(
        "no model.safetensors, model.safetensors.index.json or other .safetensors file"));
    CU_ASSERT_EQUAL(kvcal_checkpoint_open("tests/no/such/dir", &ck), KVCAL_ERR_IO);
    CU_ASSERT_EQUAL(
        kvcal_checkpoint_open("tests/malformed/safetensors/dtype_q4.safetensors", &ck),
        KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("unknown dtype \"Q4\""));
}

/* MXFP4 as transformers' convert_moe_packed_tensors decodes it: value 2i in
 * a byte's low nibble, 2i + 1 in its high one, each e2m1 times 2^(scale -
 * 127) of its block of 32; any run of values from any offset. */
static void mxfp4_values_are_e2m1_pairs_times_their_blocks_exponent(void)
{
    uint8_t blocks[32] = {0}, scales[2] = {127, 130};
    blocks[0] = 0x21;  /* 0.5, 1 */
    blocks[1] = 0xF8;  /* -0, -6 */
    blocks[15] = 0x7A; /* value 30: -1, value 31: 6 */
    blocks[16] = 0x53; /* block 2 (x 8): 1.5, 3 */
    blocks[31] = 0xC4; /* values 62, 63: 2, -2 */
    float out[64];
    kvcal_mxfp4_to_f32(blocks, scales, 0, 64, out);
    const float want[][2] = {{0, 0.5f},   {1, 1.0f},   {2, -0.0f},  {3, -6.0f},
                             {4, 0.0f},   {30, -1.0f}, {31, 6.0f},  {32, 12.0f},
                             {33, 24.0f}, {34, 0.0f},  {62, 16.0f}, {63, -16.0f}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CU_ASSERT_EQUAL(out[(int)want[i][0]], want[i][1]);
    CU_ASSERT(signbit(out[2]));
    float part[3];
    kvcal_mxfp4_to_f32(blocks, scales, 31, 3, part); /* across the blocks' edge */
    CU_ASSERT(part[0] == 6.0f && part[1] == 12.0f && part[2] == 24.0f);
    scales[1] = 0; /* 2^-127: a subnormal float, exact */
    kvcal_mxfp4_to_f32(blocks, scales, 33, 1, part);
    CU_ASSERT_EQUAL(part[0], ldexpf(3.0f, -127));
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(safetensors_converts_every_dtype_like_torch),
    KVCAL_TEST(tensor_to_f32_matches_hand_values),
    KVCAL_TEST(dtype_names_round_trip_and_sizes),
    KVCAL_TEST(safetensors_write_reproduces_reference_bytes),
    KVCAL_TEST(safetensors_write_then_open_round_trips),
    KVCAL_TEST(safetensors_write_refuses_bad_tensors_and_writes_nothing),
    KVCAL_TEST(safetensors_rejects_every_malformed_file_with_one_line),
    KVCAL_TEST(safetensors_parse_reads_a_memory_image),
    KVCAL_TEST(checkpoint_opens_each_shard_of_the_index_once),
    KVCAL_TEST(checkpoint_accepts_single_file_layouts),
    KVCAL_TEST(checkpoint_errors_name_the_shard_or_tensor),
    KVCAL_TEST(mxfp4_values_are_e2m1_pairs_times_their_blocks_exponent),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(safetensors, KVCAL_NEEDS_NOTHING, tests)
