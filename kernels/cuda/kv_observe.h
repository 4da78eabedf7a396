/* kernels/cuda/kv_observe.h: the device side of the public calibrator
 * (include/kvcal_calibrate.h, observers/calibrator.c): an engine's K and V
 * rows folded into statistics held on the device in the layout of
 * observers/stats.h (whose CPU reference, kvcal_stats_observe_ref, they
 * match bit for bit: per-channel absmax and per-head step absmax by max,
 * histograms binned by core/hist_rule.h, tokens counted on K), and the end
 * of a step (the moving average of kvcal_stats_end_batch, in the same
 * double arithmetic). In a build without CUDA, kernels/nocuda.c returns
 * KVCAL_ERR_NO_DEVICE. */
#ifndef KVCAL_KERNELS_CUDA_KV_OBSERVE_H
#define KVCAL_KERNELS_CUDA_KV_OBSERVE_H

#include <stdint.h>

#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The first non-finite value observed (flag 0: none). */
typedef struct kvcal_kv_observe_error {
    int32_t flag;
    int32_t layer;
    int32_t kv; /* KVCAL_K or KVCAL_V */
    int32_t head;
    int64_t token;
    int32_t channel;
    float value;
} kvcal_kv_observe_error;

/* What a calibrator keeps beside the statistics' slab (the host fields of
 * kvcal_stats_t, and the error). */
typedef struct kvcal_kv_observe_aux {
    int64_t batches;
    int64_t batch_start_tokens;
    kvcal_kv_observe_error err;
} kvcal_kv_observe_aux;

/* Device pointers into one statistics slab (observers/stats.h's arrays;
 * index [kv] is KVCAL_K or KVCAL_V) and its aux. */
typedef struct kvcal_kv_stats_device {
    float *absmax[2];       /* (L, H, head_dim) */
    uint64_t *hist[2];      /* (L, H, KVCAL_HIST_BINS) */
    float *batch_absmax[2]; /* (L, H) */
    double *ema[2];         /* (L, H) */
    double *ema_tensor[2];  /* (L) */
    int64_t *tokens;        /* (L) */
    kvcal_kv_observe_aux *aux;
    int num_layers;
    int num_kv_heads;
    int head_dim;
} kvcal_kv_stats_device;

/* Folds batch's K and V rows (device pointers; slot_mapping NULL: every
 * token, a negative slot: padding) into layer `layer` of s, on stream.
 * Non-finite values are skipped and the first one is recorded in
 * s->aux->err. Arguments are checked by the caller. */
kvcal_status kvcal_kv_observe_launch(const kvcal_kv_batch *batch, int layer,
                                     const kvcal_kv_stats_device *s,
                                     struct CUstream_st *stream);

/* One layer's signed range on the device, (num_kv_heads, head_dim) each
 * per K/V: max(x, 0) and max(-x, 0), float bits folded by atomicMax (so a
 * zeroed array starts the range at 0, as observers/stats.h's min and max:
 * min = -neg_min). */
typedef struct kvcal_kv_range {
    float *max[2];
    float *neg_min[2];
} kvcal_kv_range;

/* Folds batch's K and V rows (device pointers, any dtype; slot_mapping as
 * kvcal_kv_observe_launch reads it) into r on stream: what
 * kvcal_stats_observe_ref folds into min and max, bit for bit. Non-finite
 * values are skipped (the observer reports them). */
kvcal_status kvcal_kv_range_launch(const kvcal_kv_batch *batch, int head_dim,
                                   int num_kv_heads, const kvcal_kv_range *r,
                                   struct CUstream_st *stream);

/* kvcal_stats_end_batch(decay) on the device statistics, one block on
 * stream. decay in [0, 1) (checked by the caller). */
kvcal_status kvcal_kv_observe_end_batch_launch(const kvcal_kv_stats_device *s,
                                               double decay, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif
