/* io/atomic_file.c: temp file in the target's directory, fsync, rename;
 * batches of them renamed together; the inputs no output may replace. */
#include "io/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"

/* The batch open on this thread, or NULL. */
static _Thread_local kvcal_atomic_batch_t *open_batch;

typedef struct staged {
    char *tmp, *path;
} staged;

struct kvcal_atomic_batch {
    staged *files; /* (nfiles) in the order written */
    char **dirs;   /* (ndirs) created by the batch, in creation order */
    int nfiles, ndirs;
};

// --- paths -------------------------------------------------------------------

/* The last component of path (trailing slashes ignored) into buf. */
static void path_basename(const char *path, char *buf, size_t n)
{
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && path[start - 1] != '/')
        start--;
    snprintf(buf, n, "%.*s", (int)(end - start), path + start);
}

/* path with repeated slashes and "." components taken out, into buf. */
static void path_lexical(const char *path, char *buf, size_t n)
{
    size_t o = 0;
    for (const char *p = path; *p && o + 1 < n;) {
        if (*p == '/' && o > 0 && buf[o - 1] == '/') {
            p++;
        } else if (p[0] == '.' && (p[1] == '/' || !p[1]) &&
                   (o == 0 || buf[o - 1] == '/')) {
            p += p[1] ? 2 : 1;
        } else {
            buf[o++] = *p++;
        }
    }
    while (o > 1 && buf[o - 1] == '/')
        o--;
    buf[o] = '\0';
}

int kvcal_path_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea != eb)
        return 0;
    char da[4096], db[4096], na[4096], nb[4096];
    path_basename(a, na, sizeof na);
    path_basename(b, nb, sizeof nb);
    if (strcmp(na, nb))
        return 0;
    kvcal_path_dirname(a, da, sizeof da);
    kvcal_path_dirname(b, db, sizeof db);
    if (stat(da, &sa) == 0 && stat(db, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    path_lexical(da, na, sizeof na);
    path_lexical(db, nb, sizeof nb);
    return !strcmp(na, nb);
}

// --- one file ----------------------------------------------------------------

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
    char dir[4096];
    kvcal_path_dirname(path, dir, sizeof dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* The failure to create `what` ("the directory", "a temporary file beside
 * it") at path, errno err: names the directory it goes into when that is
 * the cause, and the fix. */
static kvcal_status create_fail(const char *path, const char *what, int err)
{
    char parent[4096];
    kvcal_path_dirname(path, parent, sizeof parent);
    if (err == ENOENT)
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: cannot create %s: its parent directory %s does not "
                          "exist; create it first or choose another output path",
                          path, what, parent);
    if (err == ENOTDIR)
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: cannot create %s: its parent %s is not a directory (a "
                          "part of it is a file); choose another output path",
                          path, what, parent);
    if (err == EACCES || err == EPERM || err == EROFS)
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: cannot create %s: its parent directory %s is not "
                          "writable (%s); choose another output path",
                          path, what, parent, strerror(err));
    return kvcal_fail(KVCAL_ERR_IO,
                      "%s: cannot create %s: %s; check that the directory %s exists and "
                      "is writable, or choose another output path",
                      path, what, strerror(err), parent);
}

/* The final path of an output named `path` into target (4096 bytes): path
 * itself, or the file a symbolic link there names; refuses what
 * kvcal_atomic_open refuses. */
static kvcal_status atomic_target(const char *path, char *target)
{
    if (!path || !*path)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "atomic write: empty output path; pass a file name");
    size_t n = strlen(path);
    if (n > KVCAL_ATOMIC_PATH_MAX)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "%.64s...: output path is %zu bytes long; use a path shorter than %zu bytes",
            path, n, (size_t)KVCAL_ATOMIC_PATH_MAX + 1);
    if (path[n - 1] == '/')
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: output path names a directory; add a file name", path);
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode)) {
        memcpy(target, path, n + 1);
    } else {
        char resolved[PATH_MAX];
        if (!realpath(path, resolved))
            return kvcal_fail(KVCAL_ERR_IO,
                              "%s: a symbolic link to nothing (%s); outputs are written "
                              "through a link to the file it names: remove the link or "
                              "create that file",
                              path, strerror(errno));
        if (strlen(resolved) > KVCAL_ATOMIC_PATH_MAX)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "%.64s...: the file the symbolic link %.64s names has a "
                              "path of %zu bytes; use a path shorter than %zu bytes",
                              resolved, path, strlen(resolved),
                              (size_t)KVCAL_ATOMIC_PATH_MAX + 1);
        memcpy(target, resolved, strlen(resolved) + 1);
    }
    if (stat(target, &st) == 0 && S_ISDIR(st.st_mode))
        return kvcal_fail(KVCAL_ERR_IO, "%s: output path is a directory; add a file name",
                          path);
    if (stat(target, &st) == 0 && !S_ISREG(st.st_mode))
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: output path exists and is not a regular file (a device or "
                          "FIFO would be replaced by the output); pass a file path",
                          path);
    return KVCAL_OK;
}

