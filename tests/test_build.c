/* tests/test_build.c: the Makefile's own rules, run in a scratch build
 * folder: every target can be built on its own in a fresh BUILD. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/test_util.h"

/* Each target asked for alone in a fresh BUILD (a CPU-only one: the rules
 * are the same and it builds in seconds), its folders made by its own rules,
 * not as a side effect of other targets': the example engine loop and a
 * benchmark sit in subfolders of BUILD that none of their prerequisites
 * makes. */
static void make_builds_example_and_bench_alone_in_a_fresh_build_dir(void)
{
    const char *fresh = kvcal_test_path("fresh-build");
    char args[4096], path[4096];
    snprintf(args, sizeof args,
             "CUDA=0 BUILD='%s' '%s/tests/example_engine_loop' '%s/bench/tokenize'", fresh,
             fresh, fresh);
    CU_ASSERT_EQUAL(kvcal_test_make(args, kvcal_test_path("fresh-build.log")), 0);
    snprintf(path, sizeof path, "%s/tests/example_engine_loop", fresh);
    CU_ASSERT_EQUAL(access(path, X_OK), 0);
    snprintf(path, sizeof path, "%s/bench/tokenize", fresh);
    CU_ASSERT_EQUAL(access(path, X_OK), 0);
}

static CU_TestInfo build_tests[] = {
    KVCAL_TEST(make_builds_example_and_bench_alone_in_a_fresh_build_dir),
    CU_TEST_INFO_NULL};
KVCAL_SUITE(build, KVCAL_NEEDS_SOURCE, build_tests)
