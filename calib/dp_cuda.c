/* calib/dp_cuda.c: the GPU side of data-parallel runs (calib/dp.h), CUDA
 * build only: a rank's GPU, and (with NCCL in the build) NCCL's group. The
 * group is small on purpose: it stages the statistics (a few MiB) and the
 * batch maxima through one device buffer and calls NCCL's reduce, send /
 * recv, all-reduce and broadcast; the forward passes never wait on it. */
#include "calib/dp.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

kvcal_status kvcal_dp_select_gpu(int local_rank, int local_size)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        n = 0;
    if (local_size > n)
        return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                          "%d ranks on this host but %d CUDA device%s visible: start one "
                          "rank a GPU",
                          local_size, n, n == 1 ? "" : "s");
    cudaError_t e = cudaSetDevice(local_rank);
    if (e != cudaSuccess)
        return kvcal_fail(KVCAL_ERR_CUDA, "local rank %d: cudaSetDevice(%d): %s",
                          local_rank, local_rank, cudaGetErrorString(e));
    return KVCAL_OK;
}

#ifdef KVCAL_WITH_NCCL
#include <nccl.h>

typedef struct {
    kvcal_dp_group base;
    ncclComm_t comm;
    cudaStream_t stream;
    unsigned char *dev; /* staging, dev_bytes */
    size_t dev_bytes;
} nccl_group;

static nccl_group *ng(kvcal_dp_group *g)
{
    return (nccl_group *)g;
}

#define TRY_NCCL(call)                                                                   \
    do {                                                                                 \
        ncclResult_t r_ = (call);                                                        \
        if (r_ != ncclSuccess)                                                           \
            return kvcal_fail(KVCAL_ERR_CUDA, "NCCL: %s: %s", #call,                     \
                              ncclGetErrorString(r_));                                   \
    } while (0)
#define TRY_CUDA(call)                                                                   \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess)                                                           \
            return kvcal_fail(KVCAL_ERR_CUDA, "NCCL group: %s: %s", #call,               \
                              cudaGetErrorString(e_));                                   \
    } while (0)

/* The staging buffer, at least bytes long. */
static kvcal_status room(nccl_group *n, size_t bytes)
{
    if (bytes <= n->dev_bytes)
        return KVCAL_OK;
    cudaFree(n->dev);
    n->dev = NULL;
    n->dev_bytes = 0;
    if (cudaMalloc((void **)&n->dev, bytes) != cudaSuccess)
        return kvcal_fail(KVCAL_ERR_DEVICE_MEMORY,
                          "NCCL group: no device memory for %zu bytes of statistics",
                          bytes);
    n->dev_bytes = bytes;
    return KVCAL_OK;
}

static kvcal_status reduce_stats(kvcal_dp_group *g, kvcal_stats_t *stats)
{
    nccl_group *n = ng(g);
    const size_t bytes = kvcal_stats_slab_bytes(stats);
    kvcal_dp_stats_part parts[KVCAL_DP_STATS_PARTS];
    kvcal_dp_stats_parts(stats, parts);
    kvcal_status st = room(n, bytes);
    if (st)
        return st;
    TRY_CUDA(
        cudaMemcpyAsync(n->dev, stats->slab, bytes, cudaMemcpyHostToDevice, n->stream));
    TRY_NCCL(ncclGroupStart());
    for (int i = 0; i < KVCAL_DP_STATS_PARTS; i++) {
        unsigned char *p = n->dev + parts[i].offset;
        ncclResult_t r = ncclReduce(
            p, p, parts[i].count, parts[i].is_max_f32 ? ncclFloat32 : ncclUint64,
            parts[i].is_max_f32 ? ncclMax : ncclSum, 0, n->comm, n->stream);
        if (r != ncclSuccess) {
            ncclGroupEnd();
            return kvcal_fail(KVCAL_ERR_CUDA, "NCCL: ncclReduce: %s",
                              ncclGetErrorString(r));
        }
    }
    TRY_NCCL(ncclGroupEnd());
    for (int i = 0; g->rank == 0 && i < KVCAL_DP_STATS_PARTS; i++)
        TRY_CUDA(cudaMemcpyAsync((unsigned char *)stats->slab + parts[i].offset,
                                 n->dev + parts[i].offset,
                                 parts[i].count * (parts[i].is_max_f32 ? 4 : 8),
                                 cudaMemcpyDeviceToHost, n->stream));
    TRY_CUDA(cudaStreamSynchronize(n->stream));
    return KVCAL_OK;
}

static kvcal_status gather(kvcal_dp_group *g, const void *send, const size_t *bytes,
                           void *recv)
{
    nccl_group *n = ng(g);
    size_t total = 0, at = 0;
    for (int r = 0; r < g->size; r++)
        total += bytes[r];
    kvcal_status st = room(n, total ? total : 1);
    if (st)
        return st;
    for (int r = 0; r < g->rank; r++)
        at += bytes[r];
    if (bytes[g->rank])
        TRY_CUDA(cudaMemcpyAsync(n->dev + at, send, bytes[g->rank],
                                 cudaMemcpyHostToDevice, n->stream));
    TRY_NCCL(ncclGroupStart());
    size_t off = 0;
    for (int r = 1; r < g->size; r++) {
        off += bytes[r - 1];
        if (!bytes[r] || (g->rank != 0 && g->rank != r))
            continue;
        ncclResult_t e =
            g->rank == 0
                ? ncclRecv(n->dev + off, bytes[r], ncclUint8, r, n->comm, n->stream)
                : ncclSend(n->dev + off, bytes[r], ncclUint8, 0, n->comm, n->stream);
        if (e != ncclSuccess) {
            ncclGroupEnd();
            return kvcal_fail(KVCAL_ERR_CUDA, "NCCL: gathering the batch maxima: %s",
                              ncclGetErrorString(e));
        }
    }
    TRY_NCCL(ncclGroupEnd());
    if (g->rank == 0 && total)
        TRY_CUDA(cudaMemcpyAsync(recv, n->dev, total, cudaMemcpyDeviceToHost, n->stream));
    TRY_CUDA(cudaStreamSynchronize(n->stream));
    return KVCAL_OK;
}

