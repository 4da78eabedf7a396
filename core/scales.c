/* core/scales.c: create / destroy / access the in-memory scale set. */
#include "scales.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scale_rule.h"
#include "status.h"

kvcal_status kvcal_scales_create(int num_layers, int num_kv_heads, kvcal_scales_t **out)
{
    if (!out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_scales_create: out is NULL");
    *out = NULL;
    if (num_layers < 1 || num_layers > 65536 || num_kv_heads < 1 || num_kv_heads > 65536)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_scales_create: %d layers x %d kv heads is out of "
                          "range [1, 65536]",
                          num_layers, num_kv_heads);
    size_t per_head = (size_t)num_layers * (size_t)num_kv_heads;
    if (per_head > ((size_t)1 << 24))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "kvcal_scales_create: %d layers x %d kv heads is more than 2^24 "
            "(layer, kv head) pairs; no model has that many (check the "
            "sizes the file states)",
            num_layers, num_kv_heads);
    size_t n = 4 * per_head + 5 * (size_t)num_layers;
    kvcal_scales_t *s = calloc(1, sizeof *s);
    float *slab = calloc(n, sizeof(float));
    if (!s || !slab) {
        free(s);
        free(slab);
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_scales_create: out of memory");
    }
    s->num_layers = num_layers;
    s->num_kv_heads = num_kv_heads;
    s->granularity = KVCAL_GRANULARITY_HEAD;
    s->slab = slab;
    s->k_head = slab;
    s->v_head = s->k_head + per_head;
    s->k_absmax = s->v_head + per_head;
    s->v_absmax = s->k_absmax + per_head;
    s->k_clip = s->v_absmax + per_head;
    s->v_clip = s->k_clip + num_layers;
    s->q_scale = s->v_clip + num_layers;
    s->mla_latent_absmax = s->q_scale + num_layers;
    s->mla_rope_absmax = s->mla_latent_absmax + num_layers;
    strcpy(s->provenance.observer_params, "{}");
    strcpy(s->provenance.tool_version, KVCAL_VERSION_STRING);
    s->model.num_layers = num_layers;
    s->model.num_kv_heads = num_kv_heads;
    *out = s;
    return KVCAL_OK;
}

void kvcal_scales_destroy(kvcal_scales_t *s)
{
    if (!s)
        return;
    free(s->q_head);
    free(s->k_offset);
    free(s->uncached);
    free(s->slab);
    free(s);
}

