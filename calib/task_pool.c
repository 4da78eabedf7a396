/* calib/task_pool.c: host threads that run posted tasks' jobs (see
 * task_pool.h). */
#include "calib/task_pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/status.h"

#define MAX_THREADS 64

struct kvcal_task_pool {
    pthread_mutex_t mu;
    pthread_cond_t work;     /* a task was posted, or the pool stops */
    pthread_cond_t finished; /* a task's last job ran */
    kvcal_task *head, *tail; /* posted tasks with jobs left to take */
    pthread_t tid[MAX_THREADS];
    int workers, stop;
};

/* Takes the next job of the oldest task that has one, runs it outside the
 * lock and counts it done; under the lock, which it holds again on return.
 * Returns 0 where no task has a job left to take. */
static int run_one(kvcal_task_pool_t *p)
{
    kvcal_task *t = p->head;
    if (!t)
        return 0;
    const size_t i = t->taken++;
    if (t->taken == t->n) {
        p->head = t->next;
        if (!p->head)
            p->tail = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    t->run(t->ctx, i);
    pthread_mutex_lock(&p->mu);
    if (++t->done == t->n)
        pthread_cond_broadcast(&p->finished);
    return 1;
}

static void *worker_main(void *arg)
{
    kvcal_task_pool_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (run_one(p))
            continue;
        if (p->stop)
            break;
        pthread_cond_wait(&p->work, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

kvcal_status kvcal_task_pool_create(int threads, kvcal_task_pool_t **out)
{
    *out = NULL;
    kvcal_task_pool_t *p = calloc(1, sizeof *p);
    if (!p)
        return kvcal_fail(KVCAL_ERR_NOMEM, "task pool: out of host memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->finished, NULL);
    const int want = threads - 1 < MAX_THREADS ? threads - 1 : MAX_THREADS;
    for (int i = 0; i < want; i++) {
        if (pthread_create(&p->tid[i], NULL, worker_main, p))
            break;
        p->workers++;
    }
    *out = p;
    return KVCAL_OK;
}

void kvcal_task_pool_destroy(kvcal_task_pool_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->workers; i++)
        pthread_join(p->tid[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->finished);
    free(p);
}

void kvcal_task_post(kvcal_task_pool_t *p, kvcal_task *t)
{
    t->taken = t->done = 0;
    t->next = NULL;
    if (!t->n)
        return;
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->next = t;
    else
        p->head = t;
    p->tail = t;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void kvcal_task_wait(kvcal_task_pool_t *p, kvcal_task *t)
{
    pthread_mutex_lock(&p->mu);
    while (t->done < t->n)
        if (!run_one(p))
            pthread_cond_wait(&p->finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
