/* io/atomic_file.c: temp file in the target's directory, fsync, rename. */
#include "io/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"

/* Mode of the final file: the mode of the file it replaces, else 0644. */
static mode_t atomic_target_mode(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        return st.st_mode & 07777;
    return 0644;
}

/* fsync of the directory holding `path`, so the rename itself is durable.
 * Some file systems refuse fsync on a directory; the rename has happened
 * then all the same, so the result is not an error. */
static void atomic_sync_dir(const char *path)
{
    char dir[sizeof((kvcal_atomic_file *)0)->path];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

kvcal_status kvcal_atomic_open(kvcal_atomic_file *af, const char *path)
{
    af->f = NULL;
    af->path[0] = '\0';
    af->tmp[0] = '\0';
    if (!path || !*path)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "atomic write: empty output path; pass a file name");
    size_t n = strlen(path);
    if (n + sizeof ".tmp.XXXXXX" > sizeof af->tmp)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "%.64s...: output path is %zu bytes long; use a path shorter than %zu bytes",
            path, n, sizeof af->tmp - sizeof ".tmp.XXXXXX");
    if (path[n - 1] == '/')
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: output path names a directory; add a file name", path);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return kvcal_fail(KVCAL_ERR_IO, "%s: output path is a directory; add a file name",
                          path);
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: output path exists and is not a regular file (a device or "
                          "FIFO would be replaced by the output); pass a file path",
                          path);
    memcpy(af->path, path, n + 1);
    memcpy(af->tmp, path, n);
    memcpy(af->tmp + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    int fd = mkstemp(af->tmp);
    if (fd < 0) {
        int err = errno;
        af->tmp[0] = '\0';
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: cannot create a temporary file beside it: %s; check that "
                          "the directory exists and is writable",
                          path, strerror(err));
    }
    af->f = fdopen(fd, "wb");
    if (!af->f) {
        int err = errno;
        close(fd);
        unlink(af->tmp);
        af->tmp[0] = '\0';
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot open the temporary file: %s", path,
                          strerror(err));
    }
    return KVCAL_OK;
}

kvcal_status kvcal_atomic_commit(kvcal_atomic_file *af)
{
    if (!af->f)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: atomic commit without an open temporary file; call "
                          "kvcal_atomic_open first",
                          af->path[0] ? af->path : "(none)");
    int fd = fileno(af->f);
    const char *what = NULL;
    int err = 0;
    if (ferror(af->f))
        what = "writing";
    else if (fflush(af->f) != 0)
        what = "flushing", err = errno;
    else if (fchmod(fd, atomic_target_mode(af->path)) != 0)
        what = "setting the mode of", err = errno;
    else if (fsync(fd) != 0)
        what = "syncing", err = errno;
    int rc = fclose(af->f);
    af->f = NULL;
    if (!what && rc != 0)
        what = "closing", err = errno;
    if (!what && rename(af->tmp, af->path) != 0)
        what = "renaming into place", err = errno;
    if (what) {
        unlink(af->tmp);
        af->tmp[0] = '\0';
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: failed %s the temporary file%s%s; the file was not "
                          "written (check free space and permissions)",
                          af->path, what, err ? ": " : "", err ? strerror(err) : "");
    }
    af->tmp[0] = '\0';
    atomic_sync_dir(af->path);
    return KVCAL_OK;
}

void kvcal_atomic_abort(kvcal_atomic_file *af)
{
    if (!af)
        return;
    if (af->f) {
        fclose(af->f);
        af->f = NULL;
    }
    if (af->tmp[0]) {
        unlink(af->tmp);
        af->tmp[0] = '\0';
    }
}

kvcal_status kvcal_atomic_write(const char *path, const void *data, size_t len)
{
    kvcal_atomic_file af;
    kvcal_status s = kvcal_atomic_open(&af, path);
    if (s != KVCAL_OK)
        return s;
    if (len && fwrite(data, 1, len, af.f) != len) {
        int err = errno;
        kvcal_atomic_abort(&af);
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: writing %zu bytes failed: %s; the file was not written "
                          "(check free space)",
                          path, len, strerror(err));
    }
    return kvcal_atomic_commit(&af);
}