kvcal_status kvcal_scales_set_offsets(kvcal_scales_t *s, int on)
{
    if (!on) {
        free(s->k_offset);
        s->k_offset = s->v_offset = NULL;
        if (s->format == KVCAL_KV_FORMAT_INT8_ASYM)
            s->format = KVCAL_KV_FORMAT_INT8;
        return KVCAL_OK;
    }
    const size_t n = (size_t)s->num_layers * (size_t)s->num_kv_heads;
    if (!s->k_offset && !(s->k_offset = calloc(2 * n, sizeof *s->k_offset)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_scales_set_offsets: out of memory");
    s->v_offset = s->k_offset + n;
    s->format = KVCAL_KV_FORMAT_INT8_ASYM;
    return KVCAL_OK;
}

float kvcal_scales_head_range_absmax(const kvcal_scales_t *s, int layer, int head, int kv)
{
    const int i = kvcal_scales_index(s, layer, head);
    const float scale = (kv ? s->v_head : s->k_head)[i];
    if (s->format != KVCAL_KV_FORMAT_INT8_ASYM || !s->k_offset)
        return (float)((double)scale * kvcal_scales_format_qmax(s->format));
    const double o = (kv ? s->v_offset : s->k_offset)[i];
    const double below = (o + 128.0) * scale, above = (127.0 - o) * scale;
    return (float)(below > above ? below : above);
}

kvcal_status kvcal_scales_set_uncached(kvcal_scales_t *s, int layer)
{
    if (layer < 0 || layer >= s->num_layers)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_scales_set_uncached: layer %d of %d", layer,
                          s->num_layers);
    if (!s->uncached && !(s->uncached = calloc((size_t)s->num_layers, 1)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_scales_set_uncached: out of memory");
    s->uncached[layer] = 1;
    return KVCAL_OK;
}

int kvcal_scales_uncached_layers(const kvcal_scales_t *s)
{
    int n = 0;
    for (int l = 0; s->uncached && l < s->num_layers; l++)
        n += s->uncached[l];
    return n;
}

kvcal_status kvcal_scales_set_q_heads(kvcal_scales_t *s, int num_q_heads)
{
    if (num_q_heads < 0 || num_q_heads > 65536 || (num_q_heads % s->num_kv_heads))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "kvcal_scales_set_q_heads: %d query heads: must be in [0, 65536] "
            "and a multiple of the %d kv heads",
            num_q_heads, s->num_kv_heads);
    float *q = NULL;
    if (num_q_heads &&
        !(q = calloc((size_t)s->num_layers * (size_t)num_q_heads, sizeof *q)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_scales_set_q_heads: out of memory");
    free(s->q_head);
    s->q_head = q;
    s->num_q_heads = num_q_heads;
    return KVCAL_OK;
}

int kvcal_scales_num_layers(const kvcal_scales_t *s)
{
    return s ? s->num_layers : 0;
}
int kvcal_scales_num_kv_heads(const kvcal_scales_t *s)
{
    return s ? s->num_kv_heads : 0;
}

kvcal_granularity kvcal_scales_granularity(const kvcal_scales_t *s)
{
    return s ? s->granularity : KVCAL_GRANULARITY_TENSOR;
}

static kvcal_status check_index(const kvcal_scales_t *s, int layer, int head)
{
    if (!s)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "scales is NULL");
    if (layer < 0 || layer >= s->num_layers || head < 0 || head >= s->num_kv_heads)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "layer %d head %d out of range (%d layers, %d kv heads)", layer,
                          head, s->num_layers, s->num_kv_heads);
    return KVCAL_OK;
}

kvcal_status kvcal_scales_get_head(const kvcal_scales_t *s, int layer, int head,
                                   float *k_scale, float *v_scale)
{
    kvcal_status st = check_index(s, layer, head);
    if (st)
        return st;
    int i = kvcal_scales_index(s, layer, head);
    if (k_scale)
        *k_scale = s->k_head[i];
    if (v_scale)
        *v_scale = s->v_head[i];
    return KVCAL_OK;
}

kvcal_status kvcal_scales_get_tensor(const kvcal_scales_t *s, int layer, float *k_scale,
                                     float *v_scale)
{
    kvcal_status st = check_index(s, layer, 0);
    if (st)
        return st;
    float k = 0.0f, v = 0.0f;
    for (int h = 0; h < s->num_kv_heads; h++) {
        int i = kvcal_scales_index(s, layer, h);
        k = s->k_head[i] > k ? s->k_head[i] : k;
        v = s->v_head[i] > v ? s->v_head[i] : v;
    }
    if (k_scale)
        *k_scale = k;
    if (v_scale)
        *v_scale = v;
    return KVCAL_OK;
}

// --- filling ------------------------------------------------------------------

static kvcal_status check_value(const char *fn, const char *what, int layer, int head,
                                float v)
{
    if (kvcal_scale_is_valid(v))
        return KVCAL_OK;
    if (head < 0)
        return kvcal_fail(KVCAL_ERR_NONFINITE,
                          "%s: layer %d: %s %g is not a finite number > 0; the set is "
                          "unchanged (pass the scale the engine quantizes with)",
                          fn, layer, what, (double)v);
    return kvcal_fail(KVCAL_ERR_NONFINITE,
                      "%s: layer %d kv head %d: %s %g is not a finite number > 0; the "
                      "set is unchanged (pass the scale the engine quantizes with)",
                      fn, layer, head, what, (double)v);
}

kvcal_status kvcal_scales_set_head(kvcal_scales_t *s, int layer, int head, float k_scale,
                                   float v_scale)
{
    kvcal_status st = check_index(s, layer, head);
    if (!st)
        st = check_value("kvcal_scales_set_head", "K scale", layer, head, k_scale);
    if (!st)
        st = check_value("kvcal_scales_set_head", "V scale", layer, head, v_scale);
    if (st)
        return st;
    int i = kvcal_scales_index(s, layer, head);
    s->k_head[i] = k_scale;
    s->v_head[i] = v_scale;
    return KVCAL_OK;
}

kvcal_status kvcal_scales_set_layer(kvcal_scales_t *s, int layer, float k_scale,
                                    float v_scale)
{
    kvcal_status st = check_index(s, layer, 0);
    if (!st)
        st = check_value("kvcal_scales_set_layer", "K scale", layer, -1, k_scale);
    if (!st)
        st = check_value("kvcal_scales_set_layer", "V scale", layer, -1, v_scale);
    if (st)
        return st;
    for (int h = 0; h < s->num_kv_heads; h++) {
        int i = kvcal_scales_index(s, layer, h);
        s->k_head[i] = k_scale;
        s->v_head[i] = v_scale;
    }
    return KVCAL_OK;
}

kvcal_status kvcal_scales_set_layer_heads(kvcal_scales_t *s, int layer,
                                          const float *k_scale, const float *v_scale)
{
    kvcal_status st = check_index(s, layer, 0);
    if (st)
        return st;
    for (int h = 0; h < s->num_kv_heads; h++) {
        if (k_scale && (st = check_value("kvcal_scales_set_layer_heads", "K scale", layer,
                                         h, k_scale[h])))
            return st;
        if (v_scale && (st = check_value("kvcal_scales_set_layer_heads", "V scale", layer,
                                         h, v_scale[h])))
            return st;
    }
    for (int h = 0; h < s->num_kv_heads; h++) {
        int i = kvcal_scales_index(s, layer, h);
        if (k_scale)
            s->k_head[i] = k_scale[h];
        if (v_scale)
            s->v_head[i] = v_scale[h];
    }
    return KVCAL_OK;
}

kvcal_status kvcal_scales_set_q(kvcal_scales_t *s, int layer, float q_scale)
{
    kvcal_status st = check_index(s, layer, 0);
    if (!st)
        st = check_value("kvcal_scales_set_q", "q scale", layer, -1, q_scale);
    if (st)
        return st;
    s->q_scale[layer] = q_scale;
    s->has_q = 1;
    return KVCAL_OK;
}

kvcal_status kvcal_scales_get_q(const kvcal_scales_t *s, int layer, float *q_scale)
{
    kvcal_status st = check_index(s, layer, 0);
    if (st)
        return st;
    if (q_scale)
        *q_scale = s->q_scale[layer];
    return KVCAL_OK;
}

kvcal_status kvcal_scales_set_granularity(kvcal_scales_t *s,
                                          kvcal_granularity granularity)
{
    if (!s)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_scales_set_granularity: scales is NULL");
    if (granularity != KVCAL_GRANULARITY_TENSOR && granularity != KVCAL_GRANULARITY_HEAD)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_scales_set_granularity: granularity %d is neither "
                          "KVCAL_GRANULARITY_TENSOR nor KVCAL_GRANULARITY_HEAD",
                          (int)granularity);
    s->granularity = granularity;
    return KVCAL_OK;
}

kvcal_status kvcal_scales_set_model(kvcal_scales_t *s, const char *architecture,
                                    const char *model_type, int num_attention_heads,
                                    int head_dim)
{
    if (!s)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_scales_set_model: scales is NULL");
    const char *names[2] = {architecture, model_type};
    const char *what[2] = {"architecture", "model_type"};
    for (int i = 0; i < 2; i++)
        if (names[i] && strlen(names[i]) >= KVCAL_NAME_MAX)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "kvcal_scales_set_model: %s \"%.40s...\" is longer than %d "
                              "bytes",
                              what[i], names[i], KVCAL_NAME_MAX - 1);
    if (num_attention_heads < 0 || head_dim < 0 ||
        (num_attention_heads > 0 && num_attention_heads % s->num_kv_heads))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "kvcal_scales_set_model: %d attention heads, head_dim %d: need "
            ">= 0 (0 keeps the value) and attention heads a multiple of the "
            "set's %d kv heads",
            num_attention_heads, head_dim, s->num_kv_heads);
    if (architecture)
        snprintf(s->model.architecture, sizeof s->model.architecture, "%s", architecture);
    if (model_type)
        snprintf(s->model.model_type, sizeof s->model.model_type, "%s", model_type);
    if (num_attention_heads)
        s->model.num_attention_heads = num_attention_heads;
    if (head_dim)
        s->model.head_dim = head_dim;
    return KVCAL_OK;
}