kvcal_status kvcal_atomic_check(const char *path)
{
    char target[4096];
    return atomic_target(path, target);
}

kvcal_status kvcal_atomic_open(kvcal_atomic_file *af, const char *path)
{
    af->f = NULL;
    af->path[0] = '\0';
    af->tmp[0] = '\0';
    kvcal_status s = atomic_target(path, af->path);
    if (s) {
        af->path[0] = '\0';
        return s;
    }
    size_t n = strlen(af->path);
    memcpy(af->tmp, af->path, n);
    memcpy(af->tmp + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    int fd = mkstemp(af->tmp);
    if (fd < 0) {
        int err = errno;
        af->tmp[0] = '\0';
        return create_fail(path, "a temporary file beside it", err);
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

/* Hands a finished temporary to the open batch: KVCAL_OK, or a failure
 * (the temporary is then removed) when the batch already holds the path. */
static kvcal_status batch_stage(kvcal_atomic_batch_t *b, kvcal_atomic_file *af)
{
    kvcal_status st = KVCAL_OK;
    for (int i = 0; i < b->nfiles && !st; i++)
        if (!strcmp(b->files[i].path, af->path))
            st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                            "%s: written twice by one command; give each output its "
                            "own path",
                            af->path);
    staged *grown =
        st ? NULL : realloc(b->files, sizeof *grown * (size_t)(b->nfiles + 1));
    if (!st && grown) {
        b->files = grown;
        grown[b->nfiles].tmp = strdup(af->tmp);
        grown[b->nfiles].path = strdup(af->path);
        if (grown[b->nfiles].tmp && grown[b->nfiles].path) {
            b->nfiles++;
            af->tmp[0] = '\0';
            return KVCAL_OK;
        }
        free(grown[b->nfiles].tmp);
        free(grown[b->nfiles].path);
    }
    if (!st)
        st =
            kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory staging the output", af->path);
    unlink(af->tmp);
    af->tmp[0] = '\0';
    return st;
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
    if (!what && open_batch)
        return batch_stage(open_batch, af);
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
    if (s)
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

// --- batches -----------------------------------------------------------------

kvcal_status kvcal_atomic_batch_begin(kvcal_atomic_batch_t **out)
{
    *out = NULL;
    if (open_batch)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "atomic batch: one is already open on this thread; commit or "
                          "abort it first");
    kvcal_atomic_batch_t *b = calloc(1, sizeof *b);
    if (!b)
        return kvcal_fail(KVCAL_ERR_NOMEM, "atomic batch: out of memory");
    open_batch = *out = b;
    return KVCAL_OK;
}

/* *exists: whether dir is there; an error when it is there but is not a
 * directory. */
static kvcal_status existing_dir(const char *dir, int *exists)
{
    struct stat st;
    *exists = stat(dir, &st) == 0;
    if (*exists && !S_ISDIR(st.st_mode))
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: exists and is not a directory; give a directory path for "
                          "this output",
                          dir);
    return KVCAL_OK;
}

kvcal_status kvcal_atomic_mkdir(const char *dir)
{
    int exists;
    kvcal_status st = existing_dir(dir, &exists);
    if (st || exists)
        return st;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return create_fail(dir, "the directory", errno);
    return KVCAL_OK;
}

kvcal_status kvcal_atomic_batch_mkdir(kvcal_atomic_batch_t *b, const char *dir)
{
    int exists;
    kvcal_status st = existing_dir(dir, &exists);
    if (st || exists)
        return st;
    char **grown = realloc(b->dirs, sizeof *grown * (size_t)(b->ndirs + 1));
    if (!grown || !(grown[b->ndirs] = strdup(dir))) {
        if (grown)
            b->dirs = grown;
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", dir);
    }
    b->dirs = grown;
    if (mkdir(dir, 0755) != 0) {
        int err = errno;
        free(grown[b->ndirs]);
        return create_fail(dir, "the directory", err);
    }
    b->ndirs++;
    return KVCAL_OK;
}

static void batch_free(kvcal_atomic_batch_t *b)
{
    for (int i = 0; i < b->nfiles; i++) {
        free(b->files[i].tmp);
        free(b->files[i].path);
    }
    for (int i = 0; i < b->ndirs; i++)
        free(b->dirs[i]);
    free(b->files);
    free(b->dirs);
    if (open_batch == b)
        open_batch = NULL;
    free(b);
}

kvcal_status kvcal_atomic_batch_commit(kvcal_atomic_batch_t *b)
{
    kvcal_status st = KVCAL_OK;
    int i = 0;
    for (; i < b->nfiles; i++) {
        if (rename(b->files[i].tmp, b->files[i].path) != 0) {
            int err = errno;
            st = kvcal_fail(KVCAL_ERR_IO,
                            "%s: failed renaming the temporary file into place: %s; "
                            "%d of the %d outputs were written before it, the others "
                            "not",
                            b->files[i].path, strerror(err), i, b->nfiles);
            break;
        }
        atomic_sync_dir(b->files[i].path);
    }
    for (; i < b->nfiles; i++)
        unlink(b->files[i].tmp);
    batch_free(b);
    return st;
}

void kvcal_atomic_batch_abort(kvcal_atomic_batch_t *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->nfiles; i++)
        unlink(b->files[i].tmp);
    for (int i = b->ndirs - 1; i >= 0; i--)
        rmdir(b->dirs[i]);
    batch_free(b);
}

