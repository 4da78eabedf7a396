/* tests/test_main.c: runs every suite (or those named on the command line),
 * reporting suites whose needs are not met as skipped. */
#include <CUnit/Basic.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "calib/dp.h"
#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"
#include "kvcal.h"
#include "tests/test_util.h"

#undef KVCAL_SUITE
#define KVCAL_SUITE(id, needs, tests) extern const kvcal_suite kvcal_suite_##id;
#include "suites.gen.h"
#undef KVCAL_SUITE
#define KVCAL_SUITE(id, needs, tests) &kvcal_suite_##id,
static const kvcal_suite *suites[] = {
#include "suites.gen.h"
    NULL,
};
#undef KVCAL_SUITE

static char tmpdir[256];

const char *kvcal_test_shared_dir(void)
{
    const char *e = getenv("KVCAL_SHARED");
    return e && *e ? e : "../shared";
}

const char *kvcal_test_tmpdir(void)
{
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/kvcal-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return tmpdir;
}

const char *kvcal_test_path(const char *name)
{
    static char slots[8][512];
    static int next;
    char *p = slots[next++ % 8];
    snprintf(p, sizeof slots[0], "%s/%s", kvcal_test_tmpdir(), name);
    return p;
}

const char *kvcal_test_model_without_tokenizer(const char *dir)
{
    static const char model[] = "models/stories260K/stories260K.bin";
    char d[600], cmd[1400], rel[256];
    snprintf(d, sizeof d, "%s", kvcal_test_path(dir));
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp %s '%s/'", d, model, d);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    snprintf(rel, sizeof rel, "%.200s/stories260K.bin", dir);
    return kvcal_test_path(rel);
}

int kvcal_test_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = fwrite(data, 1, len, f);
    return (fclose(f) == 0 && n == len) ? 0 : -1;
}

int kvcal_test_write_ids(const char *path, int samples, int len, unsigned vocab,
                         unsigned seed)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    for (int s = 0; s < samples; s++) {
        fputs("{\"input_ids\": [", f);
        for (int t = 0; t < len; t++) {
            seed = seed * 1103515245u + 12345u;
            fprintf(f, "%s%u", t ? ", " : "", (seed >> 16) % vocab);
        }
        fputs("]}\n", f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

const char *kvcal_test_golden_ids(void)
{
    const char *path = kvcal_test_path("golden_ids.jsonl");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_ids(path, 2, 24, 120, 7), 0);
    return path;
}

const char *kvcal_test_golden_checkpoint_scales(const char *name)
{
    static char out[600];
    char args[2048];
    snprintf(out, sizeof out, "%s", kvcal_test_path(name));
    snprintf(args, sizeof args,
             "calibrate --model tests/fixtures/golden/%s --dataset '%s' --num-samples 2 "
             "--seq-len 24 --quiet --format checkpoint --out '%s'",
             name, kvcal_test_golden_ids(), out);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    return out;
}

/* Where name holds `from` (*to_out = to), else `from2` (*to_out = to2),
 * and in *len the length of the one found; NULL when neither is in it. */
static const char *rename_at(const char *name, const char *from, const char *to,
                             const char *from2, const char *to2, size_t *len,
                             const char **to_out)
{
    const char *at = strstr(name, from);
    *len = strlen(from);
    *to_out = to;
    if (!at) {
        at = strstr(name, from2);
        *len = strlen(from2);
        *to_out = to2;
    }
    return at;
}

/* The scales of dir with the first `from` in each of their names (in the
 * tensors' file and in the index) replaced by `to`, or in a name without
 * it the first `from2` by `to2`; a name with neither fails the test. */
void kvcal_test_rename_scales_or(const char *dir, const char *from, const char *to,
                                 const char *from2, const char *to2)
{
    char path[700];
    snprintf(path, sizeof path, "%s/kv_scales.safetensors", dir);
    kvcal_safetensors_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(path, &st), KVCAL_OK);
    const int n = kvcal_safetensors_count(st);
    kvcal_tensor_out *out = calloc((size_t)n, sizeof *out);
    char(*names)[160] = calloc((size_t)n, sizeof *names);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(names);
    for (int i = 0; i < n; i++) {
        const kvcal_tensor_info *t = kvcal_safetensors_at(st, i);
        size_t len;
        const char *with;
        const char *at = rename_at(t->name, from, to, from2, to2, &len, &with);
        CU_ASSERT_PTR_NOT_NULL_FATAL(at);
        snprintf(names[i], sizeof names[i], "%.*s%s%s", (int)(at - t->name), t->name,
                 with, at + len);
        out[i].name = names[i];
        out[i].dtype = t->dtype;
        out[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++)
            out[i].shape[d] = t->shape[d];
        out[i].data = t->data;
    }
    char moved[720];
    snprintf(moved, sizeof moved, "%s.old", path);
    CU_ASSERT_EQUAL_FATAL(rename(path, moved), 0);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(path, out, n, NULL), KVCAL_OK);
    kvcal_safetensors_close(st);
    remove(moved);
    free(out);
    free(names);
    /* the index lists them by name too */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    cJSON *index = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(path, &index), KVCAL_OK);
    cJSON *map = cJSON_GetObjectItem(index, "weight_map"),
          *renamed = cJSON_CreateObject();
    for (cJSON *e = map->child; e; e = e->next) {
        char name[256];
        size_t len;
        const char *with;
        const char *at = !strcmp(e->valuestring, "kv_scales.safetensors")
                             ? rename_at(e->string, from, to, from2, to2, &len, &with)
                             : NULL;
        if (at)
            snprintf(name, sizeof name, "%.*s%s%s", (int)(at - e->string), e->string,
                     with, at + len);
        else
            snprintf(name, sizeof name, "%s", e->string);
        cJSON_AddStringToObject(renamed, name, e->valuestring);
    }
    cJSON_ReplaceItemInObject(index, "weight_map", renamed);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_write(path, index), KVCAL_OK);
    cJSON_Delete(index);
}