float kvcal_scales_format_qmax(kvcal_kv_format format)
{
    switch (format) {
    case KVCAL_KV_FORMAT_FP8_E4M3:
        return KVCAL_FP8_E4M3_MAX;
    case KVCAL_KV_FORMAT_INT8:
        return 127.0f;
    case KVCAL_KV_FORMAT_NVFP4:
        return 6.0f * KVCAL_FP8_E4M3_MAX;
    case KVCAL_KV_FORMAT_INT8_ASYM:
        return KVCAL_INT8_ASYM_LEVELS;
    default:
        return 0.0f;
    }
}

kvcal_status kvcal_scales_rescale(kvcal_scales_t *s, kvcal_kv_format format)
{
    const float qmax = kvcal_scales_format_qmax(format);
    if (!s || qmax == 0.0f || format == KVCAL_KV_FORMAT_INT8_ASYM ||
        s->format != KVCAL_KV_FORMAT_FP8_E4M3)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "kvcal_scales_rescale: format %d: int8 and NVFP4 scales are "
                          "rescaled from e4m3's; int8 with offsets comes from the signed "
                          "range",
                          (int)format);
    const double f = (double)KVCAL_FP8_E4M3_MAX / qmax;
    const size_t n = (size_t)s->num_layers * s->num_kv_heads;
    for (size_t i = 0; i < n; i++) {
        s->k_head[i] = (float)(s->k_head[i] * f);
        s->v_head[i] = (float)(s->v_head[i] * f);
    }
    s->has_clip = 0;
    s->format = format;
    return KVCAL_OK;
}

