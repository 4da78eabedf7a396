/* tests/test_task_pool.c: the host threads that fill the cuda loader's
 * pieces (calib/task_pool.h): every job of every task runs exactly once,
 * before the wait for its task returns, with any number of threads, with
 * tasks posted by several threads at once and with tasks of no jobs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "calib/task_pool.h"
#include "tests/test_util.h"

#define TASKS 24
#define JOBS 97

/* A task's jobs count their runs (the order they run in is the pool's:
 * only the counts are checked). */
typedef struct {
    atomic_int runs[JOBS];
    size_t n;
} counted;

static void count_run(void *ctx, size_t i)
{
    counted *c = ctx;
    atomic_fetch_add(&c->runs[i], 1);
    /* a little work, so that threads overlap */
    volatile unsigned x = (unsigned)i;
    for (int k = 0; k < 2000; k++)
        x = x * 1664525u + 1013904223u;
}

/* Posts TASKS tasks of 0 to JOBS - 1 jobs, waiting for the ones posted so
 * far after every third; returns the jobs that had not run exactly once
 * when their task's wait returned, or that ran beyond their task's n
 * (counted here, not asserted: CUnit's asserts are not thread-safe). */
static int post_and_count_misses(kvcal_task_pool_t *p, int seed)
{
    int misses = 0;
    counted *c = calloc(TASKS, sizeof *c);
    kvcal_task *t = calloc(TASKS, sizeof *t);
    if (!c || !t) {
        free(c);
        free(t);
        return -1;
    }
    int waited = 0;
    for (int i = 0; i < TASKS; i++) {
        c[i].n = (size_t)((i * 37 + seed * 11) % JOBS);
        t[i] = (kvcal_task){.run = count_run, .ctx = &c[i], .n = c[i].n};
        kvcal_task_post(p, &t[i]);
        /* every third task, the ones posted so far waited for */
        for (; i % 3 == 2 && waited <= i; waited++) {
            kvcal_task_wait(p, &t[waited]);
            for (size_t j = 0; j < c[waited].n; j++)
                misses += atomic_load(&c[waited].runs[j]) != 1;
        }
    }
    for (; waited < TASKS; waited++) {
        kvcal_task_wait(p, &t[waited]);
        for (size_t j = 0; j < c[waited].n; j++)
            misses += atomic_load(&c[waited].runs[j]) != 1;
    }
    for (int i = 0; i < TASKS; i++)
        for (size_t j = c[i].n; j < JOBS; j++)
            misses += atomic_load(&c[i].runs[j]) != 0;
    free(c);
    free(t);
    return misses;
}

static void task_pool_runs_every_job_once_with_any_number_of_threads(void)
{
    const int threads[] = {0, 1, 2, 3, 8};
    for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
        kvcal_task_pool_t *p = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_task_pool_create(threads[i], &p), KVCAL_OK);
        CU_ASSERT_EQUAL(post_and_count_misses(p, (int)i), 0);
        kvcal_task_pool_destroy(p);
    }
    kvcal_task_pool_destroy(NULL);
}

typedef struct {
    kvcal_task_pool_t *pool;
    int seed, misses;
} client_arg;

static void *client_main(void *arg)
{
    client_arg *a = arg;
    a->misses = post_and_count_misses(a->pool, a->seed);
    return NULL;
}

static void task_pool_serves_several_posting_threads_at_once(void)
{
    kvcal_task_pool_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_task_pool_create(4, &p), KVCAL_OK);
    pthread_t tid[3];
    client_arg arg[3];
    int started = 0;
    for (int i = 0; i < 3; i++) {
        arg[i] = (client_arg){p, 7 + i, -1};
        if (pthread_create(&tid[i], NULL, client_main, &arg[i]))
            break;
        started++;
    }
    CU_ASSERT_EQUAL(started, 3);
    CU_ASSERT_EQUAL(post_and_count_misses(p, 3), 0);
    for (int i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
        CU_ASSERT_EQUAL(arg[i].misses, 0);
    }
    kvcal_task_pool_destroy(p);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(task_pool_runs_every_job_once_with_any_number_of_threads),
    KVCAL_TEST(task_pool_serves_several_posting_threads_at_once),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(task_pool, KVCAL_NEEDS_NOTHING, tests)