void kvcal_test_rename_scales(const char *dir, const char *from, const char *to)
{
    kvcal_test_rename_scales_or(dir, from, to, from, to);
}

char *kvcal_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return buf;
}

int kvcal_test_error_has(const char *needle)
{
    const char *msg = kvcal_last_error();
    int ok = msg[0] && !strchr(msg, '\n') && strstr(msg, needle);
    if (!ok)
        fprintf(stderr, "\n  message \"%s\" lacks \"%s\"\n", msg, needle);
    return ok;
}

static const char *kvcal_binary(void)
{
    static char bin[PATH_MAX];
    if (!bin[0]) {
        const char *env = getenv("KVCAL_BIN");
        if (env && *env) {
            if (!realpath(env, bin))
                snprintf(bin, sizeof bin, "%s", env);
        } else {
            ssize_t n = readlink("/proc/self/exe", bin, sizeof bin - 1);
            bin[n > 0 ? n : 0] = '\0';
            char *slash = strrchr(bin, '/');
            size_t dir = slash ? (size_t)(slash + 1 - bin) : 0;
            snprintf(bin + dir, sizeof bin - dir, "kvcal");
        }
    }
    return bin;
}

/* Where kvcal_test_run_kvcal keeps the output of `stream` (not one of
 * kvcal_test_path's slots, which a test may still hold). */
static const char *kvcal_output_path(char *buf, size_t size, const char *stream)
{
    snprintf(buf, size, "%s/kvcal.%s", kvcal_test_tmpdir(), stream);
    return buf;
}

int kvcal_test_run_kvcal(const char *args, char **out)
{
    char cmd[8192], o[512], e[512];
    snprintf(cmd, sizeof cmd, "'%s' %s > '%s' 2> '%s'", kvcal_binary(), args,
             kvcal_output_path(o, sizeof o, "stdout"),
             kvcal_output_path(e, sizeof e, "stderr"));
    int rc = system(cmd);
    if (out)
        *out = kvcal_test_read_file(o, NULL);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int kvcal_test_run_command(const char *command, char **out)
{
    char cmd[16384], o[512], e[512];
    if (setenv("KVCAL", kvcal_binary(), 1))
        return -1;
    snprintf(cmd, sizeof cmd, "( %s ) > '%s' 2> '%s'", command,
             kvcal_output_path(o, sizeof o, "stdout"),
             kvcal_output_path(e, sizeof e, "stderr"));
    int rc = system(cmd);
    if (out)
        *out = kvcal_test_read_file(o, NULL);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

char *kvcal_test_kvcal_stderr(void)
{
    char e[512];
    return kvcal_test_read_file(kvcal_output_path(e, sizeof e, "stderr"), NULL);
}

int kvcal_test_kvcal_stderr_has(const char *needle)
{
    char *e = kvcal_test_kvcal_stderr();
    int found = e && strstr(e, needle);
    if (!found)
        fprintf(stderr, "\n  stderr: %s\n", e ? e : "(none)");
    free(e);
    return found;
}

const char *kvcal_test_build_dir(void)
{
    static char dir[PATH_MAX];
    if (!dir[0]) {
        char exe[PATH_MAX], cwd[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        const size_t len = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
        const int inside = len && !strncmp(exe, cwd, len) && exe[len] == '/';
        snprintf(dir, sizeof dir, "%s", inside ? exe + len + 1 : exe);
    }
    return dir;
}

int kvcal_test_make(const char *args, const char *log)
{
#ifdef KVCAL_WITH_CUDA
    const int cuda = 1;
#else
    const int cuda = 0;
#endif
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "make -s --no-print-directory CUDA=%d %s > '%s' 2>&1", cuda,
             args, log);
    int rc = system(cmd);
    rc = rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (rc != 0) {
        fprintf(stderr, "\n  make %s: exit %d; the end of %s:\n", args, rc, log);
        snprintf(cmd, sizeof cmd, "tail -n 20 '%s' >&2", log);
        if (system(cmd) != 0)
            fprintf(stderr, "  (unreadable)\n");
    }
    return rc;
}

static int on_path(const char *tool)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s > /dev/null 2>&1", tool);
    return system(cmd) == 0;
}

const char *kvcal_test_html5_python(void)
{
    static const char *const pythons[] = {"python3", "/usr/bin/python3"};
    static int found = -2; /* -2 not looked for yet, -1 none */
    for (int i = 0; found == -2 && i < 2; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import html5lib' > /dev/null 2>&1", pythons[i]);
        if (system(cmd) == 0)
            found = i;
    }
    if (found == -2)
        found = -1;
    return found >= 0 ? pythons[found] : NULL;
}

const char *kvcal_test_python(void)
{
    const char *e = getenv("KVCAL_PYTHON");
    return e && *e ? e : "build/venv-python/bin/python";
}

static void remove_tmpdir(void)
{
    if (tmpdir[0] && !getenv("KVCAL_KEEP_TMP")) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", tmpdir);
    }
}