kvcal_status kvcal_scales_check_finite(const kvcal_scales_t *s, const char *what)
{
    for (int l = 0; l < s->num_layers; l++)
        for (int h = 0; h < s->num_kv_heads; h++) {
            int i = kvcal_scales_index(s, l, h);
            if (!kvcal_scale_is_valid(s->k_head[i]))
                return kvcal_fail(KVCAL_ERR_NONFINITE,
                                  "%s: layer %d kv head %d: K scale %g is not a finite "
                                  "positive number; nothing was written",
                                  what, l, h, (double)s->k_head[i]);
            if (!kvcal_scale_is_valid(s->v_head[i]))
                return kvcal_fail(KVCAL_ERR_NONFINITE,
                                  "%s: layer %d kv head %d: V scale %g is not a finite "
                                  "positive number; nothing was written",
                                  what, l, h, (double)s->v_head[i]);
            for (int kv = 0; s->k_offset && kv < 2; kv++) {
                const float o = (kv ? s->v_offset : s->k_offset)[i];
                if (!kvcal_int8_offset_is_valid(o))
                    return kvcal_fail(KVCAL_ERR_NONFINITE,
                                      "%s: layer %d kv head %d: %s offset %g is not an "
                                      "integer in [-128, 127]; nothing was written",
                                      what, l, h, kv ? "V" : "K", (double)o);
            }
        }
    return KVCAL_OK;
}
