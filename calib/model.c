/* calib/model.c: model description and per-layer fp32 weights from a Hugging
 * Face checkpoint or a llama2.c file. */
#include "calib/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"
#include "io/checkpoint/llama2c.h"
#include "io/checkpoint/model_config.h"
#include "io/checkpoint/mxfp4.h"
#include "io/checkpoint/safetensors.h"
#include "io/file_read.h"
#include "io/path.h"
#include "kernels/moe_limits.h"

struct kvcal_model {
    kvcal_model_desc desc;
    char path[4096];
    kvcal_checkpoint_t *ck;     /* HF source */
    kvcal_model_fp8_t *fp8;     /* its FP8 weights (HF source) */
    float *fp8_scratch;         /* the scales of one FP8 weight */
    kvcal_llama2c_t *l2c;       /* llama2.c source */
    float *inv_freq;            /* (rot_dim / 2) */
    float *inv_freq_sliding;    /* (rot_dim / 2) or NULL */
    int *layer_window;          /* (num_layers) */
    unsigned char *layer_dense; /* (num_layers) */
    unsigned char *layer_linear; /* (num_layers) */
    unsigned char *layer_nope;   /* (num_layers) */
    float *layer_buf;           /* one layer, fp32, logical weights in order */
    float *head_buf;            /* final norm (hidden) + lm_head (vocab, hidden) */
    const float *final_norm;
    const float *lm_head;
};

// --- RoPE frequencies -------------------------------------------------------

/* inv_freq[i] = 1 / theta^(2i / rot_dim), in float as Hugging Face and
 * llama2.c compute it. */
static void rope_default(float *inv_freq, int rot_dim, double theta)
{
    for (int i = 0; i < rot_dim / 2; i++)
        inv_freq[i] = 1.0f / powf((float)theta, (float)(2 * i) / (float)rot_dim);
}

/* Llama 3.1 frequency scaling: long wavelengths divided by factor, short ones
 * kept, the band between smoothly interpolated. */
static void rope_llama3(float *inv_freq, int n, const kvcal_model_config *c)
{
    double old_ctx = c->rope_original_max_position;
    double lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
    double lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
    for (int i = 0; i < n; i++) {
        double f = inv_freq[i], wavelen = 2.0 * M_PI / f;
        if (wavelen > lo_wavelen) {
            f /= c->rope_factor;
        } else if (wavelen >= hi_wavelen && hi > lo) {
            double smooth = (old_ctx / wavelen - lo) / (hi - lo);
            f = (1.0 - smooth) * f / c->rope_factor + smooth * f;
        }
        inv_freq[i] = (float)f;
    }
}

/* transformers' find_correction_dim: the dimension whose wavelength turns
 * `rotations` times over `context` positions. */
static double yarn_correction_dim(double rotations, int dim, double theta, int context)
{
    return dim * log(context / (rotations * 2.0 * M_PI)) / (2.0 * log(theta));
}

/* YaRN (transformers' _compute_yarn_parameters): each frequency blends the
 * interpolated one (divided by factor) and the original one with a linear
 * ramp over the dimensions between the correction range of beta_fast and
 * beta_slow rotations in the original context. Float arithmetic in the
 * order torch evaluates it in fp32. */
static void rope_yarn(float *inv_freq, int rot_dim, double theta,
                      const kvcal_model_config *c)
{
    double low = yarn_correction_dim(c->rope_beta_fast, rot_dim, theta,
                                     c->rope_original_max_position);
    double high = yarn_correction_dim(c->rope_beta_slow, rot_dim, theta,
                                      c->rope_original_max_position);
    if (c->rope_truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = fmax(low, 0.0);
    high = fmin(high, (double)(rot_dim - 1));
    if (low == high)
        high += 0.001; /* transformers: prevents a division by zero */
    float lo = (float)low, span = (float)(high - low), factor = (float)c->rope_factor;
    for (int i = 0; i < rot_dim / 2; i++) {
        float pos_freq = powf((float)theta, (float)(2 * i) / (float)rot_dim);
        float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
        float ramp = fminf(fmaxf(((float)i - lo) / span, 0.0f), 1.0f);
        float keep = 1.0f - ramp; /* weight of the original frequency */
        inv_freq[i] = interpolation * (1.0f - keep) + extrapolation * keep;
    }
}

// --- Hugging Face checkpoints ----------------------------------------------

static int is_weight_dtype(kvcal_dtype d)
{
    return d == KVCAL_DTYPE_F32 || d == KVCAL_DTYPE_F16 || d == KVCAL_DTYPE_BF16;
}

/* "[2, 3]" of n sizes into buf (cap bytes). */
static const char *shape_text(char *buf, size_t cap, const int64_t *shape, int n)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "",
                                (long long)shape[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
    return buf;
}

/* Checks one tensor: present, shape want (ndim sizes), floating (F8_E4M3
 * too where fp8; U8 when bytes: an MXFP4 tensor's blocks or scales). */
static kvcal_status check_shape(const kvcal_model_t *m, const char *name,
                                const int64_t *want, int ndim, int bytes, int fp8,
                                const kvcal_tensor_info **out)
{
    const kvcal_tensor_info *t = kvcal_checkpoint_find(m->ck, name);
    *out = t;
    if (!t)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: tensor %s is missing (the %s config needs it); is the "
                          "checkpoint complete and of this architecture?",
                          m->path, name, m->desc.architecture);
    if (bytes ? t->dtype != KVCAL_DTYPE_U8
              : !is_weight_dtype(t->dtype) && !(fp8 && t->dtype == KVCAL_DTYPE_F8_E4M3))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; %s", m->path, name,
            kvcal_dtype_name(t->dtype) ? kvcal_dtype_name(t->dtype) : "?",
            bytes ? "an MXFP4 tensor's blocks and scales are U8 (is the checkpoint "
                    "complete?)"
                  : "kvcal runs F32, F16 and BF16 weights, F8_E4M3 ones its "
                    "quantization_config scales, and MXFP4 experts (use another "
                    "checkpoint)");
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == want[i];
    if (!ok) {
        char got[128], exp[128];
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: tensor %s has shape %s, config.json implies %s", m->path,
                          name, shape_text(got, sizeof got, t->shape, t->ndim),
                          shape_text(exp, sizeof exp, want, ndim));
    }
    return KVCAL_OK;
}

/* Checks one tensor: present, floating (F8_E4M3 too where fp8), shape
 * (rows[, cols]). */
static kvcal_status check_tensor(const kvcal_model_t *m, const char *name, int64_t rows,
                                 int64_t cols, int fp8, const kvcal_tensor_info **out)
{
    const int64_t want[2] = {rows, cols};
    return check_shape(m, name, want, cols ? 2 : 1, 0, fp8, out);
}

