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

/* A link at the output path is written through: the file it names is
 * replaced, the link kept; a link to nothing is refused, creating nothing. */
static void atomic_write_goes_through_a_symbolic_link_and_refuses_a_dangling_one(void)
{
    char path[600], target[600];
    const char *dir = fresh_dir("atomic_link");
    snprintf(path, sizeof path, "%s/current", dir);
    snprintf(target, sizeof target, "%s/v1", dir);
    CU_ASSERT_EQUAL_FATAL(symlink("v1", path), 0);
    CU_ASSERT_EQUAL(kvcal_atomic_check(path), KVCAL_ERR_IO);
    CU_ASSERT_EQUAL(kvcal_atomic_write(path, "new", 3), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("a symbolic link to nothing"));
    CU_ASSERT_EQUAL(count_entries(dir), 1);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(target, "old", 3), 0);
    CU_ASSERT_EQUAL(kvcal_atomic_check(path), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_atomic_write(path, "new", 3), KVCAL_OK);
    struct stat st;
    CU_ASSERT(lstat(path, &st) == 0 && S_ISLNK(st.st_mode));
    CU_ASSERT(file_equals(target, "new"));
    CU_ASSERT_EQUAL(count_entries(dir), 2);
}

/* While a batch is open, writes leave finished temporaries and the final
 * paths untouched; commit renames them all, abort removes them and the
 * directories the batch created. */
static void atomic_batch_renames_every_output_or_none(void)
{
    char a[600], b[600], sub[600], c[700];
    const char *dir = fresh_dir("atomic_batch");
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(sub, sizeof sub, "%s/new", dir);
    snprintf(c, sizeof c, "%s/c", sub);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(a, "old a", 5), 0);
    kvcal_atomic_batch_t *batch = NULL, *second = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_atomic_batch_begin(&batch), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_atomic_batch_begin(&second), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(second);
    CU_ASSERT_EQUAL(kvcal_atomic_write(a, "new a", 5), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_atomic_write(b, "new b", 5), KVCAL_OK);
    CU_ASSERT(file_equals(a, "old a"));
    CU_ASSERT_EQUAL(access(b, F_OK), -1);
    CU_ASSERT_EQUAL(kvcal_atomic_write(b, "again", 5), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("written twice"));
    CU_ASSERT_EQUAL(count_entries(dir), 3); /* a and two temporaries */
    CU_ASSERT_EQUAL(kvcal_atomic_batch_commit(batch), KVCAL_OK);
    CU_ASSERT(file_equals(a, "new a"));
    CU_ASSERT(file_equals(b, "new b"));
    CU_ASSERT_EQUAL(count_entries(dir), 2);

    CU_ASSERT_EQUAL_FATAL(kvcal_atomic_batch_begin(&batch), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_atomic_batch_mkdir(batch, dir), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_atomic_batch_mkdir(batch, a), KVCAL_ERR_IO);
    CU_ASSERT_EQUAL(kvcal_atomic_batch_mkdir(batch, sub), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_atomic_write(c, "c", 1), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_atomic_write(a, "lost", 4), KVCAL_OK);
    kvcal_atomic_batch_abort(batch);
    CU_ASSERT(file_equals(a, "new a"));
    CU_ASSERT_EQUAL(count_entries(dir), 2); /* a, b: no new/, no temporary */
    /* outside a batch, writes rename at once again */
    CU_ASSERT_EQUAL(kvcal_atomic_write(b, "now", 3), KVCAL_OK);
    CU_ASSERT(file_equals(b, "now"));
}

/* A directory or temporary that cannot be created: one line naming the
 * output, the parent that is the cause and the fix (it was "cannot create
 * the directory: No such file or directory"); nothing is created. */
static void atomic_mkdir_and_open_name_the_parent_that_is_missing_or_a_file(void)
{
    char missing[600], out[700], file[600], under[700], want[1600];
    const char *dir = fresh_dir("atomic_parent");
    snprintf(missing, sizeof missing, "%s/nodir", dir);
    snprintf(out, sizeof out, "%s/x", missing);
    snprintf(file, sizeof file, "%s/file.txt", dir);
    snprintf(under, sizeof under, "%s/x.json", file);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(file, "a file", 6), 0);
    snprintf(want, sizeof want,
             "%s: cannot create the directory: its parent directory %s does not exist; "
             "create it first or choose another output path",
             out, missing);
    kvcal_atomic_batch_t *batch = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_atomic_batch_begin(&batch), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_atomic_batch_mkdir(batch, out), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has(want));
    kvcal_atomic_batch_abort(batch);
    CU_ASSERT_EQUAL(kvcal_atomic_mkdir(out), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has(want));
    CU_ASSERT_EQUAL(kvcal_atomic_mkdir(file), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("exists and is not a directory"));
    CU_ASSERT_EQUAL(kvcal_atomic_mkdir(dir), KVCAL_OK);
    kvcal_atomic_file af;
    CU_ASSERT_EQUAL(kvcal_atomic_open(&af, out), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("cannot create a temporary file beside it: its "
                                   "parent directory"));
    CU_ASSERT(kvcal_test_error_has("does not exist; create it first"));
    kvcal_atomic_abort(&af);
    CU_ASSERT_EQUAL(kvcal_atomic_open(&af, under), KVCAL_ERR_IO);
    snprintf(want, sizeof want, "its parent %s is not a directory", file);
    CU_ASSERT(kvcal_test_error_has(want));
    CU_ASSERT(kvcal_test_error_has("choose another output path"));
    kvcal_atomic_abort(&af);
    CU_ASSERT_EQUAL(count_entries(dir), 1); /* file.txt alone */
}

