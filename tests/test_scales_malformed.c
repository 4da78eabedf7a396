/* tests/test_scales_malformed.c: every file of tests/malformed/scales gets
 * its one-line error (the expected substring of expected.tsv, written by
 * make_corpus.py), is refused by the loader, and nothing crashes. */
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
        char model[16];
        corpus_row *r = &rows[n];
        if (sscanf(line, "%127[^\t]\t%15[^\t]\t%d\t%255[^\n]", r->file, model, &r->tp,
                   r->expected) == 4) {
            r->model = strcmp(model, "-") != 0;
            n++;
        }
    }
    fclose(f);
    return n;
}

static void malformed_scales_each_get_their_one_line_error(void)
{
    static corpus_row rows[128];
    int n = read_table(rows, 128);
    CU_ASSERT_FATAL(n >= 30);
    for (int i = 0; i < n; i++) {
        char path[300];
        snprintf(path, sizeof path, CORPUS "/%.127s", rows[i].file);
        const char *model = rows[i].model ? CORPUS "/tiny" : NULL;
        kvcal_report_t *rep = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_validate_file(path, model, rows[i].tp, &rep),
                              KVCAL_OK);
        CU_ASSERT_FALSE(kvcal_report_passes(rep, 0));
        int found = 0;
        for (int j = 0; j < kvcal_report_count(rep) && !found; j++) {
            kvcal_finding f;
            CU_ASSERT_EQUAL(kvcal_report_get(rep, j, &f), KVCAL_OK);
            if (f.severity != KVCAL_SEVERITY_ERROR)
                continue;
            CU_ASSERT_PTR_NULL(strchr(f.message, '\n'));
            CU_ASSERT(f.consequence[0] != '\0');
            char line[1024];
            snprintf(line, sizeof line, "%.200s: %.500s: %.300s", f.place, f.message,
                     f.consequence);
            found = strstr(line, rows[i].expected) != NULL;
            if (!found)
                printf("\n  %s: first error \"%s\" lacks \"%s\"", rows[i].file, line,
                       rows[i].expected);
            break;
        }
        CU_ASSERT(found);
        kvcal_report_destroy(rep);

        kvcal_scales_t *s = (kvcal_scales_t *)1;
        CU_ASSERT_NOT_EQUAL(kvcal_scales_load(path, model, rows[i].tp, &s), KVCAL_OK);
        CU_ASSERT_PTR_NULL(s);
        const char *err = kvcal_last_error();
        CU_ASSERT_PTR_NOT_NULL(strstr(err, rows[i].file));
        CU_ASSERT_PTR_NULL(strchr(err, '\n'));
    }
}

static void malformed_scales_table_lists_every_file(void)
{
    static corpus_row rows[128];
    int n = read_table(rows, 128);
    DIR *d = opendir(CORPUS);
    CU_ASSERT_FATAL(d != NULL && n > 0);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json"))
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
    KVCAL_TEST(malformed_scales_each_get_their_one_line_error),
    KVCAL_TEST(malformed_scales_table_lists_every_file),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(scales_malformed, KVCAL_NEEDS_NOTHING, tests)
