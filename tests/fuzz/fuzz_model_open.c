/* tests/fuzz/fuzz_model_open.c: libFuzzer target for opening and running a
 * model whose config.json is the input. The input's first line names a
 * golden checkpoint (tests/fixtures/golden/NAME, whose other files are
 * used as they are), the rest is its config.json. Any config must give a
 * one-line error, or a model whose whole forward over a batch of 2 x 8
 * tokens on the CPU backend ends in KVCAL_OK or a one-line error: never a
 * crash, a leak or an out-of-bounds access. Run from the source tree. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib/executor.h"
#include "calib/model.h"
#include "core/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], cwd[512]; /* the staging folder, the source tree */

static void one_line_error(void)
{
    const char *msg = kvcal_last_error();
    if (!msg[0] || strchr(msg, '\n'))
        abort();
}

/* dir holds a config.json and links to the checkpoint's other files. */
static int stage(const char *name, const uint8_t *config, size_t n)
{
    char src[128], path[600], link[1024];
    snprintf(src, sizeof src, "tests/fixtures/golden/%s", name);
    DIR *d = opendir(src);
    if (!d)
        return -1;
    DIR *old = opendir(dir);
    for (struct dirent *e; old && (e = readdir(old));)
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (old)
        closedir(old);
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && strcmp(e->d_name, "config.json")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            snprintf(link, sizeof link, "%s/%s/%s", cwd, src, e->d_name);
            if (symlink(link, path))
                abort();
        }
    closedir(d);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(config, 1, n, f) != n || fclose(f))
        abort();
    return 0;
}

/* The staging folder and its files, at exit. */
static void unstage(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd))
        fprintf(stderr, "fuzz_model_open: could not remove %s\n", dir);
}

static kvcal_status ignore_rows(void *ctx, int layer, const kvcal_rows *rows,
                                const float *q, const float *k, const float *v)
{
    (void)ctx, (void)layer, (void)rows, (void)q, (void)k, (void)v;
    return KVCAL_OK;
}

static void run(kvcal_model_t *m)
{
    const kvcal_model_desc *d = kvcal_model_describe(m);
    const int seq = d->max_seq_len < 8 ? d->max_seq_len : 8;
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.device = KVCAL_DEVICE_CPU;
    o.backend.max_batch = 2;
    o.backend.max_seq_len = seq;
    kvcal_exec_t *x = NULL;
    if (kvcal_exec_create(m, &o, &x)) {
        one_line_error();
        return;
    }
    int32_t ids[16], lengths[2] = {seq, seq > 1 ? seq - 1 : 1};
    for (int i = 0; i < 16; i++)
        ids[i] = (int32_t)((i * 37 + 11) % (d->vocab_size < 100 ? d->vocab_size : 100));
    const kvcal_batch b = {ids, lengths, NULL, 2, seq};
    if (kvcal_exec_forward(x, &b, ignore_rows, NULL, NULL))
        one_line_error();
    kvcal_exec_destroy(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/kvcal-fuzz-model-XXXXXX");
        if (!mkdtemp(dir) || !getcwd(cwd, sizeof cwd) || atexit(unstage))
            abort();
    }
    const uint8_t *nl = memchr(data, '\n', size < 80 ? size : 80);
    if (!nl || nl == data)
        return 0;
    char name[80];
    memcpy(name, data, (size_t)(nl - data));
    name[nl - data] = '\0';
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return 0;
    if (stage(name, nl + 1, size - (size_t)(nl + 1 - data)))
        return 0;
    kvcal_model_t *m = NULL;
    if (kvcal_model_open(dir, &m) != KVCAL_OK) {
        if (m)
            abort();
        one_line_error();
        return 0;
    }
    run(m);
    kvcal_model_close(m);
    return 0;
}
