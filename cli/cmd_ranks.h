/* cli/cmd_ranks.h: a command run as one rank of several (calib/dp.h): who
 * started it (mpirun, or a launcher's RANK / WORLD_SIZE / LOCAL_RANK), its
 * part of the samples, the ranks' meeting after the forward passes (one
 * message naming the rank that failed) and the reduction on rank 0, which
 * alone writes and prints. One process without a launcher (or a launcher
 * of one rank) runs as before: every function here is then a no-op. */
#ifndef KVCAL_CLI_CMD_RANKS_H
#define KVCAL_CLI_CMD_RANKS_H

#include "calib/dp.h"
#include "calib/executor.h"
#include "kvcal.h"
#include "observers/stats.h"

typedef struct kvcal_cmd_ranks {
    const char *cmd;        /* "calibrate", for messages */
    kvcal_dp_group *group;  /* NULL: one process */
    int rank, size;         /* 0 and 1 for one process */
    kvcal_dp_part part;     /* this rank's samples (kvcal_cmd_ranks_layout) */
    float *batch_absmax;    /* (part.num_batches, 2, layers, kv_heads) */
    volatile int peer_stop; /* a peer failed: this rank stopped for it */
    int meetings;           /* held so far */
    int closed;             /* the last is held (kvcal_cmd_ranks_close) */
    int failed_at_meeting;  /* a meeting found a failure */
} kvcal_cmd_ranks;

/* The ranks of a command meet at the points where every rank gets to,
 * whether it failed or not (a rank that fails goes to the next meeting at
 * once): the first once set up (their runs compared), the others after
 * forward passes (calibrate: one; eval: one a mode), until the command
 * closes them (kvcal_cmd_ranks_close). Every rank runs the same steps, so
 * they hold the same meetings.
 *
 * Reads the environment of the launcher: Open MPI's or PMIx's variables
 * (mpirun, srun --mpi=pmix) start an MPI group; else RANK, WORLD_SIZE,
 * LOCAL_RANK and LOCAL_WORLD_SIZE (torchrun, or set from Slurm's) an NCCL
 * group (a cuda run; NCCL_COMM_ID defaults to MASTER_ADDR:MASTER_PORT+1).
 * cuda: the run's device (each rank takes GPU LOCAL_RANK). Returns -1 when
 * the ranks cannot be joined, the reason printed once (by rank 0). */
int kvcal_cmd_ranks_start(const char *cmd, int cuda, kvcal_cmd_ranks *r);

/* The rank the launcher's environment names (0 when none does, or for a
 * value kvcal_cmd_ranks_start will refuse), known before the ranks join:
 * only rank 0 checks the outputs it alone writes (another host need not
 * hold their folders). */
int kvcal_cmd_ranks_env_rank(void);

/* This rank's part of num_samples samples in batches of `batch`, for a
 * model of layers x kv_heads. */
kvcal_status kvcal_cmd_ranks_layout(kvcal_cmd_ranks *r, int num_samples, int batch,
                                    int layers, int kv_heads);

/* 0 when this rank holds no sample (it skips the forward passes); else
 * narrows a whole run's samples to its part (kvcal_dp_narrow) and returns 1. */
int kvcal_cmd_ranks_narrow(kvcal_cmd_ranks *r, kvcal_exec_samples *s);

/* For a progress callback: when a peer has failed, sets *stop (the run
 * ends after its chunk) and remembers why. */
void kvcal_cmd_ranks_poll(kvcal_cmd_ranks *r, volatile int *stop);

/* FNV-1a over n bytes, from h (start with KVCAL_CMD_RANKS_HASH0): what a
 * rank's run is (samples, options, model), for the first meeting. */
#define KVCAL_CMD_RANKS_HASH0 14695981039346656037ull
uint64_t kvcal_cmd_ranks_hash(uint64_t h, const void *p, size_t n);

/* The next meeting, every rank whether it failed or not: st this rank's
 * status; run (the first meeting) this rank's run hash, which must be rank
 * 0's. Returns KVCAL_OK when none failed, else the failing rank's status
 * with kvcal_last_error() "rank R of N: ...". */
kvcal_status kvcal_cmd_ranks_meet(kvcal_cmd_ranks *r, kvcal_status st, uint64_t run);

/* After the last meeting: a failure from here on is this rank's own
 * (kvcal_cmd_ranks_fail prints it there and meets no one). */
void kvcal_cmd_ranks_close(kvcal_cmd_ranks *r);

/* Rank r's `bytes` bytes of mine (every rank the same count), in rank order
 * into all (size x bytes) on rank 0 (all unused elsewhere). */
kvcal_status kvcal_cmd_ranks_gather(kvcal_cmd_ranks *r, const void *mine, size_t bytes,
                                    void *all);

/* The same with rank i's each[i] bytes (every rank passes the same each),
 * in rank order into all (their sum) on rank 0. */
kvcal_status kvcal_cmd_ranks_gatherv(kvcal_cmd_ranks *r, const void *mine, const size_t *each,
                                     void *all);

/* After a meeting without failure: stats (this rank's, batch maxima kept
 * apart) become the whole run's on rank 0 (kvcal_dp_reduce_run). */
kvcal_status kvcal_cmd_ranks_reduce(kvcal_cmd_ranks *r, kvcal_stats_t *stats,
                                    double ema_decay);

/* A failed command's exit: goes to the next meeting unless they are closed
 * (so the others stop), then prints "kvcal <cmd>: <message>" once, on rank
 * 0 (on this rank when they were closed). Returns the exit code of
 * kvcal_cmd_run_exit_code. */
int kvcal_cmd_ranks_fail(kvcal_cmd_ranks *r, kvcal_status st);

/* Leaves the group (MPI_Finalize) and frees; safe on a zeroed struct. */
void kvcal_cmd_ranks_end(kvcal_cmd_ranks *r);

#endif
