/* tests/test_json_file.c: strict JSON reading and atomic, finite-only writing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json_file.h"
#include "tests/test_util.h"

/* Parses `text` expecting failure with `status`; the message must be one
 * non-empty line containing `needle`. */
static void expect_parse_error(const char *text, size_t len, kvcal_status status,
                               const char *needle)
{
    cJSON *root = (cJSON *)1;
    kvcal_status s = kvcal_json_parse(text, len, "t.json", &root);
    CU_ASSERT_EQUAL(s, status);
    CU_ASSERT_PTR_NULL(root);
    const char *msg = kvcal_last_error();
    CU_ASSERT(msg[0] != '\0');
    CU_ASSERT_PTR_NULL(strchr(msg, '\n'));
    if (!strstr(msg, needle))
        fprintf(stderr, "\n  message \"%s\" lacks \"%s\"\n", msg, needle);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, needle));
    if (s == KVCAL_OK)
        cJSON_Delete(root);
}

#define EXPECT_PARSE_ERROR(lit, needle)                                                  \
    expect_parse_error(lit, sizeof(lit) - 1, KVCAL_ERR_PARSE, needle)

static cJSON *parse_ok(const char *text)
{
    cJSON *root = NULL;
    kvcal_status s = kvcal_json_parse(text, strlen(text), "t.json", &root);
    if (s != KVCAL_OK)
        fprintf(stderr, "\n  unexpected failure: %s\n", kvcal_last_error());
    CU_ASSERT_EQUAL(s, KVCAL_OK);
    return root;
}

static void json_parse_accepts_valid_document_and_keeps_values(void)
{
    cJSON *root = parse_ok(" {\"a\": [1, -2.5e-3, true, false, null], \"b\": {\"c\": "
                           "\"\\u00e9\\ud83d\\ude00 \xc3\xa9\xf0\x9f\x98\x80\"},"
                           " \"a2\": {}, \"e\": [], \"z\": 0} \n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "a");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(a), 5);
    CU_ASSERT_EQUAL(cJSON_GetArrayItem(a, 1)->valuedouble, -2.5e-3);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "b"), "c");
    CU_ASSERT_STRING_EQUAL(c->valuestring,
                           "\xc3\xa9\xf0\x9f\x98\x80 \xc3\xa9\xf0\x9f\x98\x80");
    cJSON_Delete(root);
}

static void json_parse_does_not_need_a_terminating_nul(void)
{
    const char text[] = {'[', '1', ',', '2', ']', 'x'};
    cJSON *root = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_json_parse(text, 5, "t.json", &root), KVCAL_OK);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(root), 2);
    cJSON_Delete(root);
}

static void json_parse_reports_line_and_column_of_syntax_error(void)
{
    EXPECT_PARSE_ERROR("{\n  \"a\": 1,\n  \"b\" 2\n}", "t.json:3:7: expected ':'");
    EXPECT_PARSE_ERROR("{\n  \"a\": 1\n  \"b\": 2\n}", "t.json:3:3: expected ',' or '}'");
    EXPECT_PARSE_ERROR("[1, 2", "t.json:1:6: expected ',' or ']', found end of file");
    EXPECT_PARSE_ERROR("{\"\xc3\xa9\": x}", "t.json:1:7: unexpected 'x'");
    EXPECT_PARSE_ERROR("{\"a\": \"abc", "t.json:1:7: unterminated string");
}

static void json_parse_rejects_empty_and_blank_input(void)
{
    EXPECT_PARSE_ERROR("", "empty file");
    EXPECT_PARSE_ERROR(" \n\t ", "empty file");
    expect_parse_error(NULL, 0, KVCAL_ERR_PARSE, "empty file");
}

