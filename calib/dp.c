/* calib/dp.c: a data-parallel run's layout, its reduction on rank 0 and the
 * ranks' agreement on failure (see dp.h); the transports are in dp_mpi.c
 * and dp_cuda.c. */
#include "calib/dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

// --- layout ---------------------------------------------------------------------

kvcal_dp_part kvcal_dp_layout(int num_samples, int batch, int rank, int ranks)
{
    kvcal_dp_part p;
    const long long B = (num_samples + batch - 1) / batch;
    const int b0 = (int)(rank * B / ranks), b1 = (int)((rank + 1) * B / ranks);
    p.rank = rank;
    p.ranks = ranks;
    p.total_batches = (int)B;
    p.first_batch = b0;
    p.num_batches = b1 - b0;
    p.first_sample = b0 * batch;
    const int end = b1 * batch < num_samples ? b1 * batch : num_samples;
    p.num_samples = end - p.first_sample;
    return p;
}

void kvcal_dp_narrow(const kvcal_dp_part *part, float *batch_absmax,
                     kvcal_exec_samples *s)
{
    s->ids += (int64_t)part->first_sample * s->seq_len;
    s->lengths += part->first_sample;
    s->num_samples = part->num_samples;
    s->first_name = part->first_sample;
    s->batch_absmax = batch_absmax;
}

// --- statistics -------------------------------------------------------------------

void kvcal_dp_stats_parts(const kvcal_stats_t *s,
                          kvcal_dp_stats_part parts[KVCAL_DP_STATS_PARTS])
{
    const unsigned char *slab = s->slab;
    const size_t lh = (size_t)s->num_layers * (size_t)s->num_kv_heads;
    /* hist[K] and hist[V], then absmax[K] and absmax[V], lie back to back */
    parts[0] = (kvcal_dp_stats_part){(size_t)((const unsigned char *)s->hist[0] - slab),
                                     2 * lh * (size_t)s->num_bins, 0};
    parts[1] = (kvcal_dp_stats_part){(size_t)((const unsigned char *)s->tokens - slab),
                                     (size_t)s->num_layers, 0};
    parts[2] = (kvcal_dp_stats_part){(size_t)((const unsigned char *)s->absmax[0] - slab),
                                     2 * lh * (size_t)s->head_dim, 1};
}

void kvcal_dp_stats_view(const kvcal_stats_t *shape, void *slab, kvcal_stats_t *view)
{
    unsigned char *to = slab;
    const unsigned char *from = shape->slab;
#define REBASE(field) (void *)(to + ((const unsigned char *)(field)-from))
    *view = *shape;
    view->slab = slab;
    for (int kv = 0; kv < 2; kv++) {
        view->absmax[kv] = REBASE(shape->absmax[kv]);
        view->hist[kv] = REBASE(shape->hist[kv]);
        view->batch_absmax[kv] = REBASE(shape->batch_absmax[kv]);
        view->ema[kv] = REBASE(shape->ema[kv]);
        view->ema_tensor[kv] = REBASE(shape->ema_tensor[kv]);
    }
    view->tokens = REBASE(shape->tokens);
#undef REBASE
    /* the routing counts lie outside the slab: a view leaves them out (they
     * would alias shape's; reduce_expert_tokens sums them) */
    view->num_experts = 0;
    view->expert_tokens = NULL;
    view->num_q_heads = 0; /* the same for the queries and the range */
    view->q_absmax = NULL;
    view->min[0] = view->min[1] = view->max[0] = view->max[1] = NULL;
    view->batches = 0;
    view->batch_start_tokens = 0;
}

/* The routing counts of a mixture of experts, kept beside the slab:
 * every rank's summed into rank 0's. */
