/* io/file_read.c: a whole input file into memory (see the header). */
#include "io/file_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"

/* Opens path for reading (*fd) and checks that it is a regular file of *size
 * bytes. */
static kvcal_status open_regular(const char *path, const char *what, int *fd,
                                 size_t *size)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot open %s: %s; check the path", path,
                          what, strerror(errno));
    struct stat sb;
    if (fstat(*fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(*fd);
        *fd = -1;
        return kvcal_fail(KVCAL_ERR_IO, "%s: not a regular file; pass the %s itself",
                          path, what);
    }
    *size = (size_t)sb.st_size;
    return KVCAL_OK;
}

kvcal_status kvcal_file_read(const char *path, const char *what, size_t max_bytes,
                             char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    int fd;
    size_t n;
    kvcal_status st = open_regular(path, what, &fd, &n);
    if (st)
        return st;
    char *buf = NULL;
    if (n > max_bytes) {
        st = kvcal_fail(KVCAL_ERR_PARSE,
                        "%s: %zu bytes exceed the limit of %zu MiB for a %s", path, n,
                        max_bytes >> 20, what);
        goto fail;
    }
    buf = malloc(n + 1);
    if (!buf) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: cannot allocate %zu bytes to read it", path,
                        n + 1);
        goto fail;
    }
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            st = kvcal_fail(KVCAL_ERR_IO,
                            "%s: read failed (file changed while reading?); try again",
                            path);
            goto fail;
        }
        got += (size_t)r;
    }
    buf[n] = '\0';
    close(fd);
    *data = buf;
    *len = n;
    return KVCAL_OK;
fail:
    free(buf);
    close(fd);
    return st;
}

kvcal_status kvcal_file_map(const char *path, const char *what, void **map, size_t *len)
{
    *map = NULL;
    *len = 0;
    int fd;
    size_t n;
    kvcal_status st = open_regular(path, what, &fd, &n);
    if (st)
        return st;
    if (n > 0) {
        void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            st = kvcal_fail(KVCAL_ERR_IO, "%s: cannot map %zu bytes: %s", path, n,
                            strerror(errno));
        } else {
            *map = p;
            *len = n;
        }
    }
    close(fd);
    return st;
}

void kvcal_file_unmap(void *map, size_t len)
{
    if (map)
        munmap(map, len);
}
