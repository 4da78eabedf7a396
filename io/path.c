/* io/path.c: the names of files (see path.h). */
#include "io/path.h"

#include <stdio.h>
#include <string.h>

int kvcal_path_has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int kvcal_path_join(char *buf, size_t n, const char *dir, const char *name)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    int w = len == 1 && dir[0] == '/' ? snprintf(buf, n, "/%s", name)
                                      : snprintf(buf, n, "%.*s/%s", (int)len, dir, name);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

void kvcal_path_dirname(const char *path, char *buf, size_t n)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    while (len > 0 && path[len - 1] != '/')
        len--;
    while (len > 1 && path[len - 1] == '/')
        len--;
    if (len == 0)
        snprintf(buf, n, ".");
    else
        snprintf(buf, n, "%.*s", (int)len, path);
}
