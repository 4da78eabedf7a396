/* io/file_read.c: a whole input file into memory (see the header). */
#include "io/file_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"

kvcal_status kvcal_file_read(const char *path, const char *what, size_t max_bytes,
                             char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot open %s: %s; check the path", path,
                          what, strerror(errno));
    kvcal_status st = KVCAL_OK;
    char *buf = NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = kvcal_fail(KVCAL_ERR_IO, "%s: not a regular file; pass the %s itself", path,
                        what);
        goto fail;
    }
    if ((unsigned long long)sb.st_size > max_bytes) {
        st = kvcal_fail(KVCAL_ERR_PARSE,
                        "%s: %lld bytes exceed the limit of %zu MiB for a %s", path,
                        (long long)sb.st_size, max_bytes >> 20, what);
        goto fail;
    }
    size_t n = (size_t)sb.st_size;
    buf = malloc(n + 1);
    if (!buf) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: cannot allocate %zu bytes to read it", path,
                        n + 1);
        goto fail;
    }
    if (fread(buf, 1, n, f) != n || ferror(f)) {
        st = kvcal_fail(KVCAL_ERR_IO,
                        "%s: read failed (file changed while reading?); try again", path);
        goto fail;
    }
    buf[n] = '\0';
    fclose(f);
    *data = buf;
    *len = n;
    return KVCAL_OK;
fail:
    free(buf);
    fclose(f);
    return st;
}
