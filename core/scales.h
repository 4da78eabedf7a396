/* core/scales.h: the in-memory scale set (kvcal_scales_t), shared by the
 * observers (which fill it), io/ (which reads and writes it) and calib/.
 *
 * All per-layer arrays live in one slab, freed once. Per-head arrays are
 * (num_layers, num_kv_heads) row-major. */
#ifndef KVCAL_CORE_SCALES_H
#define KVCAL_CORE_SCALES_H

#include "kvcal.h"

#define KVCAL_NAME_MAX 128
#define KVCAL_TEXT_MAX 512

/* Model identity recorded with the scales (empty strings / 0 when unknown). */
typedef struct kvcal_model_identity {
    char architecture[KVCAL_NAME_MAX]; /* "LlamaForCausalLM" */
    char model_type[KVCAL_NAME_MAX];   /* "llama" */
    int num_layers;
    int num_attention_heads;
    int num_kv_heads;
    int head_dim;
} kvcal_model_identity;

/* Where the scales came from (empty / 0 when unknown). */
typedef struct kvcal_provenance {
    char observer[KVCAL_NAME_MAX];        /* "minmax", "ema", "percentile", "mse" */
    char observer_params[KVCAL_TEXT_MAX]; /* JSON object text, "{}" when none */
    char dataset[KVCAL_TEXT_MAX];
    long long num_samples;
    long long num_tokens;
    long long seed;
    char tool_version[KVCAL_NAME_MAX];
} kvcal_provenance;

struct kvcal_scales {
    int num_layers;
    int num_kv_heads;
    kvcal_granularity granularity;
    /* the cache format the scales are for: FP8_E4M3 (absmax / 448, the
     * default), INT8 (absmax / 127), NVFP4 (the global scale, absmax /
     * (6 x 448)) or INT8_ASYM (a scale and an offset per head from the
     * signed range, core/scale_rule.h, k_offset / v_offset below) */
    kvcal_kv_format format;
    int kv_shared;  /* 1 when K and V were one value (legacy input) */
    int has_absmax; /* k_absmax / v_absmax filled */
    int has_clip;   /* k_clip / v_clip filled */
    int has_q;      /* some layer's q_scale was set */
    kvcal_model_identity model;
    kvcal_provenance provenance;
    /* slab-backed arrays */
    float *k_head;   /* (num_layers, num_kv_heads) scales */
    float *v_head;   /* (num_layers, num_kv_heads) scales */
    float *k_absmax; /* (num_layers, num_kv_heads) observed absmax */
    float *v_absmax; /* (num_layers, num_kv_heads) */
    float *k_clip;   /* (num_layers) fraction of values that clip under the
                        scale: |x| / scale > 464 (kvcal_value_clips) */
    float *v_clip;   /* (num_layers) */
    float *q_scale;  /* (num_layers) scale of the query for FP8 attention; 0 = unset.
                        Always e4m3's (absmax / 448), whatever `format`: the query
                        goes through e4m3 with every cache format (vLLM's
                        query_quant, FlashAttention 3) */
    /* multi-head latent attention (one kv head: the entry an MLA layer
     * caches per token, the latent then the RoPE part, under one scale);
     * mla_kv_lora_rank 0 for every other model */
    int mla_kv_lora_rank, mla_rope_dim;
    float *mla_latent_absmax; /* (num_layers) the latent's absmax */
    float *mla_rope_absmax;   /* (num_layers) the RoPE part's */
    void *slab;
    /* added after the first layout, outside the slab: per query head
     * (kvcal_scales_set_q_heads; 0 / NULL: none), e4m3's as q_scale */
    int num_q_heads;
    float *q_head; /* (num_layers, num_q_heads) */
    /* added later, outside the slab: the offsets of an INT8_ASYM set
     * (kvcal_scales_set_offsets; NULL: none), vllm-ascend's kv_cache_offset:
     * q = clamp(round(x / scale + offset), -128, 127), x = (q - offset) *
     * scale; integers in [-128, 127] */
    float *k_offset; /* (num_layers, num_kv_heads) */
    float *v_offset; /* (num_layers, num_kv_heads) */
    /* added later, outside the slab: 1 for a layer that caches nothing (a
     * hybrid model's linear-attention layer), whose scales no engine reads
     * and no file that names layers holds (kvcal_scales_set_uncached); NULL:
     * every layer caches */
    unsigned char *uncached; /* (num_layers) */
};

/* Index of (layer, head) in the per-head arrays. */
static inline int kvcal_scales_index(const kvcal_scales_t *s, int layer, int head)
{
    return layer * s->num_kv_heads + head;
}

/* absmax / scale of the scale sets of `format`: 448 (e4m3), 127 (int8),
 * 2688 (NVFP4's global scale); for INT8_ASYM the range over the scale,
 * (max - min) / scale = 255; 0 for e5m2, which no scale set holds. */
float kvcal_scales_format_qmax(kvcal_kv_format format);

/* Rescales a set of e4m3 scales (absmax / 448, s->format FP8_E4M3) to
 * format's (absmax / qmax), every K and V scale (the query's stay e4m3's),
 * and drops the
 * clipping estimates (they count e4m3's clipping). KVCAL_ERR_UNSUPPORTED
 * for e5m2 and for INT8_ASYM, whose scales come from the signed range
 * (kvcal_stats_to_scales). */
kvcal_status kvcal_scales_rescale(kvcal_scales_t *s, kvcal_kv_format format);

/* on 1: makes room for the offsets of an INT8_ASYM set (k_offset,
 * v_offset, zeroed) and sets s->format to INT8_ASYM; a second call keeps
 * them. 0 drops them (s->format becomes INT8). */
kvcal_status kvcal_scales_set_offsets(kvcal_scales_t *s, int on);

/* The largest |x| of (layer, head)'s K (kv 0) or V (1) range under an
 * INT8_ASYM set: max((offset + 128) * scale, (127 - offset) * scale); for
 * another set, the scale times kvcal_scales_format_qmax. */
float kvcal_scales_head_range_absmax(const kvcal_scales_t *s, int layer, int head,
                                     int kv);

/* Marks layer `layer` as one that caches nothing (kvcal_scales' uncached). */
kvcal_status kvcal_scales_set_uncached(kvcal_scales_t *s, int layer);

/* The layers marked by kvcal_scales_set_uncached. */
int kvcal_scales_uncached_layers(const kvcal_scales_t *s);

/* Whether layer l caches K and V (not marked uncached). */
static inline int kvcal_scales_layer_cached(const kvcal_scales_t *s, int l)
{
    return !s->uncached || !s->uncached[l];
}

/* Makes room for per query head scales (q_head, zeroed; num_q_heads in [1,
 * 65536], a multiple of the kv heads); 0 drops them. */
kvcal_status kvcal_scales_set_q_heads(kvcal_scales_t *s, int num_q_heads);

/* Checks every scale is finite and > 0, and every offset (INT8_ASYM) an
 * integer in [-128, 127]; on failure names layer and head. `what` prefixes
 * the message (usually a file name). */
kvcal_status kvcal_scales_check_finite(const kvcal_scales_t *s, const char *what);

#endif