/* The model-level tensor `name` (a family's "model.norm.weight") where the
 * checkpoint keeps it. */
static const kvcal_tensor_info *find_top(const kvcal_model_t *m, const char *name)
{
    char full[256];
    kvcal_model_top_name(full, sizeof full, &m->desc, name);
    return kvcal_checkpoint_find(m->ck, full);
}

/* check_tensor of the model-level tensor `name`. */
static kvcal_status check_top(const kvcal_model_t *m, const char *name, int64_t rows,
                              int64_t cols)
{
    char full[256];
    const kvcal_tensor_info *t;
    kvcal_model_top_name(full, sizeof full, &m->desc, name);
    return check_tensor(m, full, rows, cols, 0, &t);
}

/* Describes m as family f (NULL: the family of c's architecture) runs it. */
static kvcal_status describe_family(kvcal_model_t *m, const kvcal_model_config *c,
                                    const kvcal_arch *f)
{
    kvcal_model_desc *d = &m->desc;
    const kvcal_arch *fam = f ? f : kvcal_arch_find(c->architecture);
    /* a family with linear-attention layers runs those; any other kind of
       layer that caches nothing is not run yet */
    if (c->no_kv_layer_types[0] &&
        !(fam && fam->linear_layer && !strcmp(c->no_kv_layer_types, "linear_attention")))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: %s is a hybrid model (%d of %d layers attend and cache K "
                          "and V, the others are %s), which is not supported yet: kvcal "
                          "has no %s layers to run between its attention layers",
                          m->path, c->architecture, c->kv_layers, c->num_layers,
                          c->no_kv_layer_types, c->no_kv_layer_types);
    if (c->kv_layout == KVCAL_KV_UNKNOWN)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: config.json: layer_types[%d] is '%s', a kind of layer "
                          "kvcal does not know; it runs full_attention and "
                          "sliding_attention layers%s (fix the entry)",
                          m->path, c->unknown_layer, c->unknown_layer_type,
                          fam && fam->linear_layer
                              ? ", and linear_attention ones between them in this family"
                              : "");
    d->arch = fam;
    if (!d->arch && kvcal_arch_missing(c->architecture))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: %s is not supported yet: kvcal lacks %s", m->path,
                          c->architecture, kvcal_arch_missing(c->architecture));
    if (!d->arch) {
        char list[1536];
        kvcal_arch_list(list, sizeof list);
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: architecture '%s' (model_type '%s') is not supported; "
                          "kvcal runs %s",
                          m->path, c->architecture, c->model_type, list);
    }
    snprintf(d->architecture, sizeof d->architecture, "%s", c->architecture);
    snprintf(d->model_type, sizeof d->model_type, "%s", c->model_type);
    snprintf(d->source, sizeof d->source, "hf");
    d->num_layers = c->num_layers;
    d->hidden_size = c->hidden_size;
    d->intermediate_size = c->intermediate_size;
    d->num_heads = c->num_attention_heads;
    d->num_kv_heads = c->num_kv_heads;
    d->head_dim = c->head_dim;
    d->vocab_size = c->vocab_size;
    d->max_seq_len = c->max_position_embeddings;
    d->norm_eps = (float)c->rms_norm_eps;
    d->tied_embeddings = c->tie_word_embeddings;
    /* the layers that slide: layer_types' sliding layers, else Qwen2 /
     * Qwen3's from max_window_layers on, else every layer */
    if (c->num_layers > 0 &&
        !(m->layer_window = calloc((size_t)c->num_layers, sizeof(int))))
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", m->path);
    for (int l = 0; l < c->num_layers && c->sliding_window > 0; l++) {
        const int slides = c->layer_types_given ? (c->layer_sliding[l / 8] >> (l % 8)) & 1
                           : c->max_window_layers >= 0 ? l >= c->max_window_layers
                                                       : 1;
        m->layer_window[l] = slides ? c->sliding_window : 0;
    }
    d->sliding_window = c->sliding_window;
    d->layer_window = m->layer_window;
    d->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (c->query_pre_attn_scalar > 0)
        d->attn_scale = (float)(1.0 / sqrt(c->query_pre_attn_scalar));
    d->embed_scale = 1.0f;
    d->residual_scale = d->logit_divisor = 1.0f;
    if (c->embedding_multiplier > 0) { /* Granite's four multipliers (0 elsewhere) */
        d->embed_scale = (float)c->embedding_multiplier;
        d->attn_scale = (float)c->attention_multiplier;
        d->residual_scale = (float)c->residual_multiplier;
        d->logit_divisor = (float)c->logits_scaling;
    }
    d->num_experts = c->num_experts;
    d->experts_per_tok = c->num_experts_per_tok;
    d->moe_intermediate_size = c->moe_intermediate_size;
    d->shared_intermediate_size = c->shared_expert_intermediate_size;
    d->norm_topk_prob = c->norm_topk_prob;
    d->moe_sigmoid = c->moe_sigmoid;
    d->moe_softmax_bias = c->moe_softmax_bias;
    d->routed_scale =
        c->routed_scaling_factor > 0 ? (float)c->routed_scaling_factor : 1.0f;
    if (!(m->layer_dense = calloc((size_t)(c->num_layers > 0 ? c->num_layers : 1), 1)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", m->path);
    for (int l = 0; c->num_experts && l < c->num_layers; l++)
        m->layer_dense[l] = (c->layer_dense[l / 8] >> (l % 8)) & 1;
    d->layer_dense = m->layer_dense;
    d->dense_layers = c->num_experts ? c->dense_layers : 0;
    if (!(m->layer_linear = calloc((size_t)(c->num_layers > 0 ? c->num_layers : 1), 1)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", m->path);
    for (int l = 0; d->arch->linear_layer && l < c->num_layers; l++)
        d->linear_layers += m->layer_linear[l] = (c->layer_linear[l / 8] >> (l % 8)) & 1;
    d->layer_linear = m->layer_linear;
    if (c->nope_layers) {
        if (!(m->layer_nope = calloc((size_t)c->num_layers, 1)))
            return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", m->path);
        for (int l = 0; l < c->num_layers; l++)
            m->layer_nope[l] = (c->layer_nope[l / 8] >> (l % 8)) & 1;
        d->layer_nope = m->layer_nope;
    }
    d->lin_k_heads = c->linear_num_key_heads;
    d->lin_v_heads = c->linear_num_value_heads;
    d->lin_k_head_dim = c->linear_key_head_dim;
    d->lin_v_head_dim = c->linear_value_head_dim;
    d->lin_conv = c->linear_conv_kernel_dim;
    d->moe_groups = c->moe_groups > 0 ? c->moe_groups : 1;
    d->moe_topk_groups = c->moe_topk_groups > 0 ? c->moe_topk_groups : 1;
    d->moe_group_max = c->moe_group_max;
    kvcal_status st = d->arch->describe(c, d);
    if (st)
        return kvcal_fail_context(st, "%s: ", m->path);
    if (c->kv_layout == KVCAL_KV_MLA && !d->mla)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: %s with MLA attention (kv_lora_rank %d, rope %d) is not "
                          "supported: kvcal runs MLA for DeepseekV2ForCausalLM, "
                          "DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM, "
                          "DeepseekV32ForCausalLM and GlmMoeDsaForCausalLM",
                          m->path, c->architecture, c->kv_lora_rank, c->qk_rope_head_dim);
    if (d->num_layers <= 0 || d->hidden_size <= 0 || d->intermediate_size <= 0 ||
        d->num_heads <= 0 || d->num_kv_heads <= 0 || d->head_dim <= 0 ||
        d->vocab_size <= 0 || d->max_seq_len <= 0 || d->num_heads % d->num_kv_heads)
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: config.json sizes do not make a model: layers %d, hidden %d, "
            "intermediate %d, heads %d, kv heads %d (must divide heads), "
            "head_dim %d, vocab %d, max_position_embeddings %d",
            m->path, d->num_layers, d->hidden_size, d->intermediate_size, d->num_heads,
            d->num_kv_heads, d->head_dim, d->vocab_size, d->max_seq_len);
    double prf = c->partial_rotary_factor > 0 ? c->partial_rotary_factor : 1.0;
    d->rot_dim = d->mla ? d->qk_rope_head_dim : (int)(d->head_dim * prf);
    if (d->mla && (d->rot_dim < 2 || d->rot_dim % 2))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: config.json: qk_rope_head_dim %d: the rotated part of an "
                          "MLA head must be a positive even number; fix the value",
                          m->path, d->rot_dim);
    if (d->rot_dim < 2 || d->rot_dim % 2 || d->rot_dim > d->head_dim)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: partial_rotary_factor %g gives %d rotated channels of "
                          "head_dim %d; it must be a positive even number",
                          m->path, prf, d->rot_dim, d->head_dim);
    /* vLLM's DeepSeek rotary: is_neox_style False; a family's own (Llama 4) */
    d->rope_interleaved = d->rope_interleaved || d->mla;
    d->rope_attention_factor = 1.0f;
    m->inv_freq = malloc(sizeof(float) * (size_t)(d->rot_dim / 2));
    if (!m->inv_freq)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", m->path);
    rope_default(m->inv_freq, d->rot_dim, c->rope_theta > 0 ? c->rope_theta : 10000.0);
    switch (c->rope_type) {
    case KVCAL_ROPE_DEFAULT:
    case KVCAL_ROPE_DYNAMIC: /* equals default up to max_position_embeddings */
        break;
    case KVCAL_ROPE_LINEAR:
        if (!(c->rope_factor > 0))
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: linear rope scaling needs factor > 0", m->path);
        for (int i = 0; i < d->rot_dim / 2; i++)
            m->inv_freq[i] = (float)(m->inv_freq[i] / c->rope_factor);
        break;
    case KVCAL_ROPE_LLAMA3:
        if (!(c->rope_factor > 0) ||
            !(c->rope_high_freq_factor >= c->rope_low_freq_factor) ||
            !(c->rope_low_freq_factor > 0) || c->rope_original_max_position <= 0)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: llama3 rope scaling needs factor > 0, "
                              "0 < low_freq_factor <= high_freq_factor and "
                              "original_max_position_embeddings > 0",
                              m->path);
        rope_llama3(m->inv_freq, d->rot_dim / 2, c);
        break;
    case KVCAL_ROPE_YARN:
        if (!(c->rope_factor >= 1.0) || c->rope_original_max_position <= 0 ||
            !(c->rope_beta_fast > 0) || !(c->rope_beta_slow > 0) ||
            !(c->rope_attention_factor > 0))
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: yarn rope scaling needs factor >= 1, "
                              "original_max_position_embeddings > 0, beta_fast and "
                              "beta_slow > 0 and an attention factor > 0",
                              m->path);
        rope_yarn(m->inv_freq, d->rot_dim, c->rope_theta > 0 ? c->rope_theta : 10000.0,
                  c);
        d->rope_attention_factor = (float)c->rope_attention_factor;
        break;
    case KVCAL_ROPE_LONGROPE:
        if (c->rope_ext_factors != d->rot_dim / 2)
            return kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: longrope's %s has %d entries, but %d channel pairs "
                "rotate (head_dim %d x partial_rotary_factor); fix the list",
                m->path, c->rope_ext_long ? "long_factor" : "short_factor",
                c->rope_ext_factors, d->rot_dim / 2, d->head_dim);
        for (int i = 0; i < d->rot_dim / 2; i++) {
            const float theta = (float)(c->rope_theta > 0 ? c->rope_theta : 10000.0);
            m->inv_freq[i] = 1.0f / (c->rope_ext_factor[i] *
                                     powf(theta, (float)(2 * i) / (float)d->rot_dim));
        }
        d->rope_attention_factor = (float)c->rope_attention_factor;
        break;
    default:
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: rope scaling type '%s' is not supported; supported: "
                          "default, linear, llama3, dynamic, yarn, longrope",
                          m->path, c->rope_type_name);
    }
    d->inv_freq = m->inv_freq;
    if (c->rope_sliding_theta > 0) {
        if (!(m->inv_freq_sliding = malloc(sizeof(float) * (size_t)(d->rot_dim / 2))))
            return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", m->path);
        rope_default(m->inv_freq_sliding, d->rot_dim, c->rope_sliding_theta);
        d->inv_freq_sliding = m->inv_freq_sliding;
    }
    return KVCAL_OK;
}

