/* tests/test_library.c: the boundary of libkvcal, the library engines link:
 * its shared object exports exactly what include/ declares (KVCAL_API), and
 * a program linked against it pulls in no HDF5, PCRE2 or cuBLAS (those are
 * the toolkit's, linked only into the kvcal program and the tests). */
#include <CUnit/CUnit.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/wait.h>

#include "tests/test_util.h"

#ifdef __SANITIZE_ADDRESS__
#define CONSUMER_FLAGS "-fsanitize=address,undefined" /* the library's runtime */
#else
#define CONSUMER_FLAGS ""
#endif

#define MAX_NAMES 512

typedef struct {
    char *name[MAX_NAMES];
    int n;
} names;

static void names_add(names *s, const char *name, size_t len)
{
    for (int i = 0; i < s->n; i++)
        if (strlen(s->name[i]) == len && !strncmp(s->name[i], name, len))
            return;
    CU_ASSERT_FATAL(s->n < MAX_NAMES);
    s->name[s->n++] = strndup(name, len);
}

static int names_has(const names *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], name))
            return 1;
    return 0;
}

static void names_free(names *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->name[i]);
    s->n = 0;
}

/* The functions the headers of include/ declare with KVCAL_API: the identifier before
 * the first '(' after each KVCAL_API (declarations may span lines). */
static void declared_names(names *out)
{
    DIR *d = opendir("include");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".h"))
            continue;
        char path[512];
        snprintf(path, sizeof path, "include/%s", e->d_name);
        char *text = kvcal_test_read_file(path, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        for (char *p = text; (p = strstr(p, "KVCAL_API "));) {
            const int definition = p - text >= 8 && !strncmp(p - 8, "#define ", 8);
            p += strlen("KVCAL_API ");
            if (definition)
                continue;
            char *paren = strchr(p, '(');
            if (!paren)
                break;
            char *end = paren;
            while (end > p && isspace((unsigned char)end[-1]))
                end--;
            char *start = end;
            while (start > p && (isalnum((unsigned char)start[-1]) || start[-1] == '_'))
                start--;
            if (end > start)
                names_add(out, start, (size_t)(end - start));
        }
        free(text);
    }
    closedir(d);
}

/* Runs `sh -c cmd` with its output into the test's file `out`; the exit
 * code (-1 when it did not run). */
static int run(const char *cmd, const char *out)
{
    char full[3 * PATH_MAX + 1024];
    snprintf(full, sizeof full, "( %s ) > '%s' 2>&1", cmd, out);
    int rc = system(full);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void libkvcal_exports_exactly_what_include_declares(void)
{
    names declared = {{0}, 0}, exported = {{0}, 0};
    declared_names(&declared);
    CU_ASSERT(declared.n >= 30);
    const char *out = kvcal_test_path("nm.txt");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s/libkvcal.so'",
             kvcal_test_build_dir());
    CU_ASSERT_EQUAL_FATAL(run(cmd, out), 0);
    FILE *f = fopen(out, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[1024];
    int stray = 0;
    while (fgets(line, sizeof line, f)) {
        char addr[64], type[8], name[512];
        if (sscanf(line, "%63s %7s %511s", addr, type, name) != 3)
            continue;
        /* the sanitizers' runtime and the C++ runtime's weak symbols are
         * not kvcal's: only names in kvcal's prefix are its own */
        if (strncmp(name, "kvcal_", 6) && strncmp(name, "KVCAL_", 6)) {
            if (strchr("TDBR", type[0]) && strncmp(name, "_", 1) && strncmp(name, "__", 2)) {
                fprintf(stderr, "\n  exported, not kvcal's: %s", name);
                stray++;
            }
            continue;
        }
        names_add(&exported, name, strlen(name));
        if (!names_has(&declared, name)) {
            fprintf(stderr, "\n  exported, not declared in include/: %s", name);
            stray++;
        }
    }
    fclose(f);
    for (int i = 0; i < declared.n; i++)
        if (!names_has(&exported, declared.name[i])) {
            fprintf(stderr, "\n  declared in include/, not exported: %s",
                    declared.name[i]);
            stray++;
        }
    printf("(%d names declared, %d exported) ", declared.n, exported.n);
    CU_ASSERT_EQUAL(stray, 0);
    names_free(&declared);
    names_free(&exported);
}

static void a_program_linked_to_libkvcal_needs_no_hdf5_pcre2_or_cublas(void)
{
    const char *prog = kvcal_test_path("engine-consumer"), *out = kvcal_test_path("ldd.txt");
    char build[PATH_MAX], cmd[3 * PATH_MAX + 512];
    CU_ASSERT_PTR_NOT_NULL_FATAL(realpath(kvcal_test_build_dir(), build));
    snprintf(cmd, sizeof cmd,
             "cc " CONSUMER_FLAGS " -Iinclude -o '%s' tests/pkgconfig_consumer.c -L'%s' "
             "-lkvcal -Wl,-rpath,'%s'",
             prog, build, build);
    CU_ASSERT_EQUAL_FATAL(run(cmd, out), 0);
    snprintf(cmd, sizeof cmd, "ldd '%s'", prog);
    CU_ASSERT_EQUAL_FATAL(run(cmd, out), 0);
    char *text = kvcal_test_read_file(out, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "libkvcal.so"));
    static const char *const toolkit_only[] = {"libhdf5", "libpcre2", "libcublas",
                                               "libcunit", "libz.so", "not found"};
    for (size_t i = 0; i < sizeof toolkit_only / sizeof *toolkit_only; i++) {
        if (strstr(text, toolkit_only[i]))
            fprintf(stderr, "\n  %s pulls in %s:\n%s", prog, toolkit_only[i], text);
        CU_ASSERT_PTR_NULL(strstr(text, toolkit_only[i]));
    }
    free(text);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(libkvcal_exports_exactly_what_include_declares),
    KVCAL_TEST(a_program_linked_to_libkvcal_needs_no_hdf5_pcre2_or_cublas),
    CU_TEST_INFO_NULL};
KVCAL_SUITE(library, KVCAL_NEEDS_SOURCE, tests)
