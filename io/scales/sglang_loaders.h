/* io/scales/sglang_loaders.h: what sglang 0.5.23's model classes do with a
 * model's K/V scales, by architecture: the legacy scales JSON
 * (--quantization-param-path) and a checkpoint's scale tensors, by the name
 * they have after "<layer>.self_attn.". Read from sglang's own models/
 * (tests/engines/sglang_archs.py, tests/engines/run.py's stand-in loads,
 * both run by make test-engines against the installed sglang). */
#ifndef KVCAL_IO_SCALES_SGLANG_LOADERS_H
#define KVCAL_IO_SCALES_SGLANG_LOADERS_H

/* What sglang's class of an architecture does with a legacy scales file. */
typedef enum {
    KVCAL_SGLANG_LEGACY_READS,   /* load_kv_cache_scales reads it */
    KVCAL_SGLANG_LEGACY_FAILS,   /* it hands the file to a model without one:
                                    AttributeError at start */
    KVCAL_SGLANG_LEGACY_IGNORES, /* that hand-over asks first: a warning, 1.0 */
    KVCAL_SGLANG_LEGACY_REFUSES  /* no load_kv_cache_scales: RuntimeError */
} kvcal_sglang_legacy;

kvcal_sglang_legacy kvcal_sglang_legacy_of(const char *architecture);

/* What sglang's load_weights of an architecture does with a checkpoint's
 * K (or V, or Q) scale named `suffix` after "self_attn." ("k_scale",
 * "attn.k_scale", "k_proj.k_scale", "k_proj.output_scale",
 * "qkv_proj.k_scale", "qkqkv_proj.k_scale"; v and q alike). */
typedef enum {
    KVCAL_SGLANG_UNKNOWN, /* an architecture or a name not read here */
    KVCAL_SGLANG_LOADS,
    KVCAL_SGLANG_SKIPS,    /* no such parameter, logged and skipped: scale 1.0 */
    KVCAL_SGLANG_FAILS,    /* no such parameter, KeyError or AssertionError: the
                              model does not load */
    KVCAL_SGLANG_NO_SCALES /* the attention has no k_scale / v_scale at all (its
                              RadixAttention built without quant_config): every
                              name is skipped, scale 1.0 */
} kvcal_sglang_outcome;

/* The outcome, and in *why (when not NULL; static text) one line saying
 * which sglang code does it. */
kvcal_sglang_outcome kvcal_sglang_checkpoint_scale(const char *architecture,
                                                   const char *suffix, const char **why);

/* The name after "self_attn." under which sglang's loader of the
 * architecture takes a K scale ("k_scale", "attn.k_scale" or
 * "k_proj.k_scale"; V's alike): "k_scale" where any name would do or none
 * loads. */
const char *kvcal_sglang_k_name(const char *architecture);

#endif
