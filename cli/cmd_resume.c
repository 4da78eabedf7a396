/* cli/cmd_resume.c: a calibration's progress files (see cmd_resume.h). */
#include "cli/cmd_resume.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cmd_common.h"
#include "core/status.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/stats_hdf5.h"

#define PROGRESS_FORMAT "kvcal-progress"
#define PROGRESS_VERSION 1

int kvcal_cmd_resume_init(kvcal_cmd_resume *r, const char *out, const cJSON *run,
                          const kvcal_model_identity *model)
{
    char base[4096];
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        n--;
    if (n >= sizeof base ||
        (size_t)snprintf(r->stats_path, sizeof r->stats_path, "%.*s.kvcal-progress.h5",
                         (int)n, out) >= sizeof r->stats_path ||
        (size_t)snprintf(r->run_path, sizeof r->run_path, "%.*s.kvcal-progress.json",
                         (int)n, out) >= sizeof r->run_path) {
        fprintf(stderr, "kvcal calibrate: --out '%s': path too long\n", out);
        return -1;
    }
    r->run = run;
    r->model = *model;
    r->failed = 0;
    r->save_seconds = 0.0;
    r->writing = 0;
    r->snapshot = NULL;
    r->written = KVCAL_OK;
    memset(r->stats_file, 0, sizeof r->stats_file);
    memset(r->run_file, 0, sizeof r->run_file);
    return 0;
}

/* The file at path as (st_dev, st_ino) into id; all 0 when it is not there. */
static void file_id(const char *path, unsigned long long id[2])
{
    struct stat sb;
    id[0] = id[1] = 0;
    if (stat(path, &sb) == 0) {
        id[0] = (unsigned long long)sb.st_dev;
        id[1] = (unsigned long long)sb.st_ino;
    }
}

/* The two files, each one written recorded in r; a failure is the
 * caller's to report. */
static kvcal_status save(kvcal_cmd_resume *r, const kvcal_stats_t *stats,
                         int samples_done)
{
    kvcal_provenance prov;
    memset(&prov, 0, sizeof prov);
    snprintf(prov.observer_params, sizeof prov.observer_params, "{}");
    kvcal_status st = kvcal_stats_write_hdf5(r->stats_path, stats, &r->model, &prov);
    if (st)
        return st;
    file_id(r->stats_path, r->stats_file);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", PROGRESS_FORMAT);
    cJSON_AddNumberToObject(j, "format_version", PROGRESS_VERSION);
    cJSON_AddNumberToObject(j, "samples_done", samples_done);
    cJSON_AddItemToObject(j, "run", cJSON_Duplicate(r->run, 1));
    st = kvcal_json_write(r->run_path, j);
    cJSON_Delete(j);
    if (!st)
        file_id(r->run_path, r->run_file);
    return st;
}

/* The snapshot to the files; how it went into r. */
static void write_snapshot(kvcal_cmd_resume *r)
{
    r->written = save(r, r->snapshot, r->samples_done);
    if (r->written)
        snprintf(r->error, sizeof r->error, "%s", kvcal_last_error());
}

/* The save's thread, with the signals that stop a run left to the run's
 * thread (no write of the save interrupted). */
static void *writer_main(void *arg)
{
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    write_snapshot(arg);
    return NULL;
}

/* The save in flight ended (joined), its snapshot freed; a failed one is
 * the warning, and no more saves. */
static void finish(kvcal_cmd_resume *r)
{
    if (r->writing) {
        pthread_join(r->writer, NULL);
        r->writing = 0;
    }
    kvcal_stats_destroy(r->snapshot);
    r->snapshot = NULL;
    if (r->written == KVCAL_OK || r->failed)
        return;
    /* the run goes on; only an interruption would lose more than before */
    fprintf(stderr, "kvcal calibrate: warning: progress not saved: %s\n", r->error);
    r->failed = 1;
    kvcal_cmd_resume_clear(r);
}

