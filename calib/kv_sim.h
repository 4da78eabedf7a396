/* calib/kv_sim.h: the simulated FP8 KV cache of `kvcal eval`, written once
 * for every backend: at each layer's cache point the executor hands K and V
 * to it, and it quantizes them to e4m3 through the library's online
 * quantization (include/kvcal_quant.h) in the evaluated mode, dequantizes
 * them back (what attention then reads, as an engine with an FP8 cache
 * computes) and measures what the round trip costs. The backend supplies
 * the buffers and the device (calib/backend.h). */
#ifndef KVCAL_CALIB_KV_SIM_H
#define KVCAL_CALIB_KV_SIM_H

#include "calib/backend.h"
#include "core/scales.h"
#include "kvcal.h"

/* What an evaluation does to K and V before attention. */
typedef enum kvcal_kv_sim_mode {
    KVCAL_KV_SIM_EXACT = 0,      /* K/V as computed: the baseline */
    KVCAL_KV_SIM_STATIC = 1,     /* fixed per-head scales per layer */
    KVCAL_KV_SIM_DYNAMIC = 2,    /* a scale per (token, kv head) */
    KVCAL_KV_SIM_FIRST_BATCH = 3 /* per-head scales of the first batch's absmax */
} kvcal_kv_sim_mode;

typedef struct kvcal_kv_sim_config {
    kvcal_kv_sim_mode mode;
    /* (layers, kv_heads) host arrays, finite and > 0, for STATIC; NULL
     * otherwise (copied by kvcal_kv_sim_create) */
    const float *k_scale, *v_scale;
    /* (layers) 1 where the layer's cache is simulated, 0 where K and V
     * stay exact (its sums stay 0); NULL: every layer (copied) */
    const unsigned char *layers;
} kvcal_kv_sim_config;

/* Where the static scales of a scale set come from. */
typedef enum kvcal_kv_scales_kind {
    KVCAL_KV_SCALES_TENSOR = 0, /* one K and one V scale per layer */
    KVCAL_KV_SCALES_HEAD = 1,   /* per kv head */
    KVCAL_KV_SCALES_UNIT = 2    /* every scale 1.0: engines without a scales file */
} kvcal_kv_scales_kind;

/* k_scale and v_scale (layers, kv_heads) of `kind` from scales (unused for
 * UNIT, may be NULL then). */
void kvcal_kv_sim_static_scales(const kvcal_scales_t *scales, kvcal_kv_scales_kind kind,
                                int layers, int kv_heads, float *k_scale,
                                float *v_scale);

typedef struct kvcal_kv_sim kvcal_kv_sim_t;

/* Prepares a simulation on be (borrowed; it must outlive the simulation):
 * its scratch, the static scales on the backend's device, a first-batch
 * scaler per layer. A mode other than EXACT is required; a bad static
 * scale is KVCAL_ERR_INVALID_ARG naming the layer and head. *out = NULL on
 * failure. */
kvcal_status kvcal_kv_sim_create(kvcal_backend *be, const kvcal_kv_sim_config *cfg,
                                 kvcal_kv_sim_t **out);

/* Frees; NULL is a no-op. */
void kvcal_kv_sim_destroy(kvcal_kv_sim_t *s);

/* At layer l's cache point (op, whose K and V the backend holds): the
 * exact attention kept for comparison, K and V quantized and dequantized
 * in place, their errors added to the layer's sums. */
kvcal_status kvcal_kv_sim_cache_point(kvcal_kv_sim_t *s, int layer, const kvcal_op *op);

/* After layer l's attention op (op) on the round trip: its error against
 * the exact attention added to the layer's sums. */
kvcal_status kvcal_kv_sim_after_attention(kvcal_kv_sim_t *s, int layer,
                                          const kvcal_op *op);

/* Adds every layer's sums into sums (layers) and zeroes them. */
kvcal_status kvcal_kv_sim_collect(kvcal_kv_sim_t *s, kvcal_eval_layer_sums *sums);

#endif
