/* tests/test_core.c: the scale rule, status strings and the scale set. */
#include <math.h>
#include <string.h>

#include "core/scale_rule.h"
#include "core/scales.h"
#include "core/status.h"
#include "tests/test_util.h"

static void scale_rule_divides_absmax_by_448(void)
{
    CU_ASSERT_EQUAL(kvcal_scale_from_absmax(448.0f), 1.0f);
    CU_ASSERT_EQUAL(kvcal_scale_from_absmax(224.0f), 0.5f);
    CU_ASSERT_EQUAL(kvcal_scale_from_absmax(0.0f), KVCAL_SCALE_FLOOR);
    CU_ASSERT_EQUAL(kvcal_scale_from_absmax(1e-9f), KVCAL_SCALE_FLOOR);
    CU_ASSERT(kvcal_scale_from_absmax(1.0f) > KVCAL_SCALE_FLOOR);
}

static void scale_is_valid_rejects_nonfinite_zero_negative(void)
{
    CU_ASSERT_TRUE(kvcal_scale_is_valid(0.01f));
    CU_ASSERT_FALSE(kvcal_scale_is_valid(0.0f));
    CU_ASSERT_FALSE(kvcal_scale_is_valid(-1.0f));
    CU_ASSERT_FALSE(kvcal_scale_is_valid(NAN));
    CU_ASSERT_FALSE(kvcal_scale_is_valid(INFINITY));
}

static void status_str_names_every_status(void)
{
    for (int s = KVCAL_OK; s <= KVCAL_ERR_CUDA; s++)
        CU_ASSERT_STRING_NOT_EQUAL(kvcal_status_str((kvcal_status)s), "unknown status");
    CU_ASSERT_EQUAL(kvcal_fail(KVCAL_ERR_IO, "x.json: %d", 7), KVCAL_ERR_IO);
    CU_ASSERT_STRING_EQUAL(kvcal_last_error(), "x.json: 7");
    kvcal_fail_context(KVCAL_ERR_IO, "reading: ");
    CU_ASSERT_STRING_EQUAL(kvcal_last_error(), "reading: x.json: 7");
}

static void scales_create_rejects_bad_sizes_and_destroy_null_is_noop(void)
{
    kvcal_scales_t *s = (kvcal_scales_t *)1;
    CU_ASSERT_EQUAL(kvcal_scales_create(0, 4, &s), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(s);
    /* each count in range, but 2^32 heads in all: a few-MB hostile scales
     * file would make every reader fill 64 GB */
    CU_ASSERT_EQUAL(kvcal_scales_create(65536, 65536, &s), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT(kvcal_test_error_has("more than 2^24 (layer, kv head) pairs"));
    CU_ASSERT_EQUAL(kvcal_scales_create(4096, 4096, &s), KVCAL_OK);
    kvcal_scales_destroy(s);
    kvcal_scales_destroy(NULL);
}

static void scales_tensor_scale_is_max_over_heads(void)
{
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 3, &s), KVCAL_OK);
    kvcal_scales_set_head(s, 1, 0, 0.1f, 0.2f);
    kvcal_scales_set_head(s, 1, 2, 0.3f, 0.05f);
    float k, v;
    CU_ASSERT_EQUAL(kvcal_scales_get_tensor(s, 1, &k, &v), KVCAL_OK);
    CU_ASSERT_EQUAL(k, 0.3f);
    CU_ASSERT_EQUAL(v, 0.2f);
    CU_ASSERT_EQUAL(kvcal_scales_get_head(s, 2, 0, &k, &v), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_scales_check_finite(s, "t"), KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("layer 0 kv head 0"));
    kvcal_scales_set_layer(s, 0, 0.5f, 0.5f);
    kvcal_scales_set_head(s, 1, 1, 0.5f, 0.5f);
    CU_ASSERT_EQUAL(kvcal_scales_check_finite(s, "t"), KVCAL_OK);
    kvcal_scales_destroy(s);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(scale_rule_divides_absmax_by_448),
    KVCAL_TEST(scale_is_valid_rejects_nonfinite_zero_negative),
    KVCAL_TEST(status_str_names_every_status),
    KVCAL_TEST(scales_create_rejects_bad_sizes_and_destroy_null_is_noop),
    KVCAL_TEST(scales_tensor_scale_is_max_over_heads),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(core, KVCAL_NEEDS_NOTHING, tests)
