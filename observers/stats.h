/* observers/stats.h: running statistics of every K and V the engine would
 * cache, per layer x kv head (x channel), for every observer kind.
 *
 * The layout is fixed here because the CPU backend, the CUDA kernels (which
 * accumulate the same arrays on the device, binned by core/hist_rule.h) and
 * the HDF5 writer all share it; everything lives in one slab. */
#ifndef KVCAL_OBSERVERS_STATS_H
#define KVCAL_OBSERVERS_STATS_H

#include <stdint.h>
#include <string.h>

#include "core/hist_rule.h"
#include "core/scale_rule.h"
#include "kvcal.h"

typedef struct kvcal_stats {
    int num_layers;
    int num_kv_heads;
    int head_dim;
    int num_bins; /* KVCAL_HIST_BINS */
    /* slab-backed; index [kv] is KVCAL_K or KVCAL_V */
    float *absmax[2];       /* (L, H, head_dim) running max |x| */
    uint64_t *hist[2];      /* (L, H, num_bins) counts of |x| */
    float *batch_absmax[2]; /* (L, H) max |x| of the current batch */
    double *ema[2];         /* (L, H) moving average of per-batch absmax */
    double *ema_tensor[2];  /* (L) the same of each layer's per-batch absmax over
                               all its heads: the per-tensor moving average */
    int64_t *tokens;        /* (L) tokens observed per layer */
    int64_t batches;        /* batches folded in */
    void *slab;
    /* added after the first layout (host-side bookkeeping, not in the slab) */
    int64_t batch_start_tokens; /* sum of tokens[] when the current batch began */
    /* a mixture of experts' routing (kvcal_stats_set_experts; 0 / NULL: none) */
    int num_experts;
    int64_t *expert_tokens; /* (L, num_experts) tokens routed to each expert: a
                               token counts once for each of its top-k experts */
    /* the queries as FP8 attention quantizes them, after RoPE (and the
     * per-head q-norm) (kvcal_stats_set_q_heads; 0 / NULL: not observed) */
    int num_q_heads;
    float *q_absmax; /* (L, num_q_heads) running max |q| per query head */
    /* the signed range per channel, what a static int8 cache with offsets
     * needs (kvcal_stats_set_range; NULL: not observed); the range always
     * holds 0: min starts at 0 and max at 0, as torch's MinMaxObserver reads
     * its range for a zero point */
    float *min[2]; /* (L, H, head_dim) running min(x, 0) */
    float *max[2]; /* (L, H, head_dim) running max(x, 0) */
} kvcal_stats_t;