/* A multimodal wrapper's language model (calib/arch.h's table) is
 * described as its family's architecture; d keeps the wrapper's name. */
static kvcal_status describe_hf(kvcal_model_t *m, const kvcal_model_config *c)
{
    const kvcal_arch_wrapper *w = kvcal_arch_wrapper_find(c->architecture, c->model_type);
    if (!w)
        return describe_family(m, c, NULL);
    const int flat = w->flat_model_type && !strcmp(c->model_type, w->flat_model_type);
    if (!c->text_config && !flat)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: config.json: %s with its language model's fields at the "
                          "top level, not in text_config as transformers writes them "
                          "(num_hidden_layers is there); fix config.json",
                          m->path, c->architecture);
    if (!flat && strcmp(c->model_type, w->text_model_type)) {
        char types[256];
        kvcal_arch_wrapper_text_types(c->architecture, types, sizeof types);
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: config.json: %s's text_config.model_type is '%s'; kvcal "
                          "runs its language model when it is %s",
                          m->path, c->architecture, c->model_type, types);
    }
    kvcal_model_config *tc = malloc(sizeof *tc);
    if (!tc)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", m->path);
    *tc = *c;
    snprintf(tc->architecture, sizeof tc->architecture, "%s", w->text_architecture);
    kvcal_status st = describe_family(m, tc, w->family);
    free(tc);
    snprintf(m->desc.architecture, sizeof m->desc.architecture, "%s", c->architecture);
    return st;
}

