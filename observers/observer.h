/* observers/observer.h: observer kinds and the reduction of statistics
 * (observers/stats.h) to K/V scales (core/scales.h).
 *
 * Every observer gives a clipping threshold t per (layer, K/V, kv head);
 * the scale is kvcal_scale_from_absmax(t) (core/scale_rule.h):
 *   minmax          t = max |x| seen (over channels)
 *   ema[:D]         t = moving average of per-batch max |x| with decay D:
 *                   ema = D * ema + (1 - D) * batch_absmax, the first batch
 *                   taken as is. Default D = 0.99, which is llm-compressor's
 *                   and torch.ao's averaging_constant 0.01 (their constant
 *                   weights the new batch, D weights the old average).
 *   percentile:P    t = P-th percentile of |x| (0 < P <= 100), read from the
 *                   histogram with linear interpolation inside a bin
 *   mse             t minimizing the e4m3 round-trip squared error of the
 *                   histogram (scale t/448, round to nearest even,
 *                   saturating), searched over every bin edge from the 50th
 *                   percentile to max |x|, then refined between the best
 *                   edge's neighbours.
 *   attention       t given per head from outside (`thresholds`): kvcal
 *                   calibrate's search of the candidates above for the
 *                   least attention-output error (calib/attn_search.h),
 *                   which needs the model's Q as well, so no parse
 *                   accepts it here; per tensor the max over the heads. */
#ifndef KVCAL_OBSERVERS_OBSERVER_H
#define KVCAL_OBSERVERS_OBSERVER_H

#include <stddef.h>

#include "core/scales.h"
#include "observers/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values only ever grow at the end. */
typedef enum kvcal_observer_kind {
    KVCAL_OBSERVER_MINMAX = 0,
    KVCAL_OBSERVER_EMA = 1,
    KVCAL_OBSERVER_PERCENTILE = 2,
    KVCAL_OBSERVER_MSE = 3,
    KVCAL_OBSERVER_ATTENTION = 4
} kvcal_observer_kind;

#define KVCAL_OBSERVER_EMA_DECAY_DEFAULT 0.99

typedef struct kvcal_observer_config {
    kvcal_observer_kind kind;
    double ema_decay;  /* in [0, 1); used by kvcal_stats_end_batch for every kind */
    double percentile; /* in (0, 100]; used by KVCAL_OBSERVER_PERCENTILE */
    /* KVCAL_OBSERVER_ATTENTION: (layers, 2, kv_heads) thresholds, K then V
     * per layer (borrowed), and the samples they were searched on */
    const float *thresholds;
    int search_samples;
} kvcal_observer_config;

/* Called once per warning with one line of text (borrowed for the call). */
typedef void (*kvcal_warn_fn)(void *ctx, const char *message);

/* The default configuration: minmax, EMA decay 0.99, percentile 99.99. */
kvcal_observer_config kvcal_observer_default(void);

/* Parses "minmax", "ema", "ema:D", "percentile:P" or "mse" into *out (which
 * is left unchanged on failure; the error names the text and the choices). */
kvcal_status kvcal_observer_parse(const char *text, kvcal_observer_config *out);

/* "minmax", "ema", "percentile", "mse" or "attention": static, never NULL. */
const char *kvcal_observer_name(kvcal_observer_kind kind);

/* The observer's parameters as a JSON object ("{}", "{\"decay\": 0.99}",
 * "{\"percentile\": 99.99}") in buf (n bytes); KVCAL_ERR_INVALID_ARG when it
 * does not fit. */
kvcal_status kvcal_observer_params_json(const kvcal_observer_config *cfg, char *buf,
                                        size_t n);

/* Threshold t >= 0 of (layer, kv, head) under cfg (see the top of this
 * file). The ema kind needs at least one completed batch
 * (kvcal_stats_end_batch), else KVCAL_ERR_INVALID_ARG. */
kvcal_status kvcal_stats_threshold(const kvcal_stats_t *stats,
                                   const kvcal_observer_config *cfg, int layer, int kv,
                                   int head, float *out);

/* Fraction of the observed values of (layer, kv, head) that clip when
 * quantized with `scale`: |x| / scale > 464, the definition kvcal eval counts
 * with (kvcal_value_clips, core/scale_rule.h), read from the histogram as
 * the counts above kvcal_clip_bound(scale) (linear inside the bin holding
 * it); 0 when nothing was seen. */
double kvcal_stats_clip_fraction(const kvcal_stats_t *stats, int layer, int kv, int head,
                                 float scale);

/* Fills `out` (created with the same layers and kv heads as stats, else
 * KVCAL_ERR_MISMATCH) with the scales of cfg at granularity gran:
 * k_head / v_head = kvcal_scale_from_absmax(t) per head, or for
 * KVCAL_GRANULARITY_TENSOR the layer's t in every head: percentile and mse
 * read the layer's heads as one tensor (their summed histogram), ema the
 * moving average of the tensor's per-batch max (stats->ema_tensor), minmax
 * the max of the heads' t;
 * k_absmax / v_absmax = max |x| seen per head; k_clip / v_clip = fraction of
 * the layer's observed values that clip under the scale written (as
 * kvcal_stats_clip_fraction counts: |x| / scale > 464); granularity;
 * where the statistics observed the queries (q_absmax), q_scale per layer
 * and q_head per query head (kvcal_scales_set_q_heads): max |q| / 448 as
 * kvcal_scale_from_absmax gives it, whatever cfg (a layer whose queries were
 * all 0 gets the floor and one call of warn);
 * provenance.observer, observer_params and num_tokens (the tokens a layer
 * observed); other provenance and model fields are left as they are. A
 * threshold of 0 (a head that never saw a non-zero value) gives the floor
 * scale and one call of warn (may be NULL) naming layer, K/V and head,
 * but in a layer out marks as caching nothing (kvcal_scales_set_uncached:
 * a hybrid model's linear-attention layer, which observes nothing).
 * When out->format is INT8_ASYM (kvcal_scales_set_offsets), each head's
 * scale and offset come from its signed range (the statistics must keep it,
 * kvcal_stats_set_range; per tensor the range over the layer's heads)
 * clipped to [-t, t], by kvcal_int8_asym_params (core/scale_rule.h), and
 * no clipping estimate is kept. */
kvcal_status kvcal_stats_to_scales(const kvcal_stats_t *stats,
                                   const kvcal_observer_config *cfg,
                                   kvcal_granularity gran, kvcal_scales_t *out,
                                   kvcal_warn_fn warn, void *warn_ctx);

#ifdef __cplusplus
}
#endif

#endif
