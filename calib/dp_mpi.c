/* calib/dp_mpi.c: the data-parallel group over MPI (calib/dp.h); built when
 * the build finds MPI (calib/dp_nompi.c otherwise). The statistics reduce
 * through an MPI operation that is kvcal_stats_merge itself; with a cuda
 * run and NCCL in the build, over NCCL among a host's GPUs first and MPI
 * among the hosts. */
#include "calib/dp.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

#define TAG_FAILED 26

typedef struct {
    kvcal_dp_group base;
    MPI_Comm world;   /* a copy of MPI_COMM_WORLD: kvcal's messages stay apart */
    MPI_Comm failure; /* where a failing rank tells the others */
    MPI_Comm host;    /* the ranks of this host */
    MPI_Comm hosts;   /* every host's first rank (MPI_COMM_NULL elsewhere) */
    MPI_Request failure_req;
    int failure_flag, failure_seen;
    kvcal_dp_group *nccl; /* the host's GPUs, or NULL */
    int finalize;         /* MPI was initialized here */
} mpi_group;

static mpi_group *mg(kvcal_dp_group *g)
{
    return (mpi_group *)g;
}

static kvcal_status mpi_fail(int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return kvcal_fail(KVCAL_ERR_IO, "MPI: %s failed: %s", what, text);
}

#define TRY_MPI(call)                                                                    \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != MPI_SUCCESS)                                                          \
            return mpi_fail(rc_, #call);                                                 \
    } while (0)

// --- the merge rule as an MPI operation --------------------------------------------

/* The shape of the slabs being reduced: MPI's user functions take no
 * context, and a group reduces once at a time from one thread. */
static const kvcal_stats_t *merge_shape;

static void merge_op(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const size_t bytes = kvcal_stats_slab_bytes(merge_shape);
    for (int i = 0; i < *len; i++) {
        kvcal_stats_t src, dst;
        kvcal_dp_stats_view(merge_shape, (unsigned char *)in + i * bytes, &src);
        kvcal_dp_stats_view(merge_shape, (unsigned char *)inout + i * bytes, &dst);
        kvcal_stats_merge(&dst, &src); /* same shape: cannot fail */
    }
}

/* stats of comm's ranks merged into the parts of its rank 0's stats. */
static kvcal_status merge_over(MPI_Comm comm, kvcal_stats_t *stats)
{
    const size_t bytes = kvcal_stats_slab_bytes(stats);
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (bytes > (size_t)1 << 30)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "MPI: statistics of %zu bytes are too large for one reduction",
                          bytes);
    unsigned char *sum = rank == 0 ? malloc(bytes) : NULL;
    if (rank == 0 && !sum)
        return kvcal_fail(KVCAL_ERR_NOMEM, "MPI: out of host memory for the reduction");
    MPI_Datatype slab;
    MPI_Op op;
    int rc = MPI_Type_contiguous((int)bytes, MPI_BYTE, &slab);
    if (rc == MPI_SUCCESS && (rc = MPI_Type_commit(&slab)) == MPI_SUCCESS) {
        if ((rc = MPI_Op_create(merge_op, 1, &op)) == MPI_SUCCESS) {
            merge_shape = stats;
            rc = MPI_Reduce(stats->slab, sum, 1, slab, op, 0, comm);
            merge_shape = NULL;
            MPI_Op_free(&op);
        }
        MPI_Type_free(&slab);
    }
    if (rc == MPI_SUCCESS && rank == 0)
        memcpy(stats->slab, sum, bytes); /* the whole slab, as merge left it */
    free(sum);
    return rc == MPI_SUCCESS ? KVCAL_OK : mpi_fail(rc, "reducing the statistics");
}

// --- operations -------------------------------------------------------------------

static kvcal_status reduce_stats(kvcal_dp_group *g, kvcal_stats_t *stats)
{
    mpi_group *m = mg(g);
    if (!m->nccl)
        return merge_over(m->world, stats);
    kvcal_status st = m->nccl->ops->reduce_stats(m->nccl, stats);
    if (!st && m->hosts != MPI_COMM_NULL)
        st = merge_over(m->hosts, stats);
    return st;
}

static kvcal_status gather(kvcal_dp_group *g, const void *send, const size_t *bytes,
                           void *recv)
{
    mpi_group *m = mg(g);
    int *counts = calloc(2 * (size_t)g->size, sizeof *counts);
    if (!counts)
        return kvcal_fail(KVCAL_ERR_NOMEM, "MPI: out of host memory");
    size_t at = 0;
    for (int r = 0; r < g->size; r++) {
        if (bytes[r] > INT32_MAX || at > INT32_MAX) {
            free(counts);
            return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                              "MPI: %zu bytes of batch maxima are too many to gather",
                              at + bytes[r]);
        }
        counts[r] = (int)bytes[r];
        counts[g->size + r] = (int)at;
        at += bytes[r];
    }
    int rc = MPI_Gatherv(send, counts[g->rank], MPI_BYTE, recv, counts, counts + g->size,
                         MPI_BYTE, 0, m->world);
    free(counts);
    return rc == MPI_SUCCESS ? KVCAL_OK : mpi_fail(rc, "gathering the batch maxima");
}

static kvcal_status min_int(kvcal_dp_group *g, int value, int *min)
{
    TRY_MPI(MPI_Allreduce(&value, min, 1, MPI_INT, MPI_MIN, mg(g)->world));
    return KVCAL_OK;
}

static kvcal_status bcast(kvcal_dp_group *g, void *buf, size_t bytes, int root)
{
    if (bytes > INT32_MAX)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED, "MPI: broadcast of %zu bytes", bytes);
    TRY_MPI(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, mg(g)->world));
    return KVCAL_OK;
}

static void notify_failure(kvcal_dp_group *g)
{
    static const int one = 1;
    for (int r = 0; r < g->size; r++) {
        MPI_Request req;
        if (r != g->rank && MPI_Isend(&one, 1, MPI_INT, r, TAG_FAILED, mg(g)->failure,
                                      &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
    }
}

static int peer_failed(kvcal_dp_group *g)
{
    mpi_group *m = mg(g);
    if (!m->failure_seen && m->failure_req != MPI_REQUEST_NULL)
        MPI_Test(&m->failure_req, &m->failure_seen, MPI_STATUS_IGNORE);
    return m->failure_seen;
}

static void destroy(kvcal_dp_group *g)
{
    mpi_group *m = mg(g);
    if (m->failure_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&m->failure_req);
        MPI_Wait(&m->failure_req, MPI_STATUS_IGNORE);
    }
    kvcal_dp_group_destroy(m->nccl);
    if (m->hosts != MPI_COMM_NULL)
        MPI_Comm_free(&m->hosts);
    if (m->host != MPI_COMM_NULL)
        MPI_Comm_free(&m->host);
    if (m->failure != MPI_COMM_NULL)
        MPI_Comm_free(&m->failure);
    if (m->world != MPI_COMM_NULL)
        MPI_Comm_free(&m->world);
    if (m->finalize)
        MPI_Finalize();
    free(m);
}

static const kvcal_dp_group_ops mpi_ops = {
    .reduce_stats = reduce_stats,
    .gather = gather,
    .min_int = min_int,
    .bcast = bcast,
    .notify_failure = notify_failure,
    .peer_failed = peer_failed,
    .destroy = destroy,
};

// --- lifetime -----------------------------------------------------------------------

/* The host's NCCL group: its first rank makes the id, MPI carries it. */
static kvcal_status join_nccl(mpi_group *m)
{
    unsigned char id[KVCAL_DP_NCCL_ID_BYTES];
    kvcal_status st = KVCAL_OK;
    if (m->base.local_rank == 0)
        st = kvcal_dp_nccl_make_id(id);
    /* the host's ranks learn whether its first could make one */
    int ok = st == KVCAL_OK;
    TRY_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, m->host));
    if (!ok)
        return st ? st
                  : kvcal_fail(KVCAL_ERR_CUDA, "NCCL: the first rank of this host could "
                                               "not make a communicator id");
    TRY_MPI(MPI_Bcast(id, (int)sizeof id, MPI_BYTE, 0, m->host));
    return kvcal_dp_nccl_join(m->base.local_rank, m->base.local_size, id, &m->nccl);
}

int kvcal_dp_have_mpi(void)
{
    return 1;
}

kvcal_status kvcal_dp_mpi_create(const kvcal_dp_launch *launch, kvcal_dp_group **out)
{
    *out = NULL;
    mpi_group *m = calloc(1, sizeof *m);
    if (!m)
        return kvcal_fail(KVCAL_ERR_NOMEM, "MPI: out of host memory");
    m->base.ops = &mpi_ops;
    m->world = m->failure = m->host = m->hosts = MPI_COMM_NULL;
    m->failure_req = MPI_REQUEST_NULL;
    kvcal_status st = KVCAL_OK;
    int initialized = 0, rc;
    MPI_Initialized(&initialized);
    if (!initialized) {
        if ((rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS) {
            st = mpi_fail(rc, "MPI_Init");
            goto fail;
        }
        m->finalize = 1;
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->world)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->failure)) != MPI_SUCCESS ||
        (rc = MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                  &m->host)) != MPI_SUCCESS) {
        st = mpi_fail(rc, "making the communicators");
        goto fail;
    }
    MPI_Comm_rank(m->world, &m->base.rank);
    MPI_Comm_size(m->world, &m->base.size);
    MPI_Comm_rank(m->host, &m->base.local_rank);
    MPI_Comm_size(m->host, &m->base.local_size);
    m->base.transport = "mpi";
    if (launch && launch->size > 0 && launch->size != m->base.size) {
        st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                        "MPI sees %d processes where the launcher says %d: start every "
                        "rank with the same mpirun",
                        m->base.size, launch->size);
        goto fail;
    }
    if ((rc = MPI_Comm_split(m->world, m->base.local_rank == 0 ? 0 : MPI_UNDEFINED,
                             m->base.rank, &m->hosts)) != MPI_SUCCESS ||
        (rc = MPI_Irecv(&m->failure_flag, 1, MPI_INT, MPI_ANY_SOURCE, TAG_FAILED,
                        m->failure, &m->failure_req)) != MPI_SUCCESS) {
        st = mpi_fail(rc, "making the communicators");
        goto fail;
    }
    if (launch && launch->cuda) {
        if ((st = kvcal_dp_select_gpu(m->base.local_rank, m->base.local_size)))
            goto fail;
        if (kvcal_dp_have_nccl()) {
            if ((st = join_nccl(m)))
                goto fail;
            m->base.transport = "mpi+nccl";
        }
    }
    *out = &m->base;
    return KVCAL_OK;
fail:
    destroy(&m->base);
    return st;
}
