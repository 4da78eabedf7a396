/* cli/cmd_resume.h: what a calibration keeps as it goes, so that an
 * interrupted run (a signal, a lost node) loses nothing it finished: after
 * each chunk of samples, the statistics of every sample so far and the run
 * they belong to, beside the output (`<out>.kvcal-progress.h5` and
 * `<out>.kvcal-progress.json`, each written atomically, removed when the
 * run ends well). `calibrate --resume` reads them back, checks they are of
 * the same run (model, data, samples, seed, observer...) and continues from
 * the next sample to the result an uninterrupted run gives. A save runs on
 * a thread of its own, from a copy of the statistics, while the next chunk
 * computes. Part of the kvcal program. */
#ifndef KVCAL_CLI_CMD_RESUME_H
#define KVCAL_CLI_CMD_RESUME_H

#include <cjson/cJSON.h>
#include <pthread.h>

#include "core/scales.h"
#include "kvcal.h"
#include "observers/stats.h"

typedef struct kvcal_cmd_resume {
    char stats_path[4200], run_path[4200];
    const cJSON *run;           /* what identifies the run (borrowed) */
    kvcal_model_identity model; /* recorded with the statistics */
    int failed;                 /* a save failed: no more tried */
    double save_seconds;        /* the run's own time in the saves so far */
    /* the save in flight: its thread, what it writes, how it went */
    pthread_t writer;
    int writing, samples_done;
    kvcal_stats_t *snapshot;
    kvcal_status written;
    char error[1024];
    /* the progress files as this run last wrote or read them (st_dev,
     * st_ino; all 0: none): clearing removes these and never a file that
     * took their place (an output of the same name, written after) */
    unsigned long long stats_file[2], run_file[2];
} kvcal_cmd_resume;

/* The progress files of output `out` for run (a JSON object the caller
 * keeps), into *r. -1 when out is too long (message printed). */
int kvcal_cmd_resume_init(kvcal_cmd_resume *r, const char *out, const cJSON *run,
                          const kvcal_model_identity *model);

/* Starts writing stats and samples_done (kvcal_exec_chunk_fn's contract,
 * ctx: r) on a thread of its own, from a copy, once the save before has
 * ended. A save that fails (a full disk) is a warning on stderr, the run
 * goes on and saves no more. */
kvcal_status kvcal_cmd_resume_save(void *ctx, const kvcal_stats_t *stats, int samples_done);

/* Waits for the save in flight (its failure the warning above): after the
 * run, before anything reads, removes or reports the progress files. */
void kvcal_cmd_resume_wait(kvcal_cmd_resume *r);

/* Reads what a run saved: *stats (caller destroys) and *samples_done. An
 * absent file (naming it), another run's (naming the first field that
 * differs), a file that does not parse or of another format version, a
 * samples_done that is not a whole number of the run's batches, and
 * statistics of another model or of another count of batches than
 * samples_done are errors saying so. */
kvcal_status kvcal_cmd_resume_load(kvcal_cmd_resume *r, kvcal_stats_t **stats,
                                   int *samples_done);

/* Removes the progress files this run wrote or read (the run ended well);
 * a file written over them since (an output given their name) stays. */
void kvcal_cmd_resume_clear(const kvcal_cmd_resume *r);

#endif