/* Where the checkpoint keeps the language model (m->desc's lm_prefix and
 * head_prefix): a causal LM's under "model.", a multimodal wrapper's
 * (w) under "model.language_model." (saved by transformers 4.52 and later),
 * "language_model.model." (as Gemma 3, Mistral 3 and Kimi K2.5 were
 * released) or, for a wrapper released flat (Qwen2-VL, Qwen2.5-VL), "model.", told
 * apart by the embedding's name. */
static kvcal_status find_language_model(kvcal_model_t *m, const kvcal_arch_wrapper *w)
{
    static const char *const layouts[][2] = {{"model.language_model.", ""},
                                             {"language_model.model.", "language_model."},
                                             {"model.", ""}};
    kvcal_model_desc *d = &m->desc;
    snprintf(d->lm_prefix, sizeof d->lm_prefix, "model.");
    d->head_prefix[0] = '\0';
    const int tried = !w ? 0 : w->flat_model_type ? 3 : 2;
    for (int i = 0; i < tried; i++) {
        snprintf(d->lm_prefix, sizeof d->lm_prefix, "%s", layouts[i][0]);
        snprintf(d->head_prefix, sizeof d->head_prefix, "%s", layouts[i][1]);
        if (find_top(m, d->arch->embed))
            return KVCAL_OK;
    }
    if (w)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: the checkpoint holds neither "
                          "model.language_model.embed_tokens.weight nor "
                          "language_model.model.embed_tokens.weight%s: is it the whole "
                          "checkpoint of this %s?",
                          m->path,
                          w->flat_model_type ? " nor model.embed_tokens.weight" : "",
                          d->architecture);
    return KVCAL_OK;
}

/* An error when layer 0 of the checkpoint holds `suffix`. */
static kvcal_status refuse_present(const kvcal_model_t *m, const char *suffix)
{
    char name[256];
    kvcal_model_tensor_name(name, sizeof name, &m->desc, 0, suffix, 0);
    if (!kvcal_checkpoint_find(m->ck, name))
        return KVCAL_OK;
    return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                      "%s: tensor %s is in the checkpoint but %s with this config.json "
                      "has no such bias (mlp_bias is not supported); K/V computed "
                      "without it would be wrong",
                      m->path, name, m->desc.architecture);
}

/* The (rows, cols) of part p of a weight in model d (cols 1 for a vector). */
static void part_shape(const kvcal_model_desc *d, const kvcal_weight_part *p,
                       int64_t *rows, int64_t *cols)
{
    *rows = kvcal_model_dim(d, p->rows);
    *cols = p->cols == KVCAL_DIM_NONE ? 1 : kvcal_model_dim(d, p->cols);
}

/* Part `part` of weight w of layer l held as MXFP4 (<name>_blocks): its
 * blocks and scales into *blocks and *scales, 1; else 0. */
static int mxfp4_part(const kvcal_model_t *m, const char *name,
                      const kvcal_weight_part *p, const kvcal_tensor_info **blocks,
                      const kvcal_tensor_info **scales)
{
    char b[300], sc[300];
    if (!(p->layout & KVCAL_PART_MXFP4) || kvcal_checkpoint_find(m->ck, name))
        return 0;
    snprintf(b, sizeof b, "%s_blocks", name);
    snprintf(sc, sizeof sc, "%s_scales", name);
    *blocks = kvcal_checkpoint_find(m->ck, b);
    *scales = kvcal_checkpoint_find(m->ck, sc);
    return *blocks != NULL;
}

/* Checks part `part` of weight w in layer l (copy e of a weight with a
 * tensor per expert): its tensor's (or MXFP4 blocks' and scales') presence,
 * dtype and shape; *t the tensor (the blocks). */
static kvcal_status check_part(const kvcal_model_t *m, int l, kvcal_weight w, int part,
                               int e, const kvcal_tensor_info **t)
{
    const kvcal_model_desc *d = &m->desc;
    const kvcal_weight_spec *sp = &d->arch->weights[w];
    const kvcal_weight_part *p = &sp->parts[part];
    char name[256], extra[300];
    int64_t rows, cols, want[4];
    int n = 0;
    kvcal_model_tensor_name(name, sizeof name, d, l, p->name, e);
    part_shape(d, p, &rows, &cols);
    if (sp->per_expert == KVCAL_EXPERTS_STACKED)
        want[n++] = d->num_experts;
    const kvcal_tensor_info *blocks, *scales;
    if (mxfp4_part(m, name, p, &blocks, &scales)) {
        if (cols % KVCAL_MXFP4_BLOCK)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: %s_blocks holds MXFP4 rows of %lld values, not a "
                              "multiple of %d; config.json does not match the checkpoint",
                              m->path, name, (long long)cols, KVCAL_MXFP4_BLOCK);
        want[n] = rows, want[n + 1] = cols / KVCAL_MXFP4_BLOCK, want[n + 2] = 16;
        snprintf(extra, sizeof extra, "%s_scales", name);
        kvcal_status st = check_shape(m, extra, want, n + 2, 1, 0, &scales);
        snprintf(extra, sizeof extra, "%s_blocks", name);
        return st ? st : check_shape(m, extra, want, n + 3, 1, 0, t);
    }
    const int transposed =
        (p->layout & KVCAL_PART_TRANSPOSED) && p->cols != KVCAL_DIM_NONE;
    const int64_t stored = kvcal_model_part_stored_rows(p->layout, rows);
    want[n++] = transposed ? cols : stored;
    if (p->layout & KVCAL_PART_CONV1D)
        want[n++] = 1;
    if (p->cols != KVCAL_DIM_NONE)
        want[n++] = transposed ? stored : cols;
    return check_shape(m, name, want, n, 0, d->fp8[w].w != KVCAL_FP8W_NONE, t);
}

/* Where part `part` of copy `copy` of weight w of layer l lies (checked
 * when the model was opened). */
