/* tests/test_python.c: the Python package (python/kvcal) against this
 * build's libkvcal.so: runs its unittest suite (python/tests, torch CPU
 * tensors against torch references) with the source tree's package.
 * Skipped where no Python with torch and numpy is found (make test-python
 * makes one under build/). */
#include <CUnit/CUnit.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "tests/test_util.h"

static void python_package_suite_passes_on_the_cpu_path(void)
{
    char lib[PATH_MAX], cmd[3 * PATH_MAX + 256];
    snprintf(cmd, sizeof cmd, "%s/libkvcal.so", kvcal_test_build_dir());
    CU_ASSERT_PTR_NOT_NULL_FATAL(realpath(cmd, lib));
    const char *log = kvcal_test_path("python.log");
    snprintf(cmd, sizeof cmd,
             "KVCAL_LIBRARY='%s' PYTHONPATH=python '%s' -m unittest discover -s "
             "python/tests > '%s' 2>&1",
             lib, kvcal_test_python(), log);
    int rc = system(cmd);
    rc = rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "tail -n 40 '%s' >&2", log);
        if (system(cmd) != 0)
            fprintf(stderr, "  (no log)\n");
    }
    CU_ASSERT_EQUAL(rc, 0);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(python_package_suite_passes_on_the_cpu_path),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(python, KVCAL_NEEDS_PYTHON_TORCH, tests)
