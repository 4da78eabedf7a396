/* calib/attn_search.h: the "attention" observer of `kvcal calibrate`: per
 * (layer, kv head) the K threshold and the V threshold, among the
 * candidates the calibration's statistics give, that make the attention
 * output closest to the exact one on the first calibration samples, with
 * Q, K and V of the model's own forward pass (cpu backend).
 *
 * Candidates per (layer, K/V, head), from observers/observer.h on the same
 * statistics: minmax, percentile 99.999, 99.99, 99.9, 99.5 and 99, mse.
 * Each is scored by sum over the head's query heads and tokens of
 * |attention(q, K', V) - attention(q, K, V)|^2 for K (V exact) and of
 * |attention(q, K, V') - attention(q, K, V)|^2 for V (K exact), K' and V'
 * the e4m3 round trip under scale kvcal_scale_from_absmax(t) (as the online
 * quantization computes it); the least error wins, the first candidate on
 * a tie. */
#ifndef KVCAL_CALIB_ATTN_SEARCH_H
#define KVCAL_CALIB_ATTN_SEARCH_H

#include "calib/executor.h"
#include "observers/stats.h"

#define KVCAL_ATTN_CANDIDATES 7

/* What the search found, per (layer, K/V, head): the candidate chosen
 * (0 minmax .. 6 mse, in the order above) and its error against minmax's
 * (1: as good; owned by the caller, (layers, 2, kv_heads) each). */
typedef struct kvcal_attn_search_result {
    float *thresholds; /* (layers, 2, kv_heads), K then V per layer */
    int *chosen;       /* or NULL */
    double *rel_error; /* or NULL: chosen error / minmax error */
} kvcal_attn_search_result;

/* Runs the first min(samples, s->num_samples) samples of s through x
 * (a cpu executor of the model stats was gathered on) in batches of
 * s->batch and fills r. KVCAL_ERR_UNSUPPORTED on a backend that does not
 * hand Q, K and V to the host. */
kvcal_status kvcal_attn_search(kvcal_exec_t *x, const kvcal_model_desc *d,
                               const kvcal_stats_t *stats, const kvcal_exec_samples *s,
                               int samples, kvcal_attn_search_result *r);

#endif