kvcal_status kvcal_cmd_resume_save(void *ctx, const kvcal_stats_t *stats, int samples_done)
{
    kvcal_cmd_resume *r = ctx;
    const double t0 = kvcal_cmd_now_s();
    finish(r);
    if (!r->failed) {
        r->samples_done = samples_done;
        r->written = kvcal_stats_clone(stats, &r->snapshot);
        if (r->written)
            snprintf(r->error, sizeof r->error, "%s", kvcal_last_error());
        else if (pthread_create(&r->writer, NULL, writer_main, r) == 0)
            r->writing = 1;
        else /* no thread to spare: written here */
            write_snapshot(r);
        if (!r->writing)
            finish(r);
    }
    r->save_seconds += kvcal_cmd_now_s() - t0;
    return KVCAL_OK;
}

void kvcal_cmd_resume_wait(kvcal_cmd_resume *r)
{
    const double t0 = kvcal_cmd_now_s();
    finish(r);
    r->save_seconds += kvcal_cmd_now_s() - t0;
}

/* The first key of want whose value got differs in (or lacks), or NULL. */
static const char *first_difference(const cJSON *want, const cJSON *got)
{
    for (const cJSON *w = want->child; w; w = w->next) {
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(got, w->string);
        if (!g || !cJSON_Compare(w, g, 1))
            return w->string;
    }
    return NULL;
}

/* The current error (of reading a progress file), with what to do about it. */
static kvcal_status fail_reading(kvcal_status st)
{
    char why[1024];
    snprintf(why, sizeof why, "%s", kvcal_last_error());
    return kvcal_fail(st, "--resume: %s; leave out --resume to start afresh", why);
}

/* The number the run `run` records under key, or -1 when it has none. */
static double run_number(const cJSON *run, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(run, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

/* The progress JSON j of r: *samples_done, or an error naming the field. */
static kvcal_status check_run_file(const kvcal_cmd_resume *r, const cJSON *j,
                                   int *samples_done)
{
    const char *path = r->run_path;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "format_version");
    const cJSON *done = cJSON_GetObjectItemCaseSensitive(j, "samples_done");
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(j, "run");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, PROGRESS_FORMAT))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "--resume: %s: format: not \"" PROGRESS_FORMAT
                          "\", not a kvcal progress file; leave out --resume to start "
                          "afresh",
                          path);
    if (!cJSON_IsNumber(ver) || ver->valuedouble != PROGRESS_VERSION)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "--resume: %s: format_version: not %d, the version this kvcal "
                          "reads; resume with the kvcal that wrote it, or leave out "
                          "--resume to start afresh",
                          path, PROGRESS_VERSION);
    const char *diff = cJSON_IsObject(run) ? first_difference(r->run, run) : "run";
    if (diff)
        return kvcal_fail(
            KVCAL_ERR_MISMATCH,
            "--resume: %s is of another run (\"%s\" differs); give the same "
            "model, data and options, or leave out --resume to start afresh",
            path, diff);
    const double n = cJSON_IsNumber(done) ? done->valuedouble : -1.0;
    const double total = run_number(r->run, "num_samples"),
                 batch = run_number(r->run, "batch");
    if (!(n >= 0.0 && n <= 2147483647.0) || n != (double)(int)n ||
        (total >= 0.0 && n > total) ||
        (batch >= 1.0 && fmod(n, batch) != 0.0 && n != total))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "--resume: %s: samples_done: not a whole number of batches of "
                          "%g (or all) in [0, %g] samples; leave out --resume to start "
                          "afresh",
                          path, batch, total);
    *samples_done = (int)n;
    return KVCAL_OK;
}

/* The first field of the identity got that differs from want, or NULL. */
static const char *identity_difference(const kvcal_model_identity *want,
                                       const kvcal_model_identity *got)
{
    if (strcmp(want->architecture, got->architecture))
        return "architecture";
    if (strcmp(want->model_type, got->model_type))
        return "model_type";
    if (want->num_layers != got->num_layers)
        return "num_layers";
    if (want->num_attention_heads != got->num_attention_heads)
        return "num_attention_heads";
    if (want->num_kv_heads != got->num_kv_heads)
        return "num_kv_heads";
    if (want->head_dim != got->head_dim)
        return "head_dim";
    return NULL;
}

