/* calib/dp.h: data-parallel runs. A run's samples are split over the N
 * ranks (processes, one per GPU on a GPU host) of a group, whole batches
 * each, in order; every rank runs its part and the statistics meet on rank
 * 0, which writes every output. The group is MPI's or NCCL's: kvcal sends
 * nothing itself.
 *
 * The reduction gives rank 0 the statistics a single process computes on
 * the same samples, byte for byte, whatever N:
 *   - absmax (MAX), histograms and token counts (SUM of integers) through
 *     the library's merge rule (kvcal_stats_merge), which is exact and
 *     does not depend on the order;
 *   - the moving averages (ema, ema_tensor) depend on the batch order, so
 *     they are not merged: every rank keeps its batches' per-head absmax,
 *     rank 0 gathers them in the run's batch order and folds them with
 *     kvcal_stats_fold_batch, the arithmetic of the single process.
 * Which rank computes a batch does not change it: a batch holds the same
 * samples in any layout and runs on one rank.
 *
 * Calls on one group come from one thread; every rank makes the same
 * calls in the same order (the collective contract of MPI and NCCL). */
#ifndef KVCAL_CALIB_DP_H
#define KVCAL_CALIB_DP_H

#include <stddef.h>
#include <stdint.h>

#include "calib/executor.h"
#include "kvcal.h"
#include "observers/stats.h"

// --- layout ---------------------------------------------------------------------

/* One rank's part of a run of num_samples samples in batches of `batch`:
 * batches [first_batch, first_batch + num_batches) of the run's
 * ceil(num_samples / batch), samples [first_sample, first_sample +
 * num_samples). Rank r of N holds batches [r * B / N, (r + 1) * B / N)
 * (B batches, integer division): contiguous, in rank order, sizes apart
 * by at most one. A rank may hold none (B < N). */
typedef struct kvcal_dp_part {
    int rank, ranks;
    int first_batch, num_batches, total_batches;
    int first_sample, num_samples;
} kvcal_dp_part;

/* Rank `rank`'s part of a run (rank in [0, ranks), ranks >= 1, batch >= 1). */
kvcal_dp_part kvcal_dp_layout(int num_samples, int batch, int rank, int ranks);

/* Narrows the samples of a whole run (ids, lengths, num_samples, batch
 * set; first_sample 0) to part: its samples, named by their index in the
 * run, their per-batch absmax into batch_absmax (part->num_batches, 2,
 * layers, kv_heads) instead of the moving averages. */
void kvcal_dp_narrow(const kvcal_dp_part *part, float *batch_absmax,
                     kvcal_exec_samples *s);

// --- groups ---------------------------------------------------------------------

typedef struct kvcal_dp_group kvcal_dp_group;

typedef struct kvcal_dp_group_ops {
    /* stats of every rank merged into rank 0's by kvcal_stats_merge's rule:
     * MPI's group runs kvcal_stats_merge itself over the whole slab, NCCL's
     * the max / sum of kvcal_dp_stats_parts; the moving averages and batch
     * maxima are left for kvcal_dp_reduce_run to fold, the other ranks'
     * stats undefined. */
    kvcal_status (*reduce_stats)(kvcal_dp_group *g, kvcal_stats_t *stats);
    /* Rank r's bytes[r] bytes from send, concatenated in rank order into
     * recv on rank 0 (recv unused elsewhere). */
    kvcal_status (*gather)(kvcal_dp_group *g, const void *send, const size_t *bytes,
                           void *recv);
    /* Every rank's value; *min the smallest, on every rank. */
    kvcal_status (*min_int)(kvcal_dp_group *g, int value, int *min);
    /* root's bytes to every rank. */
    kvcal_status (*bcast)(kvcal_dp_group *g, void *buf, size_t bytes, int root);
    /* Tells every other rank that this one failed (NULL: the group cannot:
     * the others learn it where the ranks next meet). */
    void (*notify_failure)(kvcal_dp_group *g);
    /* 1 when another rank has called notify_failure (NULL: never known). */
    int (*peer_failed)(kvcal_dp_group *g);
    void (*destroy)(kvcal_dp_group *g);
} kvcal_dp_group_ops;

struct kvcal_dp_group {
    const kvcal_dp_group_ops *ops;
    int rank, size;             /* in the group */
    int local_rank, local_size; /* among the ranks of this host */
    const char *transport;      /* "mpi", "mpi+nccl", "nccl" */
};

/* Where a group's ranks come from (what the launcher told the program). */
typedef struct kvcal_dp_launch {
    int rank, size, local_rank, local_size;
    int cuda; /* the run's device is cuda: each rank takes GPU local_rank and
                 (with NCCL in the build) the statistics go over NCCL */
} kvcal_dp_launch;