static void json_parse_rejects_duplicate_keys_naming_key_and_line(void)
{
    EXPECT_PARSE_ERROR("{\"a\": 1,\n \"b\": 2,\n \"a\": 3}",
                       "t.json:3:2: duplicate key \"a\" (first at line 1)");
    EXPECT_PARSE_ERROR(
        "{\"x\": {\"k\": {\"q\": 1}, \"n\": [{\"d\": 1},\n{\"d\": 2, \"d\": 3}]}}",
        "t.json:2:10: duplicate key \"d\" (first at line 2)");
    EXPECT_PARSE_ERROR("{\"a\": 1, \"\\u0061\": 2}", "duplicate key \"a\"");
    EXPECT_PARSE_ERROR("{\"x\\ny\": 1, \"x\\ny\": 2}", "duplicate key \"x?y\"");
    cJSON *root = parse_ok(
        "{\"a\": {\"a\": 1}, \"b\": {\"a\": 2}, \"c\": [{\"a\": 1}, {\"a\": 2}]}");
    CU_ASSERT_PTR_NOT_NULL(root);
    cJSON_Delete(root);
}

static void json_parse_limits_nesting_depth_before_cjson(void)
{
    enum { DEEP = 200000 };
    char *text = malloc(2 * DEEP);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    memset(text, '[', DEEP);
    memset(text + DEEP, ']', DEEP);
    expect_parse_error(text, 2 * DEEP, KVCAL_ERR_PARSE, "nesting deeper than 64 levels");
    int d = KVCAL_JSON_MAX_DEPTH;
    memcpy(text + d, text + DEEP, (size_t)d);
    cJSON *root = NULL;
    CU_ASSERT_EQUAL(kvcal_json_parse(text, 2 * (size_t)d, "t.json", &root), KVCAL_OK);
    cJSON_Delete(root);
    for (int i = 0; i < DEEP / 8; i++)
        memcpy(text + 8 * i, "{\"k\": [ ", 8);
    expect_parse_error(text, DEEP, KVCAL_ERR_PARSE, "t.json:1:257: nesting deeper");
    free(text);
}

static void json_parse_rejects_nan_and_infinity(void)
{
    EXPECT_PARSE_ERROR("{\"s\": NaN}", "t.json:1:7: NaN/Infinity literal");
    EXPECT_PARSE_ERROR("[Infinity]", "NaN/Infinity literal");
    EXPECT_PARSE_ERROR("[-Infinity]", "NaN/Infinity literal");
    EXPECT_PARSE_ERROR("[nan]", "NaN/Infinity literal");
    EXPECT_PARSE_ERROR("[inf]", "NaN/Infinity literal");
    EXPECT_PARSE_ERROR("[1e999]", "out of the range of a double");
    EXPECT_PARSE_ERROR("[-1e400]", "out of the range of a double");
    cJSON *root = parse_ok("[1e-400, 1.7976931348623157e308]");
    CU_ASSERT_PTR_NOT_NULL(root);
    cJSON_Delete(root);
}

static void json_parse_rejects_nonstandard_numbers(void)
{
    EXPECT_PARSE_ERROR("[01]", "leading zero");
    EXPECT_PARSE_ERROR("[1.]", "'.' not followed by a digit");
    EXPECT_PARSE_ERROR("[.5]", "unexpected '.'");
    EXPECT_PARSE_ERROR("[+1]", "unexpected '+'");
    EXPECT_PARSE_ERROR("[1e]", "exponent without digits");
    EXPECT_PARSE_ERROR("[-]", "'-' not followed by a digit");
    EXPECT_PARSE_ERROR("[0x10]", "expected ',' or ']', found 'x'");
}

static void json_parse_rejects_trailing_garbage(void)
{
    EXPECT_PARSE_ERROR("{} x",
                       "t.json:1:4: unexpected 'x' after the end of the JSON value");
    EXPECT_PARSE_ERROR("{}{}", "after the end of the JSON value");
    EXPECT_PARSE_ERROR("[1] // c", "after the end");
    EXPECT_PARSE_ERROR("[1,]", "trailing comma");
    EXPECT_PARSE_ERROR("{\"a\": 1,}", "expected a quoted key");
    EXPECT_PARSE_ERROR("{'a': 1}", "expected a quoted key");
    EXPECT_PARSE_ERROR("['a']", "single-quoted string");
    EXPECT_PARSE_ERROR("[tru]", "unexpected 't'");
}

