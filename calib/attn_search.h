/* calib/attn_search.h: the "attention" observer of `kvcal calibrate`: per
 * (layer, kv head) the K threshold and the V threshold, among the
 * candidates the calibration's statistics give, that make the attention
 * output closest to the exact one on the first calibration samples, with
 * Q, K and V of the model's own forward pass (cpu backend), for the cache
 * format the scales are for.
 *
 * Candidates per (layer, K/V, head), from observers/observer.h on the same
 * statistics: minmax, percentile 99.999, 99.99, 99.9, 99.5 and 99, mse.
 * Each is scored by sum over the head's query heads and tokens of
 * |attention(q, K', V) - attention(q, K, V)|^2 for K (V exact) and of
 * |attention(q, K, V') - attention(q, K, V)|^2 for V (K exact), K' and V'
 * the round trip through the cache format under the static per-head scale
 * of threshold t, quantized and dequantized by the library's reference
 * (kvcal_kv_quantize_fmt_ref / kvcal_kv_dequantize_fmt_ref, what `kvcal
 * eval`'s static modes of that format compute): e4m3 under
 * kvcal_scale_from_absmax(t); int8 (round to nearest even, saturating at
 * -128 / 127) under that scale x 448 / 127, i.e. t / 127; NVFP4 under the
 * global scale t / (6 x 448), each block of 16 values with its e4m3 block
 * scale under it. The least error wins, the first candidate on a tie. The
 * mse candidate is the e4m3 round trip's optimum whatever the format. */
#ifndef KVCAL_CALIB_ATTN_SEARCH_H
#define KVCAL_CALIB_ATTN_SEARCH_H

#include "calib/executor.h"
#include "kvcal.h"
#include "observers/stats.h"

#define KVCAL_ATTN_CANDIDATES 7

/* What the search found, per (layer, K/V, head): the threshold chosen, the
 * candidate it is (0 minmax .. 6 mse, in the order above) and every
 * candidate's summed squared error (owned by the caller). */
typedef struct kvcal_attn_search_result {
    float *thresholds; /* (layers, 2, kv_heads), K then V per layer */
    int *chosen;       /* or NULL: (layers, 2, kv_heads) */
    double *errors;    /* or NULL: (layers, 2, kv_heads, KVCAL_ATTN_CANDIDATES) */
} kvcal_attn_search_result;

/* Runs the first min(samples, s->num_samples) samples of s through x
 * (a cpu executor of the model stats was gathered on) in batches of
 * s->batch and fills r for a cache of `format` (FP8_E4M3, INT8 or NVFP4).
 * KVCAL_ERR_UNSUPPORTED on a backend that does not hand Q, K and V to the
 * host, on another format, and for NVFP4 on a head_dim that is not a
 * multiple of 16. */
kvcal_status kvcal_attn_search(kvcal_exec_t *x, const kvcal_model_desc *d,
                               const kvcal_stats_t *stats, const kvcal_exec_samples *s,
                               int samples, kvcal_kv_format format,
                               kvcal_attn_search_result *r);

#endif
