/* calib/task_pool.h: host threads, started once, that run the jobs of
 * posted tasks (the cuda weight loader's fills of its pinned pieces). A
 * task is n jobs, run(ctx, i) for each i, in any order and on any of the
 * pool's threads; the threads take the jobs of the oldest posted task
 * first, so tasks posted one after another finish nearly in order while
 * the later ones keep every thread busy. A thread that waits for a task
 * runs jobs meanwhile. Several threads may post and wait at once, each for
 * its own tasks. */
#ifndef KVCAL_CALIB_TASK_POOL_H
#define KVCAL_CALIB_TASK_POOL_H

#include <stddef.h>

#include "kvcal.h"

typedef struct kvcal_task_pool kvcal_task_pool_t;

/* A task: its poster fills run, ctx and n; the rest is the pool's. The
 * task must stay where it is, and its jobs' data valid, until
 * kvcal_task_wait has returned for it. */
typedef struct kvcal_task {
    void (*run)(void *ctx, size_t i);
    void *ctx;
    size_t n;
    size_t taken, done;
    struct kvcal_task *next;
} kvcal_task;

/* A pool in which `threads` threads run jobs: threads - 1 of its own and
 * the one that waits (threads < 1 counts as 1: the waiter runs every job).
 * Where the system starts fewer threads, the pool has fewer; its tasks
 * still run. */
kvcal_status kvcal_task_pool_create(int threads, kvcal_task_pool_t **out);

/* Stops the pool's threads once no task has jobs left to take, and frees
 * it; NULL is a no-op. */
void kvcal_task_pool_destroy(kvcal_task_pool_t *p);

/* Queues t's jobs behind those posted before. */
void kvcal_task_post(kvcal_task_pool_t *p, kvcal_task *t);

/* Returns once every job of t (posted) has run; runs queued jobs, of any
 * task, while it waits. */
void kvcal_task_wait(kvcal_task_pool_t *p, kvcal_task *t);

#endif
