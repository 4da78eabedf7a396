/* tests/test_fp8.c: the e4m3fn conversion of core/fp8.h against an
 * independent reference built from the format's definition (value of every
 * code by ldexp; rounding by nearest-code search with ties to the even code)
 * and against torch's float8_e4m3fn casts (tests/fixtures/fp8, made by
 * tests/make_fp8_fixture.py). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp8.h"
#include "tests/test_util.h"

/* --- reference ------------------------------------------------------------ */

/* Value of an e4m3fn code from the definition; NaN codes give NAN. */
static double ref_value(int code)
{
    int sign = code & 0x80 ? -1 : 1;
    int e = (code >> 3) & 15, m = code & 7;
    if (e == 15 && m == 7)
        return NAN;
    if (e == 0)
        return sign * ldexp(m, -9);
    return sign * ldexp(8 + m, e - 7 - 3);
}

/* Nearest finite code to x (|x| saturated to 448), ties to the even code. */
static uint8_t ref_encode(float x)
{
    if (isnan(x))
        return 0x7f;
    double a = fabs((double)x);
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (a >= 448.0)
        return sign | 0x7e;
    int best = 0;
    double best_d = INFINITY;
    for (int c = 0; c <= 0x7e; c++) {
        double d = fabs(ref_value(c) - a);
        if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
            best = c;
            best_d = d;
        }
    }
    return (uint8_t)(sign | best);
}

static uint32_t lcg_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

/* --- tests ---------------------------------------------------------------- */

static void fp8_every_code_decodes_to_its_defined_value(void)
{
    for (int c = 0; c < 256; c++) {
        float got = kvcal_fp8_e4m3_to_float((uint8_t)c);
        double want = ref_value(c);
        if (isnan(want)) {
            CU_ASSERT_TRUE(isnan(got));
        } else {
            CU_ASSERT_EQUAL((double)got, want);
        }
    }
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_to_float(0x7e), 448.0f);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_to_float(0x01), 0.001953125f);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_to_float(0x08), 0.015625f);
}

static void fp8_every_finite_code_round_trips(void)
{
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f)
            continue;
        float v = kvcal_fp8_e4m3_to_float((uint8_t)c);
        CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(v), c);
    }
}

static void fp8_midpoints_round_to_even_code(void)
{
    for (int c = 0; c < 0x7e; c++) {
        double lo = ref_value(c), hi = ref_value(c + 1);
        float mid = (float)((lo + hi) / 2); /* exact: 5 significant bits */
        int even = (c & 1) ? c + 1 : c;
        CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(mid), even);
        CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(-mid), 0x80 | even);
        CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(nextafterf(mid, 0.0f)), c);
        CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(nextafterf(mid, 1e9f)), c + 1);
    }
    /* 2^-10 is halfway between 0 and the smallest subnormal: ties to 0 */
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(0.0009765625f), 0x00);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(0.0009766f), 0x01);
}

static void fp8_values_beyond_448_saturate_and_nan_is_0x7f(void)
{
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(448.0f), 0x7e);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(449.0f), 0x7e);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(464.0f), 0x7e);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(1e30f), 0x7e);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(INFINITY), 0x7e);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(-INFINITY), 0xfe);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(-500.0f), 0xfe);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(NAN), 0x7f);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(-NAN), 0x7f);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(0.0f), 0x00);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(-0.0f), 0x80);
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_from_float(1e-40f), 0x00);
    CU_ASSERT_TRUE(isnan(kvcal_fp8_e4m3_round(NAN)));
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_round(1000.0f), 448.0f);
}

static void fp8_random_floats_match_nearest_code_search(void)
{
    uint64_t s = 12345;
    int mismatches = 0;
    for (int i = 0; i < 200000; i++) {
        /* log-uniform magnitudes over 2^-14 .. 2^10, both signs, plus raw bits */
        float x;
        if (i % 4 == 3) {
            uint32_t bits = lcg_next(&s);
            memcpy(&x, &bits, sizeof x);
            if (isnan(x) || isinf(x))
                continue;
        } else {
            double u = (double)lcg_next(&s) / 4294967296.0;
            x = (float)ldexp(1.0 + u, (int)(lcg_next(&s) % 24) - 14);
            if (lcg_next(&s) & 1)
                x = -x;
        }
        if (kvcal_fp8_e4m3_from_float(x) != ref_encode(x))
            mismatches++;
    }
    CU_ASSERT_EQUAL(mismatches, 0);
}

static void fp8_matches_torch_e4m3fn_casts(void)
{
    size_t len = 0;
    unsigned char *buf = (unsigned char *)kvcal_test_read_file(
        "tests/fixtures/fp8/e4m3fn_torch.bin", &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    uint32_t n = 0;
    if (len >= 4)
        memcpy(&n, buf, 4);
    CU_ASSERT_FATAL(n > 7000 && len == 4 + (size_t)n * 5);
    int mismatches = 0;
    for (uint32_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, buf + 4 + (size_t)i * 4, 4);
        uint8_t want = buf[4 + (size_t)n * 4 + i];
        mismatches += kvcal_fp8_e4m3_from_float(x) != want;
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    free(buf);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(fp8_every_code_decodes_to_its_defined_value),
    KVCAL_TEST(fp8_every_finite_code_round_trips),
    KVCAL_TEST(fp8_midpoints_round_to_even_code),
    KVCAL_TEST(fp8_values_beyond_448_saturate_and_nan_is_0x7f),
    KVCAL_TEST(fp8_random_floats_match_nearest_code_search),
    KVCAL_TEST(fp8_matches_torch_e4m3fn_casts),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(fp8, KVCAL_NEEDS_NOTHING, tests)