static kvcal_tensor_view part_view(const kvcal_model_t *m, int l, kvcal_weight w,
                                   int part, int copy)
{
    const kvcal_model_desc *d = &m->desc;
    const kvcal_weight_spec *sp = &d->arch->weights[w];
    const kvcal_weight_part *p = &sp->parts[part];
    char name[256];
    kvcal_tensor_view v;
    memset(&v, 0, sizeof v);
    kvcal_model_tensor_name(name, sizeof name, d, l, p->name, copy);
    part_shape(d, p, &v.rows, &v.cols);
    v.numel = v.rows * v.cols;
    /* values of the copies before this one in a tensor of every expert */
    const int64_t skip = sp->per_expert == KVCAL_EXPERTS_STACKED ? copy * v.numel : 0;
    const kvcal_tensor_info *t, *scales;
    if (mxfp4_part(m, name, p, &t, &scales)) {
        v.data = (const uint8_t *)t->data + skip / 2;
        v.scales = (const uint8_t *)scales->data + skip / KVCAL_MXFP4_BLOCK;
        v.dtype = KVCAL_DTYPE_U8;
        v.layout = KVCAL_PART_MXFP4 | (p->layout & KVCAL_PART_INTERLEAVED);
        return v;
    }
    t = kvcal_checkpoint_find(m->ck, name);
    v.data = (const unsigned char *)t->data + (size_t)skip * kvcal_dtype_size(t->dtype);
    v.dtype = t->dtype;
    v.layout = p->layout &
               (KVCAL_PART_TRANSPOSED | KVCAL_PART_INTERLEAVED | KVCAL_PART_HEAD_FIRST |
                KVCAL_PART_HEAD_SECOND | KVCAL_PART_GDN_GROUPED);
    kvcal_model_part_groups(d, p->layout, &v);
    return v;
}

/* n values of dtype from value `first` of data into out. */
static kvcal_status plain_to_f32(const void *data, kvcal_dtype dtype, int64_t first,
                                 int64_t n, float *out)
{
    kvcal_tensor_info t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.ndim = 1;
    t.shape[0] = t.numel = n;
    t.nbytes = (size_t)n * kvcal_dtype_size(dtype);
    t.data = (const unsigned char *)data + (size_t)first * kvcal_dtype_size(dtype);
    return kvcal_tensor_to_f32(&t, out);
}

/* Row r, columns c .. c + m - 1 of the (rows, cols) matrix a transposed
 * view holds as (cols, rows): a column of the tensor, its values gathered
 * a block at a time, then converted. */
static kvcal_status column_to_f32(const kvcal_tensor_view *v, int64_t r, int64_t c,
                                  int64_t m, float *out)
{
    enum { BLOCK = 1024 };
    const size_t size = kvcal_dtype_size(v->dtype);
    unsigned char buf[BLOCK * 8];
    kvcal_status st = KVCAL_OK;
    for (int64_t k0 = 0; !st && k0 < m; k0 += BLOCK) {
        const int64_t b = m - k0 < BLOCK ? m - k0 : BLOCK;
        for (int64_t k = 0; k < b; k++)
            memcpy(buf + k * size,
                   (const unsigned char *)v->data +
                       (size_t)((c + k0 + k) * v->rows + r) * size,
                   size);
        st = plain_to_f32(buf, v->dtype, 0, b, out + k0);
    }
    return st;
}

kvcal_status kvcal_tensor_view_to_f32(const kvcal_tensor_view *v, int64_t first,
                                      int64_t n, float *out)
{
    const unsigned layout = v->layout;
    if (!layout)
        return plain_to_f32(v->data, v->dtype, first, n, out);
    kvcal_status st = KVCAL_OK;
    const int64_t half = v->rows / 2;
    while (!st && n > 0) { /* a run of one row at a time */
        const int64_t r = first / v->cols, c = first % v->cols;
        const int64_t m = n < v->cols - c ? n : v->cols - c;
        const int64_t sr = v->groups ? kvcal_tensor_view_row(v, r)
                           : !(layout & KVCAL_PART_INTERLEAVED) ? r
                           : r < half                           ? 2 * r
                                                                : 2 * (r - half) + 1;
        if (layout & KVCAL_PART_MXFP4)
            kvcal_mxfp4_to_f32(v->data, v->scales, sr * v->cols + c, m, out);
        else if (layout & KVCAL_PART_TRANSPOSED)
            st = column_to_f32(v, sr, c, m, out);
        else
            st = plain_to_f32(v->data, v->dtype, sr * v->cols + c, m, out);
        first += m, n -= m, out += m;
    }
    return st;
}

/* Whether a part of the family's weights may be stored as MXFP4. */
static int reads_mxfp4(const kvcal_arch *a)
{
    for (int w = 0; w < KVCAL_W_COUNT; w++)
        for (int i = 0; i < KVCAL_WEIGHT_PARTS_MAX && a->weights[w].parts[i].name; i++)
            if (a->weights[w].parts[i].layout & KVCAL_PART_MXFP4)
                return 1;
    return 0;
}

/* A family that reads float weights alone (kvcal_arch's
 * float_weights_only) and a checkpoint holding an FP8 tensor: refused,
 * naming it (a quantization config that quantizes no weight, a KV-cache
 * scheme alone, is fine). */
static kvcal_status refuse_fp8_weights(const kvcal_model_t *m,
                                       const kvcal_model_config *c)
{
    for (int i = 0; m->desc.arch->float_weights_only && i < kvcal_checkpoint_count(m->ck);
         i++) {
        const kvcal_tensor_info *t = kvcal_checkpoint_at(m->ck, i);
        if (t->dtype == KVCAL_DTYPE_F8_E4M3)
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: %s with FP8 weights (%s is F8_E4M3%s%s) is not supported "
                "yet; kvcal reads its bf16 checkpoint%s",
                m->path, m->desc.architecture, t->name,
                c->quant_method[0] ? ", quant_method " : "", c->quant_method,
                m->desc.arch->named_experts
                    ? " and its FP8 ones with a tensor per expert (llm-compressor's)"
                    : "");
    }
    return KVCAL_OK;
}

/* The family's layout of a tensor per expert (kvcal_arch's named_experts)
 * where the checkpoint holds expert 0's first tensor in the first MoE
 * layer. */
static void choose_expert_layout(kvcal_model_t *m)
{
    kvcal_model_desc *d = &m->desc;
    const kvcal_arch *named = d->arch->named_experts;
    int l = 0;
    while (l < d->num_layers &&
           !kvcal_model_layer_has_weight(d, l, KVCAL_W_EXPERT_GATE_UP))
        l++;
    if (!named || l == d->num_layers)
        return;
    char name[256];
    const kvcal_arch *stacked = d->arch;
    d->arch = named;
    kvcal_model_tensor_name(name, sizeof name, d, l,
                            named->weights[KVCAL_W_EXPERT_GATE_UP].parts[0].name, 0);
    if (!kvcal_checkpoint_find(m->ck, name))
        d->arch = stacked;
}