#ifdef __cplusplus
extern "C" {
#endif

/* --- lifetime -------------------------------------------------------------- */

/* Creates zeroed statistics for num_layers x num_kv_heads x head_dim (each in
 * [1, 65536]) in one slab; *out = NULL on failure. The caller owns the result
 * and frees it with kvcal_stats_destroy(). */
kvcal_status kvcal_stats_create(int num_layers, int num_kv_heads, int head_dim,
                                kvcal_stats_t **out);

/* Frees the statistics; NULL is a no-op. */
void kvcal_stats_destroy(kvcal_stats_t *stats);

/* Makes room for the routing counts of num_experts experts per layer
 * (expert_tokens, zeroed; in [1, 65536]); 0 drops them. A second call with
 * the same count keeps the counts. */
kvcal_status kvcal_stats_set_experts(kvcal_stats_t *stats, int num_experts);

/* Makes room for the running max |q| of num_q_heads query heads per layer
 * (q_absmax, zeroed; num_q_heads in [1, 65536], a multiple of the kv
 * heads); 0 drops it. A second call with the same count keeps it. */
kvcal_status kvcal_stats_set_q_heads(kvcal_stats_t *stats, int num_q_heads);

/* on 1: makes room for the signed range of every channel (min and max,
 * zeroed); 0 drops it. A second call with on 1 keeps it. */
kvcal_status kvcal_stats_set_range(kvcal_stats_t *stats, int on);

/* Zeroes every statistic (as freshly created). */
void kvcal_stats_reset(kvcal_stats_t *stats);

/* *out = a copy of src, its routing counts, query and range statistics
 * included (a snapshot that src's later batches leave as it is); *out =
 * NULL on failure. */
kvcal_status kvcal_stats_clone(const kvcal_stats_t *src, kvcal_stats_t **out);

/* Bytes of stats->slab. The slab holds, in this order and each array
 * directly after the previous one: hist[K], hist[V], ema[K], ema[V], tokens,
 * absmax[K], absmax[V], batch_absmax[K], batch_absmax[V], ema_tensor[K],
 * ema_tensor[V]; an array's offset
 * is its pointer minus slab. A device mirror of this size therefore copies
 * to and from the host with one memcpy. */
size_t kvcal_stats_slab_bytes(const kvcal_stats_t *stats);

/* --- observing ------------------------------------------------------------- */

/* One K or V block of one layer, as a runner holds it:
 *   x (batch, seq, kv_heads, head_dim), element (b, t, h, c) at
 *   x[b * sample_stride + t * token_stride + h * head_stride + c]
 * (channels contiguous; strides in floats, so a fused qkv buffer works too).
 * Padding is never observed: token t of sample b is observed when
 *   valid != NULL:   valid[b * seq + t] != 0  (any padding side), else
 *   lengths != NULL: t < lengths[b]           (right padding), else
 *   always.
 * sample_ids (batch) name the samples in error messages (dataset index);
 * NULL names them by b. Every pointer is borrowed for the call only. */
typedef struct kvcal_kv_block {
    const float *x; /* (batch, seq, kv_heads, head_dim), strided */
    int batch;
    int seq;
    int64_t sample_stride;
    int64_t token_stride;
    int64_t head_stride;
    const int32_t *lengths;    /* (batch) or NULL */
    const uint8_t *valid;      /* (batch, seq) or NULL */
    const int64_t *sample_ids; /* (batch) or NULL */
} kvcal_kv_block;

/* A dense block x (batch, seq, kv_heads, head_dim), right-padded to lengths
 * (NULL: no padding). */
static inline kvcal_kv_block kvcal_kv_block_dense(const float *x, int batch, int seq,
                                                  int kv_heads, int head_dim,
                                                  const int32_t *lengths,
                                                  const int64_t *sample_ids)
{
    kvcal_kv_block blk;
    memset(&blk, 0, sizeof blk);
    blk.x = x;
    blk.batch = batch;
    blk.seq = seq;
    blk.head_stride = head_dim;
    blk.token_stride = (int64_t)kv_heads * head_dim;
    blk.sample_stride = (int64_t)seq * kv_heads * head_dim;
    blk.lengths = lengths;
    blk.sample_ids = sample_ids;
    return blk;
}

/* Folds one block of layer `layer` (kv = KVCAL_K or KVCAL_V) into absmax,
 * hist and batch_absmax (and min and max when the range is observed,
 * kvcal_stats_set_range); a K block also adds its observed tokens to
 * tokens[layer] (K and V of a layer see the same tokens, so V does not count
 * them again). The whole block is checked first: a NaN or Inf among the
 * observed values returns KVCAL_ERR_NONFINITE naming layer, K/V, kv head,
 * sample, token and channel, and nothing of the block is folded. Lengths
 * outside [0, seq] are KVCAL_ERR_INVALID_ARG. Not thread-safe on one stats. */
kvcal_status kvcal_stats_observe_ref(kvcal_stats_t *stats, int layer, int kv,
                                     const kvcal_kv_block *blk);

/* Folds the queries of layer `layer`, q (batch, seq, num_q_heads,
 * head_dim) laid out as blk describes (its head_stride between query heads;
 * padding skipped as kvcal_stats_observe_ref skips it) into q_absmax. A NaN
 * or Inf is KVCAL_ERR_NONFINITE naming layer, query head, sample, token
 * and channel, and nothing is folded. KVCAL_ERR_INVALID_ARG when the
 * statistics do not observe queries (kvcal_stats_set_q_heads). */
kvcal_status kvcal_stats_observe_q_ref(kvcal_stats_t *stats, int layer,
                                       const kvcal_kv_block *blk);

/* max of q_absmax over query heads h0 .. h0 + n - 1 of layer l: the per
 * kv-head group max vLLM reads (n = num_q_heads / num_kv_heads), or the
 * layer's with h0 0 and n num_q_heads. */
float kvcal_stats_q_group_absmax(const kvcal_stats_t *stats, int layer, int h0, int n);

/* Starts a batch: clears batch_absmax. Optional before the first batch and
 * after kvcal_stats_end_batch(), which starts the next batch itself. */
void kvcal_stats_begin_batch(kvcal_stats_t *stats);

/* Ends a batch: folds batch_absmax into the moving average (ema =
 * batch_absmax on the first batch, then ema = decay * ema + (1 - decay) *
 * batch_absmax, decay in [0, 1)), per head and, with the max of a layer's
 * heads' batch_absmax, per layer into ema_tensor; counts the batch and
 * starts the next one. A batch that observed no token changes nothing. */
kvcal_status kvcal_stats_end_batch(kvcal_stats_t *stats, double decay);

/* Folds one batch whose per-head absmax were recorded apart, batch_absmax
 * [K] and [V] (L, H), into the moving averages exactly as
 * kvcal_stats_end_batch folds the current batch, and counts it; the
 * current batch is left as it is. For runners that observe several batches
 * layer by layer and fold them afterwards, in batch order. */
kvcal_status kvcal_stats_fold_batch(kvcal_stats_t *stats,
                                    const float *const batch_absmax[2], double decay);

/* Folds src into dst (same shape, else KVCAL_ERR_MISMATCH): absmax,
 * batch_absmax, q_absmax and max by max, min by min (q_absmax and the range
 * when both observe them, or src does not), histograms, tokens, expert_tokens (when both
 * count the same experts, or src none) and batches by sum. This is exact and associative,
 * so minmax / percentile / mse results do not depend on how the data was split over
 * batches or workers. The EMA depends on batch order and cannot be merged exactly: merge
 * keeps the element-wise max of the two EMAs (the larger scale; a side with no batch
 * contributes nothing). Workers that want an exact data-parallel EMA reduce batch_absmax
 * with MAX before every kvcal_stats_end_batch(); their EMAs are then equal, and so is the
 * merge. */
kvcal_status kvcal_stats_merge(kvcal_stats_t *dst, const kvcal_stats_t *src);

/* max over channels of absmax for (layer, kv, head); no range check. */
float kvcal_stats_head_absmax(const kvcal_stats_t *stats, int layer, int kv, int head);

/* The same over channels first .. first + count - 1 of the head (a part of
 * it: MLA's latent, its RoPE part); no range check. */
float kvcal_stats_channels_absmax(const kvcal_stats_t *stats, int layer, int kv, int head,
                                  int first, int count);

#ifdef __cplusplus
}
#endif

#endif