/* MPI's group over MPI_COMM_WORLD (MPI initialized here, finalized by
 * destroy; launch->size, unless 0 (not known), must be MPI's); launch->cuda with NCCL in
 * the build: the statistics reduce over NCCL among the ranks of a host first, then over
 * MPI among the hosts. KVCAL_ERR_UNSUPPORTED in a build without MPI. *out = NULL on
 * failure. */
kvcal_status kvcal_dp_mpi_create(const kvcal_dp_launch *launch, kvcal_dp_group **out);

/* 1 when the build holds MPI. */
int kvcal_dp_have_mpi(void);

/* NCCL's group over launch's ranks alone (no MPI), for a launcher that sets
 * the ranks in the environment: NCCL's bootstrap finds rank 0 through
 * NCCL_COMM_ID (host:port), which every rank's environment must hold.
 * Takes GPU local_rank. KVCAL_ERR_UNSUPPORTED in a build without NCCL. */
kvcal_status kvcal_dp_nccl_create(const kvcal_dp_launch *launch, kvcal_dp_group **out);

/* 1 when the build holds NCCL. */
int kvcal_dp_have_nccl(void);

/* Makes GPU local_rank the calling thread's current device, where the
 * backend creates its work: one rank a GPU, so KVCAL_ERR_NO_DEVICE when the
 * host's local_size ranks are more than its visible GPUs. */
kvcal_status kvcal_dp_select_gpu(int local_rank, int local_size);

/* Frees; NULL is a no-op. */
void kvcal_dp_group_destroy(kvcal_dp_group *g);

// --- a run over a group -------------------------------------------------------

/* After every rank ran its part (part: this rank's; batch_absmax as
 * kvcal_dp_narrow filled it; stats: this rank's, moving averages not
 * folded): rank 0's stats become the whole run's, exactly as one process
 * folds them with kvcal_stats_end_batch(ema_decay) batch after batch. The
 * others' stats are left undefined. */
kvcal_status kvcal_dp_reduce_run(kvcal_dp_group *g, const kvcal_dp_part *part,
                                 const float *batch_absmax, kvcal_stats_t *stats,
                                 double ema_decay);

/* The ranks meet and agree on failure: st is this rank's status, by_peer
 * 1 when it stopped because a peer failed (peer_failed). Returns KVCAL_OK
 * on every rank when none failed; else, on every rank, the status of the
 * lowest rank that failed by itself (a rank stopped by a peer counts only
 * when none did) with kvcal_last_error() "rank R of N: <its message>" and
 * *failed_rank = R. */
kvcal_status kvcal_dp_agree(kvcal_dp_group *g, kvcal_status st, int by_peer,
                            int *failed_rank);

// --- for the groups' implementations --------------------------------------------

/* The parts of a statistics slab a reduction combines, as kvcal_stats_merge
 * does: hist and tokens by SUM (uint64; tokens are never negative), absmax
 * by MAX (float). Offsets in bytes from the slab. Every array merge
 * combines but the moving averages and batch maxima (which
 * kvcal_dp_reduce_run folds itself) is one of them (tests/test_dp.c checks
 * it against kvcal_stats_merge). */
typedef struct kvcal_dp_stats_part {
    size_t offset, count;
    int is_max_f32; /* 1: float MAX, 0: uint64 SUM */
} kvcal_dp_stats_part;
#define KVCAL_DP_STATS_PARTS 3
void kvcal_dp_stats_parts(const kvcal_stats_t *s,
                          kvcal_dp_stats_part parts[KVCAL_DP_STATS_PARTS]);

/* NCCL's group of `size` ranks that share id (made by rank 0 with
 * kvcal_dp_nccl_make_id and sent by the caller: MPI's group makes one per
 * host this way); takes no GPU (the caller selected it). */
#define KVCAL_DP_NCCL_ID_BYTES 128
kvcal_status kvcal_dp_nccl_make_id(unsigned char id[KVCAL_DP_NCCL_ID_BYTES]);
kvcal_status kvcal_dp_nccl_join(int rank, int size,
                                const unsigned char id[KVCAL_DP_NCCL_ID_BYTES],
                                kvcal_dp_group **out);

/* *view: statistics of shape's layout over another slab of
 * kvcal_stats_slab_bytes(shape) bytes (borrowed), batches 0. */
void kvcal_dp_stats_view(const kvcal_stats_t *shape, void *slab, kvcal_stats_t *view);

#endif