/* The statistics s read back for samples_done samples of r's run: an error
 * when they are another model's or of another moment of the run. */
static kvcal_status check_stats_file(const kvcal_cmd_resume *r, const kvcal_stats_t *s,
                                     const kvcal_model_identity *model, int samples_done)
{
    const char *diff = identity_difference(&r->model, model);
    if (diff)
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "--resume: %s holds the statistics of another model (\"%s\" "
                          "differs from this run's); leave out --resume to start afresh",
                          r->stats_path, diff);
    const double batch = run_number(r->run, "batch");
    /* the last batch of a run may be short */
    if (batch >= 1.0 && (double)s->batches != ceil((double)samples_done / batch))
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "--resume: %s holds %lld batches of %g samples, but %s says "
                          "samples_done %d: the two were not saved together; leave out "
                          "--resume to start afresh",
                          r->stats_path, (long long)s->batches, batch, r->run_path,
                          samples_done);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(r->run, "q_scale");
    const cJSON *range = cJSON_GetObjectItemCaseSensitive(r->run, "signed_range");
    if (samples_done > 0 &&
        ((cJSON_IsTrue(q) && !s->q_absmax) || (cJSON_IsTrue(range) && !s->min[0])))
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "--resume: %s holds no %s, which this run observes: it is of "
                          "another run; leave out --resume to start afresh",
                          r->stats_path,
                          cJSON_IsTrue(q) && !s->q_absmax
                              ? "query absmax (--q-scale)"
                              : "signed range (--signed-range)");
    return KVCAL_OK;
}

kvcal_status kvcal_cmd_resume_load(kvcal_cmd_resume *r, kvcal_stats_t **stats,
                                   int *samples_done)
{
    *stats = NULL;
    const int has_run = access(r->run_path, F_OK) == 0,
              has_stats = access(r->stats_path, F_OK) == 0;
    if (!has_run && !has_stats)
        return kvcal_fail(KVCAL_ERR_IO,
                          "--resume: %s: no progress of an earlier run here (it is kept "
                          "beside --out while a run goes and removed when it ends); leave "
                          "out --resume to start afresh",
                          r->run_path);
    if (!has_run || !has_stats)
        return kvcal_fail(KVCAL_ERR_IO,
                          "--resume: %s: missing, though %s is there: the progress is "
                          "incomplete; leave out --resume to start afresh",
                          has_run ? r->stats_path : r->run_path,
                          has_run ? r->run_path : r->stats_path);
    cJSON *j = NULL;
    int done = 0;
    kvcal_status st = kvcal_json_load(r->run_path, &j);
    if (st)
        return fail_reading(st);
    st = check_run_file(r, j, &done);
    cJSON_Delete(j);
    if (st)
        return st;
    kvcal_model_identity model;
    kvcal_provenance prov;
    if ((st = kvcal_stats_read_hdf5(r->stats_path, stats, &model, &prov)))
        return fail_reading(st);
    if ((st = check_stats_file(r, *stats, &model, done))) {
        kvcal_stats_destroy(*stats);
        *stats = NULL;
        return st;
    }
    file_id(r->run_path, r->run_file);
    file_id(r->stats_path, r->stats_file);
    *samples_done = done;
    return KVCAL_OK;
}

/* Removes path when it is still the file id. */
static void remove_if_same(const char *path, const unsigned long long id[2])
{
    unsigned long long now[2];
    file_id(path, now);
    if ((id[0] || id[1]) && now[0] == id[0] && now[1] == id[1])
        remove(path);
}

void kvcal_cmd_resume_clear(const kvcal_cmd_resume *r)
{
    remove_if_same(r->run_path, r->run_file);
    remove_if_same(r->stats_path, r->stats_file);
}