// --- inputs ------------------------------------------------------------------

typedef struct input_file {
    dev_t dev;
    ino_t ino;
    char *path;
    const char *what;
} input_file;

struct kvcal_inputs {
    input_file *files; /* (n) */
    int n;
};

kvcal_status kvcal_inputs_create(kvcal_inputs_t **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? KVCAL_OK : kvcal_fail(KVCAL_ERR_NOMEM, "out of memory");
}

void kvcal_inputs_destroy(kvcal_inputs_t *in)
{
    if (!in)
        return;
    for (int i = 0; i < in->n; i++)
        free(in->files[i].path);
    free(in->files);
    free(in);
}

static kvcal_status inputs_push(kvcal_inputs_t *in, const struct stat *st,
                                const char *path, const char *what)
{
    input_file *grown = realloc(in->files, sizeof *grown * (size_t)(in->n + 1));
    if (!grown)
        return kvcal_fail(KVCAL_ERR_NOMEM, "out of memory listing the inputs");
    in->files = grown;
    if (!(grown[in->n].path = strdup(path)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "out of memory listing the inputs");
    grown[in->n].dev = st->st_dev;
    grown[in->n].ino = st->st_ino;
    grown[in->n].what = what;
    in->n++;
    return KVCAL_OK;
}

kvcal_status kvcal_inputs_add(kvcal_inputs_t *in, const char *path, const char *what,
                              int (*keep)(const char *name))
{
    struct stat st;
    if (stat(path, &st) != 0)
        return KVCAL_OK;
    if (!S_ISDIR(st.st_mode))
        return inputs_push(in, &st, path, what);
    DIR *d = opendir(path);
    if (!d)
        return KVCAL_OK;
    kvcal_status s = KVCAL_OK;
    for (struct dirent *e; !s && (e = readdir(d));) {
        char full[4096];
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            (keep && !keep(e->d_name)) ||
            kvcal_path_join(full, sizeof full, path, e->d_name) != 0)
            continue;
        if (stat(full, &st) == 0 && S_ISREG(st.st_mode))
            s = inputs_push(in, &st, full, what);
    }
    closedir(d);
    return s;
}

kvcal_status kvcal_inputs_check(const kvcal_inputs_t *in, const char *opt,
                                const char *out)
{
    struct stat st;
    if (stat(out, &st) != 0)
        return KVCAL_OK;
    for (int i = 0; i < in->n; i++) {
        const input_file *f = &in->files[i];
        if (f->dev != st.st_dev || f->ino != st.st_ino)
            continue;
        if (!strcmp(f->path, out))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "%s %s: is %s; the output would replace an input: write it "
                              "to another path",
                              opt, out, f->what);
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s %s: is %s %s (the same file under another name); the "
                          "output would replace an input: write it to another path",
                          opt, out, f->what, f->path);
    }
    return KVCAL_OK;
}
