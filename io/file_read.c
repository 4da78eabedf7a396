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

/* What a file of mode m is, for messages. */
static const char *file_kind(mode_t m)
{
    return S_ISFIFO(m)   ? "a named pipe (FIFO)"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
                         : "a special file";
}

static kvcal_status not_regular(const char *path, const char *what, mode_t m)
{
    if (S_ISDIR(m))
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: is a directory, not a regular file; pass the %s itself",
                          path, what);
    return kvcal_fail(KVCAL_ERR_IO,
                      "%s: is %s, not a regular file; save the %s to a file and pass "
                      "that",
                      path, file_kind(m), what);
}

kvcal_status kvcal_file_check_input(const char *path, const char *what, int dir_ok)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot open %s: %s; check the path", path,
                          what, strerror(errno));
    if (S_ISREG(sb.st_mode) || (dir_ok && S_ISDIR(sb.st_mode)))
        return KVCAL_OK;
    return not_regular(path, what, sb.st_mode);
}

/* Opens path for reading (*fd) when it is a regular file of *size bytes.
 * It is checked before the open, which would wait on a FIFO, and again
 * after (O_NONBLOCK: a path swapped in between never blocks). */
static kvcal_status open_regular(const char *path, const char *what, int *fd,
                                 size_t *size)
{
    *fd = -1;
    kvcal_status st = kvcal_file_check_input(path, what, 0);
    if (st)
        return st;
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot open %s: %s; check the path", path,
                          what, strerror(errno));
    struct stat sb;
    int flags = -1;
    if (fstat(*fd, &sb) != 0)
        st = kvcal_fail(KVCAL_ERR_IO, "%s: cannot read %s: %s", path, what,
                        strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = not_regular(path, what, sb.st_mode);
    else if ((flags = fcntl(*fd, F_GETFL)) < 0 ||
             fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
        st = kvcal_fail(KVCAL_ERR_IO, "%s: cannot read %s: %s", path, what,
                        strerror(errno));
    if (st) {
        close(*fd);
        *fd = -1;
        return st;
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