static kvcal_status open_hf(kvcal_model_t *m, const char *dir)
{
    kvcal_model_config c;
    kvcal_status st = kvcal_model_config_load(dir, &c);
    if (st)
        return st;
    if ((st = describe_hf(m, &c)))
        return st;
    /* MXFP4 checkpoints: the family's own parts (gpt-oss's experts) read
     * them; no FP8 weight to look for (the FP8 reader refuses mxfp4) */
    const int mxfp4 = !strcmp(c.quant_method, "mxfp4") && reads_mxfp4(m->desc.arch);
    /* an FP8 checkpoint of a family without them is named as such before
       its language model is looked for; one with a layout of a tensor per
       expert (which may read FP8) once that layout is chosen */
    if ((st = kvcal_checkpoint_open(m->path, &m->ck)) ||
        (!m->desc.arch->named_experts && (st = refuse_fp8_weights(m, &c))) ||
        (st = find_language_model(m,
                                  kvcal_arch_wrapper_find(c.architecture, c.model_type))))
        return st;
    choose_expert_layout(m);
    if ((st = refuse_fp8_weights(m, &c)) ||
        (!mxfp4 && (st = kvcal_model_fp8_open(m->ck, dir, m->path, &m->desc, &m->fp8))))
        return st;
    const kvcal_model_desc *d = &m->desc;
    const kvcal_arch *a = d->arch;
    const kvcal_tensor_info *t;
    for (int l = 0; l < d->num_layers; l++)
        for (int w = 0; w < KVCAL_W_COUNT; w++) {
            const kvcal_weight_part *p = a->weights[w].parts;
            /* a tensor per copy, or one of every expert */
            const int tensors = a->weights[w].per_expert == KVCAL_EXPERTS_STACKED
                                    ? 1
                                    : kvcal_model_weight_copies(d, w);
            for (int e = 0; kvcal_model_layer_has_weight(d, l, w) && e < tensors; e++)
                for (int i = 0; i < KVCAL_WEIGHT_PARTS_MAX && p[i].name; i++) {
                    if ((st = check_part(m, l, w, i, e, &t)))
                        return st;
                    /* k_proj's dtype, the fused qkv_proj's, or MLA's
                       kv_a_proj_with_mqa's, in the first layer that has it
                       (a hybrid model's first attention layer) */
                    if (!m->desc.weight_dtype[0] &&
                        ((w == KVCAL_W_QKV && (i == 1 || !p[1].name)) ||
                         w == KVCAL_W_KV_A))
                        snprintf(m->desc.weight_dtype, sizeof m->desc.weight_dtype, "%s",
                                 kvcal_dtype_name(t->dtype));
                }
        }
    /* biases the config does not declare, and tensors the family does not
     * implement: K/V computed without them would be wrong */
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        const kvcal_when when = a->weights[w].when;
        if ((when != KVCAL_WHEN_QKV_BIAS && when != KVCAL_WHEN_O_BIAS) ||
            kvcal_model_has_weight(d, w))
            continue;
        const kvcal_weight_part *p = a->weights[w].parts;
        for (int i = 0; i < KVCAL_WEIGHT_PARTS_MAX && p[i].name; i++)
            if ((st = refuse_present(m, p[i].name)))
                return st;
    }
    for (const char *const *r = a->refused; r && *r; r++)
        if ((st = refuse_present(m, *r)))
            return st;
    const int64_t D = d->hidden_size;
    if ((st = check_top(m, a->embed, d->vocab_size, D)) ||
        (st = check_top(m, a->final_norm, D, 0)))
        return st;
    if (!d->tied_embeddings && (st = check_top(m, a->lm_head, d->vocab_size, D)))
        return st;
    return KVCAL_OK;
}

// --- llama2.c checkpoints ---------------------------------------------------

static kvcal_status open_llama2c(kvcal_model_t *m)
{
    kvcal_status st = kvcal_llama2c_open(m->path, &m->l2c);
    if (st)
        return st;
    const kvcal_llama2c_config *c = kvcal_llama2c_config_get(m->l2c);
    kvcal_model_desc *d = &m->desc;
    d->arch = kvcal_arch_find("LlamaForCausalLM");
    snprintf(d->architecture, sizeof d->architecture, "LlamaForCausalLM");
    snprintf(d->model_type, sizeof d->model_type, "llama");
    snprintf(d->source, sizeof d->source, "llama2c");
    snprintf(d->weight_dtype, sizeof d->weight_dtype, "F32");
    d->num_layers = c->n_layers;
    d->hidden_size = c->dim;
    d->intermediate_size = c->hidden_dim;
    d->num_heads = c->n_heads;
    d->num_kv_heads = c->n_kv_heads;
    d->head_dim = c->dim / c->n_heads;
    d->vocab_size = c->vocab_size;
    d->max_seq_len = c->seq_len;
    d->norm_eps = (float)KVCAL_LLAMA2C_NORM_EPS;
    d->rot_dim = d->head_dim - d->head_dim % 2;
    d->rope_interleaved = 1;
    d->rope_attention_factor = 1.0f;
    d->tied_embeddings = c->shared_classifier;
    if (d->rot_dim < 2)
        return kvcal_fail(KVCAL_ERR_FORMAT, "%s: head size %d is too small for RoPE",
                          m->path, d->head_dim);
    m->inv_freq = malloc(sizeof(float) * (size_t)(d->rot_dim / 2));
    if (!m->inv_freq)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", m->path);
    rope_default(m->inv_freq, d->rot_dim, KVCAL_LLAMA2C_ROPE_THETA);
    d->inv_freq = m->inv_freq;
    if (!(m->layer_window = calloc((size_t)d->num_layers, sizeof(int))))
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", m->path);
    d->layer_window = m->layer_window;
    d->attn_scale = 1.0f / sqrtf((float)d->head_dim);
    d->embed_scale = 1.0f;
    d->residual_scale = d->logit_divisor = 1.0f;
    return KVCAL_OK;
}

// --- public -------------------------------------------------------------

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

kvcal_status kvcal_model_open(const char *path, kvcal_model_t **out)
{
    *out = NULL;
    kvcal_status st;
    struct stat sb;
    kvcal_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    snprintf(m->path, sizeof m->path, "%s", path);
    if (stat(path, &sb) != 0) {
        st =
            kvcal_fail(KVCAL_ERR_IO,
                       "%s: no such model (give a checkpoint directory with config.json, "
                       "or a llama2.c .bin file)",
                       path);
        goto fail;
    }
    if (!S_ISDIR(sb.st_mode) && (st = kvcal_file_check_input(path, "model", 0)))
        goto fail;
    if (is_dir(path)) {
        st = open_hf(m, path);
    } else if (kvcal_path_has_suffix(path, ".safetensors")) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        st = open_hf(m, dir);
    } else if (kvcal_llama2c_probe(path)) {
        st = open_llama2c(m);
    } else {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: not a model: expected a checkpoint directory (config.json + "
                        "safetensors), a .safetensors file or a llama2.c .bin checkpoint",
                        path);
    }
    if (st)
        goto fail;
    size_t floats = 0;
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        long long rows, cols;
        kvcal_model_weight_shape(&m->desc, w, &rows, &cols);
        floats += (size_t)rows * (size_t)(cols ? cols : 1);
    }
    size_t fp8_floats = 0;
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        const int copies = kvcal_model_weight_copies(&m->desc, w);
        const size_t n =
            copies ? (size_t)(kvcal_model_fp8_scales(&m->desc, w) / copies) : 0;
        fp8_floats = n > fp8_floats ? n : fp8_floats;
    }
    if (fp8_floats && !(m->fp8_scratch = malloc(sizeof(float) * fp8_floats))) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (floats && !(m->layer_buf = malloc(sizeof(float) * floats))) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory for one layer (%zu MB fp32)",
                        path, floats * sizeof(float) >> 20);
        goto fail;
    }
    *out = m;
    return KVCAL_OK;
