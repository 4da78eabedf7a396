/* cli/cmd_ranks.c: a command as one rank of several (see cmd_ranks.h): the
 * launcher's environment read here, the group made through calib/dp.h. */
#include "cli/cmd_ranks.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_common.h"
#include "core/status.h"

/* An environment variable holding an integer in [lo, hi]: 1 and *out when
 * set, 0 when unset, -1 (reason in *bad) when set to anything else. */
static int env_int(const char *name, int lo, int hi, int *out, const char **bad)
{
    const char *v = getenv(name);
    if (!v)
        return 0;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        *bad = name;
        return -1;
    }
    *out = (int)x;
    return 1;
}

/* The first of names that is set: its value in *out (1), 0 when none is,
 * -1 when a set one is not an integer in [lo, hi]. */
static int env_first(const char *const *names, int lo, int hi, int *out, const char **bad)
{
    for (; *names; names++) {
        int rc = env_int(*names, lo, hi, out, bad);
        if (rc)
            return rc;
    }
    return 0;
}

#define MAX_RANKS (1 << 20)

int kvcal_cmd_ranks_start(const char *cmd, int cuda, kvcal_cmd_ranks *r)
{
    static const char *const mpi_size[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
    static const char *const mpi_rank[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                           "PMIX_RANK", NULL};
    static const char *const mpi_local[] = {"OMPI_COMM_WORLD_LOCAL_RANK",
                                            "MPI_LOCALRANKID", NULL};
    memset(r, 0, sizeof *r);
    r->cmd = cmd;
    r->size = 1;
    kvcal_dp_launch l = {0, 1, 0, 1, cuda};
    const char *bad = NULL;
    int by_mpi = 0, rc;
    if ((rc = env_first(mpi_size, 1, MAX_RANKS, &l.size, &bad)) < 0)
        goto bad_env;
    by_mpi = rc == 1 || getenv("PMIX_RANK");
    if (by_mpi) {
        /* PMIx alone (srun --mpi=pmix) says no size: MPI tells (size 0) */
        if (rc == 0)
            l.size = 0;
        const int hi = l.size ? l.size - 1 : MAX_RANKS;
        if (env_first(mpi_rank, 0, hi, &l.rank, &bad) < 0 ||
            env_first(mpi_local, 0, hi, &l.local_rank, &bad) < 0)
            goto bad_env;
    } else {
        if ((rc = env_int("WORLD_SIZE", 1, MAX_RANKS, &l.size, &bad)) < 0)
            goto bad_env;
        if (rc == 1 && l.size > 1 &&
            (env_int("RANK", 0, l.size - 1, &l.rank, &bad) != 1 ||
             env_int("LOCAL_RANK", 0, l.size - 1, &l.local_rank, &bad) < 0 ||
             env_int("LOCAL_WORLD_SIZE", 1, l.size, &l.local_size, &bad) < 0)) {
            bad = bad ? bad : "RANK";
            goto bad_env;
        }
        if (!getenv("LOCAL_RANK"))
            l.local_rank = l.rank;
        if (!getenv("LOCAL_WORLD_SIZE"))
            l.local_size = l.size;
    }
    if (l.size == 1 || (!by_mpi && l.size < 1))
        return 0;
    kvcal_status st;
    if (by_mpi) {
        if (l.size == 0 && !kvcal_dp_have_mpi())
            return 0; /* PMIx without MPI in the build: one process */
        st = kvcal_dp_mpi_create(&l, &r->group);
    } else if (!cuda) {
        st = kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                        "rank %d of %d was started by a launcher's environment (RANK, "
                        "WORLD_SIZE): a --device cpu run talks through MPI; start it "
                        "with mpirun -np %d (or srun --mpi=pmix)",
                        l.rank, l.size, l.size);
    } else {
        st = KVCAL_OK;
        if (!getenv("NCCL_COMM_ID")) {
            const char *addr = getenv("MASTER_ADDR");
            int port = 0;
            char id[300];
            if (!addr || env_int("MASTER_PORT", 1, 65534, &port, &bad) != 1)
                st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                                "rank %d of %d: set NCCL_COMM_ID=HOST:PORT (rank 0's "
                                "host and a free port) in every rank's environment, or "
                                "MASTER_ADDR and MASTER_PORT as torchrun does",
                                l.rank, l.size);
            else if (snprintf(id, sizeof id, "%s:%d", addr, port + 1) >= (int)sizeof id ||
                     setenv("NCCL_COMM_ID", id, 1))
                st = kvcal_fail(KVCAL_ERR_INVALID_ARG, "MASTER_ADDR is too long");
        }
        if (!st)
            st = kvcal_dp_nccl_create(&l, &r->group);
    }
    if (st) {
        if (l.rank == 0)
            fprintf(stderr, "kvcal %s: %s\n", cmd, kvcal_last_error());
        return -1;
    }
    r->rank = r->group->rank;
    r->size = r->group->size;
    if (r->size == 1) {
        kvcal_dp_group_destroy(r->group);
        r->group = NULL;
    }
    return 0;
