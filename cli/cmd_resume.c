/* cli/cmd_resume.c: a calibration's progress files (see cmd_resume.h). */
#include "cli/cmd_resume.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
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
    return 0;
}

/* The two files; a failure is the caller's to report. */
static kvcal_status save(const kvcal_cmd_resume *r, const kvcal_stats_t *stats,
                         int samples_done)
{
    kvcal_provenance prov;
    memset(&prov, 0, sizeof prov);
    snprintf(prov.observer_params, sizeof prov.observer_params, "{}");
    kvcal_status st = kvcal_stats_write_hdf5(r->stats_path, stats, &r->model, &prov);
    if (st)
        return st;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", PROGRESS_FORMAT);
    cJSON_AddNumberToObject(j, "format_version", PROGRESS_VERSION);
    cJSON_AddNumberToObject(j, "samples_done", samples_done);
    cJSON_AddItemToObject(j, "run", cJSON_Duplicate(r->run, 1));
    st = kvcal_json_write(r->run_path, j);
    cJSON_Delete(j);
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

kvcal_status kvcal_cmd_resume_load(const kvcal_cmd_resume *r, kvcal_stats_t **stats,
                                   int *samples_done)
{
    *stats = NULL;
    if (access(r->run_path, F_OK) != 0 || access(r->stats_path, F_OK) != 0)
        return kvcal_fail(KVCAL_ERR_IO,
                          "--resume: %s: no progress of an earlier run here (it is kept "
                          "beside --out while a run goes and removed when it ends); leave "
                          "out --resume to start afresh",
                          r->run_path);
    cJSON *j = NULL;
    kvcal_status st = kvcal_json_load(r->run_path, &j);
    if (st)
        return st;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *done = cJSON_GetObjectItemCaseSensitive(j, "samples_done");
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(j, "run");
    const char *diff = cJSON_IsObject(run) ? first_difference(r->run, run) : "run";
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, PROGRESS_FORMAT) ||
        !cJSON_IsNumber(done) || done->valuedouble < 0)
        st = kvcal_fail(KVCAL_ERR_FORMAT, "--resume: %s: not a kvcal progress file",
                        r->run_path);
    else if (diff)
        st = kvcal_fail(KVCAL_ERR_MISMATCH,
                        "--resume: %s is of another run (\"%s\" differs); give the same "
                        "model, data and options, or leave out --resume to start afresh",
                        r->run_path, diff);
    else
        *samples_done = done->valueint;
    cJSON_Delete(j);
    if (st)
        return st;
    kvcal_model_identity model;
    kvcal_provenance prov;
    return kvcal_stats_read_hdf5(r->stats_path, stats, &model, &prov);
}

void kvcal_cmd_resume_clear(const kvcal_cmd_resume *r)
{
    remove(r->run_path);
    remove(r->stats_path);
}
