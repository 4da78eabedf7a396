/* kernels/kv_observer.h: one layer's statistics of K and V as the observing
 * op folds them, the same layout in host memory (kvcal_rope_observe_ref,
 * kernels/cpu/ops.h) and in device memory (kvcal_rope_observe_launch,
 * kernels/cuda/ops.h): that layer's slice of kvcal_stats_t
 * (observers/stats.h), binned by core/hist_rule.h. */
#ifndef KVCAL_KERNELS_KV_OBSERVER_H
#define KVCAL_KERNELS_KV_OBSERVER_H

#include <stdint.h>

/* Index [kv] is KVCAL_K or KVCAL_V. The ops fold into them: absmax and
 * batch_absmax by max (a NaN wins: the caller checks for it), hist by
 * adding. */
typedef struct kvcal_kv_observer {
    float *absmax[2];       /* (kv_heads, head_dim) running max |x| */
    uint64_t *hist[2];      /* (kv_heads, KVCAL_HIST_BINS) counts of |x| */
    float *batch_absmax[2]; /* (kv_heads) max |x| of the current batch */
    /* (n_heads) running max |q| of the queries as rotated (and stored), by
     * max (a NaN wins); NULL: the queries are not observed */
    float *q_absmax;
} kvcal_kv_observer;

#endif
