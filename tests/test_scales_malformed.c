/* tests/test_scales_malformed.c: every case of tests/malformed/scales (a
 * file, or a ck_* checkpoint directory) gets the verdict expected.tsv
 * (written by make_corpus.py) gives it: an invalid case its one-line error
 * and a refusal by the loader; a valid one its warning, a refusal by
 * --strict and a load. Each row is one engine rule of schemas/README.md. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcal.h"
#include "tests/test_util.h"

#define CORPUS "tests/malformed/scales"

typedef struct corpus_row {
    char file[128];
    int model;
    int tp;
    int warning; /* verdict: 1 valid with this warning, 0 invalid with this error */
    char expected[256];
} corpus_row;

/* Reads expected.tsv; returns the number of rows (-1 if unreadable). */
static int read_table(corpus_row *rows, int max)
{
    FILE *f = fopen(CORPUS "/expected.tsv", "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        line[strcspn(line, "\n")] = '\0';
        char model[16], verdict[16];
        corpus_row *r = &rows[n];
        if (sscanf(line, "%127[^\t]\t%15[^\t]\t%d\t%15[^\t]\t%255[^\n]", r->file, model,
                   &r->tp, verdict, r->expected) == 5) {
            r->model = strcmp(model, "-") != 0;
            r->warning = !strcmp(verdict, "warning");
            n++;
        }
    }
    fclose(f);
    return n;
}

/* The first finding of `severity` in rep (or, for warnings, any) that
 * contains `expected`, formatted as "place: message: consequence". */
static int finding_has(const kvcal_report_t *rep, kvcal_severity severity,
                       const char *expected, const char *file)
{
    for (int j = 0; j < kvcal_report_count(rep); j++) {
        kvcal_finding f;
        CU_ASSERT_EQUAL(kvcal_report_get(rep, j, &f), KVCAL_OK);
        if (f.severity != severity)
            continue;
        CU_ASSERT_PTR_NULL(strchr(f.message, '\n'));
        CU_ASSERT(f.consequence[0] != '\0');
        char line[1024];
        snprintf(line, sizeof line, "%.200s: %.500s: %.300s", f.place, f.message,
                 f.consequence);
        if (strstr(line, expected))
            return 1;
        if (severity == KVCAL_SEVERITY_ERROR) {
            printf("\n  %s: first error \"%s\" lacks \"%s\"", file, line, expected);
            return 0;
        }
    }
    printf("\n  %s: no %s contains \"%s\"", file,
           severity == KVCAL_SEVERITY_ERROR ? "error" : "warning", expected);
    return 0;
}

static void malformed_scales_each_get_their_verdict_and_line(void)
{
    static corpus_row rows[160];
    int n = read_table(rows, 160);
    CU_ASSERT_FATAL(n >= 90);
    for (int i = 0; i < n; i++) {
        char path[300];
        snprintf(path, sizeof path, CORPUS "/%.127s", rows[i].file);
        const char *model = rows[i].model ? CORPUS "/tiny" : NULL;
        kvcal_report_t *rep = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_validate_file(path, model, rows[i].tp, &rep),
                              KVCAL_OK);
        int warning = rows[i].warning;
        CU_ASSERT_EQUAL(kvcal_report_passes(rep, 0), warning);
        CU_ASSERT_FALSE(kvcal_report_passes(rep, 1));
        CU_ASSERT(finding_has(rep,
                              warning ? KVCAL_SEVERITY_WARNING : KVCAL_SEVERITY_ERROR,
                              rows[i].expected, rows[i].file));
        if (warning && !kvcal_report_passes(rep, 0))
            printf("\n  %s: expected valid, got errors", rows[i].file);
        kvcal_report_destroy(rep);

        kvcal_scales_t *s = (kvcal_scales_t *)1;
        kvcal_status st = kvcal_scales_load(path, model, rows[i].tp, &s);
        if (warning) {
            CU_ASSERT_EQUAL(st, KVCAL_OK);
            CU_ASSERT_PTR_NOT_NULL(s);
            kvcal_scales_destroy(st == KVCAL_OK ? s : NULL);
            continue;
        }
        CU_ASSERT_NOT_EQUAL(st, KVCAL_OK);
        CU_ASSERT_PTR_NULL(s);
        const char *err = kvcal_last_error();
        CU_ASSERT_PTR_NOT_NULL(strstr(err, rows[i].file));
        CU_ASSERT_PTR_NULL(strchr(err, '\n'));
    }
}

static void malformed_scales_table_lists_every_file(void)
{
    static corpus_row rows[160];
    int n = read_table(rows, 160);
    DIR *d = opendir(CORPUS);
    CU_ASSERT_FATAL(d != NULL && n > 0);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if ((len < 5 || strcmp(e->d_name + len - 5, ".json")) &&
            strncmp(e->d_name, "ck_", 3))
            continue;
        files++;
        int listed = 0;
        for (int i = 0; i < n; i++)
            listed |= !strcmp(rows[i].file, e->d_name);
        if (!listed)
            printf("\n  %s has no row in expected.tsv", e->d_name);
        CU_ASSERT(listed);
    }
    closedir(d);
    CU_ASSERT_EQUAL(files, n);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(malformed_scales_each_get_their_verdict_and_line),
    KVCAL_TEST(malformed_scales_table_lists_every_file),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(scales_malformed, KVCAL_NEEDS_NOTHING, tests)
