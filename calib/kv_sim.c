/* calib/kv_sim.c: the simulated FP8 KV cache (see kv_sim.h). */
#include "calib/kv_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

struct kvcal_kv_sim {
    kvcal_backend *be;
    kvcal_kv_sim_mode mode;
    int layers, kv_heads;
    float *scales[2];            /* (layers, kv_heads) static scales, backend memory */
    kvcal_kv_scaler_t **scalers; /* (layers) first-batch scalers */
    unsigned char *mask;         /* (layers) simulated or exact; NULL: all simulated */
};

void kvcal_kv_sim_static_scales(const kvcal_scales_t *scales, kvcal_kv_scales_kind kind,
                                int layers, int kv_heads, float *k_scale, float *v_scale)
{
    for (int l = 0; l < layers; l++) {
        float k = 1.0f, v = 1.0f;
        if (kind == KVCAL_KV_SCALES_TENSOR)
            kvcal_scales_get_tensor(scales, l, &k, &v);
        for (int h = 0; h < kv_heads; h++) {
            float *ks = &k_scale[l * kv_heads + h], *vs = &v_scale[l * kv_heads + h];
            *ks = k, *vs = v;
            if (kind == KVCAL_KV_SCALES_HEAD)
                kvcal_scales_get_head(scales, l, h, ks, vs);
        }
    }
}

kvcal_status kvcal_kv_sim_create(kvcal_backend *be, const kvcal_kv_sim_config *cfg,
                                 kvcal_kv_sim_t **out)
{
    *out = NULL;
    const kvcal_model_desc *d = be->desc;
    const int L = d->num_layers, H = d->num_kv_heads, stat = cfg->mode == KVCAL_KV_SIM_STATIC;
    if (cfg->mode < KVCAL_KV_SIM_STATIC || cfg->mode > KVCAL_KV_SIM_FIRST_BATCH)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "eval: unknown cache mode %d",
                          (int)cfg->mode);
    if (stat ? !(cfg->k_scale && cfg->v_scale) : cfg->k_scale || cfg->v_scale)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "eval: mode %d, k_scale %s, v_scale %s: the static mode "
                          "takes both, the other modes neither",
                          (int)cfg->mode, cfg->k_scale ? "set" : "NULL",
                          cfg->v_scale ? "set" : "NULL");
    for (int i = 0; stat && i < L * H; i++)
        if (!(isfinite(cfg->k_scale[i]) && cfg->k_scale[i] > 0.0f &&
              isfinite(cfg->v_scale[i]) && cfg->v_scale[i] > 0.0f))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "eval: layer %d kv head %d: scales K %g, V %g: static "
                              "scales must be finite and > 0",
                              i / H, i % H, (double)cfg->k_scale[i],
                              (double)cfg->v_scale[i]);
    kvcal_kv_sim_t *s = calloc(1, sizeof *s);
    if (!s)
        return kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of host memory");
    s->be = be, s->mode = cfg->mode, s->layers = L, s->kv_heads = H;
    const size_t LH = (size_t)L * H;
    float *space = NULL;
    kvcal_kv_io io;
    kvcal_status st = be->ops->sim_prepare(be, stat ? 2 * LH : 0, &space, &io);
    if (st)
        goto fail;
    if (stat) {
        s->scales[0] = space, s->scales[1] = space + LH;
        if ((st = be->ops->sim_upload(be, s->scales[0], cfg->k_scale, LH)) ||
            (st = be->ops->sim_upload(be, s->scales[1], cfg->v_scale, LH)))
            goto fail;
    }
    if (cfg->layers) {
        if (!(s->mask = malloc((size_t)L))) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of host memory");
            goto fail;
        }
        memcpy(s->mask, cfg->layers, (size_t)L);
    }
    if (cfg->mode == KVCAL_KV_SIM_FIRST_BATCH) {
        if (!(s->scalers = calloc((size_t)L, sizeof *s->scalers))) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of host memory");
            goto fail;
        }
        for (int l = 0; l < L; l++)
            if ((st = kvcal_kv_scaler_create(H, KVCAL_SCALER_FIRST_BATCH, 0.0f, io.device,
                                             &s->scalers[l])))
                goto fail;
    }
    *out = s;
    return KVCAL_OK;
fail:
    kvcal_kv_sim_destroy(s);
    return st;
}

void kvcal_kv_sim_destroy(kvcal_kv_sim_t *s)
{
    if (!s)
        return;
    if (s->scalers)
        for (int l = 0; l < s->layers; l++)
            kvcal_kv_scaler_destroy(s->scalers[l]);
    free(s->scalers);
    free(s->mask);
    s->be->ops->sim_release(s->be);
    free(s);
}

/* K and V of the batch into the scratch cache under the mode's scales. */
static kvcal_status quantize(kvcal_kv_sim_t *s, int l, const kvcal_kv_io *io)
{
    const kvcal_kv_batch *b = &io->batch;
    const kvcal_kv_cache *c = &io->cache;
    switch (s->mode) {
    case KVCAL_KV_SIM_STATIC: {
        const float *ks = s->scales[0] + (size_t)l * s->kv_heads;
        const float *vs = s->scales[1] + (size_t)l * s->kv_heads;
        return io->device ? kvcal_kv_quantize_static_launch(b, c, KVCAL_GRANULARITY_HEAD,
                                                            ks, vs, io->stream)
                          : kvcal_kv_quantize_static_ref(b, c, KVCAL_GRANULARITY_HEAD,
                                                         ks, vs);
    }
    case KVCAL_KV_SIM_DYNAMIC:
        return io->device ? kvcal_kv_quantize_dynamic_launch(b, c, io->stream)
                          : kvcal_kv_quantize_dynamic_ref(b, c);
    default:
        return io->device ? kvcal_kv_scaler_quantize_launch(s->scalers[l], b, c, io->stream)
                          : kvcal_kv_scaler_quantize_ref(s->scalers[l], b, c);
    }
}

kvcal_status kvcal_kv_sim_cache_point(kvcal_kv_sim_t *s, int layer, const kvcal_op *op)
{
    kvcal_backend *be = s->be;
    kvcal_kv_io io;
    if (s->mask && !s->mask[layer])
        return KVCAL_OK;
    kvcal_status st = be->ops->sim_attend_exact(be, op);
    if (!st)
        st = be->ops->sim_view(be, &io);
    if (!st)
        st = quantize(s, layer, &io);
    if (!st)
        st = be->ops->sim_roundtrip(be, layer);
    return st ? kvcal_fail_context(st, "layer %d: ", layer) : KVCAL_OK;
}

kvcal_status kvcal_kv_sim_after_attention(kvcal_kv_sim_t *s, int layer,
                                          const kvcal_op *op)
{
    if (s->mask && !s->mask[layer])
        return KVCAL_OK;
    return s->be->ops->sim_attention_error(s->be, op, layer);
}

kvcal_status kvcal_kv_sim_collect(kvcal_kv_sim_t *s, kvcal_eval_layer_sums *sums)
{
    return s->be->ops->sim_collect(s->be, sums);
}