fail:
    kvcal_model_close(m);
    return st;
}

void kvcal_model_close(kvcal_model_t *m)
{
    if (!m)
        return;
    kvcal_model_fp8_close(m->fp8);
    free(m->fp8_scratch);
    kvcal_checkpoint_close(m->ck);
    kvcal_llama2c_close(m->l2c);
    free(m->inv_freq);
    free(m->inv_freq_sliding);
    free(m->layer_window);
    free(m->layer_dense);
    free(m->layer_linear);
    free(m->layer_nope);
    free(m->layer_buf);
    free(m->head_buf);
    free(m);
}

const kvcal_model_desc *kvcal_model_describe(const kvcal_model_t *m)
{
    return &m->desc;
}

const kvcal_llama2c_config *kvcal_model_llama2c_config(const kvcal_model_t *m)
{
    return m->l2c ? kvcal_llama2c_config_get(m->l2c) : NULL;
}

void kvcal_model_identity_get(const kvcal_model_t *m, kvcal_model_identity *id)
{
    memset(id, 0, sizeof *id);
    snprintf(id->architecture, sizeof id->architecture, "%s", m->desc.architecture);
    snprintf(id->model_type, sizeof id->model_type, "%s", m->desc.model_type);
    id->num_layers = m->desc.num_layers;
    id->num_attention_heads = m->desc.num_heads;
    id->num_kv_heads = m->desc.num_kv_heads;
    id->head_dim = m->desc.head_dim;
}

/* Copies n floats to *p and advances it. */
static void take(float **p, const float *src, int64_t n)
{
    memcpy(*p, src, sizeof(float) * (size_t)n);
    *p += n;
}

/* A llama2.c layer, copied into layer_buf as the Llama family's logical
 * weights (llama2.c's w1 is the gate, w3 the up projection). */
static void load_layer_llama2c(const kvcal_model_t *m, int l, kvcal_layer_weights *w)
{
    const kvcal_llama2c_weights *s = kvcal_llama2c_weights_get(m->l2c);
    const kvcal_model_desc *d = &m->desc;
    int64_t D = d->hidden_size, F = d->intermediate_size;
    int64_t KV = (int64_t)d->num_kv_heads * d->head_dim;
    float *p = m->layer_buf;
    w->w[KVCAL_W_ATTN_NORM] = p;
    take(&p, s->rms_att + l * D, D);
    w->w[KVCAL_W_QKV] = p;
    take(&p, s->wq + l * D * D, D * D);
    take(&p, s->wk + l * KV * D, KV * D);
    take(&p, s->wv + l * KV * D, KV * D);
    w->w[KVCAL_W_O] = p;
    take(&p, s->wo + l * D * D, D * D);
    w->w[KVCAL_W_FFN_NORM] = p;
    take(&p, s->rms_ffn + l * D, D);
    w->w[KVCAL_W_GATE_UP] = p;
    take(&p, s->w1 + l * F * D, F * D);
    take(&p, s->w3 + l * F * D, F * D);
    w->w[KVCAL_W_DOWN] = p;
    take(&p, s->w2 + l * D * F, D * F);
}

kvcal_status kvcal_model_load_layer(kvcal_model_t *m, int layer, kvcal_layer_weights *w)
{
    memset(w, 0, sizeof *w);
    if (layer < 0 || layer >= m->desc.num_layers)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: layer %d out of range [0, %d)",
                          m->path, layer, m->desc.num_layers);
    if (m->l2c) {
        load_layer_llama2c(m, layer, w);
        return KVCAL_OK;
    }
    float *p = m->layer_buf;
    kvcal_tensor_view part[KVCAL_WEIGHT_PARTS_MAX];
    for (int i = 0; i < KVCAL_W_COUNT; i++) {
        if (!kvcal_model_layer_has_weight(&m->desc, layer, i))
            continue;
        w->w[i] = p;
        if (m->desc.fp8[i].w != KVCAL_FP8W_NONE) {
            long long rows, cols;
            kvcal_model_weight_shape(&m->desc, i, &rows, &cols);
            kvcal_status st = kvcal_model_fp8_dequantize(
                m->fp8, m->ck, &m->desc, layer, i, p, m->fp8_scratch, &w->input_scale[i]);
            if (st)
                return st;
            p += rows * cols;
            continue;
        }
        for (int e = 0; e < kvcal_model_weight_copies(&m->desc, i); e++) {
            int n = 0;
            kvcal_status st = kvcal_model_weight_parts(m, layer, i, e, part, &n);
            for (int j = 0; !st && j < n; j++) {
                if ((st = kvcal_tensor_view_to_f32(&part[j], 0, part[j].numel, p)))
                    return kvcal_fail_context(st, "%s: layer %d weight %d: ", m->path,
                                              layer, i);
                for (int64_t k = 0; m->desc.arch->weights[i].norm && k < part[j].numel;
                     k++)
                    p[k] += m->desc.norm_offset; /* (1 + w) in fp32, as Gemma's norm */
                p += part[j].numel;
            }
            if (st)
                return st;
        }
    }
    return KVCAL_OK;
}

kvcal_status kvcal_model_embed(const kvcal_model_t *m, const int32_t *ids, int64_t n,
                               float *out)
{
    const kvcal_model_desc *d = &m->desc;
    int64_t D = d->hidden_size;
    const kvcal_tensor_info *t = m->ck ? find_top(m, m->desc.arch->embed) : NULL;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= d->vocab_size)
            return kvcal_fail(
                KVCAL_ERR_INVALID_ARG,
                "token id %d at position %lld is outside the model's vocabulary "
                "[0, %d): wrong tokenizer for %s?",
                ids[i], (long long)i, d->vocab_size, m->path);
        if (m->l2c) {
            const float *e = kvcal_llama2c_weights_get(m->l2c)->token_embedding;
            memcpy(out + i * D, e + ids[i] * D, sizeof(float) * (size_t)D);
            continue;
        }
        kvcal_tensor_info row = *t;
        size_t row_bytes = (size_t)D * kvcal_dtype_size(t->dtype);
        row.ndim = 1;
        row.shape[0] = D;
        row.numel = D;
        row.nbytes = row_bytes;
        row.data = (const char *)t->data + (size_t)ids[i] * row_bytes;
        kvcal_status st = kvcal_tensor_to_f32(&row, out + i * D);
        if (st)
            return kvcal_fail_context(st, "%s: embedding row %d: ", m->path, ids[i]);
    }
    return KVCAL_OK;
}