static const char *unmet_need(int needs)
{
    struct stat st;
    if ((needs & KVCAL_NEEDS_GPU) && kvcal_cuda_device_count() == 0)
        return "no CUDA device";
    if ((needs & KVCAL_NEEDS_SHARED) && stat(kvcal_test_shared_dir(), &st) != 0)
        return "no ../shared folder (set KVCAL_SHARED)";
    if ((needs & KVCAL_NEEDS_SOURCE) &&
        (stat("Makefile", &st) != 0 || !on_path("make") || !on_path("cc") ||
         system("make -s --no-print-directory deps-check > /dev/null 2>&1") != 0))
        return "not run from the source tree with the packages the build needs "
               "(make deps-check)";
    if ((needs & KVCAL_NEEDS_PKG_CONFIG) && !on_path("pkg-config"))
        return "no pkg-config";
    if ((needs & KVCAL_NEEDS_HTML5LIB) && !kvcal_test_html5_python())
        return "no python3 with html5lib (Debian's python3-html5lib: make deps)";
    if ((needs & KVCAL_NEEDS_CHROMIUM) && !on_path("chromium"))
        return "no chromium (Debian's chromium: make deps)";
    if ((needs & KVCAL_NEEDS_MPI) && !(on_path("mpirun") && kvcal_dp_have_mpi()))
        return kvcal_dp_have_mpi()
                   ? "no mpirun (Open MPI's openmpi-bin: make deps)"
                   : "this build holds no MPI (Open MPI's libopenmpi-dev: "
                     "make deps, then rebuild)";
    if (needs & KVCAL_NEEDS_PYTHON_TORCH) {
#ifdef __SANITIZE_ADDRESS__
        return "a sanitizer build's libkvcal.so does not load into Python";
#else
        char cmd[PATH_MAX + 128];
        snprintf(cmd, sizeof cmd, "'%s' -c 'import torch, numpy' > /dev/null 2>&1",
                 kvcal_test_python());
        if (system(cmd) != 0)
            return "no Python with torch and numpy (make test-python makes "
                   "build/venv-python; or set KVCAL_PYTHON)";
#endif
    }
    return NULL;
}

static int selected(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    unsigned skipped = 0;
    atexit(remove_tmpdir);
    kvcal_binary(); /* resolve a relative $KVCAL_BIN before a test can chdir */
    kvcal_test_build_dir();
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    for (const kvcal_suite *const *s = suites; *s; s++) {
        if (!selected((*s)->name, argc, argv))
            continue;
        unsigned n = 0;
        while ((*s)->tests[n].pName)
            n++;
        const char *why = unmet_need((*s)->needs);
        if (why) {
            printf("SKIPPED suite %s (%u tests): %s\n", (*s)->name, n, why);
            skipped += n;
            continue;
        }
        CU_pSuite suite = CU_add_suite((*s)->name, NULL, NULL);
        for (unsigned i = 0; suite && i < n; i++)
            CU_add_test(suite, (*s)->tests[i].pName, (*s)->tests[i].pTestFunc);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned run = CU_get_number_of_tests_run();
    unsigned failed = CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    printf("\ntests: %u passed, %u failed, %u skipped\n", run - failed, failed, skipped);
    return failed ? 1 : 0;
}