static kvcal_status reduce_expert_tokens(kvcal_dp_group *g, kvcal_stats_t *stats)
{
    if (!stats->num_experts)
        return KVCAL_OK;
    const size_t n = (size_t)stats->num_layers * (size_t)stats->num_experts;
    size_t *bytes = malloc((size_t)g->size * sizeof *bytes);
    int64_t *all = g->rank == 0 ? malloc(n * (size_t)g->size * sizeof *all) : NULL;
    kvcal_status st = KVCAL_OK;
    if (!bytes || (g->rank == 0 && !all)) {
        st = kvcal_fail(KVCAL_ERR_NOMEM,
                        "data-parallel reduction: out of host memory for the experts' "
                        "counts");
        goto done;
    }
    for (int r = 0; r < g->size; r++)
        bytes[r] = n * sizeof *all;
    if ((st = g->ops->gather(g, stats->expert_tokens, bytes, all)) || g->rank != 0)
        goto done;
    for (int r = 1; r < g->size; r++)
        for (size_t i = 0; i < n; i++)
            stats->expert_tokens[i] += all[(size_t)r * n + i];
done:
    free(bytes);
    free(all);
    return st;
}

/* The queries' absmax and the signed range, kept beside the slab: every
 * rank's folded into rank 0's by kvcal_stats_merge's rule (max; min for
 * min). One buffer: q_absmax, then min[K], max[K], min[V], max[V]. */
static kvcal_status reduce_extras(kvcal_dp_group *g, kvcal_stats_t *stats)
{
    const size_t nq = (size_t)stats->num_layers * (size_t)stats->num_q_heads;
    const size_t nc = stats->min[0] ? (size_t)stats->num_layers * stats->num_kv_heads *
                                          (size_t)stats->head_dim
                                    : 0;
    const size_t n = nq + 4 * nc;
    if (!n)
        return KVCAL_OK;
    size_t *bytes = malloc((size_t)g->size * sizeof *bytes);
    float *mine = malloc(n * sizeof *mine);
    float *all = g->rank == 0 ? malloc(n * (size_t)g->size * sizeof *all) : NULL;
    kvcal_status st = KVCAL_OK;
    if (!bytes || !mine || (g->rank == 0 && !all)) {
        st = kvcal_fail(KVCAL_ERR_NOMEM,
                        "data-parallel reduction: out of host memory for the queries' "
                        "absmax and the signed range");
        goto done;
    }
    float *const part[5] = {stats->q_absmax, stats->min[0], stats->max[0], stats->min[1],
                            stats->max[1]};
    if (nq)
        memcpy(mine, part[0], nq * sizeof *mine);
    for (int i = 1; nc && i < 5; i++)
        memcpy(mine + nq + (size_t)(i - 1) * nc, part[i], nc * sizeof *mine);
    for (int r = 0; r < g->size; r++)
        bytes[r] = n * sizeof *mine;
    if ((st = g->ops->gather(g, mine, bytes, all)) || g->rank != 0)
        goto done;
    for (int r = 1; r < g->size; r++)
        for (size_t j = 0; j < n; j++) {
            const float x = all[(size_t)r * n + j];
            const int is_min = j >= nq && ((j - nq) / nc) % 2 == 0;
            float *d =
                j < nq ? &stats->q_absmax[j] : &part[1 + (j - nq) / nc][(j - nq) % nc];
            if (is_min ? x < *d : x > *d)
                *d = x;
        }
done:
    free(bytes);
    free(mine);
    free(all);
    return st;
}

