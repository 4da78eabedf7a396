/* tests/test_util.h: the CUnit harness shared by every tests/test_*.c.
 *
 * A test file declares its suite with one line at column 0, which the
 * Makefile greps into the suite table of tests/test_main.c:
 *
 *   static CU_TestInfo tests[] = {KVCAL_TEST(observer_update_ignores_padding),
 *                                 CU_TEST_INFO_NULL};
 *   KVCAL_SUITE(observers, KVCAL_NEEDS_NOTHING, tests)
 *
 * A suite whose needs are not met (no CUDA device, no ../shared) is not run:
 * the runner prints why and counts its tests as skipped, never as passed.
 * Tests run from the repository root. */
#ifndef KVCAL_TESTS_TEST_UTIL_H
#define KVCAL_TESTS_TEST_UTIL_H

#include <CUnit/CUnit.h>
#include <stddef.h>

enum {
    KVCAL_NEEDS_NOTHING = 0,
    KVCAL_NEEDS_GPU = 1,        /* a CUDA device in a CUDA build */
    KVCAL_NEEDS_SHARED = 2,     /* the ../shared folder (models, corpora, fixtures) */
    KVCAL_NEEDS_SOURCE = 4,     /* run from the source tree, its build's packages there */
    KVCAL_NEEDS_PKG_CONFIG = 8, /* pkg-config on PATH */
    KVCAL_NEEDS_HTML5LIB = 16,  /* a python3 that imports html5lib (python3-html5lib) */
    KVCAL_NEEDS_CHROMIUM = 32,  /* Debian's chromium on PATH (headless) */
    KVCAL_NEEDS_PYTHON_TORCH = 64, /* kvcal_test_python() imports torch and numpy */
    KVCAL_NEEDS_MPI = 128          /* mpirun on PATH and MPI in this build */
};

typedef struct kvcal_suite {
    const char *name;
    int needs;
    CU_TestInfo *tests;
} kvcal_suite;

#define KVCAL_TEST(fn) {#fn, fn}
#define KVCAL_SUITE(id, needs, tests) \
    const kvcal_suite kvcal_suite_##id = {#id, needs, tests};

/* Folder of shared material: $KVCAL_SHARED or "../shared". */
const char *kvcal_test_shared_dir(void);

/* A fresh empty directory for this test process (created once, removed at
 * exit), and a path inside it: kvcal_test_path("x.json") -> "<tmp>/x.json".
 * Returns a static buffer per call slot (8 rotating slots). */
const char *kvcal_test_tmpdir(void);
const char *kvcal_test_path(const char *name);
/* The bundled stories260K model copied alone (no tokenizer beside it) into
 * the directory kvcal_test_path(dir): the model file's path (a
 * kvcal_test_path slot); the test fails when the copy does. */
const char *kvcal_test_model_without_tokenizer(const char *dir);

/* The folder this test program was built into (the Makefile's BUILD), as
 * an absolute path. */
const char *kvcal_test_build_dir(void);

/* Runs `make -s <args>` in the source tree for the same configuration as
 * this test program (CUDA or not; under `make test` the make variables of
 * the command line too), its output into log. Returns make's exit code, -1
 * when it did not exit; prints the log's last lines when it fails. */
int kvcal_test_make(const char *args, const char *log);

/* A python3 that imports html5lib: "python3", else "/usr/bin/python3"
 * (Debian's python3-html5lib is installed for the system's interpreter,
 * which another python3 on PATH may hide); NULL when neither does. */
const char *kvcal_test_html5_python(void);

/* The Python the package's tests run with: $KVCAL_PYTHON, else the venv
 * `make test-python` makes (build/venv-python/bin/python). */
const char *kvcal_test_python(void);

/* Writes `len` bytes to path; returns 0 on success. */
int kvcal_test_write_file(const char *path, const void *data, size_t len);
/* Reads a whole file (NUL-terminated, caller frees); NULL on failure. */
char *kvcal_test_read_file(const char *path, size_t *len);
/* Writes a JSONL token set to path: `samples` lines of {"input_ids": [...]},
 * `len` pseudo-random ids below `vocab` from `seed` (an LCG); 0 on success. */
int kvcal_test_write_ids(const char *path, int samples, int len, unsigned vocab,
                         unsigned seed);

/* A token set of 2 samples of 24 ids below the golden models' vocabulary
 * of 128 (tests/fixtures/golden), in the test tmpdir; its path. */
const char *kvcal_test_golden_ids(void);
/* `kvcal calibrate --format checkpoint` of golden model `name` on
 * kvcal_test_golden_ids into the test tmpdir's <name> (its path, in a
 * static buffer); a failure fails the test. */
const char *kvcal_test_golden_checkpoint_scales(const char *name);
/* The scales of checkpoint dir with the first `from` in each of their names
 * (in kv_scales.safetensors and in the index) replaced by `to`; a name
 * without it fails the test. */
void kvcal_test_rename_scales(const char *dir, const char *from, const char *to);
/* The same, with the first `from2` of a name without `from` replaced by
 * `to2` (K's and V's names told apart); a name with neither fails the test. */
void kvcal_test_rename_scales_or(const char *dir, const char *from, const char *to,
                                 const char *from2, const char *to2);

/* Runs `kvcal <args>` through the shell. The binary is $KVCAL_BIN (set by
 * `make test`; made absolute at start, so a test may chdir), else the
 * kvcal built beside this test program. When out is not NULL, *out is its
 * stdout (NUL-terminated, caller frees; NULL if unreadable). Its stderr is
 * kept for kvcal_test_kvcal_stderr. Returns the exit code, -1 when it did not
 * exit. */
int kvcal_test_run_kvcal(const char *args, char **out);
/* Runs a shell command (a launcher, a pipeline) in which $KVCAL names the
 * kvcal binary, its output kept as kvcal_test_run_kvcal keeps it; returns
 * its exit code, -1 when it did not exit. */
int kvcal_test_run_command(const char *command, char **out);
/* The stderr of the last kvcal_test_run_kvcal or _command (caller frees);
 * NULL on failure. */
char *kvcal_test_kvcal_stderr(void);
/* Whether that stderr contains needle; prints it when not. */
int kvcal_test_kvcal_stderr_has(const char *needle);

/* Whether kvcal_last_error() is one non-empty line containing needle;
 * prints the message to stderr when not. */
int kvcal_test_error_has(const char *needle);

/* |got - want| <= atol + |want| * rtol */
#define KVCAL_ASSERT_CLOSE(got, want, atol, rtol)                              \
    CU_ASSERT(fabs((double)(got) - (double)(want)) <=                         \
              (atol) + fabs((double)(want)) * (rtol))

#endif