static kvcal_status min_int(kvcal_dp_group *g, int value, int *min)
{
    nccl_group *n = ng(g);
    kvcal_status st = room(n, sizeof value);
    if (st)
        return st;
    TRY_CUDA(
        cudaMemcpyAsync(n->dev, &value, sizeof value, cudaMemcpyHostToDevice, n->stream));
    TRY_NCCL(ncclAllReduce(n->dev, n->dev, 1, ncclInt32, ncclMin, n->comm, n->stream));
    TRY_CUDA(
        cudaMemcpyAsync(min, n->dev, sizeof *min, cudaMemcpyDeviceToHost, n->stream));
    TRY_CUDA(cudaStreamSynchronize(n->stream));
    return KVCAL_OK;
}

static kvcal_status bcast(kvcal_dp_group *g, void *buf, size_t bytes, int root)
{
    nccl_group *n = ng(g);
    kvcal_status st = room(n, bytes);
    if (st)
        return st;
    if (g->rank == root)
        TRY_CUDA(cudaMemcpyAsync(n->dev, buf, bytes, cudaMemcpyHostToDevice, n->stream));
    TRY_NCCL(ncclBroadcast(n->dev, n->dev, bytes, ncclUint8, root, n->comm, n->stream));
    TRY_CUDA(cudaMemcpyAsync(buf, n->dev, bytes, cudaMemcpyDeviceToHost, n->stream));
    TRY_CUDA(cudaStreamSynchronize(n->stream));
    return KVCAL_OK;
}

static void destroy(kvcal_dp_group *g)
{
    nccl_group *n = ng(g);
    if (n->comm)
        ncclCommDestroy(n->comm);
    if (n->stream)
        cudaStreamDestroy(n->stream);
    cudaFree(n->dev);
    free(n);
}

static const kvcal_dp_group_ops nccl_ops = {
    .reduce_stats = reduce_stats,
    .gather = gather,
    .min_int = min_int,
    .bcast = bcast,
    .destroy = destroy,
};

int kvcal_dp_have_nccl(void)
{
    return 1;
}

kvcal_status kvcal_dp_nccl_make_id(unsigned char id[KVCAL_DP_NCCL_ID_BYTES])
{
    ncclUniqueId u;
    _Static_assert(sizeof u == KVCAL_DP_NCCL_ID_BYTES, "NCCL's unique id is 128 bytes");
    TRY_NCCL(ncclGetUniqueId(&u));
    memcpy(id, &u, sizeof u);
    return KVCAL_OK;
}

kvcal_status kvcal_dp_nccl_join(int rank, int size,
                                const unsigned char id[KVCAL_DP_NCCL_ID_BYTES],
                                kvcal_dp_group **out)
{
    *out = NULL;
    nccl_group *n = calloc(1, sizeof *n);
    if (!n)
        return kvcal_fail(KVCAL_ERR_NOMEM, "NCCL group: out of host memory");
    n->base.ops = &nccl_ops;
    n->base.rank = n->base.local_rank = rank;
    n->base.size = n->base.local_size = size;
    n->base.transport = "nccl";
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    kvcal_status st = KVCAL_OK;
    cudaError_t e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    ncclResult_t r =
        e == cudaSuccess ? ncclCommInitRank(&n->comm, size, u, rank) : ncclSuccess;
    if (e != cudaSuccess)
        st = kvcal_fail(KVCAL_ERR_CUDA, "NCCL group: cudaStreamCreate: %s",
                        cudaGetErrorString(e));
    else if (r != ncclSuccess)
        st = kvcal_fail(KVCAL_ERR_CUDA, "NCCL: rank %d of %d could not join: %s", rank,
                        size, ncclGetErrorString(r));
    if (st) {
        n->comm = NULL;
        destroy(&n->base);
        return st;
    }
    *out = &n->base;
    return KVCAL_OK;
}

kvcal_status kvcal_dp_nccl_create(const kvcal_dp_launch *launch, kvcal_dp_group **out)
{
    unsigned char id[KVCAL_DP_NCCL_ID_BYTES];
    kvcal_status st;
    *out = NULL;
    /* with NCCL_COMM_ID set every rank makes the same id: the address rank 0
     * listens on (NCCL's bootstrap) */
    if ((st = kvcal_dp_select_gpu(launch->local_rank, launch->local_size)) ||
        (st = kvcal_dp_nccl_make_id(id)) ||
        (st = kvcal_dp_nccl_join(launch->rank, launch->size, id, out)))
        return st;
    (*out)->local_rank = launch->local_rank;
    (*out)->local_size = launch->local_size;
    return KVCAL_OK;
}

#endif