kvcal_status kvcal_dp_reduce_run(kvcal_dp_group *g, const kvcal_dp_part *part,
                                 const float *batch_absmax, kvcal_stats_t *stats,
                                 double ema_decay)
{
    const size_t lh = (size_t)stats->num_layers * (size_t)stats->num_kv_heads;
    const size_t per_batch = 2 * lh * sizeof(float);
    size_t *bytes = calloc((size_t)g->size, sizeof *bytes);
    float *all =
        g->rank == 0 ? malloc((size_t)part->total_batches * per_batch + 1) : NULL;
    kvcal_status st = KVCAL_OK;
    if (!bytes || (g->rank == 0 && !all)) {
        st = kvcal_fail(KVCAL_ERR_NOMEM,
                        "data-parallel reduction: out of host memory for %d batches",
                        part->total_batches);
        goto done;
    }
    for (int r = 0; r < g->size; r++)
        bytes[r] =
            (size_t)kvcal_dp_layout(part->total_batches, 1, r, g->size).num_batches *
            per_batch;
    if ((st = g->ops->reduce_stats(g, stats)) || (st = reduce_expert_tokens(g, stats)) ||
        (st = reduce_extras(g, stats)) ||
        (st = g->ops->gather(g, batch_absmax, bytes, all)) || g->rank != 0)
        goto done;
    /* the moving averages, batch after batch in the run's order */
    for (int b = 0; !st && b < part->total_batches; b++) {
        const float *k = all + (size_t)b * 2 * lh;
        const float *const bmax[2] = {k, k + lh};
        st = kvcal_stats_fold_batch(stats, bmax, ema_decay);
    }
    kvcal_stats_begin_batch(stats);
done:
    free(bytes);
    free(all);
    return st;
}

// --- agreement ----------------------------------------------------------------------

/* what a rank says at the meeting: smaller is reported first */
static int verdict(const kvcal_dp_group *g, kvcal_status st, int by_peer)
{
    if (st == KVCAL_OK)
        return 2 * g->size;
    return by_peer ? g->size + g->rank : g->rank;
}

kvcal_status kvcal_dp_agree(kvcal_dp_group *g, kvcal_status st, int by_peer,
                            int *failed_rank)
{
    int min = 0;
    /* [0] status, then the message */
    struct {
        int status;
        char message[1020];
    } news;
    *failed_rank = -1;
    snprintf(news.message, sizeof news.message, "%s", st ? kvcal_last_error() : "");
    news.status = (int)st;
    kvcal_status cst = g->ops->min_int(g, verdict(g, st, by_peer), &min);
    if (!cst && min < 2 * g->size)
        cst = g->ops->bcast(g, &news, sizeof news, min % g->size);
    if (cst)
        return cst;
    if (min == 2 * g->size)
        return KVCAL_OK;
    news.message[sizeof news.message - 1] = '\0';
    *failed_rank = min % g->size;
    return kvcal_fail((kvcal_status)news.status, "rank %d of %d: %s", *failed_rank,
                      g->size, news.message);
}

void kvcal_dp_group_destroy(kvcal_dp_group *g)
{
    if (g)
        g->ops->destroy(g);
}

// --- what a build lacks ---------------------------------------------------------------

#ifndef KVCAL_WITH_CUDA
kvcal_status kvcal_dp_select_gpu(int local_rank, int local_size)
{
    (void)local_size;
    return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                      "local rank %d: this kvcal was built without CUDA", local_rank);
}
#endif

#ifndef KVCAL_WITH_NCCL
int kvcal_dp_have_nccl(void)
{
    return 0;
}

kvcal_status kvcal_dp_nccl_make_id(unsigned char id[KVCAL_DP_NCCL_ID_BYTES])
{
    (void)id;
    return kvcal_fail(KVCAL_ERR_UNSUPPORTED, "this kvcal was built without NCCL");
}

kvcal_status kvcal_dp_nccl_join(int rank, int size,
                                const unsigned char id[KVCAL_DP_NCCL_ID_BYTES],
                                kvcal_dp_group **out)
{
    (void)rank, (void)size, (void)id;
    *out = NULL;
    return kvcal_dp_nccl_make_id(NULL);
}

kvcal_status kvcal_dp_nccl_create(const kvcal_dp_launch *launch, kvcal_dp_group **out)
{
    *out = NULL;
    return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                      "rank %d of %d was started by a launcher's environment (RANK, "
                      "WORLD_SIZE), whose ranks talk through NCCL, but this kvcal was "
                      "built without it (a CUDA build with nccl.h under NCCL_HOME); "
                      "start the ranks with mpirun instead",
                      launch->rank, launch->size);
}
#endif
