/* calib/executor.h: runs a model over samples on one backend, for
 * calibrate and eval alike. The model's family (calib/arch.h) gives the
 * layer's ops; the executor runs them layer by layer for each batch on the
 * chosen backend (calib/backend.h): cpu (fp32 reference ops, tokens
 * packed) or cuda (bf16, fused kernels). At each layer's cache point K and
 * V (after k_proj (+bias), the per-head k_norm and RoPE; V after v_proj
 * (+bias): exactly what an engine writes into its KV cache) are observed
 * into statistics (calibrate), passed through a simulated FP8 cache (eval,
 * calib/kv_sim.h) or handed to a tap (tests). Padding is never computed
 * into a valid token nor observed. A calibration pass stops after the last
 * layer's K and V (with routing counts to record, a last MoE layer runs on
 * to its router and top-k: never its experts); an evaluation runs the
 * whole model to the next-token log-likelihood. Calls on one executor must
 * come from one thread. */
#ifndef KVCAL_CALIB_EXECUTOR_H
#define KVCAL_CALIB_EXECUTOR_H

#include <stdint.h>

#include "calib/backends.h"
#include "calib/kv_sim.h"
#include "calib/model.h"
#include "calib/op_profile.h"
#include "kvcal.h"
#include "observers/stats.h"

typedef struct kvcal_exec_options {
    kvcal_device_kind device;
    kvcal_backend_options backend; /* the largest batch, kernel choices */
    /* Batches run layer by layer together (a chunk): 0 as many as the
     * backend has room for, 1 one batch through every layer before the
     * next (batch-major). Outputs do not depend on it. */
    int max_chunk_batches;
    /* 1: a calibration's last MoE layer runs whole, its experts too, as
     * an evaluation runs it (a check of the routing-only last layer: the
     * statistics are the same) */
    int whole_last_layer;
    /* 1: each op's time (and each step's the backend marks inside one)
     * summed over the runs after the warm-up (kvcal_exec_op_profile), and
     * the time between ops (KVCAL_OP_PROFILE_GAPS); read after each chunk */
    int profile;
} kvcal_exec_options;

typedef struct kvcal_exec kvcal_exec_t;

/* Creates the backend for `model` (borrowed: it must outlive the
 * executor) sized for batches of opt->backend.max_batch samples of
 * max_seq_len tokens; the cuda backend runs one batch of that shape once
 * (module loading and GEMM algorithm choice happen here, not in the first
 * batch). Errors as kvcal_backend_*_create. *out = NULL on failure. */
kvcal_status kvcal_exec_create(kvcal_model_t *model, const kvcal_exec_options *opt,
                               kvcal_exec_t **out);

/* Frees; NULL is a no-op. */
void kvcal_exec_destroy(kvcal_exec_t *x);

/* How many layers' weights the backend holds at once: every layer, or
 * (cuda, when they do not fit) two, each loaded while the one before it
 * computes. */
int kvcal_exec_layers_resident(const kvcal_exec_t *x);

/* The FP8 weights the backend runs as dequantized bf16 GEMMs where the
 * engine would run FP8 GEMMs, and why, in a line; "" for none. */
const char *kvcal_exec_fp8_fallback(const kvcal_exec_t *x);

/* What loading the layers' weights has cost so far (calib/backend.h's
 * kvcal_load_stats; zeros where the backend reads weights as it computes). */
void kvcal_exec_load_stats(const kvcal_exec_t *x, kvcal_load_stats *out);

/* With kvcal_exec_options' profile: the times summed by op (calib/op_profile.h)
 * into *out (owned by x), their count returned; 0 without. */
int kvcal_exec_op_profile(const kvcal_exec_t *x, const kvcal_op_time **out);

/* How many MoE ops (one a layer a batch) the executor's runs so far (its
 * warm-up included) gave the backend whole, experts and all, and how many
 * to route only (a calibration's last layer: its routing counts). */
void kvcal_exec_moe_ops(const kvcal_exec_t *x, long long *whole, long long *routed);

/* How far a run is. Work runs in chunks of batches, each chunk layer by
 * layer: tokens_done counts a chunk's tokens by the fraction of its layers
 * done (tokens_total when the run is done). */
typedef struct kvcal_exec_progress {
    int samples_done, samples_total; /* samples through every layer */
    long long tokens_whole;          /* their tokens */
    double tokens_done;              /* and the running chunk's part */
    long long tokens_total;
    int layer, layers; /* layers the running chunk has done (0: none) */
} kvcal_exec_progress;

/* Called after each layer of a chunk and after each chunk. */
typedef void (*kvcal_exec_progress_fn)(void *ctx, const kvcal_exec_progress *p);