static void json_parse_rejects_nul_bytes(void)
{
    expect_parse_error("{\"a\": 1}\0", 9, KVCAL_ERR_PARSE,
                       "t.json:1:9: unexpected byte 0x00");
    expect_parse_error("[\"a\0b\"]", 7, KVCAL_ERR_PARSE, "NUL byte inside a string");
    expect_parse_error("[\0]", 3, KVCAL_ERR_PARSE, "NUL byte where a value was expected");
    EXPECT_PARSE_ERROR("[\"a\\u0000b\"]", "\\u0000 inside a string");
}

static void json_parse_rejects_bad_strings_and_invalid_utf8(void)
{
    EXPECT_PARSE_ERROR("[\"\xff\"]", "t.json:1:3: invalid UTF-8");
    EXPECT_PARSE_ERROR("[\"\xc0\xaf\"]", "invalid UTF-8");         /* overlong '/' */
    EXPECT_PARSE_ERROR("[\"\xed\xa0\x80\"]", "invalid UTF-8");     /* encoded surrogate */
    EXPECT_PARSE_ERROR("[\"\xf4\x90\x80\x80\"]", "invalid UTF-8"); /* above U+10FFFF */
    EXPECT_PARSE_ERROR("[\"\xe2\x82\"]", "invalid UTF-8");         /* truncated */
    EXPECT_PARSE_ERROR("[\"a\nb\"]", "raw control character 0x0A");
    EXPECT_PARSE_ERROR("[\"\\x41\"]", "invalid escape \\x");
    EXPECT_PARSE_ERROR("[\"\\u12\"]", "\\u escape without 4 hex digits");
    EXPECT_PARSE_ERROR("[\"\\ud800\"]", "high surrogate escape not followed");
    EXPECT_PARSE_ERROR("[\"\\udc00\"]", "lone low surrogate");
    EXPECT_PARSE_ERROR("\xef\xbb\xbf{}", "byte order mark");
}

static void json_parse_rejects_oversized_input_without_reading_it(void)
{
    static const char small[] = "{}";
    expect_parse_error(small, (size_t)KVCAL_JSON_MAX_BYTES + 1, KVCAL_ERR_PARSE,
                       "exceed the limit of 64 MiB");
}

static void json_load_rejects_oversized_file_and_names_missing_file(void)
{
    const char *path = kvcal_test_path("big.json");
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ftruncate(fileno(f), (off_t)KVCAL_JSON_MAX_BYTES + 1), 0);
    fclose(f);
    cJSON *root = (cJSON *)1;
    CU_ASSERT_EQUAL(kvcal_json_load(path, &root), KVCAL_ERR_PARSE);
    CU_ASSERT_PTR_NULL(root);
    CU_ASSERT(kvcal_test_error_has("big.json: 67108865 bytes exceed"));
    unlink(path);
    CU_ASSERT_EQUAL(kvcal_json_load(kvcal_test_path("absent.json"), &root), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("absent.json: cannot open"));
    CU_ASSERT_EQUAL(kvcal_json_load(kvcal_test_tmpdir(), &root), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("not a regular file"));
}

static void json_load_names_the_file_in_syntax_errors(void)
{
    const char *path = kvcal_test_path("bad.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, "{\n\"a\": [1 2]}\n", 14), 0);
    cJSON *root = NULL;
    CU_ASSERT_EQUAL(kvcal_json_load(path, &root), KVCAL_ERR_PARSE);
    char want[600];
    snprintf(want, sizeof want, "%s:2:9: expected ',' or ']', found '2'", path);
    CU_ASSERT(kvcal_test_error_has(want));
}

