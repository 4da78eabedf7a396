/* io/path.c: the names of files (see path.h). */
#include "io/path.h"

#include <libgen.h>
#include <stdio.h>
#include <string.h>

int kvcal_path_has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

void kvcal_path_parent(const char *path, char *out, size_t n)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    snprintf(out, n, "%s", dirname(tmp));
}