/* Samples to run: ids (num_samples, seq_len) row-major, sample i's first
 * lengths[i] valid; `batch` samples a forward pass (<= the executor's
 * max_batch); sample i is named first_name + i in errors and statistics. */
/* Called after each chunk of a calibration but the last with the
 * statistics of every sample so far (the device's part merged in) and the
 * number of samples done: a point a run can resume from. Non-OK stops the
 * run. */
typedef kvcal_status (*kvcal_exec_chunk_fn)(void *ctx, const kvcal_stats_t *stats,
                                            int samples_done);

typedef struct kvcal_exec_samples {
    const int32_t *ids;
    const int32_t *lengths;
    int num_samples, seq_len, batch;
    kvcal_exec_progress_fn progress; /* or NULL */
    void *progress_ctx;
    /* calibration only: */
    int first_sample;               /* samples before it are in stats already (a
                                       multiple of batch: a resumed run) */
    int chunk_samples;              /* at most this many samples a chunk (0: no cap) */
    kvcal_exec_chunk_fn chunk_done; /* or NULL */
    void *chunk_ctx;
    const volatile int *stop; /* when it reads non-zero after a chunk, the run
                                 ends with KVCAL_ERR_INTERRUPTED (NULL: never) */
    int64_t first_name;       /* sample i is named first_name + i (a rank's part
                                 of a run: its first sample's index there) */
    float *batch_absmax;      /* (batches, 2, layers, kv_heads) or NULL: each
                                 batch's per-head K and V absmax, in batch order,
                                 instead of folding them into the moving averages
                                 (a data-parallel rank; calib/dp.h) */
} kvcal_exec_samples;

/* Calibration: every sample through the model up to the last layer's K
 * and V, each batch folded into stats (same shape as the model's K/V) as
 * kvcal_stats_observe_ref folds it and its moving averages as
 * kvcal_stats_end_batch(ema_decay) folds them, batch after batch (whatever
 * the chunks: the statistics do not depend on them). A NaN or Inf in K or V is
 * KVCAL_ERR_NONFINITE naming the layer, K/V, head and sample(s). With
 * stats NULL nothing is observed (what the observers cost is the
 * difference; calibrate --time-only). */
kvcal_status kvcal_exec_calibrate(kvcal_exec_t *x, const kvcal_exec_samples *s,
                                  kvcal_stats_t *stats, double ema_decay);

/* Per-token results of an evaluation, in sample and token order, one for
 * each token that has a successor in its sample
 * (kvcal_exec_predicted_tokens). The caller owns the arrays. */
typedef struct kvcal_eval_tokens {
    float *nll; /* (count) next-token negative log-likelihood, nats */
    /* 1: this run's next-token distributions become the reference the
     * later runs on the same samples are compared with (the baseline) */
    int keep;
    /* (count) or NULL: against the reference, the KL divergence of the
     * reference's distribution to this run's (nats) and 1 where both put
     * the same token first, else 0 (kernels/cpu/eval_ref.h) */
    float *kld, *top;
} kvcal_eval_tokens;

/* How many tokens of s have a successor in their sample. */
int64_t kvcal_exec_predicted_tokens(const kvcal_exec_samples *s);

/* Evaluation: every sample through the whole model with K and V through
 * the simulated cache of sim (mode EXACT: the baseline); fills tok (above)
 * and adds into sums (layers; NULL for EXACT) the errors of the simulated
 * cache. Comparing (tok->kld) needs a reference kept by an earlier run on
 * samples of as many predicted tokens (KVCAL_ERR_INVALID_ARG otherwise);
 * it stays until the next run that keeps one or the executor's end. */
kvcal_status kvcal_exec_eval(kvcal_exec_t *x, const kvcal_exec_samples *s,
                             const kvcal_kv_sim_config *sim, const kvcal_eval_tokens *tok,
                             kvcal_eval_layer_sums *sums);

/* Called at each layer's cache point with Q (rows, heads, head_dim), K and
 * V (rows, kv_heads, head_dim) in host memory, as the cache-point op left
 * them (after RoPE), rows laid out as `rows` says. */
typedef kvcal_status (*kvcal_exec_tap_fn)(void *ctx, int layer, const kvcal_rows *rows,
                                          const float *q, const float *k, const float *v);

/* One batch through the model (cpu backend): every layer's Q, K and V to
 * tap (every layer computed whole), and, when logits is non-NULL, the head
 * with logits (rows, vocab) in row order. */
kvcal_status kvcal_exec_forward(kvcal_exec_t *x, const kvcal_batch *b,
                                kvcal_exec_tap_fn tap, void *ctx, float *logits);

#endif