static int keep_json(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && !strcmp(name + n - 5, ".json");
}

/* An output is refused when it is an input under any name: itself, "./"
 * and ".." spellings, a symbolic link, a hard link; a directory input
 * covers the files its filter keeps. */
static void inputs_check_finds_an_input_under_any_name(void)
{
    char data[600], alias[700], hard[600], link_to[600], cfg[600], other[600];
    const char *dir = fresh_dir("inputs_check");
    snprintf(data, sizeof data, "%s/data.txt", dir);
    snprintf(alias, sizeof alias, "%s/../inputs_check/./data.txt", dir);
    snprintf(hard, sizeof hard, "%s/hard", dir);
    snprintf(link_to, sizeof link_to, "%s/link", dir);
    snprintf(cfg, sizeof cfg, "%s/sub/config.json", dir);
    snprintf(other, sizeof other, "%s/sub/weights.bin", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(data, "text", 4), 0);
    CU_ASSERT_EQUAL_FATAL(link(data, hard), 0);
    CU_ASSERT_EQUAL_FATAL(symlink("data.txt", link_to), 0);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(sub, 0755), 0);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(cfg, "{}", 2), 0);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(other, "w", 1), 0);
    kvcal_inputs_t *in = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_inputs_create(&in), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_inputs_add(in, data, "the dataset", NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_inputs_add(in, sub, "a file of the model", keep_json),
                    KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_inputs_add(in, "no/such/input", "nothing", NULL), KVCAL_OK);
    const char *same[] = {data, alias, hard, link_to};
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(kvcal_inputs_check(in, "--out", same[i]), KVCAL_ERR_INVALID_ARG);
        CU_ASSERT(kvcal_test_error_has("is the dataset"));
    }
    CU_ASSERT_EQUAL(kvcal_inputs_check(in, "--out", cfg), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("--out"));
    CU_ASSERT_EQUAL(kvcal_inputs_check(in, "--out", other), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_inputs_check(in, "--out", kvcal_test_path("inputs_check/new")),
                    KVCAL_OK);
    kvcal_inputs_destroy(in);
    kvcal_inputs_destroy(NULL);
    CU_ASSERT(file_equals(data, "text"));
}

static void path_join_dirname_and_same_file_handle_slashes(void)
{
    char buf[64];
    CU_ASSERT_EQUAL(kvcal_path_join(buf, sizeof buf, "out/", "x.json"), 0);
    CU_ASSERT_STRING_EQUAL(buf, "out/x.json");
    CU_ASSERT_EQUAL(kvcal_path_join(buf, sizeof buf, "out///", "x.json"), 0);
    CU_ASSERT_STRING_EQUAL(buf, "out/x.json");
    CU_ASSERT_EQUAL(kvcal_path_join(buf, sizeof buf, "/", "x"), 0);
    CU_ASSERT_STRING_EQUAL(buf, "/x");
    CU_ASSERT_EQUAL(kvcal_path_join(buf, 8, "longer", "name"), -1);
    kvcal_path_dirname("a/b/c.json", buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "a/b");
    kvcal_path_dirname("ck/", buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, ".");
    kvcal_path_dirname("a//ck//", buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "a");
    kvcal_path_dirname("/x", buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "/");
    CU_ASSERT_TRUE(kvcal_path_same_file("no/such//dir/x.json", "no/such/./dir/x.json"));
    CU_ASSERT_FALSE(kvcal_path_same_file("no/such/dir/x.json", "no/such/dir/y.json"));
    char a[600], b[700];
    snprintf(a, sizeof a, "%s/x.json", kvcal_test_tmpdir());
    snprintf(b, sizeof b, "%s/./x.json", kvcal_test_tmpdir());
    CU_ASSERT_TRUE(kvcal_path_same_file(a, b));
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(atomic_write_creates_then_replaces_file),
    KVCAL_TEST(atomic_write_keeps_the_mode_of_the_replaced_file),
    KVCAL_TEST(atomic_open_writes_beside_the_target_and_abort_removes_it),
    KVCAL_TEST(atomic_commit_failure_removes_the_temporary),
    KVCAL_TEST(atomic_open_refuses_a_path_that_is_not_a_regular_file),
    KVCAL_TEST(atomic_open_rejects_missing_directory_and_bad_paths),
    KVCAL_TEST(atomic_write_goes_through_a_symbolic_link_and_refuses_a_dangling_one),
    KVCAL_TEST(atomic_batch_renames_every_output_or_none),
    KVCAL_TEST(atomic_mkdir_and_open_name_the_parent_that_is_missing_or_a_file),
    KVCAL_TEST(inputs_check_finds_an_input_under_any_name),
    KVCAL_TEST(path_join_dirname_and_same_file_handle_slashes),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(atomic_file, KVCAL_NEEDS_NOTHING, tests)
