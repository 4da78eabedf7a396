/* calib/kv_sim.h: the simulated low-precision KV cache of `kvcal eval`,
 * written once for every backend: at each layer's cache point the executor
 * hands K and V to it, and it quantizes them (e4m3, or another cache format
 * of kvcal_kv_format) through the library's online quantization
 * (include/kvcal_quant.h) in the evaluated mode, dequantizes them back
 * (what attention then reads, as an engine with that cache computes) and
 * measures what the round trip costs. The backend supplies the buffers and
 * the device (calib/backend.h). Also here: the cache modes beyond e4m3 that
 * eval offers, and what each costs in bytes per token. */
#ifndef KVCAL_CALIB_KV_SIM_H
#define KVCAL_CALIB_KV_SIM_H

#include "calib/backend.h"
#include "core/scales.h"
#include "kvcal.h"

/* What an evaluation does to K and V before attention. */
typedef enum kvcal_kv_sim_mode {
    KVCAL_KV_SIM_EXACT = 0,       /* K/V as computed: the baseline */
    KVCAL_KV_SIM_STATIC = 1,      /* fixed per-head scales per layer */
    KVCAL_KV_SIM_DYNAMIC = 2,     /* a scale per (token, kv head) */
    KVCAL_KV_SIM_FIRST_BATCH = 3, /* per-head scales of the first batch's absmax */
    KVCAL_KV_SIM_CAST = 4,        /* no scale at all (fp8 e5m2) */
    KVCAL_KV_SIM_DS_MLA = 5       /* an MLA entry in vLLM's fp8_ds_mla: the latent
                                     in e4m3 under a dynamic scale per 128 values,
                                     the RoPE part in bf16 (MLA models only) */
} kvcal_kv_sim_mode;

typedef struct kvcal_kv_sim_config {
    kvcal_kv_sim_mode mode;
    /* (layers, kv_heads) host arrays, finite and > 0, for STATIC; NULL
     * otherwise (copied by kvcal_kv_sim_create). They are e4m3 scales
     * (absmax / 448, core/scale_rule.h), whatever the format: the
     * simulation turns each into the format's (int8: absmax / 127; NVFP4's
     * global scale: absmax / (6 * 448), ModelOpt's); for INT8_ASYM they
     * are the format's own (range / 255), beside k_zero / v_zero. */
    const float *k_scale, *v_scale;
    /* (layers, kv_heads) host arrays, finite, for a STATIC INT8_ASYM cache
     * (the library's zero points: the value code 0 stands for); NULL
     * otherwise (copied) */
    const float *k_zero, *v_zero;
    /* The cache format (0: e4m3, the modes above) and, for int8, how it
     * rounds. FIRST_BATCH is e4m3's alone, CAST e5m2's; NVFP4 is static. */
    kvcal_kv_format format;
    kvcal_kv_rounding rounding;
    /* (layers, kv_heads) host array, finite and > 0, or NULL: the query's
     * static scale per layer and kv-head group; set, the batch's queries
     * go through e4m3 under it, each query head under its group's, before
     * attention (FlashAttention 3 with an fp8 cache; e4m3 only) */
    const float *q_scale;
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
 * UNIT, may be NULL then), e4m3's: a set of zero points (INT8_ASYM) gives
 * each head the largest |x| of its range (kvcal_scales_head_range_absmax)
 * over 448. */
void kvcal_kv_sim_static_scales(const kvcal_scales_t *scales, kvcal_kv_scales_kind kind,
                                int layers, int kv_heads, float *k_scale,
                                float *v_scale);

/* A cache mode of `kvcal eval` beyond e4m3's (calib/kv_sim.c holds the
 * table): its name on the command line, what it is, and its configuration
 * (static modes take their scales of `kind` from --scales). */
typedef struct kvcal_kv_sim_cache_mode {
    const char *name, *help;
    kvcal_kv_sim_mode mode;
    kvcal_kv_scales_kind kind;
    kvcal_kv_format format;
    kvcal_kv_rounding rounding;
    int fp8_query; /* the query in e4m3 too: q_scale, or 1.0 without one (vLLM) */
} kvcal_kv_sim_cache_mode;