static void json_write_refuses_nonfinite_naming_key_path(void)
{
    const char *path = kvcal_test_path("nan.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, "{}\n", 3), 0);
    cJSON *root = cJSON_CreateObject();
    cJSON *layer = cJSON_AddObjectToObject(
        cJSON_AddObjectToObject(cJSON_AddObjectToObject(root, "kv_cache"),
                                "scaling_factor"),
        "0");
    cJSON_AddNumberToObject(layer, "0", 0.5);
    cJSON_AddNumberToObject(layer, "3", NAN);
    CU_ASSERT_EQUAL(kvcal_json_write(path, root), KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("kv_cache.scaling_factor.0.3"));
    cJSON *arr = cJSON_AddArrayToObject(root, "heads");
    cJSON_DeleteItemFromObject(layer, "3");
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(1.0));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(-INFINITY));
    CU_ASSERT_EQUAL(kvcal_json_write(path, root), KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("value at heads[1]"));
    size_t n = 0;
    char *kept = kvcal_test_read_file(path, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(kept);
    CU_ASSERT_STRING_EQUAL(kept, "{}\n");
    free(kept);
    cJSON_Delete(root);
}

static void json_write_then_load_round_trips_identical_bytes(void)
{
    const char *a = kvcal_test_path("rt_a.json");
    const char *b = kvcal_test_path("rt_b.json");
    cJSON *root = parse_ok(
        "{\"model_type\": \"llama\", \"kv_cache\": {\"dtype\": \"float8_e4m3fn\", "
        "\"scaling_factor\": {\"0\": {\"0\": 0.0123456789012345, \"1\": 1e-7, \"2\": "
        "3}}},"
        " \"s\": \"\\u00e9\\\"\\n\", \"l\": [true, null, -0.5]}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_write(a, root), KVCAL_OK);
    cJSON *back = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(a, &back), KVCAL_OK);
    CU_ASSERT(cJSON_Compare(root, back, 1));
    CU_ASSERT_EQUAL(
        cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(back, "kv_cache"), "scaling_factor"),
                "0"),
            "0")
            ->valuedouble,
        0.0123456789012345);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_write(b, back), KVCAL_OK);
    size_t na = 0, nb = 0;
    char *ta = kvcal_test_read_file(a, &na), *tb = kvcal_test_read_file(b, &nb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ta);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(na, nb);
    CU_ASSERT(na == nb && memcmp(ta, tb, na) == 0);
    CU_ASSERT_EQUAL(ta[na - 1], '\n');
    struct stat st;
    CU_ASSERT_EQUAL(stat(a, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0644);
    free(ta);
    free(tb);
    cJSON_Delete(root);
    cJSON_Delete(back);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(json_parse_accepts_valid_document_and_keeps_values),
    KVCAL_TEST(json_parse_does_not_need_a_terminating_nul),
    KVCAL_TEST(json_parse_reports_line_and_column_of_syntax_error),
    KVCAL_TEST(json_parse_rejects_empty_and_blank_input),
    KVCAL_TEST(json_parse_rejects_duplicate_keys_naming_key_and_line),
    KVCAL_TEST(json_parse_limits_nesting_depth_before_cjson),
    KVCAL_TEST(json_parse_rejects_nan_and_infinity),
    KVCAL_TEST(json_parse_rejects_nonstandard_numbers),
    KVCAL_TEST(json_parse_rejects_trailing_garbage),
    KVCAL_TEST(json_parse_rejects_nul_bytes),
    KVCAL_TEST(json_parse_rejects_bad_strings_and_invalid_utf8),
    KVCAL_TEST(json_parse_rejects_oversized_input_without_reading_it),
    KVCAL_TEST(json_load_rejects_oversized_file_and_names_missing_file),
    KVCAL_TEST(json_load_names_the_file_in_syntax_errors),
    KVCAL_TEST(json_write_refuses_nonfinite_naming_key_path),
    KVCAL_TEST(json_write_then_load_round_trips_identical_bytes),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(json_file, KVCAL_NEEDS_NOTHING, tests)