bad_env:
    fprintf(stderr,
            "kvcal %s: the launcher's %s='%s' is not a valid rank or rank count; "
            "start kvcal with mpirun -np N, or set RANK, WORLD_SIZE and LOCAL_RANK\n",
            cmd, bad, getenv(bad) ? getenv(bad) : "");
    return -1;
}

int kvcal_cmd_ranks_env_rank(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                        "RANK", NULL};
    const char *bad = NULL;
    int rank = 0;
    return env_first(names, 0, MAX_RANKS, &rank, &bad) == 1 ? rank : 0;
}

kvcal_status kvcal_cmd_ranks_layout(kvcal_cmd_ranks *r, int num_samples, int batch,
                                    int layers, int kv_heads)
{
    r->part = kvcal_dp_layout(num_samples, batch, r->rank, r->size);
    if (!r->group)
        return KVCAL_OK;
    size_t n = (size_t)r->part.num_batches * 2 * (size_t)layers * (size_t)kv_heads;
    r->batch_absmax = malloc(n ? n * sizeof(float) : 1);
    if (!r->batch_absmax)
        return kvcal_fail(KVCAL_ERR_NOMEM, "out of host memory for %d batches' maxima",
                          r->part.num_batches);
    return KVCAL_OK;
}

int kvcal_cmd_ranks_narrow(kvcal_cmd_ranks *r, kvcal_exec_samples *s)
{
    if (!r->group)
        return 1;
    if (!r->part.num_samples)
        return 0;
    kvcal_dp_narrow(&r->part, r->batch_absmax, s);
    return 1;
}

void kvcal_cmd_ranks_poll(kvcal_cmd_ranks *r, volatile int *stop)
{
    if (r->group && !r->peer_stop && r->group->ops->peer_failed &&
        r->group->ops->peer_failed(r->group)) {
        r->peer_stop = 1;
        *stop = 1;
    }
}

uint64_t kvcal_cmd_ranks_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

kvcal_status kvcal_cmd_ranks_meet(kvcal_cmd_ranks *r, kvcal_status st, uint64_t run)
{
    if (!r->group || r->closed || r->failed_at_meeting)
        return st;
    const int first = r->meetings++ == 0;
    uint64_t run0 = run;
    kvcal_status cst =
        first ? r->group->ops->bcast(r->group, &run0, sizeof run0, 0) : KVCAL_OK;
    if (cst)
        return cst;
    if (!st && run0 != run)
        st = kvcal_fail(
            KVCAL_ERR_MISMATCH,
            "its run differs from rank 0's (other samples, options or model "
            "shape): start every rank with the same command on the same files");
    const int by_peer = st == KVCAL_ERR_INTERRUPTED && r->peer_stop;
    if (st && !by_peer && r->group->ops->notify_failure)
        r->group->ops->notify_failure(r->group);
    int failed = -1;
    st = kvcal_dp_agree(r->group, st, by_peer, &failed);
    r->failed_at_meeting = st != KVCAL_OK;
    return st;
}

void kvcal_cmd_ranks_close(kvcal_cmd_ranks *r)
{
    r->closed = 1;
}

kvcal_status kvcal_cmd_ranks_gatherv(kvcal_cmd_ranks *r, const void *mine, const size_t *each,
                                     void *all)
{
    if (!r->group) {
        memcpy(all, mine, each[0]);
        return KVCAL_OK;
    }
    return r->group->ops->gather(r->group, mine, each, all);
}

kvcal_status kvcal_cmd_ranks_gather(kvcal_cmd_ranks *r, const void *mine, size_t bytes,
                                    void *all)
{
    size_t *each = malloc(sizeof *each * (size_t)r->size);
    if (!each)
        return kvcal_fail(KVCAL_ERR_NOMEM, "out of host memory");
    for (int i = 0; i < r->size; i++)
        each[i] = bytes;
    const kvcal_status st = kvcal_cmd_ranks_gatherv(r, mine, each, all);
    free(each);
    return st;
}

kvcal_status kvcal_cmd_ranks_reduce(kvcal_cmd_ranks *r, kvcal_stats_t *stats,
                                    double ema_decay)
{
    if (!r->group)
        return KVCAL_OK;
    return kvcal_dp_reduce_run(r->group, &r->part, r->batch_absmax, stats, ema_decay);
}

int kvcal_cmd_ranks_fail(kvcal_cmd_ranks *r, kvcal_status st)
{
    const int own = r->group && r->closed && !r->failed_at_meeting;
    st = kvcal_cmd_ranks_meet(r, st, 0);
    /* after the last meeting, a failure is this rank's own */
    if (!r->group || r->rank == 0 || own)
        fprintf(stderr, "kvcal %s: %s\n", r->cmd, kvcal_last_error());
    return kvcal_cmd_run_exit_code(st);
}

void kvcal_cmd_ranks_end(kvcal_cmd_ranks *r)
{
    kvcal_dp_group_destroy(r->group);
    free(r->batch_absmax);
    memset(r, 0, sizeof *r);
    r->size = 1;
}