#define KVCAL_KV_SIM_CACHE_MODES 10
extern const kvcal_kv_sim_cache_mode kvcal_kv_sim_cache_modes[KVCAL_KV_SIM_CACHE_MODES];

/* What the query's scale of an fp8_query mode is, per layer and kv-head
 * group, as vLLM 0.32.0 reads the set. */
typedef enum kvcal_kv_sim_q_source {
    KVCAL_KV_SIM_Q_NONE = 0,      /* the mode quantizes no query */
    KVCAL_KV_SIM_Q_PER_HEAD = 1,  /* per query head, reduced per kv-head group by max */
    KVCAL_KV_SIM_Q_PER_LAYER = 2, /* the layer's q_scale */
    KVCAL_KV_SIM_Q_UNIT = 3       /* none in the set: 1.0 (schemas/README.md) */
} kvcal_kv_sim_q_source;

/* The configuration of cache mode m; scratch (5, layers, kv_heads) floats
 * receives its static scales (K, V), zero points (K, V) and the query's
 * scales from scales (a static mode needs them): the set's per query head
 * q scales reduced to one per kv-head group by their max, else its layer's
 * q_scale, else 1.0, what vLLM quantizes the query under then (*q_source,
 * may be NULL, says which). */
kvcal_kv_sim_config kvcal_kv_sim_cache_mode_config(const kvcal_kv_sim_cache_mode *m,
                                                   const kvcal_scales_t *scales,
                                                   int layers, int kv_heads,
                                                   float *scratch,
                                                   kvcal_kv_sim_q_source *q_source);

/* Bytes the KV cache of a model takes per token under cfg, every layer's K
 * and V (an MLA layer's one entry): the values (EXACT: a bf16 cache; e4m3,
 * e5m2 and int8 one byte; NVFP4 9/16 of a byte with its block scales;
 * fp8_ds_mla a byte per latent value, an fp32 scale per 128 of them and the
 * RoPE part in bf16) and the per (token, head) parameters dynamic modes keep
 * beside them (fp32 scales, and zero points for int8 with zero points);
 * static scales cost no byte per token. */
double kvcal_kv_sim_bytes_per_token(const kvcal_model_desc *d,
                                    const kvcal_kv_sim_config *cfg);

typedef struct kvcal_kv_sim kvcal_kv_sim_t;

/* Prepares a simulation on be (borrowed; it must outlive the simulation):
 * its scratch, the static scales on the backend's device, a first-batch
 * scaler per layer. A mode other than EXACT is required; a bad static
 * scale is KVCAL_ERR_INVALID_ARG naming the layer and head. On an MLA
 * model (desc->mla) the entry is cached once under the K scale (vLLM's
 * concat_and_cache_mla): static V scales are the K ones; DS_MLA needs an
 * MLA model, and a query in FP8 is refused there (vLLM quantizes MLA's
 * absorbed query, which kvcal does not compute). *out = NULL on failure. */
kvcal_status kvcal_kv_sim_create(kvcal_backend *be, const kvcal_kv_sim_config *cfg,
                                 kvcal_kv_sim_t **out);

/* Frees; NULL is a no-op. */
void kvcal_kv_sim_destroy(kvcal_kv_sim_t *s);

/* At layer l's cache point (K and V as the backend holds them there): the
 * exact attention of the layer's attention op (attn: its sinks) kept for
 * comparison, K and V quantized and dequantized in place, their errors
 * added to the layer's sums. */
kvcal_status kvcal_kv_sim_cache_point(kvcal_kv_sim_t *s, int layer, const kvcal_op *attn);

/* After layer l's attention op (op) on the round trip: its error against
 * the exact attention added to the layer's sums. */
kvcal_status kvcal_kv_sim_after_attention(kvcal_kv_sim_t *s, int layer,
                                          const kvcal_op *op);

/* Adds every layer's sums into sums (layers) and zeroes them. */
kvcal_status kvcal_kv_sim_collect(kvcal_kv_sim_t *s, kvcal_eval_layer_sums *sums);

#endif
