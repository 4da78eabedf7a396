/* cli/data_path.c: locate files kvcal ships beside its executable. */
#include "cli/data_path.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/status.h"

static int readable(const char *path)
{
    return access(path, R_OK) == 0;
}

static int try_path(char *out, size_t n, const char *dir, const char *rel)
{
    int len = dir ? snprintf(out, n, "%s/%s", dir, rel) : snprintf(out, n, "%s", rel);
    return len > 0 && (size_t)len < n && readable(out);
}

kvcal_status kvcal_data_file_find(const char *rel, char *out, size_t n)
{
    const char *env = getenv("KVCAL_DATA_DIR");
    if (env && *env && try_path(out, n, env, rel))
        return KVCAL_OK;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            static const char *const up[] = {"../share/kvcal", "..", "../.."};
            *slash = '\0';
            for (size_t i = 0; i < sizeof up / sizeof up[0]; i++) {
                char dir[PATH_MAX + 32];
                snprintf(dir, sizeof dir, "%s/%s", exe, up[i]);
                if (try_path(out, n, dir, rel))
                    return KVCAL_OK;
            }
        }
    }
    if (try_path(out, n, NULL, rel))
        return KVCAL_OK;
    return kvcal_fail(KVCAL_ERR_IO,
                      "%s: not found in $KVCAL_DATA_DIR, beside the kvcal executable "
                      "(../share/kvcal, ..) or in the current directory; pass --dataset "
                      "FILE or set KVCAL_DATA_DIR",
                      rel);
}