kvcal_status kvcal_model_load_head(kvcal_model_t *m, const float **final_norm,
                                   const float **lm_head)
{
    const kvcal_model_desc *d = &m->desc;
    if (!m->final_norm && m->l2c) {
        const kvcal_llama2c_weights *s = kvcal_llama2c_weights_get(m->l2c);
        m->final_norm = s->rms_final;
        m->lm_head = s->wcls;
    } else if (!m->final_norm) {
        size_t D = (size_t)d->hidden_size, V = (size_t)d->vocab_size;
        m->head_buf = malloc(sizeof(float) * (D + V * D));
        if (!m->head_buf)
            return kvcal_fail(KVCAL_ERR_NOMEM,
                              "%s: out of memory for the classifier "
                              "(%zu MB fp32)",
                              m->path, V * D * sizeof(float) >> 20);
        const char *cls = d->tied_embeddings ? d->arch->embed : d->arch->lm_head;
        kvcal_status st =
            kvcal_tensor_to_f32(find_top(m, d->arch->final_norm), m->head_buf);
        if (!st)
            st = kvcal_tensor_to_f32(find_top(m, cls), m->head_buf + D);
        if (st) {
            free(m->head_buf);
            m->head_buf = NULL;
            return kvcal_fail_context(st, "%s: classifier: ", m->path);
        }
        for (size_t i = 0; i < D; i++)
            m->head_buf[i] += d->norm_offset;
        m->final_norm = m->head_buf;
        m->lm_head = m->head_buf + D;
    }
    *final_norm = m->final_norm;
    *lm_head = m->lm_head;
    return KVCAL_OK;
}

// --- views of the checkpoint's tensors --------------------------------------------

static kvcal_tensor_view f32_view(const float *p, int64_t n)
{
    return (kvcal_tensor_view){
        .data = p, .dtype = KVCAL_DTYPE_F32, .numel = n, .rows = n, .cols = 1};
}

static kvcal_tensor_view tensor_view(const kvcal_tensor_info *t)
{
    return (kvcal_tensor_view){.data = t->data,
                               .dtype = t->dtype,
                               .numel = t->numel,
                               .rows = t->numel,
                               .cols = 1};
}

/* The llama2.c parts of w (the layout load_layer_llama2c copies). */
static int llama2c_parts(const kvcal_model_t *m, int l, kvcal_weight w,
                         kvcal_tensor_view *p)
{
    const kvcal_llama2c_weights *s = kvcal_llama2c_weights_get(m->l2c);
    const kvcal_model_desc *d = &m->desc;
    const int64_t D = d->hidden_size, F = d->intermediate_size;
    const int64_t KV = (int64_t)d->num_kv_heads * d->head_dim;
    switch (w) {
    case KVCAL_W_ATTN_NORM:
        p[0] = f32_view(s->rms_att + l * D, D);
        return 1;
    case KVCAL_W_QKV:
        p[0] = f32_view(s->wq + l * D * D, D * D);
        p[1] = f32_view(s->wk + l * KV * D, KV * D);
        p[2] = f32_view(s->wv + l * KV * D, KV * D);
        return 3;
    case KVCAL_W_O:
        p[0] = f32_view(s->wo + l * D * D, D * D);
        return 1;
    case KVCAL_W_FFN_NORM:
        p[0] = f32_view(s->rms_ffn + l * D, D);
        return 1;
    case KVCAL_W_GATE_UP:
        p[0] = f32_view(s->w1 + l * F * D, F * D);
        p[1] = f32_view(s->w3 + l * F * D, F * D);
        return 2;
    case KVCAL_W_DOWN:
        p[0] = f32_view(s->w2 + l * D * F, D * F);
        return 1;
    default:
        return 0;
    }
}

kvcal_status kvcal_model_weight_parts(const kvcal_model_t *m, int layer, kvcal_weight w,
                                      int copy,
                                      kvcal_tensor_view parts[KVCAL_WEIGHT_PARTS_MAX],
                                      int *n)
{
    *n = 0;
    if (layer < 0 || layer >= m->desc.num_layers || w < 0 || w >= KVCAL_W_COUNT ||
        copy < 0 || (copy > 0 && copy >= kvcal_model_weight_copies(&m->desc, w)))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: layer %d weight %d copy %d out of range", m->path, layer,
                          (int)w, copy);
    if (!kvcal_model_layer_has_weight(&m->desc, layer, w))
        return KVCAL_OK;
    if (m->l2c) {
        *n = llama2c_parts(m, layer, w, parts);
        return KVCAL_OK;
    }
    const kvcal_weight_part *part = m->desc.arch->weights[w].parts;
    for (int j = 0; j < KVCAL_WEIGHT_PARTS_MAX && part[j].name; j++)
        parts[(*n)++] = part_view(m, layer, w, j, copy);
    return KVCAL_OK;
}

kvcal_status kvcal_model_fp8_weight(const kvcal_model_t *m, int layer, kvcal_weight w,
                                    int expert, kvcal_fp8_parts *p, float *scales)
{
    if (!m->fp8 || layer < 0 || layer >= m->desc.num_layers || w < 0 ||
        w >= KVCAL_W_COUNT || !kvcal_model_layer_has_weight(&m->desc, layer, w) ||
        expert < 0 || expert >= kvcal_model_weight_copies(&m->desc, w))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: layer %d weight %d copy %d is not FP8", m->path, layer,
                          (int)w, expert);
    return kvcal_model_fp8_get(m->fp8, m->ck, &m->desc, layer, w, expert, p, scales);
}

void kvcal_model_head_views(const kvcal_model_t *m, kvcal_tensor_view *embed,
                            kvcal_tensor_view *final_norm, kvcal_tensor_view *lm_head)
{
    const kvcal_model_desc *d = &m->desc;
    const int64_t D = d->hidden_size, V = d->vocab_size;
    if (m->l2c) {
        const kvcal_llama2c_weights *s = kvcal_llama2c_weights_get(m->l2c);
        *embed = f32_view(s->token_embedding, V * D);
        *final_norm = f32_view(s->rms_final, D);
        *lm_head = f32_view(s->wcls, V * D);
        return;
    }
    const kvcal_arch *a = d->arch;
    *embed = tensor_view(find_top(m, a->embed));
    *final_norm = tensor_view(find_top(m, a->final_norm));
    *lm_head = d->tied_embeddings ? *embed : tensor_view(find_top(m, a->lm_head));
}
