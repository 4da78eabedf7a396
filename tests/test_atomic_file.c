/* tests/test_atomic_file.c: writes through a temporary and a rename; a
 * failure never leaves a half file or a stray temporary behind. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "tests/test_util.h"

/* A fresh empty directory under the test tmpdir. */
static const char *fresh_dir(const char *name)
{
    const char *dir = kvcal_test_path(name);
    CU_ASSERT_EQUAL(mkdir(dir, 0755), 0);
    return dir;
}

/* Number of entries of `dir` (without . and ..). */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static int file_equals(const char *path, const char *want)
{
    size_t n = 0;
    char *got = kvcal_test_read_file(path, &n);
    int eq = got && n == strlen(want) && memcmp(got, want, n) == 0;
    free(got);
    return eq;
}

static void atomic_write_creates_then_replaces_file(void)
{
    char path[600];
    const char *dir = fresh_dir("atomic_write");
    snprintf(path, sizeof path, "%s/out.json", dir);
    CU_ASSERT_EQUAL(kvcal_atomic_write(path, "first", 5), KVCAL_OK);
    CU_ASSERT(file_equals(path, "first"));
    CU_ASSERT_EQUAL(kvcal_atomic_write(path, "2nd", 3), KVCAL_OK);
    CU_ASSERT(file_equals(path, "2nd"));
    CU_ASSERT_EQUAL(kvcal_atomic_write(path, "", 0), KVCAL_OK);
    CU_ASSERT(file_equals(path, ""));
    CU_ASSERT_EQUAL(count_entries(dir), 1);
}

static void atomic_write_keeps_the_mode_of_the_replaced_file(void)
{
    char path[600];
    const char *dir = fresh_dir("atomic_mode");
    snprintf(path, sizeof path, "%s/out.bin", dir);
    CU_ASSERT_EQUAL(kvcal_atomic_write(path, "a", 1), KVCAL_OK);
    struct stat st;
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0644);
    CU_ASSERT_EQUAL(chmod(path, 0600), 0);
    CU_ASSERT_EQUAL(kvcal_atomic_write(path, "b", 1), KVCAL_OK);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0600);
}

static void atomic_open_writes_beside_the_target_and_abort_removes_it(void)
{
    char path[600];
    const char *dir = fresh_dir("atomic_abort");
    snprintf(path, sizeof path, "%s/scales.json", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, "old", 3), 0);
    kvcal_atomic_file af;
    CU_ASSERT_EQUAL_FATAL(kvcal_atomic_open(&af, path), KVCAL_OK);
    CU_ASSERT_EQUAL(strncmp(af.tmp, path, strlen(path)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(af.tmp, ".tmp."));
    fputs("half a fi", af.f);
    fflush(af.f);
    CU_ASSERT_EQUAL(count_entries(dir), 2);
    CU_ASSERT(file_equals(path, "old"));
    kvcal_atomic_abort(&af);
    kvcal_atomic_abort(&af);
    CU_ASSERT_EQUAL(count_entries(dir), 1);
    CU_ASSERT(file_equals(path, "old"));
}

static void atomic_commit_failure_removes_the_temporary(void)
{
    char path[600], inner[700];
    const char *dir = fresh_dir("atomic_fail");
    snprintf(path, sizeof path, "%s/target", dir);
    kvcal_atomic_file af;
    CU_ASSERT_EQUAL_FATAL(kvcal_atomic_open(&af, path), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(mkdir(path, 0755), 0);
    snprintf(inner, sizeof inner, "%s/keep", path);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(inner, "x", 1), 0);
    fputs("data", af.f);
    CU_ASSERT_EQUAL(kvcal_atomic_commit(&af), KVCAL_ERR_IO);
    const char *msg = kvcal_last_error();
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "renaming into place"));
    CU_ASSERT_PTR_NULL(strchr(msg, '\n'));
    kvcal_atomic_abort(&af);
    CU_ASSERT_EQUAL(count_entries(dir), 1);
}

/* A directory, FIFO or device (/dev/null) at the path is refused before
 * anything is created: renaming over it would replace it with a file. */
static void atomic_open_refuses_a_path_that_is_not_a_regular_file(void)
{
    char path[600];
    const char *dir = fresh_dir("atomic_special");
    snprintf(path, sizeof path, "%s/fifo", dir);
    CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0644), 0);
    CU_ASSERT_EQUAL(kvcal_atomic_write(path, "data", 4), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("is not a regular file"));
    struct stat st;
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT(S_ISFIFO(st.st_mode));
    snprintf(path, sizeof path, "%s/sub", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(path, 0755), 0);
    CU_ASSERT_EQUAL(kvcal_atomic_write(path, "data", 4), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("is a directory; add a file name"));
    CU_ASSERT_EQUAL(count_entries(dir), 2);
    CU_ASSERT_EQUAL(count_entries(path), 0);
}

static void atomic_open_rejects_missing_directory_and_bad_paths(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/no/such/dir/x.json", kvcal_test_tmpdir());
    kvcal_atomic_file af;
    CU_ASSERT_EQUAL(kvcal_atomic_open(&af, path), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("cannot create a temporary file"));
    CU_ASSERT_PTR_NULL(af.f);
    kvcal_atomic_abort(&af);
    CU_ASSERT_EQUAL(kvcal_atomic_open(&af, ""), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_atomic_open(&af, "somewhere/"), KVCAL_ERR_INVALID_ARG);
    char *longpath = malloc(5000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(longpath);
    memset(longpath, 'a', 4999);
    longpath[4999] = '\0';
    CU_ASSERT_EQUAL(kvcal_atomic_open(&af, longpath), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(strlen(kvcal_last_error()) < 200);
    free(longpath);
    CU_ASSERT_EQUAL(kvcal_atomic_commit(&af), KVCAL_ERR_INVALID_ARG);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(atomic_write_creates_then_replaces_file),
    KVCAL_TEST(atomic_write_keeps_the_mode_of_the_replaced_file),
    KVCAL_TEST(atomic_open_writes_beside_the_target_and_abort_removes_it),
    KVCAL_TEST(atomic_commit_failure_removes_the_temporary),
    KVCAL_TEST(atomic_open_refuses_a_path_that_is_not_a_regular_file),
    KVCAL_TEST(atomic_open_rejects_missing_directory_and_bad_paths),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(atomic_file, KVCAL_NEEDS_NOTHING, tests)
